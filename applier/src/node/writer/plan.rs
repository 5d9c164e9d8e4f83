//! The node writer's bookkeeping, pure: for each file a feature wants a value in, what the
//! product wrote, which feature wants it and the value found before the first write; from that
//! and what the files hold now, what to write and what to put back ([`plan`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use koord_translator::cgroup::readback::{Expect, matches};

use crate::node::shared::limit::limit_bytes;

/// The feature that wants a file, as its logs name it.
pub type Owner = &'static str;

/// One cgroup file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub dir: Arc<Path>,
    pub file: &'static str,
}

/// A value a feature wants in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    pub text: String,
    /// How the value reads back (memcg rounds bytes to pages).
    pub expect: Expect,
    /// A limit already above the value stands: the feature only raises it.
    pub or_higher: bool,
}

impl Want {
    /// Whether the file holds this value.
    fn holds(&self, now: &str) -> bool {
        matches(self.expect, now)
    }

    /// Whether the file needs no write for this value.
    fn met_by(&self, now: &str) -> bool {
        self.holds(now)
            || (self.or_higher
                && limit_bytes(now)
                    .zip(limit_bytes(&self.text))
                    .is_some_and(|(n, w)| n >= w))
    }
}

/// What the product holds in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub owner: Owner,
    /// The value last written.
    pub wrote: Want,
    /// What goes back when no feature wants the file any more: the value found before the
    /// first write, or the one someone else wrote since (theirs is the file's value then).
    pub found: String,
}

/// Every file the product holds.
pub type Table = BTreeMap<Key, Held>;

/// A file as read now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    Value(String),
    /// The file or its cgroup is gone.
    Absent,
    /// Unreadable now: left as it is until the next look.
    Failed,
}

/// What to do with one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Write `held.wrote`; once written, the table holds `held`.
    Write(Key, Held),
    /// Nothing to write; the table holds `held`.
    Keep(Key, Held),
    /// Write `found` back and let the file go.
    PutBack(Key, String),
    /// Let the file go without writing: its cgroup is gone, or someone else's value is in it.
    Forget(Key),
    /// Another feature holds the file: nothing written.
    Refused(Key, Owner),
}

/// The steps for `owner` wanting `wants` now, over the files in `reads` (each read now): a
/// file of `reads` the owner held and no longer wants is put back; one it wants is written
/// where the value is not met already.
pub fn plan(
    table: &Table,
    owner: Owner,
    wants: &BTreeMap<Key, Want>,
    reads: &BTreeMap<Key, Read>,
) -> Vec<Step> {
    let mut steps = Vec::new();
    for (key, read) in reads {
        let held = table.get(key);
        if let Some(h) = held.filter(|h| h.owner != owner) {
            if wants.contains_key(key) {
                steps.push(Step::Refused(key.clone(), h.owner));
            }
            continue;
        }
        let now = match read {
            Read::Value(now) => now,
            Read::Absent if held.is_some() => {
                steps.push(Step::Forget(key.clone()));
                continue;
            }
            Read::Absent | Read::Failed => continue,
        };
        // A value written behind the product's back is what the file's owner wants now.
        let found = match held {
            Some(h) if h.wrote.holds(now) => h.found.clone(),
            _ => now.clone(),
        };
        match (wants.get(key), held) {
            (Some(w), Some(h)) if w.met_by(now) => {
                steps.push(Step::Keep(key.clone(), Held { found, ..h.clone() }))
            }
            (Some(w), None) if w.met_by(now) => {}
            (Some(w), _) => steps.push(Step::Write(
                key.clone(),
                Held {
                    owner,
                    wrote: w.clone(),
                    found,
                },
            )),
            (None, Some(h)) if h.wrote.holds(now) => {
                steps.push(Step::PutBack(key.clone(), h.found.clone()))
            }
            (None, Some(_)) => steps.push(Step::Forget(key.clone())),
            (None, None) => {}
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(dir: &str) -> Key {
        Key {
            dir: Path::new(dir).into(),
            file: "memory.swap.max",
        }
    }

    fn want(bytes: i64, or_higher: bool) -> Want {
        Want {
            text: bytes.to_string(),
            expect: Expect::Bytes(bytes),
            or_higher,
        }
    }

    fn held(owner: Owner, wrote: i64, found: &str) -> Held {
        Held {
            owner,
            wrote: want(wrote, true),
            found: found.into(),
        }
    }

    fn value(v: &str) -> Read {
        Read::Value(v.into())
    }

    /// (what, held now, wanted, read now, the steps)
    type Case = (&'static str, Option<Held>, Option<Want>, Read, Vec<Step>);

    #[test]
    fn the_plan_table() {
        let k = key("/a");
        let cases: Vec<Case> = vec![
            (
                "first want: written, the value found kept",
                None,
                Some(want(4096, true)),
                value("0"),
                vec![Step::Write(k.clone(), held("f", 4096, "0"))],
            ),
            (
                "already met, never held: nothing, nothing kept",
                None,
                Some(want(4096, true)),
                value("max"),
                vec![],
            ),
            (
                "exact want below the value in place: written",
                None,
                Some(want(4096, false)),
                value("8192"),
                vec![Step::Write(
                    k.clone(),
                    Held {
                        owner: "f",
                        wrote: want(4096, false),
                        found: "8192".into(),
                    },
                )],
            ),
            (
                "held and in place: kept",
                Some(held("f", 4096, "0")),
                Some(want(4096, true)),
                value("4096"),
                vec![Step::Keep(k.clone(), held("f", 4096, "0"))],
            ),
            (
                "reset behind our back: written again, the reset value goes back later",
                Some(held("f", 4096, "0")),
                Some(want(4096, true)),
                value("100"),
                vec![Step::Write(k.clone(), held("f", 4096, "100"))],
            ),
            (
                "raised behind our back above the want: theirs stands",
                Some(held("f", 4096, "0")),
                Some(want(4096, true)),
                value("max"),
                vec![Step::Keep(k.clone(), held("f", 4096, "max"))],
            ),
            (
                "a new value: written, the first found kept",
                Some(held("f", 4096, "0")),
                Some(want(8192, true)),
                value("4096"),
                vec![Step::Write(k.clone(), held("f", 8192, "0"))],
            ),
            (
                "released while ours is in place: put back",
                Some(held("f", 4096, "0")),
                None,
                value("4096"),
                vec![Step::PutBack(k.clone(), "0".into())],
            ),
            (
                "released while someone else's is in place: theirs stands",
                Some(held("f", 4096, "0")),
                None,
                value("max"),
                vec![Step::Forget(k.clone())],
            ),
            (
                "the cgroup is gone: forgotten",
                Some(held("f", 4096, "0")),
                Some(want(4096, true)),
                Read::Absent,
                vec![Step::Forget(k.clone())],
            ),
            (
                "never held and absent: nothing",
                None,
                Some(want(4096, true)),
                Read::Absent,
                vec![],
            ),
            (
                "unreadable: left for the next look",
                Some(held("f", 4096, "0")),
                None,
                Read::Failed,
                vec![],
            ),
            (
                "another feature holds it: refused",
                Some(held("g", 4096, "0")),
                Some(want(8192, true)),
                value("4096"),
                vec![Step::Refused(k.clone(), "g")],
            ),
            (
                "another feature's file, not wanted: untouched",
                Some(held("g", 4096, "0")),
                None,
                value("4096"),
                vec![],
            ),
        ];
        for (what, h, w, read, expected) in cases {
            let table: Table = h.into_iter().map(|h| (k.clone(), h)).collect();
            let wants: BTreeMap<Key, Want> = w.into_iter().map(|w| (k.clone(), w)).collect();
            let reads = BTreeMap::from([(k.clone(), read)]);
            assert_eq!(plan(&table, "f", &wants, &reads), expected, "{what}");
        }
    }
}
