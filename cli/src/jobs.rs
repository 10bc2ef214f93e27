//! `mqstore jobs ...`: the operator API, and a thing's notifications for a person at a
//! terminal. The names of commands and options are fixed: other tools script against them.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use mqstore_core::client::ClientError;
use mqstore_core::client::jobs::JobNotification;
use mqstore_core::jobs::{
    AbortAction, AbortConfig, AbortCriteria, EndBehavior, JobConfig, JobCreated, JobSpec,
    JobTemplate, JobUpdate, MaintenanceWindow, OperatorRequest, PageRequest, RolloutConfig,
    SchedulingConfig, Status, TargetSelection,
};
use mqstore_net::client::Client;
use mqstore_net::jobs::{ExecutionFilter, Page};
use serde::Serialize;
use serde_json::{Value, json};

use crate::call::CallArgs;
use crate::shutdown_signal;

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant, reason = "parsed once per process")]
pub enum JobsCommand {
    /// Create a job: queue an execution of it on every thing it targets.
    Create {
        job_id: String,
        /// What to run it on, comma separated: thing names, thinggroup/NAME (a group's
        /// things), or AWS ARNs of either.
        #[arg(long, value_delimiter = ',', required = true)]
        targets: Vec<String>,
        #[command(flatten)]
        document: DocumentArgs,
        /// Start from this job template (its document and settings; the options given here
        /// win).
        #[arg(long)]
        template: Option<String>,
        /// A value for the template document's ${aws:iot:parameter:NAME}: NAME=VALUE,
        /// repeatable.
        #[arg(long, value_parser = parse_param)]
        param: Vec<(String, String)>,
        /// Things added to its groups later get the job too (targetSelection CONTINUOUS).
        #[arg(long)]
        continuous: bool,
        /// Start the rollout at this UTC time (YYYY-MM-DDTHH:MM); SCHEDULED until then.
        #[arg(long)]
        start_time: Option<String>,
        /// End it at this UTC time (YYYY-MM-DDTHH:MM), as --end-behavior says.
        #[arg(long)]
        end_time: Option<String>,
        /// At --end-time: STOP_ROLLOUT (the default), CANCEL or FORCE_CANCEL.
        #[arg(long, value_parser = parse_end_behavior)]
        end_behavior: Option<EndBehavior>,
        /// Roll out only in this maintenance window: 'cron(MIN HOUR DOM MONTH DOW YEAR)=MINUTES'
        /// (AWS's cron, UTC), repeatable.
        #[arg(long, value_parser = parse_window)]
        window: Vec<MaintenanceWindow>,
        /// An IN_PROGRESS execution times out after this many minutes (1-10080).
        #[arg(long)]
        in_progress_timeout_minutes: Option<u32>,
        /// Queue an execution that ends FAILED or TIMED_OUT again, up to this many times
        /// (0-10).
        #[arg(long, default_value_t = 0)]
        max_retries: u32,
        /// Notify at most this many things per minute (1-1000).
        #[arg(long)]
        max_per_minute: Option<u32>,
        /// Cancel the job once PERCENT % of at least MIN executed things ended with TYPE
        /// (FAILED, REJECTED, TIMED_OUT or ALL): TYPE:PERCENT:MIN, repeatable.
        #[arg(long, value_parser = parse_abort)]
        abort: Vec<AbortCriteria>,
        /// A description of the job.
        #[arg(long)]
        description: Option<String>,
    },
    /// Change a job's description or rate (for every other setting: `jobs call`).
    Update {
        job_id: String,
        #[arg(long)]
        description: Option<String>,
        /// Notify at most this many things per minute from now on (1-1000).
        #[arg(long)]
        max_per_minute: Option<u32>,
    },
    /// Cancel a job: its QUEUED executions become CANCELED.
    Cancel {
        job_id: String,
        /// Cancel IN_PROGRESS executions too.
        #[arg(long)]
        force: bool,
        /// Why, for the record: [A-Z0-9_]+.
        #[arg(long)]
        reason_code: Option<String>,
        /// A comment, for the record.
        #[arg(long)]
        comment: Option<String>,
    },
    /// Cancel one thing's execution of a job.
    CancelExecution {
        job_id: String,
        #[arg(long, required = true)]
        thing: String,
        /// Cancel it even when IN_PROGRESS.
        #[arg(long)]
        force: bool,
        /// Only if the execution is at this version.
        #[arg(long)]
        expected_version: Option<u64>,
    },
    /// Delete a job and its executions (a COMPLETED or CANCELED one; any with --force).
    DeleteJob {
        job_id: String,
        #[arg(long)]
        force: bool,
    },
    /// Delete one execution of a job.
    Delete {
        job_id: String,
        /// The thing whose execution to delete.
        #[arg(long, required = true)]
        thing: String,
        /// Delete it even when IN_PROGRESS.
        #[arg(long)]
        force: bool,
    },
    /// List jobs; with --thing or --status, list executions instead.
    List {
        /// Only this thing's executions.
        #[arg(long)]
        thing: Option<String>,
        /// Only executions in this status (QUEUED, IN_PROGRESS, SUCCEEDED, FAILED, REJECTED,
        /// TIMED_OUT, CANCELED, REMOVED).
        #[arg(long, value_parser = parse_status)]
        status: Option<Status>,
        /// At most this many (1-250); the next page's token is printed after them.
        #[arg(long)]
        max_results: Option<u32>,
        /// Go on from this token (printed by the page before).
        #[arg(long)]
        next_token: Option<String>,
    },
    /// Describe a job; with --thing, its execution on that thing.
    Describe {
        job_id: String,
        /// The thing whose execution to describe.
        #[arg(long)]
        thing: Option<String>,
    },
    /// Send any operator call as AWS's JSON (`{"op": "updateJob", "jobId": ..., ...}`: see
    /// docs/protocol/jobs.md) and print the answer.
    Call {
        /// The request: a JSON object with "op".
        request: String,
    },
    /// Print a thing's notify and notify-next notifications as they arrive, until Ctrl-C.
    Watch {
        /// The thing to watch.
        #[arg(long, required = true)]
        thing: String,
    },
}

/// The job document, inline or from a file.
#[derive(Args)]
#[group(required = false, multiple = false)]
pub struct DocumentArgs {
    /// The job document: a JSON object.
    #[arg(long)]
    document: Option<String>,
    /// Read the job document (a JSON object) from this file.
    #[arg(long)]
    document_file: Option<PathBuf>,
}

impl DocumentArgs {
    /// The document given, as a JSON object (`None` when none is).
    fn read(&mut self) -> Result<Option<Value>, String> {
        let (text, from) = match (self.document.take(), &self.document_file) {
            (Some(text), _) => (text, "--document".to_owned()),
            (None, Some(path)) => (
                std::fs::read_to_string(path)
                    .map_err(|e| format!("--document-file {}: {e}", path.display()))?,
                format!("--document-file {}", path.display()),
            ),
            (None, None) => return Ok(None),
        };
        match serde_json::from_slice::<Value>(text.as_bytes()) {
            Ok(value @ Value::Object(_)) => Ok(Some(value)),
            Ok(_) => Err(format!("{from}: the job document must be a JSON object")),
            Err(e) => Err(format!("{from}: not JSON: {e}")),
        }
    }
}

/// `TYPE:PERCENT:MIN`.
fn parse_abort(text: &str) -> Result<AbortCriteria, String> {
    let usage = || format!("{text:?}: TYPE:PERCENT:MIN, as FAILED:10:100");
    let mut parts = text.split(':');
    let (Some(kind), Some(percent), Some(min), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(usage());
    };
    let failure_type = serde_json::from_value(json!(kind.to_ascii_uppercase()))
        .map_err(|_| format!("{kind:?}: FAILED, REJECTED, TIMED_OUT or ALL"))?;
    Ok(AbortCriteria {
        failure_type,
        action: AbortAction::Cancel,
        threshold_percentage: percent.parse().map_err(|_| usage())?,
        min_number_of_executed_things: min.parse().map_err(|_| usage())?,
    })
}

/// `NAME=VALUE`.
fn parse_param(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .ok_or_else(|| format!("{text:?}: NAME=VALUE"))
}

fn parse_end_behavior(text: &str) -> Result<EndBehavior, String> {
    serde_json::from_value(json!(text.to_ascii_uppercase()))
        .map_err(|_| format!("{text:?}: STOP_ROLLOUT, CANCEL or FORCE_CANCEL"))
}

/// `cron(...)=MINUTES`.
fn parse_window(text: &str) -> Result<MaintenanceWindow, String> {
    let usage = || format!("{text:?}: 'cron(MIN HOUR DOM MONTH DOW YEAR)=MINUTES'");
    let (cron, minutes) = text.rsplit_once('=').ok_or_else(usage)?;
    Ok(MaintenanceWindow {
        start_time: cron.trim().to_owned(),
        duration_in_minutes: minutes.trim().parse().map_err(|_| usage())?,
    })
}

fn parse_status(text: &str) -> Result<Status, String> {
    Status::parse(&text.to_ascii_uppercase()).ok_or_else(|| {
        "one of QUEUED, IN_PROGRESS, SUCCEEDED, FAILED, REJECTED, TIMED_OUT, CANCELED, REMOVED"
            .into()
    })
}

/// A jobs command with its document read and parsed (a bad one is a usage error: nothing is
/// sent).
pub struct JobsCall {
    command: JobsCommand,
    document: Option<Value>,
}

impl JobsCall {
    pub fn read(mut command: JobsCommand) -> Result<Self, String> {
        let document = match &mut command {
            JobsCommand::Create {
                document, template, ..
            } => match (document.read()?, template) {
                (None, None) => {
                    return Err("give --document, --document-file or --template".into());
                }
                (document, _) => document,
            },
            _ => None,
        };
        Ok(Self { command, document })
    }

    /// Runs the command; the exit code on success.
    pub async fn run(self, client: &Client, call: CallArgs) -> Result<ExitCode, ClientError> {
        match self.command {
            JobsCommand::Create {
                job_id,
                targets,
                in_progress_timeout_minutes,
                max_retries,
                max_per_minute,
                abort,
                description,
                template,
                param,
                continuous,
                start_time,
                end_time,
                end_behavior,
                window,
                ..
            } => {
                let mut spec =
                    JobSpec::new(job_id.clone(), targets, self.document.unwrap_or_default())
                        .in_progress_timeout(in_progress_timeout_minutes)
                        .retries(max_retries);
                spec.config.description = description;
                spec.config.job_executions_rollout_config = rate(max_per_minute);
                spec.config.abort_config = (!abort.is_empty()).then_some(AbortConfig {
                    criteria_list: abort,
                });
                spec.job_template_arn = template;
                spec.document_parameters = param.into_iter().collect();
                spec.target_selection = continuous.then_some(TargetSelection::Continuous);
                let scheduling = SchedulingConfig {
                    start_time,
                    end_time,
                    end_behavior,
                    maintenance_windows: window,
                };
                spec.scheduling_config =
                    (scheduling != SchedulingConfig::default()).then_some(scheduling);
                let created: JobCreated = client
                    .operate(OperatorRequest::CreateJob(Box::new(spec)))
                    .await?
                    .read()?;
                let count = created.targets;
                print(
                    call,
                    &json!({ "jobId": job_id, "targets": count }),
                    format!("created {job_id} on {count} thing(s)"),
                );
            }
            JobsCommand::Update {
                job_id,
                description,
                max_per_minute,
            } => {
                let update = JobUpdate {
                    job_id: job_id.clone(),
                    changes: JobConfig {
                        description,
                        job_executions_rollout_config: rate(max_per_minute),
                        ..JobConfig::default()
                    },
                };
                client.update_job(update).await?;
                print(
                    call,
                    &json!({ "jobId": job_id, "updated": true }),
                    format!("updated {job_id}"),
                );
            }
            JobsCommand::Cancel {
                job_id,
                force,
                reason_code,
                comment,
            } => {
                client
                    .cancel_job_with(&job_id, force, reason_code, comment)
                    .await?;
                print(
                    call,
                    &json!({ "jobId": job_id, "canceled": true }),
                    format!("canceled {job_id}"),
                );
            }
            JobsCommand::CancelExecution {
                job_id,
                thing,
                force,
                expected_version,
            } => {
                client
                    .cancel_job_execution(&job_id, &thing, force, expected_version)
                    .await?;
                print(
                    call,
                    &json!({ "jobId": job_id, "thingName": thing, "canceled": true }),
                    format!("canceled the execution of {job_id} on {thing}"),
                );
            }
            JobsCommand::DeleteJob { job_id, force } => {
                client.delete_job(&job_id, force).await?;
                print(
                    call,
                    &json!({ "jobId": job_id, "deleted": true }),
                    format!("deleted {job_id}"),
                );
            }
            JobsCommand::Call { request } => {
                let request: OperatorRequest =
                    serde_json::from_slice(request.as_bytes()).map_err(|e| ClientError::Jobs {
                        code: "InvalidRequest".into(),
                        message: format!("the request fits no operator call: {e}"),
                        execution_state: None,
                    })?;
                let answer = client.operate(request).await?.into_json();
                let plain = serde_json::to_string_pretty(&answer).unwrap_or_default();
                print(call, &answer, plain);
            }
            JobsCommand::Delete {
                job_id,
                thing,
                force,
            } => {
                client.delete_job_execution(&job_id, &thing, force).await?;
                print(
                    call,
                    &json!({ "jobId": job_id, "thingName": thing, "deleted": true }),
                    format!("deleted the execution of {job_id} on {thing}"),
                );
            }
            JobsCommand::List {
                thing: None,
                status: None,
                max_results,
                next_token,
            } => {
                let page = PageRequest {
                    max_results,
                    next_token,
                };
                let paged = page != PageRequest::default();
                let jobs = client.list_jobs_page(None, page).await?;
                let mut lines: Vec<String> = jobs
                    .items
                    .iter()
                    .map(|j| {
                        let status = serde_json::to_value(j.status).unwrap_or_default();
                        let status = status.as_str().unwrap_or_default().to_owned();
                        format!("{}\t{status}\t{} thing(s)", j.job_id, j.targets)
                    })
                    .collect();
                lines.extend(jobs.next_token.iter().map(|t| format!("next token: {t}")));
                match paged {
                    true => print(
                        call,
                        &json!({ "jobs": jobs.items, "nextToken": jobs.next_token }),
                        lines.join("\n"),
                    ),
                    false => print(call, &jobs.items, lines.join("\n")),
                }
            }
            JobsCommand::List { thing, status, .. } => {
                let filter = ExecutionFilter {
                    thing,
                    job_id: None,
                    status,
                };
                let mut executions = client.list_job_executions(filter).await?;
                executions.sort_by(|a, b| {
                    (&a.thing_name, a.queued_at, &a.job_id).cmp(&(
                        &b.thing_name,
                        b.queued_at,
                        &b.job_id,
                    ))
                });
                let lines: Vec<String> = executions
                    .iter()
                    .map(|e| {
                        format!(
                            "{}\t{}\t{}\texecution {}",
                            e.thing_name,
                            e.job_id,
                            e.status.as_str(),
                            e.execution_number
                        )
                    })
                    .collect();
                print(call, &executions, lines.join("\n"));
            }
            JobsCommand::Describe {
                job_id,
                thing: None,
            } => {
                let job = client.describe_job(&job_id).await?;
                let counts: Vec<String> = job
                    .executions
                    .iter()
                    .map(|(status, n)| format!("{} {n}", status.as_str()))
                    .collect();
                let status = serde_json::to_value(job.status).unwrap_or_default();
                let rate = job
                    .rollout
                    .rate_per_minute
                    .map_or(String::new(), |r| format!(" at {r} a minute"));
                let plain = format!(
                    "job {} ({})\ntargets: {}\nrollout: {} of {} things notified{rate}\nexecutions: {}\ndocument: {}",
                    job.job_id,
                    status.as_str().unwrap_or_default(),
                    job.targets.join(","),
                    job.rollout.notified_things,
                    job.rollout.total_things,
                    counts.join(", "),
                    job.document
                );
                print(call, &job, plain);
            }
            JobsCommand::Describe {
                job_id,
                thing: Some(thing),
            } => {
                let execution = client.describe_job_execution(&job_id, &thing).await?;
                let plain = format!(
                    "{} on {}: {} (execution {}, version {})",
                    execution.job_id,
                    thing,
                    execution.status.as_str(),
                    execution.execution_number,
                    execution.version_number
                );
                print(call, &execution, plain);
            }
            JobsCommand::Watch { thing } => return watch(client, call, &thing).await,
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// `jobExecutionsRolloutConfig` of a fixed rate.
fn rate(max_per_minute: Option<u32>) -> Option<RolloutConfig> {
    max_per_minute.map(|max| RolloutConfig {
        maximum_per_minute: Some(max),
        exponential_rate: None,
    })
}

/// Prints `value` as JSON with `--json`, else `plain`.
fn print(call: CallArgs, value: &impl Serialize, plain: String) {
    if call.json {
        println!("{}", serde_json::to_string(value).unwrap_or_default());
    } else if !plain.is_empty() {
        println!("{plain}");
    }
}

async fn watch(client: &Client, call: CallArgs, thing: &str) -> Result<ExitCode, ClientError> {
    let jobs = client.jobs(thing).await?;
    eprintln!("watching the jobs of {thing}; Ctrl-C to stop");
    loop {
        tokio::select! {
            _ = shutdown_signal() => return Ok(ExitCode::SUCCESS),
            notification = jobs.next_notification() => {
                let Some(notification) = notification else { return Ok(ExitCode::from(4)) };
                let plain = match &notification {
                    JobNotification::Notify { in_progress, queued, .. } => {
                        let ids = |list: &[mqstore_core::jobs::JobSummary]| {
                            list.iter().map(|s| s.job_id.as_str()).collect::<Vec<_>>().join(",")
                        };
                        format!("notify in-progress=[{}] queued=[{}]", ids(in_progress), ids(queued))
                    }
                    JobNotification::NotifyNext { execution: Some(e), .. } => {
                        format!("notify-next {} {} (execution {})", e.job_id, e.status.as_str(), e.execution_number)
                    }
                    JobNotification::NotifyNext { execution: None, .. } => "notify-next (none)".into(),
                };
                print(call, &notification, plain);
            }
        }
    }
}

/// The exit code of a refusal: 1 for what does not exist, 3 for the rest.
pub fn refusal_exit_code(code: &str) -> ExitCode {
    match code {
        "ResourceNotFound" => ExitCode::from(1),
        _ => ExitCode::from(3),
    }
}

/// `mqstore groups ...`: static thing groups, which jobs target as `thinggroup/NAME`.
#[derive(Subcommand)]
pub enum GroupsCommand {
    /// Make a thing group.
    Create {
        name: String,
        #[arg(long)]
        description: Option<String>,
    },
    /// Remove a group and its membership (jobs keep the things they have).
    Delete { name: String },
    /// Print a group.
    Describe { name: String },
    /// List groups, in name order.
    List {
        #[command(flatten)]
        page: PageArgs,
    },
    /// Add things to a group (CONTINUOUS jobs on it reach them).
    Add {
        name: String,
        #[arg(required = true)]
        things: Vec<String>,
    },
    /// Remove things from a group (their QUEUED executions of CONTINUOUS jobs on it become
    /// REMOVED).
    Remove {
        name: String,
        #[arg(required = true)]
        things: Vec<String>,
    },
    /// List a group's things, in name order.
    Things {
        name: String,
        #[command(flatten)]
        page: PageArgs,
    },
}

/// `--max-results` and `--next-token` of a list command.
#[derive(Args)]
pub struct PageArgs {
    /// At most this many (1-250); the next page's token is printed after them.
    #[arg(long)]
    max_results: Option<u32>,
    /// Go on from this token (printed by the page before).
    #[arg(long)]
    next_token: Option<String>,
}

impl From<PageArgs> for PageRequest {
    fn from(page: PageArgs) -> Self {
        Self {
            max_results: page.max_results,
            next_token: page.next_token,
        }
    }
}

/// Prints a page: its entries one per line (and the next token), or its JSON as the service
/// sent it (the entries under `field`, and `nextToken`).
fn print_page<T: serde::Serialize>(
    call: CallArgs,
    page: Page<T>,
    field: &str,
    line: impl Fn(&T) -> String,
) {
    let mut lines: Vec<String> = page.items.iter().map(line).collect();
    let mut answer = json!({ field: page.items });
    if let Some(token) = page.next_token {
        lines.push(format!("next token: {token}"));
        answer["nextToken"] = json!(token);
    }
    print(call, &answer, lines.join("\n"));
}

impl GroupsCommand {
    pub async fn run(self, client: &Client, call: CallArgs) -> Result<ExitCode, ClientError> {
        match self {
            Self::Create { name, description } => {
                let group = client.create_thing_group(&name, description).await?;
                let plain = format!("created {name} ({})", group.thing_group_arn);
                print(call, &group, plain);
            }
            Self::Delete { name } => {
                client.delete_thing_group(&name).await?;
                let answer = json!({ "thingGroupName": name, "deleted": true });
                print(call, &answer, format!("deleted {name}"));
            }
            Self::Describe { name } => {
                let group = client.describe_thing_group(&name).await?;
                let plain = serde_json::to_string_pretty(&group).unwrap_or_default();
                print(call, &group, plain);
            }
            Self::List { page } => {
                let groups = client.list_thing_groups(page.into()).await?;
                print_page(call, groups, "thingGroups", |g| g.group_name.clone());
            }
            Self::Add { name, things } => {
                for thing in &things {
                    client.add_thing_to_thing_group(&name, thing).await?;
                }
                let answer = json!({ "thingGroupName": name, "added": things });
                print(
                    call,
                    &answer,
                    format!("added {} thing(s) to {name}", things.len()),
                );
            }
            Self::Remove { name, things } => {
                for thing in &things {
                    client.remove_thing_from_thing_group(&name, thing).await?;
                }
                let answer = json!({ "thingGroupName": name, "removed": things });
                let plain = format!("removed {} thing(s) from {name}", things.len());
                print(call, &answer, plain);
            }
            Self::Things { name, page } => {
                let things = client
                    .list_things_in_thing_group(&name, page.into())
                    .await?;
                print_page(call, things, "things", String::clone);
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// `mqstore templates ...`: job templates, which `jobs create --template` starts from.
#[derive(Subcommand)]
pub enum TemplatesCommand {
    /// Store a job template: a document (which may hold ${aws:iot:parameter:NAME}
    /// placeholders) and settings.
    Create {
        template_id: String,
        #[command(flatten)]
        document: DocumentArgs,
        #[arg(long)]
        description: Option<String>,
        /// Notify at most this many things per minute (1-1000).
        #[arg(long)]
        max_per_minute: Option<u32>,
        /// An IN_PROGRESS execution times out after this many minutes (1-10080).
        #[arg(long)]
        in_progress_timeout_minutes: Option<u32>,
    },
    /// Print a template.
    Describe { template_id: String },
    /// List templates, in id order.
    List {
        #[command(flatten)]
        page: PageArgs,
    },
    /// Remove a template (jobs made from it stay).
    Delete { template_id: String },
}

impl TemplatesCommand {
    pub async fn run(mut self, client: &Client, call: CallArgs) -> Result<ExitCode, ClientError> {
        let document = match &mut self {
            Self::Create { document, .. } => match document.read() {
                Ok(Some(document)) => document,
                Ok(None) => return usage("give --document or --document-file"),
                Err(e) => return usage(&e),
            },
            _ => Value::Null,
        };
        match self {
            Self::Create {
                template_id,
                description,
                max_per_minute,
                in_progress_timeout_minutes,
                ..
            } => {
                let template = JobTemplate {
                    job_template_id: template_id.clone(),
                    document,
                    config: JobConfig {
                        description,
                        job_executions_rollout_config: rate(max_per_minute),
                        ..JobSpec::default()
                            .in_progress_timeout(in_progress_timeout_minutes)
                            .config
                    },
                    ..JobTemplate::default()
                };
                let arn = client.create_job_template(template).await?;
                let answer = json!({ "jobTemplateId": template_id, "jobTemplateArn": arn });
                print(call, &answer, format!("created {template_id} ({arn})"));
            }
            Self::Describe { template_id } => {
                let template = client.describe_job_template(&template_id).await?;
                let plain = serde_json::to_string_pretty(&template).unwrap_or_default();
                print(call, &template, plain);
            }
            Self::List { page } => {
                let templates = client.list_job_templates(page.into()).await?;
                print_page(call, templates, "jobTemplates", |t| {
                    t.job_template_id.clone()
                });
            }
            Self::Delete { template_id } => {
                client.delete_job_template(&template_id).await?;
                let answer = json!({ "jobTemplateId": template_id, "deleted": true });
                print(call, &answer, format!("deleted {template_id}"));
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// A usage error found after parsing (exit code 2, as clap's).
fn usage(message: &str) -> Result<ExitCode, ClientError> {
    eprintln!("error: {message}");
    Ok(ExitCode::from(2))
}
