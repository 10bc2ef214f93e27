//! The operator API: mqstore's own MQTT request/response (AWS has an HTTP control plane
//! instead), JSON in and out, under the state store's envelope (response topic, correlation
//! data, `__stat`). A request is `{"op": ..., ...}` with AWS's field names; the answer is
//! `{"ok": {...}}` or `{"error": {"code", "message"}}`.

use super::model::{Execution, Job};
use super::rollout;
use super::wire::Status;
use super::wire::{
    ExecutionListing, ExecutionsPage, JobCreated, JobDescription, JobListing, JobProcessDetails,
    JobTemplate, JobsPage, OperatorAnswer, OperatorError, OperatorOk, OperatorRequest, PageRequest,
    RolloutProgress, TemplatesPage, ThingGroupsPage, ThingsPage,
};
use super::{Jobs, JobsError, JobsStore, StoreError, schedule};
use crate::envelope::Publish;
use serde_json::Value;

/// Why a JSON request is no operator call, naming the field where it can: serde does not
/// track the path through the request's flattened and tagged parts, so the value its error
/// quotes (an unknown enum variant, a value of the wrong type) is looked up in the request.
fn misfit(payload: &[u8], error: &str) -> String {
    let request: Value = serde_json::from_slice(payload).unwrap_or_default();
    let op = match request.get("op").and_then(Value::as_str) {
        Some(op) if super::wire::OPERATOR_CALLS.contains(&op) => op,
        _ => return format!("the request fits no operator call: {error}"),
    };
    // Only a misfit value is quoted and looked up ("missing field `jobId`" quotes a name).
    let misfit_value = ["unknown variant", "invalid type", "invalid value"]
        .iter()
        .any(|start| error.starts_with(start));
    let quoted = ["`", "\""].iter().find_map(|mark| {
        let (_, rest) = error.split_once(mark)?;
        Some(rest.split_once(mark)?.0)
    });
    let quoted = quoted.filter(|_| misfit_value);
    let path = quoted.and_then(|quoted| path_of(&request, quoted, &mut String::new()));
    match path {
        Some(path) => format!("{op}: {path}: {error}"),
        None => format!("{op}: {error}"),
    }
}

/// The path (`a.b[0].c`) of the first value in `value` whose text is `text`, but `op`.
fn path_of(value: &Value, text: &str, path: &mut String) -> Option<String> {
    let len = path.len();
    let found = match value {
        Value::String(s) => (s == text).then(|| path.clone()),
        Value::Number(n) => (n.to_string() == text).then(|| path.clone()),
        Value::Bool(b) => (b.to_string() == text).then(|| path.clone()),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            path.push_str(&format!("[{i}]"));
            let found = path_of(item, text, path);
            path.truncate(len);
            found
        }),
        Value::Object(fields) => fields.iter().find_map(|(name, item)| {
            if path.is_empty() && name == "op" {
                return None;
            }
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(name);
            let found = path_of(item, text, path);
            path.truncate(len);
            found
        }),
        Value::Null => None,
    };
    found.filter(|p| !p.is_empty())
}

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
                message: misfit(payload, &e.to_string()),
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
        let done =
            |result: Result<(), JobsError>| result.map(|()| OperatorOk::Done {}).map_err(error);
        match request {
            OperatorRequest::CreateJob(spec) => {
                let job_id = spec.job_id.clone();
                let targets = self.create_job(*spec, now_ms, out).map_err(error)?;
                Ok(OperatorOk::Created(JobCreated { job_id, targets }))
            }
            OperatorRequest::UpdateJob(update) => done(self.update_job(update, now_ms)),
            OperatorRequest::CancelJob {
                job_id,
                force,
                reason_code,
                comment,
            } => done(self.cancel_job(&job_id, force, reason_code, comment, now_ms, out)),
            OperatorRequest::DeleteJob { job_id, force } => {
                done(self.delete_job(&job_id, force, now_ms, out))
            }
            OperatorRequest::CancelJobExecution(cancel) => {
                done(self.cancel_execution(&cancel, now_ms, out))
            }
            OperatorRequest::DeleteExecution {
                job_id,
                thing,
                force,
            } => done(self.delete_execution(&job_id, &thing, force, now_ms, out)),
            OperatorRequest::DescribeJob { job_id } => {
                let job = self
                    .job(&job_id)
                    .map_err(stored)?
                    .ok_or_else(|| error(JobsError::NotFound(format!("job {job_id}"))))?;
                let job = self.current(job, now_ms, out).map_err(stored)?;
                Ok(OperatorOk::Job {
                    job: Box::new(self.description(&job, now_ms).map_err(stored)?),
                })
            }
            OperatorRequest::DescribeExecution { job_id, thing } => {
                let execution = self
                    .execution(&thing, &job_id)
                    .map_err(stored)?
                    .ok_or_else(|| {
                        error(JobsError::NotFound(format!(
                            "execution of job {job_id} on thing {thing}"
                        )))
                    })?;
                let document = self
                    .job(&job_id)
                    .map_err(stored)?
                    .map(|j| j.document.clone());
                Ok(OperatorOk::Execution {
                    execution: execution.describe(document, now_ms),
                })
            }
            OperatorRequest::ListJobs { status, page } => {
                let limit = page_size(&page)?;
                let mut jobs = Vec::new();
                let mut next_token = None;
                for id in self.store.job_ids().map_err(stored)? {
                    if page.next_token.as_ref().is_some_and(|after| id <= *after) {
                        continue;
                    }
                    let Some(job) = self.job(&id).map_err(stored)? else {
                        continue;
                    };
                    let job = self.current(job, now_ms, out).map_err(stored)?;
                    if status.is_some_and(|s| s != job.status) {
                        continue;
                    }
                    if jobs.len() == limit {
                        next_token = jobs.last().map(|j: &JobListing| j.job_id.clone());
                        break;
                    }
                    jobs.push(JobListing {
                        job_id: job.id.clone(),
                        targets: job.targets.len(),
                        status: job.status,
                        created_at: job.created_at / 1000,
                        last_updated_at: job.last_updated_at / 1000,
                        completed_at: job.completed_at.map(|at| at / 1000),
                    });
                }
                Ok(OperatorOk::Jobs(JobsPage { jobs, next_token }))
            }
            OperatorRequest::CreateThingGroup {
                thing_group_name,
                thing_group_properties,
            } => {
                let group = self
                    .create_group(&thing_group_name, thing_group_properties, now_ms)
                    .map_err(error)?;
                Ok(OperatorOk::Group(Box::new(group)))
            }
            OperatorRequest::DeleteThingGroup { thing_group_name } => {
                done(self.delete_group(&thing_group_name))
            }
            OperatorRequest::DescribeThingGroup { thing_group_name } => Ok(OperatorOk::Group(
                Box::new(self.group(&thing_group_name).map_err(error)?),
            )),
            OperatorRequest::ListThingGroups { page } => {
                let limit = page_size(&page)?;
                let (thing_groups, next_token) = self.list_groups(&page, limit).map_err(stored)?;
                Ok(OperatorOk::Groups(ThingGroupsPage {
                    thing_groups,
                    next_token,
                }))
            }
            OperatorRequest::AddThingToThingGroup(membership) => {
                done(self.add_to_group(&membership, now_ms, out))
            }
            OperatorRequest::RemoveThingFromThingGroup(membership) => {
                done(self.remove_from_group(&membership, now_ms, out))
            }
            // The shadow service's (the server routes it there: `shadow::operate`).
            OperatorRequest::ListNamedShadowsForThing { .. } => Err(OperatorError {
                code: "InvalidRequest".into(),
                message: "listNamedShadowsForThing is the device shadow service's call".into(),
            }),
            OperatorRequest::ListThingsInThingGroup {
                thing_group_name,
                page,
            } => {
                let limit = page_size(&page)?;
                let (things, next_token) = self
                    .group_things(&thing_group_name, &page, limit)
                    .map_err(error)?;
                Ok(OperatorOk::Things(ThingsPage { things, next_token }))
            }
            OperatorRequest::CreateJobTemplate(template) => {
                let (arn, id) = self.create_template(*template, now_ms).map_err(error)?;
                Ok(OperatorOk::Template(Box::new(JobTemplate {
                    job_template_id: id,
                    job_template_arn: Some(arn),
                    document: serde_json::Value::Null,
                    ..JobTemplate::default()
                })))
            }
            OperatorRequest::DescribeJobTemplate { job_template_id } => Ok(OperatorOk::Template(
                Box::new(self.template(&job_template_id).map_err(error)?),
            )),
            OperatorRequest::ListJobTemplates { page } => {
                let limit = page_size(&page)?;
                let (job_templates, next_token) =
                    self.list_templates(&page, limit).map_err(error)?;
                Ok(OperatorOk::Templates(TemplatesPage {
                    job_templates,
                    next_token,
                }))
            }
            OperatorRequest::DeleteJobTemplate { job_template_id } => {
                done(self.delete_template(&job_template_id))
            }
            OperatorRequest::ListExecutions {
                thing,
                job_id,
                status,
                page,
            } => {
                let limit = page_size(&page)?;
                let (executions, next_token) = self
                    .list_executions(thing, job_id, status, page.next_token, limit)
                    .map_err(stored)?;
                Ok(OperatorOk::Executions(ExecutionsPage {
                    executions,
                    next_token,
                }))
            }
        }
    }

    /// A job as `describeJob` answers at `now_ms`.
    fn description(&self, job: &Job, now_ms: u64) -> Result<JobDescription, StoreError> {
        let windows = job.maintenance_windows();
        let executions = self.store.counts(&job.id)?;
        let rollout = self
            .store
            .rollouts()?
            .into_iter()
            .find(|r| r.job_id == job.id);
        let notified: u64 = executions.values().sum();
        let total = match &rollout {
            Some(rollout) => rollout.total,
            None => notified.max(job.targets.len() as u64),
        };
        let rate = match &rollout {
            Some(rollout) => {
                let succeeded = executions.get(&Status::Succeeded).copied().unwrap_or(0);
                rollout::rate(job, rollout.next, succeeded).0
            }
            None => None,
        };
        Ok(JobDescription {
            job_id: job.id.clone(),
            job_arn: super::arn("job", &job.id),
            status: job.status,
            document: job.document.clone(),
            targets: job.targets.clone(),
            force_canceled: job.force_canceled,
            reason_code: job.reason_code.clone(),
            comment: job.comment.clone(),
            config: job.config.clone(),
            target_selection: job.target_selection,
            scheduling_config: job.scheduling_config.clone(),
            job_template_arn: job.job_template_arn.clone(),
            document_parameters: job.document_parameters.clone(),
            created_at: job.created_at / 1000,
            last_updated_at: job.last_updated_at / 1000,
            completed_at: job.completed_at.map(|at| at / 1000),
            job_process_details: JobProcessDetails::from_counts(&executions),
            rollout: RolloutProgress {
                notified_things: rollout.as_ref().map_or(notified, |r| r.next),
                total_things: total,
                rate_per_minute: rate,
                window_closes_at: windows
                    .iter()
                    .filter_map(|w| w.open_until(now_ms))
                    .max()
                    .map(|at| at / 1000),
                next_window_at: match schedule::window(windows, now_ms) {
                    Err(Some(at)) => Some(at / 1000),
                    _ => None,
                },
            },
            executions,
        })
    }

    /// A page of latest executions: of one job (in its things' order; the token is an index),
    /// or of one thing or every thing (in (thing, job id) order; the token is `thing/job`).
    fn list_executions(
        &self,
        thing: Option<String>,
        job_id: Option<String>,
        status: Option<Status>,
        token: Option<String>,
        limit: usize,
    ) -> Result<(Vec<ExecutionListing>, Option<String>), StoreError> {
        let mut executions = Vec::new();
        let keep = |execution: &Execution| status.is_none_or(|s| s == execution.status);
        if let (Some(job_id), None) = (&job_id, &thing) {
            // Every thing the job runs on, from the token's index.
            let mut at: u64 = token.and_then(|t| t.parse().ok()).unwrap_or(0);
            loop {
                let things = self.store.job_things(job_id, at, 256)?;
                if things.is_empty() {
                    return Ok((executions, None));
                }
                for thing in things {
                    if executions.len() == limit {
                        return Ok((executions, Some(at.to_string())));
                    }
                    at += 1;
                    let record = self.store.thing(&thing)?;
                    if let Some(execution) = record.latest(job_id).filter(|e| keep(e)) {
                        executions.push(listing(&thing, execution));
                    }
                }
            }
        }
        let mut things = match thing {
            Some(thing) => vec![thing],
            None => self.store.things()?,
        };
        things.sort();
        let after = token.as_deref().and_then(|t| t.split_once('/'));
        for thing in things {
            if after.is_some_and(|(t, _)| thing.as_str() < t) {
                continue;
            }
            let record = self.store.thing(&thing)?;
            for (id, list) in &record.executions {
                let Some(execution) = list.last() else {
                    continue;
                };
                if after.is_some_and(|(t, j)| (thing.as_str(), id.as_str()) <= (t, j))
                    || job_id.as_ref().is_some_and(|j| j != id)
                    || !keep(execution)
                {
                    continue;
                }
                if executions.len() == limit {
                    let last: &ExecutionListing = &executions[limit - 1];
                    let token = format!("{}/{}", last.thing_name, last.job_id);
                    return Ok((executions, Some(token)));
                }
                executions.push(listing(&thing, execution));
            }
        }
        Ok((executions, None))
    }
}

fn listing(thing: &str, execution: &Execution) -> ExecutionListing {
    ExecutionListing {
        thing_name: thing.to_owned(),
        job_id: execution.job_id.clone(),
        status: execution.status,
        queued_at: execution.queued_at,
        started_at: execution.started_at,
        last_updated_at: execution.last_updated_at,
        execution_number: execution.execution_number,
        version_number: execution.version_number,
    }
}

/// A list call's page size: `maxResults` (1–250), every entry when absent.
/// How many entries a page asks for (none: every one), or why that is no page size.
pub(crate) fn page_size(page: &PageRequest) -> Result<usize, OperatorError> {
    match page.max_results {
        None => Ok(usize::MAX),
        Some(n) if (1..=PageRequest::MAX_RESULTS).contains(&n) => Ok(n as usize),
        Some(n) => Err(OperatorError {
            code: "InvalidRequest".into(),
            message: format!("maxResults {n}: 1-{}", PageRequest::MAX_RESULTS),
        }),
    }
}

fn stored(e: StoreError) -> OperatorError {
    error(JobsError::Store(e))
}

/// A refusal as the operator API answers it: AWS's error code for its kind, and its message.
pub(crate) fn error(e: JobsError) -> OperatorError {
    let code = match &e {
        JobsError::Invalid(_) => "InvalidRequest",
        JobsError::JobExists(_) => "Conflict",
        JobsError::Exists(_) => "ResourceAlreadyExists",
        JobsError::NotFound(_) => "ResourceNotFound",
        JobsError::InProgress(_) | JobsError::InvalidState(_) => "InvalidStateTransition",
        JobsError::VersionConflict(_) => "VersionConflict",
        JobsError::Store(_) => "InternalError",
    };
    OperatorError {
        code: code.into(),
        message: e.to_string(),
    }
}
