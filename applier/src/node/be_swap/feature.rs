//! The BE swap grant as a node feature of `run`: a thread that makes a pass every period and
//! puts every grant back at exit. Off unless `--be-swap-percent` is above 0; unsupported on
//! cgroup v1 (no `memory.swap.max`), said once in the log.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupVersion, Controller};
use procfs_core::{FromRead as _, Meminfo};

use crate::feature::{FeatureError, NodeFeature, RunContext, Running};

use super::Settings;
use super::grant::NodeMemory;
use super::metrics::BeSwapMetrics;
use super::worker::SwapGrants;

pub struct BeSwap {
    pub settings: Settings,
}

impl NodeFeature for BeSwap {
    fn name(&self) -> &'static str {
        "BE swap"
    }

    fn changes_the_node(&self) -> bool {
        true
    }

    fn start(self: Box<Self>, ctx: &RunContext) -> Result<Option<Running>, FeatureError> {
        let Self { settings } = *self;
        if settings.percent == 0 {
            return Ok(None);
        }
        if let Some(lack) = lacks(&ctx.layout) {
            tracing::warn!(
                lacks = lack,
                "--be-swap-percent set, unsupported on this node: no swap granted"
            );
            return Ok(None);
        }
        tracing::info!(
            percent = settings.percent,
            "BE swap: BE containers may swap this share of their memory limit where the node has swap"
        );
        let metrics = BeSwapMetrics::register(ctx.metrics.registry())?;
        let grants = Arc::new(Mutex::new(SwapGrants::new(
            settings.percent,
            ctx.layout.clone(),
            ctx.writer.clone(),
            Some(metrics),
        )));
        let (store, looped) = (ctx.pods.clone(), grants.clone());
        std::thread::Builder::new()
            .name("be-swap".to_owned())
            .spawn(move || {
                loop {
                    if let Some(node) = node_memory(&settings.proc_root) {
                        let state = store.state();
                        let report = looped
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .pass(state.iter().map(AsRef::as_ref), node);
                        tracing::trace!(?report, "BE swap pass");
                    }
                    std::thread::sleep(settings.period);
                }
            })
            .map_err(|source| FeatureError::Thread {
                what: "BE swap grants",
                source,
            })?;
        Ok(Some(Running::passive().at_exit(move || {
            let put = grants
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .release_all();
            tracing::info!(containers = put, "BE swap: grants put back");
        })))
    }
}

/// What the node lacks for the grant, if anything: cgroup v2's `memory.swap.max`.
fn lacks(layout: &Layout) -> Option<&'static str> {
    if layout.version != CgroupVersion::V2 {
        return Some("memory.swap.max (cgroup v1)");
    }
    let Ok(kubepods) = layout.dir(&layout.kubepods_dir(), Controller::Memory) else {
        return Some("memory.swap.max (no kubepods cgroup under the cgroup root)");
    };
    (!kubepods.join("memory.swap.max").exists())
        .then_some("memory.swap.max (a kernel built without CONFIG_SWAP, or swapaccount=0)")
}

/// `MemTotal` and `SwapTotal`; `None` when `/proc/meminfo` cannot be read (said at debug).
fn node_memory(proc_root: &Path) -> Option<NodeMemory> {
    let text = std::fs::read(proc_root.join("meminfo"))
        .map_err(|e| tracing::debug!(error = %e, "BE swap: /proc/meminfo unreadable"))
        .ok()?;
    let m = Meminfo::from_read(text.as_slice()).ok()?;
    Some(NodeMemory {
        mem_total: m.mem_total,
        swap_total: m.swap_total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use koord_translator::cgroup::CgroupDriver;

    #[test]
    fn the_grant_needs_memory_swap_max_in_kubepods() {
        let tmp = tempfile::tempdir().expect("tmp");
        let v2 = Layout::new(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
        let kubepods = tmp.path().join("kubepods");
        std::fs::create_dir_all(&kubepods).expect("mkdir");
        assert!(lacks(&v2).is_some_and(|l| l.contains("CONFIG_SWAP")));
        std::fs::write(kubepods.join("memory.swap.max"), "max\n").expect("seed");
        assert_eq!(lacks(&v2), None);
        let v1 = Layout::new(tmp.path(), CgroupVersion::V1, CgroupDriver::Cgroupfs);
        assert_eq!(lacks(&v1), Some("memory.swap.max (cgroup v1)"));
    }
}
