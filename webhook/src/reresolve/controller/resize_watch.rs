//! The pod watch of the holder: an in-place resize (the `pods/resize` subresource) changes a
//! running pod's resources without an admission of the pod itself, so the annotation would
//! keep the old numbers until the next periodic pass. While this replica holds the Lease it
//! watches pods; a pod of an opted-in namespace whose allocated memory changed
//! ([`crate::reresolve::resize`]) is planned with the admission snapshot and patched through
//! the pass's guarded write (same engine, same pacing, same Event), within the watch latency.
//! Followers do not watch: the holder to come starts with a full pass.

use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;

use super::pass::PassContext;
use crate::reresolve::plan::{Verdict, plan_pod};
use crate::reresolve::resize::{ResizeTracker, Seen, allocated_memory_digest};
use crate::reresolve::stored_pod::PodRef;
use crate::resolve::PodInput;

/// Runs until the task is aborted: watches while leader, idles otherwise.
pub async fn run(ctx: Arc<PassContext>) {
    let mut leader = ctx.leadership.subscribe();
    loop {
        if leader.wait_for(|is| *is).await.is_err() {
            return;
        }
        tracing::info!("watching pods for in-place resizes");
        let mut tracker = ResizeTracker::default();
        let api: kube::Api<Pod> = kube::Api::all(ctx.client.clone());
        // Listed a pass's page at a time: kube's default of 500 decoded pods held at once was
        // the holder's peak (docs/benchmarks.md, re-resolver memory).
        let config = watcher::Config::default()
            .page_size(super::pods::PAGE_SIZE)
            .timeout(koord_runtime::WATCH_TIMEOUT_SECS);
        let mut events = watcher(api, config).boxed();
        loop {
            tokio::select! {
                changed = leader.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if !*leader.borrow_and_update() {
                        break;
                    }
                }
                event = events.next() => match event {
                    Some(Ok(e)) => on_event(&ctx, &mut tracker, e).await,
                    // The watcher relists by itself; the tracker keeps what it saw.
                    Some(Err(e)) => tracing::debug!(error = %e, "pod watch error; retrying"),
                    None => break,
                },
            }
        }
        tracing::info!(
            pods = tracker.len(),
            "stopped watching pods (not the holder)"
        );
    }
}

async fn on_event(ctx: &PassContext, tracker: &mut ResizeTracker, event: watcher::Event<Pod>) {
    match event {
        watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
            on_pod(ctx, tracker, &pod).await;
        }
        watcher::Event::Delete(pod) => {
            if let Some(uid) = pod.metadata.uid.as_deref() {
                tracker.forget(uid);
            }
        }
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}

async fn on_pod(ctx: &PassContext, tracker: &mut ResizeTracker, pod: &Pod) {
    let (Some(namespace), Some(uid)) = (
        pod.metadata.namespace.as_deref(),
        pod.metadata.uid.as_deref(),
    ) else {
        return;
    };
    if !ctx.is_in_scope(namespace) {
        return;
    }
    // The engine reads the stored JSON; a watched pod is turned back into it.
    let Ok(text) = serde_json::to_string(pod) else {
        return;
    };
    let Ok(input) = serde_json::from_str::<PodInput<'_>>(&text) else {
        return;
    };
    if tracker.observe(uid, allocated_memory_digest(&input)) != Seen::Changed {
        return;
    }
    drop(input);
    ctx.metrics.pods_checked.inc();
    let policy = ctx.state.policy.load();
    let planned = plan_pod(&text, &policy);
    drop(policy);
    match planned {
        Ok((pod_ref, Verdict::Change(mut change))) => {
            change.message = format!("in-place resize: {}", change.message);
            log_resize(&pod_ref);
            ctx.metrics.pods_resized.inc();
            ctx.write_one(pod_ref, change).await;
        }
        Ok((_, Verdict::Unchanged | Verdict::Skipped(_))) => {}
        Ok((pod_ref, Verdict::Invalid(message))) => {
            tracing::debug!(namespace = %pod_ref.namespace, pod = %pod_ref.name, %message,
                "resized pod does not resolve; left as it is");
        }
        Err(e) => tracing::debug!(error = %e, "unreadable watched pod"),
    }
}

fn log_resize(pod: &PodRef) {
    tracing::info!(namespace = %pod.namespace, pod = %pod.name,
        "allocated memory changed (in-place resize): resolved-qos follows");
}
