//! `/metrics`, `/healthz`, `/readyz` over plain HTTP/1.1 (hyper), one request per connection.
//!
//! The port is reachable from the pod network, so any pod may open connections to it; what one
//! connection may hold is bounded so that no client can starve the reconcile loop of file
//! descriptors, memory or CPU: a connection cap with eviction ([`slots`]), a header-read
//! timeout and a write timeout ([`EndpointSettings`]), and an accept loop that pauses when
//! `accept(2)` fails for lack of resources ([`backoff`]).
//!
//! One request per connection, as before: the clients are a scraper every 15-60 s and kubelet
//! probes (a new connection each); keep-alive would save them nothing measurable and let a
//! client hold a slot between requests.

mod args;
pub mod backoff;
mod route;
pub mod slots;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};

use crate::metrics::Metrics;
pub use args::{EndpointArgs, EndpointError, EndpointSettings, check_cap};
pub use route::route;
use slots::{Conn, Slots};

/// hyper's smallest allowed read buffer; a request head of the endpoint's clients is a few
/// hundred bytes, and a longer one is refused (431) instead of growing the buffer.
const MAX_HEAD_BYTES: usize = 8192;
/// Request headers parsed at most (Prometheus and the kubelet send fewer than 10).
const MAX_HEADERS: usize = 32;

/// Connections the kernel completes and queues for `accept(2)` (capped by `net.core.somaxconn`,
/// 4096 by default since Linux 5.4). tokio's `bind` asks for 1024: a client connecting while a
/// flood of connections fills that queue has its handshake dropped and retries after a second
/// (measured: 1 of 100 normal requests under the 3,000-connection attack test). Go's servers
/// (the kubelet, Prometheus) listen with somaxconn too.
const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr`.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // As tokio's `bind`: a restarted applier may bind while the old socket is in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    settings: EndpointSettings,
) {
    let slots = Slots::new(settings.max_connections);
    let http = builder(&settings);
    let mut pause = None;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => {
                pause = None;
                accepted
            }
            Err(e) => {
                pause = backoff::after_error(pause, &e);
                if let Some(p) = pause {
                    tracing::warn!(error = %e, pause_ms = p.as_millis(), "accept failed; pausing");
                    tokio::time::sleep(p).await;
                }
                continue;
            }
        };
        // In the accept loop itself: a flood waits in the kernel's backlog, where it costs
        // no descriptor, rather than in tasks of ours.
        let (slot, conn) = match slots.take(peer.ip()).await {
            Ok(taken) => taken,
            Err(why) => {
                tracing::debug!(?why, "connection limit reached; closing a new connection");
                continue;
            }
        };
        let (http, metrics, ready) = (http.clone(), metrics.clone(), ready.clone());
        let lifetime = settings.lifetime();
        tokio::spawn(async move {
            let _slot = slot;
            let served = serve_connection(&http, stream, metrics, ready, conn.clone());
            // Whichever comes first; dropping the connection closes the socket.
            tokio::select! {
                _ = served => {}
                () = conn.evicted() => tracing::debug!("closed for a new connection"),
                () = tokio::time::sleep(lifetime) => tracing::debug!("connection outlived its timeouts"),
            }
        });
    }
}

fn builder(settings: &EndpointSettings) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .keep_alive(false)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS)
        // The wire format of the hand-written server this replaces: Content-Type,
        // Content-Length, Connection: close, and no Date.
        .title_case_headers(true)
        .auto_date_header(false);
    b
}

async fn serve_connection(
    http: &http1::Builder,
    stream: TcpStream,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    conn: Arc<Conn>,
) {
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        conn.start_answering();
        let answer = respond(&req, &metrics, ready.load(Ordering::Relaxed));
        std::future::ready(Ok::<_, Infallible>(answer))
    });
    if let Err(e) = http.serve_connection(TokioIo::new(stream), service).await {
        tracing::debug!(error = %e, "metrics connection");
    }
}

fn respond(req: &Request<Incoming>, metrics: &Metrics, ready: bool) -> Response<Full<Bytes>> {
    let (status, ctype, body) = route(req.method().as_str(), req.uri().path(), metrics, ready);
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let len = response_len(response.body());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

fn response_len(body: &Full<Bytes>) -> u64 {
    hyper::body::Body::size_hint(body)
        .exact()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    async fn start(m: Arc<Metrics>, settings: EndpointSettings) -> SocketAddr {
        let listener = bind("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(serve(
            listener,
            m,
            Arc::new(AtomicBool::new(true)),
            settings,
        ));
        addr
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .expect("send");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        out
    }

    #[tokio::test]
    async fn the_answer_is_the_wire_format_of_before() {
        let m = Arc::new(Metrics::new().expect("metrics"));
        m.pods_managed.set(7);
        let addr = start(m.clone(), EndpointSettings::default()).await;
        let body = m.render();
        assert!(body.contains("koord_applier_pods_managed 7"));
        let want = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        assert_eq!(get(addr, "/metrics").await, want);
        assert_eq!(
            get(addr, "/healthz?verbose").await,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"
        );
    }

    #[tokio::test]
    async fn a_silent_connection_is_closed_at_the_header_read_timeout() {
        let settings = EndpointSettings {
            header_read_timeout: std::time::Duration::from_secs(1),
            ..EndpointSettings::default()
        };
        let addr = start(Arc::new(Metrics::new().expect("metrics")), settings).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /metr").await.expect("half a head");
        let started = std::time::Instant::now();
        let mut out = Vec::new();
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut out))
            .await
            .expect("closed within 5 s");
        let took = started.elapsed();
        // Closed (EOF or reset), never answered.
        assert!(read.is_err() || !String::from_utf8_lossy(&out).contains("200 OK"));
        assert!(
            took >= std::time::Duration::from_millis(900)
                && took < std::time::Duration::from_secs(3),
            "closed after {took:?}"
        );
    }

    #[tokio::test]
    async fn at_the_cap_a_held_connection_makes_room_for_a_request() {
        let settings = EndpointSettings {
            max_connections: 4,
            ..EndpointSettings::default()
        };
        let addr = start(Arc::new(Metrics::new().expect("metrics")), settings).await;
        let mut held = Vec::new();
        for _ in 0..20 {
            held.push(TcpStream::connect(addr).await.expect("connect"));
        }
        let out = tokio::time::timeout(std::time::Duration::from_secs(2), get(addr, "/healthz"))
            .await
            .expect("answered within 2 s");
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
        // The oldest held connections were closed for the newer ones.
        let mut closed = 0;
        for s in &mut held {
            let mut b = [0u8; 1];
            if let Ok(Ok(0)) =
                tokio::time::timeout(std::time::Duration::from_millis(50), s.read(&mut b)).await
            {
                closed += 1;
            }
        }
        assert!(closed >= 16, "{closed} of 20 held connections closed");
    }
}
