//! Batch resources of BE pods: cpu/memory -> `kubernetes.io/batch-cpu` / `batch-memory`, the
//! batch cgroup values, and Koordinator's extended-resource-spec annotation.

use std::collections::BTreeMap;

use koord_api::keys::{RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY, RESOURCE_CPU, RESOURCE_MEMORY};
use koord_api::knobs::{milli_cpu_to_quota, milli_cpu_to_shares};
use koord_api::quantity::{format_decimal_si, parse_milli, parse_value};
use koord_api::{BatchKnobs, ResolvedBatch};

use super::pod_view::{ContainerView, PodView, ResourceMap, ResourcesView};
use crate::policy::FieldError;

/// An owned resource list in key order.
pub type OwnedResources = BTreeMap<String, String>;

/// New requests/limits of one container after translation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranslatedResources {
    pub requests: Option<OwnedResources>,
    pub limits: Option<OwnedResources>,
}

/// A container's resources as the pod will carry them: untouched, or translated.
#[derive(Debug)]
pub enum EffectiveResources<'v, 'a> {
    Original(Option<&'v ResourcesView<'a>>),
    Translated(TranslatedResources),
}

impl EffectiveResources<'_, '_> {
    pub fn request(&self, key: &str) -> Option<&str> {
        match self {
            Self::Original(r) => (*r)?.requests.as_ref()?.get(key).map(|q| q.as_str()),
            Self::Translated(t) => t.requests.as_ref()?.get(key).map(String::as_str),
        }
    }

    pub fn limit(&self, key: &str) -> Option<&str> {
        match self {
            Self::Original(r) => (*r)?.limits.as_ref()?.get(key).map(|q| q.as_str()),
            Self::Translated(t) => t.limits.as_ref()?.get(key).map(String::as_str),
        }
    }

    /// Request with the apiserver's defaulting: a missing request takes the limit.
    pub fn request_or_limit(&self, key: &str) -> Option<&str> {
        self.request(key).or_else(|| self.limit(key))
    }

    fn has_batch(&self) -> bool {
        [RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY]
            .iter()
            .any(|k| self.request(k).is_some() || self.limit(k).is_some())
    }
}

/// Translates one resource list: cpu -> batch-cpu (integer milli-cores rounded up, canonical
/// form), memory -> batch-memory (unchanged text); other resources are kept.
fn translate_list(list: &ResourceMap<'_>, field: &str) -> Result<OwnedResources, FieldError> {
    let mut out = OwnedResources::new();
    for (name, q) in list {
        match name.as_str() {
            RESOURCE_CPU => {
                let milli = parse_milli(q.as_str())
                    .map_err(|e| FieldError::new(format!("{field}.cpu"), e.to_string()))?;
                out.insert(RESOURCE_BATCH_CPU.to_owned(), format_decimal_si(milli));
            }
            RESOURCE_MEMORY => {
                parse_value(q.as_str())
                    .map_err(|e| FieldError::new(format!("{field}.memory"), e.to_string()))?;
                out.insert(
                    RESOURCE_BATCH_MEMORY.to_owned(),
                    q.as_str().trim().to_owned(),
                );
            }
            other => {
                out.insert(other.to_owned(), q.as_str().to_owned());
            }
        }
    }
    Ok(out)
}

fn has_cpu_or_memory(list: Option<&ResourceMap<'_>>) -> bool {
    list.is_some_and(|l| l.contains_key(RESOURCE_CPU) || l.contains_key(RESOURCE_MEMORY))
}

/// Translates a container, or returns `None` when it has no cpu/memory to move.
pub fn translate_container(
    c: &ContainerView<'_>,
    field: &str,
) -> Result<Option<TranslatedResources>, FieldError> {
    let Some(res) = c.resources.as_ref() else {
        return Ok(None);
    };
    if !has_cpu_or_memory(res.requests.as_ref()) && !has_cpu_or_memory(res.limits.as_ref()) {
        return Ok(None);
    }
    let limits = res
        .limits
        .as_ref()
        .map(|l| translate_list(l, &format!("{field}.limits")))
        .transpose()?;
    let mut requests = res
        .requests
        .as_ref()
        .map(|r| translate_list(r, &format!("{field}.requests")))
        .transpose()?;
    // A missing request takes the limit, as the apiserver's defaulting would have done.
    if let Some(limits) = &limits {
        for key in [RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY] {
            if let Some(v) = limits.get(key) {
                requests
                    .get_or_insert_with(OwnedResources::new)
                    .entry(key.to_owned())
                    .or_insert_with(|| v.clone());
            }
        }
    }
    Ok(Some(TranslatedResources { requests, limits }))
}

/// Translates the pod overhead, or `None` when it has no cpu/memory.
pub fn translate_overhead(pod: &PodView<'_>) -> Result<Option<OwnedResources>, FieldError> {
    match pod.spec.overhead.as_ref() {
        Some(o) if has_cpu_or_memory(Some(o)) => translate_list(o, "spec.overhead").map(Some),
        _ => Ok(None),
    }
}

fn parse_opt(
    text: Option<&str>,
    field: impl FnOnce() -> String,
    milli: bool,
) -> Result<Option<i64>, FieldError> {
    text.map(|t| {
        if milli {
            parse_milli(t)
        } else {
            parse_value(t)
        }
        .map_err(|e| FieldError::new(field(), e.to_string()))
    })
    .transpose()
}

/// Batch cgroup values, present only when the pod carries batch resources.
pub fn batch_knobs(
    containers: &[(&str, &EffectiveResources<'_, '_>)],
    init_or_overhead_has_batch: bool,
) -> Result<Option<ResolvedBatch>, FieldError> {
    if !init_or_overhead_has_batch && !containers.iter().any(|(_, r)| r.has_batch()) {
        return Ok(None);
    }
    let mut out = ResolvedBatch {
        pod: BatchKnobs {
            cpu_shares: 0,
            cpu_cfs_quota_us: 0,
            memory_limit_in_bytes: 0,
        },
        containers: BTreeMap::new(),
    };
    let (mut cpu_req_sum, mut cpu_lim_sum, mut mem_lim_sum) = (0i64, Some(0i64), Some(0i64));
    for (i, (name, res)) in containers.iter().enumerate() {
        let field = |k: &str, kind: &str| format!("spec.containers[{i}].resources.{kind}.{k}");
        let cpu_req = parse_opt(
            res.request_or_limit(RESOURCE_BATCH_CPU),
            || field(RESOURCE_BATCH_CPU, "requests"),
            false,
        )?;
        let cpu_lim = parse_opt(
            res.limit(RESOURCE_BATCH_CPU),
            || field(RESOURCE_BATCH_CPU, "limits"),
            false,
        )?;
        let mem_lim = parse_opt(
            res.limit(RESOURCE_BATCH_MEMORY),
            || field(RESOURCE_BATCH_MEMORY, "limits"),
            false,
        )?;
        cpu_req_sum = cpu_req_sum.saturating_add(cpu_req.filter(|v| *v > 0).unwrap_or(0));
        cpu_lim_sum = cpu_lim_sum
            .zip(cpu_lim.filter(|v| *v > 0))
            .map(|(a, b)| a.saturating_add(b));
        mem_lim_sum = mem_lim_sum
            .zip(mem_lim.filter(|v| *v > 0))
            .map(|(a, b)| a.saturating_add(b));
        out.containers.insert(
            (*name).to_owned(),
            BatchKnobs {
                cpu_shares: milli_cpu_to_shares(cpu_req.unwrap_or(0)),
                cpu_cfs_quota_us: milli_cpu_to_quota(cpu_lim),
                memory_limit_in_bytes: mem_lim.filter(|v| *v > 0).unwrap_or(-1),
            },
        );
    }
    if containers.is_empty() {
        (cpu_lim_sum, mem_lim_sum) = (None, None);
    }
    out.pod = BatchKnobs {
        cpu_shares: milli_cpu_to_shares(cpu_req_sum),
        cpu_cfs_quota_us: milli_cpu_to_quota(cpu_lim_sum),
        memory_limit_in_bytes: mem_lim_sum.unwrap_or(-1),
    };
    Ok(Some(out))
}

/// `node.koordinator.sh/extended-resource-spec`: the batch entries of each container, in
/// Koordinator's shape (`limits` before `requests`, sorted keys); `None` when no container has any.
pub fn extended_resource_spec(
    containers: &[(&str, &EffectiveResources<'_, '_>)],
) -> Option<String> {
    type Entry<'a> = BTreeMap<&'static str, BTreeMap<&'static str, &'a str>>;
    let mut spec: BTreeMap<&str, Entry<'_>> = BTreeMap::new();
    for (name, res) in containers {
        let mut entry = Entry::new();
        for key in [RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY] {
            if let Some(v) = res.limit(key) {
                entry.entry("limits").or_default().insert(key, v);
            }
            if let Some(v) = res.request(key) {
                entry.entry("requests").or_default().insert(key, v);
            }
        }
        if !entry.is_empty() {
            spec.insert(name, entry);
        }
    }
    if spec.is_empty() {
        return None;
    }
    let mut root = BTreeMap::new();
    root.insert("containers", spec);
    serde_json::to_string(&root).ok()
}

/// Whether the init containers or the overhead carry batch resources.
pub fn init_or_overhead_has_batch(
    init: &[EffectiveResources<'_, '_>],
    overhead: Option<&OwnedResources>,
    pod: &PodView<'_>,
) -> bool {
    let overhead_has = match overhead {
        Some(o) => o.contains_key(RESOURCE_BATCH_CPU) || o.contains_key(RESOURCE_BATCH_MEMORY),
        None => pod.spec.overhead.as_ref().is_some_and(|o| {
            o.contains_key(RESOURCE_BATCH_CPU) || o.contains_key(RESOURCE_BATCH_MEMORY)
        }),
    };
    overhead_has || init.iter().any(EffectiveResources::has_batch)
}
