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
    write_body(with_patch(patch), uid, allowed, status, None)
}

/// Allowed, with a JSONPatch when there is one, and a warning the apiserver shows to the
/// client (`kubectl` prints it as `Warning: ...`).
pub fn write_allowed_with_warning(uid: &str, patch: Option<&[u8]>, warning: &str) -> Vec<u8> {
    write_body(with_patch(patch), uid, true, None, Some(warning))
}

/// Allowed, no patch, with a warning the apiserver shows to the client.
pub fn write_response_with_warning(uid: &str, warning: &str) -> Vec<u8> {
    write_body(PatchFirst::none(), uid, true, None, Some(warning))
}

/// A buffer holding the JSONPatch at its front (possibly none) that the response body is
/// written into: admission writes the patch there first, so one allocation serves the patch
/// and the body (the patch is moved out of the way once it has been encoded).
pub struct PatchFirst {
    buf: Vec<u8>,
    patch_len: usize,
}

impl PatchFirst {
    /// An empty buffer with room for a typical patch and its response.
    pub fn new() -> Self {
        PatchFirst {
            buf: Vec::with_capacity(4096),
            patch_len: 0,
        }
    }

    fn none() -> Self {
        PatchFirst {
            buf: Vec::new(),
            patch_len: 0,
        }
    }

    /// The buffer to append the patch to (call [`PatchFirst::patch_written`] after).
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Everything in the buffer so far is the patch.
    pub fn patch_written(&mut self) {
        self.patch_len = self.buf.len();
    }
}

impl Default for PatchFirst {
    fn default() -> Self {
        Self::new()
    }
}

fn with_patch(patch: Option<&[u8]>) -> PatchFirst {
    let mut p = PatchFirst::none();
    if let Some(patch) = patch {
        p.buf.reserve(patch.len() * 7 / 3 + 256);
        p.buf.extend_from_slice(patch);
        p.patch_written();
    }
    p
}

/// The body for an answer whose patch (if any) is in `patch`; `patch` without one answers
/// without `patchType`/`patch`.
pub fn write_body_after_patch(patch: PatchFirst, uid: &str, warning: Option<&str>) -> Vec<u8> {
    write_body(patch, uid, true, None, warning)
}

fn write_body(
    patch: PatchFirst,
    uid: &str,
    allowed: bool,
    status: Option<ResponseStatus<'_>>,
    warning: Option<&str>,
) -> Vec<u8> {
    let PatchFirst {
        buf: mut out,
        patch_len,
    } = patch;
    let engine = base64_simd::STANDARD;
    let encoded_len = if patch_len > 0 {
        engine.encoded_length(patch_len)
    } else {
        0
    };
    let warning_len = warning.map_or(0, |w| w.len() + 16);
    let room = HEAD.len() + uid.len() + encoded_len + warning_len + 96;
    if out.capacity() == 0 {
        // No patch buffer: allocate outright rather than grow an empty vector.
        out = Vec::with_capacity(room);
    } else {
        out.reserve(room);
    }
    out.extend_from_slice(HEAD);
    json_string(&mut out, uid);
    out.extend_from_slice(if allowed {
        br#","allowed":true"#
    } else {
        br#","allowed":false"#
    });
    if patch_len > 0 {
        out.extend_from_slice(br#","patchType":"JSONPatch","patch":""#);
        // Standard base64 with padding, as Go's `encoding/json` writes a `[]byte`, from the
        // patch at the front of the buffer into the room after it. base64-simd encodes with
        // the CPU's vector instructions (detected at run time, scalar otherwise): the patch
        // is the largest thing an admission encodes (docs/decisions.md, "A borrowed pod view and a hand-written response").
        let start = out.len();
        out.resize(start + encoded_len, 0);
        let (patch_bytes, rest) = out.split_at_mut(patch_len);
        // Fills exactly the slice given (its length is the encoded length).
        let _ = engine.encode(
            patch_bytes,
            base64_simd::Out::from_slice(&mut rest[start - patch_len..]),
        );
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
    if patch_len > 0 {
        // The patch has been encoded: the body moves to the front.
        out.drain(..patch_len);
    }
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

    /// RFC 4648 base64 with padding, written out bit by bit: an oracle that shares no code
    /// with the SIMD encoder under test.
    fn reference_base64(bytes: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
            for i in 0..4 {
                out.push(if i <= chunk.len() {
                    char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize])
                } else {
                    '='
                });
            }
        }
        out
    }

    #[test]
    fn patch_is_base64_as_rfc_4648_spells_it() {
        // RFC 4648, section 10.
        for (bytes, text) in [
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(reference_base64(bytes.as_bytes()), text);
            let out = parse(&write_response("u", true, Some(bytes.as_bytes()), None));
            assert_eq!(out["response"]["patch"], text, "{bytes}");
        }
    }

    proptest::proptest! {
        #[test]
        fn patch_is_base64_as_the_reference_writes_it(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..3000)) {
            let out = parse(&write_response("u", true, Some(&bytes), None));
            let expected = reference_base64(&bytes);
            proptest::prop_assert_eq!(out["response"]["patch"].as_str(), Some(expected.as_str()));
        }
    }

    #[test]
    fn patch_written_first_gives_the_same_body() {
        let patch = br#"[{"op":"add","path":"/a","value":"b"}]"#;
        for warning in [None, Some("why")] {
            let mut first = PatchFirst::new();
            first.buffer().extend_from_slice(patch);
            first.patch_written();
            let body = write_body_after_patch(first, "u\"1", warning);
            let copied = match warning {
                Some(w) => write_allowed_with_warning("u\"1", Some(patch), w),
                None => write_response("u\"1", true, Some(patch), None),
            };
            assert_eq!(body, copied);
            // Nothing of the patch is left in front of the body.
            assert!(body.starts_with(HEAD));
        }
        // A buffer without a patch answers without one.
        assert_eq!(
            write_body_after_patch(PatchFirst::new(), "u", None),
            write_response("u", true, None, None)
        );
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
