//! `koord-webhook serve`: the admission server (axum over rustls).
//!
//! Shape (Kubewarden policy-server style): [`ServeArgs`] (flags, each with an env variable) ->
//! [`Config`] (typed, validated) -> [`WebhookServer::new`] (binds the listeners) -> [`WebhookServer::router`] /
//! [`WebhookServer::run`].

mod args;
pub mod body_budget;
pub mod connections;
mod handler;
mod handshake_turns;
pub mod tls;
mod tls_accept;

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::api::core::v1::Namespace;
use koord_runtime::metrics::MetricError;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use crate::certs::self_managed::{SelfCertConfig, SelfCertConfigError};
use crate::live::state::{AppState, Limits, NamespaceGate, Readiness};
use crate::live::watch::ConfigMapNames;
use crate::metrics::Metrics;
use crate::reresolve::controller::{Election, LeaseConfig, ReresolveConfig, ReresolveConfigError};
use crate::triggers::Triggers;
pub use args::ServeArgs;
use connections::{ConnectionLimits, FirstBytesAcceptor, GuardedAcceptor};
use tls::CertFiles;
use tls_accept::TlsAcceptor;

use crate::policy::{PolicyConfig, PolicyLoadError, load_policy};

/// Where the serving certificate comes from.
#[derive(Debug, Clone)]
pub enum TlsSource {
    /// PEM files, re-read when their bytes change.
    Files(CertFiles),
    /// Made at start (standalone without `--tls-cert`): self-signed for these names.
    SelfSigned { sans: Vec<String> },
    /// Self-managed (`--tls-secret`): the Secret's certificate, read through the API once it
    /// verifies against the published caBundle; a throwaway self-signed one until then.
    Secret(SelfCertConfig),
}

/// Where the policy comes from.
#[derive(Debug, Clone)]
pub enum PolicySource {
    /// Watched ConfigMaps and Namespaces (in-cluster).
    Cluster(ConfigMapNames),
    /// Fixed at start: embedded defaults or ConfigMap manifests from files.
    Standalone {
        cluster_config: Option<PathBuf>,
        namespace_config: Option<PathBuf>,
    },
}

/// The typed server configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// Plain-HTTP listener for `/healthz`, `/readyz`, `/metrics` (probes, Prometheus).
    pub metrics_listen: Option<SocketAddr>,
    pub tls: TlsSource,
    pub tls_reload_interval: Duration,
    pub policy: PolicySource,
    /// Never mutated, whatever arrives (kube-system and our own namespace).
    pub exempt_namespaces: Vec<String>,
    /// Skip namespaces the cache knows without the opt-in label (cluster mode only).
    pub require_namespace_opt_in: bool,
    pub limits: Limits,
    pub connections: ConnectionSettings,
    /// After SIGTERM: answering with `/readyz` failing for this long, then the listener closes.
    pub shutdown_delay: Duration,
    /// Then: in-flight requests get this long to finish.
    pub shutdown_grace: Duration,
    /// The re-resolver (cluster mode only; `None` standalone or with `--reresolve=false`).
    pub reresolve: Option<ReresolveConfig>,
    /// The Lease that elects the one writer (re-resolver, self-managed certificates); `None`
    /// when nothing writes.
    pub lease: Option<LeaseConfig>,
}

/// How long and how many connections may be held (docs/admission-server.md, "Abuse").
#[derive(Debug, Clone, Copy)]
pub struct ConnectionSettings {
    pub limits: ConnectionLimits,
    /// New connection: the first request's headers within this, after the handshake.
    pub header_read_timeout: Duration,
    pub tls_handshake_timeout: Duration,
    pub http2: Http2Settings,
}

/// HTTP/2 limits (docs/decisions.md, "HTTP/2 windows stay at 1 MiB, header lists at 16 KiB").
#[derive(Debug, Clone, Copy)]
pub struct Http2Settings {
    /// HTTP/2 connections open at once; past it, new connections are offered HTTP/1.1 only.
    pub max_connections: usize,
    pub max_concurrent_streams: u32,
    pub stream_window_bytes: u32,
    pub connection_window_bytes: u32,
}

/// Largest HTTP/1.1 read buffer (headers): a client that sends endless headers is cut off
/// here instead of at hyper's default of ~400 KiB per connection.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Largest HTTP/2 header list, decoded (hyper's default; the apiserver sends well under
/// 1 KiB). It is held with every stream that waits for a slot or its body, and HPACK lets a
/// client send it in a few bytes: 64 KiB here let 64 connections grow the process to 671 MiB
/// (docs/admission-server.md, "Abuse").
const H2_MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--tls-cert and --tls-key go together")]
    HalfTls,
    #[error("--tls-secret (self-managed) or --tls-cert/--tls-key are required unless --standalone")]
    NoTls,
    #[error("--cluster-config/--namespace-config only apply with --standalone")]
    ConfigFilesNeedStandalone,
    #[error("bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("serving certificate: {0}")]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Generate(#[from] crate::certs::GenerateError),
    #[error("configuration files: {0}")]
    Policy(#[from] PolicyLoadError),
    #[error(transparent)]
    Metrics(#[from] MetricError),
    #[error("Kubernetes client: {0}")]
    Kube(#[from] kube::Error),
    #[error("re-resolver: {0}")]
    Reresolve(#[from] ReresolveConfigError),
    #[error("self-managed certificates: {0}")]
    SelfCert(#[from] SelfCertConfigError),
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
}

impl Config {
    pub fn from_args(args: ServeArgs) -> Result<Self, ServeError> {
        let self_cert = SelfCertConfig::from_args(&args.self_certs, &args.own_namespace)?;
        let tls = match (args.tls_cert, args.tls_key, self_cert) {
            (None, None, Some(c)) if !args.standalone => TlsSource::Secret(c),
            (Some(cert), Some(key), _) => TlsSource::Files(CertFiles { cert, key }),
            (None, None, _) if args.standalone => {
                let mut sans = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
                let ip = args.listen.ip();
                if !ip.is_unspecified() && !ip.is_loopback() {
                    sans.push(ip.to_string());
                }
                TlsSource::SelfSigned { sans }
            }
            (None, None, _) => return Err(ServeError::NoTls),
            _ => return Err(ServeError::HalfTls),
        };
        let policy = if args.standalone {
            PolicySource::Standalone {
                cluster_config: args.cluster_config,
                namespace_config: args.namespace_config,
            }
        } else if args.cluster_config.is_some() || args.namespace_config.is_some() {
            return Err(ServeError::ConfigFilesNeedStandalone);
        } else {
            PolicySource::Cluster(ConfigMapNames {
                namespace: args.config_namespace,
                cluster: args.cluster_configmap,
                pod: args.namespace_configmap,
            })
        };
        let reresolve = match &policy {
            PolicySource::Cluster(_) => {
                ReresolveConfig::from_args(&args.reresolve, &args.own_namespace)?
            }
            PolicySource::Standalone { .. } => None,
        };
        let lease = match (&reresolve, &tls) {
            (Some(r), _) => Some(r.lease.clone()),
            (None, TlsSource::Secret(_)) => Some(LeaseConfig::from_args(
                &args.reresolve,
                &args.own_namespace,
            )?),
            (None, _) => None,
        };
        let mut exempt_namespaces = vec!["kube-system".to_owned(), args.own_namespace];
        exempt_namespaces.extend(args.exempt_namespaces);
        exempt_namespaces.dedup();
        Ok(Config {
            listen: args.listen,
            metrics_listen: args.metrics_listen,
            tls,
            tls_reload_interval: args.tls_reload_interval,
            policy,
            exempt_namespaces,
            require_namespace_opt_in: args.require_namespace_opt_in,
            limits: Limits {
                max_body_bytes: args.max_body_bytes,
                max_concurrent: args.max_concurrent,
                deadline: args.request_deadline,
            },
            connections: ConnectionSettings {
                limits: ConnectionLimits {
                    max_connections: args.max_connections,
                    max_connections_per_source: args.max_connections_per_source,
                    idle_timeout: args.idle_timeout,
                },
                header_read_timeout: args.header_read_timeout,
                tls_handshake_timeout: args.tls_handshake_timeout,
                http2: Http2Settings {
                    max_connections: args.max_h2_connections,
                    max_concurrent_streams: args.h2_max_concurrent_streams,
                    stream_window_bytes: args.h2_stream_window_bytes,
                    connection_window_bytes: args.h2_connection_window_bytes,
                },
            },
            shutdown_delay: args.shutdown_delay,
            shutdown_grace: args.shutdown_grace,
            reresolve,
            lease,
        })
    }
}

/// A bound, not yet running, webhook server.
pub struct WebhookServer {
    config: Config,
    state: Arc<AppState>,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    tls: RustlsConfig,
    tls_current: tls::PemPair,
    namespace_writer: Option<Writer<PartialObjectMeta<Namespace>>>,
    /// The Namespace cache (cluster mode): the opt-in check and the re-resolver read it.
    namespace_store: Option<Store<PartialObjectMeta<Namespace>>>,
    client: Option<kube::Client>,
    handle: Handle<SocketAddr>,
}

/// Connections the kernel completes and queues for `accept(2)` (capped by `net.core.somaxconn`,
/// 4096 by default since Linux 5.4), as the applier's endpoint and Go's servers listen. std's
/// `bind` asks for 128: under a flood that reconnects whatever the cap closes, the queue
/// overflowed and a normal client's new connection had its SYN dropped and retried a second
/// later (the lock-out round's slowest new connection, 1,047 ms).
const LISTEN_BACKLOG: i32 = 4096;

/// A listening socket on `addr`, non-blocking, with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`,
/// as std's `bind`: a restarted server may bind while the old socket is in TIME_WAIT).
fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let failed = |e: rustix::io::Errno| ServeError::Bind {
        addr,
        source: e.into(),
    };
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
    let socket =
        rustix::net::socket_with(family, SocketType::STREAM, flags, None).map_err(failed)?;
    rustix::net::sockopt::set_socket_reuseaddr(&socket, true).map_err(failed)?;
    rustix::net::bind(&socket, &addr).map_err(failed)?;
    rustix::net::listen(&socket, LISTEN_BACKLOG).map_err(failed)?;
    Ok(TcpListener::from(socket))
}

type NamespaceStore = Store<PartialObjectMeta<Namespace>>;
/// The background tasks of cluster mode, the re-resolver and the Lease loop.
type Background = (
    Vec<JoinHandle<()>>,
    Option<crate::reresolve::controller::Running>,
    Option<Election>,
);
type NamespaceWriter = Writer<PartialObjectMeta<Namespace>>;

/// The policy a server starts with, and how it gets ready.
struct InitialPolicy {
    policy: PolicyConfig,
    readiness: Readiness,
    /// The namespace cache the opt-in check reads (cluster mode with the check on).
    opt_in: Option<NamespaceStore>,
    /// The namespace cache (cluster mode) and what fills it.
    namespaces: Option<(NamespaceStore, NamespaceWriter)>,
}

impl InitialPolicy {
    /// Standalone: loaded from the files now, ready at once. Cluster: defaults until the
    /// watches have listed the ConfigMaps.
    fn load(config: &Config) -> Result<Self, ServeError> {
        match &config.policy {
            PolicySource::Standalone {
                cluster_config,
                namespace_config,
            } => {
                let mut notes = Vec::new();
                let policy = load_policy(
                    cluster_config.as_deref(),
                    namespace_config.as_deref(),
                    &mut notes,
                )?;
                for note in notes {
                    tracing::info!(note = %note, "configuration note");
                }
                Ok(InitialPolicy {
                    policy,
                    readiness: Readiness::all_ready(),
                    opt_in: None,
                    namespaces: None,
                })
            }
            PolicySource::Cluster(_) => {
                let (store, writer) = crate::live::watch::namespace_store();
                Ok(InitialPolicy {
                    policy: PolicyConfig::default(),
                    readiness: Readiness::default(),
                    opt_in: config.require_namespace_opt_in.then(|| store.clone()),
                    namespaces: Some((store, writer)),
                })
            }
        }
    }
}

/// The serving certificate's rustls config and the PEM bytes it was built from.
fn load_tls(source: &TlsSource) -> Result<(RustlsConfig, tls::PemPair), ServeError> {
    Ok(match source {
        TlsSource::Files(files) => files.load()?,
        TlsSource::SelfSigned { sans } => {
            let pem = crate::certs::self_signed(sans.clone(), 365)?;
            let (cert, key) = (pem.cert_pem.into_bytes(), pem.key_pem.into_bytes());
            let rustls = RustlsConfig::from_config(tls::server_config(&cert, &key)?);
            (rustls, (cert, key))
        }
        // Not trusted by anyone: /readyz stays false until the Secret's certificate is served.
        TlsSource::Secret(c) => load_tls(&TlsSource::SelfSigned { sans: c.sans() })?,
    })
}

impl WebhookServer {
    /// Loads the certificate and the standalone policy, binds the listeners.
    pub fn new(config: Config) -> Result<Self, ServeError> {
        koord_runtime::install_crypto_provider();
        let metrics = Metrics::new()?;
        let (tls, tls_current) = load_tls(&config.tls)?;
        metrics.served_certificate(crate::certs::inspect::leaf_not_after(&tls_current.0));
        let initial = InitialPolicy::load(&config)?;
        let state = AppState::new(
            initial.policy,
            NamespaceGate {
                exempt: config.exempt_namespaces.clone(),
                opt_in: initial.opt_in,
            },
            initial.readiness,
            metrics,
            config.limits,
        );
        if let TlsSource::Secret(_) = config.tls {
            // The throwaway certificate is trusted by nobody: not ready until the Secret's is served.
            state
                .readiness
                .set_certificate_problem(Some(crate::certs::self_managed::NOT_CHECKED.into()));
        }
        let listener = bind(config.listen)?;
        let metrics_listener = config.metrics_listen.map(bind).transpose()?;
        let (namespace_store, namespace_writer) = initial.namespaces.unzip();
        Ok(WebhookServer {
            config,
            state,
            listener,
            metrics_listener,
            tls,
            tls_current,
            namespace_writer,
            namespace_store,
            client: None,
            handle: Handle::new(),
        })
    }

    /// Uses this client for the watches instead of the in-cluster/kubeconfig default (tests
    /// point it at a fake apiserver).
    pub fn with_kube_client(mut self, client: kube::Client) -> Self {
        self.client = Some(client);
        self
    }

    pub fn local_addr(&self) -> Result<SocketAddr, ServeError> {
        Ok(self.listener.local_addr()?)
    }

    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener.as_ref()?.local_addr().ok()
    }

    /// Shuts the server down gracefully (in-flight requests finish) when called.
    pub fn handle(&self) -> Handle<SocketAddr> {
        self.handle.clone()
    }

    pub fn state(&self) -> Arc<AppState> {
        self.state.clone()
    }

    /// `/mutate-pod`, `/healthz`, `/readyz`, `/metrics`.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/mutate-pod", post(handler::mutate_pod))
            .with_state(self.state.clone())
            .merge(self.probe_router())
    }

    fn probe_router(&self) -> Router {
        Router::new()
            .route("/healthz", get(handler::healthz))
            .route("/readyz", get(handler::readyz))
            .route("/metrics", get(handler::metrics))
            .with_state(self.state.clone())
    }

    /// Serves until SIGTERM/SIGINT (or [`Self::handle`] shuts it down). Each background task
    /// runs in a span naming it: `config-watch`, `namespace-watch`, `leader-election`,
    /// `reresolve`, `reresolve-events`, `self-certs`, `tls-reload`, `probes`, `shutdown`.
    pub async fn run(mut self) -> Result<(), ServeError> {
        // First: a SIGTERM from here on drains, however early it comes.
        let signals = koord_runtime::ShutdownSignals::new();
        let router = self.router();
        let (mut tasks, reresolver, election) = self.spawn_watches().await?;
        tasks.extend(self.spawn_tls_reload());
        tasks.extend(self.spawn_probes()?);
        tasks.push(self.spawn_shutdown(signals));
        let addr = self.listener.local_addr()?;
        tracing::info!(%addr, "serving /mutate-pod over TLS");
        let settings = self.config.connections;
        let tls = TlsAcceptor::new(
            GuardedAcceptor::new(
                settings.limits,
                settings.http2.connection_window_bytes as usize,
                self.state.metrics.clone(),
            ),
            self.tls,
            settings.tls_handshake_timeout,
            settings.http2.max_connections,
            self.state.metrics.clone(),
        );
        let acceptor = FirstBytesAcceptor::new(tls, settings.header_read_timeout, MAX_HEADER_BYTES);
        let mut server = axum_server::from_tcp(self.listener)?
            .acceptor(acceptor)
            .handle(self.handle)
            .first_request_timeout(settings.header_read_timeout);
        // HTTP/1.1: a head is at most MAX_HEADER_BYTES. The next head on a kept-alive
        // connection is bounded by the idle timeout, which counts only what the server
        // writes (connections.rs): a head dripped a byte at a time gets no answer, so the
        // connection closes. hyper's own header-read timeout would do the same with a timer
        // armed and dropped on every request (about 1% of the keep-alive throughput), so it
        // is turned off explicitly (hyper's own default is 30 s once a timer is set).
        server
            .http_builder()
            .http1()
            .header_read_timeout(None)
            .max_buf_size(MAX_HEADER_BYTES);
        let h2 = settings.http2;
        server
            .http_builder()
            .http2()
            .max_header_list_size(H2_MAX_HEADER_LIST_BYTES)
            .max_concurrent_streams(h2.max_concurrent_streams)
            .initial_stream_window_size(h2.stream_window_bytes)
            .initial_connection_window_size(h2.connection_window_bytes);
        let result = server.serve(router.into_make_service()).await;
        for t in tasks {
            t.abort();
        }
        if let Some(r) = reresolver {
            r.finish();
        }
        if let Some(e) = election {
            e.finish().await;
        }
        Ok(result?)
    }

    /// In cluster mode, the ConfigMap and Namespace watches (and the client admission uses to
    /// confirm a namespace's opt-in label), the Lease loop, the re-resolver the watches
    /// trigger and the self-managed certificates.
    async fn spawn_watches(&mut self) -> Result<Background, ServeError> {
        let (PolicySource::Cluster(names), Some(writer), Some(store)) = (
            &self.config.policy,
            self.namespace_writer.take(),
            self.namespace_store.take(),
        ) else {
            return Ok((Vec::new(), None, None));
        };
        let client = match self.client.take() {
            Some(c) => c,
            None => koord_runtime::api_client().await?,
        };
        let _ = self.state.kube.set(client.clone());
        let (triggers, reresolver) = match self.config.reresolve.clone() {
            Some(config) => {
                let (tx, rx) = crate::triggers::triggers();
                (tx.clone(), Some((config, (tx, rx))))
            }
            None => (Triggers::default(), None),
        };
        let mut tasks = crate::live::watch::spawn_watches(
            client.clone(),
            self.state.clone(),
            names.clone(),
            writer,
            triggers,
        );
        let election = self.config.lease.clone().map(|lease| {
            Election::spawn(client.clone(), lease, self.state.metrics.reresolve.clone())
        });
        if let (TlsSource::Secret(config), Some(e)) = (&self.config.tls, &election) {
            let task = crate::certs::self_managed::run(
                client.clone(),
                config.clone(),
                self.tls.clone(),
                std::mem::take(&mut self.tls_current),
                self.state.clone(),
                e.leadership.clone(),
            );
            tasks.push(tokio::spawn(
                task.instrument(tracing::info_span!("self-certs")),
            ));
        }
        let running = reresolver
            .zip(election.as_ref())
            .map(|((config, channel), e)| {
                crate::reresolve::controller::spawn(
                    client,
                    self.state.clone(),
                    store,
                    config,
                    channel,
                    e.leadership.clone(),
                )
            });
        Ok((tasks, running, election))
    }

    /// With certificate files, the poller that swaps in a rotated pair.
    fn spawn_tls_reload(&mut self) -> Option<JoinHandle<()>> {
        let TlsSource::Files(files) = &self.config.tls else {
            return None;
        };
        let reload = files.clone().watch(
            self.tls.clone(),
            std::mem::take(&mut self.tls_current),
            self.config.tls_reload_interval,
            self.state.metrics.clone(),
        );
        Some(tokio::spawn(
            reload.instrument(tracing::info_span!("tls-reload")),
        ))
    }

    /// `/healthz`, `/readyz`, `/metrics` on the plain-HTTP listener, when there is one; it
    /// stops with the main listener.
    fn spawn_probes(&mut self) -> Result<Option<JoinHandle<()>>, ServeError> {
        let Some(listener) = self.metrics_listener.take() else {
            return Ok(None);
        };
        let probes = self.probe_router();
        let handle = Handle::with_control(self.handle.control());
        let server = axum_server::from_tcp(listener)?.handle(handle);
        let task = async move {
            if let Err(e) = server.serve(probes.into_make_service()).await {
                tracing::error!(error = %e, "probe/metrics listener failed");
            }
        };
        Ok(Some(tokio::spawn(
            task.instrument(tracing::info_span!("probes")),
        )))
    }

    /// On SIGTERM/SIGINT: drain (not ready, still answering, connections closed after their
    /// answer) for the shutdown delay or until a second signal, then stop accepting and give
    /// in-flight requests the grace period (docs/operations.md, "Upgrades and drains").
    fn spawn_shutdown(&self, mut signals: koord_runtime::ShutdownSignals) -> JoinHandle<()> {
        let handle = self.handle.clone();
        let state = self.state.clone();
        let (delay, grace) = (self.config.shutdown_delay, self.config.shutdown_grace);
        let task = async move {
            signals.recv().await;
            state.readiness.start_draining();
            tracing::info!(
                delay_seconds = delay.as_secs_f64(),
                "draining: /readyz fails, admissions are answered and their connections closed"
            );
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = signals.recv() => {
                    tracing::info!("second signal: the rest of the shutdown delay skipped");
                }
            }
            tracing::info!(grace_seconds = grace.as_secs(), "shutting down");
            handle.graceful_shutdown(Some(grace));
        };
        tokio::spawn(task.instrument(tracing::info_span!("shutdown")))
    }
}

/// `koord-webhook serve`: builds the runtime and runs the server.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let workers = args.worker_threads;
    let config = Config::from_args(args)?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        builder.worker_threads(n);
    }
    let runtime = builder.enable_all().build()?;
    runtime.block_on(async move { WebhookServer::new(config)?.run().await })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn config(args: &[&str]) -> Result<Config, ServeError> {
        let cli = Cli::try_parse_from(["koord-webhook", "serve"].iter().chain(args))
            .expect("flags parse");
        match cli.command {
            Command::Serve(args) => Config::from_args(*args),
            _ => unreachable!("serve"),
        }
    }

    #[test]
    fn standalone_without_cert_makes_one_for_the_listen_ip() {
        let c = config(&["--standalone", "--listen", "10.1.2.3:9443"]).expect("config");
        match c.tls {
            TlsSource::SelfSigned { sans } => assert!(sans.contains(&"10.1.2.3".to_owned())),
            TlsSource::Files(_) | TlsSource::Secret(_) => panic!("expected a self-signed cert"),
        }
        assert!(matches!(c.policy, PolicySource::Standalone { .. }));
    }

    #[test]
    fn in_cluster_needs_cert_and_key_together() {
        assert!(matches!(config(&[]), Err(ServeError::NoTls)));
        assert!(matches!(
            config(&["--tls-cert", "/c"]),
            Err(ServeError::HalfTls)
        ));
        assert!(matches!(
            config(&[
                "--tls-cert",
                "/c",
                "--tls-key",
                "/k",
                "--cluster-config",
                "/f"
            ]),
            Err(ServeError::ConfigFilesNeedStandalone)
        ));
        let c = config(&[
            "--tls-cert",
            "/c",
            "--tls-key",
            "/k",
            "--own-namespace",
            "qos",
        ])
        .expect("config");
        assert_eq!(c.exempt_namespaces, vec!["kube-system", "qos"]);
        assert!(matches!(c.policy, PolicySource::Cluster(_)));
        assert_eq!(c.limits.deadline, Duration::from_secs(3));
    }

    #[test]
    fn tls_secret_means_self_managed_with_a_lease_even_without_reresolve() {
        let c = config(&[
            "--tls-secret",
            "koord-webhook-tls",
            "--own-namespace",
            "qos",
        ])
        .expect("config");
        let TlsSource::Secret(s) = &c.tls else {
            panic!("expected self-managed: {:?}", c.tls);
        };
        assert_eq!(s.dns_name(), "koord-webhook.qos.svc");
        assert_eq!(s.policy.cert_lifetime, Duration::from_secs(90 * 86_400));
        assert!(c.lease.is_some());
        let c = config(&["--tls-secret", "s", "--reresolve=false"]).expect("config");
        assert!(
            c.reresolve.is_none() && c.lease.is_some(),
            "the writer is still elected"
        );
        let c =
            config(&["--tls-cert", "/c", "--tls-key", "/k", "--reresolve=false"]).expect("config");
        assert!(c.lease.is_none(), "nothing writes: no Lease");
        assert!(matches!(
            config(&[
                "--tls-secret",
                "s",
                "--cert-validity",
                "90d",
                "--ca-validity",
                "30d"
            ]),
            Err(ServeError::SelfCert(SelfCertConfigError::CaValidity { .. }))
        ));
        let both = Cli::try_parse_from([
            "koord-webhook",
            "serve",
            "--tls-secret",
            "s",
            "--tls-cert",
            "/c",
        ]);
        assert!(both.is_err(), "--tls-secret conflicts with --tls-cert");
    }
}
