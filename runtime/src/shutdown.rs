//! The one way either process learns it should stop.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// SIGTERM (the kubelet stopping the pod) and SIGINT (a person at a terminal), caught from the
/// moment this is made rather than from the first await: a signal that comes while the
/// process is starting is then a request to stop like any other, not the default action that
/// kills the process at once. Must be made inside a Tokio runtime.
pub struct ShutdownSignals {
    term: Option<Signal>,
    int: Option<Signal>,
}

impl ShutdownSignals {
    pub fn new() -> Self {
        ShutdownSignals {
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
        }
    }

    /// The next SIGTERM or SIGINT (never, if neither could be caught).
    pub async fn recv(&mut self) {
        async fn next(s: &mut Option<Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(&mut self.term) => {}
            () = next(&mut self.int) => {}
        }
    }
}

impl Default for ShutdownSignals {
    fn default() -> Self {
        Self::new()
    }
}

/// Resolves on SIGTERM or SIGINT, caught from the first poll.
pub async fn shutdown_signal() {
    ShutdownSignals::new().recv().await;
}
