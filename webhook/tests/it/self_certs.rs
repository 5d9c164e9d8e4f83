//! Self-managed serving certificates against an in-process fake of the Secret and
//! MutatingWebhookConfiguration API: two replicas (one writer) start with nothing, the writer
//! makes the CA and certificate and publishes the caBundle, both serve it; a deleted Secret and
//! an emptied caBundle are repaired; CA and certificate rotations pass without one failed
//! handshake. Each handshake verifies the replica against the caBundle published at that
//! moment, for the Service's DNS name, as kube-apiserver does.

use crate::common::eventually;
use crate::fake_apiserver;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use axum_server::tls_rustls::RustlsConfig;
use fake_apiserver::client;
use fake_apiserver::objects::{FakeObjects, SECRETS, WEBHOOKS};
use koord_webhook::certs::rotation::RotationPolicy;
use koord_webhook::certs::self_managed::{self, SelfCertConfig};
use koord_webhook::live::state::{AppState, Limits, NamespaceGate, Readiness};
use koord_webhook::metrics::Metrics;
use koord_webhook::policy::PolicyConfig;
use koord_webhook::server::tls::server_config;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

const NS: &str = "koordinator-system";
const SECRET: &str = "koord-webhook-tls";
const WEBHOOK: &str = "koord-webhook";
const DNS: &str = "koord-webhook.koordinator-system.svc";

fn config(policy: RotationPolicy, switch_delay: Duration) -> SelfCertConfig {
    SelfCertConfig {
        secret: SECRET.into(),
        namespace: NS.into(),
        webhook_configuration: WEBHOOK.into(),
        service: "koord-webhook".into(),
        policy,
        switch_delay,
    }
}

fn long_lived() -> RotationPolicy {
    RotationPolicy {
        ca_lifetime: Duration::from_secs(365 * 86_400),
        cert_lifetime: Duration::from_secs(90 * 86_400),
        retire_after: Duration::from_secs(86_400),
    }
}

fn webhook_configuration() -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
           "metadata": {"name": WEBHOOK},
           "webhooks": [{"name": "pods.qos.koordinator.sh", "admissionReviewVersions": ["v1"],
                         "sideEffects": "None",
                         "clientConfig": {"service": {"name": "koord-webhook", "namespace": NS,
                                                      "path": "/mutate-pod", "port": 443}}}]})
}

/// The caBundle published now (PEM), empty when none.
fn published(fake: &FakeObjects) -> Vec<u8> {
    fake.get(WEBHOOKS, WEBHOOK)
        .and_then(|w| {
            w["webhooks"][0]["clientConfig"]["caBundle"]
                .as_str()
                .map(str::to_owned)
        })
        .map(|b| base64_simd::STANDARD.decode_to_vec(b).expect("base64"))
        .unwrap_or_default()
}

fn secret_key(fake: &FakeObjects, key: &str) -> Option<Vec<u8>> {
    let s = fake.get(SECRETS, SECRET)?;
    let b = s["data"][key].as_str()?;
    Some(base64_simd::STANDARD.decode_to_vec(b).expect("base64"))
}

struct Replica {
    addr: SocketAddr,
    state: Arc<AppState>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A TLS listener serving what the certificate manager swaps in, like `serve` does.
async fn replica(api: SocketAddr, config: SelfCertConfig, writer: bool) -> Replica {
    koord_runtime::install_crypto_provider();
    let pem = koord_webhook::certs::self_signed(config.sans(), 1).expect("throwaway");
    let pair = (pem.cert_pem.into_bytes(), pem.key_pem.into_bytes());
    let tls = RustlsConfig::from_config(server_config(&pair.0, &pair.1).expect("config"));
    let state = AppState::new(
        PolicyConfig::default(),
        NamespaceGate {
            exempt: vec![],
            opt_in: None,
        },
        Readiness::all_ready(),
        Metrics::new().expect("metrics"),
        Limits {
            max_body_bytes: 1 << 20,
            max_concurrent: 4,
            deadline: Duration::from_secs(3),
        },
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    let server = axum_server::from_tcp_rustls(listener, tls.clone()).expect("server");
    let app = Router::new().route("/", get(|| async { "ok" }));
    let serve = tokio::spawn(async move {
        let _ = server.serve(app.into_make_service()).await;
    });
    // As `WebhookServer::new` does: nobody trusts the throwaway certificate.
    state
        .readiness
        .set_certificate_problem(Some(self_managed::NOT_CHECKED.into()));
    let manager = tokio::spawn(self_managed::run(
        client(api),
        config,
        tls,
        pair,
        state.clone(),
        Arc::new(AtomicBool::new(writer)),
    ));
    Replica {
        addr,
        state,
        tasks: vec![serve, manager],
    }
}

/// A TLS handshake that trusts only `bundle`, for the Service's name.
async fn handshake(addr: SocketAddr, bundle: &[u8]) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(bundle) {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(DNS).map_err(|e| e.to_string())?;
    tokio_rustls::TlsConnector::from(Arc::new(client))
        .connect(name, tcp)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Hand-shakes with every replica against the published caBundle until stopped; counts the
/// failures (the caBundle empty on purpose is skipped: nothing can verify then).
struct Prober {
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    last_error: Arc<std::sync::Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

fn probe(fake: FakeObjects, addrs: Vec<SocketAddr>) -> Prober {
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let last_error = Arc::new(std::sync::Mutex::new(String::new()));
    let (o, f, e) = (ok.clone(), failed.clone(), last_error.clone());
    let task = tokio::spawn(async move {
        loop {
            for addr in &addrs {
                let bundle = published(&fake);
                if bundle.is_empty() {
                    continue;
                }
                match handshake(*addr, &bundle).await {
                    Ok(()) => o.fetch_add(1, Ordering::Relaxed),
                    Err(err) => {
                        *e.lock().expect("lock") = err;
                        f.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    Prober {
        ok,
        failed,
        last_error,
        task,
    }
}

impl Prober {
    fn assert_clean(self, what: &str) {
        self.task.abort();
        let (ok, failed) = (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        );
        assert!(ok > 0, "{what}: no handshake was tried");
        assert_eq!(
            failed,
            0,
            "{what}: {failed} of {} handshakes failed; last: {}",
            ok + failed,
            self.last_error.lock().expect("lock")
        );
        println!("{what}: {ok} handshakes, none failed");
    }
}

async fn all_ready(replicas: &[&Replica]) -> bool {
    replicas
        .iter()
        .all(|r| r.state.readiness.certificate_problem().is_none())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_install_then_repairs_without_a_failed_handshake() {
    let fake = FakeObjects::default();
    fake.put(WEBHOOKS, webhook_configuration());
    let (api, _h) = fake.serve().await;
    let c = config(long_lived(), Duration::from_millis(500));
    let writer = replica(api, c.clone(), true).await;
    let follower = replica(api, c.clone(), false).await;
    assert!(
        !all_ready(&[&writer, &follower]).await,
        "not ready before the certificate was checked"
    );

    // Nothing installed but the configuration: the writer makes the Secret and the caBundle,
    // both replicas become ready serving it.
    let took = eventually("both replicas ready", Duration::from_secs(20), || async {
        all_ready(&[&writer, &follower]).await
    })
    .await;
    println!("fresh install: ready after {took:?}");
    let secret = fake.get(SECRETS, SECRET).expect("Secret created");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    let webhook_uid = fake.get(WEBHOOKS, WEBHOOK).expect("webhook")["metadata"]["uid"].clone();
    assert_eq!(
        secret["metadata"]["ownerReferences"][0]["uid"], webhook_uid,
        "{secret}"
    );
    assert_eq!(
        secret["metadata"]["ownerReferences"][0]["kind"],
        "MutatingWebhookConfiguration"
    );
    for key in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert!(
            secret_key(&fake, key).is_some(),
            "{key} missing in {secret}"
        );
    }
    let ca1 = secret_key(&fake, "ca.crt").expect("ca");
    assert_eq!(published(&fake), ca1, "the caBundle holds exactly the CA");
    for r in [&writer, &follower] {
        handshake(r.addr, &ca1)
            .await
            .expect("verifies against the caBundle");
    }

    let prober = probe(fake.clone(), vec![writer.addr, follower.addr]);

    // The Secret deleted: a new CA and certificate; the caBundle carries old+new, the
    // replicas switch, and no handshake fails meanwhile.
    fake.delete(SECRETS, SECRET);
    let took = eventually("Secret re-created", Duration::from_secs(10), || async {
        secret_key(&fake, "ca.crt").is_some_and(|c| c != ca1)
    })
    .await;
    println!("Secret deleted: re-created after {took:?}");
    let ca2 = secret_key(&fake, "ca.crt").expect("ca");
    eventually(
        "old+new in the caBundle",
        Duration::from_secs(10),
        || async {
            let bundle = published(&fake);
            bundle.windows(ca1.len()).any(|w| w == ca1.as_slice()) && bundle.starts_with(&ca2)
        },
    )
    .await;
    let took = eventually(
        "both serve the new CA's certificate",
        Duration::from_secs(10),
        || async {
            handshake(writer.addr, &ca2).await.is_ok()
                && handshake(follower.addr, &ca2).await.is_ok()
        },
    )
    .await;
    println!("Secret deleted: both replicas serve the new certificate after {took:?} more");

    // The caBundle emptied by hand: republished; the replicas are not ready meanwhile (their
    // certificate no longer verifies) and ready again after.
    fake.edit(WEBHOOKS, WEBHOOK, |w| {
        w["webhooks"][0]["clientConfig"]["caBundle"] = "".into();
    });
    let took = eventually("caBundle republished", Duration::from_secs(10), || async {
        !published(&fake).is_empty()
    })
    .await;
    println!("caBundle emptied: republished after {took:?}");
    eventually("ready again", Duration::from_secs(10), || async {
        all_ready(&[&writer, &follower]).await
    })
    .await;
    prober.assert_clean("repairs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotations_of_ca_and_certificate_fail_no_handshake() {
    let fake = FakeObjects::default();
    fake.put(WEBHOOKS, webhook_configuration());
    let (api, _h) = fake.serve().await;
    // A certificate renewed every ~4 s, a CA every ~10 s, the old CA kept for 4 s.
    let policy = RotationPolicy {
        ca_lifetime: Duration::from_secs(15),
        cert_lifetime: Duration::from_secs(6),
        retire_after: Duration::from_secs(4),
    };
    let c = config(policy, Duration::from_secs(1));
    let writer = replica(api, c.clone(), true).await;
    let follower = replica(api, c.clone(), false).await;
    eventually("both replicas ready", Duration::from_secs(20), || async {
        all_ready(&[&writer, &follower]).await
    })
    .await;
    let prober = probe(fake.clone(), vec![writer.addr, follower.addr]);
    let mut cas = vec![secret_key(&fake, "ca.crt").expect("ca")];
    let mut leaves = vec![secret_key(&fake, "tls.crt").expect("leaf")];
    let mut max_bundle = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(24) {
        let ca = secret_key(&fake, "ca.crt").expect("ca");
        let leaf = secret_key(&fake, "tls.crt").expect("leaf");
        if !cas.contains(&ca) {
            cas.push(ca);
        }
        if !leaves.contains(&leaf) {
            leaves.push(leaf);
        }
        let n = String::from_utf8_lossy(&published(&fake))
            .matches("BEGIN CERTIFICATE")
            .count();
        max_bundle = max_bundle.max(n);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "{} CAs, {} serving certificates, caBundle up to {max_bundle} CAs",
        cas.len(),
        leaves.len()
    );
    assert!(
        cas.len() >= 3,
        "the CA rotated at least twice: {}",
        cas.len()
    );
    assert!(
        leaves.len() > cas.len(),
        "certificates also renewed under one CA"
    );
    assert_eq!(max_bundle, 2, "old+new during a CA rotation, never more");
    assert!(all_ready(&[&writer, &follower]).await);
    prober.assert_clean("rotations");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_is_not_the_writer_writes_nothing_and_is_not_ready_alone() {
    let fake = FakeObjects::default();
    fake.put(WEBHOOKS, webhook_configuration());
    let (api, _h) = fake.serve().await;
    let follower = replica(api, config(long_lived(), Duration::from_millis(500)), false).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(fake.get(SECRETS, SECRET).is_none(), "no Secret written");
    assert!(published(&fake).is_empty(), "no caBundle written");
    let problem = follower
        .state
        .readiness
        .certificate_problem()
        .expect("not ready");
    assert!(problem.contains("caBundle"), "{problem}");
}
