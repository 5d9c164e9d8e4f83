//! The global tracing subscriber: logs go to stderr (stdout is for command output), as text or
//! as one JSON object per line.
//!
//! **No client can flood the log.** A line written once per connection or per request is a
//! line any client can provoke as often as it connects: a client that connects by IP address
//! (SNI carrying an IP) made rustls warn once per handshake, about 89,000 lines in a 20 s run of
//! new connections. Each such kind of line has a [`LineBudget`]: at most [`LINES_PER_WINDOW`]
//! lines in a [`WINDOW`], the rest counted; the first line written after some were not is
//! preceded by a warning saying how many. The kinds: every `rustls` event at `info` or above
//! (on a server, all of them are about what the peer sent; a filter of this subscriber, so a
//! `--log-level` asking for rustls's debug lines still gets them all), and the per-request
//! lines of the servers (the webhook's denied and failed admissions, which its metrics count
//! anyway). The total not written: [`suppressed_lines`], and the counter given to
//! [`count_suppressed_lines`] (`koord_webhook_log_lines_suppressed_total`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use prometheus::IntCounter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the global subscriber with an env-filter directive string (`info`,
/// `info,koord_webhook=debug`). An invalid directive falls back to `info` rather than failing
/// start-up over a log setting; a second call (a test harness) keeps the first subscriber.
pub fn init_logging(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Checked in this order: the directives, then the budget (what the directives turn off
    // spends none of it).
    let base = tracing_subscriber::registry().with(PeerLines).with(filter);
    let text = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => base.with(text).try_init(),
        LogFormat::Json => base.with(text.json().flatten_event(true)).try_init(),
    };
}

/// Lines of one kind written at most per window.
pub const LINES_PER_WINDOW: u32 = 20;
/// The window of a [`LineBudget`].
pub const WINDOW: Duration = Duration::from_secs(60);

/// Lines not written, every budget together.
static SUPPRESSED: AtomicU64 = AtomicU64::new(0);
/// The metric that counts them too, once a binary has registered one.
static SUPPRESSED_COUNTER: OnceLock<IntCounter> = OnceLock::new();

/// Log lines not written so far because their kind had spent its budget.
pub fn suppressed_lines() -> u64 {
    SUPPRESSED.load(Ordering::Relaxed)
}

/// Counts the lines not written in `counter` as well, from now on (and the ones before, at
/// once). The first counter given wins (tests start several servers in one process).
pub fn count_suppressed_lines(counter: IntCounter) {
    if SUPPRESSED_COUNTER.set(counter.clone()).is_ok() {
        counter.inc_by(suppressed_lines());
    }
}

/// When the process started counting time, for the budgets' windows.
fn since_start() -> Duration {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

/// A kind of log line a client can provoke (one per connection or per request): at most
/// [`LINES_PER_WINDOW`] of them in a [`WINDOW`]. Meant as a `static` beside the line:
///
/// ```
/// use koord_runtime::logging::LineBudget;
/// static REFUSED: LineBudget = LineBudget::new("refused requests");
/// if REFUSED.allow() {
///     tracing::info!("request refused");
/// }
/// ```
pub struct LineBudget {
    kind: &'static str,
    state: Mutex<Spent>,
}

#[derive(Clone, Copy)]
struct Spent {
    /// The window the count belongs to (its number since the start).
    window: u64,
    written: u32,
    /// Lines not written since the last one written.
    suppressed: u64,
}

impl LineBudget {
    /// `kind` names the lines in the warning that says some were not written.
    pub const fn new(kind: &'static str) -> LineBudget {
        LineBudget {
            kind,
            state: Mutex::new(Spent {
                window: 0,
                written: 0,
                suppressed: 0,
            }),
        }
    }

    /// Whether one more line of this kind may be written now. Before the first one written
    /// after some were not, a warning says how many were not.
    pub fn allow(&self) -> bool {
        self.allow_at(since_start())
    }

    fn allow_at(&self, now: Duration) -> bool {
        let not_written = {
            let mut spent = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let window = now.as_secs() / WINDOW.as_secs();
            if window != spent.window {
                spent.window = window;
                spent.written = 0;
            }
            if spent.written >= LINES_PER_WINDOW {
                spent.suppressed += 1;
                SUPPRESSED.fetch_add(1, Ordering::Relaxed);
                if let Some(counter) = SUPPRESSED_COUNTER.get() {
                    counter.inc();
                }
                return false;
            }
            spent.written += 1;
            std::mem::take(&mut spent.suppressed)
        };
        // Outside the lock: this line goes through the subscriber, which may ask a budget.
        if not_written > 0 {
            tracing::warn!(
                target: "koord_runtime::logging",
                kind = self.kind,
                not_written,
                "log lines not written: one per connection or request, which a client can \
                 provoke at will; at most {LINES_PER_WINDOW} a minute of each kind are"
            );
        }
        true
    }
}

/// rustls's own lines (through the `log` bridge): about what the peer sent, one or more per
/// handshake.
static RUSTLS: LineBudget = LineBudget::new("rustls warnings about a client's handshake");

/// The subscriber's filter that holds rustls's lines to their budget.
struct PeerLines;

fn from_rustls(target: &str) -> bool {
    target
        .strip_prefix("rustls")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
}

/// rustls logs through the `log` crate. The bridge dispatches each record as an event of one
/// callsite per level, whose target is `log`; the record's own target is its `log.target`
/// field. (It asks `enabled` twice per record, so the budget is spent here, once per event,
/// after the directives allowed the line.)
impl<S: tracing::Subscriber> Layer<S> for PeerLines {
    fn event_enabled(&self, event: &tracing::Event<'_>, _: Context<'_, S>) -> bool {
        let meta = event.metadata();
        if *meta.level() > tracing::Level::INFO {
            return true;
        }
        let rustls = if meta.target() == "log" {
            let mut target = RecordTarget(false);
            event.record(&mut target);
            target.0
        } else {
            from_rustls(meta.target())
        };
        !rustls || RUSTLS.allow()
    }
}

/// Whether a bridged record's `log.target` is rustls's.
struct RecordTarget(bool);

impl tracing::field::Visit for RecordTarget {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "log.target" {
            self.0 = from_rustls(value);
        }
    }

    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_writes_its_lines_per_window_and_counts_the_rest() {
        let budget = LineBudget::new("test lines");
        let before = suppressed_lines();
        let at = |s| Duration::from_secs(s);
        let written = (0..100).filter(|_| budget.allow_at(at(5))).count();
        assert_eq!(written, LINES_PER_WINDOW as usize);
        assert_eq!(suppressed_lines() - before, 100 - written as u64);
        assert_eq!(budget.state.lock().expect("lock").suppressed, 80);
        // The next window: a fresh budget, and the count of what was not written is told
        // (and cleared) with its first line.
        assert!(budget.allow_at(at(65)));
        assert_eq!(budget.state.lock().expect("lock").suppressed, 0);
        let written = (0..100).filter(|_| budget.allow_at(at(70))).count();
        assert_eq!(written, LINES_PER_WINDOW as usize - 1);
    }

    #[test]
    fn rustls_targets_are_recognised() {
        for (target, want) in [
            ("rustls", true),
            ("rustls::msgs::handshake", true),
            ("rustls_pki_types", false),
            ("tokio_rustls", false),
            ("koord_webhook::server", false),
        ] {
            assert_eq!(from_rustls(target), want, "{target}");
        }
    }
}
