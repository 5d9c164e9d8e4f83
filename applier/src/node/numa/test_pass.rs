//! A pod and a pass shared by the worker's and the metrics' unit tests.

use koord_translator::cgroup::layout::KubeQos;
use koord_translator::pod::spec_view::PodSpecView;

use super::numa_maps::Locality;
use super::report::{ContainerLocality, ContainerStatus, LocalityReport, Method};

pub(crate) fn view() -> PodSpecView {
    PodSpecView {
        namespace: "shop".into(),
        name: "redis-0".into(),
        uid: "ab".into(),
        kube_qos: KubeQos::Burstable,
        resolved_qos: None,
        containers: Vec::new(),
        overhead_memory: 0,
        pod_level: Default::default(),
    }
}

/// One completed container that moved `moved` pages and ends 75% local.
pub(crate) fn completed(moved: u64) -> LocalityReport {
    let mut c = ContainerLocality::new("redis", ContainerStatus::Completed, None);
    c.local_nodes = [0].into_iter().collect();
    c.remote_nodes = [1].into_iter().collect();
    c.pages_migrated = moved;
    c.method = Some(Method::MigratePages);
    c.migrate_micros = 2_000;
    c.after = Some(Locality {
        local_bytes: 3,
        remote_bytes: 1,
        remote_pages: 7,
        ..Default::default()
    });
    LocalityReport::new(vec![c])
}
