//! What each path answers: a pure function of the request's method and path, the metrics and
//! readiness, so the table of answers is tested without a socket.

use http::StatusCode;

use crate::metrics::Metrics;

/// The answer to `method path`: (status, content type, body).
pub fn route(
    method: &str,
    path: &str,
    metrics: &Metrics,
    ready: bool,
) -> (StatusCode, &'static str, String) {
    match (method, path) {
        ("GET", "/metrics") => (
            StatusCode::OK,
            "text/plain; version=0.0.4",
            metrics.render(),
        ),
        ("GET", "/healthz") => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        ("GET", "/readyz") if ready => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        ("GET", "/readyz") => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "pod cache not synced\n".to_owned(),
        ),
        ("GET", _) => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_owned(),
        ),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let m = Metrics::new().expect("metrics");
        m.pods_managed.set(2);
        let (s, ctype, body) = route("GET", "/metrics", &m, false);
        assert_eq!((s, ctype), (StatusCode::OK, "text/plain; version=0.0.4"));
        assert!(body.contains("koord_applier_pods_managed 2"));
        assert_eq!(body, m.render());
        let table = [
            ("GET", "/readyz", false, StatusCode::SERVICE_UNAVAILABLE),
            ("GET", "/readyz", true, StatusCode::OK),
            ("GET", "/healthz", false, StatusCode::OK),
            ("POST", "/metrics", true, StatusCode::METHOD_NOT_ALLOWED),
            ("HEAD", "/healthz", true, StatusCode::METHOD_NOT_ALLOWED),
            ("GET", "/nope", true, StatusCode::NOT_FOUND),
        ];
        for (method, path, ready, want) in table {
            assert_eq!(route(method, path, &m, ready).0, want, "{method} {path}");
        }
    }
}
