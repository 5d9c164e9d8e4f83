//! The re-resolver's flags (each with a `KOORD_*` variable) and its typed configuration.

use std::time::Duration;

use crate::duration::parse_duration;
use crate::reresolve::lease::{LeaseTiming, TimingError};

#[derive(Debug, Clone, clap::Args)]
pub struct ReresolveArgs {
    /// Re-resolve running pods when the policy changes (in-cluster only; never standalone).
    #[arg(long, env = "KOORD_RERESOLVE", default_value_t = true, action = clap::ArgAction::Set)]
    pub reresolve: bool,
    /// Full pass over every pod of the opted-in namespaces this often.
    #[arg(long, env = "KOORD_RERESOLVE_INTERVAL", default_value = "10m", value_parser = parse_duration)]
    pub reresolve_interval: Duration,
    /// API requests per second of the re-resolver (lists, reads, patches) and Events per second.
    #[arg(long, env = "KOORD_RERESOLVE_QPS", default_value_t = 50.0)]
    pub reresolve_qps: f64,
    /// Requests the re-resolver may send at once before `--reresolve-qps` paces it.
    #[arg(long, env = "KOORD_RERESOLVE_BURST", default_value_t = 100)]
    pub reresolve_burst: u32,
    /// Only count the pods that would be patched (`koord_webhook_reresolve_pods_patched_total{mode="dry-run"}`); write nothing.
    #[arg(long, env = "KOORD_RERESOLVE_DRY_RUN")]
    pub reresolve_dry_run: bool,
    /// Triggers arriving within this time of the first one are served by one pass.
    #[arg(long, env = "KOORD_RERESOLVE_DEBOUNCE", default_value = "1s", value_parser = parse_duration)]
    pub reresolve_debounce: Duration,
    /// An Event identical to one already posted for the pod is dropped for this long.
    #[arg(long, env = "KOORD_RERESOLVE_EVENT_WINDOW", default_value = "10m", value_parser = parse_duration)]
    pub reresolve_event_window: Duration,
    /// Name of the Lease that elects the one replica that re-resolves.
    #[arg(
        long,
        env = "KOORD_LEADER_ELECTION_LEASE",
        default_value = "koord-webhook-reresolver"
    )]
    pub leader_election_lease: String,
    /// Namespace of that Lease (default: `--own-namespace`).
    #[arg(long, env = "KOORD_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// This replica's identity in the Lease (the manifests set the pod name; default:
    /// hostname and process id).
    #[arg(long, env = "KOORD_POD_NAME")]
    pub leader_election_identity: Option<String>,
    /// How long a Lease record that stopped changing keeps other replicas away.
    #[arg(long, env = "KOORD_LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_election_lease_duration: Duration,
    /// The holder stops re-resolving when it could not renew for this long (< lease duration).
    #[arg(long, env = "KOORD_LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub leader_election_renew_deadline: Duration,
    /// How often the holder renews and the others look (< renew deadline).
    #[arg(long, env = "KOORD_LEADER_ELECTION_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    pub leader_election_retry_period: Duration,
}

/// Where the Lease is and who this replica is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub timing: LeaseTiming,
}

/// The typed re-resolver configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ReresolveConfig {
    pub interval: Duration,
    pub qps: f64,
    pub burst: u32,
    pub dry_run: bool,
    pub debounce: Duration,
    pub event_window: Duration,
    pub lease: LeaseConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum ReresolveConfigError {
    #[error("--reresolve-qps must be a positive number, not {0}")]
    Qps(f64),
    #[error("--reresolve-interval must be at least one second")]
    Interval,
    #[error("leader election: {0}")]
    Timing(#[from] TimingError),
    #[error("--leader-election-identity must not be empty")]
    Identity,
}

/// This process's default identity: unique per process even when replicas share a hostname.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "koord-webhook"
    } else {
        &host
    };
    format!("{host}_{}", std::process::id())
}

impl LeaseConfig {
    /// The Lease settings, also when re-resolution is off (self-managed certificates have
    /// the same one writer).
    pub fn from_args(
        args: &ReresolveArgs,
        own_namespace: &str,
    ) -> Result<Self, ReresolveConfigError> {
        let identity = match &args.leader_election_identity {
            Some(id) if id.trim().is_empty() => return Err(ReresolveConfigError::Identity),
            Some(id) => id.trim().to_owned(),
            None => default_identity(),
        };
        Ok(LeaseConfig {
            name: args.leader_election_lease.clone(),
            namespace: args
                .leader_election_namespace
                .clone()
                .unwrap_or_else(|| own_namespace.to_owned()),
            identity,
            timing: LeaseTiming::new(
                args.leader_election_lease_duration,
                args.leader_election_renew_deadline,
                args.leader_election_retry_period,
            )?,
        })
    }
}

impl ReresolveConfig {
    /// `None` when re-resolution is switched off.
    pub fn from_args(
        args: &ReresolveArgs,
        own_namespace: &str,
    ) -> Result<Option<Self>, ReresolveConfigError> {
        if !args.reresolve {
            return Ok(None);
        }
        if !(args.reresolve_qps.is_finite() && args.reresolve_qps > 0.0) {
            return Err(ReresolveConfigError::Qps(args.reresolve_qps));
        }
        if args.reresolve_interval < Duration::from_secs(1) {
            return Err(ReresolveConfigError::Interval);
        }
        let lease = LeaseConfig::from_args(args, own_namespace)?;
        Ok(Some(ReresolveConfig {
            interval: args.reresolve_interval,
            qps: args.reresolve_qps,
            burst: args.reresolve_burst,
            dry_run: args.reresolve_dry_run,
            debounce: args.reresolve_debounce,
            event_window: args.reresolve_event_window,
            lease,
        }))
    }
}
