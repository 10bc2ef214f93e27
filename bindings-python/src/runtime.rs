//! The tokio runtime the module owns, and the two ways Python waits for a Rust future: blocking
//! with the GIL released (interruptible by Ctrl-C), or as an `asyncio` future.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use mqstore_core::client::ClientError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use tokio::runtime::Runtime;
use tokio::task::AbortHandle;

use crate::errors::{self, Failure};

/// How often a blocked call looks for a pending signal (Ctrl-C).
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// A value a finished call hands to Python, converted where the GIL is held.
pub trait ToPy: Send + 'static {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>>;
}

impl ToPy for () {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(py.None())
    }
}

impl ToPy for bool {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(pyo3::types::PyBool::new(py, self)
            .to_owned()
            .into_any()
            .unbind())
    }
}

impl<T: ToPy> ToPy for Option<T> {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self {
            Some(value) => value.to_py(py),
            None => Ok(py.None()),
        }
    }
}

/// The process's runtime. A child made by `fork()` has none of its parent's threads, so it gets
/// a runtime of its own (the parent's is leaked: dropping it would wait for threads that do
/// not exist in the child).
struct ProcessRuntime {
    pid: u32,
    runtime: &'static Runtime,
}

static RUNTIME: Mutex<Option<ProcessRuntime>> = Mutex::new(None);

pub fn runtime() -> PyResult<&'static Runtime> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(current) = slot.as_ref().filter(|r| r.pid == pid) {
        return Ok(current.runtime);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("mqstore")
        .enable_all()
        .build()
        .map_err(|e| {
            pyo3::exceptions::PyOSError::new_err(format!("cannot start mqstore's runtime: {e}"))
        })?;
    let runtime: &'static Runtime = Box::leak(Box::new(runtime));
    *slot = Some(ProcessRuntime { pid, runtime });
    Ok(runtime)
}

/// `future`, with a panic in it turned into an error: no panic reaches Python (as a
/// `PanicException`) or leaves an asyncio future unresolved.
fn unwind_safe<F, T>(future: F) -> impl Future<Output = Result<T, Failure>>
where
    F: Future<Output = Result<T, Failure>>,
{
    std::panic::AssertUnwindSafe(future)
        .catch_unwind()
        .map(|caught| caught.unwrap_or_else(|panic| Err(Failure::Python(internal_error(&*panic)))))
}

fn internal_error(panic: &(dyn std::any::Any + Send)) -> PyErr {
    let what = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    pyo3::exceptions::PyRuntimeError::new_err(format!(
        "internal error in mqstore (a bug: please report it): {what}"
    ))
}

/// Runs `future` to completion on the calling thread with the GIL released, checking for
/// signals every [`SIGNAL_CHECK`]: a `KeyboardInterrupt` drops the future (a request already
/// sent may still be applied).
pub fn wait<F, T>(py: Python<'_>, future: F) -> PyResult<T>
where
    F: Future<Output = Result<T, Failure>> + Send,
    T: Send,
{
    let runtime = runtime()?;
    let mut future = std::pin::pin!(unwind_safe(future));
    loop {
        // The timer is made inside the runtime: it needs the runtime's clock.
        let polled = py.detach(|| {
            runtime.block_on(async { tokio::time::timeout(SIGNAL_CHECK, future.as_mut()).await })
        });
        match polled {
            Ok(result) => return result.map_err(|e| e.into_py_err(py)),
            Err(_elapsed) => py.check_signals()?,
        }
    }
}

/// Set once the interpreter exits (an `atexit` handler calls [`_shutdown`]): from then on a
/// worker thread never enters Python. One that tried during finalization would be ended by the
/// interpreter inside Rust frames, which aborts the process (seen: an asyncio program's late
/// answer arriving while Python exits).
static EXITING: AtomicBool = AtomicBool::new(false);
/// Worker threads inside Python now; `_shutdown` waits for them to leave.
static IN_PYTHON: AtomicUsize = AtomicUsize::new(0);

/// Runs `f` with the GIL from a worker thread, unless the interpreter is exiting.
fn enter_python(f: impl FnOnce(Python<'_>)) {
    IN_PYTHON.fetch_add(1, Ordering::SeqCst);
    if !EXITING.load(Ordering::SeqCst) {
        Python::attach(f);
    }
    IN_PYTHON.fetch_sub(1, Ordering::SeqCst);
}

/// Called at interpreter exit (`atexit`, registered by the package): worker threads stop
/// entering Python, and those inside finish first (waited for with the GIL released).
#[pyfunction]
pub fn _shutdown(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        while IN_PYTHON.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// Runs `future` on the runtime and returns an `asyncio` future of the running loop that
/// resolves with its result. Cancelling the asyncio future aborts the Rust one.
pub fn spawn_awaitable<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<T, Failure>> + Send + 'static,
    T: ToPy,
{
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let event_loop = GET_RUNNING_LOOP
        .import(py, "asyncio", "get_running_loop")?
        .call0()?;
    let awaitable = event_loop.call_method0("create_future")?;
    let target = awaitable.clone().unbind();
    let event_loop = event_loop.unbind();
    let task = runtime()?.spawn(async move {
        let outcome = unwind_safe(future).await;
        enter_python(|py| {
            let result = match outcome {
                Ok(value) => value.to_py(py),
                Err(e) => Err(e.into_py_err(py)),
            };
            let resolve = Resolve {
                future: target,
                result: Mutex::new(Some(result)),
            };
            // A closed loop has nobody left to tell.
            let _ = event_loop.call_method1(py, "call_soon_threadsafe", (resolve,));
        });
    });
    awaitable.call_method1(
        "add_done_callback",
        (AbortOnCancel {
            task: task.abort_handle(),
        },),
    )?;
    Ok(awaitable)
}

/// Sets an asyncio future's result on its loop's thread (asyncio futures are not thread-safe).
#[pyclass(frozen)]
struct Resolve {
    future: Py<PyAny>,
    result: Mutex<Option<PyResult<Py<PyAny>>>>,
}

#[pymethods]
impl Resolve {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let future = self.future.bind(py);
        let taken = self.result.lock().ok().and_then(|mut r| r.take());
        let Some(result) = taken else { return Ok(()) };
        // Cancelled meanwhile: the caller stopped waiting.
        if future.call_method0("done")?.is_truthy()? {
            return Ok(());
        }
        match result {
            Ok(value) => future.call_method1("set_result", (value,))?,
            Err(e) => future.call_method1("set_exception", (e.into_value(py),))?,
        };
        Ok(())
    }
}

/// Aborts the Rust task when its asyncio future is cancelled.
#[pyclass(frozen)]
struct AbortOnCancel {
    task: AbortHandle,
}

#[pymethods]
impl AbortOnCancel {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        if future.call_method0("cancelled")?.is_truthy()? {
            self.task.abort();
        }
        Ok(())
    }
}

/// Either waits (`aio` false) or returns an awaitable (`aio` true): every native call takes
/// this flag, so the sync and asyncio clients share one implementation.
pub fn run<F, T>(py: Python<'_>, aio: bool, future: F) -> PyResult<Py<PyAny>>
where
    F: Future<Output = Result<T, Failure>> + Send + 'static,
    T: ToPy,
{
    if aio {
        Ok(spawn_awaitable(py, future)?.unbind())
    } else {
        wait(py, future)?.to_py(py)
    }
}

/// A client error as the failure of a call.
pub fn client<T>(result: Result<T, ClientError>) -> Result<T, Failure> {
    result.map_err(errors::Failure::Client)
}

/// A call that panics, for the test that no panic reaches Python (`tests/test_errors.py`).
#[pyfunction]
pub fn _panicking_call(py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
    run(py, aio, async move {
        let call = || -> Result<(), Failure> { panic!("a deliberate panic in a call") };
        call()
    })
}
