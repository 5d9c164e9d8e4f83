//! The connection cap. Each open connection holds a slot; at the cap a newcomer takes the slot
//! of the oldest connection whose request is not being answered yet (silent, or still sending
//! its head) **of the source address holding the most such connections**, and is closed at
//! once only when every slot is answering. By source: a client flooding from one address (a
//! pod) then only ever replaces its own connections, and the kubelet's probe or Prometheus,
//! from other addresses, is not closed while the applier is too starved of CPU to read its
//! request within the few milliseconds the flood leaves it. (The kubelet's probes and a
//! hostNetwork pod share the node's address: there the oldest-first rule alone decides.)
//!
//! Why evict rather than refuse: refusing the newcomer lets any client that opens the cap's
//! worth of connections and sends nothing lock Prometheus and the kubelet's probes out until the
//! header-read timeout, and again as soon as it reconnects. Evicting the oldest unanswered one
//! means a client sending its request at once (every real client) is answered, whatever is
//! held open: an attacker would have to open connections faster than the cap within the time
//! an honest request takes (well under a millisecond here).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// How long a newcomer waits for the slot of the connection it evicted: that connection's task
/// only has to be scheduled once to drop it.
const SLOT_WAIT: Duration = Duration::from_millis(200);

/// What the cap and one connection share.
#[derive(Default)]
pub struct Conn {
    /// The request head is in and the answer is being made or written: never evicted.
    answering: AtomicBool,
    /// Told to close for a newcomer.
    evict: Notify,
}

impl Conn {
    pub fn start_answering(&self) {
        self.answering.store(true, Ordering::Release);
    }

    /// Completes once this connection has been evicted.
    pub async fn evicted(&self) {
        self.evict.notified().await;
    }
}

/// A connection that may give its slot up, and where it came from.
struct Waiting {
    conn: Weak<Conn>,
    source: IpAddr,
}

impl Waiting {
    /// The connection, while it is open and not answering.
    fn unanswered(&self) -> Option<Arc<Conn>> {
        self.conn
            .upgrade()
            .filter(|c| !c.answering.load(Ordering::Acquire))
    }
}

/// The slots and the connections that may give theirs up, oldest first.
pub struct Slots {
    free: Arc<Semaphore>,
    waiting: Mutex<VecDeque<Waiting>>,
    max: usize,
}

/// Why a newcomer got no slot.
#[derive(Debug, PartialEq, Eq)]
pub enum Shed {
    /// Every slot is answering a request.
    AllAnswering,
    /// An evicted connection did not let go of its slot in time.
    SlotNotFreed,
}

impl Slots {
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        Slots {
            free: Arc::new(Semaphore::new(max)),
            waiting: Mutex::new(VecDeque::with_capacity(2 * max)),
            max,
        }
    }

    /// A slot for a new connection from `source`, evicting at the cap the oldest unanswered
    /// connection of the source holding the most. Awaited by the accept loop itself, so at
    /// most one connection beyond the cap is ever open.
    pub async fn take(&self, source: IpAddr) -> Result<(OwnedSemaphorePermit, Arc<Conn>), Shed> {
        let permit = match self.free.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                self.evict_one(source)?;
                match tokio::time::timeout(SLOT_WAIT, self.free.clone().acquire_owned()).await {
                    Ok(Ok(p)) => p,
                    _ => return Err(Shed::SlotNotFreed),
                }
            }
        };
        let conn = Arc::new(Conn::default());
        self.register(&conn, source);
        Ok((permit, conn))
    }

    /// Tells the oldest unanswered connection of the source holding the most unanswered ones
    /// to close, for a newcomer from `source`; or says why the newcomer gets nothing.
    fn evict_one(&self, source: IpAddr) -> Result<(), Shed> {
        let mut queue = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        // At most twice the cap entries: counting them at each eviction is cheap.
        let mut held: HashMap<IpAddr, usize> = HashMap::new();
        for w in queue.iter().filter(|w| w.unanswered().is_some()) {
            *held.entry(w.source).or_default() += 1;
        }
        let Some(most) = held.values().copied().max() else {
            queue.clear();
            return Err(Shed::AllAnswering);
        };
        // The newcomer's own address first among the heaviest (it replaces its own), else any.
        let heaviest = if held.get(&source) == Some(&most) {
            source
        } else {
            held.into_iter()
                .find(|&(_, n)| n == most)
                .map(|(ip, _)| ip)
                .ok_or(Shed::AllAnswering)?
        };
        let at = queue
            .iter()
            .position(|w| w.source == heaviest && w.unanswered().is_some())
            .ok_or(Shed::AllAnswering)?;
        let conn = queue
            .remove(at)
            .and_then(|w| w.unanswered())
            .ok_or(Shed::AllAnswering)?;
        conn.evict.notify_one();
        Ok(())
    }

    fn register(&self, conn: &Arc<Conn>, source: IpAddr) {
        let mut queue = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        // Closed and answering connections leave entries behind; sweep them now and then so
        // the queue stays within twice the cap.
        if queue.len() >= 2 * self.max {
            queue.retain(|w| w.unanswered().is_some());
        }
        queue.push_back(Waiting {
            conn: Arc::downgrade(conn),
            source,
        });
    }

    #[cfg(test)]
    fn queued(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HERE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1));
    const FLOOD: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));

    /// A connection task: holds its slot until evicted.
    async fn open(slots: &Slots) -> Result<tokio::task::JoinHandle<()>, Shed> {
        open_from(slots, HERE).await
    }

    async fn open_from(slots: &Slots, source: IpAddr) -> Result<tokio::task::JoinHandle<()>, Shed> {
        let (permit, conn) = slots.take(source).await?;
        Ok(tokio::spawn(async move {
            conn.evicted().await;
            drop(permit);
        }))
    }

    #[tokio::test]
    async fn at_the_cap_the_oldest_unanswered_connection_makes_room() {
        let slots = Slots::new(2);
        let first = open(&slots).await.expect("slot");
        let second = open(&slots).await.expect("slot");
        let third = open(&slots).await.expect("a slot by eviction");
        first.await.expect("the oldest was evicted");
        assert!(!second.is_finished());
        assert!(!third.is_finished());
    }

    #[tokio::test]
    async fn a_flood_from_one_source_replaces_only_its_own_connections() {
        let slots = Slots::new(4);
        // The probe's connection is the oldest, its request not read yet.
        let probe = open_from(&slots, HERE).await.expect("slot");
        let mut flood = Vec::new();
        for _ in 0..3 {
            flood.push(open_from(&slots, FLOOD).await.expect("slot"));
        }
        for _ in 0..20 {
            flood.push(open_from(&slots, FLOOD).await.expect("a slot by eviction"));
        }
        tokio::task::yield_now().await;
        assert!(
            !probe.is_finished(),
            "the lighter source's connection was evicted"
        );
        // A newcomer from the lighter source takes the flood's oldest, not the probe's.
        let second = open_from(&slots, HERE).await.expect("a slot by eviction");
        tokio::task::yield_now().await;
        assert!(!probe.is_finished() && !second.is_finished());
        assert_eq!(flood.iter().filter(|t| !t.is_finished()).count(), 2);
    }

    #[tokio::test]
    async fn an_answering_connection_is_never_evicted() {
        let slots = Slots::new(2);
        let (_p1, busy) = slots.take(HERE).await.expect("slot");
        busy.start_answering();
        let idle = open(&slots).await.expect("slot");
        let _newcomer = open(&slots).await.expect("a slot by eviction");
        idle.await.expect("the unanswered one went");
        // Now both slots: the answering one and the newcomer (unanswered).
        let (_p2, other) = slots
            .take(HERE)
            .await
            .expect("a slot by evicting the newcomer");
        other.start_answering();
        assert_eq!(slots.take(HERE).await.err(), Some(Shed::AllAnswering));
    }

    #[tokio::test]
    async fn an_evicted_connection_that_keeps_its_slot_sheds_the_newcomer() {
        let slots = Slots::new(1);
        // Holds the permit and ignores eviction.
        let _stuck = slots.take(HERE).await.expect("slot");
        assert_eq!(slots.take(HERE).await.err(), Some(Shed::SlotNotFreed));
    }

    #[tokio::test]
    async fn the_queue_stays_within_twice_the_cap() {
        let slots = Slots::new(4);
        for _ in 0..100 {
            let (permit, conn) = slots.take(HERE).await.expect("slot");
            drop((permit, conn));
        }
        assert!(slots.queued() <= 8, "{}", slots.queued());
    }
}
