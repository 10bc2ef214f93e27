//! Commands to devices through `mqstore serve`'s command service: send and await (or one-way,
//! or detached), status records, a watch of every status change, and fan-out.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use mqstore_core::client::ClientError;
use mqstore_core::client::commands::CommandReply as CoreReply;
use mqstore_core::commands::definitions::definitions_call;
use mqstore_core::commands::{CommandRequest, Mode, Record};
use mqstore_net::blocking::{FanOut as BlockingFanOut, calls};
use mqstore_net::commands::FanOutSummary;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};

use crate::client::{Client, Conn, Stream, call, kind, same_process, subscribed};
use crate::driven::{Queue, lock};
use crate::errors::client_error;
use crate::runtime::{ToPy, blocking};
use crate::types::{Json, py_bytes};

/// What a command call returned: the device's answer for an awaited command (`SUCCEEDED`),
/// `DELIVERED` for a one-way one, `SENT` (and the id) for a detached one.
#[pyclass(frozen, get_all, module = "mqstore._native")]
pub struct CommandReply {
    /// The command's id (a UUID): for `command_status` and in `watch_commands` records.
    id: String,
    /// `SUCCEEDED`, `DELIVERED` (one-way) or `SENT` (detached).
    status: String,
    /// The device's answer (empty unless `SUCCEEDED`).
    payload: Py<PyBytes>,
    /// The answer's content type, when the device gave one.
    content_type: Option<String>,
    /// The status code the device answered with, when its profile carries one.
    device_status: Option<i64>,
}

#[pymethods]
impl CommandReply {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "CommandReply(id='{}', status='{}', payload={})",
            self.id,
            self.status,
            self.payload.bind(py).repr()?
        ))
    }
}

impl ToPy for CoreReply {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let status = serde_json::to_value(self.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let reply = CommandReply {
            id: self.id,
            status,
            payload: py_bytes(py, &self.payload),
            content_type: self.content_type,
            device_status: self.device_status,
        };
        Ok(Py::new(py, reply)?.into_any())
    }
}

/// A command request from the Python layer's checked arguments.
#[allow(clippy::too_many_arguments)]
fn request(
    topic: String,
    payload: PyBackedBytes,
    content_type: Option<String>,
    profile: String,
    timeout_ms: u64,
    mode: &str,
    headers: Vec<(String, String)>,
) -> PyResult<CommandRequest> {
    Ok(CommandRequest {
        topic,
        payload: Bytes::from_owner(payload),
        content_type,
        profile,
        timeout_ms,
        mode: Mode::parse(mode).ok_or_else(|| {
            PyValueError::new_err(format!(
                "mode is \"await\", \"oneway\" or \"detached\", not {mode:?}"
            ))
        })?,
        headers,
        ..CommandRequest::new(String::new(), Bytes::new())
    })
}

#[pymethods]
impl Client {
    #[pyo3(signature = (topic, payload, content_type, profile, timeout_ms, mode, headers, aio))]
    #[allow(clippy::too_many_arguments)]
    fn command(
        &self,
        py: Python<'_>,
        topic: String,
        payload: PyBackedBytes,
        content_type: Option<String>,
        profile: String,
        timeout_ms: u64,
        mode: &str,
        headers: Vec<(String, String)>,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let request = request(
            topic,
            payload,
            content_type,
            profile,
            timeout_ms,
            mode,
            headers,
        )?;
        send(py, self.live(aio)?, request)
    }

    /// Starts stored command `command_id` on `target` with `parameters` (a JSON object).
    #[pyo3(signature = (command_id, target, parameters, timeout_ms, mode, aio))]
    #[allow(clippy::too_many_arguments)]
    fn start_command(
        &self,
        py: Python<'_>,
        command_id: String,
        target: String,
        parameters: &str,
        timeout_ms: u64,
        mode: &str,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let parameters = serde_json::from_str(parameters)
            .map_err(|e| PyValueError::new_err(format!("parameters: not a JSON object ({e})")))?;
        let request = CommandRequest {
            timeout_ms,
            mode: Mode::parse(mode).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "mode is \"await\", \"oneway\" or \"detached\", not {mode:?}"
                ))
            })?,
            parameters,
            ..CommandRequest::start(command_id, target)
        };
        send(py, self.live(aio)?, request)
    }

    /// Stored-commands call `op` (`create`, `get`, `list`, `delete`) with its arguments as a
    /// JSON object (`{"command": ...}`, `{"commandId": ...}`), made a request by the core's
    /// `definitions_call`: the service's answer, as JSON.
    fn command_definitions(
        &self,
        py: Python<'_>,
        op: &str,
        args: &str,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let args = serde_json::from_str(args)
            .map_err(|e| PyValueError::new_err(format!("the arguments are not JSON: {e}")))?;
        let request = definitions_call(op, args).map_err(PyValueError::new_err)?;
        let call = calls::command_definitions_json(request);
        call!(py, self.live(aio)?, call, |answer| Ok(Json(answer)))
    }

    fn command_status(&self, py: Python<'_>, id: String, aio: bool) -> PyResult<Py<PyAny>> {
        call!(py, self.live(aio)?, calls::command_status(&id), |record| {
            Json::of(&record)
        })
    }

    fn watch_commands(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        let pid = self.pid();
        subscribed(
            py,
            self.live(aio)?,
            |py, record: Record| Json::of(&record).map_err(|e| e.into_py_err(py))?.to_py(py),
            |c, listener, deliver| match deliver {
                None => c.watch_commands_with(listener),
                Some(deliver) => {
                    c.start_watch_commands(listener, deliver);
                    Ok(())
                }
            },
            move |records| CommandWatch { records, pid },
        )
    }

    /// Sends one command to each of `topics`, all in flight at once.
    #[pyo3(signature = (topics, payload, content_type, profile, timeout_ms, mode, headers))]
    #[allow(clippy::too_many_arguments)]
    fn command_many(
        &self,
        py: Python<'_>,
        topics: Vec<String>,
        payload: PyBackedBytes,
        content_type: Option<String>,
        profile: String,
        timeout_ms: u64,
        mode: &str,
        headers: Vec<(String, String)>,
    ) -> PyResult<FanOut> {
        let conn = self.conn()?;
        let first = request(
            String::new(),
            payload,
            content_type,
            profile,
            timeout_ms,
            mode,
            headers,
        )?;
        let requests = topics
            .into_iter()
            .map(|topic| CommandRequest {
                topic,
                ..first.clone()
            })
            .collect();
        let results = match &conn.driven {
            None => Results::Blocking(Arc::new(Mutex::new(conn.client.command_many(requests)))),
            Some(driven) => {
                let ended = Arc::new(AtomicBool::new(false));
                let results = Queue::new(driven.clone(), ended, |py, (topic, result)| {
                    DeviceResult(topic, result).to_py(py)
                });
                let summary = Arc::new(Mutex::new(FanOutSummary::default()));
                let remaining = Arc::new(AtomicUsize::new(requests.len()));
                if requests.is_empty() {
                    results.end();
                }
                for request in requests {
                    let topic = request.topic.clone();
                    let (results, summary) = (results.clone(), summary.clone());
                    let remaining = remaining.clone();
                    conn.client
                        .start_call(calls::command(request), move |result| {
                            lock(&summary).count(&result);
                            results.push((topic, result));
                            if remaining.fetch_sub(1, Ordering::Relaxed) == 1 {
                                results.end();
                            }
                        });
                }
                driven.started(py)?;
                Results::Driven { results, summary }
            }
        };
        Ok(FanOut {
            results,
            conn,
            pid: self.pid(),
        })
    }
}

/// Sends a command with either kind of client.
fn send(py: Python<'_>, conn: Conn, request: CommandRequest) -> PyResult<Py<PyAny>> {
    call!(py, conn, calls::command(request))
}

/// Every command's status changes (any node's, any caller's).
#[pyclass(frozen, module = "mqstore._native")]
pub struct CommandWatch {
    records: Stream<Record>,
    pid: u32,
}

impl ToPy for CommandWatch {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

#[pymethods]
impl CommandWatch {
    /// The next status record; `None` when `timeout_ms` passed first or the client closed.
    #[pyo3(signature = (timeout_ms, aio))]
    fn next(&self, py: Python<'_>, timeout_ms: Option<u64>, aio: bool) -> PyResult<Py<PyAny>> {
        same_process(self.pid)?;
        self.records.next(py, timeout_ms, aio)
    }
}

/// One command to many devices: each device's result as it comes, then a summary.
#[pyclass(frozen, module = "mqstore._native")]
pub struct FanOut {
    results: Results,
    conn: Conn,
    pid: u32,
}

/// A fan-out's results as either kind of client has them (a driven client's counted as they
/// arrive).
enum Results {
    Blocking(Arc<Mutex<BlockingFanOut>>),
    Driven {
        results: Arc<Queue<(String, Result<CoreReply, ClientError>)>>,
        summary: Arc<Mutex<FanOutSummary>>,
    },
}

/// One device's result: `(topic, CommandReply)` or `(topic, the exception)`.
struct DeviceResult(String, Result<CoreReply, ClientError>);

impl ToPy for DeviceResult {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let outcome = match self.1 {
            Ok(reply) => reply.to_py(py)?,
            Err(e) => client_error(py, &e).into_value(py).into_any(),
        };
        Ok((self.0, outcome).into_pyobject(py)?.into_any().unbind())
    }
}

#[pymethods]
impl FanOut {
    /// The next device's result, or `None` when every result is in.
    fn next(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        same_process(self.pid)?;
        kind(&self.conn, aio)?;
        match &self.results {
            Results::Blocking(results) => {
                let results = results.clone();
                blocking(py, move || {
                    let next = lock(&results).next();
                    Ok(next.map(|(topic, result)| DeviceResult(topic, result)))
                })
            }
            Results::Driven { results, .. } => results.next(py, None),
        }
    }

    /// The results so far, counted: succeeded, failed, rejected, timed_out, errors.
    #[getter]
    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        // The lock is only held by a `next` in progress, which counts as it returns.
        let in_progress = || {
            pyo3::exceptions::PyRuntimeError::new_err(
                "the summary is being updated by a next() in progress: read it after",
            )
        };
        let s = match &self.results {
            Results::Blocking(results) => results
                .try_lock()
                .map_err(|_| in_progress())?
                .summary()
                .clone(),
            Results::Driven { summary, .. } => lock(summary).clone(),
        };
        for (name, n) in [
            ("succeeded", s.succeeded),
            ("failed", s.failed),
            ("rejected", s.rejected),
            ("timed_out", s.timed_out),
            ("errors", s.errors),
        ] {
            dict.set_item(name, n)?;
        }
        Ok(dict)
    }
}
