//! The operator API: mqstore's own MQTT request/response (AWS has an HTTP control plane
//! instead), JSON in and out, under the state store's envelope (response topic, correlation
//! data, `__stat`). A request is `{"op": ..., ...}` with AWS's field names; the answer is
//! `{"ok": {...}}` or `{"error": {"code", "message"}}`.

use serde_json::{Map, Value, json};

use super::{JobSpec, Jobs, JobsError, JobsStore, Status, StoreError};
use crate::envelope::Publish;

impl<S: JobsStore> Jobs<S> {
    /// Runs one operator request, pushing the notifications it causes onto `out`; returns the
    /// answer's JSON.
    pub fn operate(&mut self, payload: &[u8], now_ms: u64, out: &mut Vec<Publish>) -> Value {
        match self.operation(payload, now_ms, out) {
            Ok(result) => json!({ "ok": result }),
            Err((code, message)) => json!({ "error": { "code": code, "message": message } }),
        }
    }

    fn operation(
        &mut self,
        payload: &[u8],
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<Value, (&'static str, String)> {
        let request = match serde_json::from_slice::<Value>(payload) {
            Ok(Value::Object(map)) => map,
            _ => return Err(("InvalidJson", "the request must be a JSON object".into())),
        };
        let text = |name: &str| -> Result<String, (&'static str, String)> {
            request
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| ("InvalidRequest", format!("{name} (a string) is required")))
        };
        let force = request
            .get("force")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let op = text("op")?;
        match op.as_str() {
            "createJob" => {
                let spec = job_spec(&request).map_err(|m| ("InvalidRequest", m))?;
                let (job_id, targets) = (spec.job_id.clone(), spec.targets.len());
                self.create_job(spec, now_ms, out).map_err(error)?;
                Ok(json!({ "jobId": job_id, "targets": targets }))
            }
            "cancelJob" => {
                self.cancel_job(&text("jobId")?, force, now_ms, out)
                    .map_err(error)?;
                Ok(json!({}))
            }
            "deleteJobExecution" => {
                let (job_id, thing) = (text("jobId")?, text("thingName")?);
                self.delete_execution(&job_id, &thing, force, now_ms, out)
                    .map_err(error)?;
                Ok(json!({}))
            }
            "describeJob" => {
                let job_id = text("jobId")?;
                let job = self
                    .job(&job_id)
                    .map_err(stored)?
                    .ok_or_else(|| error(JobsError::NotFound(job_id.clone())))?;
                let mut counts: Map<String, Value> = Map::new();
                for thing in &job.targets {
                    if let Some(execution) = self.execution(thing, &job_id).map_err(stored)? {
                        let count = counts.entry(execution.status.as_str()).or_insert(json!(0));
                        *count = json!(count.as_u64().unwrap_or(0) + 1);
                    }
                }
                Ok(json!({ "job": {
                    "jobId": job.id,
                    "document": job.document,
                    "targets": job.targets,
                    "timeoutConfig": { "inProgressTimeoutInMinutes": job.in_progress_timeout_minutes },
                    "maxRetries": job.max_retries,
                    "executions": counts,
                } }))
            }
            "describeJobExecution" => {
                let (job_id, thing) = (text("jobId")?, text("thingName")?);
                let execution = self
                    .execution(&thing, &job_id)
                    .map_err(stored)?
                    .ok_or_else(|| error(JobsError::NotFound(format!("{job_id} on {thing}"))))?;
                let document = self
                    .job(&job_id)
                    .map_err(stored)?
                    .map(|j| j.document.clone());
                Ok(json!({ "execution": execution.describe(document, now_ms) }))
            }
            "listJobs" => {
                let jobs: Vec<Value> = self
                    .store
                    .jobs()
                    .map_err(stored)?
                    .iter()
                    .map(|job| json!({ "jobId": job.id, "targets": job.targets.len() }))
                    .collect();
                Ok(json!({ "jobs": jobs }))
            }
            "listJobExecutions" => {
                let thing = request.get("thingName").and_then(Value::as_str);
                let job_id = request.get("jobId").and_then(Value::as_str);
                let status = match request.get("status").and_then(Value::as_str) {
                    None => None,
                    Some(s) => Some(Status::parse(s).ok_or_else(|| {
                        (
                            "InvalidRequest",
                            format!("{s} is not a job execution status"),
                        )
                    })?),
                };
                let mut executions: Vec<Value> = Vec::new();
                let records: Vec<_> = match thing {
                    Some(thing) => {
                        vec![(thing.to_owned(), self.store.thing(thing).map_err(stored)?)]
                    }
                    None => self.records().map_err(stored)?,
                };
                for (name, record) in &records {
                    for (id, list) in &record.executions {
                        let Some(execution) = list.last() else {
                            continue;
                        };
                        if job_id.is_some_and(|j| j != id)
                            || status.is_some_and(|s| s != execution.status)
                        {
                            continue;
                        }
                        let mut summary = execution.summary();
                        summary["thingName"] = json!(name);
                        summary["status"] = json!(execution.status.as_str());
                        executions.push(summary);
                    }
                }
                Ok(json!({ "executions": executions }))
            }
            other => Err(("InvalidRequest", format!("unknown op {other:?}"))),
        }
    }
}

fn stored(e: StoreError) -> (&'static str, String) {
    error(JobsError::Store(e))
}

fn error(e: JobsError) -> (&'static str, String) {
    let code = match &e {
        JobsError::Invalid(_) => "InvalidRequest",
        JobsError::JobExists(_) => "Conflict",
        JobsError::NotFound(_) => "ResourceNotFound",
        JobsError::InProgress(_) => "InvalidStateTransition",
        JobsError::Store(_) => "InternalError",
    };
    (code, e.to_string())
}

/// A `createJob` request as a job, with AWS's field names: `jobId`, `targets`, `document`,
/// `timeoutConfig.inProgressTimeoutInMinutes`, `jobExecutionsRetryConfig.criteriaList[]
/// .numberOfRetries` (the largest applies to FAILED and TIMED_OUT alike).
fn job_spec(request: &Map<String, Value>) -> Result<JobSpec, String> {
    let job_id = request
        .get("jobId")
        .and_then(Value::as_str)
        .ok_or("jobId (a string) is required")?
        .to_owned();
    let targets = request
        .get("targets")
        .and_then(Value::as_array)
        .ok_or("targets (an array of thing names) is required")?
        .iter()
        .map(|t| t.as_str().map(str::to_owned).ok_or("targets are strings"))
        .collect::<Result<Vec<_>, _>>()?;
    let document = request
        .get("document")
        .cloned()
        .ok_or("document is required")?;
    let in_progress_timeout_minutes = match request
        .get("timeoutConfig")
        .and_then(|t| t.get("inProgressTimeoutInMinutes"))
    {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|m| u32::try_from(m).ok())
                .ok_or("inProgressTimeoutInMinutes is a number")?,
        ),
    };
    let max_retries = request
        .get("jobExecutionsRetryConfig")
        .and_then(|c| c.get("criteriaList"))
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|c| c.get("numberOfRetries").and_then(Value::as_u64))
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    Ok(JobSpec {
        job_id,
        document,
        targets,
        in_progress_timeout_minutes,
        max_retries: u32::try_from(max_retries).unwrap_or(u32::MAX),
    })
}
