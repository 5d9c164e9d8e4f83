//! koord-api's quantity parser against the crates that could replace it, on the quantities
//! the benchmark AdmissionReview carries (`webhook/tests/fixtures/pod-create.json`) and on
//! the answers Go's `resource.Quantity` gives (`Value()` and `MilliValue()`, rounded up).
//!
//!   quantity-crates check        # each parser's answers against Go's
//!   quantity-crates PARSER N     # parse the review's 8 quantities N times (for callgrind)

use std::hint::black_box;

use k8s_quantity_parser::QuantityParser as _;

/// The review's memory quantities (read as bytes) and cpu quantities (read as milli-cores).
const MEMORY: [&str; 4] = ["1Gi", "512Mi", "128Mi", "64Mi"];
const CPU: [&str; 4] = ["2", "500m", "200m", "50m"];

/// (input, Go's `Value()`, Go's `MilliValue()`); `None` where Go's answer leaves an int64.
/// The table of `api/src/quantity.rs`'s tests.
const GO: &[(&str, Option<i64>, Option<i64>)] = &[
    ("500m", Some(1), Some(500)),
    ("2", Some(2), Some(2000)),
    ("1.0001", Some(2), Some(1001)),
    ("0.5", Some(1), Some(500)),
    ("100Mi", Some(104_857_600), Some(104_857_600_000)),
    ("6Gi", Some(6_442_450_944), Some(6_442_450_944_000)),
    ("22Gi", Some(23_622_320_128), Some(23_622_320_128_000)),
    ("70k", Some(70_000), Some(70_000_000)),
    ("1e3", Some(1000), Some(1_000_000)),
    ("1.5Gi", Some(1_610_612_736), Some(1_610_612_736_000)),
    ("128974848", Some(128_974_848), Some(128_974_848_000)),
    ("129M", Some(129_000_000), Some(129_000_000_000)),
    ("1n", Some(1), Some(1)),
    ("0", Some(0), Some(0)),
    ("-1", Some(-1), Some(-1000)),
    ("9Ei", None, None),
];

/// A parser as the product uses one: bytes of a memory quantity, milli-cores of a cpu one.
struct Parser {
    name: &'static str,
    value: fn(&str) -> Option<i64>,
    milli: fn(&str) -> Option<i64>,
}

const PARSERS: [Parser; 3] = [
    Parser {
        name: "ours",
        value: |s| koord_api::quantity::parse_value(s).ok(),
        milli: |s| koord_api::quantity::parse_milli(s).ok(),
    },
    // Its integer conversions truncate (`1.5Gi` -> 1Gi) and refuse milli scales (`500m`), so
    // the closest it has to Go's rounded-up answers is its f64 (exact below 2^53).
    Parser {
        name: "kube_quantity",
        value: |s| {
            let q = kube_quantity::ParsedQuantity::try_from(s).ok()?;
            q.to_bytes_f64().map(|b| b.ceil() as i64)
        },
        milli: |s| {
            let q = kube_quantity::ParsedQuantity::try_from(s).ok()?;
            q.to_bytes_f64().map(|b| (b * 1000.0).ceil() as i64)
        },
    },
    // Its API takes its own k8s-openapi's `Quantity`, which owns a String.
    Parser {
        name: "k8s_quantity_parser",
        value: |s| {
            let q = k8s_openapi_0_14::apimachinery::pkg::api::resource::Quantity(s.to_owned());
            q.to_bytes().ok().flatten()
        },
        milli: |s| {
            let q = k8s_openapi_0_14::apimachinery::pkg::api::resource::Quantity(s.to_owned());
            q.to_milli_cpus().ok().flatten()
        },
    },
];

fn check() {
    println!("| parser | answers as Go's (of {}) | differs on |", GO.len() * 2);
    println!("|---|---|---|");
    for p in &PARSERS {
        let mut right = 0;
        let mut wrong = Vec::new();
        for &(input, value, milli) in GO {
            for (what, got, want) in [
                ("value", (p.value)(input), value),
                ("milli", (p.milli)(input), milli),
            ] {
                if got == want {
                    right += 1;
                } else {
                    wrong.push(format!("`{input}` {what} {got:?}"));
                }
            }
        }
        println!("| {} | {right} | {} |", p.name, wrong.join(", "));
    }
}

fn run(name: &str, n: u64) {
    let p = PARSERS
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no parser {name}"));
    let mut sum = 0i64;
    for _ in 0..n {
        for s in MEMORY {
            sum = sum.wrapping_add((p.value)(black_box(s)).unwrap_or(0));
        }
        for s in CPU {
            sum = sum.wrapping_add((p.milli)(black_box(s)).unwrap_or(0));
        }
    }
    black_box(sum);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [c] if c == "check" => check(),
        [name, n] => run(name, n.parse().expect("N")),
        _ => {
            eprintln!("usage: quantity-crates check | quantity-crates PARSER N");
            std::process::exit(2);
        }
    }
}
