//! `koord-applier once -f POD_FILE`: apply one manifest without an API server.

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

use crate::apply::Applier;
use crate::podview::PodView;
use crate::report::PodReport;

#[derive(Debug, thiserror::Error)]
pub enum OnceError {
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
        source: serde_yaml::Error,
    },
    #[error("{path}: {source}")]
    Pod {
        path: String,
        #[source]
        source: crate::podview::PodViewError,
    },
}

/// Reads a Pod from YAML or JSON (JSON is YAML).
pub fn read_pod(path: &Path) -> Result<Pod, OnceError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| OnceError::Read {
        path: p.clone(),
        source,
    })?;
    serde_yaml::from_str(&text).map_err(|source| OnceError::Parse { path: p, source })
}

/// Applies the pod in `path` and returns the report.
pub fn once(applier: &Applier, path: &Path) -> Result<PodReport, OnceError> {
    let pod = read_pod(path)?;
    let view = PodView::from_pod(&pod).map_err(|source| OnceError::Pod {
        path: path.display().to_string(),
        source,
    })?;
    Ok(applier.apply(&view))
}
