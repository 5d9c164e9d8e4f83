//! What the watches tell the re-resolver, the piece `live` and `reresolve` share so that neither
//! imports the other: why a pass is wanted ([`Trigger`]), for which namespaces ([`Scope`]), the
//! channel that carries them ([`Triggers`]), and the watches' pure decisions (the pass a policy
//! change asks for, a namespace gaining the opt-in label). The re-resolver folds what arrives
//! (`reresolve::scope`).

use std::collections::{BTreeSet, HashSet};

use tokio::sync::mpsc;

use crate::policy::{NamespaceQosConfig, PolicyConfig};

/// What asked for a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Trigger {
    /// This replica became the lease holder: everything, once (pods admitted while no webhook
    /// answered are among them).
    Elected,
    /// A new valid version of the cluster ConfigMap that changes the policy.
    ClusterConfig,
    /// A new valid version of the namespace ConfigMap: the namespaces whose verdict changed.
    NamespaceConfig,
    /// A namespace gained the opt-in label.
    NamespaceOptIn,
    /// The periodic full pass.
    Periodic,
    /// Pods that admission answered differently (another replica's policy was not there yet).
    Retry,
}

impl Trigger {
    pub const ALL: [Trigger; 6] = [
        Trigger::Elected,
        Trigger::ClusterConfig,
        Trigger::NamespaceConfig,
        Trigger::NamespaceOptIn,
        Trigger::Periodic,
        Trigger::Retry,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Elected => "elected",
            Trigger::ClusterConfig => "cluster-config",
            Trigger::NamespaceConfig => "namespace-config",
            Trigger::NamespaceOptIn => "namespace-opt-in",
            Trigger::Periodic => "periodic",
            Trigger::Retry => "retry",
        }
    }
}

/// The namespaces a pass covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every opted-in namespace.
    All,
    /// These (those of them that are opted in when the pass runs).
    Namespaces(BTreeSet<String>),
}

impl Scope {
    pub fn one(namespace: &str) -> Self {
        Scope::Namespaces(BTreeSet::from([namespace.to_owned()]))
    }

    /// Both scopes: the union of their namespaces, or every namespace.
    pub(crate) fn merge(self, other: Scope) -> Scope {
        match (self, other) {
            (Scope::Namespaces(mut a), Scope::Namespaces(b)) => {
                a.extend(b);
                Scope::Namespaces(a)
            }
            _ => Scope::All,
        }
    }

    /// The namespaces to list, sorted: `opted_in` restricted to the scope.
    pub fn select<'n>(&self, opted_in: impl IntoIterator<Item = &'n str>) -> Vec<String> {
        let mut out: Vec<String> = opted_in
            .into_iter()
            .filter(|ns| match self {
                Scope::All => true,
                Scope::Namespaces(set) => set.contains(*ns),
            })
            .map(str::to_owned)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// Sends triggers to the re-resolver; does nothing when there is none (standalone, or
/// `--reresolve=false`).
#[derive(Debug, Clone, Default)]
pub struct Triggers(Option<mpsc::UnboundedSender<(Trigger, Scope)>>);

impl Triggers {
    pub fn send(&self, trigger: Trigger, scope: Scope) {
        if let Some(tx) = &self.0 {
            let _ = tx.send((trigger, scope));
        }
    }
}

/// A trigger channel: the watches hold the sender, the re-resolver's driver the receiver.
pub fn triggers() -> (Triggers, mpsc::UnboundedReceiver<(Trigger, Scope)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Triggers(Some(tx)), rx)
}

/// The namespaces whose enable/disable verdict differs between two namespace ConfigMaps.
pub fn changed_verdicts(old: &NamespaceQosConfig, new: &NamespaceQosConfig) -> BTreeSet<String> {
    old.enabled
        .iter()
        .chain(&old.disabled)
        .chain(&new.enabled)
        .chain(&new.disabled)
        .filter(|ns| old.verdict(ns) != new.verdict(ns))
        .cloned()
        .collect()
}

/// The pass a new policy snapshot asks for, if any: a changed cluster ConfigMap (any class
/// section: memory QoS, locality, CPU QoS, resctrl, proactive reclaim) concerns every pod; a
/// changed namespace ConfigMap only the namespaces whose verdict moved, in `memory-qos` or in
/// `proactive-reclaim`; a version that parses to the same policy (another key of the ConfigMap
/// was edited) none.
pub fn config_change(old: &PolicyConfig, new: &PolicyConfig) -> Option<(Trigger, Scope)> {
    if old.cluster != new.cluster {
        return Some((Trigger::ClusterConfig, Scope::All));
    }
    let mut moved = changed_verdicts(&old.namespaces, &new.namespaces);
    moved.extend(changed_verdicts(
        &old.proactive_reclaim_namespaces,
        &new.proactive_reclaim_namespaces,
    ));
    (!moved.is_empty()).then_some((Trigger::NamespaceConfig, Scope::Namespaces(moved)))
}

/// Remembers which namespaces carry the opt-in label, to notice one gaining it. Namespaces seen
/// in the first list are only recorded: the pass on election covers them.
#[derive(Debug, Default)]
pub struct OptInTracker {
    opted_in: HashSet<String>,
    listed: bool,
}

impl OptInTracker {
    /// Records a namespace's current state; true when it has just gained the label (after the
    /// first list), i.e. its pods want a pass.
    pub fn observe(&mut self, namespace: &str, opted_in: bool) -> bool {
        if !opted_in {
            self.opted_in.remove(namespace);
            return false;
        }
        self.opted_in.insert(namespace.to_owned()) && self.listed
    }

    pub fn forget(&mut self, namespace: &str) {
        self.opted_in.remove(namespace);
    }

    /// The first list is complete: from now on a newly labelled namespace triggers a pass.
    pub fn listed(&mut self) {
        self.listed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns_config(enabled: &[&str], disabled: &[&str]) -> NamespaceQosConfig {
        NamespaceQosConfig {
            enabled: enabled.iter().map(|s| (*s).to_owned()).collect(),
            disabled: disabled.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn changed_verdicts_table() {
        for (old, new, want) in [
            (ns_config(&[], &[]), ns_config(&[], &[]), set(&[])),
            (ns_config(&["a"], &[]), ns_config(&["a"], &[]), set(&[])),
            (ns_config(&["a"], &[]), ns_config(&[], &[]), set(&["a"])),
            (ns_config(&[], &[]), ns_config(&[], &["b"]), set(&["b"])),
            // enabled -> disabled and a namespace moving into both lists (disabled wins).
            (ns_config(&["a"], &[]), ns_config(&[], &["a"]), set(&["a"])),
            (ns_config(&[], &["a"]), ns_config(&["a"], &["a"]), set(&[])),
            (
                ns_config(&["a", "b"], &["c"]),
                ns_config(&["b", "c"], &[]),
                set(&["a", "c"]),
            ),
        ] {
            assert_eq!(changed_verdicts(&old, &new), want, "{old:?} -> {new:?}");
        }
    }

    #[test]
    fn config_changes() {
        let base = PolicyConfig::default();
        assert_eq!(config_change(&base, &base), None);
        let mut ns = base.clone();
        ns.namespaces = ns_config(&["x"], &[]);
        assert_eq!(
            config_change(&base, &ns),
            Some((Trigger::NamespaceConfig, Scope::Namespaces(set(&["x"]))))
        );
        let mut cluster = base.clone();
        cluster.cluster = crate::policy::ClusterQosConfig::parse(
            r#"{"clusterStrategy": {"lsClass": {"memoryQOS": {"enable": true}}}}"#,
        )
        .expect("parses")
        .config;
        assert_eq!(
            config_change(&ns, &cluster),
            Some((Trigger::ClusterConfig, Scope::All))
        );
    }

    #[test]
    fn proactive_reclaim_changes_ask_for_a_pass() {
        let base = PolicyConfig::default();
        let mut ns = base.clone();
        ns.namespaces = ns_config(&["x"], &[]);
        ns.proactive_reclaim_namespaces = ns_config(&[], &["y"]);
        assert_eq!(
            config_change(&base, &ns),
            Some((
                Trigger::NamespaceConfig,
                Scope::Namespaces(set(&["x", "y"]))
            ))
        );
        let mut same_lists_elsewhere = base.clone();
        same_lists_elsewhere.proactive_reclaim_namespaces = ns_config(&["x"], &[]);
        let mut moved = same_lists_elsewhere.clone();
        moved.namespaces = ns_config(&["x"], &[]);
        assert_eq!(
            config_change(&same_lists_elsewhere, &moved),
            Some((Trigger::NamespaceConfig, Scope::Namespaces(set(&["x"])))),
            "memory-qos moved for x even though proactive-reclaim did not"
        );
        let mut cluster = base.clone();
        cluster.cluster = crate::policy::ClusterQosConfig::parse(
            r#"{"clusterStrategy": {"beClass": {"proactiveReclaim": {"enable": true}}}}"#,
        )
        .expect("parses")
        .config;
        assert_eq!(
            config_change(&base, &cluster),
            Some((Trigger::ClusterConfig, Scope::All))
        );
        let mut step = cluster.clone();
        step.cluster.be.proactive_reclaim = step.cluster.be.proactive_reclaim.map(|mut s| {
            s.params.0[2] = Some(20);
            s
        });
        assert_eq!(
            config_change(&cluster, &step),
            Some((Trigger::ClusterConfig, Scope::All)),
            "a parameter alone"
        );
    }

    #[test]
    fn scope_selects_opted_in_namespaces() {
        let opted_in = ["b", "a", "c"];
        assert_eq!(Scope::All.select(opted_in), ["a", "b", "c"]);
        assert_eq!(
            Scope::Namespaces(set(&["c", "x"])).select(opted_in),
            ["c"],
            "x is not opted in"
        );
    }

    #[test]
    fn opt_in_tracker_reports_namespaces_gaining_the_label_after_the_first_list() {
        let mut t = OptInTracker::default();
        assert!(!t.observe("a", true), "first list: recorded only");
        assert!(!t.observe("b", false));
        t.listed();
        assert!(!t.observe("a", true), "already opted in");
        assert!(t.observe("b", true), "gained the label");
        assert!(!t.observe("b", true), "once");
        assert!(!t.observe("b", false), "lost it");
        assert!(t.observe("b", true), "gained it again");
        t.forget("b");
        assert!(t.observe("b", true), "re-created with the label");
    }
}
