//! [`ResolvedQos::to_annotation`]'s JSON text, written by hand: the same bytes as the derived
//! `Serialize` through `serde_json` (key order = field order, `skip_serializing_if` sections
//! left out, strings escaped alike), at a quarter of the instructions, since the webhook writes
//! one per admission; and the same text already escaped as the body of a JSON string, as the
//! admission patch carries it (escaping a hundred quotes afterwards costs twice as much).
//! Every struct is destructured without `..`, so a field added to the contract does not
//! compile here until it is written; the tests compare with serde_json.

use std::collections::BTreeMap;

use crate::json_write::{escaped, integer, string};
use crate::resolved::{
    BatchKnobs, ContainerMemoryKnobs, DecisionSource, LocalityPolicy, MaxOr, MemoryQosParams,
    MemoryQosPolicy, PodMemoryKnobs, ProactiveReclaimFloor, ProactiveReclaimParams, QosClassSource,
    ResolvedBatch, ResolvedCpuQos, ResolvedMemoryLocality, ResolvedMemoryQos,
    ResolvedProactiveReclaim, ResolvedQos, ResolvedResctrlQos,
};

/// A member's key with the separator before it, spelled both ways: `,"key":` and, inside a
/// string, `,\"key\":`. `first!` makes the key of an object's first member (no comma),
/// `next!` every other: the writers know their members' order, so each key is one copy of
/// a constant instead of a comma check, two quotes, the name and a colon.
#[derive(Clone, Copy)]
struct Key {
    plain: &'static str,
    in_string: &'static str,
}

macro_rules! first {
    ($name:literal) => {
        Key {
            plain: concat!("\"", $name, "\":"),
            in_string: concat!("\\\"", $name, "\\\":"),
        }
    };
}

macro_rules! next {
    ($name:literal) => {
        Key {
            plain: concat!(",\"", $name, "\":"),
            in_string: concat!(",\\\"", $name, "\\\":"),
        }
    };
}

/// Writes one object: `{`, the members, `}`. `IN_STRING`: the text is written as the body of
/// a JSON string holding it (quotes as `\"`); a constant, so the choice costs nothing.
struct Object<'o, const IN_STRING: bool> {
    out: &'o mut Vec<u8>,
}

impl<'o, const IN_STRING: bool> Object<'o, IN_STRING> {
    const QUOTE: &'static [u8] = if IN_STRING { b"\\\"" } else { b"\"" };

    fn open(out: &'o mut Vec<u8>) -> Self {
        out.push(b'{');
        Object { out }
    }

    /// The key (with its separator); the caller writes the value.
    #[inline(always)]
    fn key(&mut self, key: Key) -> &mut Vec<u8> {
        let text = if IN_STRING { key.in_string } else { key.plain };
        self.out.extend_from_slice(text.as_bytes());
        self.out
    }

    /// A key from the data (a container name): escaped, and escaped again inside a string;
    /// `first` leaves the comma out.
    fn data_key(&mut self, key: &str, first: bool) -> &mut Vec<u8> {
        if !first {
            self.out.push(b',');
        }
        if !key.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
            // A container name as the apiserver allows it (a DNS label): nothing to escape
            // at either level.
            self.out.extend_from_slice(Self::QUOTE);
            self.out.extend_from_slice(key.as_bytes());
            self.out.extend_from_slice(Self::QUOTE);
        } else if IN_STRING {
            let mut json = Vec::with_capacity(key.len() + 2);
            string(&mut json, key);
            // `json` is UTF-8: a `str` with ASCII escapes added.
            escaped(self.out, std::str::from_utf8(&json).unwrap_or_default());
        } else {
            string(self.out, key);
        }
        self.out.push(b':');
        self.out
    }

    #[inline(always)]
    fn int(&mut self, key: Key, value: i64) {
        integer(self.key(key), value);
    }

    /// A constant string value (an enum's name: no escaping needed).
    #[inline(always)]
    fn text(&mut self, key: Key, value: &str) {
        let out = self.key(key);
        out.extend_from_slice(Self::QUOTE);
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(Self::QUOTE);
    }

    fn boolean(&mut self, key: Key, value: bool) {
        self.key(key)
            .extend_from_slice(if value { b"true" } else { b"false" });
    }

    fn max_or(&mut self, key: Key, value: MaxOr) {
        match value {
            MaxOr::Bytes(b) => self.int(key, b),
            MaxOr::Max => self.text(key, "max"),
        }
    }

    /// An object value under `key`, in the same style.
    fn object(&mut self, key: Key) -> Object<'_, IN_STRING> {
        Object::open(self.key(key))
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

fn class_source(s: QosClassSource) -> &'static str {
    match s {
        QosClassSource::Label => "label",
        QosClassSource::LegacyLabel => "legacy-label",
        QosClassSource::KubernetesQos => "kubernetes-qos",
    }
}

fn policy(p: MemoryQosPolicy) -> &'static str {
    match p {
        MemoryQosPolicy::Auto => "auto",
        MemoryQosPolicy::Default => "default",
        MemoryQosPolicy::None => "none",
    }
}

fn source(s: DecisionSource) -> &'static str {
    match s {
        DecisionSource::PodAnnotation => "pod-annotation",
        DecisionSource::LegacyAnnotation => "legacy-annotation",
        DecisionSource::NamespaceConfig => "namespace-config",
        DecisionSource::ClusterConfig => "cluster-config",
        DecisionSource::Default => "default",
    }
}

fn locality_policy(p: LocalityPolicy) -> &'static str {
    match p {
        LocalityPolicy::BestEffort => "bestEffort",
        LocalityPolicy::None => "none",
    }
}

impl ResolvedQos {
    /// Appends the annotation's JSON text (see [`ResolvedQos::to_annotation`]) to `out`.
    pub fn write_annotation(&self, out: &mut Vec<u8>) {
        self.write(Object::<false>::open(out));
    }

    /// Appends the annotation's JSON text escaped as the body of a JSON string (no quotes
    /// around it): the same bytes as [`crate::json_write::escaped`] of
    /// [`ResolvedQos::to_annotation`], written directly.
    pub fn write_annotation_in_string(&self, out: &mut Vec<u8>) {
        self.write(Object::<true>::open(out));
    }

    fn write<const S: bool>(&self, mut o: Object<'_, S>) {
        let ResolvedQos {
            version,
            qos_class,
            qos_class_source,
            memory_qos,
            memory_locality,
            batch,
            cpu_qos,
            resctrl_qos,
            proactive_reclaim,
        } = self;
        o.int(first!("version"), i64::from(*version));
        o.text(next!("qosClass"), qos_class.as_str());
        o.text(next!("qosClassSource"), class_source(*qos_class_source));
        write_memory_qos(o.object(next!("memoryQOS")), memory_qos);
        if let Some(l) = memory_locality {
            write_locality(o.object(next!("memoryLocality")), l);
        }
        if let Some(b) = batch {
            write_batch(o.object(next!("batch")), b);
        }
        if let Some(c) = cpu_qos {
            write_cpu_qos(o.object(next!("cpuQOS")), c);
        }
        if let Some(r) = resctrl_qos {
            write_resctrl_qos(o.object(next!("resctrlQOS")), r);
        }
        if let Some(p) = proactive_reclaim {
            write_proactive_reclaim(o.object(next!("proactiveReclaim")), p);
        }
        o.close();
    }
}

fn write_memory_qos<const S: bool>(mut o: Object<'_, S>, m: &ResolvedMemoryQos) {
    let ResolvedMemoryQos {
        enabled,
        policy: p,
        source: s,
        params,
        pod,
        containers,
    } = m;
    o.boolean(first!("enabled"), *enabled);
    o.text(next!("policy"), policy(*p));
    o.text(next!("source"), source(*s));
    write_params(o.object(next!("params")), params);
    write_pod_knobs(o.object(next!("pod")), pod);
    write_map(
        o.object(next!("containers")),
        containers,
        write_container_knobs,
    );
    o.close();
}

fn write_params<const S: bool>(mut o: Object<'_, S>, p: &MemoryQosParams) {
    let MemoryQosParams {
        min_limit_percent,
        low_limit_percent,
        throttling_percent,
        wmark_ratio,
        wmark_min_adj,
        wmark_scale_permill,
        priority,
        priority_enable,
        oom_kill_group,
    } = p;
    o.int(first!("minLimitPercent"), *min_limit_percent);
    o.int(next!("lowLimitPercent"), *low_limit_percent);
    o.int(next!("throttlingPercent"), *throttling_percent);
    o.int(next!("wmarkRatio"), *wmark_ratio);
    o.int(next!("wmarkMinAdj"), *wmark_min_adj);
    o.int(next!("wmarkScalePermill"), *wmark_scale_permill);
    o.int(next!("priority"), *priority);
    o.int(next!("priorityEnable"), *priority_enable);
    o.int(next!("oomKillGroup"), *oom_kill_group);
    o.close();
}

fn write_pod_knobs<const S: bool>(mut o: Object<'_, S>, k: &PodMemoryKnobs) {
    let PodMemoryKnobs { min, low, high } = k;
    o.int(first!("memory.min"), *min);
    o.int(next!("memory.low"), *low);
    if let Some(high) = high {
        o.int(next!("memory.high"), *high);
    }
    o.close();
}

fn write_container_knobs<const S: bool>(mut o: Object<'_, S>, k: &ContainerMemoryKnobs) {
    let ContainerMemoryKnobs {
        min,
        low,
        high,
        wmark_ratio,
        wmark_high,
        wmark_scale_factor,
        wmark_min_adj,
        priority,
        use_priority_oom,
        oom_group,
    } = k;
    o.int(first!("memory.min"), *min);
    o.int(next!("memory.low"), *low);
    o.max_or(next!("memory.high"), *high);
    o.int(next!("memory.wmark_ratio"), *wmark_ratio);
    o.max_or(next!("memory.wmark_high"), *wmark_high);
    o.int(next!("memory.wmark_scale_factor"), *wmark_scale_factor);
    o.int(next!("memory.wmark_min_adj"), *wmark_min_adj);
    o.int(next!("memory.priority"), *priority);
    o.int(next!("memory.use_priority_oom"), *use_priority_oom);
    o.int(next!("memory.oom.group"), *oom_group);
    o.close();
}

/// A map keyed by container name, in key order (a `BTreeMap`, as serde_json writes it).
fn write_map<V, const S: bool>(
    mut o: Object<'_, S>,
    map: &BTreeMap<String, V>,
    value: fn(Object<'_, S>, &V),
) {
    for (i, (name, v)) in map.iter().enumerate() {
        value(Object::open(o.data_key(name, i == 0)), v);
    }
    o.close();
}

fn write_locality<const S: bool>(mut o: Object<'_, S>, l: &ResolvedMemoryLocality) {
    let ResolvedMemoryLocality {
        policy: p,
        migrate_interval_minutes,
        source: s,
    } = l;
    o.text(first!("policy"), locality_policy(*p));
    if let Some(m) = migrate_interval_minutes {
        o.int(next!("migrateIntervalMinutes"), i64::from(*m));
    }
    o.text(next!("source"), source(*s));
    o.close();
}

fn write_batch_knobs<const S: bool>(mut o: Object<'_, S>, k: &BatchKnobs) {
    let BatchKnobs {
        cpu_shares,
        cpu_cfs_quota_us,
        memory_limit_in_bytes,
    } = k;
    o.int(first!("cpu.shares"), *cpu_shares);
    o.int(next!("cpu.cfs_quota_us"), *cpu_cfs_quota_us);
    o.int(next!("memory.limit_in_bytes"), *memory_limit_in_bytes);
    o.close();
}

fn write_batch<const S: bool>(mut o: Object<'_, S>, b: &ResolvedBatch) {
    let ResolvedBatch { pod, containers } = b;
    write_batch_knobs(o.object(first!("pod")), pod);
    write_map(o.object(next!("containers")), containers, write_batch_knobs);
    o.close();
}

fn write_cpu_qos<const S: bool>(mut o: Object<'_, S>, c: &ResolvedCpuQos) {
    let ResolvedCpuQos {
        enabled,
        group_identity,
        source: s,
    } = c;
    o.boolean(first!("enabled"), *enabled);
    o.int(next!("groupIdentity"), *group_identity);
    o.text(next!("source"), source(*s));
    o.close();
}

fn write_resctrl_qos<const S: bool>(mut o: Object<'_, S>, r: &ResolvedResctrlQos) {
    let ResolvedResctrlQos {
        enabled,
        cat_range_start_percent,
        cat_range_end_percent,
        mba_percent,
        source: s,
    } = r;
    o.boolean(first!("enabled"), *enabled);
    o.int(next!("catRangeStartPercent"), *cat_range_start_percent);
    o.int(next!("catRangeEndPercent"), *cat_range_end_percent);
    o.int(next!("mbaPercent"), *mba_percent);
    o.text(next!("source"), source(*s));
    o.close();
}

fn write_proactive_reclaim<const S: bool>(mut o: Object<'_, S>, p: &ResolvedProactiveReclaim) {
    let ResolvedProactiveReclaim {
        enabled,
        params,
        source: s,
        containers,
    } = p;
    o.boolean(first!("enabled"), *enabled);
    let ProactiveReclaimParams {
        interval_seconds,
        stall_target_micros,
        step_permill,
        floor_percent,
    } = params;
    let mut q = o.object(next!("params"));
    q.int(first!("intervalSeconds"), *interval_seconds);
    q.int(next!("stallTargetMicros"), *stall_target_micros);
    q.int(next!("stepPermill"), *step_permill);
    q.int(next!("floorPercent"), *floor_percent);
    q.close();
    o.text(next!("source"), source(*s));
    write_map(o.object(next!("containers")), containers, write_floor);
    o.close();
}

fn write_floor<const S: bool>(mut o: Object<'_, S>, f: &ProactiveReclaimFloor) {
    let ProactiveReclaimFloor { floor_bytes } = f;
    o.int(first!("floorBytes"), *floor_bytes);
    o.close();
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::resolved::*;

    fn by_hand(r: &ResolvedQos) -> String {
        let mut out = Vec::new();
        r.write_annotation(&mut out);
        String::from_utf8(out).expect("utf-8")
    }

    fn max_or() -> impl Strategy<Value = MaxOr> {
        prop_oneof![any::<i64>().prop_map(MaxOr::Bytes), Just(MaxOr::Max)]
    }

    fn source() -> impl Strategy<Value = DecisionSource> {
        prop_oneof![
            Just(DecisionSource::PodAnnotation),
            Just(DecisionSource::LegacyAnnotation),
            Just(DecisionSource::NamespaceConfig),
            Just(DecisionSource::ClusterConfig),
            Just(DecisionSource::Default),
        ]
    }

    fn knobs() -> impl Strategy<Value = ContainerMemoryKnobs> {
        (
            (any::<i64>(), any::<i64>(), max_or(), any::<i64>(), max_or()),
            (
                any::<i64>(),
                any::<i64>(),
                any::<i64>(),
                any::<i64>(),
                any::<i64>(),
            ),
        )
            .prop_map(
                |((min, low, high, wmark_ratio, wmark_high), (f, a, p, u, g))| {
                    ContainerMemoryKnobs {
                        min,
                        low,
                        high,
                        wmark_ratio,
                        wmark_high,
                        wmark_scale_factor: f,
                        wmark_min_adj: a,
                        priority: p,
                        use_priority_oom: u,
                        oom_group: g,
                    }
                },
            )
    }

    fn batch_knobs() -> impl Strategy<Value = BatchKnobs> {
        (any::<i64>(), any::<i64>(), any::<i64>()).prop_map(|(s, q, m)| BatchKnobs {
            cpu_shares: s,
            cpu_cfs_quota_us: q,
            memory_limit_in_bytes: m,
        })
    }

    fn resolved() -> impl Strategy<Value = ResolvedQos> {
        let memory = (
            any::<bool>(),
            prop_oneof![
                Just(MemoryQosPolicy::Auto),
                Just(MemoryQosPolicy::Default),
                Just(MemoryQosPolicy::None)
            ],
            source(),
            prop::array::uniform9(any::<i64>()),
            (any::<i64>(), any::<i64>(), prop::option::of(any::<i64>())),
            prop::collection::btree_map(any::<String>(), knobs(), 0..4),
        )
            .prop_map(
                |(enabled, policy, source, p, (min, low, high), containers)| {
                    let mut params = MemoryQosParams::RESET;
                    for (i, v) in p.into_iter().enumerate() {
                        if let Some(slot) = params.slot_mut(i) {
                            *slot = v;
                        }
                    }
                    ResolvedMemoryQos {
                        enabled,
                        policy,
                        source,
                        params,
                        pod: PodMemoryKnobs { min, low, high },
                        containers,
                    }
                },
            );
        let locality = prop::option::of(
            (
                prop_oneof![Just(LocalityPolicy::BestEffort), Just(LocalityPolicy::None)],
                prop::option::of(any::<u32>()),
                source(),
            )
                .prop_map(|(policy, m, source)| ResolvedMemoryLocality {
                    policy,
                    migrate_interval_minutes: m,
                    source,
                }),
        );
        let batch = prop::option::of(
            (
                batch_knobs(),
                prop::collection::btree_map("[a-z\"\\\\/\u{1}é-]{0,12}", batch_knobs(), 0..3),
            )
                .prop_map(|(pod, containers)| ResolvedBatch { pod, containers }),
        );
        let cpu = prop::option::of((any::<bool>(), any::<i64>(), source()).prop_map(
            |(enabled, group_identity, source)| ResolvedCpuQos {
                enabled,
                group_identity,
                source,
            },
        ));
        let resctrl = prop::option::of(
            (
                any::<bool>(),
                any::<i64>(),
                any::<i64>(),
                any::<i64>(),
                source(),
            )
                .prop_map(|(enabled, start, end, mba, source)| ResolvedResctrlQos {
                    enabled,
                    cat_range_start_percent: start,
                    cat_range_end_percent: end,
                    mba_percent: mba,
                    source,
                }),
        );
        let proactive = prop::option::of(
            (
                any::<bool>(),
                any::<[i64; 4]>(),
                source(),
                prop::collection::btree_map("[a-z\"\\\\-]{1,6}", any::<i64>(), 0..3),
            )
                .prop_map(|(enabled, v, source, floors)| ResolvedProactiveReclaim {
                    enabled,
                    params: ProactiveReclaimParams {
                        interval_seconds: v[0],
                        stall_target_micros: v[1],
                        step_permill: v[2],
                        floor_percent: v[3],
                    },
                    source,
                    containers: floors
                        .into_iter()
                        .map(|(k, floor_bytes)| (k, ProactiveReclaimFloor { floor_bytes }))
                        .collect(),
                }),
        );
        let class = (
            prop::sample::select(QosClass::ALL.to_vec()),
            prop_oneof![
                Just(QosClassSource::Label),
                Just(QosClassSource::LegacyLabel),
                Just(QosClassSource::KubernetesQos)
            ],
            any::<u32>(),
        );
        (class, memory, locality, batch, cpu, resctrl, proactive).prop_map(
            |(
                (qos_class, qos_class_source, version),
                memory_qos,
                memory_locality,
                batch,
                cpu_qos,
                resctrl_qos,
                proactive_reclaim,
            )| {
                ResolvedQos {
                    version,
                    qos_class,
                    qos_class_source,
                    memory_qos,
                    memory_locality,
                    batch,
                    cpu_qos,
                    resctrl_qos,
                    proactive_reclaim,
                }
            },
        )
    }

    proptest! {
        #[test]
        fn same_bytes_as_serde_json(r in resolved()) {
            prop_assert_eq!(by_hand(&r), serde_json::to_string(&r).expect("json"));
        }

        #[test]
        fn in_string_is_the_text_escaped(r in resolved()) {
            let mut direct = Vec::new();
            r.write_annotation_in_string(&mut direct);
            let mut escaped = Vec::new();
            crate::json_write::escaped(&mut escaped, &r.to_annotation());
            prop_assert_eq!(String::from_utf8(direct).expect("utf-8"), String::from_utf8(escaped).expect("utf-8"));
        }
    }
}
