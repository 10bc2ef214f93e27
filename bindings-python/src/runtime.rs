//! How Python waits for a call: a blocking client's call made on the calling thread with the
//! GIL released (interruptible by Ctrl-C); and the values calls hand to Python. (An async
//! client's calls are asyncio futures of its loop: `driven.rs`.)

use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use mqstore_core::client::ClientError;
use pyo3::prelude::*;

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

/// `call`'s result, with a panic in it turned into an error: no panic reaches Python (as a
/// `PanicException`) or leaves an asyncio future unresolved.
pub(crate) fn unwind_safe<T>(call: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call))
        .unwrap_or_else(|panic| Err(Failure::Python(internal_error(&*panic))))
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

thread_local! {
    /// The exception a signal handler raised while a blocking call waited (Ctrl-C's
    /// `KeyboardInterrupt`), to raise once the call gave up.
    static RAISED: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Runs the signal handlers (with the GIL); true when one raised, which gives the call up.
fn signal_raised() -> bool {
    Python::attach(|py| match py.check_signals() {
        Ok(()) => false,
        Err(e) => {
            RAISED.with(|raised| *raised.borrow_mut() = Some(e));
            true
        }
    })
}

/// Python's main thread (`threading.main_thread().ident`) in the process with this id: the
/// only thread whose waits look for signals, since Python runs signal handlers there alone (a
/// child made by `fork()` has the forking thread as its main thread).
static MAIN_THREAD: AtomicU64 = AtomicU64::new(0);
static MAIN_THREAD_PID: AtomicU32 = AtomicU32::new(0);

/// Whether this is Python's main thread. (Both statics are written with the GIL held.)
fn on_main_thread(py: Python<'_>) -> bool {
    let pid = std::process::id();
    if MAIN_THREAD_PID.load(Ordering::Relaxed) != pid {
        let main = py
            .import("threading")
            .and_then(|threading| threading.call_method0("main_thread"))
            .and_then(|main| main.getattr("ident"))
            .and_then(|ident| ident.extract::<u64>());
        let Ok(main) = main else {
            return true; // unknown: look for signals, as every thread did before
        };
        MAIN_THREAD.store(main, Ordering::Relaxed);
        MAIN_THREAD_PID.store(pid, Ordering::Relaxed);
    }
    // SAFETY: takes no arguments and only reads the calling thread's id.
    let this = unsafe { pyo3::ffi::PyThread_get_thread_ident() };
    #[allow(clippy::useless_conversion)] // c_ulong is u32 on 32-bit targets
    let this = u64::from(this);
    MAIN_THREAD.load(Ordering::Relaxed) == this
}

/// Makes a blocking client's call (`call`) on this thread with the GIL released. On the main
/// thread a signal handler that raises (Ctrl-C) gives the call up and its exception is raised
/// (a request already sent may still be applied); other threads have no signals to look for,
/// so their calls wait without taking the GIL back every 50 ms. A panic becomes an error.
pub fn blocking<T: ToPy>(
    py: Python<'_>,
    call: impl FnOnce() -> Result<T, Failure> + Send,
) -> PyResult<Py<PyAny>> {
    let mut call = Some(call);
    let mut result = None;
    detached(py, &mut || result = call.take().map(|call| call()))?;
    match result {
        Some(result) => result.map_err(|e| e.into_py_err(py))?.to_py(py),
        None => Err(internal_error(&"a blocking call did not run")),
    }
}

/// Runs `run` as [`blocking`] says; an error when it panicked or a signal handler raised. Not
/// generic: the waiting is compiled once, not once per call (which made the Python module
/// 14 kB larger).
fn detached(py: Python<'_>, run: &mut (dyn FnMut() + Send)) -> PyResult<()> {
    let run = move || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).map_err(|p| internal_error(&*p))
    };
    let (ran, interrupted) = if on_main_thread(py) {
        py.detach(|| mqstore_net::blocking::interruptible(signal_raised, run))
    } else {
        (py.detach(run), false)
    };
    if interrupted && let Some(raised) = RAISED.with(|raised| raised.borrow_mut().take()) {
        return Err(raised);
    }
    ran
}

/// The next item of a blocking client's stream, waiting up to `timeout` (`None`: until one
/// comes) with the GIL released and, on the main thread, signals handled meanwhile;
/// `Ok(None)` when the time passed or the stream ended (`ended`, if given, tells which).
pub fn receive<T: Send>(
    py: Python<'_>,
    items: &Mutex<Receiver<T>>,
    timeout: Option<Duration>,
    ended: Option<&AtomicBool>,
) -> PyResult<Option<T>> {
    let until = timeout.map(|t| std::time::Instant::now() + t);
    // Other threads wait in one go (a day at a time, for "until one comes").
    let check = if on_main_thread(py) {
        SIGNAL_CHECK
    } else {
        Duration::from_secs(86_400)
    };
    loop {
        let slice = until.map_or(check, |until| {
            check.min(until.saturating_duration_since(std::time::Instant::now()))
        });
        let next = py.detach(|| {
            let items = items.lock().unwrap_or_else(|e| e.into_inner());
            items.recv_timeout(slice)
        });
        match next {
            Ok(item) => return Ok(Some(item)),
            Err(RecvTimeoutError::Disconnected) => {
                if let Some(ended) = ended {
                    ended.store(true, Ordering::Relaxed);
                }
                return Ok(None);
            }
            Err(RecvTimeoutError::Timeout) => {
                py.check_signals()?;
                if until.is_some_and(|until| std::time::Instant::now() >= until) {
                    return Ok(None);
                }
            }
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
pub(crate) fn enter_python(f: impl FnOnce(Python<'_>)) {
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

/// An asyncio future of the running loop, resolved with `value` already.
pub fn done<T: ToPy>(py: Python<'_>, value: Result<T, Failure>) -> PyResult<Py<PyAny>> {
    let future = crate::driven::running_loop(py)?.call_method0("create_future")?;
    let future = future.unbind();
    crate::driven::resolve(py, &future, crate::driven::outcome(py, value))?;
    Ok(future)
}

/// A client error as the failure of a call.
pub fn client<T>(result: Result<T, ClientError>) -> Result<T, Failure> {
    result.map_err(errors::Failure::Client)
}

/// A call that panics, for the test that no panic reaches Python (`tests/test_errors.py`):
/// the blocking one in [`blocking`], the asyncio one where every asyncio call's answer is
/// resolved ([`crate::driven::resolved_with`]). (A test hook: not in the release wheels.)
#[cfg(feature = "test-hooks")]
#[pyfunction]
pub fn _panicking_call(py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
    const PANIC: &str = "a deliberate panic in a call";
    if aio {
        let future = crate::driven::running_loop(py)?
            .call_method0("create_future")?
            .unbind();
        crate::driven::resolved_with(future.clone_ref(py), Box::new(|_| panic!("{PANIC}")))(py)?;
        Ok(future)
    } else {
        blocking(py, || -> Result<(), Failure> { panic!("{PANIC}") })
    }
}
