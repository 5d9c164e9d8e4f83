//! The one error of building a [`super::Config`].

use crate::node::collectors::GateError;
use crate::node::{colocation, nri, proactive, reclaim};
use crate::server::EndpointError;

/// A flag out of its range, named with the range it must be in.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `--feature-gates` and the collectors' intervals.
    #[error(transparent)]
    Gates(#[from] GateError),
    #[error("--collect-serve: {0}")]
    CollectServe(String),
    #[error("--metrics-addr {0:?} is not host:port or :port")]
    Addr(String),
    #[error("--resync-seconds must be at least 1")]
    Resync,
    #[error(transparent)]
    Colocation(#[from] colocation::SettingsError),
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    #[error(transparent)]
    Nri(#[from] nri::SettingsError),
    #[error(transparent)]
    Reclaim(#[from] reclaim::SettingsError),
    #[error(transparent)]
    Proactive(#[from] proactive::SettingsError),
}
