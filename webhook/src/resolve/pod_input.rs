//! [`PodInput`]: the pod as the resolution engine reads it, a lean view borrowing from the
//! request body (or the manifest) with only the fields resolution looks at.
//!
//! Parsing a whole `k8s_openapi::api::core::v1::Pod` costs ~35 us for a 6 KB review; this view
//! skips everything the engine does not need (serde still scans it, but allocates nothing).

use std::borrow::Cow;
use std::fmt;

use koord_api::quantity::QuantityError;
use serde::de::{Unexpected, Visitor};
use serde::{Deserialize, Deserializer};

use crate::policy::FieldError;

/// A JSON object read as its pairs, borrowing from the input where no escapes were present,
/// kept in input order and looked up by a scan: a pod has tens of labels at most and a handful
/// of resources per list, and a `BTreeMap`'s inserts, node allocations and drops cost more
/// than the few lookups resolution makes. A key given twice means its last value, as in a
/// map.
#[derive(Debug, Clone)]
pub struct PairMap<'a, V>(Vec<(Text<'a>, V)>);

/// Labels and annotations.
pub type StrMap<'a> = PairMap<'a, Text<'a>>;

/// A resource list: resource name -> quantity text.
pub type ResourceMap<'a> = PairMap<'a, QuantityText<'a>>;

impl<V> Default for PairMap<'_, V> {
    fn default() -> Self {
        PairMap(Vec::new())
    }
}

impl<'a, V> PairMap<'a, V> {
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Each key once, with its last value, in input order of those last values.
    pub fn iter(&self) -> impl Iterator<Item = (&Text<'a>, &V)> {
        self.0
            .iter()
            .enumerate()
            .filter(|(i, (k, _))| !self.0[i + 1..].iter().any(|(later, _)| later == k))
            .map(|(_, (k, v))| (k, v))
    }
}

impl<'de: 'a, 'a, V: Deserialize<'de>> Deserialize<'de> for PairMap<'a, V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Pairs<'a, V>(std::marker::PhantomData<(Text<'a>, V)>);
        impl<'de: 'a, 'a, V: Deserialize<'de>> Visitor<'de> for Pairs<'a, V> {
            type Value = PairMap<'a, V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> Result<PairMap<'a, V>, M::Error> {
                // serde_json gives no size hint: room for a typical pod's labels or
                // annotations without growing.
                let mut pairs = Vec::with_capacity(m.size_hint().unwrap_or(16).min(64));
                while let Some(pair) = m.next_entry()? {
                    pairs.push(pair);
                }
                Ok(PairMap(pairs))
            }
        }
        d.deserialize_map(Pairs(std::marker::PhantomData))
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct PodInput<'a> {
    #[serde(borrow, default)]
    pub metadata: MetaInput<'a>,
    #[serde(borrow, default)]
    pub spec: SpecInput<'a>,
    #[serde(borrow, default)]
    pub status: Option<StatusInput<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct MetaInput<'a> {
    #[serde(borrow, default)]
    pub name: Option<Text<'a>>,
    #[serde(borrow, default, rename = "generateName")]
    pub generate_name: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub namespace: Option<Text<'a>>,
    #[serde(borrow, default, deserialize_with = "null_as_none")]
    pub labels: Option<StrMap<'a>>,
    #[serde(borrow, default, deserialize_with = "null_as_none")]
    pub annotations: Option<StrMap<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct SpecInput<'a> {
    #[serde(borrow, default, deserialize_with = "null_as_empty")]
    pub containers: Vec<ContainerInput<'a>>,
    #[serde(
        borrow,
        default,
        rename = "initContainers",
        deserialize_with = "null_as_empty"
    )]
    pub init_containers: Vec<ContainerInput<'a>>,
    #[serde(borrow, default, deserialize_with = "null_as_none")]
    pub overhead: Option<ResourceMap<'a>>,
    /// Pod-level resources (`spec.resources`, KEP-2837): a budget for all containers together.
    #[serde(borrow, default, deserialize_with = "null_as_none")]
    pub resources: Option<ResourcesInput<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ContainerInput<'a> {
    #[serde(borrow, default)]
    pub name: Text<'a>,
    #[serde(borrow, default, deserialize_with = "null_as_none")]
    pub resources: Option<ResourcesInput<'a>>,
    /// `Always` on an init container makes it a native sidecar (KEP-753).
    #[serde(
        borrow,
        default,
        rename = "restartPolicy",
        deserialize_with = "null_as_none"
    )]
    pub restart_policy: Option<Text<'a>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
pub struct ResourcesInput<'a> {
    #[serde(borrow, default, deserialize_with = "null_as_none")]
    pub requests: Option<ResourceMap<'a>>,
    #[serde(borrow, default, deserialize_with = "null_as_none")]
    pub limits: Option<ResourceMap<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct StatusInput<'a> {
    #[serde(borrow, default, rename = "qosClass")]
    pub qos_class: Option<Text<'a>>,
    /// Only `name` and `resources` are read: what the kubelet has allocated to each container
    /// (in-place resize, docs/contract.md §5).
    #[serde(
        borrow,
        default,
        rename = "containerStatuses",
        deserialize_with = "null_as_empty"
    )]
    pub container_statuses: Vec<ContainerStatusInput<'a>>,
}

/// One `status.containerStatuses[]` entry as resolution reads it.
#[derive(Debug, Default, Deserialize)]
pub struct ContainerStatusInput<'a> {
    #[serde(borrow, default)]
    pub name: Text<'a>,
    /// The kubelet's view of the container's resources: the allocated requests and limits,
    /// with cpu and memory as the runtime reports them applied. Set since the
    /// `InPlacePodVerticalScaling` gate (beta, on by default in 1.33; GA in 1.35).
    #[serde(borrow, default, deserialize_with = "null_as_none")]
    pub resources: Option<ResourcesInput<'a>>,
}

impl<'a> PodInput<'a> {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(key).map(|v| v.as_ref())
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(|v| v.as_ref())
    }

    /// The resources the kubelet reports for the regular container `name`
    /// (`status.containerStatuses[].resources`), when it reports any.
    pub fn allocated_resources(&self, name: &str) -> Option<&ResourcesInput<'a>> {
        self.status
            .as_ref()?
            .container_statuses
            .iter()
            .rev()
            .find(|s| s.name.as_str() == name)?
            .resources
            .as_ref()
    }

    /// The native sidecars (`spec.initContainers` with `restartPolicy: Always`), with their
    /// index in `spec.initContainers`.
    pub fn sidecars(&self) -> impl Iterator<Item = (usize, &ContainerInput<'a>)> {
        self.spec
            .init_containers
            .iter()
            .enumerate()
            .filter(|(_, c)| c.is_sidecar())
    }

    /// A pod-level request (`spec.resources.requests.<resource>`).
    pub fn pod_level_request(&self, resource: &str) -> Option<&str> {
        pod_level(self.spec.resources.as_ref()?.requests.as_ref(), resource)
    }

    /// A pod-level limit (`spec.resources.limits.<resource>`).
    pub fn pod_level_limit(&self, resource: &str) -> Option<&str> {
        pod_level(self.spec.resources.as_ref()?.limits.as_ref(), resource)
    }

    /// The name for messages: `name`, else `generateName` + `*`, else `<unnamed>`.
    pub fn display_name(&self) -> String {
        self.display_name_parts().concat()
    }

    /// [`PodInput::display_name`] in two parts, for callers that write it somewhere.
    pub fn display_name_parts(&self) -> [&str; 2] {
        match (&self.metadata.name, &self.metadata.generate_name) {
            (Some(n), _) if !n.is_empty() => [n.as_str(), ""],
            (_, Some(g)) if !g.is_empty() => [g.as_str(), "*"],
            _ => ["<unnamed>", ""],
        }
    }
}

impl ContainerInput<'_> {
    /// Whether this init container is a native sidecar: it runs beside the containers for the
    /// pod's whole life, so it is protected like them. Meaningful in `spec.initContainers` only
    /// (the apiserver refuses the field on regular containers).
    pub fn is_sidecar(&self) -> bool {
        self.restart_policy.as_deref() == Some("Always")
    }

    pub fn request(&self, resource: &str) -> Option<&str> {
        self.resources
            .as_ref()?
            .requests
            .as_ref()?
            .get(resource)
            .map(|q| q.as_str())
    }

    pub fn limit(&self, resource: &str) -> Option<&str> {
        self.resources
            .as_ref()?
            .limits
            .as_ref()?
            .get(resource)
            .map(|q| q.as_str())
    }
}

fn pod_level<'m>(list: Option<&'m ResourceMap<'_>>, resource: &str) -> Option<&'m str> {
    list?.get(resource).map(|q| q.as_str())
}

/// Where a container's resource quantity sits, for error messages:
/// `spec.{list}[{index}].resources.{kind}.{resource}`.
pub fn resource_field(list: &str, index: usize, kind: &str, resource: &str) -> String {
    format!("spec.{list}[{index}].resources.{kind}.{resource}")
}

/// An optional quantity read with `parse` (`parse_value` or `parse_milli`); an error names the
/// field `field()` gives (only built on error).
pub fn parse_quantity(
    text: Option<&str>,
    parse: fn(&str) -> Result<i64, QuantityError>,
    field: impl FnOnce() -> String,
) -> Result<Option<i64>, FieldError> {
    text.map(|t| parse(t).map_err(|e| FieldError::new(field(), e.to_string())))
        .transpose()
}

/// A quantity as the user wrote it. YAML turns `cpu: 2` into a number, and the apiserver
/// accepts numbers, so numbers are kept as their decimal text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityText<'a>(pub Cow<'a, str>);

impl QuantityText<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A string borrowed from the input when it had no escapes (serde's own `Cow` impl always
/// copies inside maps, which is the allocation this view exists to avoid).
#[derive(Debug, Default, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Text<'a>(pub Cow<'a, str>);

impl Text<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Text<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Text<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(CowStrVisitor { numbers: false })
            .map(Text)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for QuantityText<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CowStrVisitor { numbers: true })
            .map(QuantityText)
    }
}

/// A string, borrowed from the input when it had no escapes; with `numbers`, a number too, as
/// its decimal text (a quantity). Without, a number is the usual "invalid type" error.
struct CowStrVisitor {
    numbers: bool,
}

impl CowStrVisitor {
    fn number<'de, E: serde::de::Error>(
        self,
        text: impl fmt::Display,
        unexpected: Unexpected<'_>,
    ) -> Result<Cow<'de, str>, E> {
        if self.numbers {
            Ok(Cow::Owned(text.to_string()))
        } else {
            Err(E::invalid_type(unexpected, &self))
        }
    }
}

impl<'de> Visitor<'de> for CowStrVisitor {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.numbers {
            "a quantity string or number"
        } else {
            "a string"
        })
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
        self.number(v, Unexpected::Signed(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        self.number(v, Unexpected::Unsigned(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        self.number(v, Unexpected::Float(v))
    }
}

/// `null` and absent both mean "not set" (the apiserver sends `"labels": null` sometimes).
fn null_as_none<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d)
}

fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}
