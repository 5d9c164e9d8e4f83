//! Who gives up a slot when a connection cap is reached: the policy behind [`super::Guard`],
//! kept free of IO and clocks so a table of arrivals can test it.
//!
//! A connection is *fresh* until it has been answered once (its first request completed), and
//! *proven* after. What it is doing now is its [`Standing`]: *unfinished* (fresh, nothing in
//! flight: in its TLS handshake, or set up but its first request not in yet; the latter go
//! first, oldest first: they wait on their client, one in its handshake may be waiting on
//! the server's turn for its key exchange), *idle* (proven, nothing in
//! flight: a kept-alive connection between requests), *busy* (a request in flight), and busy
//! but *stalled* when no request has started or finished on it for `stalled` (a body that
//! never comes). The rules, and why:
//!
//! - **A busy connection that is not stalled is never evicted**, by anyone: closing it would
//!   throw an answer away, and its request ends within the server's own deadline. A stalled
//!   one only as a last resort (below): otherwise a client that keeps a request in flight on
//!   every connection of its address, its bodies never sent, would hold the address's share.
//! - **Across sources, a proven connection is never evicted.** The apiserver keeps its
//!   connections for minutes and answers arrive on them every few milliseconds; once a
//!   connection has been served it stays out of reach of other addresses' newcomers. At the
//!   cap, **a newcomer evicts the oldest unfinished connection of the source holding the most
//!   fresh connections** (unfinished, or stalled on its first request), when that source holds
//!   more fresh ones than its own: a newcomer from a lighter source (the apiserver's next
//!   connection) takes a slot from the heaviest.
//!   Evicting "only silent" connections was not enough: a head sent by half is not silent,
//!   and 1,030 of them held every slot of a cap of 1,024.
//! - **Within one source, a newcomer is never refused because that source's slots are held by
//!   connections that have not completed a request.** When it must take a slot of its own
//!   source (the source is at `per_source`, or it is the heaviest at the cap), it evicts that
//!   source's least valuable connection: the oldest unfinished one first, else the idle one
//!   that finished its last request longest ago, else the one stalled longest; with every one
//!   of its source's connections busy and making progress, it is shed. An address is shared
//!   in real clusters (traffic
//!   masqueraded to a node's address, hostNetwork pods, a proxy, tunnel or NAT in front of the
//!   apiserver), so a client that completes its requests must get in beside a flood from its
//!   own address, slower at worst: a flood has to open more connections than the source's
//!   share within the time one honest request takes to push it out. The cost: a flood's
//!   every newcomer now gets its TLS handshake (before, one from a source never answered was
//!   closed before it), as a flood from many addresses always did; the flood pays one
//!   handshake per attempt as well.
//! - **A source holds at most `per_source` connections**, fresh and proven together. This
//!   bounds a client that completes one cheap request per connection (to become proven) and
//!   then holds it: however it behaves, the slots beyond `per_source` stay with the others.
//!
//! A source is an IP address (an IPv4-mapped IPv6 address counts as the IPv4 one).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;

/// A connection's number, unique for the life of the process.
pub type ConnId = u64;

/// The cap on all connections and on those of one source, and when a busy one is stalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapLimits {
    pub max: usize,
    pub per_source: usize,
    /// A busy connection with no request started or finished for this long (in the caller's
    /// unit of time, milliseconds for the guard) is stalled.
    pub stalled: u64,
}

/// What one source holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    /// Connections open (fresh and proven).
    pub open: usize,
    /// Of those, the ones not yet answered once.
    pub fresh: usize,
}

/// Where a newcomer's slot comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A slot is free: take it.
    Admit,
    /// Take the slot of the least valuable connection of the newcomer's own source.
    EvictOwn,
    /// Take the slot of the oldest unfinished connection of the heaviest source (another one).
    EvictHeaviest,
    /// Close the newcomer (before its TLS handshake).
    Shed,
}

/// The decision for a newcomer whose source holds `newcomer`, with `open` connections in all
/// and `heaviest_fresh` fresh ones at the source holding the most.
pub fn verdict(limits: CapLimits, open: usize, newcomer: Load, heaviest_fresh: usize) -> Verdict {
    if newcomer.open >= limits.per_source {
        Verdict::EvictOwn
    } else if open < limits.max {
        Verdict::Admit
    } else if heaviest_fresh > newcomer.fresh {
        Verdict::EvictHeaviest
    } else if newcomer.open > 0 {
        Verdict::EvictOwn
    } else {
        Verdict::Shed
    }
}

/// What a connection is doing, as far as choosing a victim goes. Times are the caller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Never answered and nothing in flight: in its handshake (`setting_up`), or its first
    /// request not in.
    Unfinished { setting_up: bool },
    /// Answered before and nothing in flight: a kept-alive connection between requests,
    /// since its last request finished.
    Idle { since: u64 },
    /// A request in flight; `since` the last request started on it from idle or finished.
    Busy { since: u64 },
    /// Evicted or closed already (its slot is given back when its close is registered).
    Gone,
}

/// A connection as the table sees it: what it is doing, and how to tell it to close.
pub trait Occupant {
    fn standing(&self) -> Standing;
    /// Marks it evicted unless a request is in flight on it, or even then with `busy`
    /// (checked and marked atomically: a request that starts meanwhile keeps it, unless
    /// `busy`); true when it was marked.
    fn evict(&self, busy: bool) -> bool;
}

/// What [`Table::arrive`] did with a newcomer.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival<P> {
    /// Registered in a free slot.
    Admitted,
    /// Registered in the slot of this (now unregistered and marked evicted) connection, which
    /// must be closed.
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
    /// The source's fresh connections in order of arrival; also ids that have since been
    /// answered or closed, dropped when met at the front and swept when they outnumber the
    /// fresh ones.
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

impl<P: Occupant + Clone> Table<P> {
    pub fn new(limits: CapLimits) -> Self {
        Table {
            limits: CapLimits {
                max: limits.max.max(1),
                per_source: limits.per_source.max(1),
                stalled: limits.stalled,
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

    /// A new connection `id` from `source` at time `now`: registered, possibly in place of
    /// another (marked evicted here), or shed.
    pub fn arrive(&mut self, id: ConnId, source: IpAddr, payload: P, now: u64) -> Arrival<P> {
        let source = source.to_canonical();
        let heaviest = self.by_fresh.last().copied();
        let heaviest_fresh = heaviest.map_or(0, |(n, _)| n);
        let victim = match verdict(self.limits, self.open(), self.load(source), heaviest_fresh) {
            Verdict::Shed => return Arrival::Shed,
            Verdict::Admit => None,
            Verdict::EvictOwn => match self.least_valuable(source, now) {
                Some(victim) => Some(victim),
                None => return Arrival::Shed,
            },
            Verdict::EvictHeaviest => {
                // Its fresh connections may all have a first request in flight and making
                // progress: then the newcomer's own source is the next place to look.
                let from_heaviest = heaviest.and_then(|(_, s)| self.oldest_fresh(s, Some(now)));
                match from_heaviest.or_else(|| self.least_valuable(source, now)) {
                    Some(victim) => Some(victim),
                    None => return Arrival::Shed,
                }
            }
        };
        let replaced = victim.and_then(|v| self.remove(v)).map(|c| c.payload);
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

    /// The least valuable connection of `source`, marked evicted: the oldest unfinished one,
    /// else the idle one whose last request finished longest ago, else the one stalled
    /// longest. Never a busy one making progress.
    fn least_valuable(&mut self, source: IpAddr, now: u64) -> Option<ConnId> {
        let stalled = self.limits.stalled;
        self.oldest_fresh(source, None)
            .or_else(|| self.longest(source, false, |s| matches!(s, Standing::Idle { .. })))
            .or_else(|| {
                self.longest(source, true, |s| {
                    matches!(s, Standing::Busy { since } if now.saturating_sub(since) >= stalled)
                })
            })
    }

    /// The oldest fresh connection of `source` that is unfinished (or, given the time, stalled
    /// on its first request), marked evicted; drops the answered and closed ones met at the
    /// front of its queue.
    fn oldest_fresh(&mut self, source: IpAddr, stalled_at: Option<u64>) -> Option<ConnId> {
        let stalled = self.limits.stalled;
        let s = self.sources.get_mut(&source)?;
        let conns = &self.conns;
        let fresh = |id: &ConnId| conns.get(id).filter(|c| c.fresh);
        while s.queue.front().is_some_and(|id| fresh(id).is_none()) {
            s.queue.pop_front();
        }
        // Past the front: fresh ones with a first request in flight are passed over, not
        // dropped (they are still fresh); answered or closed ones are left for the sweep. Set
        // up ones (and stalled ones, given the time) first, then those still setting up.
        let set_up = s.queue.iter().copied().find(|id| {
            fresh(id).is_some_and(|c| match (c.payload.standing(), stalled_at) {
                (Standing::Unfinished { setting_up: false }, _) => c.payload.evict(false),
                (Standing::Busy { since }, Some(now)) => {
                    now.saturating_sub(since) >= stalled && c.payload.evict(true)
                }
                _ => false,
            })
        });
        set_up.or_else(|| {
            s.queue.iter().copied().find(|id| {
                fresh(id).is_some_and(|c| {
                    c.payload.standing() == Standing::Unfinished { setting_up: true }
                        && c.payload.evict(false)
                })
            })
        })
    }

    /// Of the connections of `source` whose standing `pick` accepts, the one whose `since` is
    /// the oldest, marked evicted (with `busy`, even with a request in flight). A scan of the
    /// table: it runs only when the source has nothing unfinished.
    fn longest(
        &self,
        source: IpAddr,
        busy: bool,
        pick: impl Fn(Standing) -> bool,
    ) -> Option<ConnId> {
        let mut found: Vec<(u64, ConnId)> = self
            .conns
            .iter()
            .filter(|(_, c)| c.source == source)
            .filter_map(|(&id, c)| match c.payload.standing() {
                s @ (Standing::Idle { since } | Standing::Busy { since }) if pick(s) => {
                    Some((since, id))
                }
                _ => None,
            })
            .collect();
        found.sort_unstable();
        // One whose standing changed since it was looked at (a request started on an idle
        // one) stays.
        found
            .into_iter()
            .map(|(_, id)| id)
            .find(|id| self.conns.get(id).is_some_and(|c| c.payload.evict(busy)))
    }

    /// Keeps a source's queue within twice its fresh connections: a source that opens and
    /// closes connections without ever being evicted would otherwise grow it without end.
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
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;

    const LIMITS: CapLimits = CapLimits {
        max: 10,
        per_source: 6,
        stalled: 1000,
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
            // At the cap: the heaviest source gives up its oldest unfinished connection...
            (10, load(0, 0), 4, EvictHeaviest),
            (10, load(2, 1), 4, EvictHeaviest),
            // ...unless the newcomer's own source is (one of) the heaviest: then its own least
            // valuable, whether or not the source has been answered before.
            (10, load(5, 3), 3, EvictOwn),
            (10, load(4, 4), 4, EvictOwn),
            (10, load(4, 4), 2, EvictOwn),
            // Every slot proven: its own idle ones if it has any (the table sheds it when
            // all of them are busy), else nothing to take.
            (10, load(2, 0), 0, EvictOwn),
            (10, load(0, 0), 0, Shed),
            // At the per-source limit, only its own, even with free slots.
            (7, load(6, 1), 1, EvictOwn),
            (7, load(6, 6), 1, EvictOwn),
            (7, load(6, 0), 1, EvictOwn),
            (10, load(6, 0), 4, EvictOwn),
        ];
        for (open, newcomer, heaviest, want) in table {
            assert_eq!(
                verdict(LIMITS, open, newcomer, heaviest),
                want,
                "open {open}, newcomer {newcomer:?}, heaviest {heaviest}"
            );
        }
    }

    /// A connection whose standing the test sets (set up, with nothing in flight, at first).
    struct Fake {
        standing: Cell<Standing>,
    }

    #[derive(Clone)]
    struct Handle(Rc<Fake>);

    impl Occupant for Handle {
        fn standing(&self) -> Standing {
            self.0.standing.get()
        }

        fn evict(&self, busy: bool) -> bool {
            match self.0.standing.get() {
                Standing::Gone => false,
                Standing::Busy { .. } if !busy => false,
                Standing::Unfinished { .. } | Standing::Idle { .. } | Standing::Busy { .. } => {
                    self.0.standing.set(Standing::Gone);
                    true
                }
            }
        }
    }

    impl PartialEq for Handle {
        fn eq(&self, other: &Self) -> bool {
            Rc::ptr_eq(&self.0, &other.0)
        }
    }

    impl std::fmt::Debug for Handle {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{:?}", self.0.standing.get())
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    /// A table, the connections given to it by id (1, 2, ...) and a clock (milliseconds)
    /// that moves on by one at each answer, or as a test says.
    struct Run {
        table: Table<Handle>,
        conns: Vec<Handle>,
        clock: u64,
    }

    impl Run {
        fn new(max: usize, per_source: usize) -> Run {
            Run {
                table: Table::new(CapLimits {
                    max,
                    per_source,
                    stalled: 1000,
                }),
                conns: Vec::new(),
                clock: 0,
            }
        }

        /// A newcomer from `source`: its id, and what happened, naming the victim by id.
        fn arrive(&mut self, source: IpAddr) -> (ConnId, Result<Option<ConnId>, ()>) {
            let handle = Handle(Rc::new(Fake {
                standing: Cell::new(Standing::Unfinished { setting_up: false }),
            }));
            self.conns.push(handle.clone());
            let id = self.conns.len() as ConnId;
            let outcome = match self.table.arrive(id, source, handle, self.clock) {
                Arrival::Admitted => Ok(None),
                Arrival::Replaces(victim) => Ok(Some(self.id_of(&victim))),
                Arrival::Shed => Err(()),
            };
            (id, outcome)
        }

        fn id_of(&self, handle: &Handle) -> ConnId {
            let at = self.conns.iter().position(|h| h == handle).expect("known");
            at as ConnId + 1
        }

        fn set(&self, id: ConnId, standing: Standing) {
            self.conns[id as usize - 1].0.standing.set(standing);
        }

        /// `id` answered a request and is idle now.
        fn answered(&mut self, id: ConnId) {
            self.clock += 1;
            self.set(id, Standing::Idle { since: self.clock });
            assert!(self.table.completed(id));
        }

        /// A request started on `id` now.
        fn busy(&mut self, id: ConnId) {
            self.set(id, Standing::Busy { since: self.clock });
        }
    }

    const SHED: Result<Option<ConnId>, ()> = Err(());

    fn replaces(id: ConnId) -> Result<Option<ConnId>, ()> {
        Ok(Some(id))
    }

    const ADMITTED: Result<Option<ConnId>, ()> = Ok(None);

    #[test]
    fn a_flooding_source_replaces_its_own_and_never_a_proven_one_of_another() {
        let mut run = Run::new(4, 4);
        let (apiserver, attacker) = (ip(1), ip(2));
        let (served, _) = run.arrive(apiserver);
        run.answered(served);
        for _ in 0..3 {
            assert_eq!(run.arrive(attacker).1, ADMITTED);
        }
        // The cap is full: each of the attacker's newcomers takes its own oldest (2, 3, 4,
        // then its own newcomers), never the apiserver's answered connection.
        for victim in [2, 3, 4, 5, 6] {
            assert_eq!(run.arrive(attacker).1, replaces(victim));
        }
        assert_eq!(run.table.load(apiserver), load(1, 0));
        assert_eq!(run.table.load(attacker), load(3, 3));
        // A new apiserver connection takes the attacker's oldest unfinished (7).
        let (fresh, arrival) = run.arrive(apiserver);
        assert_eq!(arrival, replaces(7));
        assert_eq!(run.table.load(apiserver), load(2, 1));
        // The attacker's next newcomer: the heaviest is itself, so its own oldest (8), not
        // the apiserver's fresh one.
        assert_eq!(run.arrive(attacker).1, replaces(8));
        run.answered(fresh);
        assert_eq!(run.table.open(), 4);
        // Another address at the cap takes from the heaviest (the attacker's 9)...
        let (third, arrival) = run.arrive(ip(3));
        assert_eq!(arrival, replaces(9));
        // ...and two sources tied at one fresh each: each newcomer replaces its own.
        assert_eq!(run.arrive(ip(3)).1, replaces(third));
    }

    #[test]
    fn a_busy_connection_is_not_evicted_before_it_stalls() {
        let mut run = Run::new(3, 3);
        let source = ip(1);
        let ids: Vec<_> = (0..3).map(|_| run.arrive(source).0).collect();
        // The first request of the oldest is in flight: passed over, not dropped.
        run.busy(ids[0]);
        assert_eq!(run.arrive(source).1, replaces(ids[1]));
        // Busy ones all round, one idle: the idle one goes.
        run.busy(ids[2]);
        run.busy(4);
        assert_eq!(run.arrive(source).1, SHED, "every connection is busy");
        run.set(ids[0], Standing::Idle { since: 1 });
        assert!(run.table.completed(ids[0]));
        assert_eq!(run.arrive(source).1, replaces(ids[0]));
        // Another source: busy ones are not taken either.
        run.busy(6);
        assert_eq!(run.arrive(ip(2)).1, SHED);
    }

    #[test]
    fn within_a_source_unfinished_ones_go_before_idle_ones_and_idle_ones_by_age() {
        // A client and a flood behind one address: the client's kept-alive connections are
        // idle between requests and stay while the flood holds anything unfinished.
        let mut run = Run::new(10, 5);
        let shared = ip(1);
        let (a, _) = run.arrive(shared);
        let (b, _) = run.arrive(shared);
        run.answered(a);
        run.answered(b);
        for _ in 0..3 {
            assert_eq!(run.arrive(shared).1, ADMITTED);
        }
        for victim in [3, 4, 5, 6, 7] {
            assert_eq!(run.arrive(shared).1, replaces(victim));
        }
        assert_eq!(run.table.load(shared), load(5, 3));
        // The flood's connections answered too (it completes requests: it is a client like
        // the others): then the idle connection that finished longest ago goes first.
        run.answered(b);
        for id in [8, 9, 10] {
            run.answered(id);
        }
        assert_eq!(run.arrive(shared).1, replaces(a), "a finished first");
        assert_eq!(run.arrive(shared).1, replaces(11), "unfinished first");
        assert_eq!(run.arrive(shared).1, replaces(12));
        run.answered(13);
        assert_eq!(run.arrive(shared).1, replaces(b));
    }

    #[test]
    fn a_new_client_behind_a_flooded_address_gets_in() {
        // The case: the address never answered before, its share held by unfinished
        // heads; the newcomer takes the oldest, and is the youngest after: the flood must
        // open the whole share again before it would be taken.
        let mut run = Run::new(1024, 4);
        let shared = ip(1);
        for _ in 0..4 {
            assert_eq!(run.arrive(shared).1, ADMITTED);
        }
        let (client, arrival) = run.arrive(shared);
        assert_eq!(arrival, replaces(1));
        for victim in [2, 3, 4] {
            assert_eq!(run.arrive(shared).1, replaces(victim));
        }
        // Its request arrives in time: busy, then answered; the flood goes on around it.
        run.busy(client);
        for victim in [6, 7, 8] {
            assert_eq!(run.arrive(shared).1, replaces(victim));
        }
        run.answered(client);
        for victim in [9, 10, 11, 12] {
            assert_eq!(run.arrive(shared).1, replaces(victim));
        }
        assert_eq!(run.table.load(shared), load(4, 3));
    }

    #[test]
    fn a_connection_still_in_its_handshake_goes_after_the_set_up_ones() {
        // The newcomer waits for the server's turn at its key exchange while the flood's newer
        // connections arrive: the flood's set-up ones (silent, or a head half-sent) go first.
        let mut run = Run::new(10, 3);
        let shared = ip(1);
        for _ in 0..3 {
            assert_eq!(run.arrive(shared).1, ADMITTED);
        }
        let (client, arrival) = run.arrive(shared);
        assert_eq!(arrival, replaces(1));
        run.set(client, Standing::Unfinished { setting_up: true });
        for victim in [2, 3, 5, 6, 7] {
            assert_eq!(run.arrive(shared).1, replaces(victim));
        }
        // Nothing set up left but the client: then it goes (the oldest still setting up).
        for id in [8, 9] {
            run.set(id, Standing::Unfinished { setting_up: true });
        }
        assert_eq!(run.arrive(shared).1, replaces(client));
    }

    #[test]
    fn a_stalled_connection_goes_last_and_one_making_progress_never() {
        // A client keeping a request in flight on every connection of its address, its bodies
        // never sent: the address's newcomer is not shut out for more than the stall.
        let mut run = Run::new(10, 3);
        let shared = ip(1);
        let ids: Vec<_> = (0..3).map(|_| run.arrive(shared).0).collect();
        for &id in &ids {
            run.busy(id);
        }
        run.clock = 500;
        assert_eq!(run.arrive(shared).1, SHED, "busy, not stalled yet");
        // The second finishes a request and starts another: progress.
        run.answered(ids[1]);
        run.busy(ids[1]);
        run.clock = 1200;
        assert_eq!(run.arrive(shared).1, replaces(ids[0]), "stalled longest");
        // An unfinished one goes first, then an idle one before a stalled one.
        assert_eq!(run.arrive(shared).1, replaces(5));
        run.busy(6);
        run.answered(ids[1]);
        assert_eq!(
            run.arrive(shared).1,
            replaces(ids[1]),
            "idle before stalled"
        );
        run.busy(7);
        assert_eq!(
            run.arrive(shared).1,
            replaces(ids[2]),
            "then the stalled one"
        );
        // Busy ones making progress: none is taken.
        run.busy(8);
        assert_eq!(run.arrive(shared).1, SHED);
    }

    #[test]
    fn across_addresses_a_first_request_stalled_is_taken_an_answered_one_never() {
        let mut run = Run::new(2, 2);
        let (flood, other) = (ip(1), ip(2));
        let (first, _) = run.arrive(flood);
        let (second, _) = run.arrive(flood);
        run.busy(first);
        run.busy(second);
        run.clock = 500;
        assert_eq!(
            run.arrive(other).1,
            SHED,
            "first requests in flight, not stalled"
        );
        run.clock = 1000;
        assert_eq!(
            run.arrive(other).1,
            replaces(first),
            "stalled on its first request"
        );
        // Answered before, then stalled: another address's newcomer leaves it alone.
        run.answered(second);
        run.busy(second);
        run.busy(4);
        run.clock = 5000;
        assert_eq!(
            run.arrive(ip(3)).1,
            replaces(4),
            "the other's first request, stalled"
        );
        assert_eq!(run.arrive(ip(4)).1, replaces(5));
        run.busy(6);
        run.clock = 5500;
        assert_eq!(
            run.arrive(ip(5)).1,
            SHED,
            "an answered stalled one stays, and a first request making progress"
        );
    }

    #[test]
    fn when_every_slot_is_proven_another_source_is_shed_until_one_closes() {
        let mut run = Run::new(2, 2);
        let (a, _) = run.arrive(ip(1));
        let (b, _) = run.arrive(ip(2));
        run.answered(a);
        run.answered(b);
        assert_eq!(run.arrive(ip(3)).1, SHED);
        assert_eq!(
            run.table.load(ip(3)),
            load(0, 0),
            "a shed one is not counted"
        );
        // Its own idle one, though, a source may replace.
        assert_eq!(run.arrive(ip(2)).1, replaces(b));
        run.table.closed(a);
        assert_eq!(run.arrive(ip(3)).1, ADMITTED);
    }

    #[test]
    fn a_source_past_its_share_keeps_the_rest_for_others() {
        // A source that gets each connection answered once is proven on all of them; the
        // per-source limit still leaves the other slots to the other sources.
        let mut run = Run::new(6, 3);
        let (greedy, other) = (ip(1), ip(2));
        for _ in 0..3 {
            let (id, arrival) = run.arrive(greedy);
            assert_eq!(arrival, ADMITTED);
            run.answered(id);
            run.busy(id);
        }
        assert_eq!(run.arrive(greedy).1, SHED, "all three busy");
        for _ in 0..3 {
            assert_eq!(run.arrive(other).1, ADMITTED);
        }
        assert_eq!(run.table.load(greedy), load(3, 0));
        assert_eq!(run.table.load(other), load(3, 3));
        // At its limit, a source takes its own oldest unfinished, never another's.
        assert_eq!(run.arrive(other).1, replaces(5));
    }

    #[test]
    fn an_evicted_connection_is_not_proven_by_a_late_answer() {
        let mut run = Run::new(1, 1);
        let (victim, _) = run.arrive(ip(1));
        assert_eq!(run.arrive(ip(2)).1, replaces(victim));
        assert_eq!(run.conns[0].0.standing.get(), Standing::Gone, "marked");
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
        run.answered(kept);
        for _ in 0..10_000 {
            let (id, _) = run.arrive(mapped);
            run.answered(id);
            run.table.closed(id);
        }
        assert_eq!(run.table.load(v4), load(1, 0), "mapped counts as IPv4");
        let queued: usize = run.table.sources.values().map(|s| s.queue.len()).sum();
        assert!(queued <= 32, "{queued} queue entries for 1 connection");
        run.table.closed(kept);
        assert!(run.table.sources.is_empty() && run.table.by_fresh.is_empty());
    }
}
