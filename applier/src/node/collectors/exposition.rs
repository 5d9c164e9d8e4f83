//! The reference's metric families (names, label names, HELP texts as in Koordinator's
//! `pkg/koordlet/metrics/{psi,cpi}.go`) and their text exposition.
//!
//! The three per-cgroup families are not kept as prometheus `GaugeVec`s: that crate stores a
//! copy of the descriptor and every label string per series (about 2 KiB each; 150 containers
//! make ~3,900 series, ~8 MiB, and every scrape clones them all once more). Each cgroup keeps
//! its identity once and its last readings as plain numbers, and [`render_cgroups`] writes the
//! text format straight from them at scrape time. The two small health gauges stay ordinary
//! prometheus metrics in the applier's registry ([`super::metrics`]).

use std::fmt::Write as _;

use crate::node::shared::psi::{PRECISIONS, Psi, Resource};

pub const CONTAINER_PSI: &str = "koordlet_container_psi";
pub const POD_PSI: &str = "koordlet_pod_psi";
pub const CONTAINER_CPI: &str = "koordlet_container_cpi";
pub const POD_QOS_INFO: &str = "koord_applier_pod_qos_info";

const HELP_CONTAINER_PSI: &str = "Container psi collected by koordlet";
const HELP_POD_PSI: &str = "Pod psi collected by koordlet";
const HELP_CONTAINER_CPI: &str = "Container cpi collected by koordlet";
const HELP_POD_QOS_INFO: &str =
    "Pods the collectors follow (1 each), with their koordinator.sh/qosClass (none without one).";

/// The `cpi_field` values, in the order of the CPI counter group (cycles leads).
pub const CPI_FIELDS: [&str; 2] = ["cycles", "instructions"];

/// Who a cgroup belongs to. Every value comes from the pod object, never from a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub node: String,
    pub pod_uid: String,
    pub pod_name: String,
    pub pod_namespace: String,
    /// `(container_id, container_name)` for a container cgroup, `None` for the pod cgroup.
    pub container: Option<(String, String)>,
}

/// The last PSI readings of one cgroup, by resource (`None`: not read, or unreadable).
#[derive(Debug, Default, Clone, Copy)]
pub struct PsiSeries {
    resources: [Option<Psi>; 3],
}

fn index(res: Resource) -> usize {
    match res {
        Resource::Cpu => 0,
        Resource::Mem => 1,
        Resource::Io => 2,
    }
}

impl PsiSeries {
    pub fn set(&mut self, res: Resource, psi: &Psi) {
        self.resources[index(res)] = Some(*psi);
    }

    /// Drops one resource's series (its file went away or is malformed).
    pub fn clear(&mut self, res: Resource) {
        self.resources[index(res)] = None;
    }

    pub fn clear_all(&mut self) {
        self.resources = [None; 3];
    }

    pub fn is_empty(&self) -> bool {
        self.resources.iter().all(Option::is_none)
    }
}

/// The last CPI window of one container: scaled cycles and instructions.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpiSeries {
    counts: Option<[u64; 2]>,
}

impl CpiSeries {
    pub fn set(&mut self, cycles: u64, instructions: u64) {
        self.counts = Some([cycles, instructions]);
    }

    pub fn clear(&mut self) {
        self.counts = None;
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_none()
    }
}

/// Writes a label value escaped as the text format requires.
fn push_escaped(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn push_label(out: &mut String, first: &mut bool, name: &str, value: &str) {
    out.push(if *first { '{' } else { ',' });
    *first = false;
    out.push_str(name);
    out.push_str("=\"");
    push_escaped(out, value);
    out.push('"');
}

fn push_header(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
}

/// One PSI sample; labels in lexicographic order, as the prometheus text encoder writes them.
fn push_psi(
    out: &mut String,
    who: &Identity,
    res: Resource,
    full_supported: bool,
    degree: &str,
    precision: &str,
    value: f64,
) {
    let mut first = true;
    match &who.container {
        Some((id, cname)) => {
            out.push_str(CONTAINER_PSI);
            push_label(out, &mut first, "container_id", id);
            push_label(out, &mut first, "container_name", cname);
        }
        None => out.push_str(POD_PSI),
    }
    push_label(
        out,
        &mut first,
        "cpu_full_supported",
        if full_supported { "true" } else { "false" },
    );
    push_label(out, &mut first, "node", &who.node);
    push_label(out, &mut first, "pod_name", &who.pod_name);
    push_label(out, &mut first, "pod_namespace", &who.pod_namespace);
    push_label(out, &mut first, "pod_uid", &who.pod_uid);
    push_label(out, &mut first, "psi_degree", degree);
    push_label(out, &mut first, "psi_precision", precision);
    push_label(out, &mut first, "psi_resource_type", res.label());
    let _ = writeln!(out, "}} {value}");
}

fn push_cgroup_psi(out: &mut String, who: &Identity, psi: &PsiSeries) {
    for res in Resource::ALL {
        let Some(p) = &psi.resources[index(res)] else {
            continue;
        };
        let full_supported = p.full.is_some();
        for (line, degree) in [(Some(&p.some), "some"), (p.full.as_ref(), "full")] {
            let Some(line) = line else { continue };
            for (precision, v) in PRECISIONS.iter().zip(line.avgs()) {
                push_psi(out, who, res, full_supported, degree, precision, v);
            }
        }
    }
}

fn push_cpi(out: &mut String, who: &Identity, cpi: &CpiSeries) {
    let (Some(counts), Some((id, cname))) = (&cpi.counts, &who.container) else {
        return;
    };
    for (field, v) in CPI_FIELDS.iter().zip(counts) {
        out.push_str(CONTAINER_CPI);
        let mut first = true;
        push_label(out, &mut first, "container_id", id);
        push_label(out, &mut first, "container_name", cname);
        push_label(out, &mut first, "cpi_field", field);
        push_label(out, &mut first, "node", &who.node);
        push_label(out, &mut first, "pod_name", &who.pod_name);
        push_label(out, &mut first, "pod_namespace", &who.pod_namespace);
        push_label(out, &mut first, "pod_uid", &who.pod_uid);
        // The reference's gauge holds the count as a float.
        #[allow(clippy::cast_precision_loss)]
        let v = *v as f64;
        let _ = writeln!(out, "}} {v}");
    }
}

/// Appends the three families for `cgroups`, each once with HELP and TYPE; a family without
/// series is left out, as the prometheus encoder does.
pub fn render_cgroups<'a, I>(out: &mut String, cgroups: I)
where
    I: Iterator<Item = (&'a Identity, &'a PsiSeries, &'a CpiSeries)> + Clone,
{
    let mut header = true;
    for (w, _, c) in cgroups.clone().filter(|(_, _, c)| !c.is_empty()) {
        if std::mem::take(&mut header) {
            push_header(out, CONTAINER_CPI, HELP_CONTAINER_CPI);
        }
        push_cpi(out, w, c);
    }
    for (family, help, containers) in [
        (CONTAINER_PSI, HELP_CONTAINER_PSI, true),
        (POD_PSI, HELP_POD_PSI, false),
    ] {
        let mut header = true;
        for (w, p, _) in cgroups
            .clone()
            .filter(|(w, p, _)| w.container.is_some() == containers && !p.is_empty())
        {
            if std::mem::take(&mut header) {
                push_header(out, family, help);
            }
            push_cgroup_psi(out, w, p);
        }
    }
}

/// `koord_applier_pod_qos_info`: 1 per followed pod, with the pod labels of `koordlet_pod_psi`
/// and the pod's `qos_class`, so PSI can be selected by class (`* on (pod_uid)
/// group_left (qos_class)`). The reference has no such family; the name is this product's.
pub fn render_pod_qos_info<'a, I>(out: &mut String, pods: I)
where
    I: Iterator<Item = (&'a Identity, &'a str)>,
{
    let mut header = true;
    for (who, class) in pods {
        if std::mem::take(&mut header) {
            push_header(out, POD_QOS_INFO, HELP_POD_QOS_INFO);
        }
        out.push_str(POD_QOS_INFO);
        let mut first = true;
        push_label(out, &mut first, "node", &who.node);
        push_label(out, &mut first, "pod_name", &who.pod_name);
        push_label(out, &mut first, "pod_namespace", &who.pod_namespace);
        push_label(out, &mut first, "pod_uid", &who.pod_uid);
        push_label(out, &mut first, "qos_class", class);
        out.push_str("} 1\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::shared::psi::PsiLine;

    #[test]
    fn text_format_and_escaping() {
        let who = Identity {
            node: "n".into(),
            pod_uid: "u".into(),
            pod_name: "p\"q".into(),
            pod_namespace: "ns\\x\ny".into(),
            container: Some(("containerd://c".into(), "app".into())),
        };
        let mut psi = PsiSeries::default();
        let line = PsiLine {
            avg10: 1.5,
            avg60: 0.0,
            avg300: 100.0,
            total_us: 1,
        };
        psi.set(
            Resource::Io,
            &Psi {
                some: line,
                full: None,
            },
        );
        let mut cpi = CpiSeries::default();
        cpi.set(2_228_107_503, 4_145_609_200);
        let mut out = String::new();
        render_cgroups(&mut out, std::iter::once((&who, &psi, &cpi)));
        let labels = "node=\"n\",pod_name=\"p\\\"q\",pod_namespace=\"ns\\\\x\\ny\",pod_uid=\"u\"";
        let want = format!(
            "# HELP koordlet_container_cpi Container cpi collected by koordlet\n\
             # TYPE koordlet_container_cpi gauge\n\
             koordlet_container_cpi{{container_id=\"containerd://c\",container_name=\"app\",cpi_field=\"cycles\",{labels}}} 2228107503\n\
             koordlet_container_cpi{{container_id=\"containerd://c\",container_name=\"app\",cpi_field=\"instructions\",{labels}}} 4145609200\n\
             # HELP koordlet_container_psi Container psi collected by koordlet\n\
             # TYPE koordlet_container_psi gauge\n\
             koordlet_container_psi{{container_id=\"containerd://c\",container_name=\"app\",cpu_full_supported=\"false\",{labels},psi_degree=\"some\",psi_precision=\"avg10\",psi_resource_type=\"io\"}} 1.5\n\
             koordlet_container_psi{{container_id=\"containerd://c\",container_name=\"app\",cpu_full_supported=\"false\",{labels},psi_degree=\"some\",psi_precision=\"avg60\",psi_resource_type=\"io\"}} 0\n\
             koordlet_container_psi{{container_id=\"containerd://c\",container_name=\"app\",cpu_full_supported=\"false\",{labels},psi_degree=\"some\",psi_precision=\"avg300\",psi_resource_type=\"io\"}} 100\n"
        );
        assert_eq!(out, want);
        // Nothing read: no family at all.
        let mut out = String::new();
        render_cgroups(
            &mut out,
            std::iter::once((&who, &PsiSeries::default(), &CpiSeries::default())),
        );
        assert_eq!(out, "");
    }

    #[test]
    fn pod_qos_info_per_pod() {
        let who = Identity {
            node: "n".into(),
            pod_uid: "u".into(),
            pod_name: "redis".into(),
            pod_namespace: "demo".into(),
            container: None,
        };
        let mut out = String::new();
        render_pod_qos_info(&mut out, std::iter::once((&who, "LS")));
        assert_eq!(
            out,
            "# HELP koord_applier_pod_qos_info Pods the collectors follow (1 each), with their koordinator.sh/qosClass (none without one).\n\
             # TYPE koord_applier_pod_qos_info gauge\n\
             koord_applier_pod_qos_info{node=\"n\",pod_name=\"redis\",pod_namespace=\"demo\",pod_uid=\"u\",qos_class=\"LS\"} 1\n"
        );
        let mut out = String::new();
        render_pod_qos_info(&mut out, std::iter::empty());
        assert_eq!(out, "", "no pod: no family");
    }
}
