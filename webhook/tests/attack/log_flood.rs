//! No client floods the webhook's log: the real binary at the default log level (`info`),
//! its stderr in a file, and a client that opens connection after connection whose TLS
//! ClientHello carries an IP address as its server name (SNI), as a client that connects
//! by address and names it anyway does. rustls warns about each such ClientHello
//! (`Illegal SNI extension: ignoring IP address presented as hostname`); before those lines
//! had a budget, each handshake wrote one: about 89,000 in a 20 s run of new connections.
//! Checked: the server answered the handshakes, the warning was written (the test does
//! provoke it) but at most its budget's worth of times, the whole log stays short, and the
//! lines not written are counted in `koord_webhook_log_lines_suppressed_total`.
//!
//! The ClientHello is rustls's own for the name `localhost`, with those nine bytes replaced by
//! `127.0.0.1` (as long: every length field stays right); the client sends it, reads the
//! server's first flight and closes, so each connection costs the server a full TLS 1.3
//! handshake's work and the client none. `LOG_FLOOD_HANDSHAKES` sets how many (1,000).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use koord_runtime::logging::LINES_PER_WINDOW;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::child::{Server, env_or, free_port, heavy, metric};

/// rustls's ClientHello to `server`, its server name `127.0.0.1`.
fn client_hello_naming_an_ip(server: &Server) -> Vec<u8> {
    let config = server.connector(b"http/1.1").config().clone();
    let name = ServerName::try_from("localhost").expect("name").to_owned();
    let mut client = rustls::ClientConnection::new(config, name).expect("client");
    let mut hello = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut hello).expect("ClientHello");
    }
    let at = hello
        .windows(9)
        .position(|w| w == b"localhost")
        .expect("the server name in the ClientHello");
    assert!(
        !hello[at + 1..].windows(9).any(|w| w == b"localhost"),
        "the name appears once"
    );
    hello[at..at + 9].copy_from_slice(b"127.0.0.1");
    hello
}

/// Sends `hello`, waits for the server's first bytes (its ServerHello) and closes: true when
/// they came.
async fn one_handshake(addr: std::net::SocketAddr, hello: &[u8]) -> bool {
    let attempt = async {
        let mut tcp = TcpStream::connect(addr).await.ok()?;
        tcp.write_all(hello).await.ok()?;
        let mut first = [0u8; 512];
        let n = tcp.read(&mut first).await.ok()?;
        // A TLS handshake record (22), not an alert (21).
        (n > 0 && first[0] == 22).then_some(())
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .ok()
        .flatten()
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_handshakes_naming_an_ip_writes_a_bounded_number_of_lines() {
    let _heavy = heavy().await;
    koord_runtime::install_crypto_provider();
    let handshakes: u64 = env_or("LOG_FLOOD_HANDSHAKES", 1000);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("koord-webhook.log");
    let metrics_port = free_port();
    let server = Server::start_logging(
        "info",
        Some(&log),
        &["--metrics-listen", &format!("127.0.0.1:{metrics_port}")],
    );
    let hello = Arc::new(client_hello_naming_an_ip(&server));

    let started = Instant::now();
    let answered = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let (hello, answered, next, addr) =
                (hello.clone(), answered.clone(), next.clone(), server.addr);
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < handshakes {
                    if one_handshake(addr, &hello).await {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.await.expect("client");
    }
    let took = started.elapsed();
    // Whatever the server still had to write about the last handshakes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let not_written = metric(metrics_port, "koord_webhook_log_lines_suppressed_total");
    drop(server);
    let text = std::fs::read_to_string(&log).expect("the server's log");
    let lines = text.lines().count();
    let sni_lines = text.lines().filter(|l| l.contains("Illegal SNI")).count();
    let answered = answered.load(Ordering::Relaxed);
    println!(
        "LOG_FLOOD handshakes={handshakes} answered={answered} in {:.1}s: log lines {lines}, \
         of them Illegal SNI {sni_lines}; not written {not_written}",
        took.as_secs_f64()
    );

    assert!(
        answered * 100 >= handshakes * 99,
        "{answered} of {handshakes} handshakes answered"
    );
    // The run straddles at most two of the budget's one-minute windows (it takes seconds).
    let budget = 2 * LINES_PER_WINDOW as usize;
    assert!(
        sni_lines >= 1,
        "the warning is written at the default level (this test provokes it):\n{text}"
    );
    assert!(
        sni_lines <= budget,
        "{sni_lines} Illegal SNI lines for {handshakes} handshakes, budget {budget}"
    );
    // The start-up lines, the budget's lines and what says some were not written.
    assert!(
        lines <= budget + 12,
        "{lines} log lines for {handshakes} handshakes:\n{text}"
    );
    assert!(
        not_written >= (answered as usize).saturating_sub(budget) as f64,
        "{not_written} lines counted as not written for {answered} handshakes"
    );
}
