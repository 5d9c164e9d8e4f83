//! SIGTERM drains the server without losing an admission: the real binary, loopback only.
//!
//! A replica that is being replaced (rolling update, node drain) gets SIGTERM while the
//! Service may still send it new connections (endpoint removal takes a while to reach every
//! kube-proxy) and while the apiserver holds kept-alive connections to it. For
//! `--shutdown-delay` after the signal it must go on answering, with `/readyz` failing, and
//! close each connection after its answer in a way the client cannot race: `Connection:
//! close` on HTTP/1.1, a graceful GOAWAY on HTTP/2. Then it closes the listener and lets
//! in-flight admissions finish. Checked here, step by step, with kept-alive HTTP/1.1 and
//! HTTP/2 clients, a new connection during the delay and an admission whose body straddles
//! the moment the listener closes; and that a second signal skips the rest of the delay.
//!
//! The same on a real kube-apiserver: tests/e2e (`drain_e2e.py`) and tests/node (a rolling
//! update and a drain of the Deployment).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::child::{Server, free_port};
use crate::server_support::fixture;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

const UID: &str = "705ab4f5-6393-11e8-b7cc-42010a800002";

type H1Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;
type H2Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

fn review() -> Bytes {
    Bytes::from(fixture("pod-create.json"))
}

fn request(port: u16, body: Bytes) -> http::Request<Full<Bytes>> {
    http::Request::post(format!("https://localhost:{port}/mutate-pod"))
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("request")
}

/// A kept-alive HTTP/1.1 connection, and the task driving it (it ends when the connection
/// closes).
async fn h1(server: &Server) -> (H1Sender, JoinHandle<()>) {
    let tls = server
        .tls(&server.connector(b"http/1.1"))
        .await
        .expect("tls");
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .expect("h1 handshake");
    (
        sender,
        tokio::spawn(async move {
            let _ = conn.await;
        }),
    )
}

async fn h2(server: &Server) -> (H2Sender, JoinHandle<()>) {
    let tls = server.tls(&server.connector(b"h2")).await.expect("tls");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .expect("h2 handshake");
    (
        sender,
        tokio::spawn(async move {
            let _ = conn.await;
        }),
    )
}

/// An admission's answer: checked to be the mutated AdmissionReview; returns the value of its
/// `Connection` header.
fn check_answer(resp: http::Response<Bytes>) -> Option<String> {
    assert_eq!(resp.status(), 200);
    let answer: serde_json::Value = serde_json::from_slice(resp.body()).expect("JSON answer");
    assert_eq!(answer["response"]["uid"], UID, "{answer}");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(
        answer["response"]["patch"].is_string(),
        "not mutated: {answer}"
    );
    resp.headers()
        .get(http::header::CONNECTION)
        .map(|v| v.to_str().expect("ascii").to_owned())
}

async fn collect(resp: http::Response<hyper::body::Incoming>) -> http::Response<Bytes> {
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    http::Response::from_parts(parts, body)
}

async fn h1_admit(sender: &mut H1Sender, port: u16) -> http::Response<Bytes> {
    sender.ready().await.expect("h1 ready");
    collect(
        sender
            .send_request(request(port, review()))
            .await
            .expect("h1 answer"),
    )
    .await
}

async fn h2_admit(sender: &mut H2Sender, port: u16) -> http::Response<Bytes> {
    collect(
        sender
            .send_request(request(port, review()))
            .await
            .expect("h2 answer"),
    )
    .await
}

/// Status and body of a GET on the plain-HTTP probe listener.
fn probe(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("probe listener");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .expect("get");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn signal(server: &Server, name: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{name}"), server.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{name} failed");
}

/// Waits for the connection's task to end (the server closed it), at most `within`.
async fn closed_within(conn: JoinHandle<()>, within: Duration, what: &str) {
    tokio::time::timeout(within, conn)
        .await
        .unwrap_or_else(|_| panic!("{what}: the server kept the connection open"))
        .expect("connection task");
}

/// Sends an admission by hand over TLS: the head and half the body now, the rest when `rest`
/// resolves; returns the raw answer.
async fn straddling_admission(
    addr: SocketAddr,
    connector: TlsConnector,
    rest: impl Future<Output = ()>,
) -> String {
    let mut tls = crate::child::tls_connect(addr, &connector)
        .await
        .expect("tls");
    let body = review();
    let head = format!(
        "POST /mutate-pod HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    let half = body.len() / 2;
    tls.write_all(head.as_bytes()).await.expect("head");
    tls.write_all(&body[..half]).await.expect("first half");
    tls.flush().await.expect("flush");
    rest.await;
    tls.write_all(&body[half..]).await.expect("second half");
    tls.flush().await.expect("flush");
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_every_admission_then_closes() {
    koord_runtime::install_crypto_provider();
    const DELAY: Duration = Duration::from_secs(3);
    let metrics_port = free_port();
    let server = Server::start(&[
        "--metrics-listen",
        &format!("127.0.0.1:{metrics_port}"),
        "--shutdown-delay",
        "3s",
        "--shutdown-grace",
        "10s",
        // The straddling admission's body completes after the delay; the deadline (which
        // covers reading the body) must not answer it first.
        "--request-deadline",
        "8s",
    ]);
    let port = server.addr.port();

    // Before: kept-alive connections as the apiserver holds them, answered without a close.
    let (mut kept_h1, kept_h1_conn) = h1(&server).await;
    let (mut kept_h2, kept_h2_conn) = h2(&server).await;
    assert_eq!(check_answer(h1_admit(&mut kept_h1, port).await), None);
    check_answer(h2_admit(&mut kept_h2, port).await);
    assert_eq!(probe(metrics_port, "/readyz").0, 200);

    // An admission whose body is still on its way when the listener closes. The server reads
    // the rest after the delay: in flight, it is answered.
    let (listener_closed_tx, listener_closed_rx) = tokio::sync::oneshot::channel::<()>();
    let straddling = {
        let (addr, connector) = (server.addr, server.connector(b"http/1.1"));
        let started = tokio::sync::oneshot::channel::<()>();
        let (started_tx, started_rx) = started;
        let task = tokio::spawn(async move {
            straddling_admission(addr, connector, async move {
                let _ = started_tx.send(());
                let _ = listener_closed_rx.await;
            })
            .await
        });
        started_rx.await.expect("head sent");
        task
    };

    // Taken before the signal is sent, so the delay measured from it is never short.
    let signalled = Instant::now();
    signal(&server, "TERM");

    // Not ready at once, still alive and answering.
    let readyz = loop {
        let r = probe(metrics_port, "/readyz");
        if r.0 != 200 || signalled.elapsed() > Duration::from_secs(1) {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(readyz, (503, "shutting down".to_owned()));
    assert_eq!(probe(metrics_port, "/healthz").0, 200);

    // Kept-alive HTTP/1.1: answered, told to close, and closed.
    let connection = check_answer(h1_admit(&mut kept_h1, port).await);
    assert_eq!(connection.as_deref(), Some("close"));
    closed_within(kept_h1_conn, Duration::from_secs(1), "kept-alive HTTP/1.1").await;

    // Kept-alive HTTP/2: answered, then a GOAWAY ends the connection.
    check_answer(h2_admit(&mut kept_h2, port).await);
    closed_within(kept_h2_conn, Duration::from_secs(1), "kept-alive HTTP/2").await;

    // A new connection during the delay (the Service still sends some here): served.
    let (mut fresh, fresh_conn) = h1(&server).await;
    assert_eq!(
        check_answer(h1_admit(&mut fresh, port).await).as_deref(),
        Some("close")
    );
    closed_within(fresh_conn, Duration::from_secs(1), "new HTTP/1.1").await;
    let (mut fresh_h2, fresh_h2_conn) = h2(&server).await;
    check_answer(h2_admit(&mut fresh_h2, port).await);
    closed_within(fresh_h2_conn, Duration::from_secs(1), "new HTTP/2").await;
    assert!(
        signalled.elapsed() < DELAY,
        "the checks above took longer than the delay ({:?}): the machine is too slow for it",
        signalled.elapsed()
    );

    // After the delay the listener closes.
    let closed_after = loop {
        if tokio::net::TcpStream::connect(server.addr).await.is_err() {
            break signalled.elapsed();
        }
        assert!(
            signalled.elapsed() < DELAY + Duration::from_secs(5),
            "the listener is still open {:?} after SIGTERM",
            signalled.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        closed_after >= DELAY,
        "the listener closed {closed_after:?} after SIGTERM, before the {DELAY:?} delay"
    );

    // The admission in flight is answered, and then the process exits by itself.
    let _ = listener_closed_tx.send(());
    let answer = tokio::time::timeout(Duration::from_secs(5), straddling)
        .await
        .expect("the in-flight admission was answered")
        .expect("task");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    check_answer(http::Response::new(Bytes::from(body.to_owned())));
    let mut server = server;
    let exited = Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            exited.elapsed() < Duration::from_secs(5),
            "the server did not exit after its last admission"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "exit status {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_skips_the_rest_of_the_delay() {
    koord_runtime::install_crypto_provider();
    let metrics_port = free_port();
    let mut server = Server::start(&[
        "--metrics-listen",
        &format!("127.0.0.1:{metrics_port}"),
        "--shutdown-delay",
        "60s",
    ]);
    // Serving (the probes listener is up once the server runs and catches signals).
    assert_eq!(probe(metrics_port, "/readyz").0, 200);
    signal(&server, "TERM");
    let signalled = Instant::now();
    while probe(metrics_port, "/readyz").0 == 200 {
        assert!(signalled.elapsed() < Duration::from_secs(2), "still ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Still serving during the delay.
    let (mut kept, _conn) = h1(&server).await;
    check_answer(h1_admit(&mut kept, server.addr.port()).await);
    signal(&server, "INT");
    let again = Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            again.elapsed() < Duration::from_secs(5),
            "the second signal did not end the 60 s delay"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "exit status {status}");
}
