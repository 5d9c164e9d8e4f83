//! Reading manifests as a user would `kubectl apply` them: a file (or stdin), YAML or JSON,
//! multi-document, `List` objects expanded. Knows nothing about pods or policy.

use std::path::Path;

use serde_json::Value;

/// A manifest file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct ReadError {
    pub path: String,
    pub source: std::io::Error,
}

/// The stream is neither YAML nor JSON (the error gives the line and column).
#[derive(Debug, thiserror::Error)]
#[error("not valid YAML or JSON: {source}")]
pub struct ManifestError {
    /// Boxed: the parser's error is large and this travels up through every `Result`.
    pub source: Box<serde_saphyr::Error>,
}

/// The text of a manifest file; `-` reads stdin.
pub fn read_file(path: &Path) -> Result<String, ReadError> {
    let err = |source| ReadError {
        path: path.display().to_string(),
        source,
    };
    if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).map_err(err)
    } else {
        std::fs::read_to_string(path).map_err(err)
    }
}

/// Every object in a YAML/JSON stream, `List` items expanded, empty documents skipped.
pub fn read_objects(text: &str) -> Result<Vec<Value>, ManifestError> {
    let mut out = Vec::new();
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|source| ManifestError {
        source: Box::new(source),
    })?;
    for value in docs {
        match value {
            Value::Null => {}
            Value::Object(ref o) if o.get("kind").and_then(Value::as_str) == Some("List") => {
                if let Some(Value::Array(items)) = o.get("items") {
                    out.extend(items.iter().cloned());
                }
            }
            v => out.push(v),
        }
    }
    Ok(out)
}

pub fn kind(obj: &Value) -> &str {
    obj.get("kind").and_then(Value::as_str).unwrap_or("")
}

pub fn name(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}
