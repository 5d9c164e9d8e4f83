//! The grants: each pass looks at the pod cache's BE pods and raises their containers'
//! `memory.swap.max` to their grant where it is lower; at exit every grant is put back.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use koord_translator::cgroup::file;
use koord_translator::cgroup::layout::Layout;
use koord_translator::pod::phase;
use koord_translator::pod::spec_view::PodSpecView;

use super::grant::{NodeMemory, grant_bytes};
use super::metrics::BeSwapMetrics;
use crate::node::shared::container_dir::container_memory_dir;
use crate::node::shared::limit::limit_bytes;
use crate::node::shared::qos_label::label_is_be;

const SWAP_MAX: &str = "memory.swap.max";

/// One container's grant and what its file held before the first one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Granted {
    before: String,
    bytes: u64,
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Containers holding a grant after the pass.
    pub granted: usize,
    /// Files written in the pass.
    pub written: usize,
    /// Reads or writes that failed.
    pub errors: usize,
}

pub struct SwapGrants {
    percent: u32,
    layout: Layout,
    grants: BTreeMap<Arc<Path>, Granted>,
    metrics: Option<BeSwapMetrics>,
    /// Set by [`SwapGrants::release_all`]: no pass writes after it.
    released: bool,
}

impl SwapGrants {
    pub fn new(percent: u32, layout: Layout, metrics: Option<BeSwapMetrics>) -> Self {
        Self {
            percent,
            layout,
            grants: BTreeMap::new(),
            metrics,
            released: false,
        }
    }

    /// One pass over `pods` on a node with `node`'s memory and swap. Without swap nothing is
    /// written (grants already made stay until exit: they mean nothing without swap).
    pub fn pass<'a>(
        &mut self,
        pods: impl IntoIterator<Item = &'a Pod>,
        node: NodeMemory,
    ) -> PassReport {
        let mut report = PassReport::default();
        if self.released || node.swap_total == 0 {
            report.granted = self.grants.len();
            return report;
        }
        let mut seen = Vec::new();
        for pod in pods
            .into_iter()
            .filter(|p| phase::is_active(p) && label_is_be(p))
        {
            let Ok(view) = PodSpecView::from_pod(pod) else {
                continue;
            };
            for c in &view.containers {
                let Some(dir) = c
                    .container_id
                    .as_deref()
                    .and_then(|id| container_memory_dir(&self.layout, &view, id))
                else {
                    continue;
                };
                let want = grant_bytes(self.percent, c, node);
                if want == 0 {
                    continue;
                }
                let path = dir.join(SWAP_MAX);
                let text = match file::read(&path) {
                    Ok(Some(t)) => t,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, "BE swap: memory.swap.max unreadable");
                        report.errors += 1;
                        continue;
                    }
                };
                // A value at or above the grant stands (ours, or a larger one the kubelet gave).
                if limit_bytes(&text).is_some_and(|v| v >= want) {
                    if self.grants.contains_key(&dir) {
                        seen.push(dir);
                    }
                    continue;
                }
                match file::write(&path, &want.to_string()) {
                    Ok(()) => {
                        report.written += 1;
                        let g = self.grants.entry(dir.clone()).or_insert(Granted {
                            before: text,
                            bytes: 0,
                        });
                        g.bytes = want;
                        seen.push(dir);
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "BE swap: memory.swap.max not written");
                        report.errors += 1;
                    }
                }
            }
        }
        // A grant whose container is gone, or whose pod is no longer BE, goes back.
        let gone: Vec<_> = self
            .grants
            .keys()
            .filter(|d| !seen.contains(d))
            .cloned()
            .collect();
        for dir in gone {
            if let Some(g) = self.grants.remove(&dir) {
                report.errors += usize::from(put_back(&dir, &g).is_err());
            }
        }
        report.granted = self.grants.len();
        self.observe(report);
        report
    }

    /// Every grant back to the value before it (at exit); no pass writes after this.
    pub fn release_all(&mut self) -> usize {
        self.released = true;
        let grants = std::mem::take(&mut self.grants);
        let mut put = 0;
        for (dir, g) in &grants {
            match put_back(dir, g) {
                Ok(()) => put += 1,
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "BE swap: memory.swap.max not put back")
                }
            }
        }
        self.observe(PassReport::default());
        put
    }

    fn observe(&self, report: PassReport) {
        if let Some(m) = &self.metrics {
            m.containers
                .set(i64::try_from(self.grants.len()).unwrap_or(i64::MAX));
            let bytes: u64 = self.grants.values().map(|g| g.bytes).sum();
            m.bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
            m.errors.inc_by(report.errors as u64);
        }
    }
}

/// The value before the grant, unless the container's cgroup is gone or its file no longer
/// holds the grant (someone raised it since: theirs stands).
fn put_back(dir: &Path, g: &Granted) -> std::io::Result<()> {
    let path = dir.join(SWAP_MAX);
    match file::read(&path)? {
        Some(now) if limit_bytes(&now) == Some(g.bytes) => match file::write(&path, &g.before) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r,
        },
        _ => Ok(()),
    }
}
