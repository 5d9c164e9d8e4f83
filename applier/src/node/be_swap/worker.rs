//! The grants: each pass looks at the pod cache's BE pods and raises their containers'
//! `memory.swap.max` to their grant where it is lower; at exit every grant is put back.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::readback::Expect;
use koord_translator::pod::phase;
use koord_translator::pod::spec_view::PodSpecView;

use super::grant::{NodeMemory, grant_bytes};
use super::metrics::BeSwapMetrics;
use crate::node::shared::container_dir::container_memory_dir;
use crate::node::shared::qos_label::label_is_be;
use crate::node::writer::{Key, NodeWriter, Owner, Want};

const SWAP_MAX: &str = "memory.swap.max";
/// The grants' owner in the node writer.
const OWNER: Owner = "BE swap";

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
    writer: Arc<NodeWriter>,
    metrics: Option<BeSwapMetrics>,
    /// Set by [`SwapGrants::release_all`]: no pass writes after it.
    released: bool,
}

impl SwapGrants {
    pub fn new(
        percent: u32,
        layout: Layout,
        writer: Arc<NodeWriter>,
        metrics: Option<BeSwapMetrics>,
    ) -> Self {
        Self {
            percent,
            layout,
            writer,
            metrics,
            released: false,
        }
    }

    /// One pass over `pods` on a node with `node`'s memory and swap: every active BE pod's
    /// containers' grants handed to the writer, which raises `memory.swap.max` where it is
    /// lower (a larger value, the kubelet's, stands) and puts back those no longer granted
    /// (the container gone, the pod no longer BE). Without swap nothing is written (grants
    /// already made stay until exit: they mean nothing without swap).
    pub fn pass<'a>(
        &mut self,
        pods: impl IntoIterator<Item = &'a Pod>,
        node: NodeMemory,
    ) -> PassReport {
        if self.released || node.swap_total == 0 {
            return PassReport {
                granted: self.writer.held(OWNER).len(),
                ..PassReport::default()
            };
        }
        let mut wants = BTreeMap::new();
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
                let bytes = grant_bytes(self.percent, c, node);
                if bytes == 0 {
                    continue;
                }
                wants.insert(
                    Key {
                        dir,
                        file: SWAP_MAX,
                    },
                    grant(bytes),
                );
            }
        }
        let r = self.writer.hold_all(OWNER, &wants);
        let report = PassReport {
            granted: self.writer.held(OWNER).len(),
            written: r.written,
            errors: r.errors + r.refused,
        };
        self.observe(report);
        report
    }

    /// Every grant back to the value before it (at exit); no pass writes after this.
    pub fn release_all(&mut self) -> usize {
        self.released = true;
        let r = self.writer.hold_all(OWNER, &BTreeMap::new());
        self.observe(PassReport {
            errors: r.errors,
            ..PassReport::default()
        });
        r.released
    }

    fn observe(&self, report: PassReport) {
        if let Some(m) = &self.metrics {
            let held = self.writer.held(OWNER);
            m.containers
                .set(i64::try_from(held.len()).unwrap_or(i64::MAX));
            let bytes: u64 = held
                .iter()
                .filter_map(|(_, w)| w.text.parse::<u64>().ok())
                .sum();
            m.bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
            m.errors.inc_by(report.errors as u64);
        }
    }
}

/// A grant of `bytes`: a larger value in place stands.
fn grant(bytes: u64) -> Want {
    Want {
        text: bytes.to_string(),
        expect: Expect::Bytes(i64::try_from(bytes).unwrap_or(i64::MAX)),
        or_higher: true,
    }
}
