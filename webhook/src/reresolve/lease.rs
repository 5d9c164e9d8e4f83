//! Leader election on a `coordination.k8s.io/v1` Lease: the decisions (pure), with client-go's
//! semantics.
//!
//! - A lease held by someone else counts as expired only when its record has not changed for
//!   `leaseDurationSeconds` *as measured by this process's clock* since it first saw that
//!   record (client-go's `observedTime`): no comparison of another node's timestamps with
//!   ours, so clock skew between nodes cannot make two holders.
//! - Every write of the record is guarded by the resourceVersion it was decided on; of two
//!   candidates for an expired lease exactly one write succeeds, the other gets 409.
//! - A holder acts only while its last successful renewal is younger than the renew deadline,
//!   which is shorter than the lease duration: a holder cut off from the API server stops
//!   writing before anyone else may take over.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

/// Timing of the election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long a record that stopped changing keeps others away.
    pub lease_duration: Duration,
    /// How long after its last successful renewal a holder keeps acting.
    pub renew_deadline: Duration,
    /// How often candidates look and holders renew.
    pub retry_period: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    #[error("the renew deadline ({renew:?}) must be shorter than the lease duration ({lease:?})")]
    DeadlineNotBelowDuration { renew: Duration, lease: Duration },
    #[error("the retry period ({retry:?}) must be shorter than the renew deadline ({renew:?})")]
    RetryNotBelowDeadline { retry: Duration, renew: Duration },
    #[error("the lease duration must be at least one second")]
    DurationTooShort,
}

impl LeaseTiming {
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, TimingError> {
        if lease_duration < Duration::from_secs(1) {
            return Err(TimingError::DurationTooShort);
        }
        if renew_deadline >= lease_duration {
            return Err(TimingError::DeadlineNotBelowDuration {
                renew: renew_deadline,
                lease: lease_duration,
            });
        }
        if retry_period >= renew_deadline {
            return Err(TimingError::RetryNotBelowDeadline {
                retry: retry_period,
                renew: renew_deadline,
            });
        }
        Ok(LeaseTiming {
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }

    /// `leaseDurationSeconds` as written (whole seconds, rounded up).
    pub fn duration_seconds(&self) -> i32 {
        let secs =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(secs).unwrap_or(i32::MAX)
    }
}

/// What to do with the lease after reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAction {
    /// No Lease object: create it, holding it.
    Create,
    /// Free or expired: take it (guarded by its resourceVersion).
    Acquire,
    /// Ours: renew it.
    Renew,
    /// Someone else holds it and it is not expired; it expires for us in `expires_in` unless
    /// its record changes first.
    Wait {
        holder: String,
        expires_in: Duration,
    },
}

/// The part of a record whose change proves its holder alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordStamp {
    holder: Option<String>,
    renew_time: Option<String>,
    transitions: Option<i32>,
}

impl RecordStamp {
    pub fn of(spec: &LeaseSpec) -> Self {
        RecordStamp {
            holder: holder(spec).map(str::to_owned),
            renew_time: spec.renew_time.as_ref().map(|t| t.0.to_string()),
            transitions: spec.lease_transitions,
        }
    }
}

/// When this process first saw the current record.
#[derive(Debug, Clone)]
pub struct Observed {
    pub stamp: RecordStamp,
    pub at: Instant,
}

impl Observed {
    /// The holder of the record last read, if any.
    pub fn holder(&self) -> Option<&str> {
        self.stamp.holder.as_deref()
    }

    /// Updates the observation with the record just read: the time moves only when the record
    /// changed.
    pub fn update(previous: Option<Observed>, spec: &LeaseSpec, now: Instant) -> Observed {
        let stamp = RecordStamp::of(spec);
        match previous {
            Some(p) if p.stamp == stamp => p,
            _ => Observed { stamp, at: now },
        }
    }
}

fn holder(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref().filter(|h| !h.is_empty())
}

/// The decision after a read: `spec` is `None` when no Lease exists.
pub fn decide(
    me: &str,
    spec: Option<&LeaseSpec>,
    observed: Option<&Observed>,
    now: Instant,
    timing: &LeaseTiming,
) -> LeaseAction {
    let Some(spec) = spec else {
        return LeaseAction::Create;
    };
    match holder(spec) {
        None => LeaseAction::Acquire,
        Some(h) if h == me => LeaseAction::Renew,
        Some(h) => {
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(timing.lease_duration, Duration::from_secs);
            let seen_at = observed.map_or(now, |o| o.at);
            match duration.checked_sub(now.saturating_duration_since(seen_at)) {
                Some(expires_in) if !expires_in.is_zero() => LeaseAction::Wait {
                    holder: h.to_owned(),
                    expires_in,
                },
                _ => LeaseAction::Acquire,
            }
        }
    }
}

/// The record to write for `action` (`Create`, `Acquire` or `Renew`), at wall time `now`.
pub fn next_spec(
    action: &LeaseAction,
    me: &str,
    current: Option<&LeaseSpec>,
    now: Timestamp,
    timing: &LeaseTiming,
) -> LeaseSpec {
    let mut spec = current.cloned().unwrap_or_default();
    let taking = !matches!(action, LeaseAction::Renew);
    if taking {
        let had_holder = current.and_then(holder).is_some();
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(
            current
                .and_then(|s| s.lease_transitions)
                .unwrap_or(0)
                .saturating_add(i32::from(had_holder)),
        );
    }
    spec.holder_identity = Some(me.to_owned());
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(timing.duration_seconds());
    spec
}

/// The record that hands the lease back on shutdown: no holder, so the next candidate takes it
/// at once instead of waiting out the duration.
pub fn released_spec(current: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        renew_time: Some(MicroTime(now)),
        lease_duration_seconds: Some(1),
        ..current.clone()
    }
}

/// The shortest wait between two looks, so that a record with a zero or tiny duration cannot
/// turn the loop into a busy one.
const MIN_LOOK: Duration = Duration::from_millis(100);

/// How long to wait before the next look at the Lease: the retry period, or less when someone
/// else's lease expires sooner. Looking only every retry period, a candidate would take over
/// on the first look after the expiry, up to one period late; with the observation itself up
/// to one period after the holder's last renewal, that made the takeover after a holder's
/// death up to duration + two periods (18 s with 15 s and 2 s) instead of duration + one.
pub fn next_look(action: &LeaseAction, timing: &LeaseTiming) -> Duration {
    match action {
        LeaseAction::Wait { expires_in, .. } => {
            (*expires_in).min(timing.retry_period).max(MIN_LOOK)
        }
        _ => timing.retry_period,
    }
}

/// Whether a holder whose last successful renewal was at `renewed` may still act.
pub fn may_act(renewed: Option<Instant>, now: Instant, timing: &LeaseTiming) -> bool {
    renewed.is_some_and(|at| now.saturating_duration_since(at) < timing.renew_deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> LeaseTiming {
        LeaseTiming::new(
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2),
        )
        .expect("timing")
    }

    fn spec(holder: Option<&str>, renew: i64, duration: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: Some(MicroTime(
                Timestamp::from_second(1_700_000_000 + renew).expect("ts"),
            )),
            lease_duration_seconds: duration,
            lease_transitions: Some(3),
            ..Default::default()
        }
    }

    #[test]
    fn timing_is_checked() {
        let s = Duration::from_secs;
        assert!(LeaseTiming::new(s(15), s(10), s(2)).is_ok());
        assert!(matches!(
            LeaseTiming::new(s(10), s(10), s(2)),
            Err(TimingError::DeadlineNotBelowDuration { .. })
        ));
        assert!(matches!(
            LeaseTiming::new(s(15), s(2), s(2)),
            Err(TimingError::RetryNotBelowDeadline { .. })
        ));
        assert!(matches!(
            LeaseTiming::new(
                Duration::from_millis(500),
                Duration::from_millis(400),
                Duration::from_millis(100)
            ),
            Err(TimingError::DurationTooShort)
        ));
        assert_eq!(
            LeaseTiming::new(
                Duration::from_millis(1500),
                s(1),
                Duration::from_millis(500)
            )
            .expect("ok")
            .duration_seconds(),
            2
        );
    }

    #[test]
    fn decisions() {
        let t = timing();
        let t0 = Instant::now();
        let other = spec(Some("b"), 0, Some(15));
        let seen_t0 = Observed::update(None, &other, t0);
        let s = Duration::from_secs;
        for (record, observed, now, want) in [
            (None, None, t0, LeaseAction::Create),
            (Some(spec(None, 0, None)), None, t0, LeaseAction::Acquire),
            (
                Some(spec(Some(""), 0, None)),
                None,
                t0,
                LeaseAction::Acquire,
            ),
            (
                Some(spec(Some("a"), 0, Some(15))),
                None,
                t0,
                LeaseAction::Renew,
            ),
            // Someone else's, first seen now: wait the whole duration, whatever its timestamps say.
            (
                Some(other.clone()),
                None,
                t0,
                LeaseAction::Wait {
                    holder: "b".into(),
                    expires_in: s(15),
                },
            ),
            (
                Some(other.clone()),
                Some(&seen_t0),
                t0 + s(14),
                LeaseAction::Wait {
                    holder: "b".into(),
                    expires_in: s(1),
                },
            ),
            (
                Some(other.clone()),
                Some(&seen_t0),
                t0 + s(15),
                LeaseAction::Acquire,
            ),
            // The record's own duration wins over ours.
            (
                Some(spec(Some("b"), 0, Some(60))),
                Some(&seen_t0),
                t0 + s(30),
                LeaseAction::Wait {
                    holder: "b".into(),
                    expires_in: s(30),
                },
            ),
            // A zero duration: expired as soon as seen.
            (
                Some(spec(Some("b"), 0, Some(0))),
                None,
                t0,
                LeaseAction::Acquire,
            ),
            (
                Some(spec(Some("b"), 0, None)),
                Some(&seen_t0),
                t0 + s(15),
                LeaseAction::Acquire,
            ),
        ] {
            assert_eq!(
                decide("a", record.as_ref(), observed, now, &t),
                want,
                "{record:?} at +{:?}",
                now - t0
            );
        }
    }

    #[test]
    fn a_renewed_record_restarts_the_observation() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let first = Observed::update(None, &spec(Some("b"), 0, Some(15)), t0);
        let same = Observed::update(Some(first), &spec(Some("b"), 0, Some(15)), t0 + s(10));
        assert_eq!(same.at, t0, "unchanged record: observed when first seen");
        let renewed = Observed::update(Some(same), &spec(Some("b"), 8, Some(15)), t0 + s(12));
        assert_eq!(renewed.at, t0 + s(12));
        assert_eq!(
            decide(
                "a",
                Some(&spec(Some("b"), 8, Some(15))),
                Some(&renewed),
                t0 + s(20),
                &timing()
            ),
            LeaseAction::Wait {
                holder: "b".into(),
                expires_in: s(7)
            },
            "renewed 8 s ago by our clock"
        );
    }

    #[test]
    fn the_next_look_lands_on_the_expiry() {
        let t = timing();
        let ms = Duration::from_millis;
        let wait = |expires_in| LeaseAction::Wait {
            holder: "b".into(),
            expires_in,
        };
        for (action, want) in [
            (LeaseAction::Renew, ms(2000)),
            (LeaseAction::Create, ms(2000)),
            (LeaseAction::Acquire, ms(2000)),
            (wait(ms(15_000)), ms(2000)),
            (wait(ms(2000)), ms(2000)),
            // Expiring before the next retry tick: look right then, not up to 2 s later.
            (wait(ms(1300)), ms(1300)),
            (wait(ms(1)), ms(100)),
        ] {
            assert_eq!(next_look(&action, &t), want, "{action:?}");
        }
    }

    #[test]
    fn records_written() {
        let t = timing();
        let now = Timestamp::from_second(1_800_000_000).expect("ts");
        let created = next_spec(&LeaseAction::Create, "a", None, now, &t);
        assert_eq!(created.holder_identity.as_deref(), Some("a"));
        assert_eq!(created.lease_transitions, Some(0));
        assert_eq!(created.lease_duration_seconds, Some(15));
        assert_eq!(created.acquire_time, Some(MicroTime(now)));

        let theirs = spec(Some("b"), 0, Some(15));
        let taken = next_spec(&LeaseAction::Acquire, "a", Some(&theirs), now, &t);
        assert_eq!(taken.lease_transitions, Some(4), "a change of holder");
        let free = next_spec(
            &LeaseAction::Acquire,
            "a",
            Some(&spec(None, 0, None)),
            now,
            &t,
        );
        assert_eq!(
            free.lease_transitions,
            Some(3),
            "no holder before: no transition"
        );

        let mut ours = spec(Some("a"), 0, Some(15));
        ours.acquire_time = Some(MicroTime(Timestamp::from_second(1).expect("ts")));
        let renewed = next_spec(&LeaseAction::Renew, "a", Some(&ours), now, &t);
        assert_eq!(
            renewed.acquire_time, ours.acquire_time,
            "renewal keeps acquireTime"
        );
        assert_eq!(renewed.renew_time, Some(MicroTime(now)));
        assert_eq!(renewed.lease_transitions, Some(3));

        let released = released_spec(&renewed, now);
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_duration_seconds, Some(1));
        assert_eq!(
            decide("b", Some(&released), None, Instant::now(), &t),
            LeaseAction::Acquire
        );
    }

    #[test]
    fn a_holder_stops_acting_at_the_renew_deadline() {
        let t = timing();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert!(!may_act(None, t0, &t));
        assert!(may_act(Some(t0), t0 + s(9), &t));
        assert!(!may_act(Some(t0), t0 + s(10), &t));
        // Strictly before anyone else may take over (15 s after the last change they saw).
        assert!(t.renew_deadline < t.lease_duration);
    }
}
