//! The re-resolver's three pod requests, raw: a page of a namespace's pods, one pod, and a
//! JSON patch. Raw text in and out, so a page is parsed with the same lean view as an admission
//! (no `k8s_openapi::Pod` per item) and the patch bytes are exactly what was planned.

use kube::api::{GetParams, ListParams};

/// The field manager of the re-resolver's writes (`metadata.managedFields`).
pub const FIELD_MANAGER: &str = "koord-webhook-reresolver";

/// Items per list page: bounds the memory of a pass to one page of JSON.
pub const PAGE_SIZE: u32 = 250;

fn pods_path(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods")
}

/// One page of the namespace's pods (`continue_token` from the previous page).
pub async fn list_page(
    client: &kube::Client,
    namespace: &str,
    continue_token: Option<&str>,
) -> Result<String, kube::Error> {
    let mut params = ListParams::default().limit(PAGE_SIZE);
    if let Some(token) = continue_token {
        params = params.continue_token(token);
    }
    let request = kube::core::Request::new(pods_path(namespace))
        .list(&params)
        .map_err(kube::Error::BuildRequest)?;
    client.request_text(request).await
}

/// The pod as stored now.
pub async fn get(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<String, kube::Error> {
    let request = kube::core::Request::new(pods_path(namespace))
        .get(name, &GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    client.request_text(request).await
}

/// Applies an RFC 6902 patch; returns the pod as stored after admission.
pub async fn json_patch(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    patch: Vec<u8>,
) -> Result<String, kube::Error> {
    let uri = format!(
        "{}/{name}?fieldManager={FIELD_MANAGER}",
        pods_path(namespace)
    );
    let request = http::Request::patch(uri)
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .body(patch)
        .map_err(|e| kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(e)))?;
    client.request_text(request).await
}

/// The API server's status code of a failed request, if it answered.
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}
