//! Resctrl QoS (L3 ways, memory bandwidth; docs/contract.md §2, CPU QoS and resctrl): the
//! class's partition from the cluster ConfigMap. Static per class, so resolved here and only
//! written by the applier.

use koord_api::{DecisionSource, QosClass, ResolvedResctrlQos};

use crate::policy::{PolicyConfig, effective_resctrl};

/// The class's resctrl partition from the cluster ConfigMap; present only when it states one.
/// The ConfigMap parser already refused empty slices, so this cannot fail.
pub fn resolve_resctrl_qos(class: QosClass, config: &PolicyConfig) -> Option<ResolvedResctrlQos> {
    let setting = config.cluster.class(class).resctrl_qos?;
    let enabled = setting.enable == Some(true);
    let (start, end, mba) = if enabled {
        effective_resctrl(class, &setting)
    } else {
        (0, 100, 100)
    };
    Some(ResolvedResctrlQos {
        enabled,
        cat_range_start_percent: start,
        cat_range_end_percent: end,
        mba_percent: mba,
        source: DecisionSource::ClusterConfig,
    })
}
