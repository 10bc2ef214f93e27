//! Commands to devices through `mqstore serve`'s command service: send and await (or one-way,
//! or detached), status records, a watch of every status change, and fan-out.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use mqstore_core::client::ClientError;
use mqstore_core::client::commands::CommandReply as CoreReply;
use mqstore_core::commands::{CommandRequest, Mode, Record};
use mqstore_net::blocking::FanOut as BlockingFanOut;
use mqstore_net::commands::{CommandWatch as AsyncWatch, FanOut as AsyncFanOut};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};

use crate::client::{Client, Core, Stream, either, other_kind, same_process};
use crate::errors::client_error;
use crate::runtime::{ToPy, awaitable, blocking, client, runtime};
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

    /// A stored-commands call given as its JSON (`{"op": "create" | "get" | "list" |
    /// "delete", ...}`): the service's JSON answer.
    fn command_definitions(&self, py: Python<'_>, request: &str, aio: bool) -> PyResult<Py<PyAny>> {
        let request: serde_json::Value = serde_json::from_str(request)
            .map_err(|e| PyValueError::new_err(format!("the request is not JSON: {e}")))?;
        match self.live(aio)? {
            Core::Blocking(c) => blocking(py, move || {
                Ok(Json(client(c.command_definitions(&request))?))
            }),
            Core::Async(c) => awaitable(py, async move {
                Ok(Json(client(c.command_definitions(request).await)?))
            }),
        }
    }

    fn command_status(&self, py: Python<'_>, id: String, aio: bool) -> PyResult<Py<PyAny>> {
        either!(py, self.live(aio)?, |c| c.command_status(&id), |record| {
            Json::of(&record)
        })
    }

    fn watch_commands(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        let pid = self.pid();
        either!(py, self.live(aio)?, |c| c.watch_commands(), |watch| {
            Ok(CommandWatch {
                records: Stream::from(watch),
                pid,
            })
        })
    }

    /// Sends one command to each of `topics`, all in flight at once.
    #[pyo3(signature = (topics, payload, content_type, profile, timeout_ms, mode, headers))]
    #[allow(clippy::too_many_arguments)]
    fn command_many(
        &self,
        topics: Vec<String>,
        payload: PyBackedBytes,
        content_type: Option<String>,
        profile: String,
        timeout_ms: u64,
        mode: &str,
        headers: Vec<(String, String)>,
    ) -> PyResult<FanOut> {
        same_process(self.pid())?;
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
        let results = match self.core() {
            Core::Blocking(c) => Core::Blocking(Arc::new(Mutex::new(c.command_many(requests)))),
            Core::Async(c) => {
                // The fan-out spawns its sends on the runtime.
                let _entered = runtime()?.enter();
                Core::Async(Arc::new(tokio::sync::Mutex::new(c.command_many(requests))))
            }
        };
        Ok(FanOut {
            results,
            pid: self.pid(),
        })
    }
}

/// Sends a command with either kind of client.
fn send(py: Python<'_>, core: Core, request: CommandRequest) -> PyResult<Py<PyAny>> {
    match core {
        Core::Blocking(c) => blocking(py, move || client(c.command(&request))),
        Core::Async(c) => awaitable(py, async move { client(c.command(request).await) }),
    }
}

/// Every command's status changes (any node's, any caller's).
#[pyclass(frozen, module = "mqstore._native")]
pub struct CommandWatch {
    records: Stream<AsyncWatch, Record>,
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
        self.records.next(
            py,
            timeout_ms,
            aio,
            None,
            |mut records| async move {
                let next = records.next().await;
                let end = next.is_none();
                Ok((next.map(|r| Json::of(&r)).transpose()?, end))
            },
            |record| Json::of(&record),
        )
    }
}

/// One command to many devices: each device's result as it comes, then a summary.
#[pyclass(frozen, module = "mqstore._native")]
pub struct FanOut {
    results: Core<Arc<Mutex<BlockingFanOut>>, Arc<tokio::sync::Mutex<AsyncFanOut>>>,
    pid: u32,
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
        match (&self.results, aio) {
            (Core::Blocking(results), false) => {
                let results = results.clone();
                blocking(py, move || {
                    let next = results.lock().unwrap_or_else(|e| e.into_inner()).next();
                    Ok(next.map(|(topic, result)| DeviceResult(topic, result)))
                })
            }
            (Core::Async(results), true) => {
                let results = results.clone();
                awaitable(py, async move {
                    let next = results.lock().await.next().await;
                    Ok(next.map(|(topic, result)| DeviceResult(topic, result)))
                })
            }
            _ => Err(other_kind()),
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
            Core::Blocking(results) => results
                .try_lock()
                .map_err(|_| in_progress())?
                .summary()
                .clone(),
            Core::Async(results) => results
                .try_lock()
                .map_err(|_| in_progress())?
                .summary()
                .clone(),
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
