//! The connection to systemd's manager (IO): one thread of its own with a single-threaded
//! runtime holds a peer-to-peer D-Bus connection to systemd's private socket
//! (`/run/systemd/private`, what runc and the kubelet use as root; no `dbus-daemon` needed) and
//! makes the `SetUnitProperties` calls the passes queue, in the wire format of [`super::wire`].
//! systemd sends every connection of that socket all its signals: they are read as they come
//! and dropped, so its queue towards us never fills.
//!
//! A pass never waits long: a call is queued with `try_send` (a full queue answers `Busy`),
//! answered within the call timeout (`Timeout` otherwise), and while systemd is unreachable
//! every call answers `Unreachable` at once. A call that times out or breaks the connection
//! takes it down; the thread reconnects with exponential backoff (a `daemon-reexec` closes
//! every connection and re-creates the socket). An outage is logged once when it starts and
//! once when it ends.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

use super::metrics::SystemdMetrics;
use super::property::Property;
use super::wire;

/// The D-Bus error systemd answers for a property it does not know.
pub const UNKNOWN_PROPERTY_ERROR: &str = "org.freedesktop.DBus.Error.PropertyReadOnly";

/// How the connection behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbusSettings {
    pub socket: PathBuf,
    /// The longest a call (or a connection attempt) may take.
    pub call_timeout: Duration,
    /// Backoff between connection attempts: from `backoff_min`, doubled up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Calls waiting at most.
    pub queue: usize,
}

impl DbusSettings {
    pub fn new(socket: PathBuf) -> Self {
        Self {
            socket,
            call_timeout: Duration::from_secs(1),
            backoff_min: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            queue: 64,
        }
    }
}

/// The backoff after `failures` failed connection attempts in a row (1 = the first).
pub fn backoff(s: &DbusSettings, failures: u32) -> Duration {
    let shift = failures.saturating_sub(1).min(20);
    s.backoff_min
        .saturating_mul(1u32 << shift)
        .min(s.backoff_max)
}

/// Why a call did not set the properties.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("systemd unreachable")]
    Unreachable,
    #[error("too many calls waiting")]
    Busy,
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("systemd refused: {name}: {message}")]
    Refused { name: String, message: String },
}

impl CallError {
    /// The `reason` label of `koord_applier_systemd_fallback_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            CallError::Unreachable => "unreachable",
            CallError::Busy => "busy",
            CallError::Timeout(_) => "timeout",
            CallError::Refused { .. } => "refused",
        }
    }
}

struct Call {
    unit: String,
    properties: Vec<Property>,
    reply: std::sync::mpsc::SyncSender<Result<(), CallError>>,
}

/// What the thread and the callers share.
#[derive(Default)]
struct Shared {
    up: AtomicBool,
    /// Incremented on every new connection: a caller that sees it change knows systemd was
    /// unreachable in between.
    connections: AtomicU64,
}

/// The callers' end.
pub struct Dbus {
    tx: mpsc::Sender<Call>,
    shared: Arc<Shared>,
    call_timeout: Duration,
}

impl Dbus {
    /// Starts the thread and waits (at most the call timeout) for its first connection attempt.
    pub fn start(settings: DbusSettings, metrics: Option<SystemdMetrics>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel(settings.queue.max(1));
        let shared = Arc::new(Shared::default());
        let (first_tx, first_rx) = std::sync::mpsc::sync_channel(1);
        let call_timeout = settings.call_timeout;
        let thread_shared = shared.clone();
        let span = tracing::info_span!("systemd", socket = %settings.socket.display());
        std::thread::Builder::new()
            .name("systemd-dbus".into())
            .spawn(move || {
                let _in = span.enter();
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "systemd: no runtime for the connection; cgroup files only");
                        return;
                    }
                };
                rt.block_on(run(settings, thread_shared, rx, metrics, Some(first_tx)));
            })?;
        let _ = first_rx.recv_timeout(call_timeout);
        Ok(Self {
            tx,
            shared,
            call_timeout,
        })
    }

    pub fn is_up(&self) -> bool {
        self.shared.up.load(Ordering::Acquire)
    }

    /// How many connections were made so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Acquire)
    }

    /// `SetUnitProperties(unit, runtime=true, properties)`; blocking, bounded by the call
    /// timeout; at once when systemd is unreachable or the queue is full.
    pub fn set_unit_properties(
        &self,
        unit: &str,
        properties: &[Property],
    ) -> Result<(), CallError> {
        if !self.is_up() {
            return Err(CallError::Unreachable);
        }
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.tx
            .try_send(Call {
                unit: unit.to_owned(),
                properties: properties.to_vec(),
                reply,
            })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => CallError::Busy,
                mpsc::error::TrySendError::Closed(_) => CallError::Unreachable,
            })?;
        // The thread answers within the call timeout; a little more for the hand-over.
        answer
            .recv_timeout(self.call_timeout + Duration::from_millis(250))
            .unwrap_or(Err(CallError::Timeout(self.call_timeout)))
    }
}

/// A connection: the socket's two halves and what was read of the next message.
struct Conn {
    read: BufReader<OwnedReadHalf>,
    write: OwnedWriteHalf,
    buf: Vec<u8>,
    serial: u32,
}

async fn connect(socket: &Path, timeout: Duration) -> Result<Conn, String> {
    let handshake = async {
        let stream = UnixStream::connect(socket)
            .await
            .map_err(|e| e.to_string())?;
        let (read, mut write) = stream.into_split();
        let mut read = BufReader::new(read);
        let uid = rustix::process::getuid().as_raw();
        write
            .write_all(&wire::auth_external(uid))
            .await
            .map_err(|e| e.to_string())?;
        let mut line = Vec::new();
        // The server's answer is one short line.
        (&mut read)
            .take(512)
            .read_until(b'\n', &mut line)
            .await
            .map_err(|e| e.to_string())?;
        let line = String::from_utf8_lossy(&line);
        let line = line.trim_end();
        if !wire::auth_ok(line) {
            return Err(format!("authentication refused: {line:?}"));
        }
        write
            .write_all(wire::AUTH_BEGIN)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Conn {
            read,
            write,
            buf: Vec::new(),
            serial: 0,
        })
    };
    tokio::time::timeout(timeout, handshake)
        .await
        .unwrap_or_else(|_| Err(format!("no connection within {timeout:?}")))
}

impl Conn {
    /// The next whole message; cancel-safe (what was read stays in `buf`).
    async fn next(&mut self) -> Result<wire::Incoming, String> {
        loop {
            if let Some(len) = wire::frame_len(&self.buf).map_err(|e| e.to_string())?
                && self.buf.len() >= len
            {
                let rest = self.buf.split_off(len);
                let msg = std::mem::replace(&mut self.buf, rest);
                return wire::decode(&msg).map_err(|e| e.to_string());
            }
            let mut chunk = [0u8; 8192];
            let n = self
                .read
                .read(&mut chunk)
                .await
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("systemd closed the connection".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends `SetUnitProperties(unit, runtime=true, properties)`; its serial.
    async fn send(&mut self, unit: &str, properties: &[Property]) -> Result<u32, String> {
        self.serial = self.serial.wrapping_add(1).max(1);
        let props: Vec<(&str, u64)> = properties.iter().map(|p| (p.name, p.value)).collect();
        let msg = wire::set_unit_properties(self.serial, unit, true, &props);
        self.write
            .write_all(&msg)
            .await
            .map_err(|e| e.to_string())?;
        Ok(self.serial)
    }
}

/// The thread's loop: connect, serve calls until the connection goes, back off, again.
async fn run(
    s: DbusSettings,
    shared: Arc<Shared>,
    mut rx: mpsc::Receiver<Call>,
    metrics: Option<SystemdMetrics>,
    mut first: Option<std::sync::mpsc::SyncSender<()>>,
) {
    let count = |result: &str| {
        if let Some(m) = &metrics {
            m.connections.with_label_values(&[result]).inc();
        }
    };
    let set_up = |up: bool| {
        shared.up.store(up, Ordering::Release);
        if let Some(m) = &metrics {
            m.up.set(i64::from(up));
        }
    };
    set_up(false);
    // Said once per outage (and once at the start).
    let mut in_outage = false;
    let mut failures = 0u32;
    loop {
        match connect(&s.socket, s.call_timeout).await {
            Ok(mut conn) => {
                shared.connections.fetch_add(1, Ordering::AcqRel);
                set_up(true);
                count("connected");
                failures = 0;
                if in_outage {
                    tracing::info!("systemd reachable again: unit values are set through systemd");
                } else {
                    tracing::info!(
                        "connected to systemd: values of systemd units are set as their properties (SetUnitProperties, runtime)"
                    );
                }
                if let Some(f) = first.take() {
                    let _ = f.try_send(());
                }
                let lost = serve(&mut conn, &mut rx, &s, metrics.as_ref()).await;
                set_up(false);
                let Some(why) = lost else { return };
                count("lost");
                tracing::warn!(
                    error = %why,
                    "systemd connection lost: writing cgroup files only until it is back (systemd undoes them at its next re-apply of a unit); reconnecting"
                );
                in_outage = true;
            }
            Err(e) => {
                count("failed");
                if !in_outage {
                    tracing::warn!(
                        error = %e,
                        "systemd unreachable: writing cgroup files only until it is (systemd undoes them at its next re-apply of a unit); retrying with backoff"
                    );
                    in_outage = true;
                }
                if let Some(f) = first.take() {
                    let _ = f.try_send(());
                }
            }
        }
        failures = failures.saturating_add(1);
        let sleep = tokio::time::sleep(backoff(&s, failures));
        tokio::pin!(sleep);
        // Calls queued just before the connection went are answered at once meanwhile.
        loop {
            tokio::select! {
                () = &mut sleep => break,
                call = rx.recv() => match call {
                    Some(c) => { let _ = c.reply.try_send(Err(CallError::Unreachable)); }
                    None => return,
                },
            }
        }
    }
}

/// Serves calls on `conn`, reading (and dropping) systemd's signals meanwhile; `Some(why)`
/// when the connection is gone, `None` when every caller is gone (the process ends).
async fn serve(
    conn: &mut Conn,
    rx: &mut mpsc::Receiver<Call>,
    s: &DbusSettings,
    metrics: Option<&SystemdMetrics>,
) -> Option<String> {
    let count = |result: &str| {
        if let Some(m) = metrics {
            m.calls.with_label_values(&[result]).inc();
        }
    };
    // The call waiting for its answer: the caller, its serial, the deadline.
    let mut waiting: Option<(Call, u32, tokio::time::Instant)> = None;
    loop {
        let deadline = waiting.as_ref().map(|w| w.2);
        tokio::select! {
            msg = conn.next() => {
                let msg = match msg {
                    Ok(m) => m,
                    Err(why) => {
                        if let Some((call, _, _)) = waiting.take() {
                            count("lost");
                            let _ = call.reply.try_send(Err(CallError::Unreachable));
                        }
                        return Some(why);
                    }
                };
                let answered = matches!(&waiting, Some((_, serial, _)) if msg.reply_serial == Some(*serial));
                if !answered || !matches!(msg.kind, wire::METHOD_RETURN | wire::ERROR) {
                    continue; // a signal, or a reply to nothing of ours
                }
                let Some((call, _, _)) = waiting.take() else { continue };
                let answer = if msg.kind == wire::METHOD_RETURN {
                    count("ok");
                    Ok(())
                } else {
                    count("refused");
                    Err(CallError::Refused {
                        name: msg.error_name.unwrap_or_default(),
                        message: msg.error_message.unwrap_or_default(),
                    })
                };
                let _ = call.reply.try_send(answer);
            }
            call = rx.recv(), if waiting.is_none() => {
                let call = call?;
                match conn.send(&call.unit, &call.properties).await {
                    Ok(serial) => {
                        waiting = Some((call, serial, tokio::time::Instant::now() + s.call_timeout));
                    }
                    Err(why) => {
                        count("lost");
                        let _ = call.reply.try_send(Err(CallError::Unreachable));
                        return Some(why);
                    }
                }
            }
            () = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some((call, _, _)) = waiting.take() {
                    count("timeout");
                    let _ = call.reply.try_send(Err(CallError::Timeout(s.call_timeout)));
                }
                return Some(format!("SetUnitProperties unanswered after {:?}", s.call_timeout));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let s = DbusSettings::new(PathBuf::from("/x"));
        let got: Vec<u64> = (1..=10)
            .map(|n| backoff(&s, n).as_millis() as u64)
            .collect();
        assert_eq!(
            got,
            [
                500, 1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000, 30_000
            ]
        );
        assert_eq!(backoff(&s, u32::MAX), s.backoff_max);
    }
}
