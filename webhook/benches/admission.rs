//! CPU cost of one admission review (bytes in -> response bytes out), no IO: the part of the
//! server's per-request cost that is ours rather than TLS/HTTP's.

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use koord_webhook::policy::PolicyConfig;
use koord_webhook::server::admission::{ReviewContext, review};

fn compact(path: &str) -> Vec<u8> {
    let text = std::fs::read(path).expect("fixture");
    let v: serde_json::Value = serde_json::from_slice(&text).expect("json");
    serde_json::to_vec(&v).expect("json")
}

fn bench(c: &mut Criterion) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
    let config = PolicyConfig::default();
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
