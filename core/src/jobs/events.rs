//! AWS IoT's jobs events: `$aws/events/job/{jobId}/{operation}` when a job completes, is
//! canceled or deleted (and when its cancellation or deletion starts), and
//! `$aws/events/jobExecution/{jobId}/{operation}` when an execution ends — AWS's payloads, so
//! that an operator's tooling follows a rollout without polling. Published at QoS 0, as
//! AWS's events are delivered at most once; each transition once (the write that made it
//! publishes it).

use std::collections::BTreeMap;

use serde::Serialize;

use super::model::Job;
use super::store::Counts;
use super::topics::EVENTS;
use super::wire::Status;
use super::wire::{JobProcessDetails, JobStatus};
use crate::envelope::{Properties, Publish};

/// A job's event: `completed`, `canceled`, `deleted`, `cancellation_in_progress` or
/// `deletion_in_progress`.
pub(crate) fn job(job: &Job, operation: &str, counts: &Counts, now_ms: u64) -> Publish {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Event<'a> {
        #[serde(flatten)]
        head: Head<'a>,
        status: JobStatus,
        target_selection: &'static str,
        targets: &'a [String],
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        comment: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason_code: Option<&'a str>,
        created_at: u64,
        last_updated_at: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        completed_at: Option<u64>,
        job_process_details: JobProcessDetails,
    }
    let event = Event {
        head: Head {
            event_type: "JOB",
            event_id: format!("{}-{operation}-{}", job.id, job.last_updated_at),
            timestamp: now_ms / 1000,
            operation,
            job_id: &job.id,
        },
        status: job.status,
        target_selection: "SNAPSHOT",
        targets: &job.targets,
        description: job.config.description.as_deref(),
        comment: job.comment.as_deref(),
        reason_code: job.reason_code.as_deref(),
        created_at: job.created_at / 1000,
        last_updated_at: job.last_updated_at / 1000,
        completed_at: job.completed_at.map(|at| at / 1000),
        job_process_details: JobProcessDetails::from_counts(counts),
    };
    publish(format!("{EVENTS}job/{}/{operation}", job.id), &event)
}

/// An execution's event when it ended with `status` (or was deleted: `None`).
pub(crate) fn execution(
    job_id: &str,
    thing: &str,
    execution_number: u64,
    status: Option<Status>,
    status_details: &BTreeMap<String, String>,
    now_ms: u64,
) -> Publish {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Event<'a> {
        #[serde(flatten)]
        head: Head<'a>,
        thing_arn: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<Status>,
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        status_details: &'a BTreeMap<String, String>,
    }
    let operation = match status {
        Some(status) => status.as_str().to_ascii_lowercase(),
        None => "deleted".into(),
    };
    let event = Event {
        head: Head {
            event_type: "JOB_EXECUTION",
            event_id: format!("{job_id}-{thing}-{execution_number}-{operation}"),
            timestamp: now_ms / 1000,
            operation: &operation,
            job_id,
        },
        thing_arn: format!("thing/{thing}"),
        status,
        status_details,
    };
    publish(format!("{EVENTS}jobExecution/{job_id}/{operation}"), &event)
}

/// What every event starts with.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Head<'a> {
    event_type: &'static str,
    event_id: String,
    timestamp: u64,
    operation: &'a str,
    job_id: &'a str,
}

fn publish(topic: String, payload: &impl Serialize) -> Publish {
    Publish {
        topic,
        // Our own types: they always serialize.
        payload: bytes::Bytes::from(serde_json::to_vec(payload).unwrap_or_default()),
        qos: 0,
        properties: Properties::default(),
    }
}
