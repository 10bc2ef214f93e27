//! Commands to devices through `mqstore serve`'s command service: send and await (or one-way,
//! or detached), status records, a watch of every status change, and fan-out.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mqstore_core::client::ClientError;
use mqstore_core::client::commands::CommandReply as CoreReply;
use mqstore_core::commands::{CommandRequest, Mode};
use mqstore_net::commands::{CommandWatch as CoreWatch, FanOut as CoreFanOut};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};

use crate::client::{Client, same_process};
use crate::errors::client_error;
use crate::runtime::{ToPy, client, run, runtime};
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
        let client_ = self.live()?;
        let request = request(
            topic,
            payload,
            content_type,
            profile,
            timeout_ms,
            mode,
            headers,
        )?;
        run(
            py,
            aio,
            async move { client(client_.command(request).await) },
        )
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
        let client_ = self.live()?;
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
        run(
            py,
            aio,
            async move { client(client_.command(request).await) },
        )
    }

    /// A stored-commands call given as its JSON (`{"op": "create" | "get" | "list" |
    /// "delete", ...}`): the service's JSON answer.
    fn command_definitions(&self, py: Python<'_>, request: &str, aio: bool) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        let request: serde_json::Value = serde_json::from_str(request)
            .map_err(|e| PyValueError::new_err(format!("the request is not JSON: {e}")))?;
        run(py, aio, async move {
            Json::of(&client(client_.command_definitions(request).await)?)
        })
    }

    fn command_status(&self, py: Python<'_>, id: String, aio: bool) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        run(py, aio, async move {
            Json::of(&client(client_.command_status(&id).await)?)
        })
    }

    fn watch_commands(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        let pid = self.pid();
        run(py, aio, async move {
            let watch = client(client_.watch_commands().await)?;
            Ok(CommandWatch {
                records: Arc::new(tokio::sync::Mutex::new(watch)),
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
        let client_ = self.live()?;
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
        // The fan-out spawns its sends on the runtime.
        let _entered = runtime()?.enter();
        Ok(FanOut {
            results: Arc::new(tokio::sync::Mutex::new(client_.command_many(requests))),
            pid: self.pid(),
        })
    }
}

/// Every command's status changes (any node's, any caller's).
#[pyclass(frozen, module = "mqstore._native")]
pub struct CommandWatch {
    records: Arc<tokio::sync::Mutex<CoreWatch>>,
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
        let records = self.records.clone();
        run(py, aio, async move {
            let mut records = records.lock().await;
            let next = match timeout_ms {
                None => records.next().await,
                Some(ms) => tokio::time::timeout(Duration::from_millis(ms), records.next())
                    .await
                    .ok()
                    .flatten(),
            };
            next.map(|r| Json::of(&r)).transpose()
        })
    }
}

/// One command to many devices: each device's result as it comes, then a summary.
#[pyclass(frozen, module = "mqstore._native")]
pub struct FanOut {
    results: Arc<tokio::sync::Mutex<CoreFanOut>>,
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
        let results = self.results.clone();
        run(py, aio, async move {
            let next = results.lock().await.next().await;
            Ok(next.map(|(topic, result)| DeviceResult(topic, result)))
        })
    }

    /// The results so far, counted: succeeded, failed, rejected, timed_out, errors.
    #[getter]
    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        // The lock is only held by a `next` in progress, which counts as it returns.
        let Ok(results) = self.results.try_lock() else {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "the summary is being updated by a next() in progress: read it after",
            ));
        };
        let s = results.summary();
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
