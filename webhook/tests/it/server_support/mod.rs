//! Helpers for the server tests: certificates, a real server on loopback, an HTTPS client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use koord_runtime::install_crypto_provider;
use koord_webhook::live::state::Limits;
use koord_webhook::server::connections::ConnectionLimits;
use koord_webhook::server::tls::CertFiles;
use koord_webhook::server::{
    Config, ConnectionSettings, Http2Settings, PolicySource, TlsSource, WebhookServer,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

pub fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn fixture_json(name: &str) -> Value {
    serde_json::from_slice(&fixture(name)).expect("fixture is JSON")
}

/// A CA-signed serving cert for localhost/127.0.0.1 written into `dir` as tls.crt/tls.key.
pub fn write_certs(dir: &Path) -> koord_webhook::certs::CertBundle {
    let bundle =
        koord_webhook::certs::generate_bundle(vec!["localhost".into(), "127.0.0.1".into()], 1, 1)
            .expect("certs");
    std::fs::write(dir.join("tls.crt"), &bundle.cert_pem).expect("write cert");
    std::fs::write(dir.join("tls.key"), &bundle.key_pem).expect("write key");
    bundle
}

pub fn test_config(dir: &Path, policy: PolicySource) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().expect("addr"),
        metrics_listen: None,
        tls: TlsSource::Files(CertFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }),
        tls_reload_interval: Duration::from_millis(100),
        policy,
        exempt_namespaces: vec!["kube-system".into(), "koordinator-system".into()],
        require_namespace_opt_in: true,
        limits: Limits {
            max_body_bytes: 3 * 1024 * 1024,
            max_concurrent: 64,
            deadline: Duration::from_secs(3),
        },
        connections: ConnectionSettings {
            limits: ConnectionLimits {
                max_connections: 1000,
                max_connections_per_source: 512,
                idle_timeout: Duration::from_secs(120),
            },
            header_read_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(10),
            http2: Http2Settings {
                max_connections: 8,
                max_concurrent_streams: 200,
                stream_window_bytes: 1024 * 1024,
                connection_window_bytes: 1024 * 1024,
            },
        },
        shutdown_delay: Duration::ZERO,
        shutdown_grace: Duration::from_secs(1),
        reresolve: None,
        lease: None,
    }
}

pub fn standalone(cluster: Option<PathBuf>, namespace: Option<PathBuf>) -> PolicySource {
    PolicySource::Standalone {
        cluster_config: cluster,
        namespace_config: namespace,
    }
}

pub struct Running {
    pub addr: SocketAddr,
    pub ca_pem: String,
    pub handle: axum_server::Handle<SocketAddr>,
    pub state: Arc<koord_webhook::live::state::AppState>,
    pub dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

/// Starts a server with certs in a fresh temp dir; `tweak` adjusts the config.
pub async fn start(policy: PolicySource, tweak: impl FnOnce(&mut Config)) -> Running {
    start_with(policy, tweak, |s| s).await
}

pub async fn start_with(
    policy: PolicySource,
    tweak: impl FnOnce(&mut Config),
    prepare: impl FnOnce(WebhookServer) -> WebhookServer,
) -> Running {
    install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let bundle = write_certs(dir.path());
    let mut config = test_config(dir.path(), policy);
    tweak(&mut config);
    let server = prepare(WebhookServer::new(config).expect("server binds"));
    let addr = server.local_addr().expect("addr");
    let handle = server.handle();
    let state = server.state();
    tokio::spawn(async move {
        if let Err(e) = server.run().await {
            eprintln!("server ended: {e}");
        }
    });
    Running {
        addr,
        ca_pem: bundle.ca_cert_pem,
        handle,
        state,
        dir,
    }
}

pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    pub peer_cert: Vec<u8>,
    pub alpn: Option<Vec<u8>>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "reply is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

fn connector(ca_pem: &str, alpn: &[&[u8]]) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("ca pem")).expect("add root");
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

/// One request over a new TLS connection (HTTP/1.1 or, with `http2`, HTTP/2).
pub async fn request(
    addr: SocketAddr,
    ca_pem: &str,
    method: &str,
    path: &str,
    body: Vec<u8>,
    http2: bool,
) -> Result<Reply, Box<dyn std::error::Error + Send + Sync>> {
    let alpn: &[&[u8]] = if http2 { &[b"h2"] } else { &[b"http/1.1"] };
    let tcp = TcpStream::connect(addr).await?;
    let tls = connector(ca_pem, alpn)
        .connect(ServerName::try_from("localhost")?.to_owned(), tcp)
        .await?;
    let (_, session) = tls.get_ref();
    let peer_cert = session
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    let negotiated = session.alpn_protocol().map(<[u8]>::to_vec);
    let io = hyper_util::rt::TokioIo::new(tls);
    let req = http::Request::builder()
        .method(method)
        .uri(format!("https://localhost:{}{path}", addr.port()))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))?;
    let resp = if http2 {
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io).await?;
        tokio::spawn(conn);
        sender.send_request(req).await?
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(conn);
        sender.send_request(req).await?
    };
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes().to_vec();
    Ok(Reply {
        status,
        body,
        peer_cert,
        alpn: negotiated,
    })
}

pub async fn post(r: &Running, body: Vec<u8>) -> Reply {
    request(r.addr, &r.ca_pem, "POST", "/mutate-pod", body, false)
        .await
        .expect("request succeeds")
}

pub async fn get(r: &Running, path: &str) -> Reply {
    request(r.addr, &r.ca_pem, "GET", path, Vec::new(), false)
        .await
        .expect("request succeeds")
}

/// `response` of an AdmissionReview reply, after checking the envelope.
pub fn response_of(reply: &Reply) -> Value {
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let v = reply.json();
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    v["response"].clone()
}

/// The response's base64 JSONPatch, decoded and parsed; `None` when it carries no patch.
pub fn response_patch(response: &Value) -> Option<json_patch::Patch> {
    let p = response.get("patch")?;
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes = base64_simd::STANDARD
        .decode_to_vec(p.as_str().expect("patch is a string"))
        .expect("patch is base64");
    Some(serde_json::from_slice(&bytes).expect("RFC 6902 patch"))
}

/// Applies the response's base64 JSONPatch to `object` with the json-patch crate.
pub fn apply_response_patch(response: &Value, object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(patch) = response_patch(response) {
        json_patch::patch(&mut out, &patch).expect("patch applies");
    }
    out
}

/// What `koord-webhook resolve` prints for this pod (as JSON).
pub fn resolve_output(
    object: &Value,
    namespace: &str,
    update: bool,
    cluster: Option<&Path>,
    namespaces: Option<&Path>,
) -> Value {
    use koord_webhook::policy::load_policy;
    use koord_webhook::resolve_cmd::{OutputFormat, ResolveArgs, resolve_manifests};
    let args = ResolveArgs {
        file: PathBuf::from("pod.json"),
        cluster_config: cluster.map(Path::to_path_buf),
        namespace_config: namespaces.map(Path::to_path_buf),
        output: OutputFormat::Json,
        namespace: namespace.to_owned(),
        update,
        explain: false,
    };
    let mut notes = Vec::new();
    let config = load_policy(cluster, namespaces, &mut notes).expect("policy loads");
    let out = resolve_manifests(&object.to_string(), "pod.json", &config, &args)
        .expect("resolve succeeds");
    serde_json::from_str(&out.stdout).expect("resolve prints JSON")
}

pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/examples")
}

/// The `p` quantile (0..=1) of sorted latencies.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}
