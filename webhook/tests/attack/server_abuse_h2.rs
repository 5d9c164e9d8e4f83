//! HTTP/2 abuse does not starve admissions: the real binary, loopback only, bounded in time
//! and count.
//!
//! One server process (a child, so its RSS is its own) takes, at the same time, connections
//! speaking HTTP/2 frame by frame as an attacker would (`tests/h2_attacker`): streams that
//! announce a body and send DATA up to every window without finishing, streams sending
//! bodies at the size limit (queued for the large-body lane), streams reset as soon as they
//! open (rapid reset), header lists at the size limit grown through the HPACK dynamic table,
//! an endless CONTINUATION, a client that never opens its receive window while its streams
//! wait to be answered, and PING and SETTINGS floods whose answers are never read. Meanwhile
//! a normal HTTP/2 client, connected before the attack as the apiserver's connection is,
//! sends admissions one after another. Checked: every normal admission is answered with its
//! patch within the deadline (when admission slots were taken before the body was read, 2
//! connections of stalled streams held every slot and admissions waited out the deadline).
//! `http2_attackers_do_not_starve_admissions` lets every attacker speak HTTP/2
//! (`--max-h2-connections 1000`): the permit pools alone keep admissions flowing.
//! `http2_attackers_stay_under_64_mib` runs with the shipped defaults, where connections past 8
//! open HTTP/2 ones are offered HTTP/1.1 (a slot the server frees by ending one is taken again), and holds the peak RSS under 64 MiB; the RSS is a
//! release-build figure, so it attacks the server `KOORD_WEBHOOK_BIN` names (`make perf` runs it
//! at full size against the release binary; `webhook/benches/abuse.sh` too). With
//! `ABUSE_H2_P99_MS` set, the normal client's p99 is held under it (`make perf`: the 5 ms goal;
//! abuse.sh leaves it unset and judges the median of its rounds).
//!
//! `cargo test` runs a size that fits the usual 1,024 file descriptors and ~15 s (80
//! attacking connections, 4 s of admissions). `webhook/benches/abuse.sh` runs the full size
//! (1,000 attacking connections, release build) through the
//! `ABUSE_H2_*` variables below.

use crate::h2_attacker;
use crate::server_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::child::{Server, assert_not_starved, env_or, heavy, open_files_limit, rss_of};
use bytes::Bytes;
use h2_attacker::{Attack, Tally};
use http_body_util::{BodyExt as _, Full};
use server_support::{fixture, percentile};

const RSS_LIMIT_KIB: u64 = 64 * 1024;
const BODY_LIMIT: usize = 3 * 1024 * 1024;
const HEADER_LIST_LIMIT: usize = 64 * 1024;

/// The attacks and how many connections each gets: `ABUSE_H2_ATTACKS` as
/// `name=connections,...` (names as [`Attack::name`]); `ABUSE_H2_SECONDS` of normal admissions;
/// `ABUSE_H2_SERVER_ARGS`, more `serve` flags (to measure other settings); `ABUSE_H2_P99_MS`,
/// the bound on the normal client's p99 (none when unset).
struct Scale {
    attacks: Vec<(Attack, usize)>,
    seconds: u64,
    server_args: Vec<String>,
    p99_ms: Option<f64>,
}

const ALL_ATTACKS: [Attack; 9] = [
    Attack::StalledBodies {
        declared: BODY_LIMIT,
    },
    Attack::StalledBodies {
        declared: 200 * 1024,
    },
    Attack::LimitBodies { size: BODY_LIMIT },
    Attack::RapidReset,
    Attack::HeaderLists {
        limit: HEADER_LIST_LIMIT,
    },
    Attack::Continuation,
    Attack::ZeroWindow,
    Attack::PingFlood,
    Attack::SettingsFlood,
];

/// The `cargo test` mix (80 connections).
const DEFAULT_ATTACKS: &str = "stalled-bodies=16,stalled-small-bodies=16,limit-bodies=8,\
                               header-lists=16,zero-window=16,rapid-reset=2,continuation=2,\
                               ping-flood=2,settings-flood=2";

impl Scale {
    fn from_env() -> Scale {
        let spec = std::env::var("ABUSE_H2_ATTACKS").unwrap_or_else(|_| DEFAULT_ATTACKS.into());
        let attacks = spec
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|item| {
                let (name, n) = item.trim().split_once('=').unwrap_or((item.trim(), "1"));
                let attack = ALL_ATTACKS
                    .into_iter()
                    .find(|a| a.name() == name)
                    .unwrap_or_else(|| panic!("ABUSE_H2_ATTACKS: no attack named {name}"));
                (
                    attack,
                    n.parse().expect("ABUSE_H2_ATTACKS: a connection count"),
                )
            })
            .collect();
        Scale {
            attacks,
            seconds: env_or("ABUSE_H2_SECONDS", 4),
            server_args: std::env::var("ABUSE_H2_SERVER_ARGS")
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
            // Set but unreadable is refused: a typo must not turn the check off unnoticed.
            p99_ms: std::env::var("ABUSE_H2_P99_MS").ok().map(|v| {
                v.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("ABUSE_H2_P99_MS: milliseconds, not {v:?}"))
            }),
        }
    }

    fn connections(&self) -> usize {
        self.attacks.iter().map(|(_, n)| n).sum()
    }
}

/// Admissions over one HTTP/2 connection, one after another, for `seconds`: the latency of
/// each, and the server's highest RSS seen between them. Every answer must carry the patch:
/// an admission starved of a slot is answered at the deadline without one.
fn normal_client(
    server: &Server,
    seconds: u64,
    start: Arc<std::sync::Barrier>,
) -> std::thread::JoinHandle<(Vec<Duration>, u64)> {
    let (addr, connector, pid) = (server.addr, server.connector(b"h2"), server.child.id());
    let body = Bytes::from(fixture("pod-create.json"));
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let tls = crate::child::tls_connect(addr, &connector)
                .await
                .expect("client connection");
            assert_eq!(tls.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
            let io = hyper_util::rt::TokioIo::new(tls);
            let (mut sender, conn) =
                hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                    .await
                    .expect("h2 handshake");
            tokio::spawn(conn);
            let admit = |sender: &mut hyper::client::conn::http2::SendRequest<Full<Bytes>>| {
                let req =
                    http::Request::post(format!("https://localhost:{}/mutate-pod", addr.port()))
                        .header("content-type", "application/json")
                        .body(Full::new(body.clone()))
                        .expect("request");
                let sent = sender.send_request(req);
                async move {
                    let resp = sent.await.expect("a response");
                    assert_eq!(resp.status(), 200);
                    resp.into_body().collect().await.expect("body").to_bytes()
                }
            };
            // The connection is established (and used) before the attack starts.
            admit(&mut sender).await;
            start.wait();
            let mut latencies = Vec::new();
            let mut peak = 0;
            let until = Instant::now() + Duration::from_secs(seconds);
            while Instant::now() < until {
                let sent = Instant::now();
                let body = admit(&mut sender).await;
                latencies.push(sent.elapsed());
                let answer: serde_json::Value = serde_json::from_slice(&body).expect("json");
                assert_eq!(
                    answer["response"]["uid"],
                    "705ab4f5-6393-11e8-b7cc-42010a800002",
                    "after {:?}: {answer}",
                    sent.elapsed()
                );
                assert_eq!(answer["response"]["allowed"], true);
                assert!(answer["response"]["patch"].is_string(), "mutated: {answer}");
                peak = peak.max(rss_of(pid).0);
            }
            (latencies, peak)
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_attackers_do_not_starve_admissions() {
    // Every attacking connection gets HTTP/2 here: what keeps admissions flowing is the
    // permit pools (a body sent with its head never waits behind stalled ones), not the cap
    // on HTTP/2 connections, nor the share of one address (the attackers and the normal
    // client all come from 127.0.0.1, and at full size they are more than its 512).
    attack_and_admit(
        false,
        &[
            "--max-h2-connections",
            "1000",
            "--max-connections-per-source",
            "1024",
        ],
    )
    .await;
}

/// The same attack on the default server, also held to the 64 MiB goal: met because at most
/// `--max-h2-connections` (8) HTTP/2 connections are open at once; every open stream holds its decoded
/// headers and state, so uncapped the same attack takes gigabytes (docs/admission-server.md, "Abuse").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "RSS is a release-build figure: make perf runs it with KOORD_WEBHOOK_BIN (a debug server starts at 28 MiB)"]
async fn http2_attackers_stay_under_64_mib() {
    assert!(
        std::env::var_os("KOORD_WEBHOOK_BIN").is_some(),
        "KOORD_WEBHOOK_BIN must name the release koord-webhook: the 64 MiB bound is the shipped \
         build's (make perf sets it; a debug server starts at 28 MiB)"
    );
    attack_and_admit(true, &[]).await;
}

/// `server_args` before the `ABUSE_H2_SERVER_ARGS` ones.
async fn attack_and_admit(check_rss: bool, server_args: &[&str]) {
    let _heavy = heavy().await;
    let scale = Scale::from_env();
    let limit = open_files_limit();
    let needed = scale.connections() as u64 + 64;
    assert!(
        limit >= needed,
        "{} attacking connections need RLIMIT_NOFILE >= {needed}, have {limit}: raise `ulimit -n`",
        scale.connections()
    );
    koord_runtime::install_crypto_provider();
    let args: Vec<&str> = server_args
        .iter()
        .copied()
        .chain(scale.server_args.iter().map(String::as_str))
        .collect();
    let h2_capped = !args.contains(&"--max-h2-connections");
    let server = Server::start(&args);
    let (rss_start, _) = server.rss_kib();

    let start = Arc::new(std::sync::Barrier::new(2));
    let normal = normal_client(&server, scale.seconds, start.clone());
    tokio::task::spawn_blocking(move || start.wait())
        .await
        .expect("normal client connected");

    let stop = Arc::new(AtomicBool::new(false));
    let review = Arc::new(fixture("pod-create.json"));
    let tallies: Vec<_> = scale
        .attacks
        .iter()
        .map(|(attack, connections)| (*attack, *connections, Arc::new(Tally::default())))
        .collect();
    let mut attackers = tokio::task::JoinSet::new();
    let connector = server.connector(b"h2");
    // One connection of each attack in turn: under the cap the first HTTP/2 slots go to the
    // first connections made, and attack by attack they all went to the first attack (the
    // 200 KiB stalled bodies, which took the server past 64 MiB, never had one).
    let most = tallies.iter().map(|(_, n, _)| *n).max().unwrap_or(0);
    for round in 0..most {
        for (attack, _, tally) in tallies.iter().filter(|(_, n, _)| round < *n) {
            attackers.spawn(h2_attacker::run(
                server.addr,
                connector.clone(),
                *attack,
                review.clone(),
                stop.clone(),
                tally.clone(),
            ));
        }
    }
    let (mut latencies, peak_during) = tokio::task::spawn_blocking(move || normal.join())
        .await
        .expect("join")
        .expect("normal client");
    let (rss_end, hwm) = server.rss_kib();
    stop.store(true, Ordering::Relaxed);
    let stopped = tokio::time::timeout(Duration::from_secs(5), async {
        while attackers.join_next().await.is_some() {}
    })
    .await;
    if stopped.is_err() {
        attackers.abort_all();
    }

    latencies.sort();
    let p99_ms = percentile(&latencies, 0.99).as_secs_f64() * 1e3;
    for (attack, connections, tally) in &tallies {
        println!(
            "ABUSE_H2_ATTACK {} x{connections}: {}",
            attack.name(),
            tally.summary()
        );
    }
    println!(
        "ABUSE h2 caps={} attackers={} ({}) admissions={} p50_ms={:.2} p99_ms={:.2} max_ms={:.2} \
         rss_start_mib={:.1} rss_peak_mib={:.1} rss_end_mib={:.1} vmhwm_mib={:.1} loadavg={}",
        if h2_capped { "shipped" } else { "lifted" },
        scale.connections(),
        scale
            .attacks
            .iter()
            .map(|(a, n)| format!("{}={n}", a.name()))
            .collect::<Vec<_>>()
            .join(","),
        latencies.len(),
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        p99_ms,
        percentile(&latencies, 1.0).as_secs_f64() * 1e3,
        rss_start as f64 / 1024.0,
        peak_during as f64 / 1024.0,
        rss_end as f64 / 1024.0,
        hwm as f64 / 1024.0,
        load_average(),
    );

    // Every attack ran: its connections were made and sent something. Under the default cap
    // on HTTP/2 connections (8 open at once, one of them the normal client's), the connections
    // past it were offered HTTP/1.1 and could not start their HTTP/2 attack; a slot comes back
    // when the server ends a connection (one stalled for a second is evicted when the address
    // is at its share), so each attacking HTTP/2 connection past the first 7 needs one the
    // server ended before it.
    let (mut made_h2, mut ended_h2) = (0, 0);
    for (attack, connections, tally) in &tallies {
        let made = tally.connections.load(Ordering::Relaxed);
        let attacking = made - tally.connections_late.load(Ordering::Relaxed);
        made_h2 += attacking;
        let ended = tally.connections_ended.load(Ordering::Relaxed);
        ended_h2 += ended;
        if h2_capped {
            let refused = tally.connect_failures.load(Ordering::Relaxed);
            assert_eq!(made + refused, *connections as u64, "{}", attack.name());
        } else {
            assert_eq!(
                made,
                *connections as u64,
                "{}: {made} of {connections} connections made",
                attack.name()
            );
        }
        assert!(
            attacking == ended || tally.bytes_sent.load(Ordering::Relaxed) > 0,
            "{}: sent nothing on the {} connections the server left open",
            attack.name(),
            attacking - ended
        );
    }
    if h2_capped {
        assert!(
            made_h2 <= 7 + ended_h2,
            "{made_h2} attacking HTTP/2 connections while the server ended {ended_h2}: more than \
             the cap of 8 (one the normal client's) open at once"
        );
    }
    // At least one a second: the attackers and a debug-build server share two cores here, so
    // the count says the client was not shut out, not how fast it went (abuse.sh measures).
    assert_not_starved(&latencies, scale.seconds, scale.seconds);
    if check_rss {
        assert!(
            hwm < RSS_LIMIT_KIB,
            "peak RSS {hwm} KiB is above {RSS_LIMIT_KIB} KiB"
        );
    }
    // The attack and the server share the machine's cores: the load average says how much else
    // ran beside them when the bound was missed.
    if let Some(limit) = scale.p99_ms {
        assert!(
            p99_ms < limit,
            "the normal client's p99 {p99_ms:.2} ms is not under {limit} ms (ABUSE_H2_P99_MS): \
             {} admissions in {} s beside {} attacking connections, load average {}",
            latencies.len(),
            scale.seconds,
            scale.connections(),
            load_average()
        );
    }
}

/// The 1, 5 and 15 minute load averages (/proc/loadavg), comma-separated: one field of the
/// ABUSE line, which abuse.sh reads by its `key=value` fields.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".to_owned(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(","),
    )
}
