//! What a locality pass did: the `locality` section of `koord-applier once`'s report (the
//! per-container outcomes of [`super::container`] and the Event worded by [`super::message`]).

use serde::Serialize;

pub use super::container::{ContainerLocality, ContainerStatus, FailedPid, Method};
use koord_translator::pod::event::EventKind;

use super::timings::PassTimings;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalityEvent {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalityReport {
    pub containers: Vec<ContainerLocality>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<LocalityEvent>,
    /// Where the pass spent its time (`once --timings`; `None` in the default report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<PassTimings>,
}

impl LocalityReport {
    pub fn new(containers: Vec<ContainerLocality>) -> Self {
        let event =
            super::message::event_text(&containers).map(|(kind, reason, message)| LocalityEvent {
                kind: match kind {
                    EventKind::Normal => "Normal",
                    EventKind::Warning => "Warning",
                },
                reason,
                message,
            });
        Self {
            containers,
            event,
            timings: None,
        }
    }

    /// The report without its timings (the default `once` report: the same JSON run to run
    /// for the same outcome).
    pub fn without_timings(mut self) -> Self {
        self.timings = None;
        for c in &mut self.containers {
            c.timings = None;
        }
        self
    }

    /// Whether any container failed.
    pub fn failed(&self) -> bool {
        self.containers
            .iter()
            .any(|c| c.status == ContainerStatus::Failed)
    }
}
