//! Pod manifests read from a file for `once`: one Pod, or (`--collect`) a `List`/`PodList` of
//! pods as `kubectl get pods -o yaml` prints it; YAML or JSON (JSON is YAML).

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a Pod manifest: {source}")]
    Parse {
        path: String,
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    #[error("{path} is not a Pod manifest: {source}")]
    Shape {
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

fn read(path: &Path) -> Result<String, ManifestError> {
    std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn parse_error(path: &Path) -> impl Fn(serde_saphyr::Error) -> ManifestError + '_ {
    move |source| ManifestError::Parse {
        path: path.display().to_string(),
        source: Box::new(source),
    }
}

fn json_error(path: &Path) -> impl Fn(serde_json::Error) -> ManifestError + '_ {
    move |source| ManifestError::Shape {
        path: path.display().to_string(),
        source,
    }
}

/// Reads one Pod.
pub fn read_pod(path: &Path) -> Result<Pod, ManifestError> {
    serde_saphyr::from_str(&read(path)?).map_err(parse_error(path))
}

/// Reads a Pod, or every pod of a `List`/`PodList`.
pub fn read_pods(path: &Path) -> Result<Vec<Pod>, ManifestError> {
    // Through JSON values: the YAML parser has no value type of its own.
    let value: serde_json::Value =
        serde_saphyr::from_str(&read(path)?).map_err(parse_error(path))?;
    let is_list = value
        .get("kind")
        .and_then(serde_json::Value::as_str)
        .is_some_and(|k| k.ends_with("List"));
    if is_list {
        #[derive(serde::Deserialize)]
        struct List {
            items: Vec<Pod>,
        }
        let list: List = serde_json::from_value(value).map_err(json_error(path))?;
        Ok(list.items)
    } else {
        Ok(vec![
            serde_json::from_value(value).map_err(json_error(path))?,
        ])
    }
}
