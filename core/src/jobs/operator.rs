//! The operator API: mqstore's own MQTT request/response (AWS has an HTTP control plane
//! instead), JSON in and out, under the state store's envelope (response topic, correlation
//! data, `__stat`). A request is `{"op": ..., ...}` with AWS's field names; the answer is
//! `{"ok": {...}}` or `{"error": {"code", "message"}}`.

use std::collections::BTreeMap;

use super::wire::{
    ExecutionListing, JobCreated, JobDescription, JobListing, OperatorAnswer, OperatorError,
    OperatorOk, OperatorRequest, TimeoutConfig,
};
use super::{Jobs, JobsError, JobsStore, StoreError};
use crate::envelope::Publish;

impl<S: JobsStore> Jobs<S> {
    /// Runs one operator request (its JSON), pushing the notifications it causes onto `out`;
    /// returns the answer.
    pub fn operate(
        &mut self,
        payload: &[u8],
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> OperatorAnswer<OperatorOk> {
        let result = match serde_json::from_slice::<OperatorRequest>(payload) {
            Ok(request) => self.operation(request, now_ms, out),
            Err(e) if e.is_syntax() || e.is_eof() => Err(OperatorError {
                code: "InvalidJson".into(),
                message: format!("the request is not JSON: {e}"),
            }),
            Err(e) => Err(OperatorError {
                code: "InvalidRequest".into(),
                message: format!("the request fits no operator call: {e}"),
            }),
        };
        match result {
            Ok(ok) => OperatorAnswer::Ok(ok),
            Err(error) => OperatorAnswer::Error(error),
        }
    }

    fn operation(
        &mut self,
        request: OperatorRequest,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<OperatorOk, OperatorError> {
        match request {
            OperatorRequest::CreateJob(spec) => {
                let (job_id, targets) = (spec.job_id.clone(), spec.targets.len());
                self.create_job(spec, now_ms, out).map_err(error)?;
                Ok(OperatorOk::Created(JobCreated { job_id, targets }))
            }
            OperatorRequest::CancelJob { job_id, force } => {
                self.cancel_job(&job_id, force, now_ms, out)
                    .map_err(error)?;
                Ok(OperatorOk::Done {})
            }
            OperatorRequest::DeleteExecution {
                job_id,
                thing,
                force,
            } => {
                self.delete_execution(&job_id, &thing, force, now_ms, out)
                    .map_err(error)?;
                Ok(OperatorOk::Done {})
            }
            OperatorRequest::DescribeJob { job_id } => {
                let job = self
                    .job(&job_id)
                    .map_err(stored)?
                    .ok_or_else(|| error(JobsError::NotFound(job_id.clone())))?;
                let mut executions = BTreeMap::new();
                for thing in &job.targets {
                    if let Some(execution) = self.execution(thing, &job_id).map_err(stored)? {
                        *executions.entry(execution.status).or_insert(0) += 1;
                    }
                }
                Ok(OperatorOk::Job {
                    job: JobDescription {
                        job_id: job.id.clone(),
                        document: job.document.clone(),
                        targets: job.targets.clone(),
                        timeout_config: TimeoutConfig {
                            in_progress_timeout_in_minutes: job.in_progress_timeout_minutes,
                        },
                        max_retries: job.max_retries,
                        executions,
                    },
                })
            }
            OperatorRequest::DescribeExecution { job_id, thing } => {
                let execution = self
                    .execution(&thing, &job_id)
                    .map_err(stored)?
                    .ok_or_else(|| error(JobsError::NotFound(format!("{job_id} on {thing}"))))?;
                let document = self
                    .job(&job_id)
                    .map_err(stored)?
                    .map(|j| j.document.clone());
                Ok(OperatorOk::Execution {
                    execution: execution.describe(document, now_ms),
                })
            }
            OperatorRequest::ListJobs => {
                let jobs = self
                    .store
                    .jobs()
                    .map_err(stored)?
                    .iter()
                    .map(|job| JobListing {
                        job_id: job.id.clone(),
                        targets: job.targets.len(),
                    })
                    .collect();
                Ok(OperatorOk::Jobs { jobs })
            }
            OperatorRequest::ListExecutions {
                thing,
                job_id,
                status,
            } => {
                let records: Vec<_> = match thing {
                    Some(thing) => {
                        let record = self.store.thing(&thing).map_err(stored)?;
                        vec![(thing, record)]
                    }
                    None => self.records().map_err(stored)?,
                };
                let mut executions = Vec::new();
                for (thing_name, record) in records {
                    for (id, list) in &record.executions {
                        let Some(execution) = list.last() else {
                            continue;
                        };
                        if job_id.as_ref().is_some_and(|j| j != id)
                            || status.is_some_and(|s| s != execution.status)
                        {
                            continue;
                        }
                        executions.push(ExecutionListing {
                            thing_name: thing_name.clone(),
                            job_id: execution.job_id.clone(),
                            status: execution.status,
                            queued_at: execution.queued_at,
                            started_at: execution.started_at,
                            last_updated_at: execution.last_updated_at,
                            execution_number: execution.execution_number,
                            version_number: execution.version_number,
                        });
                    }
                }
                Ok(OperatorOk::Executions { executions })
            }
        }
    }
}

fn stored(e: StoreError) -> OperatorError {
    error(JobsError::Store(e))
}

fn error(e: JobsError) -> OperatorError {
    let code = match &e {
        JobsError::Invalid(_) => "InvalidRequest",
        JobsError::JobExists(_) => "Conflict",
        JobsError::NotFound(_) => "ResourceNotFound",
        JobsError::InProgress(_) => "InvalidStateTransition",
        JobsError::Store(_) => "InternalError",
    };
    OperatorError {
        code: code.into(),
        message: e.to_string(),
    }
}
