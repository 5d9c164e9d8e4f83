//! The connection cap. Each open connection holds a slot; at the cap a newcomer takes the slot
//! of the oldest connection whose request is not being answered yet (silent, or still sending
//! its head), and is closed at once only when every slot is answering.
//!
//! Why evict rather than refuse: refusing the newcomer lets any client that opens the cap's
//! worth of connections and sends nothing lock Prometheus and the kubelet's probes out until the
//! header-read timeout, and again as soon as it reconnects. Evicting the oldest unanswered one
//! means a client sending its request at once (every real client) is answered, whatever is
//! held open: an attacker would have to open connections faster than the cap within the time
//! an honest request takes (well under a millisecond here).

use std::collections::VecDeque;
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

/// The slots and the connections that may give theirs up, oldest first.
pub struct Slots {
    free: Arc<Semaphore>,
    waiting: Mutex<VecDeque<Weak<Conn>>>,
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

    /// A slot for a new connection, evicting the oldest unanswered one at the cap. Awaited by
    /// the accept loop itself, so at most one connection beyond the cap is ever open.
    pub async fn take(&self) -> Result<(OwnedSemaphorePermit, Arc<Conn>), Shed> {
        let permit = match self.free.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if !self.evict_one() {
                    return Err(Shed::AllAnswering);
                }
                match tokio::time::timeout(SLOT_WAIT, self.free.clone().acquire_owned()).await {
                    Ok(Ok(p)) => p,
                    _ => return Err(Shed::SlotNotFreed),
                }
            }
        };
        let conn = Arc::new(Conn::default());
        self.register(&conn);
        Ok((permit, conn))
    }

    /// Tells the oldest open connection that is not answering to close. False when there is
    /// none.
    fn evict_one(&self) -> bool {
        let mut queue = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(weak) = queue.pop_front() {
            let Some(conn) = weak.upgrade() else { continue };
            if conn.answering.load(Ordering::Acquire) {
                continue;
            }
            conn.evict.notify_one();
            return true;
        }
        false
    }

    fn register(&self, conn: &Arc<Conn>) {
        let mut queue = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        // Closed and answering connections leave entries behind; sweep them now and then so
        // the queue stays within twice the cap.
        if queue.len() >= 2 * self.max {
            queue.retain(|w| {
                w.upgrade()
                    .is_some_and(|c| !c.answering.load(Ordering::Acquire))
            });
        }
        queue.push_back(Arc::downgrade(conn));
    }

    #[cfg(test)]
    fn queued(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection task: holds its slot until evicted.
    async fn open(slots: &Slots) -> Result<tokio::task::JoinHandle<()>, Shed> {
        let (permit, conn) = slots.take().await?;
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
    async fn an_answering_connection_is_never_evicted() {
        let slots = Slots::new(2);
        let (_p1, busy) = slots.take().await.expect("slot");
        busy.start_answering();
        let idle = open(&slots).await.expect("slot");
        let _newcomer = open(&slots).await.expect("a slot by eviction");
        idle.await.expect("the unanswered one went");
        // Now both slots: the answering one and the newcomer (unanswered).
        let (_p2, other) = slots.take().await.expect("a slot by evicting the newcomer");
        other.start_answering();
        assert_eq!(slots.take().await.err(), Some(Shed::AllAnswering));
    }

    #[tokio::test]
    async fn an_evicted_connection_that_keeps_its_slot_sheds_the_newcomer() {
        let slots = Slots::new(1);
        // Holds the permit and ignores eviction.
        let _stuck = slots.take().await.expect("slot");
        assert_eq!(slots.take().await.err(), Some(Shed::SlotNotFreed));
    }

    #[tokio::test]
    async fn the_queue_stays_within_twice_the_cap() {
        let slots = Slots::new(4);
        for _ in 0..100 {
            let (permit, conn) = slots.take().await.expect("slot");
            drop((permit, conn));
        }
        assert!(slots.queued() <= 8, "{}", slots.queued());
    }
}
