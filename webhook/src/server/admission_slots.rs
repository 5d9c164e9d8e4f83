//! The admission slots (`--max-concurrent`): each holds at most one request body, which is
//! what keeps memory flat under a burst. A slot is taken before the body is read, so a client
//! that announces a body and sends it slowly (or never finishes it, or queues it for the
//! large-body lane) would hold its slot until the deadline; over HTTP/2 two connections of
//! 200 streams hold all 256 slots that way and every other admission waits out its deadline.
//! So, as the connection cap does with silent connections: when no slot is free, a newcomer
//! takes the slot of the oldest admission that is still waiting for its body. The apiserver
//! sends the body with the head, so its admissions hold a slot only while being reviewed and
//! are never the ones evicted (webhook/README.md, "Abuse").

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{Notify, Semaphore, SemaphorePermit};

/// A slot's holder is waiting for its body (or for the large-body lane).
const WAITING_FOR_BODY: u8 = 0;
/// Its body is read: the slot is no longer evictable.
const BODY_READ: u8 = 1;
/// A newcomer took the slot: the holder answers without reviewing.
const EVICTED: u8 = 2;

#[derive(Default)]
struct Holder {
    state: AtomicU8,
    evicted: Notify,
}

pub struct AdmissionSlots {
    free: Semaphore,
    /// Holders that were still waiting for their body when last seen, oldest first.
    waiting: Mutex<VecDeque<Weak<Holder>>>,
    /// Wakes an admission waiting for a slot when a holder becomes evictable.
    evictable: Notify,
    max: usize,
}

/// A taken slot; given back on drop, unless a newcomer took it over.
pub struct Slot<'a> {
    /// `None` when the slot was taken over from an evicted holder (whose permit is
    /// forgotten instead of given back): dropping it then gives back one permit.
    permit: Option<SemaphorePermit<'a>>,
    free: &'a Semaphore,
    holder: Option<Arc<Holder>>,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let taken_over = self
            .holder
            .as_ref()
            .is_some_and(|h| h.state.load(Ordering::Acquire) == EVICTED);
        match (self.permit.take(), taken_over) {
            (Some(permit), true) => permit.forget(),
            (Some(permit), false) => drop(permit),
            (None, true) => {}
            (None, false) => self.free.add_permits(1),
        }
    }
}

impl AdmissionSlots {
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        AdmissionSlots {
            free: Semaphore::new(max),
            waiting: Mutex::new(VecDeque::new()),
            evictable: Notify::new(),
            max,
        }
    }

    /// Takes a slot: a free one, else the slot of the oldest holder still waiting for its
    /// body, handed over at once (`evicted` is then true), else waits for one (the caller's
    /// deadline bounds it). Handing over, rather than queueing behind every waiter, is what
    /// lets an admission through while a flood of stalled streams keeps arriving.
    pub async fn acquire(&self) -> (Slot<'_>, bool) {
        if let Ok(permit) = self.free.try_acquire() {
            return (self.slot(Some(permit)), false);
        }
        if self.evict_oldest() {
            return (self.slot(None), true);
        }
        loop {
            tokio::select! {
                permit = self.free.acquire() => match permit {
                    Ok(permit) => return (self.slot(Some(permit)), false),
                    // Never closed; a closed semaphore would mean no slot at all.
                    Err(_) => std::future::pending::<()>().await,
                },
                () = self.evictable.notified() => {
                    if self.evict_oldest() {
                        return (self.slot(None), true);
                    }
                }
            }
        }
    }

    fn slot<'a>(&'a self, permit: Option<SemaphorePermit<'a>>) -> Slot<'a> {
        Slot {
            permit,
            free: &self.free,
            holder: None,
        }
    }

    fn evict_oldest(&self) -> bool {
        let mut queue = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(weak) = queue.pop_front() {
            let Some(holder) = weak.upgrade() else {
                continue;
            };
            if holder
                .state
                .compare_exchange(
                    WAITING_FOR_BODY,
                    EVICTED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                holder.evicted.notify_one();
                return true;
            }
        }
        false
    }

    /// Makes `slot` evictable until its body is read: called only when the body did not
    /// arrive with the head, so the usual admission never touches the queue.
    pub fn waiting_for_body(&self, slot: &mut Slot<'_>) {
        let holder = Arc::new(Holder::default());
        let mut queue = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        // Holders that finished or were dropped leave dead entries; sweep them now and then
        // so the queue stays within twice the slot count.
        if queue.len() >= 2 * self.max {
            queue.retain(|w| {
                w.upgrade()
                    .is_some_and(|h| h.state.load(Ordering::Acquire) == WAITING_FOR_BODY)
            });
        }
        queue.push_back(Arc::downgrade(&holder));
        drop(queue);
        slot.holder = Some(holder);
        self.evictable.notify_one();
    }
}

impl Slot<'_> {
    /// Resolves once a newcomer has taken this slot (never, unless it was made evictable).
    pub async fn evicted(&self) {
        match &self.holder {
            Some(h) => h.evicted.notified().await,
            None => std::future::pending().await,
        }
    }

    /// The body is read: the slot stays with this admission. False if it was evicted first.
    pub fn body_read(&self) -> bool {
        self.holder.as_ref().is_none_or(|h| {
            h.state
                .compare_exchange(
                    WAITING_FOR_BODY,
                    BODY_READ,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_newcomer_takes_the_slot_of_the_oldest_waiting_for_its_body() {
        let slots = AdmissionSlots::new(2);
        let (mut first, _) = slots.acquire().await;
        slots.waiting_for_body(&mut first);
        let (second, _) = slots.acquire().await;
        // `second` never waits for its body: not evictable. The newcomer gets `first`'s slot
        // at once, and `first` learns it.
        let (third, evicted) = slots.acquire().await;
        assert!(evicted);
        tokio::time::timeout(Duration::from_secs(1), first.evicted())
            .await
            .expect("first told");
        assert!(!first.body_read(), "evicted before its body was read");
        // Two slots, still: a fourth waits until one is given back.
        drop(first);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), slots.acquire())
                .await
                .is_err()
        );
        drop(third);
        let (_fourth, evicted) = tokio::time::timeout(Duration::from_secs(1), slots.acquire())
            .await
            .expect("the taken-over slot is given back");
        assert!(!evicted);
        assert!(second.body_read());
        drop(second);
        assert_eq!(slots.free.available_permits(), 1);
    }

    #[tokio::test]
    async fn a_slot_whose_body_is_read_is_not_evicted() {
        let slots = AdmissionSlots::new(1);
        let (mut only, _) = slots.acquire().await;
        slots.waiting_for_body(&mut only);
        assert!(only.body_read());
        let newcomer = tokio::time::timeout(Duration::from_millis(50), slots.acquire()).await;
        assert!(newcomer.is_err(), "waits: the holder is reviewing");
    }
}
