//! The real server over TLS on loopback, fed AdmissionReview bodies shaped like
//! kube-apiserver's: the returned patch, applied with json-patch, must give exactly what
//! `koord-webhook resolve` prints.

use crate::server_support;

use serde_json::Value;
use server_support::*;

fn request_object(review: &Value) -> Value {
    review["request"]["object"].clone()
}

/// Drives one fixture and checks the mutation against `resolve` with the examples' ConfigMaps
/// (`cluster`) or none.
async fn assert_matches_resolve(running: &Running, name: &str, cluster: bool) -> Value {
    let cfg = examples_dir();
    assert_matches_resolve_with(
        running,
        name,
        cluster.then(|| cfg.join("ack-slo-config.yaml")),
        cluster.then(|| cfg.join("ack-slo-pod-config.yaml")),
    )
    .await
}

async fn assert_matches_resolve_with(
    running: &Running,
    name: &str,
    cluster: Option<std::path::PathBuf>,
    namespaces: Option<std::path::PathBuf>,
) -> Value {
    let review = fixture_json(name);
    let reply = post(running, fixture(name)).await;
    let response = response_of(&reply);
    assert_eq!(response["uid"], review["request"]["uid"], "uid echoed");
    assert_eq!(response["allowed"], true, "{response}");
    let object = request_object(&review);
    let patched = apply_response_patch(&response, &object);
    let update = review["request"]["operation"] == "UPDATE";
    let namespace = review["request"]["namespace"].as_str().unwrap_or("default");
    let expected = resolve_output(
        &object,
        namespace,
        update,
        cluster.as_deref(),
        namespaces.as_deref(),
    );
    assert_eq!(patched, expected, "patched pod differs from resolve output");
    response
}

fn with_examples() -> koord_webhook::server::PolicySource {
    let cfg = examples_dir();
    standalone(
        Some(cfg.join("ack-slo-config.yaml")),
        Some(cfg.join("ack-slo-pod-config.yaml")),
    )
}

#[tokio::test]
async fn create_patch_gives_resolve_output() {
    let running = start(with_examples(), |_| {}).await;
    let response = assert_matches_resolve(&running, "pod-create.json", true).await;
    assert!(
        response.get("patch").is_some(),
        "a Burstable pod gets a label and annotation"
    );
}

#[tokio::test]
async fn create_without_config_files_uses_embedded_defaults() {
    let running = start(standalone(None, None), |_| {}).await;
    assert_matches_resolve(&running, "pod-create.json", false).await;
}

fn colocation_config() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/examples/ack-slo-config-colocation.yaml")
}

#[tokio::test]
async fn create_be_pod_gets_batch_resources_with_colocation_on() {
    let pod_config = examples_dir().join("ack-slo-pod-config.yaml");
    let running = start(
        standalone(Some(colocation_config()), Some(pod_config.clone())),
        |_| {},
    )
    .await;
    let review = fixture_json("pod-create-be.json");
    let response = assert_matches_resolve_with(
        &running,
        "pod-create-be.json",
        Some(colocation_config()),
        Some(pod_config),
    )
    .await;
    assert!(response.get("warnings").is_none(), "{response}");
    let patched = apply_response_patch(&response, &review["request"]["object"]);
    let res = &patched["spec"]["containers"][0]["resources"];
    // 2 cores = 2000 milli-cores; "2k" is the same quantity in canonical form.
    let cpu = res["limits"]["kubernetes.io/batch-cpu"]
        .as_str()
        .unwrap_or("");
    assert!(cpu == "2000" || cpu == "2k", "{res}");
    assert!(res["limits"].get("cpu").is_none(), "{res}");
}

#[tokio::test]
async fn be_pod_keeps_cpu_memory_with_a_warning_when_colocation_is_off() {
    // The examples' ack-slo-config has no colocation-config: off.
    let running = start(with_examples(), |_| {}).await;
    let review = fixture_json("pod-create-be.json");
    let response = assert_matches_resolve(&running, "pod-create-be.json", true).await;
    let warnings = response["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{response}");
    let w = warnings[0].as_str().expect("str");
    assert!(
        w.starts_with(
            "koord-qos: BE pod admitted with its cpu/memory unchanged: colocation is off"
        ),
        "{w}"
    );
    assert!(
        w.len() <= 256,
        "kubectl may truncate warnings over 256 characters"
    );
    let object = &review["request"]["object"];
    let patched = apply_response_patch(&response, object);
    assert_eq!(
        patched["spec"]["containers"][0]["resources"], object["spec"]["containers"][0]["resources"],
        "resources unchanged"
    );
    assert_eq!(
        patched["metadata"]["labels"]["koordinator.sh/qosClass"],
        "BE"
    );
    let annotations = patched["metadata"]["annotations"].as_object().expect("map");
    assert!(!annotations.contains_key("node.koordinator.sh/extended-resource-spec"));
    let rq: Value = serde_json::from_str(
        annotations["koordinator.sh/resolved-qos"]
            .as_str()
            .expect("str"),
    )
    .expect("json");
    assert!(rq.get("batch").is_none(), "{rq}");
    // A pod that is not BE gets no warning.
    let response = assert_matches_resolve(&running, "pod-create.json", true).await;
    assert!(response.get("warnings").is_none(), "{response}");
}

#[tokio::test]
async fn pod_without_label_and_annotation_maps_gets_them_created() {
    let running = start(with_examples(), |_| {}).await;
    let review = fixture_json("pod-create-no-maps.json");
    assert!(
        review["request"]["object"]["metadata"]
            .get("labels")
            .is_none()
    );
    assert!(
        review["request"]["object"]["metadata"]
            .get("annotations")
            .is_none()
    );
    let response = assert_matches_resolve(&running, "pod-create-no-maps.json", true).await;
    let patched = apply_response_patch(&response, &review["request"]["object"]);
    assert_eq!(
        patched["metadata"]["labels"]["koordinator.sh/qosClass"],
        "BE"
    );
    assert!(
        patched["metadata"]["annotations"]["koordinator.sh/resolved-qos"].is_string(),
        "{patched}"
    );
}

#[tokio::test]
async fn update_rewrites_hand_edited_resolved_qos() {
    let running = start(with_examples(), |_| {}).await;
    let review = fixture_json("pod-update.json");
    let response = assert_matches_resolve(&running, "pod-update.json", true).await;
    let patched = apply_response_patch(&response, &review["request"]["object"]);
    let resolved = patched["metadata"]["annotations"]["koordinator.sh/resolved-qos"]
        .as_str()
        .expect("annotation");
    assert!(!resolved.contains("hand"), "hand edit survived: {resolved}");
    let resolved: Value = serde_json::from_str(resolved).expect("json");
    assert_eq!(resolved["memoryLocality"]["policy"], "bestEffort");
    assert_eq!(resolved["memoryLocality"]["source"], "pod-annotation");
    // Resources are left alone on UPDATE (they moved to batch at CREATE).
    assert_eq!(
        patched["spec"]["containers"],
        review["request"]["object"]["spec"]["containers"]
    );
}

/// Re-admitting the webhook's own output converges: at most one more patch (the written
/// qosClass label turns `qosClassSource` from kubernetes-qos into label), then none.
#[tokio::test]
async fn resolved_pod_converges_to_unchanged() {
    let running = start(with_examples(), |_| {}).await;
    let mut review = fixture_json("pod-create.json");
    review["request"]["operation"] = "UPDATE".into();
    let mut patches = 0;
    for _ in 0..3 {
        let reply = post(&running, serde_json::to_vec(&review).expect("json")).await;
        let response = response_of(&reply);
        assert_eq!(response["allowed"], true);
        if response.get("patch").is_none() {
            break;
        }
        patches += 1;
        review["request"]["object"] = apply_response_patch(&response, &review["request"]["object"]);
    }
    assert!(
        (1..=2).contains(&patches),
        "did not converge: {patches} patches"
    );
    let last = response_of(&post(&running, serde_json::to_vec(&review).expect("json")).await);
    assert!(last.get("patch").is_none(), "{last}");
}

#[tokio::test]
async fn bad_annotations_are_denied_naming_field_and_range() {
    let running = start(with_examples(), |_| {}).await;
    for (fixture_name, needles) in [
        (
            "pod-create-bad-memoryqos.json",
            &["koordinator.sh/memoryQOS", "wmarkRatio", "100"][..],
        ),
        (
            "pod-create-bad-memoryqos-json.json",
            &["koordinator.sh/memoryQOS"][..],
        ),
        (
            "pod-create-bad-locality.json",
            &["koordinator.sh/memoryLocality", "policy"][..],
        ),
    ] {
        let review = fixture_json(fixture_name);
        let response = response_of(&post(&running, fixture(fixture_name)).await);
        assert_eq!(response["uid"], review["request"]["uid"]);
        assert_eq!(response["allowed"], false, "{fixture_name}: {response}");
        assert!(response.get("patch").is_none());
        let message = response["status"]["message"].as_str().expect("message");
        for needle in needles {
            assert!(
                message.contains(needle),
                "{fixture_name}: {message:?} lacks {needle:?}"
            );
        }
    }
}

#[tokio::test]
async fn bodies_that_are_not_admission_reviews_get_a_review_saying_why() {
    let running = start(with_examples(), |_| {}).await;
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (b"this is not json".to_vec(), "", "not an AdmissionReview"),
        (Vec::new(), "", "not an AdmissionReview"),
        (b"[1,2,3]".to_vec(), "", "not an AdmissionReview"),
        (b"{}".to_vec(), "", "AdmissionReview"),
        (fixture("not-a-review.json"), "", "AdmissionReview"),
        (fixture("review-v1beta1.json"), "beta-review", "admission.k8s.io/v1"),
        (fixture("review-no-object.json"), "no-object", "request.object"),
        (fixture("review-bad-object.json"), "bad-object", "not a valid Pod"),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"kind":{"kind":"Pod"},"operation":"CREATE","object":{}}}"#.to_vec(),
            "",
            "uid",
        ),
    ];
    for (body, uid, needle) in cases {
        let shown = String::from_utf8_lossy(&body)
            .chars()
            .take(60)
            .collect::<String>();
        let response = response_of(&post(&running, body).await);
        assert_eq!(response["uid"], uid, "{shown}");
        assert_eq!(response["allowed"], false, "{shown}: {response}");
        let message = response["status"]["message"].as_str().expect("message");
        assert!(
            message.contains(needle),
            "{shown}: {message:?} lacks {needle:?}"
        );
    }
}

#[tokio::test]
async fn requests_we_do_not_mutate_are_allowed_without_patch() {
    let running = start(with_examples(), |_| {}).await;
    for name in [
        "pod-create-kube-system.json",
        "review-configmap.json",
        "review-delete.json",
    ] {
        let review = fixture_json(name);
        let response = response_of(&post(&running, fixture(name)).await);
        assert_eq!(response["uid"], review["request"]["uid"], "{name}");
        assert_eq!(response["allowed"], true, "{name}: {response}");
        assert!(response.get("patch").is_none(), "{name}: {response}");
    }
}

#[tokio::test]
async fn oversized_body_is_answered_200_allowed_with_warning() {
    let running = start(with_examples(), |c| c.limits.max_body_bytes = 1024).await;
    let response = response_of(&post(&running, fixture("pod-create.json")).await);
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none());
    let warning = response["warnings"][0].as_str().expect("warning");
    assert!(warning.contains("1024"), "{warning}");
}

#[tokio::test]
async fn http2_is_served_too() {
    let running = start(with_examples(), |_| {}).await;
    let reply = request(
        running.addr,
        &running.ca_pem,
        "POST",
        "/mutate-pod",
        fixture("pod-create.json"),
        true,
    )
    .await
    .expect("h2 request");
    assert_eq!(reply.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(response_of(&reply)["allowed"], true);
}

#[tokio::test]
async fn probes_and_metrics() {
    let running = start(with_examples(), |_| {}).await;
    assert_eq!(get(&running, "/healthz").await.status, 200);
    assert_eq!(
        get(&running, "/readyz").await.status,
        200,
        "standalone is ready at once"
    );
    post(&running, fixture("pod-create.json")).await;
    post(&running, fixture("pod-create-bad-memoryqos.json")).await;
    post(&running, b"garbage".to_vec()).await;
    let metrics = String::from_utf8(get(&running, "/metrics").await.body).expect("utf8");
    for line in [
        r#"koord_webhook_admissions_total{operation="CREATE",outcome="mutated",qos_class="LS"} 1"#,
        r#"koord_webhook_admissions_total{operation="CREATE",outcome="denied",qos_class="none"} 1"#,
        r#"koord_webhook_admissions_total{operation="other",outcome="error",qos_class="none"} 1"#,
        "koord_webhook_admission_duration_seconds_count 3",
    ] {
        assert!(metrics.contains(line), "missing {line:?} in\n{metrics}");
    }
}

/// A raw HTTP/1.1 TLS connection to the server, for requests the client library would not send.
async fn raw_tls(running: &Running) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    raw_tls_alpn(running, &[b"http/1.1"]).await
}

/// A raw TLS connection offering `alpn`.
async fn raw_tls_alpn(
    running: &Running,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(
            rustls::pki_types::CertificateDer::from_pem_slice(running.ca_pem.as_bytes())
                .expect("ca"),
        )
        .expect("root");
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = tokio::net::TcpStream::connect(running.addr)
        .await
        .expect("connect");
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(
            rustls::pki_types::ServerName::try_from("localhost").expect("name"),
            tcp,
        )
        .await
        .expect("handshake")
}

/// Sends `body` with chunked transfer encoding, one chunk of `chunk` bytes per write with a
/// pause between them (so the server sees several frames), and returns the response body.
async fn post_chunked(running: &Running, body: &[u8], chunk: usize) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tls = raw_tls(running).await;
    tls.write_all(b"POST /mutate-pod HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
        .await
        .expect("head");
    // A body past the limit is answered before it is all read, and the connection closed: a
    // write may then fail (the server's reset), and the answer is read all the same.
    let mut sent = true;
    for piece in body.chunks(chunk) {
        let mut frame = format!("{:x}\r\n", piece.len()).into_bytes();
        frame.extend_from_slice(piece);
        frame.extend_from_slice(b"\r\n");
        if tls.write_all(&frame).await.is_err() || tls.flush().await.is_err() {
            sent = false;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    if sent {
        let _ = tls.write_all(b"0\r\n\r\n").await;
    }
    let mut reply = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tls.read_to_end(&mut reply),
    )
    .await
    .expect("answered")
    .ok();
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let at = text.find("\r\n\r\n").expect("end of head") + 4;
    reply[at..].to_vec()
}

/// A body in several frames is gathered and answered exactly as the same body in one; one
/// that streams past the size limit is cut off there and answered allowed with a warning.
#[tokio::test]
async fn body_in_several_frames_is_answered_as_in_one() {
    let running = start(with_examples(), |c| c.limits.max_body_bytes = 8 * 1024).await;
    let body = fixture("pod-create.json");
    let whole = post(&running, body.clone()).await.body;
    let pieces = post_chunked(&running, &body, 1000).await;
    assert_eq!(
        String::from_utf8_lossy(&pieces),
        String::from_utf8_lossy(&whole)
    );
    assert!(response_of_bytes(&whole)["patch"].is_string());

    let mut too_big = body.clone();
    too_big.extend(std::iter::repeat_n(b' ', 8 * 1024));
    let answer = response_of_bytes(&post_chunked(&running, &too_big, 4000).await);
    assert_eq!(answer["allowed"], true);
    assert!(answer.get("patch").is_none(), "{answer}");
    let warning = answer["warnings"][0].as_str().expect("warning");
    assert!(warning.contains("8192"), "{warning}");
}

fn response_of_bytes(body: &[u8]) -> Value {
    let review: Value = serde_json::from_slice(body).expect("json");
    review["response"].clone()
}

/// Posts the create review over HTTP/1.1 with `connection: close` on `conn` and returns the
/// whole reply as text.
async fn post_create_and_close(
    conn: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = fixture("pod-create.json");
    let head = format!(
        "POST /mutate-pod HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.expect("head");
    conn.write_all(&body).await.expect("body");
    let mut reply = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        conn.read_to_end(&mut reply),
    )
    .await
    .expect("answered")
    .ok();
    String::from_utf8_lossy(&reply).into_owned()
}

/// Past `--max-h2-connections`, a client offering HTTP/2 and HTTP/1.1 is given HTTP/1.1 and
/// served; once an HTTP/2 connection closes, the next is given HTTP/2 again.
#[tokio::test]
async fn http2_connections_beyond_the_cap_speak_http1() {
    let running = start(with_examples(), |c| c.connections.http2.max_connections = 2).await;
    let both: &[&[u8]] = &[b"h2", b"http/1.1"];
    let alpn = |c: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>| {
        c.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
    };
    let first = raw_tls_alpn(&running, both).await;
    let second = raw_tls_alpn(&running, both).await;
    assert_eq!(alpn(&first).as_deref(), Some(&b"h2"[..]));
    assert_eq!(alpn(&second).as_deref(), Some(&b"h2"[..]));
    let mut third = raw_tls_alpn(&running, both).await;
    assert_eq!(
        alpn(&third).as_deref(),
        Some(&b"http/1.1"[..]),
        "beyond the cap"
    );
    let text = post_create_and_close(&mut third).await;
    assert!(
        text.starts_with("HTTP/1.1 200") && text.contains(r#""patch":""#),
        "{text}"
    );

    drop(first);
    let mut again = None;
    for _ in 0..50 {
        let conn = raw_tls_alpn(&running, both).await;
        if alpn(&conn).as_deref() == Some(&b"h2"[..]) {
            again = Some(conn);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "HTTP/2 offered again once one closed");
    drop(second);
}

/// An HTTP/2 slot is taken by a ClientHello offering `h2`, not by the TCP connection: silent
/// connections and HTTP/1.1-only clients (the soak's ten, an attacker's thousands) leave the
/// apiserver its HTTP/2.
#[tokio::test]
async fn connections_not_offering_http2_take_no_http2_slot() {
    let running = start(with_examples(), |c| c.connections.http2.max_connections = 1).await;
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(
            tokio::net::TcpStream::connect(running.addr)
                .await
                .expect("connect"),
        );
    }
    let http1 = [
        raw_tls_alpn(&running, &[b"http/1.1"]).await,
        raw_tls_alpn(&running, &[]).await,
    ];
    let both: &[&[u8]] = &[b"h2", b"http/1.1"];
    let conn = raw_tls_alpn(&running, both).await;
    assert_eq!(
        conn.get_ref().1.alpn_protocol(),
        Some(&b"h2"[..]),
        "the one slot is free"
    );
    drop((silent, http1));
}

/// A connection that did not negotiate `h2` (past the cap, or without ALPN) and sends the
/// HTTP/2 preface anyway is closed without an HTTP/2 answer; without ALPN, HTTP/1.1 is served.
#[tokio::test]
async fn http2_preface_without_h2_in_alpn_is_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let running = start(with_examples(), |c| c.connections.http2.max_connections = 1).await;
    let both: &[&[u8]] = &[b"h2", b"http/1.1"];
    let holder = raw_tls_alpn(&running, both).await;
    assert_eq!(holder.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));

    // The preface, then an empty SETTINGS frame: what an HTTP/2 client sends first.
    let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    preface.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    for alpn in [both, &[]] {
        let mut conn = raw_tls_alpn(&running, alpn).await;
        assert_ne!(conn.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        // Split like a slow client would, so the check spans reads.
        conn.write_all(&preface[..5]).await.expect("preface start");
        conn.flush().await.expect("flush");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let _ = conn.write_all(&preface[5..]).await;
        let mut reply = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            conn.read_to_end(&mut reply),
        )
        .await;
        assert!(read.is_ok(), "closed at once (ALPN {alpn:?})");
        assert!(
            reply.is_empty(),
            "no HTTP/2 SETTINGS or anything else (ALPN {alpn:?}): {reply:?}"
        );
    }

    let mut plain = raw_tls_alpn(&running, &[]).await;
    let text = post_create_and_close(&mut plain).await;
    assert!(
        text.starts_with("HTTP/1.1 200") && text.contains(r#""patch":""#),
        "HTTP/1.1 without ALPN is served: {text}"
    );
    drop(holder);
}

/// A client that sends headers and then stalls: answered within the deadline, allowed
/// without a patch (what failurePolicy: Ignore would do), never an HTTP error.
#[tokio::test]
async fn stalled_body_is_answered_at_the_deadline() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let running = start(with_examples(), |c| {
        c.limits.deadline = std::time::Duration::from_millis(300);
    })
    .await;
    let mut tls = raw_tls(&running).await;
    let started = std::time::Instant::now();
    tls.write_all(
        b"POST /mutate-pod HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 5000\r\n\r\n{\"kind\":",
    )
    .await
    .expect("write");
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), tls.read(&mut buf))
        .await
        .expect("answered before the apiserver would give up")
        .expect("read");
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains(r#""allowed":true"#), "{text}");
    assert!(text.contains("deadline"), "{text}");
    assert!(
        elapsed >= std::time::Duration::from_millis(250),
        "{elapsed:?}"
    );
}
