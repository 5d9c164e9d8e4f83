//! `serve` flags. Every flag also reads a `KOORD_*` environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use koord_api::keys::{CLUSTER_CONFIGMAP, CONFIG_NAMESPACE, NAMESPACE_CONFIGMAP};

use crate::duration::parse_duration;

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address of the TLS admission listener.
    #[arg(long, env = "KOORD_LISTEN", default_value = "0.0.0.0:9443")]
    pub listen: SocketAddr,
    /// Plain-HTTP listener for /healthz, /readyz and /metrics (probes and Prometheus);
    /// they are also served on the TLS listener.
    #[arg(long, env = "KOORD_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Serving certificate (PEM chain, e.g. from cert-manager); re-read when its bytes change.
    /// Without it (and without --standalone), --tls-secret makes the webhook manage its own.
    #[arg(long, env = "KOORD_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// Serving key (PEM).
    #[arg(long, env = "KOORD_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// How often the certificate files are compared with the served ones.
    #[arg(long, env = "KOORD_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub tls_reload_interval: Duration,
    /// No API server: embedded defaults (or the config files below) and, without
    /// --tls-cert/--tls-key, a self-signed certificate made at start.
    #[arg(long, env = "KOORD_STANDALONE")]
    pub standalone: bool,
    /// Standalone: ConfigMap manifest carrying `resource-qos-config`.
    #[arg(long, env = "KOORD_CLUSTER_CONFIG_FILE")]
    pub cluster_config: Option<PathBuf>,
    /// Standalone: ConfigMap manifest carrying `memory-qos`.
    #[arg(long, env = "KOORD_NAMESPACE_CONFIG_FILE")]
    pub namespace_config: Option<PathBuf>,
    /// Namespace of the watched ConfigMaps.
    #[arg(long, env = "KOORD_CONFIG_NAMESPACE", default_value = CONFIG_NAMESPACE)]
    pub config_namespace: String,
    /// Name of the cluster ConfigMap.
    #[arg(long, env = "KOORD_CLUSTER_CONFIGMAP", default_value = CLUSTER_CONFIGMAP)]
    pub cluster_configmap: String,
    /// Name of the namespace ConfigMap.
    #[arg(long, env = "KOORD_NAMESPACE_CONFIGMAP", default_value = NAMESPACE_CONFIGMAP)]
    pub namespace_configmap: String,
    /// The webhook's own namespace: never mutated (nor is kube-system).
    #[arg(
        long,
        env = "KOORD_OWN_NAMESPACE",
        default_value = "koordinator-system"
    )]
    pub own_namespace: String,
    /// More namespaces never mutated (comma-separated).
    #[arg(long, env = "KOORD_EXEMPT_NAMESPACES", value_delimiter = ',')]
    pub exempt_namespaces: Vec<String>,
    /// Skip pods of namespaces the cache knows without `koordinator.sh/qos-webhook=enabled`
    /// (defence in depth behind the namespaceSelector).
    #[arg(long, env = "KOORD_REQUIRE_NAMESPACE_OPT_IN", default_value_t = true, action = clap::ArgAction::Set)]
    pub require_namespace_opt_in: bool,
    /// Largest request body read (an UPDATE carries the pod twice).
    #[arg(long, env = "KOORD_MAX_BODY_BYTES", default_value_t = 3 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Admissions processed at once; more wait (within the deadline).
    #[arg(long, env = "KOORD_MAX_CONCURRENT", default_value_t = 256)]
    pub max_concurrent: usize,
    /// Per-request deadline; keep it under the webhook's timeoutSeconds (5s).
    #[arg(long, env = "KOORD_REQUEST_DEADLINE", default_value = "3s", value_parser = parse_duration)]
    pub request_deadline: Duration,
    /// Connections open at once (an idle TLS connection costs ~21 KiB: 1,024 ~ 22 MiB). At the
    /// limit, a new connection closes the oldest connection not yet answered once of the
    /// source address holding the most such connections; from that address itself, that
    /// address's least valuable connection (one not yet answered, else its kept-alive one
    /// idle the longest, else one whose request has stalled for a second). Another address's
    /// answered connection, and any connection making progress on a request, keeps its slot.
    /// With nothing to close, the new one is closed (before its TLS handshake) and the open
    /// ones keep being served.
    #[arg(long, env = "KOORD_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// Connections one source address may hold at once, answered or not (past it, a new one
    /// from that address closes that address's oldest unanswered connection, else its
    /// kept-alive one idle the longest, else one whose request has stalled for a second, and
    /// is closed only when every one is making progress on a request): no single client holds
    /// more, however it behaves. Keep it above what the
    /// apiservers open together when they reach the webhook through one address (a proxy or
    /// NAT).
    #[arg(long, env = "KOORD_MAX_CONNECTIONS_PER_SOURCE", default_value_t = 512)]
    pub max_connections_per_source: usize,
    /// A connection the server has written nothing to for this long is closed (HTTP/1.1 and
    /// HTTP/2): an idle one, and one that keeps sending without completing a request (a head
    /// dripped a byte at a time, HTTP/2 frames that need no answer). Keep it above the
    /// apiserver's own idle timeout for webhook connections (90s), so the apiserver, not us,
    /// retires an idle connection and never sends on one we close.
    #[arg(long, env = "KOORD_IDLE_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Time a new connection has, after its TLS handshake, to send the headers of its first
    /// request (slow or silent clients are closed). Later HTTP/1.1 requests on the connection
    /// must arrive within the idle timeout.
    #[arg(long, env = "KOORD_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// Time a new connection has to complete its TLS handshake.
    #[arg(long, env = "KOORD_TLS_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub tls_handshake_timeout: Duration,
    /// HTTP/2 connections open at once; past it, new connections are offered HTTP/1.1 only
    /// (still served, one request at a time each). Bounds what HTTP/2 clients can hold: each
    /// connection up to its streams and flow-control window.
    #[arg(long, env = "KOORD_MAX_H2_CONNECTIONS", default_value_t = 8)]
    pub max_h2_connections: usize,
    /// HTTP/2 streams a connection may have open at once (the apiserver opens another
    /// connection beyond it). Each open stream holds its headers and state; with the
    /// connection cap this bounds what a flood of streams can hold.
    #[arg(long, env = "KOORD_H2_MAX_CONCURRENT_STREAMS", default_value_t = 100)]
    pub h2_max_concurrent_streams: u32,
    /// HTTP/2 flow-control window of a stream: body bytes a client may send ahead of the
    /// handler reading them.
    #[arg(long, env = "KOORD_H2_STREAM_WINDOW_BYTES", default_value_t = 1024 * 1024)]
    pub h2_stream_window_bytes: u32,
    /// HTTP/2 flow-control window of a connection (all its streams): with the connection cap,
    /// it bounds the body bytes buffered for clients that send faster than they are served.
    #[arg(long, env = "KOORD_H2_CONNECTION_WINDOW_BYTES", default_value_t = 1024 * 1024)]
    pub h2_connection_window_bytes: u32,
    /// After SIGTERM, how long the server goes on answering with /readyz failing, before it
    /// closes its listener: longer than the pod's removal from the Service's endpoints takes
    /// to reach every kube-proxy (and the apiserver). Meanwhile each HTTP/1.1 answer carries
    /// `Connection: close` and each HTTP/2 connection gets a GOAWAY after an answer, so the
    /// apiserver moves to another replica without a request lost. A second signal ends the
    /// delay at once.
    #[arg(long, env = "KOORD_SHUTDOWN_DELAY", default_value = "10s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// After the shutdown delay, the time in-flight requests get to finish.
    #[arg(long, env = "KOORD_SHUTDOWN_GRACE", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Tokio worker threads (default: one per CPU).
    #[arg(long, env = "KOORD_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    #[command(flatten)]
    pub reresolve: crate::reresolve::controller::ReresolveArgs,
    #[command(flatten)]
    pub self_certs: crate::certs::self_managed::SelfCertArgs,
}
