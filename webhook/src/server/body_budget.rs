//! What one connection's admissions may hold of bodies still arriving.
//!
//! hyper hands a stream's DATA to the handler as it is read and gives its flow-control credit
//! back at once, so the HTTP/2 window bounds only the bytes not read yet. A body that comes in
//! several frames is gathered by its handler; streams that announce a body and never finish it
//! keep what they gathered until the deadline, and the client gets new credit for every frame
//! read. Seven connections of 100 such streams (200 KiB announced each) took the server from
//! 13 to 80 MiB. Each connection gets a budget of its flow-control window: a frame gathered
//! after the first waits until it fits, so a connection holds at most its window of gathered
//! bytes beside its window of unread ones, and one connection's stalled streams never take
//! another's budget (the apiserver's bodies come in one frame and never wait for it).

use std::sync::Arc;

use tokio::sync::Semaphore;

/// One connection's budget of gathered body bytes; the request extension its handlers read.
/// One pointer: every admission's future carries it.
#[derive(Clone, Debug)]
pub struct BodyBudget(Arc<Budget>);

#[derive(Debug)]
struct Budget {
    bytes: Semaphore,
    size: usize,
}

impl BodyBudget {
    pub fn new(size: usize) -> Self {
        let size = size.clamp(1, u32::MAX as usize);
        BodyBudget(Arc::new(Budget {
            bytes: Semaphore::new(size),
            size,
        }))
    }

    /// Bytes not held by any body.
    pub fn available(&self) -> usize {
        self.0.bytes.available_permits()
    }
}

/// The bytes one body holds of its connection's budget (none without a budget), given back
/// when it is dropped: the body read, refused, or its stream gone.
pub struct Held {
    budget: Option<BodyBudget>,
    bytes: u32,
}

impl Held {
    pub fn of(budget: Option<BodyBudget>) -> Self {
        Held { budget, bytes: 0 }
    }

    /// Waits until `bytes` more fit in the budget and holds them. One body never holds more
    /// than the whole budget (it would wait for itself): past that it goes on unheld.
    pub async fn hold(&mut self, bytes: usize) {
        let Some(budget) = &self.budget else { return };
        let want = bytes.min(budget.0.size - self.bytes as usize) as u32;
        if want == 0 {
            return;
        }
        // The semaphore is never closed; the bytes are given back in `drop`.
        if let Ok(permit) = budget.0.bytes.acquire_many(want).await {
            permit.forget();
            self.bytes += want;
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.0.bytes.add_permits(self.bytes as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn held_bytes_come_back_when_the_body_is_dropped() {
        let budget = BodyBudget::new(100);
        let mut stalled = Held::of(Some(budget.clone()));
        stalled.hold(60).await;
        stalled.hold(30).await;
        assert_eq!(budget.available(), 10);
        // Another body's frame that does not fit waits for the stalled one to go.
        let mut next = Held::of(Some(budget.clone()));
        let waiting = tokio::time::timeout(Duration::from_millis(50), next.hold(20));
        assert!(waiting.await.is_err(), "20 bytes fit in 10");
        drop(stalled);
        next.hold(20).await;
        assert_eq!(budget.available(), 80);
        drop(next);
        assert_eq!(budget.available(), 100);
    }

    #[tokio::test]
    async fn one_body_holds_the_whole_budget_at_most() {
        let budget = BodyBudget::new(100);
        let mut held = Held::of(Some(budget.clone()));
        held.hold(1000).await;
        assert_eq!(budget.available(), 0);
        held.hold(10).await;
        drop(held);
        assert_eq!(budget.available(), 100);
    }

    #[tokio::test]
    async fn without_a_budget_nothing_waits() {
        let mut held = Held::of(None);
        held.hold(usize::MAX).await;
    }
}
