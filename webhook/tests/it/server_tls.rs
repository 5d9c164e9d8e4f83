//! Certificate rotation under a live server, and `koord-webhook certs`.

use crate::server_support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use server_support::*;

fn leaf_der(pem: &str) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .expect("one cert")
        .expect("pem")
        .to_vec()
}

/// Waits until a new connection trusting `ca_pem` is served `expected_leaf`.
async fn wait_for_cert(running: &Running, ca_pem: &str, expected_leaf: &[u8]) {
    for _ in 0..100 {
        if let Ok(reply) = request(running.addr, ca_pem, "GET", "/healthz", Vec::new(), false).await
            && reply.peer_cert == expected_leaf
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("rotated certificate never served");
}

/// A keep-alive HTTP/1.1 connection opened before the rotation.
async fn open_connection(
    running: &Running,
) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(running.ca_pem.as_bytes()).expect("ca"))
        .expect("root");
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(running.addr)
        .await
        .expect("connect");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("handshake");
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .expect("http1");
    tokio::spawn(conn);
    sender
}

async fn admit_on(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
) -> serde_json::Value {
    let req = http::Request::builder()
        .method("POST")
        .uri("/mutate-pod")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(fixture("pod-create.json"))))
        .expect("request");
    let resp = sender
        .send_request(req)
        .await
        .expect("old connection still serves");
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    serde_json::from_slice(&body).expect("json")
}

#[tokio::test]
async fn rewritten_cert_files_are_served_without_dropping_connections() {
    let running = start(standalone(None, None), |_| {}).await;
    let first = get(&running, "/healthz").await;
    let old_cert = std::fs::read_to_string(running.dir.path().join("tls.crt")).expect("cert");
    assert_eq!(first.peer_cert, leaf_der(&old_cert));
    let mut old_connection = open_connection(&running).await;
    assert_eq!(
        admit_on(&mut old_connection).await["response"]["allowed"],
        true
    );

    // Rotate the way a Secret volume does: new files swapped in under the same paths.
    let staging = tempfile::tempdir().expect("tempdir");
    let next = write_certs(staging.path());
    for f in ["tls.crt", "tls.key"] {
        std::fs::rename(staging.path().join(f), running.dir.path().join(f)).expect("swap");
    }
    wait_for_cert(&running, &next.ca_cert_pem, &leaf_der(&next.cert_pem)).await;
    assert_eq!(running.state.metrics.tls_reloads.get(), 1);

    // The connection made before the rotation keeps working.
    assert_eq!(
        admit_on(&mut old_connection).await["response"]["allowed"],
        true
    );
    // New connections no longer get the old certificate.
    assert!(
        request(
            running.addr,
            &running.ca_pem,
            "GET",
            "/healthz",
            Vec::new(),
            false
        )
        .await
        .is_err(),
        "old CA must not verify the new certificate"
    );
}

#[tokio::test]
async fn broken_cert_files_keep_the_old_certificate() {
    let running = start(standalone(None, None), |_| {}).await;
    let old_cert = std::fs::read_to_string(running.dir.path().join("tls.crt")).expect("cert");
    std::fs::write(running.dir.path().join("tls.key"), "not a key").expect("write");
    for _ in 0..100 {
        if running.state.metrics.tls_reload_errors.get() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(running.state.metrics.tls_reload_errors.get(), 1);
    let reply = get(&running, "/healthz").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.peer_cert, leaf_der(&old_cert));
}

#[test]
fn certs_command_writes_ca_and_serving_cert_with_service_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = koord_webhook::certs::CertsArgs {
        out: dir.path().join("out"),
        service: "koord-webhook".into(),
        namespace: "koordinator-system".into(),
        ips: vec!["10.0.0.7".parse().expect("ip")],
        days: 30,
        ca_days: 60,
    };
    let (bundle, ca_bundle) = koord_webhook::certs::write_certs(&args).expect("certs");
    use rustls::client::danger::ServerCertVerifier as _;
    let decoded = base64_simd::STANDARD
        .decode_to_vec(&ca_bundle)
        .expect("caBundle is base64");
    assert_eq!(decoded, bundle.ca_cert_pem.as_bytes());
    for f in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert!(dir.path().join("out").join(f).is_file(), "{f}");
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("out/tls.key"))
        .expect("key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "private key is not world/group readable");

    // The serving cert verifies against the CA for every Service name and the IPs.
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(bundle.ca_cert_pem.as_bytes()).expect("ca"))
        .expect("root");
    let verifier = rustls::client::WebPkiServerVerifier::builder(Arc::new(roots))
        .build()
        .expect("verifier");
    let leaf = CertificateDer::from(leaf_der(&bundle.cert_pem));
    let now = rustls::pki_types::UnixTime::now();
    for name in [
        "koord-webhook.koordinator-system.svc",
        "koord-webhook.koordinator-system.svc.cluster.local",
        "koord-webhook.koordinator-system",
        "127.0.0.1",
        "10.0.0.7",
    ] {
        let server_name = ServerName::try_from(name).expect("name");
        verifier
            .verify_server_cert(&leaf, &[], &server_name, &[], now)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let other = ServerName::try_from("other.koordinator-system.svc").expect("name");
    assert!(
        verifier
            .verify_server_cert(&leaf, &[], &other, &[], now)
            .is_err()
    );
}

#[tokio::test]
async fn tls12_and_tls13_are_both_accepted() {
    let running = start(standalone(None, None), |_| {}).await;
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(running.ca_pem.as_bytes()).expect("ca"))
            .expect("root");
        let config = rustls::ClientConfig::builder_with_protocol_versions(&[version])
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(running.addr)
            .await
            .expect("connect");
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").expect("name"), tcp)
            .await
            .unwrap_or_else(|e| panic!("{version:?}: {e}"));
        assert_eq!(tls.get_ref().1.protocol_version(), Some(version.version));
    }
}
