//! `/metrics`, `/healthz`, `/readyz` over plain HTTP/1.1.
//!
//! Deliberately tiny (one request per connection, GET only, 4 KiB request cap): Prometheus and
//! kubelet probes are the only clients, and a full HTTP stack would cost a DaemonSet on every
//! node memory for nothing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::metrics::Metrics;

const MAX_REQUEST: usize = 4096;

/// The response to a request line `GET <path> HTTP/1.x`: (status line, content type, body).
pub fn route(
    request: &str,
    metrics: &Metrics,
    ready: bool,
) -> (&'static str, &'static str, String) {
    let mut parts = request.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4", metrics.render()),
        ("GET", "/healthz") => ("200 OK", "text/plain", "ok\n".to_owned()),
        ("GET", "/readyz") if ready => ("200 OK", "text/plain", "ok\n".to_owned()),
        ("GET", "/readyz") => (
            "503 Service Unavailable",
            "text/plain",
            "pod cache not synced\n".to_owned(),
        ),
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_owned()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_owned(),
        ),
    }
}

async fn serve_one(
    mut stream: TcpStream,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    let line = text.lines().next().unwrap_or("");
    let (status, ctype, body) = route(line, &metrics, ready.load(Ordering::Relaxed));
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// Binds `addr` and serves until the task is dropped.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, ready: Arc<AtomicBool>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (m, r) = (metrics.clone(), ready.clone());
        tokio::spawn(async move {
            // A slow or stuck client must not hold a task forever.
            let _ = tokio::time::timeout(Duration::from_secs(10), serve_one(stream, m, r)).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let m = Metrics::new().expect("metrics");
        m.pods_managed.set(2);
        let (s, _, body) = route("GET /metrics HTTP/1.1", &m, false);
        assert_eq!(s, "200 OK");
        assert!(body.contains("koord_applier_pods_managed 2"));
        assert_eq!(
            route("GET /readyz HTTP/1.1", &m, false).0,
            "503 Service Unavailable"
        );
        assert_eq!(route("GET /readyz HTTP/1.1", &m, true).0, "200 OK");
        assert_eq!(route("GET /healthz?x=1 HTTP/1.1", &m, false).0, "200 OK");
        assert_eq!(
            route("POST /metrics HTTP/1.1", &m, true).0,
            "405 Method Not Allowed"
        );
        assert_eq!(route("GET /nope HTTP/1.1", &m, true).0, "404 Not Found");
    }

    #[tokio::test]
    async fn serves_over_tcp() {
        let listener = bind("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let m = Arc::new(Metrics::new().expect("metrics"));
        m.pods_managed.set(7);
        tokio::spawn(serve(listener, m, Arc::new(AtomicBool::new(true))));
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("send");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
        assert!(out.contains("koord_applier_pods_managed 7"));
    }
}
