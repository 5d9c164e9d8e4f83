//! AdmissionReview v1 response bytes, written directly (no intermediate `Value`).
//!
//! The patch goes out base64-encoded, as Go's `encoding/json` encodes `[]byte` (kube-core's
//! derived encoding writes a JSON array of numbers: 2.2x the bytes).

use std::io::Write as _;

/// `response.status` of a refused review.
#[derive(Debug, Clone, Copy)]
pub struct ResponseStatus<'m> {
    pub code: u16,
    pub reason: &'static str,
    pub message: &'m str,
}

impl<'m> ResponseStatus<'m> {
    /// The request itself is unreadable.
    pub fn bad_request(message: &'m str) -> Self {
        ResponseStatus {
            code: 400,
            reason: "BadRequest",
            message,
        }
    }

    /// The pod carries a malformed or out-of-range annotation.
    pub fn invalid(message: &'m str) -> Self {
        ResponseStatus {
            code: 422,
            reason: "Invalid",
            message,
        }
    }
}

/// Appends standard base64 (with padding) of `input`, as Go's `encoding/json` writes a
/// `[]byte`. The patch is the largest thing an admission encodes: base64-simd encodes it
/// with the CPU's vector instructions (detected at run time, scalar otherwise), a tenth of the
/// instructions of a table-driven loop (webhook/README.md, "Per-review CPU").
fn base64_into(out: &mut Vec<u8>, input: &[u8]) {
    let start = out.len();
    let engine = base64_simd::STANDARD;
    out.resize(start + engine.encoded_length(input.len()), 0);
    // Fills exactly the slice given (its length is the encoded length).
    let _ = engine.encode(input, base64_simd::Out::from_slice(&mut out[start..]));
}

const HEAD: &[u8] =
    br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#;

/// `s` as a JSON string, escaped as serde_json escapes it.
fn json_string(out: &mut Vec<u8>, s: &str) {
    koord_api::json_write::string(out, s);
}

/// The response body: `uid` echoed, `allowed`, and either a JSONPatch or a status.
pub fn write_response(
    uid: &str,
    allowed: bool,
    patch: Option<&[u8]>,
    status: Option<ResponseStatus<'_>>,
) -> Vec<u8> {
    write_body(uid, allowed, patch, status, None)
}

/// Allowed, with a JSONPatch when there is one, and a warning the apiserver shows to the
/// client (`kubectl` prints it as `Warning: ...`).
pub fn write_allowed_with_warning(uid: &str, patch: Option<&[u8]>, warning: &str) -> Vec<u8> {
    write_body(uid, true, patch, None, Some(warning))
}

/// Allowed, no patch, with a warning the apiserver shows to the client.
pub fn write_response_with_warning(uid: &str, warning: &str) -> Vec<u8> {
    write_body(uid, true, None, None, Some(warning))
}

fn write_body(
    uid: &str,
    allowed: bool,
    patch: Option<&[u8]>,
    status: Option<ResponseStatus<'_>>,
    warning: Option<&str>,
) -> Vec<u8> {
    let patch_len = patch.map_or(0, |p| p.len().div_ceil(3) * 4 + 40);
    let warning_len = warning.map_or(0, |w| w.len() + 16);
    let mut out = Vec::with_capacity(HEAD.len() + uid.len() + patch_len + warning_len + 64);
    out.extend_from_slice(HEAD);
    json_string(&mut out, uid);
    out.extend_from_slice(if allowed {
        br#","allowed":true"#
    } else {
        br#","allowed":false"#
    });
    if let Some(patch) = patch {
        out.extend_from_slice(br#","patchType":"JSONPatch","patch":""#);
        base64_into(&mut out, patch);
        out.push(b'"');
    }
    if let Some(s) = status {
        let _ = write!(
            out,
            r#","status":{{"status":"Failure","code":{},"reason":"{}","message":"#,
            s.code, s.reason
        );
        json_string(&mut out, s.message);
        out.push(b'}');
    }
    if let Some(w) = warning {
        out.extend_from_slice(br#","warnings":["#);
        json_string(&mut out, w);
        out.push(b']');
    }
    out.extend_from_slice(b"}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn parse(b: &[u8]) -> Value {
        serde_json::from_slice(b).expect("valid JSON")
    }

    #[test]
    fn patch_is_base64_and_uid_is_escaped() {
        let out = parse(&write_response(r#"a"b\c"#, true, Some(b"[]"), None));
        assert_eq!(out["response"]["uid"], r#"a"b\c"#);
        assert_eq!(out["response"]["patch"], "W10=");
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
    }

    #[test]
    fn status_carries_code_and_escaped_message() {
        let s = ResponseStatus::invalid("field \"x\": out of range\n");
        let out = parse(&write_response("u", false, None, Some(s)));
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["status"]["code"], 422);
        assert_eq!(
            out["response"]["status"]["message"],
            "field \"x\": out of range\n"
        );
        assert!(out["response"].get("patch").is_none());
    }

    proptest::proptest! {
        #[test]
        fn base64_as_the_base64_crate_writes_it(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            use base64::Engine as _;
            let mut out = b"x".to_vec();
            base64_into(&mut out, &bytes);
            let expected = base64::engine::general_purpose::STANDARD.encode(&bytes);
            proptest::prop_assert_eq!(&out[1..], expected.as_bytes());
        }
    }

    #[test]
    fn warning_response_allows_without_patch() {
        let bytes = write_response_with_warning("u", "slow \u{1F40C}");
        let out = parse(&bytes);
        assert_eq!(out["response"]["allowed"], true);
        assert_eq!(out["response"]["warnings"][0], "slow \u{1F40C}");
        assert_eq!(
            String::from_utf8(bytes).expect("utf8"),
            "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"response\":{\"uid\":\"u\",\"allowed\":true,\"warnings\":[\"slow \u{1F40C}\"]}}"
        );
    }

    #[test]
    fn patch_with_warning_carries_both() {
        let out = parse(&write_allowed_with_warning("u", Some(b"[]"), "why \"so\""));
        assert_eq!(out["response"]["allowed"], true);
        assert_eq!(out["response"]["patch"], "W10=");
        assert_eq!(
            out["response"]["warnings"],
            serde_json::json!(["why \"so\""])
        );
        // Without a warning the body is what it always was: no warnings key.
        let plain = parse(&write_response("u", true, Some(b"[]"), None));
        assert!(plain["response"].get("warnings").is_none());
    }
}
