//! Runs one admission case N times, for instruction counts that do not depend on how busy the
//! machine is (criterion's wall-clock figures on a shared 2-core box swing by 2x):
//!
//! ```text
//! cargo build --release -p koord-webhook --example review_loop
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/review_loop create 1200 2>&1 | grep refs
//! ```
//!
//! Instructions per review = (refs at N=1200 - refs at N=200) / 1000, which cancels the set-up.
//! Cases: `create`, `be`, `update` (the three fixtures of benches/admission.rs; `be` with
//! colocation on, so its cpu/memory are translated), `be-off` (the BE fixture with colocation off:
//! resources kept, the admission warning written), `span` (`create`
//! inside its admission span, as the handler runs it, logging at `info`), `resolve` (the
//! two-container pod of benches/resolve.rs: view, engine, patch), `floor` (the floor server's
//! handler body on the `create` fixture: parse for the uid, fixed answer). Same allocator as the
//! server.
//!
//! Every review's answer is checked, or the run fails (exit 1, and so does
//! `benches/callgrind.sh`): a path that errors out early would otherwise read as faster. The
//! admission cases must answer exactly the golden bytes of `tests/fixtures/responses/` (an
//! allowed response with its patch; `tests/it/review_golden.rs` keeps those files true),
//! `floor` an allowed answer echoing the fixture's uid, `resolve` the same non-empty patch each
//! time. The comparison is a memcmp of about a kilobyte per review.

use std::hint::black_box;
use std::process::ExitCode;

use koord_runtime::LogFormat;
use koord_webhook::admission::{ReviewContext, admission_span, review};
use koord_webhook::mutation::json_patch;
use koord_webhook::policy::{ClusterQosConfig, Colocation, NamespaceQosConfig, PolicyConfig};
use koord_webhook::resolve::{Operation, PodInput, ResolveContext, resolve_pod};

#[path = "common/floor_review.rs"]
mod floor_review;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");

fn compact(name: &str) -> anyhow::Result<Vec<u8>> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{FIXTURES}{name}"))?)?;
    Ok(serde_json::to_vec(&v)?)
}

/// The stored answer a case must give: `tests/fixtures/responses/<fixture>.<policy>.json`, which
/// must itself allow the pod with a patch.
fn expected_answer(fixture: &str, policy: &str) -> anyhow::Result<Vec<u8>> {
    let stem = fixture.trim_end_matches(".json");
    let path = format!("{FIXTURES}responses/{stem}.{policy}.json");
    let want = std::fs::read(&path).map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
    let v: serde_json::Value = serde_json::from_slice(&want)?;
    let response = &v["response"];
    anyhow::ensure!(
        response["allowed"] == true && response["patch"].is_string(),
        "{path} is not an allowed answer with a patch"
    );
    Ok(want)
}

/// Fails on the first answer that differs from `want`, naming the review.
fn check_answer(case: &str, i: usize, got: &[u8], want: &[u8]) -> anyhow::Result<()> {
    if got != want {
        anyhow::bail!(
            "case {case}, review {i}: answer differs from the expected one\n  got  {}\n  want {}",
            String::from_utf8_lossy(got),
            String::from_utf8_lossy(want)
        );
    }
    Ok(())
}

fn run(case: &str, n: usize) -> anyhow::Result<()> {
    koord_runtime::init_logging(LogFormat::Text, "info");
    // Colocation on, so `be` measures the batch translation; `be-off` the pod kept as it is
    // (colocation off) with its admission warning.
    let on = PolicyConfig {
        colocation: Colocation::Enabled,
        ..PolicyConfig::default()
    };
    let off = PolicyConfig::default();
    let config = if case == "be-off" { &off } else { &on };
    let skip = |ns: &str| (ns == "kube-system").then_some("exempt");
    let ctx = ReviewContext {
        config,
        skip_namespace: &skip,
    };
    let fixture = match case {
        "create" | "span" | "floor" => "pod-create.json",
        "be" | "be-off" => "pod-create-be.json",
        "update" => "pod-update.json",
        "resolve" => "admission-review-pod-create.json",
        other => {
            anyhow::bail!(
                "unknown case {other:?} (create, be, be-off, update, span, resolve, floor)"
            )
        }
    };
    let body = compact(fixture)?;
    let policy = if case == "be-off" {
        "defaults"
    } else {
        "colocation"
    };
    match case {
        "span" => {
            let want = expected_answer(fixture, policy)?;
            for i in 0..n {
                let span = admission_span();
                let reviewed = span.in_scope(|| review(black_box(&body), &ctx));
                reviewed.record_in(&span);
                check_answer(case, i, &reviewed.body, &want)?;
                black_box(reviewed);
            }
        }
        "floor" => {
            let review: serde_json::Value = serde_json::from_slice(&body)?;
            let uid = review["request"]["uid"].as_str().unwrap_or_default();
            let want = koord_webhook::admission::response::write_response(uid, true, None, None);
            anyhow::ensure!(!uid.is_empty(), "{fixture} has no request.uid");
            for i in 0..n {
                let got = floor_review::floor_review(black_box(&body));
                check_answer(case, i, &got, &want)?;
                black_box(got);
            }
        }
        "resolve" => {
            let review: serde_json::Value = serde_json::from_slice(&body)?;
            let pod = serde_json::to_vec(&review["request"]["object"])?;
            let config = PolicyConfig {
                cluster: ClusterQosConfig::parse(r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true}},"beClass":{"memoryQOS":{"enable":true}}}}"#)?.config,
                namespaces: NamespaceQosConfig::parse(r#"{"enabledNamespaces":["allow-ns"],"disabledNamespaces":["block-ns"]}"#)?.config,
                colocation: Colocation::Enabled,
                ..PolicyConfig::default()
            };
            let ctx = ResolveContext {
                namespace: "shop",
                operation: Operation::Create,
                config: &config,
            };
            let mut first: Option<Vec<u8>> = None;
            for i in 0..n {
                let view: PodInput<'_> = serde_json::from_slice(black_box(&pod))?;
                let r = resolve_pod(&view, &ctx)?;
                let patch = json_patch(&view, &r);
                match &first {
                    Some(want) => check_answer(case, i, &patch, want)?,
                    None => {
                        anyhow::ensure!(patch.len() > 2, "case {case}: an empty patch");
                        first = Some(patch.clone());
                    }
                }
                black_box(patch);
            }
        }
        _ => {
            let want = expected_answer(fixture, policy)?;
            for i in 0..n {
                let reviewed = review(black_box(&body), &ctx);
                check_answer(case, i, &reviewed.body, &want)?;
                black_box(reviewed);
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(case), Some(Ok(n))) = (args.get(1), args.get(2).map(|n| n.parse())) else {
        eprintln!("usage: review_loop create|be|update|span|resolve N");
        return ExitCode::FAILURE;
    };
    match run(case, n) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
