//! `koord-webhook resolve` as a user runs it, on the reference's own manifests.

use crate::common::examples;
use std::path::PathBuf;
use std::process::{Command, Output};

use koord_api::ResolvedQos;
use koord_api::keys::ANNOTATION_RESOLVED_QOS;
use serde_json::Value;

fn resolve(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_koord-webhook"))
        .arg("resolve")
        .args(args)
        .current_dir(examples())
        .output()
        .expect("runs")
}

fn annotation(pod: &Value) -> ResolvedQos {
    ResolvedQos::from_annotation(
        pod["metadata"]["annotations"][ANNOTATION_RESOLVED_QOS]
            .as_str()
            .expect("annotation"),
    )
    .expect("valid")
}

#[test]
fn reference_examples_resolve() {
    let out = resolve(&[
        "-f",
        "redis-demo.yaml",
        "--cluster-config",
        "ack-slo-config.yaml",
        "--namespace-config",
        "ack-slo-pod-config.yaml",
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pod: Value = serde_json::from_slice(&out.stdout).expect("one pod as JSON");
    assert_eq!(pod["metadata"]["name"], "redis-demo");
    let r = annotation(&pod);
    assert_eq!(
        r.memory_qos.containers["redis"].wmark_high,
        koord_api::MaxOr::Bytes(6_120_325_120)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("skipped ConfigMap \"redis-demo-config\"")
            && stderr.contains("skipped Service"),
        "{stderr}"
    );

    let out = resolve(&["-f", "be-ffmpeg.yaml", "-o", "json"]);
    let pod: Value = serde_json::from_slice(&out.stdout).expect("pod");
    let b = annotation(&pod).batch.expect("batch");
    assert_eq!(
        (
            b.pod.cpu_shares,
            b.pod.cpu_cfs_quota_us,
            b.pod.memory_limit_in_bytes
        ),
        (71_680, 7_000_000, 23_622_320_128)
    );

    let out = resolve(&[
        "-f",
        "stress-demo.yaml",
        "--cluster-config",
        "memory-locality-config.yaml",
        "-o",
        "yaml",
    ]);
    assert!(out.status.success());
    let pod: Value = serde_saphyr::from_slice(&out.stdout).expect("yaml pod");
    assert_eq!(annotation(&pod).qos_class, koord_api::QosClass::Be);
}

#[test]
fn multi_document_files_resolve_every_pod_as_a_list() {
    let out = resolve(&["-f", "two-pods.yaml", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout).expect("list");
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(2));
    let out = resolve(&["-f", "two-pods.yaml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("kind: Pod").count(), 2);
    assert!(text.contains("\n---\n"));
}

#[test]
fn explain_names_the_sources() {
    let out = resolve(&["-f", "redis-demo.yaml", "--explain", "-o", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("pod default/redis-demo:"), "{stderr}");
    assert!(
        stderr.contains("wmarkRatio = 95 (recommended for the class)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("memoryQOS enabled (policy auto) decided by pod-annotation"),
        "{stderr}"
    );
    assert!(
        stderr.contains("wmarkRatio, wmarkScalePermill: Alibaba Cloud Linux; emulated with memory.reclaim on mainline cgroup v2 (5.19+)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("wmarkMinAdj: Alibaba Cloud Linux; emulated with memory.reclaim and memory.high (the BE throttle) on mainline cgroup v2 (5.19+)"),
        "{stderr}"
    );
}

/// `--cluster-config` carries colocation-config: BE pods are translated only with it on, and
/// `--explain` says which way it went and why.
#[test]
fn colocation_decides_the_batch_translation_and_explain_says_why() {
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"be","labels":{"koordinator.sh/qosClass":"BE"}},
        "spec":{"containers":[{"name":"app","image":"x","resources":{"requests":{"cpu":"1","memory":"1Gi"}}}]}}"#;
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("be.json");
    std::fs::write(&file, pod).expect("write");
    let file = file.to_str().expect("utf8");

    // No cluster ConfigMap, and the reference's example (no colocation-config): off.
    for extra in [&[][..], &["--cluster-config", "ack-slo-config.yaml"][..]] {
        let mut args = vec!["-f", file, "--explain", "-o", "json"];
        args.extend_from_slice(extra);
        let out = resolve(&args);
        assert!(out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("batch resources: cpu/memory kept, not translated: colocation is off"),
            "{stderr}"
        );
        assert!(
            stderr.contains(
                "Warning: pod be: koord-qos: BE pod admitted with its cpu/memory unchanged"
            ),
            "{stderr}"
        );
        let pod: Value = serde_json::from_slice(&out.stdout).expect("pod");
        assert_eq!(
            pod["spec"]["containers"][0]["resources"],
            serde_json::json!({"requests": {"cpu": "1", "memory": "1Gi"}})
        );
    }
    let out = resolve(&[
        "-f",
        file,
        "--explain",
        "-o",
        "json",
        "--cluster-config",
        "ack-slo-config-colocation.yaml",
    ]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("batch resources: cpu/memory translated: colocation is on"),
        "{stderr}"
    );
    assert!(!stderr.contains("Warning"), "{stderr}");
    let pod: Value = serde_json::from_slice(&out.stdout).expect("pod");
    assert_eq!(
        pod["spec"]["containers"][0]["resources"],
        serde_json::json!({"requests": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "1Gi"}})
    );
}

#[test]
fn bad_input_exits_non_zero_with_one_line_and_no_stdout() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["-f", "bad-range.yaml"],
            "koordinator.sh/memoryQOS.minLimitPercent: 150 is out of range (allowed 0..100)",
        ),
        (
            &["-f", "bad-json.yaml"],
            "koordinator.sh/memoryQOS: not valid JSON",
        ),
        (
            &["-f", "bad-policy.yaml"],
            "koordinator.sh/memoryQOS.policy: unknown policy \"sometimes\" (allowed auto|default|none, case-insensitive)",
        ),
        (
            &[
                "-f",
                "redis-demo.yaml",
                "--cluster-config",
                "broken-slo-config.yaml",
            ],
            "ConfigMap ack-slo-config: resource-qos-config.clusterStrategy.lsClass.memoryQOS.throttlingPercent: 101 is out of range (allowed 0..100)",
        ),
        (
            &[
                "-f",
                "redis-demo.yaml",
                "--cluster-config",
                "redis-demo.yaml",
            ],
            "no ConfigMap with data.resource-qos-config or data.colocation-config found",
        ),
        (&["-f", "missing.yaml"], "missing.yaml: "),
        (&["-f", "ack-slo-config.yaml"], "no Pod found"),
    ];
    for (args, msg) in cases {
        let out = resolve(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
        assert_eq!(
            stderr.lines().count(),
            1,
            "{args:?}: one line, got {stderr}"
        );
        assert!(
            stderr.starts_with("error: ") && stderr.contains(msg),
            "{args:?}: {stderr}"
        );
    }
}

/// The README's `resolve` example, run as it is written there (from the repository root, stdout
/// to a file, then `grep resolved-qos` of that file): what it prints on stderr and the line grep
/// finds are the README's own text, byte for byte.
#[test]
fn readme_resolve_example_prints_what_the_readme_shows() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let block = readme
        .split("```console\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("a console block in README.md");
    // Commands start with "$ "; a trailing backslash continues one onto the next line.
    let mut commands: Vec<(String, Vec<&str>)> = Vec::new();
    let mut continued = false;
    for line in block.lines() {
        if let Some(cmd) = line.strip_prefix("$ ") {
            commands.push((cmd.trim_end_matches('\\').to_owned(), Vec::new()));
            continued = line.ends_with('\\');
        } else if continued {
            let (cmd, _) = commands.last_mut().expect("a command before it");
            cmd.push_str(line.trim_end_matches('\\'));
            continued = line.ends_with('\\');
        } else {
            commands
                .last_mut()
                .expect("output after a command")
                .1
                .push(line);
        }
    }
    assert_eq!(commands.len(), 2, "resolve, then grep: {commands:?}");
    let (resolve_cmd, resolve_stderr) = &commands[0];
    let words: Vec<&str> = resolve_cmd.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "--")
        .expect("cargo run ... -- ARGS");
    let redirect = words
        .iter()
        .position(|w| *w == ">")
        .expect("stdout to a file");
    assert_eq!(
        &words[..at],
        ["cargo", "run", "-q", "-p", "koord-webhook"],
        "the README runs this crate's binary"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_koord-webhook"))
        .args(&words[at + 1..redirect])
        .current_dir(&root)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8(out.stderr).expect("utf-8");
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        *resolve_stderr,
        "README.md's resolve output is out of date; this is what the command prints now:\n{stderr}"
    );
    let (grep_cmd, grep_out) = &commands[1];
    assert_eq!(
        grep_cmd,
        &format!("grep resolved-qos {}", words[redirect + 1])
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let found: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("resolved-qos"))
        .collect();
    assert_eq!(
        found, *grep_out,
        "README.md's grep line is out of date; the file holds:\n{found:?}"
    );
}
