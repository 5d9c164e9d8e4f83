//! The connection guard both servers use: a cap on open connections and on those of one
//! source address, and, at a cap, which open connection gives its slot to a newcomer (the
//! policy is [`table`]'s, pure and table-tested). `koord-webhook`'s admission listener puts it
//! below TLS (`webhook/src/server/connections.rs`), `koord-applier`'s `/metrics` endpoint in
//! its accept loop (`applier/src/server/mod.rs`).
//!
//! Each admitted connection holds a [`Slot`]: one atomic word says how many requests are in
//! flight on it, whether one has been answered, and whether it was evicted, and another when
//! it last made progress (a request started on it from idle, or answered); the server marks
//! a request's start and end ([`Slot::request_started`], [`Slot::request_finished`]) and the
//! connection's task closes the connection once [`Slot::poll_evicted`] is ready. Marking a
//! request costs two atomic adds and at most two clock reads (and, once per connection, the
//! table's lock for the first answer); nothing allocates per request. Eviction is a
//! compare-and-swap on that word, so a connection that started a request is not closed under
//! it, unless it is stalled (no progress for [`Limits::stalled_after`]) and its address has
//! nothing less valuable to give.

pub mod table;

use std::future::poll_fn;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;
use tokio::sync::Notify;

use table::{Arrival, CapLimits, ConnId, Occupant, Standing, Table};

/// The caps and how long a newcomer waits for the slot of the connection it evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once.
    pub max: usize,
    /// Connections one source address may hold at once (`max` for no such cap).
    pub per_source: usize,
    /// How long a newcomer waits for its victim to close before it is shed itself: the
    /// victim's task only has to run once to let go.
    pub slot_wait: Duration,
    /// A connection with a request in flight and none started or answered for this long is
    /// stalled (a body that never comes): evictable as a last resort.
    pub stalled_after: Duration,
}

/// Why a newcomer got no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Nothing it may take: every slot it could have is serving a request and making
    /// progress (or, across sources, has been answered).
    Shed,
    /// The connection it evicted did not let go of its slot within `slot_wait`.
    SlotNotFreed,
}

/// A newcomer's slot.
pub struct Admitted {
    pub held: Held,
    /// It took the slot of a connection it evicted.
    pub evicted_another: bool,
}

/// The cap, shared by the accept path of one listener.
#[derive(Clone)]
pub struct Guard {
    shared: Arc<Shared>,
    slot_wait: Duration,
}

struct Shared {
    table: Mutex<Table<Weak<Slot>>>,
    next_id: AtomicU64,
    /// The guard's times are milliseconds since this.
    epoch: Instant,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table<Weak<Slot>>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

impl Guard {
    pub fn new(limits: Limits) -> Guard {
        Guard {
            shared: Arc::new(Shared {
                table: Mutex::new(Table::new(CapLimits {
                    max: limits.max,
                    per_source: limits.per_source,
                    stalled: u64::try_from(limits.stalled_after.as_millis()).unwrap_or(u64::MAX),
                })),
                next_id: AtomicU64::new(0),
                epoch: Instant::now(),
            }),
            slot_wait: limits.slot_wait,
        }
    }

    /// A slot for a new connection from `source`: a free one, or the slot of the connection
    /// the policy picks (told to close, and waited for, so that no more than the cap are
    /// open), or none.
    pub async fn admit(&self, source: IpAddr) -> Result<Admitted, Refused> {
        let slot = Arc::new(Slot {
            id: self.shared.next_id.fetch_add(1, Ordering::Relaxed),
            shared: self.shared.clone(),
            state: AtomicU64::new(0),
            progress: AtomicU64::new(0),
            waker: AtomicWaker::new(),
            released: Notify::new(),
        });
        let now = self.shared.now();
        let arrival = self
            .shared
            .table()
            .arrive(slot.id, source, Arc::downgrade(&slot), now);
        match arrival {
            Arrival::Admitted => Ok(Admitted {
                held: Held(slot),
                evicted_another: false,
            }),
            Arrival::Shed => Err(Refused::Shed),
            Arrival::Replaces(victim) => {
                let held = Held(slot);
                // The victim was marked and woken under the table's lock; its `released`
                // keeps the notification if it let go before this waits.
                if let Some(victim) = victim.upgrade()
                    && tokio::time::timeout(self.slot_wait, victim.released.notified())
                        .await
                        .is_err()
                {
                    return Err(Refused::SlotNotFreed);
                }
                Ok(Admitted {
                    held,
                    evicted_another: true,
                })
            }
        }
    }
}

/// Requests in flight: the low 32 bits of [`Slot::state`].
const IN_FLIGHT: u64 = u32::MAX as u64;
/// A request has been answered on the connection.
const ANSWERED: u64 = 1 << 32;
/// The connection was evicted: it closes.
const EVICTED: u64 = 1 << 33;
/// The connection is set up (its TLS handshake done): a first request is up to its client.
const SET_UP: u64 = 1 << 34;

/// What the guard and one connection share.
pub struct Slot {
    id: ConnId,
    shared: Arc<Shared>,
    /// Requests in flight, `ANSWERED`, `EVICTED`.
    state: AtomicU64,
    /// When (the guard's time) a request last started on it from idle or was answered.
    progress: AtomicU64,
    /// The connection's task, woken when it is evicted.
    waker: AtomicWaker,
    /// Told when the connection gives its slot back (the newcomer that evicted it waits).
    released: Notify,
}

impl Slot {
    /// The connection is set up (a TLS server: its handshake is done; a plain one: at once).
    /// Until then it may be waiting on the server (its turn at the key exchange): among the
    /// connections of an address with nothing in flight, it goes after the set-up ones.
    pub fn set_up(&self) {
        self.state.fetch_or(SET_UP, Ordering::AcqRel);
    }

    /// A request's head is in and it is being served: the connection is not evicted until
    /// [`Self::request_finished`] (unless it stalls).
    pub fn request_started(&self) {
        let before = self.state.fetch_add(1, Ordering::AcqRel);
        if before & IN_FLIGHT == 0 {
            self.progress.store(self.shared.now(), Ordering::Relaxed);
        }
    }

    /// The request [`Self::request_started`] counted is over; `answered` when it got its
    /// answer. The first answer takes the table's lock once.
    pub fn request_finished(&self, answered: bool) {
        if answered {
            self.progress.store(self.shared.now(), Ordering::Relaxed);
            let before = self.state.fetch_or(ANSWERED, Ordering::AcqRel);
            if before & ANSWERED == 0 {
                self.shared.table().completed(self.id);
            }
        }
        self.state.fetch_sub(1, Ordering::AcqRel);
    }

    /// A request has been answered on this connection.
    pub fn answered(&self) -> bool {
        self.state.load(Ordering::Acquire) & ANSWERED != 0
    }

    /// Whether the connection has been evicted.
    pub fn is_evicted(&self) -> bool {
        self.state.load(Ordering::Acquire) & EVICTED != 0
    }

    /// `Ready` once the connection has been evicted; registers the task to be woken when it is.
    pub fn poll_evicted(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_evicted() {
            return Poll::Ready(());
        }
        self.waker.register(cx.waker());
        if self.is_evicted() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Completes once the connection has been evicted (one task waits: the connection's).
    pub async fn evicted(&self) {
        poll_fn(|cx| self.poll_evicted(cx)).await;
    }
}

impl Occupant for Weak<Slot> {
    fn standing(&self) -> Standing {
        let Some(slot) = self.upgrade() else {
            return Standing::Gone;
        };
        let state = slot.state.load(Ordering::Acquire);
        let since = slot.progress.load(Ordering::Relaxed);
        if state & EVICTED != 0 {
            Standing::Gone
        } else if state & IN_FLIGHT != 0 {
            Standing::Busy { since }
        } else if state & ANSWERED != 0 {
            Standing::Idle { since }
        } else {
            Standing::Unfinished {
                setting_up: state & SET_UP == 0,
            }
        }
    }

    fn evict(&self, busy: bool) -> bool {
        let Some(slot) = self.upgrade() else {
            return false;
        };
        let marked = slot
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                let free = busy || s & IN_FLIGHT == 0;
                (s & EVICTED == 0 && free).then_some(s | EVICTED)
            })
            .is_ok();
        if marked {
            slot.waker.wake();
        }
        marked
    }
}

/// A registered connection's slot: given back when dropped.
pub struct Held(Arc<Slot>);

impl Held {
    pub fn slot(&self) -> &Arc<Slot> {
        &self.0
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.shared.table().closed(self.0.id);
        self.0.released.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HERE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1));
    const FLOOD: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));

    fn guard(max: usize, per_source: usize) -> Guard {
        Guard::new(Limits {
            max,
            per_source,
            slot_wait: Duration::from_millis(200),
            stalled_after: Duration::from_secs(60),
        })
    }

    /// A connection task: holds its slot until evicted.
    async fn open(guard: &Guard, source: IpAddr) -> Result<tokio::task::JoinHandle<()>, Refused> {
        let admitted = guard.admit(source).await?;
        Ok(tokio::spawn(async move {
            admitted.held.slot().evicted().await;
            drop(admitted);
        }))
    }

    #[tokio::test]
    async fn at_the_cap_the_oldest_unfinished_connection_makes_room() {
        let guard = guard(2, 2);
        let first = open(&guard, HERE).await.expect("slot");
        let second = open(&guard, HERE).await.expect("slot");
        let third = open(&guard, HERE).await.expect("a slot by eviction");
        first.await.expect("the oldest was evicted");
        assert!(!second.is_finished());
        assert!(!third.is_finished());
    }

    #[tokio::test]
    async fn a_flood_from_one_source_replaces_only_its_own_connections() {
        let guard = guard(4, 4);
        // The probe's connection is the oldest, its request not read yet.
        let probe = open(&guard, HERE).await.expect("slot");
        let mut flood = Vec::new();
        for _ in 0..23 {
            flood.push(
                open(&guard, FLOOD)
                    .await
                    .expect("a slot, by eviction past 3"),
            );
        }
        tokio::task::yield_now().await;
        assert!(
            !probe.is_finished(),
            "the lighter source's connection was evicted"
        );
        // A newcomer from the lighter source takes the flood's oldest, not the probe's.
        let second = open(&guard, HERE).await.expect("a slot by eviction");
        tokio::task::yield_now().await;
        assert!(!probe.is_finished() && !second.is_finished());
        assert_eq!(flood.iter().filter(|t| !t.is_finished()).count(), 2);
    }

    #[tokio::test]
    async fn a_connection_serving_a_request_is_not_evicted_while_it_progresses() {
        let guard = guard(2, 2);
        let busy = guard.admit(HERE).await.expect("slot");
        busy.held.slot().request_started();
        let idle = open(&guard, HERE).await.expect("slot");
        let _newcomer = open(&guard, HERE).await.expect("a slot by eviction");
        idle.await.expect("the unfinished one went");
        let other = guard.admit(HERE).await.expect("evicts the newcomer");
        other.held.slot().request_started();
        assert_eq!(guard.admit(HERE).await.err(), Some(Refused::Shed));
        // Its answer makes it idle: a newcomer of its own source may take it now.
        busy.held.slot().request_finished(true);
        assert!(busy.held.slot().answered() && !busy.held.slot().is_evicted());
        let waiting = tokio::spawn({
            let guard = guard.clone();
            async move { guard.admit(HERE).await.map(|a| a.evicted_another) }
        });
        tokio::task::yield_now().await;
        assert!(busy.held.slot().is_evicted(), "the idle kept-alive one");
        drop(busy);
        assert_eq!(waiting.await.expect("task"), Ok(true));
    }

    #[tokio::test]
    async fn a_stalled_request_gives_its_slot_to_a_newcomer_of_its_address() {
        let guard = Guard::new(Limits {
            max: 4,
            per_source: 1,
            slot_wait: Duration::from_millis(200),
            stalled_after: Duration::from_millis(50),
        });
        let stalled = guard.admit(HERE).await.expect("slot");
        stalled.held.slot().request_started();
        assert_eq!(
            guard.admit(HERE).await.err(),
            Some(Refused::Shed),
            "not yet"
        );
        tokio::time::sleep(Duration::from_millis(60)).await;
        let slot = stalled.held.slot().clone();
        let newcomer = tokio::spawn({
            let guard = guard.clone();
            async move { guard.admit(HERE).await.map(|a| a.evicted_another) }
        });
        slot.evicted().await;
        drop(stalled);
        assert_eq!(newcomer.await.expect("task"), Ok(true));
    }

    #[tokio::test]
    async fn an_evicted_connection_that_keeps_its_slot_sheds_the_newcomer() {
        let guard = guard(1, 1);
        // Holds the slot and ignores eviction.
        let _stuck = guard.admit(HERE).await.expect("slot");
        assert_eq!(guard.admit(HERE).await.err(), Some(Refused::SlotNotFreed));
    }

    #[tokio::test]
    async fn a_request_started_after_the_eviction_does_not_undo_it() {
        let guard = guard(1, 1);
        let first = guard.admit(HERE).await.expect("slot");
        let slot = first.held.slot().clone();
        let newcomer = tokio::spawn({
            let guard = guard.clone();
            async move { guard.admit(HERE).await.is_ok() }
        });
        slot.evicted().await;
        slot.request_started();
        assert!(slot.is_evicted());
        drop(first);
        assert!(newcomer.await.expect("task"));
    }
}
