//! Who gives up a slot when the connection cap is reached: the policy behind the acceptor in
//! `connections.rs`, kept free of IO and clocks so a table of arrivals can test it.
//!
//! A connection is *fresh* until it has been answered once (its first request completed), and
//! *proven* after. The rules, and why:
//!
//! - **A proven connection is never evicted** (only the idle timeout closes it). The apiserver
//!   keeps its connections for minutes and answers arrive on them every few milliseconds;
//!   once a connection has been served it stays out of reach of newcomers. Evicting "only
//!   silent" connections was not enough: a head sent by half is not silent, and 1,030 of them
//!   held every slot of a cap of 1,024 (no newcomer got in at all).
//! - **At the cap, a newcomer evicts the oldest fresh connection of the source holding the
//!   most fresh connections.** A newcomer from any lighter source (the apiserver's next
//!   connection) takes a slot from the heaviest. Fresh connections are always evictable, so
//!   no capacity needs reserving for proven ones: they already hold their slots, and a
//!   newcomer from a lighter source always finds a victim unless every slot is proven.
//! - **A newcomer of the heaviest source itself evicts its own oldest fresh connection only
//!   if that source has been answered before** (holds a proven connection: a client that
//!   shares its address with a flood, such as the apiserver behind a NAT, still gets new
//!   connections in). A source never answered is shed, closed before its TLS handshake: one
//!   address flooding the server gets nothing more while the cap is full, and each attempt
//!   costs an accept and a close, not a handshake. (Letting every such newcomer evict its own
//!   source's oldest cost a TLS handshake per attempt: 1,100 a second under the lock-out
//!   test's attacker.)
//! - **A source holds at most `per_source` connections**, fresh and proven together. Past it
//!   the newcomer evicts its own oldest fresh connection on the same terms (the source has
//!   been answered before), or is shed. This bounds a client that completes one cheap request
//!   per connection (to become proven) and then holds it: however it behaves, the slots beyond
//!   `per_source` stay with the other sources.
//!
//! A source is an IP address (an IPv4-mapped IPv6 address counts as the IPv4 one).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;

/// A connection's number, unique for the life of the process.
pub type ConnId = u64;

/// The cap on all connections and on those of one source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapLimits {
    pub max: usize,
    pub per_source: usize,
}

/// What one source holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    /// Connections open (fresh and proven).
    pub open: usize,
    /// Of those, the ones not yet answered once.
    pub fresh: usize,
}

/// What to do with a newcomer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A slot is free: take it.
    Admit,
    /// Take the slot of the oldest fresh connection of the newcomer's own source.
    EvictOwn,
    /// Take the slot of the oldest fresh connection of the heaviest source (another one).
    EvictHeaviest,
    /// Close the newcomer (before its TLS handshake).
    Shed,
}

/// The decision for a newcomer whose source holds `newcomer`, with `open` connections in all
/// and `heaviest_fresh` fresh ones at the source holding the most.
pub fn verdict(limits: CapLimits, open: usize, newcomer: Load, heaviest_fresh: usize) -> Verdict {
    // A fresh connection of its own to give up, from a source that has been answered before.
    let own = newcomer.fresh > 0 && newcomer.open > newcomer.fresh;
    if newcomer.open >= limits.per_source {
        if own {
            Verdict::EvictOwn
        } else {
            Verdict::Shed
        }
    } else if open < limits.max {
        Verdict::Admit
    } else if heaviest_fresh > newcomer.fresh {
        Verdict::EvictHeaviest
    } else if own {
        Verdict::EvictOwn
    } else {
        Verdict::Shed
    }
}

/// What [`Table::arrive`] did with a newcomer.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival<P> {
    /// Registered in a free slot.
    Admitted,
    /// Registered in the slot of this (now unregistered) connection, which must be closed.
    Replaces(P),
    /// Not registered.
    Shed,
}

struct Conn<P> {
    source: IpAddr,
    fresh: bool,
    payload: P,
}

#[derive(Default)]
struct Source {
    load: Load,
    /// The source's connections in order of arrival; also ids that have since been answered
    /// or closed, skipped when met and swept when they outnumber the fresh ones.
    queue: VecDeque<ConnId>,
}

/// The connections holding slots, by source. `P` is what the caller needs to close one.
pub struct Table<P> {
    limits: CapLimits,
    conns: HashMap<ConnId, Conn<P>>,
    sources: HashMap<IpAddr, Source>,
    /// (fresh connections, source) for every source with fresh ones: the last is the heaviest.
    by_fresh: BTreeSet<(usize, IpAddr)>,
}

impl<P: Clone> Table<P> {
    pub fn new(limits: CapLimits) -> Self {
        Table {
            limits: CapLimits {
                max: limits.max.max(1),
                per_source: limits.per_source.max(1),
            },
            conns: HashMap::new(),
            sources: HashMap::new(),
            by_fresh: BTreeSet::new(),
        }
    }

    /// Connections holding a slot.
    pub fn open(&self) -> usize {
        self.conns.len()
    }

    /// What `source` holds.
    pub fn load(&self, source: IpAddr) -> Load {
        self.sources
            .get(&source.to_canonical())
            .map(|s| s.load)
            .unwrap_or_default()
    }

    /// A new connection `id` from `source`: registered, possibly in place of another, or shed.
    pub fn arrive(&mut self, id: ConnId, source: IpAddr, payload: P) -> Arrival<P> {
        let source = source.to_canonical();
        let heaviest = self.by_fresh.last().map_or(0, |&(n, _)| n);
        let from = match verdict(self.limits, self.open(), self.load(source), heaviest) {
            Verdict::Shed => return Arrival::Shed,
            Verdict::Admit => None,
            Verdict::EvictOwn => Some(source),
            Verdict::EvictHeaviest => self.by_fresh.last().map(|&(_, s)| s),
        };
        let replaced = match from {
            None => None,
            // The counts say the source holds a fresh connection; if not, shed rather than
            // go past the cap.
            Some(victim_source) => match self.oldest_fresh(victim_source) {
                Some(victim) => self.remove(victim).map(|c| c.payload),
                None => return Arrival::Shed,
            },
        };
        self.conns.insert(
            id,
            Conn {
                source,
                fresh: true,
                payload,
            },
        );
        let entry = self.sources.entry(source).or_default();
        entry.load.open += 1;
        entry.queue.push_back(id);
        self.set_fresh(source, 1);
        self.sweep(source);
        match replaced {
            Some(victim) => Arrival::Replaces(victim),
            None => Arrival::Admitted,
        }
    }

    /// `id` has been answered: proven from now on. False when it no longer holds a slot (it
    /// was evicted and is being closed).
    pub fn completed(&mut self, id: ConnId) -> bool {
        let Some(conn) = self.conns.get_mut(&id) else {
            return false;
        };
        if std::mem::take(&mut conn.fresh) {
            let source = conn.source;
            self.set_fresh_down(source);
        }
        true
    }

    /// `id` has closed (or gave up waiting for its slot).
    pub fn closed(&mut self, id: ConnId) {
        self.remove(id);
    }

    fn remove(&mut self, id: ConnId) -> Option<Conn<P>> {
        let conn = self.conns.remove(&id)?;
        if conn.fresh {
            self.set_fresh_down(conn.source);
        }
        if let Some(s) = self.sources.get_mut(&conn.source) {
            s.load.open -= 1;
            if s.load.open == 0 {
                self.sources.remove(&conn.source);
            }
        }
        Some(conn)
    }

    /// The oldest fresh connection of `source`, dropping the answered and closed ones met
    /// on the way.
    fn oldest_fresh(&mut self, source: IpAddr) -> Option<ConnId> {
        let s = self.sources.get_mut(&source)?;
        while let Some(&id) = s.queue.front() {
            if self.conns.get(&id).is_some_and(|c| c.fresh) {
                return Some(id);
            }
            s.queue.pop_front();
        }
        None
    }

    /// Keeps a source's queue within twice its connections: a source that opens and closes
    /// connections without ever being evicted would otherwise grow it without end.
    fn sweep(&mut self, source: IpAddr) {
        let Some(s) = self.sources.get_mut(&source) else {
            return;
        };
        if s.queue.len() > 2 * s.load.fresh + 16 {
            let conns = &self.conns;
            s.queue.retain(|id| conns.get(id).is_some_and(|c| c.fresh));
        }
    }

    fn set_fresh(&mut self, source: IpAddr, up: usize) {
        let Some(s) = self.sources.get_mut(&source) else {
            return;
        };
        self.by_fresh.remove(&(s.load.fresh, source));
        s.load.fresh += up;
        self.by_fresh.insert((s.load.fresh, source));
    }

    fn set_fresh_down(&mut self, source: IpAddr) {
        let Some(s) = self.sources.get_mut(&source) else {
            return;
        };
        self.by_fresh.remove(&(s.load.fresh, source));
        s.load.fresh = s.load.fresh.saturating_sub(1);
        if s.load.fresh > 0 {
            self.by_fresh.insert((s.load.fresh, source));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: CapLimits = CapLimits {
        max: 10,
        per_source: 6,
    };

    fn load(open: usize, fresh: usize) -> Load {
        Load { open, fresh }
    }

    #[test]
    fn verdicts() {
        use Verdict::*;
        // (open in all, the newcomer's source, the heaviest source's fresh count, verdict)
        let table = [
            (0, load(0, 0), 0, Admit),
            (9, load(5, 5), 5, Admit),
            // At the cap: the heaviest source gives up its oldest fresh connection...
            (10, load(0, 0), 4, EvictHeaviest),
            (10, load(2, 1), 4, EvictHeaviest),
            // ...unless the newcomer's own source is (one of) the heaviest: its own oldest
            // if it has been answered before, else it is shed.
            (10, load(5, 3), 3, EvictOwn),
            (10, load(4, 4), 4, Shed),
            (10, load(4, 4), 2, Shed),
            // Every slot proven: nothing to take.
            (10, load(2, 0), 0, Shed),
            (10, load(0, 0), 0, Shed),
            // At the per-source limit, only its own fresh connections, even with free slots,
            // and only for a source answered before.
            (7, load(6, 1), 1, EvictOwn),
            (7, load(6, 6), 1, Shed),
            (7, load(6, 0), 1, Shed),
            (10, load(6, 0), 4, Shed),
            (10, load(6, 2), 4, EvictOwn),
        ];
        for (open, newcomer, heaviest, want) in table {
            assert_eq!(
                verdict(LIMITS, open, newcomer, heaviest),
                want,
                "open {open}, newcomer {newcomer:?}, heaviest {heaviest}"
            );
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    /// A table with `limits`, and a helper that arrives connection ids 1, 2, ... in turn.
    struct Run {
        table: Table<ConnId>,
        next: ConnId,
    }

    impl Run {
        fn new(max: usize, per_source: usize) -> Run {
            Run {
                table: Table::new(CapLimits { max, per_source }),
                next: 0,
            }
        }

        fn arrive(&mut self, source: IpAddr) -> (ConnId, Arrival<ConnId>) {
            self.next += 1;
            (self.next, self.table.arrive(self.next, source, self.next))
        }
    }

    #[test]
    fn a_flooding_source_gets_nothing_more_at_the_cap() {
        let mut run = Run::new(4, 4);
        let (apiserver, attacker) = (ip(1), ip(2));
        let (served, _) = run.arrive(apiserver);
        assert!(run.table.completed(served));
        for _ in 0..3 {
            assert_eq!(run.arrive(attacker).1, Arrival::Admitted);
        }
        // The cap is full: the attacker's next connections are shed, its own stay.
        for _ in 0..5 {
            assert_eq!(run.arrive(attacker).1, Arrival::Shed);
        }
        assert_eq!(run.table.load(apiserver), load(1, 0));
        assert_eq!(run.table.load(attacker), load(3, 3));
        // A new apiserver connection takes the oldest of the attacker's (2; 3 and 4 are
        // left), and the attacker's next one is shed, not given the apiserver's fresh one.
        let (fresh, arrival) = run.arrive(apiserver);
        assert_eq!(arrival, Arrival::Replaces(2));
        assert_eq!(run.arrive(attacker).1, Arrival::Shed);
        assert_eq!(run.table.load(apiserver), load(2, 1));
        assert!(run.table.completed(fresh));
        assert_eq!(run.table.open(), 4);
        // Two flooding sources at a tie shed each other's newcomers as well.
        assert_eq!(run.arrive(ip(3)).1, Arrival::Replaces(3));
        assert_eq!(run.arrive(ip(3)).1, Arrival::Shed, "1 fresh each: a tie");
    }

    #[test]
    fn half_sent_and_silent_alike_are_fresh_until_answered() {
        // The table does not know what a fresh connection has sent: a head sent by half is
        // evicted as a silent connection is. Only an answer protects a connection.
        let mut run = Run::new(3, 3);
        let (source, other) = (ip(1), ip(2));
        let ids: Vec<_> = (0..3).map(|_| run.arrive(source).0).collect();
        assert!(run.table.completed(ids[1]));
        let (first, arrival) = run.arrive(other);
        assert_eq!(arrival, Arrival::Replaces(ids[0]));
        assert!(run.table.completed(first));
        assert_eq!(
            run.arrive(other).1,
            Arrival::Replaces(ids[2]),
            "not the answered one"
        );
        assert_eq!(
            run.arrive(other).1,
            Arrival::Replaces(5),
            "its own oldest: it has been answered before"
        );
        assert_eq!(run.table.load(source), load(1, 0));
        assert_eq!(run.table.load(other), load(2, 1));
    }

    #[test]
    fn a_client_sharing_its_address_with_a_flood_still_gets_in() {
        // The apiserver behind a NAT, and a flood from the same address: the address has
        // been answered before, so its newcomer takes the oldest fresh slot of its own.
        let mut run = Run::new(4, 4);
        let shared = ip(1);
        let (client, _) = run.arrive(shared);
        assert!(run.table.completed(client));
        for _ in 0..3 {
            run.arrive(shared);
        }
        assert_eq!(run.arrive(shared).1, Arrival::Replaces(2));
        assert_eq!(run.table.load(shared), load(4, 3));
    }

    #[test]
    fn when_every_slot_is_proven_the_newcomer_is_shed_until_one_closes() {
        let mut run = Run::new(2, 2);
        let (a, _) = run.arrive(ip(1));
        let (b, _) = run.arrive(ip(2));
        assert!(run.table.completed(a) && run.table.completed(b));
        assert_eq!(run.arrive(ip(3)).1, Arrival::Shed);
        assert_eq!(
            run.table.load(ip(3)),
            load(0, 0),
            "a shed one is not counted"
        );
        run.table.closed(b);
        assert_eq!(run.arrive(ip(3)).1, Arrival::Admitted);
    }

    #[test]
    fn a_source_past_its_share_keeps_the_rest_for_others() {
        // A source that gets each connection answered once is proven on all of them; the
        // per-source limit still leaves the other slots to the other sources.
        let mut run = Run::new(6, 3);
        let (greedy, other) = (ip(1), ip(2));
        for _ in 0..3 {
            let (id, arrival) = run.arrive(greedy);
            assert_eq!(arrival, Arrival::Admitted);
            assert!(run.table.completed(id));
        }
        assert_eq!(run.arrive(greedy).1, Arrival::Shed, "all three proven");
        for _ in 0..3 {
            assert_eq!(run.arrive(other).1, Arrival::Admitted);
        }
        // At its limit, a source answered before gives up a fresh one of its own first; one
        // never answered is shed.
        let mut run = Run::new(6, 2);
        let (first, _) = run.arrive(greedy);
        let (second, _) = run.arrive(greedy);
        assert!(run.table.completed(second));
        assert_eq!(run.arrive(greedy).1, Arrival::Replaces(first));
        run.arrive(other);
        run.arrive(other);
        assert_eq!(run.arrive(other).1, Arrival::Shed);
        assert_eq!(run.table.load(other), load(2, 2));
    }

    #[test]
    fn an_evicted_connection_is_not_proven_by_a_late_answer() {
        let mut run = Run::new(1, 1);
        let (victim, _) = run.arrive(ip(1));
        assert_eq!(run.arrive(ip(2)).1, Arrival::Replaces(victim));
        assert!(!run.table.completed(victim), "gone: it is being closed");
        run.table.closed(victim);
        assert_eq!(
            run.table.open(),
            1,
            "closing the evicted one frees nothing more"
        );
    }

    #[test]
    fn sources_are_forgotten_and_queues_stay_small() {
        let mut run = Run::new(8, 8);
        let v4: IpAddr = "192.0.2.1".parse().expect("ip");
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().expect("ip");
        let (kept, _) = run.arrive(v4);
        assert!(run.table.completed(kept));
        for _ in 0..10_000 {
            let (id, _) = run.arrive(mapped);
            assert!(run.table.completed(id));
            run.table.closed(id);
        }
        assert_eq!(run.table.load(v4), load(1, 0), "mapped counts as IPv4");
        let queued: usize = run.table.sources.values().map(|s| s.queue.len()).sum();
        assert!(queued <= 32, "{queued} queue entries for 1 connection");
        run.table.closed(kept);
        assert!(run.table.sources.is_empty() && run.table.by_fresh.is_empty());
    }
}
