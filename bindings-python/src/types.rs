//! The values calls return, as Python classes: versions (HLC), SET/GET/DEL results and key
//! changes. Values are Python `bytes` made once, when the result reaches Python.

use bytes::Bytes;
use mqstore_core::client::{
    Deleted, Deletion, SetResult as CoreSetResult, Versioned as CoreVersioned,
};
use mqstore_core::hlc::Hlc as CoreHlc;
use mqstore_net::client::KeyChange;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::runtime::ToPy;

/// A hybrid-logical-clock value: `{wall ms}:{counter}:{node}`, as the state store versions
/// keys and fences writes. Ordered by wall clock, then counter, then node.
#[pyclass(frozen, eq, ord, hash, module = "mqstore._native")]
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hlc(pub CoreHlc);

#[pymethods]
impl Hlc {
    #[new]
    fn new(wall_ms: u64, counter: u32, node: &str) -> PyResult<Self> {
        CoreHlc::new(wall_ms, counter, node)
            .map(Hlc)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Parses `wall:counter:node` (any number of digits).
    #[staticmethod]
    fn parse(text: &str) -> PyResult<Self> {
        CoreHlc::parse(text)
            .map(Hlc)
            .map_err(|e| PyValueError::new_err(format!("{e} (got {text:?})")))
    }

    /// Milliseconds since the Unix epoch of the clock that issued it.
    #[getter]
    fn wall_ms(&self) -> u64 {
        self.0.wall_ms
    }

    /// The logical counter, ordering versions issued in the same millisecond.
    #[getter]
    fn counter(&self) -> u32 {
        self.0.counter
    }

    /// The id of the node (or client) that issued it.
    #[getter]
    fn node(&self) -> &str {
        &self.0.node
    }

    fn __str__(&self) -> String {
        self.0.to_string()
    }

    fn __repr__(&self) -> String {
        format!("Hlc('{}')", self.0)
    }
}

impl ToPy for CoreHlc {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, Hlc(self))?.into_any())
    }
}

fn hlc(py: Python<'_>, version: Option<CoreHlc>) -> PyResult<Option<Py<Hlc>>> {
    version.map(|v| Py::new(py, Hlc(v))).transpose()
}

pub fn py_bytes(py: Python<'_>, bytes: &[u8]) -> Py<PyBytes> {
    PyBytes::new(py, bytes).unbind()
}

/// What a SET did: `applied` is false when NX/NEX did not hold; `version` is the key's
/// version (the new one, or the current one when not applied).
#[pyclass(frozen, get_all, module = "mqstore._native")]
pub struct SetResult {
    /// False when NX or NEX did not hold: nothing was written.
    applied: bool,
    /// The key's version: the new one, or the current one when not applied.
    version: Option<Py<Hlc>>,
}

#[pymethods]
impl SetResult {
    fn __repr__(&self) -> String {
        format!(
            "SetResult(applied={}, version={})",
            if self.applied { "True" } else { "False" },
            repr_version(&self.version)
        )
    }
}

impl ToPy for CoreSetResult {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let result = SetResult {
            applied: self.applied,
            version: hlc(py, self.version)?,
        };
        Ok(Py::new(py, result)?.into_any())
    }
}

/// A value and the version of the SET that wrote it.
#[pyclass(frozen, get_all, module = "mqstore._native")]
pub struct Versioned {
    /// The value, as bytes.
    value: Py<PyBytes>,
    /// The version of the SET that wrote it.
    version: Option<Py<Hlc>>,
}

#[pymethods]
impl Versioned {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Versioned(value={}, version={})",
            self.value.bind(py).repr()?,
            repr_version(&self.version)
        ))
    }
}

impl ToPy for CoreVersioned {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let versioned = Versioned {
            value: py_bytes(py, &self.value),
            version: hlc(py, self.version)?,
        };
        Ok(Py::new(py, versioned)?.into_any())
    }
}

/// What a DEL or VDEL did: `deleted` is true when the key was deleted; `outcome` says why not
/// (`"absent"`, or `"value_mismatch"` for a VDEL whose value did not match).
#[pyclass(frozen, get_all, module = "mqstore._native")]
pub struct DeleteResult {
    /// True when the key was deleted.
    deleted: bool,
    /// `"deleted"`, `"absent"`, or `"value_mismatch"` (a VDEL whose value did not match).
    outcome: &'static str,
    /// The version of the delete, when the key was deleted.
    version: Option<Py<Hlc>>,
}

#[pymethods]
impl DeleteResult {
    fn __repr__(&self) -> String {
        format!(
            "DeleteResult(outcome='{}', version={})",
            self.outcome,
            repr_version(&self.version)
        )
    }
}

impl ToPy for Deletion {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let result = DeleteResult {
            deleted: self.outcome == Deleted::Deleted,
            outcome: match self.outcome {
                Deleted::Deleted => "deleted",
                Deleted::Absent => "absent",
                Deleted::ValueMismatch => "value_mismatch",
            },
            version: hlc(py, self.version)?,
        };
        Ok(Py::new(py, result)?.into_any())
    }
}

/// A change of an observed key: `value` is `None` when it was deleted or expired;
/// `synthetic` when it was found by reading the key back after a reconnect (the notification
/// itself was missed); `gap` when changes before it were not reported.
#[pyclass(frozen, get_all, module = "mqstore._native")]
pub struct Change {
    /// The key that changed.
    key: Py<PyBytes>,
    /// Its new value; `None` when it was deleted or expired.
    value: Option<Py<PyBytes>>,
    /// The change's version.
    version: Option<Py<Hlc>>,
    /// True when found by reading the key back after a reconnect or a server restart (the
    /// notification itself was missed).
    synthetic: bool,
    /// True when changes between the last one reported and this one were not reported
    /// (overtaken, or lost with a server's connection): the changes seen are not the key's
    /// whole history, and this one is its state now. True on every synthetic change too.
    gap: bool,
}

#[pymethods]
impl Change {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let value = match &self.value {
            Some(v) => v.bind(py).repr()?.to_string(),
            None => "None".into(),
        };
        Ok(format!(
            "Change(key={}, value={value}, version={}, synthetic={}, gap={})",
            self.key.bind(py).repr()?,
            repr_version(&self.version),
            if self.synthetic { "True" } else { "False" },
            if self.gap { "True" } else { "False" }
        ))
    }
}

impl ToPy for KeyChange {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let change = Change {
            key: py_bytes(py, &self.key),
            value: self.value.map(|v| py_bytes(py, &v)),
            version: hlc(py, self.version)?,
            synthetic: self.synthetic,
            gap: self.gap,
        };
        Ok(Py::new(py, change)?.into_any())
    }
}

/// A page of keys.
pub struct Keys(pub Vec<Bytes>);

impl ToPy for Keys {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let keys = self.0.iter().map(|k| PyBytes::new(py, k));
        Ok(pyo3::types::PyList::new(py, keys)?.into_any().unbind())
    }
}

fn repr_version(version: &Option<Py<Hlc>>) -> String {
    version
        .as_ref()
        .map_or_else(|| "None".into(), |v| v.get().__repr__())
}

/// JSON (a jobs or commands record) as Python objects: dicts, lists, str, int, float, bool,
/// None.
pub struct Json(pub serde_json::Value);

impl ToPy for Json {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        json_to_py(py, self.0)
    }
}

fn json_to_py(py: Python<'_>, value: serde_json::Value) -> PyResult<Py<PyAny>> {
    use serde_json::Value;
    Ok(match value {
        Value::Null => py.None(),
        Value::Bool(b) => pyo3::types::PyBool::new(py, b)
            .to_owned()
            .into_any()
            .unbind(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any().unbind(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any().unbind(),
            _ => n
                .as_f64()
                .unwrap_or(f64::NAN)
                .into_pyobject(py)?
                .into_any()
                .unbind(),
        },
        Value::String(s) => s.into_pyobject(py)?.into_any().unbind(),
        Value::Array(items) => {
            let list = pyo3::types::PyList::empty(py);
            for item in items {
                list.append(json_to_py(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Value::Object(fields) => {
            let dict = pyo3::types::PyDict::new(py);
            for (name, field) in fields {
                dict.set_item(name, json_to_py(py, field)?)?;
            }
            dict.into_any().unbind()
        }
    })
}
