//! CPU cost of one admission review (bytes in -> response bytes out), no IO: the part of the
//! server's per-request cost that is ours rather than TLS/HTTP's. The logging set-up is the
//! server's (`koord_runtime::init_logging`, level `info`), so the admission span's cost at the
//! default level is part of what is measured; the last case measures it at `debug`, where it
//! is enabled and formatted.

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use koord_runtime::LogFormat;
use koord_webhook::admission::{ReviewContext, Reviewed, admission_span, review};
use koord_webhook::policy::{Colocation, PolicyConfig};

fn compact(path: &str) -> Vec<u8> {
    let text = std::fs::read(path).expect("fixture");
    let v: serde_json::Value = serde_json::from_slice(&text).expect("json");
    serde_json::to_vec(&v).expect("json")
}

/// What the handler does around `review`: the span, entered, and its fields recorded.
fn review_in_span(body: &[u8], ctx: &ReviewContext<'_>) -> Reviewed {
    let span = admission_span();
    let reviewed = span.in_scope(|| review(body, ctx));
    reviewed.record_in(&span);
    reviewed
}

fn bench(c: &mut Criterion) {
    koord_runtime::init_logging(LogFormat::Text, "info");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
    // Colocation on: the BE fixture's cpu/memory are translated, as before colocation gated it.
    let config = PolicyConfig {
        colocation: Colocation::Enabled,
        ..PolicyConfig::default()
    };
    let skip = |ns: &str| (ns == "kube-system").then_some("exempt");
    let ctx = ReviewContext {
        config: &config,
        skip_namespace: &skip,
    };
    for name in ["pod-create.json", "pod-create-be.json", "pod-update.json"] {
        let body = compact(&format!("{dir}{name}"));
        c.bench_function(&format!("review {name} ({} bytes)", body.len()), |b| {
            b.iter(|| review(black_box(&body), &ctx))
        });
    }
    // Colocation off: the BE pod keeps its cpu/memory and the response carries a warning.
    let off = PolicyConfig::default();
    let off_ctx = ReviewContext {
        config: &off,
        skip_namespace: &skip,
    };
    let body = compact(&format!("{dir}pod-create-be.json"));
    c.bench_function("review pod-create-be.json, colocation off", |b| {
        b.iter(|| review(black_box(&body), &off_ctx))
    });
    let body = compact(&format!("{dir}pod-create.json"));
    c.bench_function(
        "review pod-create.json in its admission span, level info",
        |b| b.iter(|| review_in_span(black_box(&body), &ctx)),
    );
    let debug = tracing_subscriber::fmt()
        .with_env_filter("debug")
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::with_default(debug, || {
        c.bench_function(
            "review pod-create.json in its admission span, level debug",
            |b| b.iter(|| review_in_span(black_box(&body), &ctx)),
        );
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
