//! `/metrics`, `/healthz`, `/readyz` over plain HTTP/1.1 (hyper), one request per connection.
//!
//! The port is reachable from the pod network, so any pod may open connections to it; what one
//! connection may hold is bounded so that no client can starve the reconcile loop of file
//! descriptors, memory or CPU: a connection cap with eviction (the guard the webhook uses too,
//! `koord_runtime::connections`), a header-read timeout and a write timeout
//! ([`EndpointSettings`]), and an accept loop that pauses when `accept(2)` fails for lack of
//! resources ([`backoff`]).
//!
//! At the cap a newcomer takes the slot of the oldest connection whose request has not arrived
//! yet (silent, or still sending its head) of the source address holding the most such
//! connections, its own address's when that one holds as many as any: a client flooding from
//! one address (a pod) replaces its own connections, and the kubelet's probe or Prometheus,
//! from other addresses, is not closed while the applier is too starved of CPU to read its
//! request within the few milliseconds the flood leaves it. Where they share the flood's
//! address (a hostNetwork pod on the node's address, as the kubelet's probes), the newcomer
//! still gets in: it takes that address's oldest unfinished connection, and the flood would
//! have to open the whole cap's worth of connections within the time an honest request takes
//! (well under a millisecond here) to push it out. A connection whose request is being
//! answered keeps its slot; only when every slot is answering is the newcomer closed at once.
//! Why evict rather than refuse: refusing the newcomer lets any client that opens the cap's
//! worth of connections and sends nothing lock Prometheus and the kubelet's probes out until
//! the header-read timeout, and again as soon as it reconnects.
//!
//! One request per connection, as before: the clients are a scraper every 15-60 s and kubelet
//! probes (a new connection each); keep-alive would save them nothing measurable and let a
//! client hold a slot between requests.

pub mod backoff;
mod limits;
mod route;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use koord_runtime::connections::{Guard, Limits, Slot};
use koord_runtime::logging::LineBudget;
use tokio::net::{TcpListener, TcpStream};

use crate::metrics::Metrics;
pub use limits::{EndpointError, EndpointSettings, check_cap};
pub use route::route;

/// hyper's smallest allowed read buffer; a request head of the endpoint's clients is a few
/// hundred bytes, and a longer one is refused (431) instead of growing the buffer.
const MAX_HEAD_BYTES: usize = 8192;
/// Request headers parsed at most (Prometheus and the kubelet send fewer than 10).
const MAX_HEADERS: usize = 32;

/// How long a newcomer waits for the slot of the connection it evicted: that connection's task
/// only has to be scheduled once to drop it.
const SLOT_WAIT: Duration = Duration::from_millis(200);

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
    // No cap per address beyond the cap itself: the endpoint's clients are few.
    let guard = Guard::new(Limits {
        max: settings.max_connections,
        per_source: settings.max_connections,
        slot_wait: SLOT_WAIT,
        // An answer written within a second, or the client is not reading it.
        stalled_after: Duration::from_secs(1),
    });
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
                    // A flood of connections can make this fail again after every success.
                    static PAUSES: LineBudget = LineBudget::new("accept failures");
                    if PAUSES.allow() {
                        tracing::warn!(error = %e, pause_ms = p.as_millis(), "accept failed; pausing");
                    }
                    tokio::time::sleep(p).await;
                }
                continue;
            }
        };
        // In the accept loop itself: a flood waits in the kernel's backlog, where it costs
        // no descriptor, rather than in tasks of ours.
        let held = match guard.admit(peer.ip()).await {
            Ok(admitted) => {
                // Plain HTTP: nothing to set up, the request is up to the client from now.
                admitted.held.slot().set_up();
                admitted.held
            }
            Err(why) => {
                tracing::debug!(?why, "connection limit reached; closing a new connection");
                continue;
            }
        };
        let (http, metrics, ready) = (http.clone(), metrics.clone(), ready.clone());
        let lifetime = settings.lifetime();
        tokio::spawn(async move {
            let slot = held.slot().clone();
            let served = serve_connection(&http, stream, metrics, ready, slot.clone());
            // Whichever comes first; dropping the connection closes the socket, and then
            // `held` gives the slot back.
            tokio::select! {
                _ = served => {}
                () = slot.evicted() => tracing::debug!("closed for a new connection"),
                () = tokio::time::sleep(lifetime) => tracing::debug!("connection outlived its timeouts"),
            }
            drop(held);
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
    slot: Arc<Slot>,
) {
    // One request per connection: in flight from its head until the connection closes.
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        slot.request_started();
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

    /// A connection from 127.0.0.1 that sends half a head and holds it until the endpoint
    /// closes it, then, a second later (as `tests/attack/endpoint_abuse.rs`), does it again.
    async fn half_sent_heads(addr: SocketAddr, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::Relaxed) {
            if let Ok(mut s) = TcpStream::connect(addr).await
                && s.write_all(b"GET /metrics HTTP/1.1\r\nHost: app")
                    .await
                    .is_ok()
            {
                let mut b = [0u8; 64];
                let _ = s.read(&mut b).await;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flood_from_the_clients_own_address_does_not_lock_it_out() {
        // A hostNetwork pod on the node's address, the kubelet's probe from the same one: 40
        // half-sent heads against a cap of 8, each reopened a second after it is closed.
        let settings = EndpointSettings {
            max_connections: 8,
            ..EndpointSettings::default()
        };
        let addr = start(Arc::new(Metrics::new().expect("metrics")), settings).await;
        let stop = Arc::new(AtomicBool::new(false));
        let flood: Vec<_> = (0..40)
            .map(|_| tokio::spawn(half_sent_heads(addr, stop.clone())))
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        for _ in 0..20 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let out =
                tokio::time::timeout(std::time::Duration::from_secs(2), get(addr, "/healthz"))
                    .await
                    .expect("answered within 2 s");
            assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
        }
        stop.store(true, Ordering::Relaxed);
        for f in flood {
            f.abort();
        }
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
