//! Abuse does not starve admissions: the real binary, loopback only, bounded in time and count.
//!
//! One server process (a child, so its RSS is its own) takes, at the same time: TLS
//! connections from 127.0.0.2 that finish the handshake and then send nothing (more than the
//! connection cap: once it is full, each of the flood's newcomers takes the slot of the
//! flood's own oldest, and the oldest silent ones are closed to admit the other clients'
//! connections), connections
//! from 127.0.0.3 that send a request head one byte per second, and two clients posting
//! bodies at the size limit; meanwhile a normal client, connecting after the flood, sends
//! admissions over a kept-alive connection.
//! Checked: every normal admission is answered (allowed, its uid echoed) within the deadline,
//! the process's peak RSS stays under 64 MiB, no more connections than the cap are open, and
//! the silent and the slow connections are closed by the header-read timeout. Then,
//! on a server with a cap of 20: when every slot holds another address's answered connection
//! the connection beyond the cap is shed, and one is admitted again once a slot frees, while a
//! newcomer from the holding address takes the slot of its own connection idle the longest;
//! an idle kept-alive connection is closed after the idle timeout; a body announced above the
//! limit is refused before it is sent.
//!
//! `cargo test` runs a size that fits the usual 1,024 file descriptors (600 silent
//! connections against a cap of 256, 3 s header-read timeout, 4 s of admissions, ~15 s in
//! all). `webhook/benches/abuse.sh` runs the full size of the README's figures (5,000 silent
//! connections against the default cap of 1,024, release build, `ulimit -n` raised) through
//! the `ABUSE_*` variables below.

use crate::server_support;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::child::{
    Server, assert_not_starved, env_or, free_port, heavy, metric, open_files_limit, review_of_size,
    rss_of,
};
use rustls::pki_types::ServerName;
use server_support::{fixture, percentile};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

const RSS_LIMIT_KIB: u64 = 64 * 1024;
const BODY_LIMIT: usize = 3 * 1024 * 1024;

/// How hard the flood is: `ABUSE_IDLE` silent connections against a cap of
/// `ABUSE_MAX_CONNECTIONS`, `ABUSE_SLOW` one-byte-per-second heads, `ABUSE_SECONDS` of normal
/// admissions, `ABUSE_HEADER_TIMEOUT_SECS` for the server's header-read timeout.
struct Scale {
    idle: usize,
    max_connections: usize,
    slow: usize,
    seconds: u64,
    header_timeout_secs: u64,
}

impl Scale {
    fn from_env() -> Scale {
        Scale {
            idle: env_or("ABUSE_IDLE", 600),
            max_connections: env_or("ABUSE_MAX_CONNECTIONS", 256),
            slow: env_or("ABUSE_SLOW", 50),
            seconds: env_or("ABUSE_SECONDS", 4),
            header_timeout_secs: env_or("ABUSE_HEADER_TIMEOUT_SECS", 3),
        }
    }

    /// Descriptors this process needs: every client connection, plus some for the runtime.
    fn files_needed(&self) -> u64 {
        (self.idle + self.slow + 64) as u64
    }
}

fn post_head(addr: SocketAddr, length: usize) -> String {
    format!(
        "POST /mutate-pod HTTP/1.1\r\nhost: localhost:{}\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n",
        addr.port()
    )
}

/// A whole POST (head and body), to be sent in one write.
fn request_of(addr: SocketAddr, body: &[u8]) -> Vec<u8> {
    let mut request = post_head(addr, body.len()).into_bytes();
    request.extend_from_slice(body);
    request
}

/// Reads one HTTP/1.1 response (head + content-length body); `None` when the peer closed.
async fn read_response(stream: &mut TlsStream<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                let n = stream.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some((head, buf[end + 4..end + 4 + length].to_vec()));
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// True once the server has closed `stream` (EOF or an error), waiting at most `within`.
async fn closed_within(stream: &mut TlsStream<TcpStream>, within: Duration) -> bool {
    let mut byte = [0u8; 64];
    matches!(
        tokio::time::timeout(within, stream.read(&mut byte)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_slow_and_large_clients_do_not_starve_admissions() {
    let _heavy = heavy().await;
    let scale = Scale::from_env();
    let limit = open_files_limit();
    assert!(
        limit >= scale.files_needed(),
        "{} silent + {} slow connections need RLIMIT_NOFILE >= {}, have {limit}: raise `ulimit -n`",
        scale.idle,
        scale.slow,
        scale.files_needed()
    );
    koord_runtime::install_crypto_provider();
    let metrics_port = free_port();
    let cap = scale.max_connections;
    let server = Server::start(&[
        "--metrics-listen",
        &format!("127.0.0.1:{metrics_port}"),
        "--max-connections",
        &cap.to_string(),
        "--header-read-timeout",
        &format!("{}s", scale.header_timeout_secs),
    ]);
    let connector = server.connector(b"http/1.1");
    let (rss_idle_server, _) = server.rss_kib();

    // Silent connections from their own address: TLS handshake, then nothing.
    let (silent_from, slow_from) = (IpAddr::from([127, 0, 0, 2]), IpAddr::from([127, 0, 0, 3]));
    let opened = Instant::now();
    let mut idle = Vec::with_capacity(scale.idle);
    let mut pending = tokio::task::JoinSet::new();
    for _ in 0..scale.idle {
        let (s, c) = (server.addr, connector.clone());
        let name = ServerName::try_from("localhost").expect("name").to_owned();
        pending.spawn(async move {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(silent_from, 0))?;
            let tcp = socket.connect(s).await?;
            c.connect(name, tcp).await
        });
        while pending.len() >= 64 {
            if let Some(Ok(Ok(conn))) = pending.join_next().await {
                idle.push(conn);
            }
        }
    }
    while let Some(done) = pending.join_next().await {
        if let Ok(Ok(conn)) = done {
            idle.push(conn);
        }
    }
    let open_secs = opened.elapsed().as_secs_f64();
    let (rss_with_idle, _) = server.rss_kib();
    let open_now = metric(metrics_port, "koord_webhook_connections_open");
    let evicted = metric(metrics_port, "koord_webhook_connections_evicted_total");
    let shed = metric(metrics_port, "koord_webhook_connections_shed_total");
    assert!(
        open_now <= cap as f64,
        "{open_now} connections open, above the cap of {cap}"
    );
    assert!(
        evicted + shed >= scale.idle.saturating_sub(cap) as f64,
        "{evicted} silent connections evicted and {shed} shed for {} arrivals at a cap of {cap}",
        scale.idle
    );

    // Connections sending a request head one byte per second, from another address: they
    // take the slots of the oldest silent ones.
    let stop = Arc::new(AtomicBool::new(false));
    let mut slow = tokio::task::JoinSet::new();
    for _ in 0..scale.slow {
        let mut conn = server
            .tls_from(&connector, slow_from)
            .await
            .expect("slow connection");
        let head = post_head(server.addr, 100);
        slow.spawn(async move {
            let started = Instant::now();
            for byte in head.as_bytes() {
                if conn.write_all(&[*byte]).await.is_err() || conn.flush().await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            // Closed by the server: how long it lived.
            let _ = closed_within(&mut conn, Duration::from_secs(5)).await;
            started.elapsed()
        });
    }

    // Two clients posting bodies at the size limit, back to back.
    let large = Arc::new(request_of(server.addr, &review_of_size(BODY_LIMIT)));
    let mut large_posters = tokio::task::JoinSet::new();
    for _ in 0..2 {
        let (stop, request) = (stop.clone(), large.clone());
        let mut conn = server.tls(&connector).await.expect("large-body connection");
        large_posters.spawn(async move {
            let mut answered = 0u32;
            while !stop.load(Ordering::Relaxed) {
                if conn.write_all(&request).await.is_err() {
                    break;
                }
                match read_response(&mut conn).await {
                    Some((head, _)) if head.starts_with("HTTP/1.1 200") => answered += 1,
                    _ => break,
                }
            }
            answered
        });
    }

    // The normal client: admissions over one kept-alive connection, on a thread and runtime
    // of its own (the attackers' tasks must not delay the measuring client). Head and body go
    // in one write on a TCP_NODELAY socket, as the apiserver's Go client sends them.
    let request = request_of(server.addr, &fixture("pod-create.json"));
    let conn = server.tls(&connector).await.expect("client connection");
    let (pid, seconds) = (server.child.id(), scale.seconds);
    let normal = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let mut conn = conn;
            let mut latencies = Vec::new();
            let mut peak = 0;
            let until = Instant::now() + Duration::from_secs(seconds);
            while Instant::now() < until {
                let sent = Instant::now();
                conn.write_all(&request).await.expect("send request");
                let (status, body) = read_response(&mut conn).await.expect("a response");
                latencies.push(sent.elapsed());
                assert!(status.starts_with("HTTP/1.1 200"), "{status}");
                let answer: serde_json::Value = serde_json::from_slice(&body).expect("json");
                assert_eq!(
                    answer["response"]["uid"],
                    "705ab4f5-6393-11e8-b7cc-42010a800002"
                );
                assert_eq!(answer["response"]["allowed"], true);
                assert!(answer["response"]["patch"].is_string(), "mutated: {answer}");
                peak = peak.max(rss_of(pid).0);
            }
            (latencies, peak)
        })
    });
    let (mut latencies, peak_during) = tokio::task::spawn_blocking(move || normal.join())
        .await
        .expect("join")
        .expect("normal client");
    stop.store(true, Ordering::Relaxed);
    let mut large_answered = 0;
    while let Some(n) = large_posters.join_next().await {
        large_answered += n.expect("large-body client");
    }
    latencies.sort();
    let (_, hwm) = server.rss_kib();
    println!(
        "ABUSE idle={} (handshakes completed {}, opened in {open_secs:.1}s, server held {open_now}, \
         evicted {evicted}, shed {shed}, cap {cap}) slow={} large_bodies_answered={large_answered} admissions={} \
         p50_ms={:.2} p99_ms={:.2} max_ms={:.2} rss_start_mib={:.1} rss_with_idle_mib={:.1} \
         rss_peak_mib={:.1} vmhwm_mib={:.1}",
        scale.idle,
        idle.len(),
        scale.slow,
        latencies.len(),
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        percentile(&latencies, 1.0).as_secs_f64() * 1e3,
        rss_idle_server as f64 / 1024.0,
        rss_with_idle as f64 / 1024.0,
        peak_during as f64 / 1024.0,
        hwm as f64 / 1024.0,
    );
    assert_not_starved(&latencies, 10 * scale.seconds, scale.seconds);
    assert!(large_answered > 0, "bodies at the limit are answered too");
    assert!(
        hwm < RSS_LIMIT_KIB,
        "peak RSS {hwm} KiB is above {RSS_LIMIT_KIB} KiB"
    );

    // The header-read timeout closes the silent and the slow ones (the newest silent ones:
    // the older were evicted already). A slow head gets the timeout twice at most: once for
    // its first byte, once for the rest of the request.
    let timeout = Duration::from_secs(scale.header_timeout_secs);
    let mut still_open = 0;
    let newest = idle.len().saturating_sub(200);
    for mut c in idle.drain(newest..) {
        if !closed_within(&mut c, timeout + Duration::from_secs(5)).await {
            still_open += 1;
        }
    }
    assert_eq!(
        still_open, 0,
        "silent connections outlived the header-read timeout"
    );
    while let Some(lived) = slow.join_next().await {
        let lived = lived.expect("slow client");
        assert!(
            lived < 2 * timeout + Duration::from_secs(3),
            "a one-byte-per-second head lived {lived:?} (header-read timeout {timeout:?})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cap_idle_timeout_and_announced_body_size() {
    koord_runtime::install_crypto_provider();
    let server = Server::start(&["--max-connections", "20", "--idle-timeout", "2s"]);
    let connector = server.connector(b"http/1.1");

    // The cap: 20 connections from one address that each had a request answered. A 21st
    // from another address is shed before its handshake completes (an answered connection
    // never gives its slot to another address)...
    let request = request_of(server.addr, &fixture("pod-create.json"));
    let holder = IpAddr::from([127, 0, 0, 2]);
    let mut open = Vec::new();
    for _ in 0..20 {
        let mut c = server
            .tls_from(&connector, holder)
            .await
            .expect("under the cap");
        c.write_all(&request).await.expect("request");
        read_response(&mut c).await.expect("served");
        open.push(c);
    }
    assert!(
        server.tls(&connector).await.is_err(),
        "the 21st connection, from another address, is shed"
    );
    // ...while one from the holder's own address takes the slot of its connection idle the
    // longest (the first), and is served.
    let mut own = server
        .tls_from(&connector, holder)
        .await
        .expect("its own address's idle slot");
    own.write_all(&request).await.expect("request");
    let (status, _) = read_response(&mut own).await.expect("served");
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(
        closed_within(&mut open[0], Duration::from_secs(2)).await,
        "the connection idle the longest made room"
    );
    for c in &mut open[1..] {
        assert!(
            !closed_within(c, Duration::from_millis(5)).await,
            "only the one idle the longest was closed"
        );
    }
    open[0] = own;
    drop(open.pop());
    // The slot is freed when the server sees the close; give it a moment.
    let mut admitted = None;
    for _ in 0..50 {
        if let Ok(c) = server.tls(&connector).await {
            admitted = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut conn = admitted.expect("a slot came free");
    drop(open);

    // A kept-alive connection: served, then closed once idle for 2 s.
    conn.write_all(&request).await.expect("request");
    let (status, _) = read_response(&mut conn).await.expect("served");
    assert!(status.starts_with("HTTP/1.1 200"));
    let idle_since = Instant::now();
    assert!(
        closed_within(&mut conn, Duration::from_secs(6)).await,
        "closed when idle"
    );
    let idle_for = idle_since.elapsed();
    assert!(
        idle_for >= Duration::from_millis(1900) && idle_for < Duration::from_secs(5),
        "closed after {idle_for:?} idle (timeout 2 s)"
    );

    // A kept-alive connection that, after one answer, sends its next head a byte every
    // 200 ms: bytes keep arriving, but no answer goes out, so it is closed once nothing has
    // been written for the idle timeout, not kept open by the drip.
    let mut conn = server.tls(&connector).await.expect("connection");
    conn.write_all(&request).await.expect("request");
    let (status, _) = read_response(&mut conn).await.expect("served");
    assert!(status.starts_with("HTTP/1.1 200"));
    let dripping_since = Instant::now();
    let head = post_head(server.addr, 100);
    let mut closed_after = None;
    for byte in head.as_bytes().iter().cycle().take(40) {
        if conn.write_all(std::slice::from_ref(byte)).await.is_err()
            || closed_within(&mut conn, Duration::from_millis(200)).await
        {
            closed_after = Some(dripping_since.elapsed());
            break;
        }
    }
    let closed_after = closed_after.expect("a dripped head keeps a connection open for 8 s");
    assert!(
        closed_after >= Duration::from_millis(1900) && closed_after < Duration::from_secs(5),
        "a dripped head was closed after {closed_after:?} (idle timeout 2 s)"
    );

    // A body announced above the limit: answered at once, without sending it.
    let mut conn = server.tls(&connector).await.expect("connection");
    conn.write_all(post_head(server.addr, BODY_LIMIT + 1).as_bytes())
        .await
        .expect("head");
    let (status, body) = tokio::time::timeout(Duration::from_secs(3), read_response(&mut conn))
        .await
        .expect("answered before the body was sent")
        .expect("a response");
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let answer: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(answer["response"]["allowed"], true);
    let warning = answer["response"]["warnings"][0]
        .as_str()
        .unwrap_or_default();
    assert!(
        warning.contains("above the 3145728-byte limit"),
        "{warning}"
    );
}
