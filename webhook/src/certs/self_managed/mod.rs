//! Self-managed serving certificates (`serve --tls-secret`): the certificate lives in a Secret
//! that every replica reads through the API (a watch: a change reaches the replicas in about
//! a second, where a Secret volume takes the kubelet up to a minute or more), and one writer,
//! the Lease holder, creates and rotates it and publishes its CA into the caBundle of the one
//! MutatingWebhookConfiguration named by `--webhook-configuration`.
//!
//! The decisions are pure ([`crate::certs::rotation`]); this module reads the two objects,
//! writes them back, swaps the served rustls config and reports readiness: ready only while
//! the served certificate verifies against the published caBundle.

mod args;
mod secret;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use axum_server::tls_rustls::RustlsConfig;
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::Resource;
use kube::api::PostParams;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::watcher::watcher;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

pub use args::{SelfCertArgs, SelfCertConfig, SelfCertConfigError};
use secret::{SecretPems, published_bundles, stored_state, with_bundle, with_pems};

use crate::certs::inspect::{CertInfo, chains_to, inspect_pem, leaf_not_after, to_pem};
use crate::certs::rotation::{Renewal, desired_bundle, renewal, should_switch, until_next_renewal};
use crate::certs::{CertKeyPem, GenerateError, generate_ca, sign_serving};
use crate::live::state::AppState;
use crate::reresolve::controller::Leadership;
use crate::tls_config::{PemPair, server_config};

/// Who may write: the Lease holder (tests use a plain flag).
pub trait Writer: Send + Sync {
    fn may_write(&self) -> bool;
}

impl Writer for Leadership {
    fn may_write(&self) -> bool {
        self.is_leader()
    }
}

impl Writer for AtomicBool {
    fn may_write(&self) -> bool {
        self.load(Ordering::Acquire)
    }
}

/// Why a replica is not ready before its first look at the Secret and the caBundle.
pub const NOT_CHECKED: &str =
    "serving certificate: not checked against the caBundle yet (self-managed certificates)";

/// The longest a replica waits between two looks without a watch event (the served
/// certificate's own expiry, the holder's renewal time).
const MAX_WAIT: Duration = Duration::from_secs(30);
/// The look while a new certificate waits out the switch delay.
const PENDING_WAIT: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Generate(#[from] GenerateError),
    #[error("the new CA: {0}")]
    NewCa(crate::certs::inspect::InspectError),
}

/// Watches one object by name; `wake` is notified on every event.
fn watch_one<K>(api: Api<K>, name: &str, wake: Arc<Notify>) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let config = crate::live::watch::named_watch_config(name);
    let stream = reflector(writer, watcher(api, config)).default_backoff();
    let name = name.to_owned();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Err(e) = event {
                tracing::warn!(error = %e, object = %name, "watch failed; retrying");
            }
            wake.notify_one();
        }
    });
    (reader, task)
}

fn first<K>(store: &Store<K>) -> Option<Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store.state().into_iter().next()
}

/// What this replica serves, and the certificate it may switch to.
struct Serving {
    tls: RustlsConfig,
    served: PemPair,
    /// The Secret's certificate and since when it has verified against the caBundle.
    candidate: Option<(PemPair, Instant)>,
}

/// Runs until aborted: every replica serves the Secret's certificate once it verifies
/// against the published caBundle; the writer also keeps both in order.
pub async fn run(
    client: kube::Client,
    config: SelfCertConfig,
    tls: RustlsConfig,
    served: PemPair,
    state: Arc<AppState>,
    writer: Arc<dyn Writer>,
) {
    // Not ready until the first look has seen the served certificate verify.
    state
        .readiness
        .set_certificate_problem(Some(NOT_CHECKED.into()));
    let wake = Arc::new(Notify::new());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client);
    let (secret_store, t1) = watch_one(secrets.clone(), &config.secret, wake.clone());
    let (webhook_store, t2) = watch_one(
        webhooks.clone(),
        &config.webhook_configuration,
        wake.clone(),
    );
    let _guard = AbortOnDrop(vec![t1, t2]);
    let _ = secret_store.wait_until_ready().await;
    let _ = webhook_store.wait_until_ready().await;
    let mut serving = Serving {
        tls,
        served,
        candidate: None,
    };
    tracing::info!(secret = %config.secret, webhook_configuration = %config.webhook_configuration,
        "self-managed serving certificate");
    loop {
        let secret = first(&secret_store);
        let webhook = first(&webhook_store);
        let mut wait = MAX_WAIT;
        if writer.may_write() {
            match write_step(
                &secrets,
                &webhooks,
                &config,
                secret.as_deref(),
                webhook.as_deref(),
            )
            .await
            {
                Ok(next) => wait = wait.min(next),
                Err(e) => {
                    tracing::warn!(error = %e, secret = %config.secret, "could not update the serving certificate");
                    wait = Duration::from_secs(2);
                }
            }
        }
        let pending = serve_step(
            &mut serving,
            &config,
            &state,
            secret.as_deref(),
            webhook.as_deref(),
        );
        if pending {
            wait = wait.min(PENDING_WAIT);
        }
        let _ = tokio::time::timeout(wait.max(Duration::from_millis(100)), wake.notified()).await;
    }
}

struct AbortOnDrop(Vec<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Every replica: swap to the Secret's certificate when it may, and say whether the served one
/// verifies. True while a certificate waits out the switch delay.
fn serve_step(
    serving: &mut Serving,
    config: &SelfCertConfig,
    state: &AppState,
    secret: Option<&Secret>,
    webhook: Option<&MutatingWebhookConfiguration>,
) -> bool {
    let now = SystemTime::now();
    let dns = config.dns_name();
    let bundles = webhook.map(published_bundles).unwrap_or_default();
    let verify = |cert: &[u8]| -> Result<(), String> {
        if webhook.is_none() {
            return Err(format!(
                "MutatingWebhookConfiguration {} not found",
                config.webhook_configuration
            ));
        }
        if bundles.is_empty() {
            return Err(format!(
                "MutatingWebhookConfiguration {} has no webhooks",
                config.webhook_configuration
            ));
        }
        for b in &bundles {
            chains_to(cert, b, &dns, now).map_err(|e| {
                format!(
                    "served certificate vs caBundle of MutatingWebhookConfiguration {}: {e}",
                    config.webhook_configuration
                )
            })?;
        }
        Ok(())
    };
    let mut served_ok = verify(&serving.served.0);
    let candidate = secret
        .and_then(|s| SecretPems::of(s).serving())
        .filter(|pair| *pair != serving.served);
    let mut pending = false;
    match candidate {
        None => serving.candidate = None,
        Some(pair) => {
            let usable = server_config(&pair.0, &pair.1)
                .map_err(|e| e.to_string())
                .and_then(|c| verify(&pair.0).map(|()| c));
            match usable {
                Err(_) => serving.candidate = None,
                Ok(rustls_config) => {
                    let since = match &serving.candidate {
                        Some((p, since)) if *p == pair => *since,
                        _ => Instant::now(),
                    };
                    if should_switch(
                        served_ok.is_ok(),
                        Some(since.elapsed()),
                        config.switch_delay,
                    ) {
                        serving.tls.reload_from_config(rustls_config);
                        serving.served = pair;
                        serving.candidate = None;
                        served_ok = Ok(());
                        state.metrics.tls_reloads.inc();
                        state
                            .metrics
                            .served_certificate(leaf_not_after(&serving.served.0));
                        tracing::info!(secret = %config.secret, "serving certificate switched to the Secret's");
                    } else {
                        serving.candidate = Some((pair, since));
                        pending = true;
                    }
                }
            }
        }
    }
    state
        .metrics
        .ca_bundle_match(&config.webhook_configuration, served_ok.is_ok());
    state.readiness.set_certificate_problem(served_ok.err());
    pending
}

/// The writer: renew what is due, then publish the caBundle. Returns the wait until the next
/// renewal is due.
async fn write_step(
    secrets: &Api<Secret>,
    webhooks: &Api<MutatingWebhookConfiguration>,
    config: &SelfCertConfig,
    secret: Option<&Secret>,
    webhook: Option<&MutatingWebhookConfiguration>,
) -> Result<Duration, WriteError> {
    // Without our MutatingWebhookConfiguration (not installed yet, or being uninstalled) there
    // is nothing to serve for: a Secret made now would outlive the uninstall.
    let Some(webhook) = webhook else {
        return Ok(MAX_WAIT);
    };
    let now = SystemTime::now();
    let (stored, stored_ca) = stored_state(secret, &config.dns_name(), now);
    let renewed = match renewal(now, &stored) {
        Renewal::Keep => None,
        Renewal::Leaf(why) => match &stored_ca {
            Some((ca, info)) => {
                tracing::info!(reason = %why, "issuing a new serving certificate");
                let leaf = issue(ca, info, config)?;
                Some((ca.clone(), info.clone(), leaf))
            }
            None => None,
        },
        Renewal::CaAndLeaf(why) => {
            tracing::info!(reason = %why, "making a new CA and serving certificate");
            let ca = generate_ca(config.policy.ca_lifetime)?;
            let info = inspect_pem(ca.cert_pem.as_bytes())
                .map_err(WriteError::NewCa)?
                .remove(0);
            let leaf = issue(&ca, &info, config)?;
            Some((ca, info, leaf))
        }
    };
    let current = match &renewed {
        Some((ca, info, leaf)) => {
            write_secret(secrets, config, secret, webhook, ca, leaf).await?;
            info.clone()
        }
        None => match stored_ca {
            Some((_, info)) => info,
            None => return Ok(MAX_WAIT),
        },
    };
    publish(webhooks, config, webhook, &current, now).await?;
    let next = if renewed.is_some() {
        Duration::ZERO
    } else {
        until_next_renewal(now, &stored)
    };
    Ok(next.max(Duration::from_secs(1)))
}

fn issue(
    ca: &CertKeyPem,
    info: &CertInfo,
    config: &SelfCertConfig,
) -> Result<CertKeyPem, GenerateError> {
    sign_serving(
        ca,
        config.sans(),
        config.policy.cert_lifetime,
        Some(info.not_after),
    )
}

async fn write_secret(
    secrets: &Api<Secret>,
    config: &SelfCertConfig,
    secret: Option<&Secret>,
    webhook: &MutatingWebhookConfiguration,
    ca: &CertKeyPem,
    leaf: &CertKeyPem,
) -> Result<(), WriteError> {
    let next = with_pems(secret, config, webhook, ca, leaf);
    match secret {
        // resourceVersion is the one read: a concurrent writer makes this a 409, retried.
        Some(_) => {
            secrets
                .replace(&config.secret, &PostParams::default(), &next)
                .await?
        }
        None => secrets.create(&PostParams::default(), &next).await?,
    };
    tracing::info!(secret = %config.secret, "serving certificate written");
    Ok(())
}

async fn publish(
    webhooks: &Api<MutatingWebhookConfiguration>,
    config: &SelfCertConfig,
    webhook: &MutatingWebhookConfiguration,
    current: &CertInfo,
    now: SystemTime,
) -> Result<(), WriteError> {
    let published: Vec<CertInfo> = published_bundles(webhook)
        .iter()
        .filter_map(|b| inspect_pem(b).ok())
        .flatten()
        .collect();
    let bundle = to_pem(&desired_bundle(
        now,
        current,
        &published,
        config.policy.retire_after,
    ));
    let Some(next) = with_bundle(webhook, bundle.as_bytes()) else {
        return Ok(());
    };
    webhooks
        .replace(&config.webhook_configuration, &PostParams::default(), &next)
        .await?;
    tracing::info!(webhook_configuration = %config.webhook_configuration,
        cas = bundle.matches("BEGIN CERTIFICATE").count(), "caBundle published");
    Ok(())
}
