//! Between passes: has anything moved a file the last pass left at its value? The kubelet
//! writes 0 into `kubepods` `memory.min`/`memory.low` and the Burstable class's `memory.low`
//! when it starts with its `MemoryQoS` gate on (the 1.37 default), and through systemd on the
//! systemd driver; `systemctl daemon-reload` re-applies what systemd stores. Waiting for the
//! next resync leaves every pod below unprotected for up to its period (60 s); reading the
//! few files the pass owns every 0.25 s notices within one check, and the value the pass left
//! goes back at once, before the next pass decides again. Pure: the caller reads and writes.

use std::path::{Path, PathBuf};

use koord_translator::cgroup::readback;

use super::plan::Protection;

/// A file the last pass left at `value` (written, or found already there); `None`: the pass
/// found it holding something it could not parse (caught mid-write, as a plain file of a test
/// tree can be), so it decided nothing there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    pub path: PathBuf,
    pub value: Option<Protection>,
}

/// Every file whose content no longer reads as the value the pass left (as the writer
/// compares: memcg keeps pages), or that parses now where the pass could not parse it, in the
/// pass's order. A file that cannot be read or parsed now is not counted (the pass reports it,
/// and a removed cgroup is the kubelet's business).
pub fn moved(left: &[Left], read: impl Fn(&Path) -> Option<String>) -> Vec<&Left> {
    left.iter()
        .filter(|l| {
            read(&l.path).is_some_and(|text| {
                Protection::parse(&text).is_ok()
                    && l.value
                        .is_none_or(|v| !readback::matches(v.expect(), &text))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn left(path: &str, value: &str) -> Left {
        Left {
            path: PathBuf::from(path),
            value: Some(Protection::parse(value).expect("value")),
        }
    }

    #[test]
    fn a_file_moved_behind_the_pass_is_found_and_nothing_else() {
        let pass = [
            left("kubepods/memory.min", "1073741824"),
            left("kubepods/memory.low", "0"),
            left("kubepods/burstable/memory.min", "1073741824"),
            left("kubepods/besteffort/memory.min", "max"),
            left("kubepods/besteffort/memory.low", "1000000"),
        ];
        // (what the files hold now, the drift expected)
        type Row<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);
        let table: [Row<'_>; 8] = [
            // Every file as left.
            (
                &[
                    ("kubepods/memory.min", "1073741824\n"),
                    ("kubepods/memory.low", "0\n"),
                    ("kubepods/burstable/memory.min", "1073741824\n"),
                    ("kubepods/besteffort/memory.min", "max\n"),
                ],
                None,
            ),
            // The kubelet's restart: kubepods back to 0.
            (
                &[
                    ("kubepods/memory.min", "0\n"),
                    ("kubepods/memory.low", "0\n"),
                    ("kubepods/burstable/memory.min", "1073741824\n"),
                ],
                Some("kubepods/memory.min"),
            ),
            // memcg keeps pages: a value read back rounded is the value left.
            (&[("kubepods/besteffort/memory.low", "999424\n")], None),
            // Moved up counts too: the pass decides what the sum is.
            (
                &[("kubepods/memory.low", "4096\n")],
                Some("kubepods/memory.low"),
            ),
            // The first moved file in the pass's order.
            (
                &[
                    ("kubepods/burstable/memory.min", "0"),
                    ("kubepods/besteffort/memory.min", "0"),
                ],
                Some("kubepods/burstable/memory.min"),
            ),
            // Unreadable (cgroup gone) or garbage: not drift.
            (&[("kubepods/memory.min", "")], None),
            (&[("kubepods/memory.min", "twelve\n")], None),
            (&[], None),
        ];
        for (files, want) in table {
            let files: HashMap<&str, &str> = files.iter().copied().collect();
            let got = moved(&pass, |p| {
                files
                    .get(p.to_str().expect("utf-8"))
                    .map(|s| (*s).to_owned())
            });
            assert_eq!(
                got.first().map(|l| l.path.to_str().expect("utf-8")),
                want,
                "{files:?}"
            );
        }
    }

    /// Every moved file, in the pass's order: the check puts each back, not only the first.
    #[test]
    fn every_moved_file_is_found() {
        let pass = [
            left("kubepods/memory.min", "1073741824"),
            left("kubepods/memory.low", "1073741824"),
            left("kubepods/burstable/memory.min", "1073741824"),
        ];
        let now: HashMap<&str, &str> = [
            ("kubepods/memory.min", "0\n"),
            ("kubepods/memory.low", "1073741824\n"),
            ("kubepods/burstable/memory.min", "0\n"),
        ]
        .into_iter()
        .collect();
        let got: Vec<&str> = moved(&pass, |p| {
            now.get(p.to_str().expect("utf-8")).map(|s| (*s).to_owned())
        })
        .iter()
        .map(|l| l.path.to_str().expect("utf-8"))
        .collect();
        assert_eq!(
            got,
            ["kubepods/memory.min", "kubepods/burstable/memory.min"]
        );
    }

    /// A file the pass found mid-write (empty) decided nothing: it is watched until it parses,
    /// then a pass is due, whatever it holds. Before, it was dropped from the watch until the
    /// resync, and a zeroing written in two steps stayed for up to the resync's period.
    #[test]
    fn a_file_the_pass_could_not_parse_is_due_once_it_parses() {
        let pass = [Left {
            path: PathBuf::from("kubepods/memory.low"),
            value: None,
        }];
        for (now, want) in [
            ("", None),
            ("twelve\n", None),
            ("0\n", Some("kubepods/memory.low")),
            ("73400320\n", Some("kubepods/memory.low")),
        ] {
            let got = moved(&pass, |_| Some(now.to_owned()));
            assert_eq!(
                got.first().map(|l| l.path.to_str().expect("utf-8")),
                want,
                "{now:?}"
            );
        }
        assert!(moved(&pass, |_| None).is_empty(), "gone");
    }
}
