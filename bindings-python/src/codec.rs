//! The core's codec and topic names for tooling (`mqstore.codec`): requests, responses and
//! notifications as dicts shaped like the shared wire vectors' `command` and `decoded` objects.

use std::num::NonZeroU64;

use bytes::Bytes;
use mqstore_core::codec::{
    self, Bulk, Condition, Notification, Request, Response, SetRequest, decode_notification,
    decode_request, decode_response,
};
use mqstore_core::{ServiceError, topics};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::errors::service_error;

fn bytes_of(dict: &Bound<'_, PyDict>, name: &str) -> PyResult<Option<Bytes>> {
    match dict.get_item(name)? {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => {
            let v: Vec<u8> = v.extract().map_err(|_| {
                PyValueError::new_err(format!("{name:?} must be bytes (encode str first)"))
            })?;
            Ok(Some(Bytes::from(v)))
        }
    }
}

fn required(dict: &Bound<'_, PyDict>, name: &str) -> PyResult<Bytes> {
    bytes_of(dict, name)?
        .ok_or_else(|| PyValueError::new_err(format!("the request needs {name:?}")))
}

/// The request a dict describes (`{"op": "SET", "key": b"k", "value": b"v", "condition":
/// "NX", "px_ms": 10}`, and `GET`, `DEL`, `VDEL`, `KEYNOTIFY` with `stop`, `SCAN` with
/// `pattern` and `token`).
pub(crate) fn request_of(command: &Bound<'_, PyDict>) -> PyResult<Request> {
    let op: String = command
        .get_item("op")?
        .ok_or_else(|| PyValueError::new_err("the request needs \"op\""))?
        .extract()?;
    Ok(match op.to_ascii_uppercase().as_str() {
        "SET" => Request::Set(SetRequest {
            key: required(command, "key")?,
            value: Bulk::new(required(command, "value")?),
            condition: match command.get_item("condition")? {
                None => Condition::Always,
                Some(c) if c.is_none() => Condition::Always,
                Some(c) => match c.extract::<String>()?.to_ascii_uppercase().as_str() {
                    "NX" => Condition::NotExists,
                    "NEX" => Condition::NotExistsOrEqual,
                    other => {
                        return Err(PyValueError::new_err(format!(
                            "condition is \"NX\", \"NEX\" or None, not {other:?}"
                        )));
                    }
                },
            },
            expires_in_ms: match command.get_item("px_ms")? {
                Some(px) if !px.is_none() => {
                    Some(NonZeroU64::new(px.extract()?).ok_or_else(|| {
                        PyValueError::new_err("px_ms must be a positive number of milliseconds")
                    })?)
                }
                _ => None,
            },
        }),
        "GET" => Request::Get {
            key: required(command, "key")?,
        },
        "DEL" => Request::Del {
            key: required(command, "key")?,
        },
        "VDEL" => Request::VDel {
            key: required(command, "key")?,
            value: required(command, "value")?,
        },
        "KEYNOTIFY" => Request::KeyNotify {
            key: required(command, "key")?,
            stop: match command.get_item("stop")? {
                Some(stop) => stop.is_truthy()?,
                None => false,
            },
        },
        "SCAN" => Request::Scan {
            pattern: required(command, "pattern")?,
            token: bytes_of(command, "token")?,
        },
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown op {other:?}: SET, GET, DEL, VDEL, KEYNOTIFY or SCAN"
            )));
        }
    })
}

/// The wire bytes of a request.
#[pyfunction]
fn encode_request<'py>(
    py: Python<'py>,
    command: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyBytes>> {
    Ok(PyBytes::new(py, &request_of(command)?.to_bytes()))
}

/// A request payload as a dict; a payload the state store would refuse raises its
/// `ServiceError` subclass (the same error the server answers with).
#[pyfunction]
#[pyo3(name = "decode_request")]
fn decode_request_<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let request =
        decode_request(&Bytes::copy_from_slice(data)).map_err(|e| service_error(py, &e))?;
    let dict = PyDict::new(py);
    let bytes = |b: &[u8]| PyBytes::new(py, b);
    dict.set_item("op", request.command().as_str())?;
    match request {
        Request::Set(set) => {
            dict.set_item("key", bytes(&set.key))?;
            dict.set_item("value", bytes(set.value.as_slice()))?;
            match set.condition {
                Condition::Always => {}
                Condition::NotExists => dict.set_item("condition", "NX")?,
                Condition::NotExistsOrEqual => dict.set_item("condition", "NEX")?,
            }
            if let Some(px) = set.expires_in_ms {
                dict.set_item("px_ms", px.get())?;
            }
        }
        Request::Get { key } | Request::Del { key } => dict.set_item("key", bytes(&key))?,
        Request::VDel { key, value } => {
            dict.set_item("key", bytes(&key))?;
            dict.set_item("value", bytes(&value))?;
        }
        Request::KeyNotify { key, stop } => {
            dict.set_item("key", bytes(&key))?;
            if stop {
                dict.set_item("stop", true)?;
            }
        }
        Request::Scan { pattern, token } => {
            dict.set_item("pattern", bytes(&pattern))?;
            if let Some(token) = token {
                dict.set_item("token", bytes(&token))?;
            }
        }
    }
    Ok(dict)
}

/// The wire bytes of a response described as `{"kind": "ok" | "not_applied" | "deleted" |
/// "value" | "absent" | "keys" | "error", ...}`.
#[pyfunction]
fn encode_response<'py>(
    py: Python<'py>,
    response: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyBytes>> {
    let kind: String = response
        .get_item("kind")?
        .ok_or_else(|| PyValueError::new_err("the response needs \"kind\""))?
        .extract()?;
    let response = match kind.as_str() {
        "ok" => Response::Ok,
        "not_applied" => Response::NotApplied,
        "deleted" => Response::Deleted(
            response
                .get_item("count")?
                .ok_or_else(|| PyValueError::new_err("a \"deleted\" response needs \"count\""))?
                .extract()?,
        ),
        "value" => Response::Value(Bulk::new(required(response, "value")?)),
        "absent" => Response::Absent,
        "keys" => Response::Keys {
            keys: response
                .get_item("keys")?
                .ok_or_else(|| PyValueError::new_err("a \"keys\" response needs \"keys\""))?
                .extract::<Vec<Vec<u8>>>()?
                .into_iter()
                .map(Bytes::from)
                .collect(),
            token: bytes_of(response, "token")?,
        },
        "error" => {
            let text: String = response
                .get_item("text")?
                .ok_or_else(|| PyValueError::new_err("an \"error\" response needs \"text\""))?
                .extract()?;
            Response::Error(ServiceError::from_text(text.as_bytes()))
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown response kind {other:?}"
            )));
        }
    };
    Ok(PyBytes::new(py, &response.to_bytes()))
}

fn malformed(e: codec::DecodeError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A response payload as a dict (see `encode_response`); malformed bytes raise `ValueError`.
#[pyfunction]
#[pyo3(name = "decode_response")]
fn decode_response_<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let response = decode_response(&Bytes::copy_from_slice(data)).map_err(malformed)?;
    response_dict(py, response)
}

/// A response as the dict `decode_response` gives.
pub(crate) fn response_dict(py: Python<'_>, response: Response) -> PyResult<Bound<'_, PyDict>> {
    let dict = PyDict::new(py);
    match response {
        Response::Ok => dict.set_item("kind", "ok")?,
        Response::NotApplied => dict.set_item("kind", "not_applied")?,
        Response::Deleted(count) => {
            dict.set_item("kind", "deleted")?;
            dict.set_item("count", count)?;
        }
        Response::Value(value) => {
            dict.set_item("kind", "value")?;
            dict.set_item("value", PyBytes::new(py, value.as_slice()))?;
        }
        Response::Absent => dict.set_item("kind", "absent")?,
        Response::Keys { keys, token } => {
            dict.set_item("kind", "keys")?;
            let keys = keys.iter().map(|k| PyBytes::new(py, k));
            dict.set_item("keys", PyList::new(py, keys)?)?;
            if let Some(token) = token {
                dict.set_item("token", PyBytes::new(py, &token))?;
            }
        }
        Response::Error(e) => {
            dict.set_item("kind", "error")?;
            dict.set_item("text", e.text())?;
        }
    }
    Ok(dict)
}

/// A notification payload as `{"op": "SET", "value": b"..."}` or `{"op": "DELETE"}`.
#[pyfunction]
#[pyo3(name = "decode_notification")]
fn decode_notification_<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let notification = decode_notification(&Bytes::copy_from_slice(data)).map_err(malformed)?;
    let dict = PyDict::new(py);
    match notification {
        Notification::Set(value) => {
            dict.set_item("op", "SET")?;
            dict.set_item("value", PyBytes::new(py, value.as_slice()))?;
        }
        Notification::Delete => dict.set_item("op", "DELETE")?,
    }
    Ok(dict)
}

/// The topic the engine publishes changes of `key` to, for a client on the standard topics.
#[pyfunction]
fn notify_topic(client_id: &str, key: &[u8]) -> String {
    topics::notify_topic(client_id, key)
}

pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(encode_request, module)?)?;
    module.add_function(wrap_pyfunction!(decode_request_, module)?)?;
    module.add_function(wrap_pyfunction!(encode_response, module)?)?;
    module.add_function(wrap_pyfunction!(decode_response_, module)?)?;
    module.add_function(wrap_pyfunction!(decode_notification_, module)?)?;
    module.add_function(wrap_pyfunction!(notify_topic, module)?)?;
    module.add("INVOKE_TOPIC", topics::INVOKE)?;
    Ok(())
}
