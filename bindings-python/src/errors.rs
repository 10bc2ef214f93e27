//! Errors as Python exceptions: the classes live in `mqstore/errors.py`, one per stable code
//! (`ClientError::code`); this side only passes the code, the message and the details.

use mqstore_core::ServiceError;
use mqstore_core::client::ClientError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// Why a call failed.
pub enum Failure {
    Client(ClientError),
    /// An exception raised by the binding itself (bad arguments, use after fork).
    Python(PyErr),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Failure::Client(e)
    }
}

impl From<PyErr> for Failure {
    fn from(e: PyErr) -> Self {
        Failure::Python(e)
    }
}

impl Failure {
    pub fn into_py_err(self, py: Python<'_>) -> PyErr {
        match self {
            Failure::Client(e) => client_error(py, &e),
            Failure::Python(e) => e,
        }
    }
}

/// The exception of `mqstore.errors` for this error.
pub fn client_error(py: Python<'_>, error: &ClientError) -> PyErr {
    let detail = match error {
        ClientError::Service(e) => Some(e.text().to_owned()),
        ClientError::Jobs { code, .. } => Some(code.clone()),
        ClientError::CommandFailed { id, .. }
        | ClientError::CommandRejected { id, .. }
        | ClientError::CommandTimedOut { id } => Some(id.clone()),
        ClientError::PublishRefused { code } => Some(code.to_string()),
        ClientError::Status { status, .. } => Some(status.to_string()),
        _ => None,
    };
    exception(py, error.code(), &error.to_string(), detail)
}

/// A state store refusal (`-ERR text`) as its exception, for the codec.
pub fn service_error(py: Python<'_>, error: &ServiceError) -> PyErr {
    client_error(py, &ClientError::Service(error.clone()))
}

fn exception(py: Python<'_>, code: u16, message: &str, detail: Option<String>) -> PyErr {
    static ERROR_FOR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let made = ERROR_FOR
        .import(py, "mqstore.errors", "_error_for")
        .and_then(|error_for| error_for.call1((code, message, detail)));
    match made {
        Ok(exception) => PyErr::from_value(exception),
        Err(e) => e,
    }
}

/// One example of every error the client can report, with its code: the test suite checks
/// that each code has a class of its own. (A test hook: not in the release wheels.)
#[cfg(feature = "test-hooks")]
#[pyfunction]
pub fn error_examples() -> Vec<(u16, String)> {
    let answer = || {
        Box::new(mqstore_core::commands::Answer {
            status: mqstore_core::commands::Status::Failed,
            payload: bytes::Bytes::from_static(b"overheated"),
            content_type: None,
            code: None,
            message: None,
            app_error_code: None,
            app_error_payload: None,
            reason_code: None,
            result: None,
        })
    };
    let mut examples: Vec<ClientError> = ServiceError::KNOWN
        .into_iter()
        .chain([ServiceError::Other("the moon is full".into())])
        .map(ClientError::Service)
        .collect();
    examples.extend([
        ClientError::Status {
            status: 503,
            message: "overloaded".into(),
        },
        ClientError::Timeout(10),
        ClientError::Disconnected,
        ClientError::Malformed("truncated".into()),
        ClientError::Unexpected {
            command: "SET",
            response: mqstore_core::codec::Response::Absent,
        },
        ClientError::Clock(mqstore_core::hlc::HlcError::CounterOverflow),
        ClientError::Unreachable("connection refused".into()),
        ClientError::Refused {
            code: 0x87,
            reason: None,
        },
        ClientError::Protocol("reason code 0x01 in a PUBACK".into()),
        ClientError::TooLarge { size: 10, max: 5 },
        ClientError::BrokerDisconnected {
            code: 0x8E,
            reason: None,
        },
        ClientError::Jobs {
            code: "ResourceNotFound".into(),
            message: "no such job".into(),
            execution_state: None,
        },
        ClientError::CommandFailed {
            id: "c1".into(),
            answer: answer(),
        },
        ClientError::CommandRejected {
            id: "c1".into(),
            answer: answer(),
        },
        ClientError::CommandTimedOut { id: "c1".into() },
        ClientError::PublishRefused { code: 0x95 },
    ]);
    examples.iter().map(|e| (e.code(), e.to_string())).collect()
}

/// Every kind of error core defines: its stable code and its class's name without `Error`.
/// The test suite checks that `mqstore.errors` has each class with that code. (A test hook.)
#[cfg(feature = "test-hooks")]
#[pyfunction]
pub fn error_kinds() -> Vec<(u16, &'static str)> {
    mqstore_core::ErrorKind::ALL
        .into_iter()
        .map(|kind| (kind.code(), kind.name()))
        .collect()
}

/// A client used in a process that inherited it through `fork()`.
pub fn forked(owner: u32, pid: u32) -> PyErr {
    let message = format!(
        "this client was connected in process {owner} and cannot be used in process {pid}, \
         a child made by fork(): its connection's threads do not exist here; connect a new \
         Client in the child"
    );
    Python::attach(|py| exception(py, 0, &message, None))
}
