//! The floor's whole handler body: parse the AdmissionReview only for `request.uid` (the rest
//! is skipped by serde) and return a fixed "allowed" response echoing it. Shared by
//! `floor_server` and `review_loop`'s `floor` case, so the instruction count per review and the
//! server's CPU per request measure the same code.

use koord_webhook::admission::response::write_response;
use serde::Deserialize;

#[derive(Deserialize)]
struct Review<'a> {
    #[serde(borrow)]
    request: Option<Request<'a>>,
}

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow, default)]
    uid: std::borrow::Cow<'a, str>,
}

/// The floor's response body for one review.
pub fn floor_review(body: &[u8]) -> Vec<u8> {
    let uid = serde_json::from_slice::<Review<'_>>(body)
        .ok()
        .and_then(|r| r.request)
        .map(|r| r.uid.into_owned())
        .unwrap_or_default();
    write_response(&uid, true, None, None)
}
