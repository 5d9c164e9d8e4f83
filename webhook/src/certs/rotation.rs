//! When the self-managed certificates are renewed, what the published caBundle holds, and when
//! a replica starts serving a new certificate. Pure: the clock and the certificates are inputs.
//!
//! The order that keeps every admission verifiable through a rotation:
//! 1. the Lease holder writes a new CA (when the old one is past 2/3 of its life) and a serving
//!    certificate it signed into the Secret, and publishes a caBundle holding the new CA and
//!    the previous ones still valid (old+new);
//! 2. each replica serves the Secret's certificate only once it verifies against the
//!    published caBundle, and has for `switch_delay` (kube-apiserver sees the caBundle change
//!    through its own watch, within about a second);
//! 3. the previous CAs leave the caBundle `retire_after` the new CA was made.

use std::time::{Duration, SystemTime};

use super::generate::BACKDATE;
use super::inspect::CertInfo;

/// Lifetimes of the self-managed certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotationPolicy {
    pub ca_lifetime: Duration,
    pub cert_lifetime: Duration,
    /// Previous CAs stay in the caBundle this long after a new CA was made.
    pub retire_after: Duration,
}

/// From `notBefore` to `notAfter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl From<&CertInfo> for Validity {
    fn from(c: &CertInfo) -> Self {
        Validity {
            not_before: c.not_before,
            not_after: c.not_after,
        }
    }
}

impl Validity {
    /// When the certificate was made (`notBefore` is set back by [`BACKDATE`]).
    pub fn issued(&self) -> SystemTime {
        (self.not_before + BACKDATE).min(self.not_after)
    }

    /// 2/3 of the way from issue to expiry (cert-manager's default point).
    pub fn renew_at(&self) -> SystemTime {
        let issued = self.issued();
        let life = self.not_after.duration_since(issued).unwrap_or_default();
        issued + life.mul_f64(2.0 / 3.0)
    }
}

/// What the Secret holds, as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// No Secret, or one without a CA and a serving certificate.
    Missing,
    /// Present but not usable (names the reason).
    Unusable(String),
    Usable {
        ca: Validity,
        leaf: Validity,
        /// The serving certificate verifies against the stored CA for the Service name, and
        /// its key fits it.
        leaf_fits: bool,
    },
}

/// What the Lease holder does to the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    Keep,
    /// A new serving certificate from the stored CA.
    Leaf(String),
    /// A new CA and a serving certificate it signs.
    CaAndLeaf(String),
}

pub fn renewal(now: SystemTime, stored: &Stored) -> Renewal {
    match stored {
        Stored::Missing => Renewal::CaAndLeaf("the Secret holds no certificate".into()),
        Stored::Unusable(why) => Renewal::CaAndLeaf(why.clone()),
        Stored::Usable {
            ca,
            leaf,
            leaf_fits,
        } => {
            if now >= ca.renew_at() {
                Renewal::CaAndLeaf("the CA is past 2/3 of its lifetime".into())
            } else if !leaf_fits {
                Renewal::Leaf(
                    "the serving certificate does not verify against the CA for the Service name"
                        .into(),
                )
            } else if now >= leaf.renew_at() {
                Renewal::Leaf("the serving certificate is past 2/3 of its lifetime".into())
            } else {
                Renewal::Keep
            }
        }
    }
}

/// How long until [`renewal`] may answer something else than `Keep` (the next look).
pub fn until_next_renewal(now: SystemTime, stored: &Stored) -> Duration {
    match stored {
        Stored::Usable { ca, leaf, .. } => ca
            .renew_at()
            .min(leaf.renew_at())
            .duration_since(now)
            .unwrap_or_default(),
        _ => Duration::ZERO,
    }
}

/// The caBundle to publish (DER certificates): the current CA first, then the previously
/// published CAs that are still valid, until `retire_after` the current CA was made.
pub fn desired_bundle(
    now: SystemTime,
    current: &CertInfo,
    published: &[CertInfo],
    retire_after: Duration,
) -> Vec<Vec<u8>> {
    let mut bundle = vec![current.der.clone()];
    let overlap = now < Validity::from(current).issued() + retire_after;
    if overlap {
        for c in published {
            let keep = c.is_ca && c.not_after > now && !bundle.contains(&c.der);
            if keep {
                bundle.push(c.der.clone());
            }
        }
    }
    bundle
}

/// Whether a replica swaps to the Secret's certificate now.
///
/// `candidate_verified_for`: how long the candidate has verified against the published
/// caBundle (`None`: it does not). A replica whose served certificate does not verify
/// (first start, or the caBundle lost it) switches at once: it has nothing to lose.
pub fn should_switch(
    served_verifies: bool,
    candidate_verified_for: Option<Duration>,
    switch_delay: Duration,
) -> bool {
    match candidate_verified_for {
        None => false,
        Some(_) if !served_verifies => true,
        Some(d) => d >= switch_delay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn at(days: u32) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000) + days * DAY
    }

    /// Made on day `from`, valid for `life` days.
    fn validity(from: u32, life: u32) -> Validity {
        Validity {
            not_before: at(from) - BACKDATE,
            not_after: at(from + life),
        }
    }

    fn usable(ca: Validity, leaf: Validity, leaf_fits: bool) -> Stored {
        Stored::Usable {
            ca,
            leaf,
            leaf_fits,
        }
    }

    #[test]
    fn renewal_table() {
        let ca = validity(0, 300);
        let leaf = validity(0, 90);
        let cases: &[(&str, u32, Stored, &str)] = &[
            ("nothing stored", 0, Stored::Missing, "ca"),
            ("unusable", 0, Stored::Unusable("bad".into()), "ca"),
            ("fresh", 1, usable(ca, leaf, true), "keep"),
            ("leaf just before 2/3", 59, usable(ca, leaf, true), "keep"),
            ("leaf at 2/3", 60, usable(ca, leaf, true), "leaf"),
            ("leaf for other names", 1, usable(ca, leaf, false), "leaf"),
            ("CA at 2/3", 200, usable(ca, validity(190, 90), true), "ca"),
            (
                "CA before 2/3",
                199,
                usable(ca, validity(190, 90), true),
                "keep",
            ),
            (
                "CA renewal wins over leaf",
                200,
                usable(ca, leaf, false),
                "ca",
            ),
        ];
        for (what, day, stored, want) in cases {
            let got = match renewal(at(*day), stored) {
                Renewal::Keep => "keep",
                Renewal::Leaf(_) => "leaf",
                Renewal::CaAndLeaf(_) => "ca",
            };
            assert_eq!(got, *want, "{what}");
        }
    }

    #[test]
    fn a_short_lifetime_is_not_swallowed_by_the_backdate() {
        // Three minutes of life: notBefore is an hour back, the renewal still comes at ~2 min.
        let made = at(0);
        let v = Validity {
            not_before: made - BACKDATE,
            not_after: made + Duration::from_secs(180),
        };
        assert_eq!(v.renew_at(), made + Duration::from_secs(120));
        assert_eq!(
            renewal(made + Duration::from_secs(60), &usable(v, v, true)),
            Renewal::Keep
        );
    }

    #[test]
    fn next_renewal_is_the_earlier_of_ca_and_leaf() {
        let stored = usable(validity(0, 300), validity(0, 90), true);
        assert_eq!(until_next_renewal(at(10), &stored), 50 * DAY);
        assert_eq!(until_next_renewal(at(70), &stored), Duration::ZERO);
        assert_eq!(until_next_renewal(at(0), &Stored::Missing), Duration::ZERO);
    }

    fn cert(id: u8, from: u32, life: u32, is_ca: bool) -> CertInfo {
        let v = validity(from, life);
        CertInfo {
            der: vec![id],
            not_before: v.not_before,
            not_after: v.not_after,
            is_ca,
        }
    }

    #[test]
    fn bundle_table() {
        let retire = DAY;
        let new = cert(2, 100, 300, true);
        let old = cert(1, 0, 300, true);
        let expired = cert(3, 0, 50, true);
        let leafy = cert(4, 90, 300, false);
        let cases: &[(&str, u32, Vec<CertInfo>, Vec<u8>)] = &[
            ("nothing published", 100, vec![], vec![2]),
            (
                "old+new during the overlap",
                100,
                vec![old.clone()],
                vec![2, 1],
            ),
            (
                "already published, once",
                100,
                vec![new.clone(), old.clone()],
                vec![2, 1],
            ),
            (
                "old retired after the overlap",
                101,
                vec![new.clone(), old.clone()],
                vec![2],
            ),
            (
                "expired CA dropped",
                100,
                vec![expired.clone(), old.clone()],
                vec![2, 1],
            ),
            ("a non-CA is dropped", 100, vec![leafy.clone()], vec![2]),
        ];
        for (what, day, published, want) in cases {
            let got: Vec<u8> = desired_bundle(at(*day), &new, published, retire)
                .into_iter()
                .map(|d| d[0])
                .collect();
            assert_eq!(&got, want, "{what}");
        }
    }

    #[test]
    fn switch_table() {
        let delay = Duration::from_secs(10);
        let s = Duration::from_secs;
        let cases = [
            ("candidate does not verify", true, None, false),
            ("nothing good served yet", false, None, false),
            ("first good certificate: at once", false, Some(s(0)), true),
            ("rotation: waits for the delay", true, Some(s(9)), false),
            ("rotation: after the delay", true, Some(s(10)), true),
        ];
        for (what, served, candidate, want) in cases {
            assert_eq!(should_switch(served, candidate, delay), want, "{what}");
        }
    }
}
