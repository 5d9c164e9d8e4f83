//! The plugin's answers to the runtime (one connection's [`Service`]). Every answer has a
//! deadline below the runtime's own request timeout, and every doubt is answered with "no
//! adjustment": the plugin never returns an error for a container event, because the runtime
//! fails the container's creation on one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{ObjectRef, Store};
use prost::Message as _;
use tokio::sync::Notify;

use super::Settings;
use super::conn::{Service, unimplemented};
use super::decide::Skip;
use super::link::{Link, update};
use super::proto::{self, Status, event, service};

/// The events the plugin subscribes to.
pub const EVENTS: i32 = event::mask(&[
    event::RUN_POD_SANDBOX,
    event::CREATE_CONTAINER,
    event::UPDATE_CONTAINER,
]);

pub struct Plugin {
    link: Arc<Link>,
    pods: Store<Pod>,
    settings: Settings,
    /// The runtime's request timeout from `Configure`, milliseconds (0 = not told).
    runtime_timeout_ms: AtomicU64,
    /// Signalled once `Configure` was answered.
    pub configured: Notify,
    /// `(runtime name, version)` from `Configure`.
    pub runtime: std::sync::Mutex<(String, String)>,
}

impl Plugin {
    pub fn new(link: Arc<Link>, pods: Store<Pod>, settings: Settings) -> Self {
        Self {
            link,
            pods,
            settings,
            runtime_timeout_ms: AtomicU64::new(0),
            configured: Notify::new(),
            runtime: std::sync::Mutex::default(),
        }
    }

    /// How long an answer may take: the configured deadline, and less than half of what the
    /// runtime waits (the call's own timeout, the configured request timeout).
    fn budget(&self, caller: Option<Duration>) -> Duration {
        let mut b = self.settings.answer_deadline;
        for t in [
            caller,
            Some(Duration::from_millis(
                self.runtime_timeout_ms.load(Ordering::Relaxed),
            )),
        ]
        .into_iter()
        .flatten()
        .filter(|t| !t.is_zero())
        {
            b = b.min(t / 2);
        }
        b
    }

    /// The pod from the watch, waiting for it until `until` if it is not there yet.
    async fn pod(
        &self,
        sandbox: &proto::PodSandbox,
        until: tokio::time::Instant,
    ) -> Option<Arc<Pod>> {
        let key = ObjectRef::<Pod>::new(&sandbox.name).within(&sandbox.namespace);
        loop {
            let seen = self.link.next_pod_seen();
            tokio::pin!(seen);
            seen.as_mut().enable();
            if let Some(p) = self.pods.get(&key)
                && p.metadata.uid.as_deref() == Some(sandbox.uid.as_str())
            {
                return Some(p);
            }
            if tokio::time::timeout_at(until, seen).await.is_err() {
                return None;
            }
        }
    }

    async fn create_container(
        &self,
        payload: &[u8],
        budget: Duration,
    ) -> proto::CreateContainerResponse {
        let started = tokio::time::Instant::now();
        let decided = tokio::time::timeout(budget, async {
            let req =
                proto::CreateContainerRequest::decode(payload).map_err(|_| Skip::BadRequest)?;
            let (Some(sb), Some(c)) = (req.pod, req.container) else {
                return Err(Skip::BadRequest);
            };
            let wait_until = started + self.settings.pod_wait.min(budget);
            let pod = self.pod(&sb, wait_until).await.ok_or(Skip::UnknownPod)?;
            let r = self.link.decider.decide(&pod, &c.name)?;
            Ok((sb.uid, c.id, r))
        })
        .await
        .unwrap_or(Err(Skip::Deadline));
        let (outcome, resp) = match decided {
            Ok((uid, id, resources)) => {
                self.link.record_created(&uid, &id);
                (
                    "adjusted",
                    proto::CreateContainerResponse {
                        adjust: Some(proto::ContainerAdjustment {
                            linux: Some(proto::LinuxContainerAdjustment {
                                resources: Some(resources),
                            }),
                        }),
                        update: Vec::new(),
                    },
                )
            }
            Err(skip) => (skip.as_str(), proto::CreateContainerResponse::default()),
        };
        self.count("CreateContainer", outcome, started);
        resp
    }

    async fn update_container(&self, payload: &[u8]) -> proto::UpdateContainerResponse {
        let started = tokio::time::Instant::now();
        let decided = (|| {
            let req =
                proto::UpdateContainerRequest::decode(payload).map_err(|_| Skip::BadRequest)?;
            let (Some(sb), Some(c)) = (req.pod, req.container) else {
                return Err(Skip::BadRequest);
            };
            let key = ObjectRef::<Pod>::new(&sb.name).within(&sb.namespace);
            let pod = self
                .pods
                .get(&key)
                .filter(|p| p.metadata.uid.as_deref() == Some(sb.uid.as_str()))
                .ok_or(Skip::UnknownPod)?;
            Ok((c.id, self.link.decider.decide(&pod, &c.name)?))
        })();
        let (outcome, resp) = match decided {
            // The runtime merges this into the update it is making: the container keeps the
            // values the annotation gives now instead of those recorded at creation.
            Ok((id, resources)) => (
                "adjusted",
                proto::UpdateContainerResponse {
                    update: vec![update(&id, resources)],
                },
            ),
            Err(skip) => (skip.as_str(), proto::UpdateContainerResponse::default()),
        };
        self.count("UpdateContainer", outcome, started);
        resp
    }

    fn count(&self, event: &str, outcome: &str, started: tokio::time::Instant) {
        if let Some(m) = &self.link.metrics {
            m.requests.with_label_values(&[event, outcome]).inc();
            m.answer_seconds
                .with_label_values(&[event])
                .observe(started.elapsed().as_secs_f64());
        }
    }

    fn configure(&self, payload: &[u8]) -> Result<Vec<u8>, Status> {
        let req = proto::ConfigureRequest::decode(payload).map_err(|e| Status {
            code: proto::code::INVALID_ARGUMENT,
            message: format!("ConfigureRequest: {e}"),
        })?;
        self.runtime_timeout_ms.store(
            u64::try_from(req.request_timeout).unwrap_or(0),
            Ordering::Relaxed,
        );
        *self
            .runtime
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            (req.runtime_name.clone(), req.runtime_version.clone());
        tracing::info!(runtime = %req.runtime_name, version = %req.runtime_version, nri_version = %req.nri_version, request_timeout_ms = req.request_timeout, "NRI runtime configured the plugin");
        self.configured.notify_one();
        Ok(proto::ConfigureResponse { events: EVENTS }.encode_to_vec())
    }
}

impl Service for Plugin {
    async fn call(
        &self,
        svc: &str,
        method: &str,
        payload: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Vec<u8>, Status> {
        if svc != service::PLUGIN {
            return Err(unimplemented(svc, method));
        }
        let budget = self.budget(timeout);
        match method {
            "Configure" => self.configure(&payload),
            // Containers that exist already are the reconcile path's: no updates here, and
            // `more` echoed as the protocol asks.
            "Synchronize" => {
                let more = proto::SynchronizeRequest::decode(payload.as_slice())
                    .map(|r| r.more)
                    .unwrap_or(false);
                Ok(proto::SynchronizeResponse {
                    update: Vec::new(),
                    more,
                }
                .encode_to_vec())
            }
            "RunPodSandbox" => {
                let started = tokio::time::Instant::now();
                let outcome = match proto::RunPodSandboxRequest::decode(payload.as_slice()) {
                    Ok(proto::RunPodSandboxRequest { pod: Some(sb) }) => {
                        self.link.nudge(sb.namespace, sb.name);
                        "nudged"
                    }
                    _ => Skip::BadRequest.as_str(),
                };
                self.count("RunPodSandbox", outcome, started);
                Ok(Vec::new())
            }
            "CreateContainer" => Ok(self
                .create_container(&payload, budget)
                .await
                .encode_to_vec()),
            "UpdateContainer" => Ok(self.update_container(&payload).await.encode_to_vec()),
            "Shutdown" | "StateChange" => Ok(Vec::new()),
            _ => Err(unimplemented(svc, method)),
        }
    }
}
