//! A lean, borrowed view of the parts of a Pod the resolution engine reads.
//!
//! Parsing a whole `k8s_openapi::api::core::v1::Pod` costs ~35 us for a 6 KB review; this view
//! skips everything the engine does not need (serde still scans it, but allocates nothing).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer};

/// String maps (labels, annotations) borrowing from the input where no escapes were present.
pub type StrMap<'a> = BTreeMap<Text<'a>, Text<'a>>;
/// A resource list: resource name -> quantity text.
pub type ResourceMap<'a> = BTreeMap<Text<'a>, QuantityText<'a>>;

#[derive(Debug, Default, Deserialize)]
pub struct PodView<'a> {
    #[serde(borrow, default)]
    pub metadata: MetaView<'a>,
    #[serde(borrow, default)]
    pub spec: SpecView<'a>,
    #[serde(borrow, default)]
    pub status: Option<StatusView<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct MetaView<'a> {
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
pub struct SpecView<'a> {
    #[serde(borrow, default, deserialize_with = "null_as_empty")]
    pub containers: Vec<ContainerView<'a>>,
    #[serde(
        borrow,
        default,
        rename = "initContainers",
        deserialize_with = "null_as_empty"
    )]
    pub init_containers: Vec<ContainerView<'a>>,
    #[serde(borrow, default, deserialize_with = "null_as_none")]
    pub overhead: Option<ResourceMap<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ContainerView<'a> {
    #[serde(borrow, default)]
    pub name: Text<'a>,
    #[serde(borrow, default, deserialize_with = "null_as_none")]
    pub resources: Option<ResourcesView<'a>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
pub struct ResourcesView<'a> {
    #[serde(borrow, default, deserialize_with = "null_as_none")]
    pub requests: Option<ResourceMap<'a>>,
    #[serde(borrow, default, deserialize_with = "null_as_none")]
    pub limits: Option<ResourceMap<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct StatusView<'a> {
    #[serde(borrow, default, rename = "qosClass")]
    pub qos_class: Option<Text<'a>>,
}

impl<'a> PodView<'a> {
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

    /// The name for messages: `name`, else `generateName` + `*`, else `<unnamed>`.
    pub fn display_name(&self) -> String {
        match (&self.metadata.name, &self.metadata.generate_name) {
            (Some(n), _) if !n.is_empty() => n.to_string(),
            (_, Some(g)) if !g.is_empty() => format!("{g}*"),
            _ => "<unnamed>".to_owned(),
        }
    }
}

impl ContainerView<'_> {
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
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for QuantityText<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = QuantityText<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quantity string or number")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(QuantityText(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(QuantityText(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(QuantityText(Cow::Owned(v)))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(QuantityText(Cow::Owned(v.to_string())))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(QuantityText(Cow::Owned(v.to_string())))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(QuantityText(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_any(V)
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
