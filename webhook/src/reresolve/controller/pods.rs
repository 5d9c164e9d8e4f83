//! The re-resolver's three pod requests, raw: a page of a namespace's pods, one pod, and a
//! JSON patch. Bytes in and out: a page is parsed in place with the lean borrowed view
//! admission uses (no `k8s_openapi::Pod` per item, no copy of the page into a `String`), and
//! the patch bytes are exactly what was planned.

use bytes::Bytes;
use http_body_util::BodyExt as _;
use kube::api::{GetParams, ListParams};

/// The field manager of the re-resolver's writes (`metadata.managedFields`).
pub const FIELD_MANAGER: &str = "koord-webhook-reresolver";

/// Items per list page. A pass holds one page at a time; a resolved pod of a typical
/// Deployment is ~16 KB of JSON as stored (its managedFields included), so 100 pods is
/// ~1.6 MB per page, and a 5,000-pod pass is 50 requests.
pub const PAGE_SIZE: u32 = 100;

fn pods_path(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods")
}

/// Sends a request; the body of a 2xx answer, else the API server's Status as
/// `kube::Error::Api` (what `kube::Client::request_text` does, without copying the body
/// into a `String`).
async fn send(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
) -> Result<Bytes, kube::Error> {
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    if status.is_success() {
        return Ok(body);
    }
    let mut api_status: kube::core::Status = serde_json::from_slice(&body).unwrap_or_default();
    if api_status.code == 0 {
        api_status.code = status.as_u16();
    }
    if api_status.message.is_empty() {
        api_status.message = String::from_utf8_lossy(&body).into_owned();
    }
    Err(kube::Error::Api(Box::new(api_status)))
}

/// One page of the namespace's pods (`continue_token` from the previous page).
pub async fn list_page(
    client: &kube::Client,
    namespace: &str,
    continue_token: Option<&str>,
) -> Result<Bytes, kube::Error> {
    let mut params = ListParams::default().limit(PAGE_SIZE);
    if let Some(token) = continue_token {
        params = params.continue_token(token);
    }
    let request = kube::core::Request::new(pods_path(namespace))
        .list(&params)
        .map_err(kube::Error::BuildRequest)?;
    send(client, request).await
}

/// The pod as stored now.
pub async fn get(client: &kube::Client, namespace: &str, name: &str) -> Result<Bytes, kube::Error> {
    let request = kube::core::Request::new(pods_path(namespace))
        .get(name, &GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    send(client, request).await
}

/// Applies an RFC 6902 patch; returns the pod as stored after admission.
pub async fn json_patch(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    patch: Vec<u8>,
) -> Result<Bytes, kube::Error> {
    let uri = format!(
        "{}/{name}?fieldManager={FIELD_MANAGER}",
        pods_path(namespace)
    );
    let request = http::Request::patch(uri)
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .body(patch)
        .map_err(|e| kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(e)))?;
    send(client, request).await
}

/// The API server's status code of a failed request, if it answered.
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}
