//! Layer 1's jobs (the AWS IoT Jobs API: a thing's side, and the operator calls) and commands
//! (send a command to a device and await its answer). Records are JSON text in the shapes the
//! AWS API and the `mqstore` command print, for the firmware's own JSON parser.

use std::collections::BTreeMap;
use std::ffi::{CString, c_char, c_int};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mqstore_core::client::jobs::{JobNotification, Update};
use mqstore_core::jobs::{JobSpec, Status, check_operator_call};
use mqstore_net::blocking::Jobs;
use mqstore_net::jobs::StartNext;

use crate::client::{Events, mqstore_client};
use crate::error::{Error, Result, ffi, ffi_void};
use crate::handles::{handle, new_handle, take_handle};
use crate::types::{
    command_request, command_start_request, json_arg, mqstore_command_options, opt_str_arg,
    out_arg, str_arg, write_opt,
};

/// A JSON string for C: `*out` gets it (the caller's, freed with `mqstore_string_free`).
pub(crate) fn json_out(out: &mut *mut c_char, value: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string(value)
        .map_err(|e| Error::new(crate::mqstore_status::MQSTORE_ERR_INTERNAL, e.to_string()))?;
    *out = CString::new(text).unwrap_or_default().into_raw();
    Ok(())
}

/// Frees a string the library returned (JSON records). NULL is ignored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_string_free(text: *mut c_char) {
    ffi_void(|| {
        if !text.is_null() {
            // SAFETY: made by `CString::into_raw` in `json_out`.
            drop(unsafe { CString::from_raw(text) });
        }
        Ok(())
    });
}

/// Status details: NULL, or a JSON object of strings (`{"progress": "40%"}`).
unsafe fn details_arg(json: *const c_char) -> Result<BTreeMap<String, String>> {
    // SAFETY: NULL or the caller's string.
    match unsafe { opt_str_arg(json, "status_details") }? {
        None => Ok(BTreeMap::new()),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            Error::invalid(format!(
                "status_details is a JSON object of strings, like {{\"progress\": \"40%\"}}: {e}"
            ))
        }),
    }
}

/// Creates a job: `document_json` (a JSON object) for each of the `target_count` things in
/// `targets`. `in_progress_timeout_minutes`: 0 for none; `max_retries`: 0–10.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), MQSTORE_ERR_JOBS (refused: AWS's code
/// in `mqstore_last_error`), MQSTORE_ERR_REQUEST_TIMEOUT, MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_job_create(
    client: *const mqstore_client,
    job_id: *const c_char,
    targets: *const *const c_char,
    target_count: usize,
    document_json: *const c_char,
    in_progress_timeout_minutes: u32,
    max_retries: u32,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let client = unsafe { handle(client, "client") }?;
        let job_id = unsafe { str_arg(job_id, "job_id") }?.to_owned();
        if targets.is_null() && target_count > 0 {
            return Err(Error::invalid("targets is NULL with a count"));
        }
        let targets = (0..target_count)
            .map(|i| unsafe { str_arg(*targets.add(i), "a target") }.map(str::to_owned))
            .collect::<Result<Vec<_>>>()?;
        let document = unsafe { json_arg(document_json, "document_json") }?;
        let spec = JobSpec::new(job_id, targets, document)
            .in_progress_timeout(
                (in_progress_timeout_minutes > 0).then_some(in_progress_timeout_minutes),
            )
            .retries(max_retries);
        Ok(client.client().create_job(spec)?)
    })
}

/// Cancels a job (`force`: also executions in progress).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), MQSTORE_ERR_JOBS (refused: AWS's code
/// in `mqstore_last_error`), MQSTORE_ERR_REQUEST_TIMEOUT, MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_job_cancel(
    client: *const mqstore_client,
    job_id: *const c_char,
    force: bool,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let client = unsafe { handle(client, "client") }?;
        let job_id = unsafe { str_arg(job_id, "job_id") }?;
        Ok(client.client().cancel_job(job_id, force)?)
    })
}

/// A job and its executions' counts, as JSON in `*json` (free with `mqstore_string_free`).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), MQSTORE_ERR_JOBS (refused: AWS's code
/// in `mqstore_last_error`), MQSTORE_ERR_REQUEST_TIMEOUT, MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_job_describe(
    client: *const mqstore_client,
    job_id: *const c_char,
    json: *mut *mut c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(json, "json") }?;
        *out = std::ptr::null_mut();
        let client = unsafe { handle(client, "client") }?;
        let job_id = unsafe { str_arg(job_id, "job_id") }?;
        let job = client.client().describe_job(job_id)?;
        json_out(out, &job)
    })
}

/// Any operator call of the jobs service: `request_json` is `{"op": ..., ...}` with AWS's
/// field names (`updateJob`, `deleteJob`, `cancelJobExecution`, `listJobs` with `maxResults`
/// and `nextToken`, a `createJob` with `jobExecutionsRolloutConfig`, `abortConfig`,
/// `schedulingConfig` or `jobTemplateArn`, the thing group calls (`createThingGroup`,
/// `addThingToThingGroup`, `listThingsInThingGroup`, ...) and the job template calls
/// (`createJobTemplate`, ...); docs/protocol/jobs.md). The answer goes to `*json` as JSON (for describe calls and
/// unpaged lists, the record or the list alone; free it with `mqstore_string_free`); `json`
/// may be NULL when the answer is not wanted. A request that is not a JSON object naming a
/// call in "op" is MQSTORE_ERR_INVALID_ARGUMENT and nothing is sent; the service checks the
/// fields, and a refusal (a field out of range: `InvalidRequest`; `ResourceNotFound`, ...)
/// is MQSTORE_ERR_JOBS with AWS's code in `mqstore_last_error`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_jobs_operate(
    client: *const mqstore_client,
    request_json: *const c_char,
    json: *mut *mut c_char,
) -> c_int {
    ffi(|| {
        let mut out = match json.is_null() {
            true => None,
            // SAFETY: the caller's pointer, checked by the helper.
            false => Some(unsafe { out_arg(json, "json") }?),
        };
        if let Some(out) = out.as_mut() {
            **out = std::ptr::null_mut();
        }
        // SAFETY: the caller's pointers, checked by the helpers.
        let client = unsafe { handle(client, "client") }?;
        let request: serde_json::Value = unsafe { json_arg(request_json, "request_json") }?;
        check_operator_call(&request).map_err(Error::invalid)?;
        let answer = client.client().operate_json(&request)?;
        match out {
            Some(out) => json_out(out, &answer.into_json()),
            None => Ok(()),
        }
    })
}

/// One thing's side of the jobs API (the AWS IoT Jobs MQTT API): made by `mqstore_jobs_open`,
/// freed by `mqstore_jobs_free` (before its client). Calls may come from any thread.
pub struct mqstore_jobs {
    jobs: Jobs,
    notifications: Arc<Events<JobNotification>>,
}

/// Acts as `thing`: subscribes to its jobs replies and notifications. `*out` is the caller's:
/// free it with `mqstore_jobs_free` before the client.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), MQSTORE_ERR_CONNECTION_LOST (the
/// client closed or the connection dropped before the subscription was made).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_jobs_open(
    client: *const mqstore_client,
    thing: *const c_char,
    out: *mut *mut mqstore_jobs,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        *out = std::ptr::null_mut();
        let c = unsafe { handle(client, "client") }?;
        let thing = unsafe { str_arg(thing, "thing") }?;
        let notifications = Arc::new(Events::default());
        let jobs = c.client().jobs_with(thing, notifications.listener())?;
        *out = new_handle(mqstore_jobs {
            jobs,
            notifications,
        });
        Ok(())
    })
}

/// Frees a jobs handle (NULL is ignored).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_jobs_free(jobs: *mut mqstore_jobs) {
    ffi_void(|| {
        // SAFETY: a handle from `mqstore_jobs_open`, checked.
        unsafe { take_handle(jobs, "jobs") }.map(drop)
    });
}

/// The thing's pending executions (`{"inProgressJobs": [...], "queuedJobs": [...]}`) as JSON
/// in `*json` (free it with `mqstore_string_free`).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), MQSTORE_ERR_JOBS (refused: AWS's code
/// in `mqstore_last_error`), MQSTORE_ERR_REQUEST_TIMEOUT, MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_jobs_pending(
    jobs: *const mqstore_jobs,
    json: *mut *mut c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(json, "json") }?;
        *out = std::ptr::null_mut();
        let jobs = unsafe { handle(jobs, "jobs") }?;
        let pending = jobs.jobs.pending()?;
        json_out(out, &pending)
    })
}

/// Starts the next queued execution (IN_PROGRESS, with `status_details_json`: NULL or a JSON
/// object of strings). `*json` gets the execution (`{"jobId": ..., "jobDocument": ...}`; free it
/// with `mqstore_string_free`), or NULL when nothing is queued.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), MQSTORE_ERR_JOBS (refused: AWS's code
/// in `mqstore_last_error`), MQSTORE_ERR_REQUEST_TIMEOUT, MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_jobs_start_next(
    jobs: *const mqstore_jobs,
    status_details_json: *const c_char,
    json: *mut *mut c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(json, "json") }?;
        *out = std::ptr::null_mut();
        let jobs = unsafe { handle(jobs, "jobs") }?;
        let start = StartNext {
            status_details: unsafe { details_arg(status_details_json) }?,
            step_timeout: None,
        };
        match jobs.jobs.start_next(start)? {
            Some(execution) => json_out(out, &execution),
            None => Ok(()),
        }
    })
}

/// Reports progress or the end of an execution: `status` is "IN_PROGRESS", "SUCCEEDED",
/// "FAILED" or "REJECTED"; `status_details_json` NULL or a JSON object of strings;
/// `expected_version` the execution's version (refused with VersionMismatch otherwise), or -1.
/// `*json` (NULL: not wanted) gets the answer (with the execution's state; free it with
/// `mqstore_string_free`).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), MQSTORE_ERR_JOBS (refused: AWS's code
/// in `mqstore_last_error`), MQSTORE_ERR_REQUEST_TIMEOUT, MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_jobs_update(
    jobs: *const mqstore_jobs,
    job_id: *const c_char,
    status: *const c_char,
    status_details_json: *const c_char,
    expected_version: i64,
    json: *mut *mut c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        unsafe { write_opt(json, std::ptr::null_mut()) };
        let jobs = unsafe { handle(jobs, "jobs") }?;
        let job_id = unsafe { str_arg(job_id, "job_id") }?.to_owned();
        let status_text = unsafe { str_arg(status, "status") }?;
        let status: Status = serde_json::from_value(serde_json::Value::String(status_text.into()))
            .map_err(|_| {
                Error::invalid(format!(
                    "status is \"IN_PROGRESS\", \"SUCCEEDED\", \"FAILED\" or \"REJECTED\", not {status_text:?}"
                ))
            })?;
        let update = Update {
            job_id,
            status: Some(status),
            status_details: unsafe { details_arg(status_details_json) }?,
            expected_version: u64::try_from(expected_version).ok(),
            execution_number: None,
            step_timeout_minutes: None,
            include_state: true,
            include_document: false,
        };
        let accepted = jobs.jobs.update(update)?;
        // SAFETY: NULL or the caller's pointer.
        if let Some(out) = unsafe { json.as_mut() } {
            json_out(out, &accepted)?;
        }
        Ok(())
    })
}

/// Waits up to `timeout_ms` (0: do not wait; negative: as long as it takes) for the thing's
/// next jobs notification (`{"kind": "notify-next", "execution": ...}` or `{"kind": "notify",
/// ...}`). `*json` gets it (free it with `mqstore_string_free`), or NULL when none came in time.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle); none in time is MQSTORE_OK with `*json`
/// NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_jobs_next_notification(
    jobs: *const mqstore_jobs,
    timeout_ms: i32,
    json: *mut *mut c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(json, "json") }?;
        *out = std::ptr::null_mut();
        let jobs = unsafe { handle(jobs, "jobs") }?;
        let timeout = match timeout_ms {
            t if t < 0 => None,
            t => Some(Duration::from_millis(t as u64)),
        };
        let notification = jobs.notifications.pop(timeout, false);
        match notification {
            Some(n) => json_out(out, &n),
            None => Ok(()),
        }
    })
}

/// A command's outcome, owned by the library: free it with `mqstore_command_reply_free`.
#[repr(C)]
pub struct mqstore_command_reply {
    /// The command's id (for `mqstore_command_status`).
    pub id: *const c_char,
    /// "SUCCEEDED" (awaited), "DELIVERED" (one way) or "SENT" (detached).
    pub status: *const c_char,
    /// The device's answer (empty without one).
    pub payload: *const u8,
    /// The payload's length in bytes.
    pub payload_len: usize,
    /// The answer's content type, or NULL.
    pub content_type: *const c_char,
    /// Whether `device_status` holds the device's status code.
    pub has_device_status: bool,
    /// The device's status code, when its profile reads one.
    pub device_status: i64,
}

#[repr(C)]
struct CommandReply {
    c: mqstore_command_reply,
    _strings: Vec<CString>,
    _payload: Bytes,
}

/// Sends `payload` to the device's command topic `topic` (`{id}` in it becomes the command's
/// id) and, by default, waits for its answer. `options`: NULL for the defaults. On success
/// `*out` is the caller's: free it with `mqstore_command_reply_free`. A device's error answer
/// is MQSTORE_ERR_COMMAND_FAILED or _REJECTED, no answer in time MQSTORE_ERR_COMMAND_TIMEOUT
/// (the message names the command's id).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_command(
    client: *const mqstore_client,
    topic: *const c_char,
    payload: *const u8,
    payload_len: usize,
    options: *const mqstore_command_options,
    out: *mut *mut mqstore_command_reply,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        *out = std::ptr::null_mut();
        let client = unsafe { handle(client, "client") }?;
        let request = unsafe { command_request(topic, payload, payload_len, options) }?;
        command_out(client, request, out)
    })
}

/// Starts stored command `command_id` (see `mqstore_command_definitions`) on `target` — a
/// thing name, "thing/NAME", "clients/CLIENT_ID" or a thing's ARN — with `parameters_json`
/// (a JSON object filling its payload template, or NULL), as AWS's StartCommandExecution does;
/// `options`: NULL, or its `timeout_ms` and `mode`. Answers and errors as `mqstore_command`; an
/// unknown command id is MQSTORE_ERR_STATUS (404), a missing or unknown parameter
/// MQSTORE_ERR_STATUS (400).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_command_start(
    client: *const mqstore_client,
    command_id: *const c_char,
    target: *const c_char,
    parameters_json: *const c_char,
    options: *const mqstore_command_options,
    out: *mut *mut mqstore_command_reply,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        *out = std::ptr::null_mut();
        let client = unsafe { handle(client, "client") }?;
        let request =
            unsafe { command_start_request(command_id, target, parameters_json, options) }?;
        command_out(client, request, out)
    })
}

/// Sends `request`, waits for its verdict, and hands the reply out in `*out`.
fn command_out(
    client: &mqstore_client,
    request: mqstore_core::commands::CommandRequest,
    out: &mut *mut mqstore_command_reply,
) -> Result<()> {
    // The command's own timeout decides (the client's session enforces it).
    let reply = client.client().command(&request)?;
    let status = serde_json::to_value(reply.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let cstring = |s: &str| CString::new(s).map_err(|_| Error::invalid("a NUL in the reply"));
    let mut strings = vec![cstring(&reply.id)?, cstring(&status)?];
    if let Some(content_type) = &reply.content_type {
        strings.push(cstring(content_type)?);
    }
    *out = new_handle(CommandReply {
        c: mqstore_command_reply {
            id: strings[0].as_ptr(),
            status: strings[1].as_ptr(),
            payload: reply.payload.as_ptr(),
            payload_len: reply.payload.len(),
            content_type: strings.get(2).map_or(std::ptr::null(), |s| s.as_ptr()),
            has_device_status: reply.device_status.is_some(),
            device_status: reply.device_status.unwrap_or(0),
        },
        _strings: strings,
        _payload: reply.payload,
    })
    .cast();
    Ok(())
}

/// A stored-commands call given as its JSON: `{"op": "create", "command": {"commandId": ...,
/// "payload": {"content": ..., "contentType": ...}}}` (or with `"payloadTemplate"` and
/// `"mandatoryParameters"`), `{"op": "get" | "delete", "commandId": ...}` or `{"op":
/// "list"}`. `*answer_json` gets the service's answer (`{"command": ...}`, `{"commands":
/// [...]}`, `{"deleted": true}`; free with `mqstore_string_free`); a refusal is
/// MQSTORE_ERR_STATUS (400 a bad definition, 404 none, 409 the id is taken).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_command_definitions(
    client: *const mqstore_client,
    request_json: *const c_char,
    answer_json: *mut *mut c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(answer_json, "answer_json") }?;
        *out = std::ptr::null_mut();
        let client = unsafe { handle(client, "client") }?;
        let request = unsafe { json_arg(request_json, "request_json") }?;
        let answer = client.client().command_definitions_json(&request)?;
        json_out(out, &answer)
    })
}

/// Frees a command reply (NULL is ignored).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_command_reply_free(reply: *mut mqstore_command_reply) {
    ffi_void(|| {
        // SAFETY: replies are handed out as `CommandReply`s.
        unsafe { take_handle(reply.cast::<CommandReply>(), "command reply") }.map(drop)
    });
}

/// A command's status record (`{"id": ..., "status": "SUCCEEDED", "answer": ...}`) as JSON in
/// `*json` (free with `mqstore_string_free`).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), MQSTORE_ERR_STATUS (404: no such
/// command, or forgotten), MQSTORE_ERR_REQUEST_TIMEOUT, MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_command_status(
    client: *const mqstore_client,
    id: *const c_char,
    json: *mut *mut c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(json, "json") }?;
        *out = std::ptr::null_mut();
        let client = unsafe { handle(client, "client") }?;
        let id = unsafe { str_arg(id, "id") }?;
        let record = client.client().command_status(id)?;
        json_out(out, &record)
    })
}
