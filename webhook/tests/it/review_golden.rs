//! Every admission answer, byte for byte: each review fixture in `tests/fixtures/` answered
//! under three policies (the embedded defaults; colocation on alone, the policy
//! `examples/review_loop.rs` measures, which checks its answers against these files; memory QoS
//! on for LS and BE with colocation on) must give exactly the bytes stored in
//! `tests/fixtures/responses/` (`pod-create-proactive-reclaim` is the one where a pod states
//! proactive reclaim: every other answer stays as it was before that section existed). The hot
//! path writes its JSON by hand for speed; this is what keeps every such change from moving one
//! byte.
//!
//! After a deliberate change to an answer, rewrite the files with
//! `UPDATE_GOLDEN=1 cargo test -p koord-webhook --test it -- review_golden::` and review the diff.

use std::path::{Path, PathBuf};

use koord_webhook::admission::{ReviewContext, review};
use koord_webhook::policy::{ClusterQosConfig, Colocation, PolicyConfig};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn policies() -> Vec<(&'static str, PolicyConfig)> {
    let memory_on = ClusterQosConfig::parse(
        r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"minLimitPercent":20,"lowLimitPercent":10,"throttlingPercent":80}},"beClass":{"memoryQOS":{"enable":true}}}}"#,
    )
    .expect("cluster config")
    .config;
    vec![
        ("defaults", PolicyConfig::default()),
        (
            "colocation",
            PolicyConfig {
                colocation: Colocation::Enabled,
                ..PolicyConfig::default()
            },
        ),
        (
            "memory-colocation",
            PolicyConfig {
                cluster: memory_on,
                colocation: Colocation::Enabled,
                ..PolicyConfig::default()
            },
        ),
    ]
}

fn reviews() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
}

fn golden_path(review: &Path, policy: &str) -> PathBuf {
    let stem = review.file_stem().and_then(|s| s.to_str()).expect("name");
    Path::new(FIXTURES)
        .join("responses")
        .join(format!("{stem}.{policy}.json"))
}

#[test]
fn every_answer_is_the_stored_one_byte_for_byte() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let skip = |ns: &str| (ns == "kube-system").then_some("exempt");
    let mut compared = 0;
    let mut differ = Vec::new();
    for (name, config) in policies() {
        let ctx = ReviewContext {
            config: &config,
            skip_namespace: &skip,
        };
        for path in reviews() {
            let body = std::fs::read(&path).expect("fixture");
            let answer = review(&body, &ctx).body;
            let golden = golden_path(&path, name);
            if update {
                std::fs::write(&golden, &answer).expect("write golden");
                continue;
            }
            let want = std::fs::read(&golden).unwrap_or_else(|e| {
                panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", golden.display())
            });
            compared += 1;
            if answer != want {
                differ.push(format!(
                    "{}:\n  got  {}\n  want {}",
                    golden.display(),
                    String::from_utf8_lossy(&answer),
                    String::from_utf8_lossy(&want)
                ));
            }
        }
    }
    assert!(differ.is_empty(), "answers changed:\n{}", differ.join("\n"));
    assert!(update || compared >= 51, "only {compared} answers compared");
}
