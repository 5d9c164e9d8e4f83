//! Turns at a TLS handshake's expensive step (the key exchange and the signature, ~150 µs of
//! CPU), shared fairly between source addresses: at most one handshake per core runs it at
//! once, and the others wait for a turn, the addresses with waiters served in rotation, the
//! newest waiter of an address first.
//!
//! Why: within one address a newcomer is never refused for the slots of connections that have
//! not completed a request (`koord_runtime::connections`), so a flood that reconnects whatever
//! is closed gets a handshake per attempt, thousands a second in waves. In one queue, first
//! come first served, the apiserver's new connection waited behind a whole wave (the lock-out
//! round's new connections: p99 31-46 ms, against 6-7 ms when the flood was turned away
//! before its handshake). In rotation, a light address waits for at most one turn per address
//! that has waiters; behind its own address's flood, the newest first: under a wave that is
//! the one whose client is still waiting, and the older ones are the likeliest to have been
//! evicted meanwhile (they skip the work when their turn comes).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// The turns of one listener.
pub struct HandshakeTurns {
    state: Mutex<State>,
}

struct State {
    /// Turns nobody holds.
    free: usize,
    /// Who waits, by address, oldest first.
    waiting: HashMap<IpAddr, VecDeque<oneshot::Sender<()>>>,
    /// The addresses with waiters, in the order their next turn comes.
    order: VecDeque<IpAddr>,
}

/// Queues longer than this are swept of the waiters that gave up (a flood's, evicted or timed
/// out while they waited), so a queue served newest first does not keep them for good.
const SWEEP_ABOVE: usize = 256;

impl HandshakeTurns {
    pub fn new(turns: usize) -> Arc<HandshakeTurns> {
        Arc::new(HandshakeTurns {
            state: Mutex::new(State {
                free: turns.max(1),
                waiting: HashMap::new(),
                order: VecDeque::new(),
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A turn for a handshake from `source`; given back when the [`Turn`] is dropped.
    pub async fn turn(self: &Arc<Self>, source: IpAddr) -> Turn {
        let source = source.to_canonical();
        let rx = {
            let mut state = self.state();
            if state.free > 0 {
                // A free turn means nobody waits: a turn given back goes to a waiter first.
                state.free -= 1;
                return Turn(self.clone());
            }
            let (tx, rx) = oneshot::channel();
            let State { waiting, order, .. } = &mut *state;
            let queue = waiting.entry(source).or_default();
            if queue.is_empty() {
                order.push_back(source);
            }
            queue.push_back(tx);
            if queue.len() > SWEEP_ABOVE {
                queue.retain(|tx| !tx.is_closed());
            }
            rx
        };
        let mut waiting = Waiting {
            rx,
            turns: Some(self.clone()),
        };
        // Err only if the turns themselves went away (the server stopping): go ahead then.
        let _ = (&mut waiting.rx).await;
        waiting.turns = None;
        Turn(self.clone())
    }

    /// A turn was given back: to the next address in rotation with a waiter still waiting (its
    /// newest), else to the free ones.
    fn pass_on(&self) {
        let mut state = self.state();
        let State {
            waiting,
            order,
            free,
        } = &mut *state;
        while let Some(source) = order.pop_front() {
            let Some(queue) = waiting.get_mut(&source) else {
                continue;
            };
            while let Some(tx) = queue.pop_back() {
                if tx.send(()).is_ok() {
                    if queue.is_empty() {
                        waiting.remove(&source);
                    } else {
                        order.push_back(source);
                    }
                    return;
                }
            }
            waiting.remove(&source);
        }
        *free += 1;
    }
}

/// A turn at the handshake's expensive step.
pub struct Turn(Arc<HandshakeTurns>);

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.pass_on();
    }
}

/// A waiter; one dropped before it took its turn passes the turn on if it had been given it.
struct Waiting {
    rx: oneshot::Receiver<()>,
    /// Set until the turn is taken.
    turns: Option<Arc<HandshakeTurns>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(turns) = self.turns.take() {
            self.rx.close();
            if self.rx.try_recv().is_ok() {
                turns.pass_on();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;
    use std::time::Duration;

    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    /// Waiters that record the order in which they got their turn, each holding it until told.
    struct Waiters {
        turns: Arc<HandshakeTurns>,
        served: Arc<StdMutex<Vec<&'static str>>>,
        release: Arc<tokio::sync::Notify>,
    }

    impl Waiters {
        fn new(turns: usize) -> Waiters {
            Waiters {
                turns: HandshakeTurns::new(turns),
                served: Arc::default(),
                release: Arc::default(),
            }
        }

        async fn spawn(&self, name: &'static str, source: IpAddr) -> tokio::task::JoinHandle<()> {
            let (turns, served, release) = (
                self.turns.clone(),
                self.served.clone(),
                self.release.clone(),
            );
            let task = tokio::spawn(async move {
                let _turn = turns.turn(source).await;
                served.lock().expect("lock").push(name);
                release.notified().await;
            });
            // Queued in spawn order.
            tokio::task::yield_now().await;
            task
        }

        /// Lets the current holder go and waits for the next one to take its turn.
        async fn next(&self) {
            let before = self.served.lock().expect("lock").len();
            self.release.notify_one();
            for _ in 0..100 {
                if self.served.lock().expect("lock").len() > before {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }

        fn served(&self) -> Vec<&'static str> {
            self.served.lock().expect("lock").clone()
        }
    }

    #[tokio::test]
    async fn addresses_take_turns_and_the_newest_of_one_goes_first() {
        let w = Waiters::new(1);
        let _holder = w.spawn("holder", ip(9)).await;
        // A flood of four from one address, then the apiserver's from another.
        let mut tasks = Vec::new();
        for name in ["flood-1", "flood-2", "flood-3", "flood-4"] {
            tasks.push(w.spawn(name, ip(1)).await);
        }
        tasks.push(w.spawn("apiserver", ip(2)).await);
        for _ in 0..5 {
            w.next().await;
        }
        assert_eq!(
            w.served(),
            [
                "holder",
                "flood-4",
                "apiserver",
                "flood-3",
                "flood-2",
                "flood-1"
            ]
        );
        w.release.notify_one();
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_passes_its_turn_on() {
        let w = Waiters::new(1);
        let holder = w.spawn("holder", ip(9)).await;
        let gives_up = w.spawn("gives-up", ip(1)).await;
        let _later = w.spawn("later", ip(1)).await;
        gives_up.abort();
        let _ = gives_up.await;
        w.next().await;
        assert_eq!(w.served(), ["holder", "later"]);
        holder.abort();
        // Given back with nobody waiting: free again.
        w.release.notify_one();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let turn = tokio::time::timeout(Duration::from_secs(1), w.turns.turn(ip(3)))
            .await
            .expect("a free turn");
        drop(turn);
        assert_eq!(w.turns.state().free, 1);
    }

    #[tokio::test]
    async fn turns_up_to_the_limit_run_at_once() {
        let w = Waiters::new(2);
        let _a = w.spawn("a", ip(1)).await;
        let _b = w.spawn("b", ip(1)).await;
        let _c = w.spawn("c", ip(1)).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(w.served(), ["a", "b"]);
        w.next().await;
        assert_eq!(w.served(), ["a", "b", "c"]);
        w.release.notify_waiters();
    }
}
