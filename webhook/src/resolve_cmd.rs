//! `koord-webhook resolve`: the engine offline, on manifests a user would `kubectl apply`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde::Deserialize;
use serde_json::Value;

use crate::manifest::{self, ManifestError, ReadError};
use crate::mutation::apply_changes;
use crate::policy::{PolicyConfig, PolicyLoadError, load_policy};
use crate::resolve::{
    Operation, ParamSource, PodInput, PodMemorySource, Resolution, ResolveContext, resolve_pod,
};

#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// Pod manifest (YAML or JSON, multi-document; `-` reads stdin).
    #[arg(short = 'f', long = "filename", env = "KOORD_RESOLVE_FILE")]
    pub file: PathBuf,
    /// ConfigMap manifest with `resource-qos-config` and/or `colocation-config` (ack-slo-config);
    /// default: embedded defaults (colocation off).
    #[arg(long, env = "KOORD_CLUSTER_CONFIG_FILE")]
    pub cluster_config: Option<PathBuf>,
    /// ConfigMap manifest with `memory-qos` and/or `proactive-reclaim` (ack-slo-pod-config);
    /// default: no namespace lists.
    #[arg(long, env = "KOORD_NAMESPACE_CONFIG_FILE")]
    pub namespace_config: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, env = "KOORD_RESOLVE_OUTPUT", value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
    /// Namespace for pods whose manifest names none.
    #[arg(
        short = 'n',
        long,
        env = "KOORD_RESOLVE_NAMESPACE",
        default_value = "default"
    )]
    pub namespace: String,
    /// Resolve as an UPDATE (resources stay as they are) instead of a CREATE.
    #[arg(long, env = "KOORD_RESOLVE_UPDATE")]
    pub update: bool,
    /// Explain on stderr which source decided each value.
    #[arg(long, env = "KOORD_RESOLVE_EXPLAIN")]
    pub explain: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveCmdError {
    /// The ConfigMap files.
    #[error(transparent)]
    Policy(#[from] PolicyLoadError),
    /// The pod file.
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{path}: {source}")]
    Manifest { path: String, source: ManifestError },
    #[error("{path}: pod {pod}: {message}")]
    Pod {
        path: String,
        pod: String,
        message: String,
    },
    #[error("{path}: no Pod found")]
    NoPod { path: String },
}

/// What a run prints: the document on stdout, notes and explanations on stderr.
#[derive(Debug, Default)]
pub struct ResolveOutput {
    pub stdout: String,
    pub stderr: String,
}

/// Resolves every Pod of `text`; pure apart from its arguments, so tests call it directly.
pub fn resolve_manifests(
    text: &str,
    path: &str,
    config: &PolicyConfig,
    args: &ResolveArgs,
) -> Result<ResolveOutput, ResolveCmdError> {
    let objects = manifest::read_objects(text).map_err(|source| ResolveCmdError::Manifest {
        path: path.to_owned(),
        source,
    })?;
    let mut out = ResolveOutput::default();
    let mut pods = Vec::new();
    for mut obj in objects {
        if manifest::kind(&obj) != "Pod" {
            let _ = writeln!(
                out.stderr,
                "skipped {} {:?}: not a Pod",
                manifest::kind(&obj),
                manifest::name(&obj)
            );
            continue;
        }
        let resolution = resolve_one(&obj, config, args, &mut out.stderr).map_err(|message| {
            ResolveCmdError::Pod {
                path: path.to_owned(),
                pod: manifest::name(&obj).to_owned(),
                message,
            }
        })?;
        apply_changes(&mut obj, &resolution);
        pods.push(obj);
    }
    if pods.is_empty() {
        return Err(ResolveCmdError::NoPod {
            path: path.to_owned(),
        });
    }
    out.stdout = render(pods, args.output);
    Ok(out)
}

/// Resolves one Pod object (explaining on `stderr` with `--explain`);
/// the error is the message after `pod NAME:`.
fn resolve_one(
    obj: &Value,
    config: &PolicyConfig,
    args: &ResolveArgs,
    stderr: &mut String,
) -> Result<Resolution, String> {
    let pod = PodInput::deserialize(obj).map_err(|e| format!("not a valid Pod: {e}"))?;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or(&args.namespace);
    let ctx = ResolveContext {
        namespace,
        operation: if args.update {
            Operation::Update
        } else {
            Operation::Create
        },
        config,
    };
    let resolution = resolve_pod(&pod, &ctx).map_err(|e| e.to_string())?;
    if let Some(w) = resolution.warning() {
        // What kubectl would print for this pod.
        let _ = writeln!(stderr, "Warning: pod {}: {w}", pod.display_name());
    }
    if args.explain {
        explain(stderr, namespace, &pod.display_name(), &resolution);
    }
    Ok(resolution)
}

fn render(mut pods: Vec<Value>, format: OutputFormat) -> String {
    match format {
        OutputFormat::Json => {
            let doc = if pods.len() == 1 {
                pods.remove(0)
            } else {
                serde_json::json!({"apiVersion": "v1", "kind": "List", "items": pods})
            };
            serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
        }
        OutputFormat::Yaml => pods
            .iter()
            .map(|p| serde_saphyr::to_string(p).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("---\n"),
    }
}

/// The serialized (kebab-case / camelCase) name of a contract enum value.
fn wire_name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// `--explain`: which source decided each value, one block per pod.
fn explain(out: &mut String, namespace: &str, name: &str, r: &Resolution) {
    let _ = writeln!(out, "pod {namespace}/{name}:");
    explain_class(out, r);
    explain_memory_qos(out, r);
    match &r.resolved.memory_locality {
        Some(l) => {
            let _ = writeln!(
                out,
                "  memoryLocality {:?} decided by {:?}",
                l.policy, l.source
            );
        }
        None => {
            let _ = writeln!(out, "  memoryLocality: not set");
        }
    }
    explain_proactive_reclaim(out, r);
    if let Some(why) = r.explanation.batch_withheld {
        let _ = writeln!(
            out,
            "  batch resources: cpu/memory kept, not translated: colocation is off ({why})"
        );
    } else if r.explanation.batch_containers > 0 {
        let _ = writeln!(
            out,
            "  batch resources: cpu/memory translated: colocation is on (colocation-config \"enable\": true)"
        );
    }
    match &r.resolved.batch {
        Some(b) => {
            let _ = writeln!(
                out,
                "  batch: {} container(s) translated; pod cpu.shares {} cpu.cfs_quota_us {} memory.limit_in_bytes {}",
                r.explanation.batch_containers,
                b.pod.cpu_shares,
                b.pod.cpu_cfs_quota_us,
                b.pod.memory_limit_in_bytes
            );
        }
        None => {
            let _ = writeln!(out, "  batch: none");
        }
    }
    let _ = writeln!(out, "  {} change(s)", r.changes.len());
}

fn explain_class(out: &mut String, r: &Resolution) {
    let q = &r.resolved;
    let class = &r.explanation.class;
    let _ = writeln!(
        out,
        "  qosClass {} from {} (Kubernetes QoS {:?}){}",
        q.qos_class,
        wire_name(&q.qos_class_source),
        class.kube_qos,
        if class.write_label.is_some() {
            ", label written"
        } else {
            ""
        }
    );
}

/// How a node's kernel realizes the parameters (the applier's `MemoryQOSApplied` Event says it
/// per node: docs/async-reclaim.md).
fn explain_realization(out: &mut String) {
    let _ = writeln!(
        out,
        "  on the node (the applier's Event names what it applies, emulates or lacks):\n    \
         min/low/throttling: cgroup v2 and Alibaba Cloud Linux; none on mainline cgroup v1\n    \
         wmarkRatio, wmarkScalePermill: Alibaba Cloud Linux; emulated with memory.reclaim on \
         mainline cgroup v2 (5.19+)\n    \
         wmarkMinAdj: Alibaba Cloud Linux; emulated with memory.reclaim and memory.high (the \
         BE throttle) on mainline cgroup v2 (5.19+)\n    \
         priority, priorityEnable: Alibaba Cloud Linux only"
    );
}

fn explain_memory_qos(out: &mut String, r: &Resolution) {
    let m = &r.resolved.memory_qos;
    let _ = writeln!(
        out,
        "  memoryQOS {} (policy {}) decided by {}",
        if m.enabled { "enabled" } else { "disabled" },
        wire_name(&m.policy),
        wire_name(&m.source)
    );
    for ((spec, value), source) in koord_api::MemoryQosParams::SPECS
        .iter()
        .zip(m.params.values())
        .zip(r.explanation.param_sources)
    {
        let from = match source {
            ParamSource::Reset => "reset value (disabled)",
            ParamSource::Recommended => "recommended for the class",
            ParamSource::ClusterConfig => "cluster ConfigMap",
            ParamSource::PodAnnotation => "pod annotation",
        };
        let _ = writeln!(out, "    {} = {value} ({from})", spec.name);
    }
    if m.enabled {
        explain_realization(out);
    }
    let e = &r.explanation;
    if !e.sidecars.is_empty() {
        let _ = writeln!(
            out,
            "  native sidecar(s) protected like containers: {}",
            e.sidecars.join(", ")
        );
    }
    let from = match e.pod_memory {
        PodMemorySource::ContainerSums if e.sidecars.is_empty() => "the sums over the containers",
        PodMemorySource::ContainerSums => "the sums over the containers and native sidecars",
        PodMemorySource::PodLevelRequest => {
            "the pod-level memory request (spec.resources.requests.memory)"
        }
        PodMemorySource::PodLevelLimit => {
            "the pod-level memory limit (spec.resources.limits.memory; no request anywhere)"
        }
    };
    let _ = writeln!(
        out,
        "  pod memory.min {} memory.low {} from {from}",
        m.pod.min, m.pod.low
    );
    if let Some(high) = m.pod.high {
        let _ = writeln!(
            out,
            "  pod memory.high {high} from the pod-level memory limit (spec.resources.limits.memory) x throttlingPercent {}",
            m.params.throttling_percent
        );
    }
    if e.pod_level_kept {
        let _ = writeln!(
            out,
            "  batch resources: pod-level spec.resources cpu/memory kept (batch resources cannot be pod-level)"
        );
    }
}

fn explain_proactive_reclaim(out: &mut String, r: &Resolution) {
    let (Some(p), Some(sources)) = (
        &r.resolved.proactive_reclaim,
        r.explanation.proactive_reclaim_param_sources,
    ) else {
        let _ = writeln!(out, "  proactiveReclaim: not set");
        return;
    };
    let _ = writeln!(
        out,
        "  proactiveReclaim {} decided by {}",
        if p.enabled { "enabled" } else { "disabled" },
        wire_name(&p.source)
    );
    for ((spec, value), source) in koord_api::ProactiveReclaimParams::SPECS
        .iter()
        .zip(p.params.values())
        .zip(sources)
    {
        let from = match source {
            ParamSource::Reset => "default (disabled)",
            ParamSource::Recommended => "default",
            ParamSource::ClusterConfig => "cluster ConfigMap",
            ParamSource::PodAnnotation => "pod annotation",
        };
        let _ = writeln!(out, "    {} = {value} ({from})", spec.name);
    }
    for (name, floor) in &p.containers {
        let _ = writeln!(
            out,
            "    floor of {name}: {} bytes (the larger of memory.min and floorPercent {}% of the memory request)",
            floor.floor_bytes, p.params.floor_percent
        );
    }
}

/// Runs the command: output only on success, one error line otherwise.
pub fn run(args: ResolveArgs) -> ExitCode {
    let mut notes = Vec::new();
    let result = load_policy(
        args.cluster_config.as_deref(),
        args.namespace_config.as_deref(),
        &mut notes,
    )
    .map_err(ResolveCmdError::from)
    .and_then(|config| {
        let text = manifest::read_file(&args.file)?;
        resolve_manifests(&text, &args.file.display().to_string(), &config, &args)
    });
    match result {
        Ok(out) => {
            for n in notes {
                tracing::info!(note = %n, "configuration");
            }
            eprint!("{}", out.stderr);
            print!("{}", out.stdout);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
