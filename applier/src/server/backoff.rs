//! How long the accept loop waits after `accept(2)` fails. Out of file descriptors (`EMFILE`,
//! `ENFILE`) or kernel memory, `accept` fails again at once for as long as the condition lasts:
//! retrying without a pause spun a core at 100% and took the CPU the reconcile loop needed to
//! close files. A failure that belongs to one peer (it reset the connection before we took it)
//! says nothing about the next one and is retried at once.

use std::io;
use std::time::Duration;

use rustix::io::Errno;

/// The first pause after a resource failure.
pub const FIRST: Duration = Duration::from_millis(10);
/// The longest pause: an exhausted limit is retried at least once a second.
pub const MAX: Duration = Duration::from_secs(1);

/// The pause after `error`, given the pause after the previous failure in a row (`None` after
/// a success): none for a failure of one peer's connection, else 10 ms doubling up to 1 s.
pub fn after_error(previous: Option<Duration>, error: &io::Error) -> Option<Duration> {
    if is_per_connection(error) {
        return None;
    }
    Some(previous.map_or(FIRST, |p| (p * 2).clamp(FIRST, MAX)))
}

/// A failure of the connection being accepted, not of the listener or the process.
fn is_per_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || matches!(
        Errno::from_io_error(error),
        // accept(2): a pending network error of the new socket (Linux passes these on).
        Some(
            Errno::PROTO
                | Errno::NETDOWN
                | Errno::NONET
                | Errno::HOSTUNREACH
                | Errno::NETUNREACH
                | Errno::HOSTDOWN
                | Errno::OPNOTSUPP
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(code: Errno) -> io::Error {
        code.into()
    }

    #[test]
    fn resource_failures_back_off_doubling_to_a_second() {
        let ms = Duration::from_millis;
        let table = [
            (None, Errno::MFILE, Some(ms(10))),
            (Some(ms(10)), Errno::MFILE, Some(ms(20))),
            (Some(ms(20)), Errno::NFILE, Some(ms(40))),
            (Some(ms(640)), Errno::NOBUFS, Some(ms(1000))),
            (Some(ms(1000)), Errno::NOMEM, Some(ms(1000))),
            // A peer's failure neither pauses nor counts.
            (Some(ms(640)), Errno::CONNABORTED, None),
            (None, Errno::PROTO, None),
            (None, Errno::INTR, None),
        ];
        for (previous, code, want) in table {
            assert_eq!(
                after_error(previous, &os(code)),
                want,
                "{previous:?} {code:?}"
            );
        }
    }

    #[test]
    fn the_pause_is_never_zero_nor_above_the_maximum() {
        let mut pause = None;
        for _ in 0..64 {
            pause = after_error(pause, &os(Errno::MFILE));
            let p = pause.expect("a pause");
            assert!((FIRST..=MAX).contains(&p), "{p:?}");
        }
        assert_eq!(pause, Some(MAX));
    }
}
