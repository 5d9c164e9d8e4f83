//! How a burst of triggers is folded into one pass (pure). The triggers and their scopes are
//! [`crate::triggers`], shared with the watches that send them.

use std::collections::BTreeSet;

pub use crate::triggers::{Scope, Trigger};

/// Triggers waiting for the next pass, folded: one pass serves them all.
#[derive(Debug, Default)]
pub struct Pending {
    triggers: BTreeSet<Trigger>,
    scope: Option<Scope>,
}

impl Pending {
    pub fn add(&mut self, trigger: Trigger, scope: Scope) {
        self.triggers.insert(trigger);
        self.scope = Some(match self.scope.take() {
            None => scope,
            Some(s) => s.merge(scope),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.triggers.is_empty()
    }

    /// The folded triggers and scope, leaving nothing pending.
    pub fn take(&mut self) -> Option<(Vec<Trigger>, Scope)> {
        let scope = self.scope.take()?;
        let triggers = std::mem::take(&mut self.triggers).into_iter().collect();
        Some((triggers, scope))
    }
}

/// The triggers' names for the pass log line: `cluster-config+periodic`.
pub fn trigger_names(triggers: &[Trigger]) -> String {
    triggers
        .iter()
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join("+")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_burst_folds_into_one_pass() {
        let mut p = Pending::default();
        assert!(p.take().is_none());
        p.add(Trigger::NamespaceOptIn, Scope::one("a"));
        p.add(
            Trigger::NamespaceConfig,
            Scope::Namespaces(set(&["b", "c"])),
        );
        p.add(Trigger::NamespaceOptIn, Scope::one("a"));
        assert_eq!(
            p.take(),
            Some((
                vec![Trigger::NamespaceConfig, Trigger::NamespaceOptIn],
                Scope::Namespaces(set(&["a", "b", "c"]))
            ))
        );
        assert!(p.is_empty());
        p.add(Trigger::NamespaceOptIn, Scope::one("a"));
        p.add(Trigger::Periodic, Scope::All);
        p.add(Trigger::Retry, Scope::one("z"));
        let (triggers, scope) = p.take().expect("pending");
        assert_eq!(scope, Scope::All);
        assert_eq!(trigger_names(&triggers), "namespace-opt-in+periodic+retry");
    }
}
