//! The node writer: the one place node features' lasting cgroup values are written. A feature
//! hands it the values it wants ([`NodeWriter::hold_all`], [`NodeWriter::hold`]) and never
//! opens a cgroup file for writing; the writer writes only what differs, through the
//! translator's `cgroup::writer`, and puts the value it found back when no feature wants the
//! file any more (the feature let it go, the pod is gone, the applier exits:
//! [`NodeWriter::release_all`]). What to write and what to put back is decided by [`plan`]
//! (pure); this module only reads the files, performs the steps and keeps the table. On
//! cgroup v2 the value found is also kept on the cgroup ([`record`]) before the first write,
//! so an applier that died, or came back without the feature, puts it back at start
//! ([`NodeWriter::put_back_left`]); a value that cannot be recorded is not written.
//!
//! It imports no feature: every feature writes through it (`tests/lib/module_graph.py`).

pub mod plan;
pub mod record;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use koord_translator::cgroup::systemd::Units;
use koord_translator::cgroup::systemd::plan::Want as SystemdWant;
use koord_translator::cgroup::writer::CgroupDir;

use plan::{Held, Read, Step, Table};
pub use plan::{Key, Owner, Want};

/// What one call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// Wanted values written.
    pub written: usize,
    /// Files let go: the value found put back, or someone else's left in place.
    pub released: usize,
    /// Reads or writes that failed (tried again at the next call).
    pub errors: usize,
    /// Files another feature holds: not written.
    pub refused: usize,
    /// Values not written because the value found could not be recorded (no user xattrs).
    pub unrecorded: usize,
}

/// The node's one writer of lasting values; shared by every feature (`RunContext`).
#[derive(Debug, Default)]
pub struct NodeWriter {
    /// Reads and compares but writes nothing.
    dry_run: bool,
    /// Keeps the value found on the cgroup before the first write (cgroup v2).
    records: bool,
    /// On the systemd driver: every value (put back ones too) is stored on its unit first, so
    /// that systemd's next re-apply of the unit keeps it rather than undoes it.
    systemd: Option<Arc<Units>>,
    table: Mutex<Table>,
}

impl NodeWriter {
    pub fn new(dry_run: bool, records: bool) -> Self {
        Self {
            dry_run,
            records,
            systemd: None,
            table: Mutex::default(),
        }
    }

    /// Stores the values on their systemd units too (the systemd driver).
    pub fn with_systemd(self, systemd: Option<Arc<Units>>) -> Self {
        Self { systemd, ..self }
    }

    /// Every value recorded under `root` put back: once at start, before any feature writes.
    pub fn put_back_left(&self, root: &Path) -> Vec<record::Left> {
        if !self.records {
            return Vec::new();
        }
        record::sweep(root, self.dry_run)
    }

    /// `owner` wants exactly `wants` now: each written where the file does not hold it, and
    /// every file the owner held that is not among them put back.
    pub fn hold_all(&self, owner: Owner, wants: &BTreeMap<Key, Want>) -> Report {
        let mut table = self.lock();
        let mut keys: BTreeSet<Key> = wants.keys().cloned().collect();
        keys.extend(owned(&table, owner));
        self.run(&mut table, owner, wants, keys)
    }

    /// `owner` wants `want` in `key` (its other files unchanged).
    pub fn hold(&self, owner: Owner, key: Key, want: Want) -> Report {
        let wants = BTreeMap::from([(key.clone(), want)]);
        self.run(&mut self.lock(), owner, &wants, BTreeSet::from([key]))
    }

    /// `owner` no longer wants `key`: the value found goes back.
    pub fn release(&self, owner: Owner, key: Key) -> Report {
        self.run(
            &mut self.lock(),
            owner,
            &BTreeMap::new(),
            BTreeSet::from([key]),
        )
    }

    /// Every file of every feature put back: at exit.
    pub fn release_all(&self) -> Report {
        let mut table = self.lock();
        let owners: BTreeSet<Owner> = table.values().map(|h| h.owner).collect();
        let mut report = Report::default();
        for owner in owners {
            let keys = owned(&table, owner).collect();
            let r = self.run(&mut table, owner, &BTreeMap::new(), keys);
            report.released += r.released;
            report.errors += r.errors;
        }
        report
    }

    /// The files `owner` holds now, with the value last written.
    pub fn held(&self, owner: Owner) -> Vec<(Key, Want)> {
        self.lock()
            .iter()
            .filter(|(_, h)| h.owner == owner)
            .map(|(k, h)| (k.clone(), h.wrote.clone()))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads `keys`, plans, performs the steps and keeps the table.
    fn run(
        &self,
        table: &mut Table,
        owner: Owner,
        wants: &BTreeMap<Key, Want>,
        keys: BTreeSet<Key>,
    ) -> Report {
        let mut report = Report::default();
        let mut dirs: BTreeMap<Arc<Path>, CgroupDir> = BTreeMap::new();
        let mut reads = BTreeMap::new();
        for key in keys {
            let dir = dirs
                .entry(key.dir.clone())
                .or_insert_with(|| CgroupDir::open(key.dir.clone()));
            let read = match dir.read(key.file) {
                Ok(Some(v)) => Read::Value(v),
                Ok(None) => Read::Absent,
                Err(e) => {
                    tracing::debug!(dir = %key.dir.display(), file = key.file, owner, error = %e, "cgroup file unreadable");
                    report.errors += 1;
                    Read::Failed
                }
            };
            reads.insert(key, read);
        }
        let steps = plan::plan(table, owner, wants, &reads);
        self.store_on_units(&steps);
        for step in steps {
            match step {
                Step::Write(key, held) => match self
                    .keep_found(table.get(&key), &key, &held.found)
                    .inspect_err(|_| report.unrecorded += 1)
                    .and_then(|()| self.write(&dirs, &key, &held.wrote.text))
                {
                    Ok(()) => {
                        report.written += 1;
                        table.insert(key, held);
                    }
                    Err(e) => {
                        tracing::debug!(dir = %key.dir.display(), file = key.file, owner, error = %e, "cgroup file not written");
                        report.errors += 1;
                    }
                },
                Step::Keep(key, held) => {
                    table.insert(key, held);
                }
                Step::PutBack(key, found) => {
                    table.remove(&key);
                    match self.write(&dirs, &key, &found) {
                        Ok(()) => {
                            self.forget_found(&key);
                            report.released += 1;
                        }
                        // The cgroup went with its value: nothing to put back.
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => report.released += 1,
                        Err(e) => {
                            tracing::warn!(dir = %key.dir.display(), file = key.file, owner, value = %found, error = %e, "cgroup file not put back");
                            report.errors += 1;
                        }
                    }
                }
                Step::Forget(key) => {
                    table.remove(&key);
                    self.forget_found(&key);
                    report.released += 1;
                }
                Step::Refused(key, holder) => {
                    tracing::warn!(dir = %key.dir.display(), file = key.file, owner, holder, "cgroup file held by another feature: not written");
                    report.refused += 1;
                }
            }
        }
        report
    }

    /// The values about to be written (and put back) stored on their units first, in one
    /// call per unit; a value systemd cannot take is written as a file only.
    fn store_on_units(&self, steps: &[Step]) {
        let Some(units) = self.systemd.as_ref().filter(|_| !self.dry_run) else {
            return;
        };
        let wants: Vec<SystemdWant<'_>> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Write(k, h) => Some((k, h.wrote.text.as_str())),
                Step::PutBack(k, found) => Some((k, found.as_str())),
                _ => None,
            })
            .map(|(k, text)| SystemdWant {
                dir: &k.dir,
                file: k.file,
                text,
                differs: true,
            })
            .collect();
        if !wants.is_empty() {
            units.store(&wants);
        }
    }

    /// Records the value found before the first write of a file, or when it changed (someone
    /// else's value is what goes back now).
    fn keep_found(&self, held: Option<&Held>, key: &Key, found: &str) -> std::io::Result<()> {
        if !self.records || self.dry_run || held.is_some_and(|h| h.found == found) {
            return Ok(());
        }
        record::keep(&key.dir, key.file, found)
    }

    fn forget_found(&self, key: &Key) {
        if self.records && !self.dry_run {
            // Gone with its cgroup, or left for the next start's sweep.
            let _ = record::forget(&key.dir, key.file);
        }
    }

    fn write(
        &self,
        dirs: &BTreeMap<Arc<Path>, CgroupDir>,
        key: &Key,
        text: &str,
    ) -> std::io::Result<()> {
        match dirs.get(&key.dir) {
            Some(_) if self.dry_run => Ok(()),
            // systemd wrote it already (read back): not written twice.
            Some(dir)
                if self.systemd.is_some()
                    && dir
                        .read(key.file)
                        .is_ok_and(|v| v.is_some_and(|v| v.trim() == text.trim())) =>
            {
                Ok(())
            }
            Some(dir) => dir.write(key.file, text),
            None => Err(std::io::ErrorKind::NotFound.into()),
        }
    }
}

/// The files `owner` holds.
fn owned(table: &Table, owner: Owner) -> impl Iterator<Item = Key> {
    table
        .iter()
        .filter(move |(_, h)| h.owner == owner)
        .map(|(k, _)| k.clone())
        .collect::<Vec<_>>()
        .into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;
    use koord_translator::cgroup::readback::Expect;

    fn high(bytes: i64) -> Want {
        Want {
            text: bytes.to_string(),
            expect: Expect::Bytes(bytes),
            or_higher: false,
        }
    }

    #[test]
    fn writes_what_differs_refuses_a_held_file_and_puts_back_at_exit() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir: Arc<Path> = tmp.path().into();
        std::fs::write(dir.join("memory.high"), "max\n").expect("seed");
        let key = Key {
            dir: dir.clone(),
            file: "memory.high",
        };
        let read = || std::fs::read_to_string(dir.join("memory.high")).expect("read");
        let w = NodeWriter::new(false, false);
        assert_eq!(w.hold("a", key.clone(), high(4096)).written, 1);
        assert_eq!(read(), "4096");
        assert_eq!(w.hold("a", key.clone(), high(4096)).written, 0);
        assert_eq!(w.hold("b", key.clone(), high(8192)).refused, 1);
        assert_eq!(read(), "4096");
        assert_eq!(w.held("a").len(), 1);
        assert_eq!(w.release_all().released, 1);
        assert_eq!(read(), "max");
        assert!(w.held("a").is_empty());
        // A dry run reads and plans, never writes.
        let dry = NodeWriter::new(true, false);
        assert_eq!(dry.hold("a", key, high(4096)).written, 1);
        assert_eq!(read(), "max");
    }
}
