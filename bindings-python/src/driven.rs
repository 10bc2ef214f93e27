//! The asyncio client's connection, driven by the event loop itself: the loop waits on the
//! socket (`add_reader`, and `add_writer` while bytes wait), on the client's wake-up socket and
//! on the session's next deadline (`call_later`); on each wake-up [`Driven`] reads, acts, and
//! resolves the asyncio futures of what finished — on the loop's thread, so a call's answer
//! reaches its coroutine with no other thread on the way. The client's helper thread only
//! reconnects (and wakes the loop once it has).
//!
//! Results are handed over as closures ([`Resolution`]) that a thread without the GIL queues —
//! the loop's own while it drives, another when a connection is lost or a stream ends — and the
//! loop runs with the GIL; a queue filled off the loop's thread wakes it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use mqstore_core::client::ClientError;
use mqstore_net::Listener;
use mqstore_net::blocking::{self, Call, Interest, Start};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCFunction;

use crate::errors::Failure;
use crate::runtime::ToPy;

/// Resolves an asyncio future (or does what else a result needs) on the loop's thread.
pub(crate) type Resolution = Box<dyn FnOnce(Python<'_>) -> PyResult<()> + Send>;

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where the outcome of something a driven client started goes.
pub(crate) type Delivered<U> = Box<dyn FnOnce(Result<U, ClientError>) + Send>;

/// An `AsyncClient`'s connection on its event loop.
pub(crate) struct Driven {
    driver: blocking::Driver,
    event_loop: Py<PyAny>,
    /// The loop's thread: what is queued from elsewhere wakes it.
    loop_thread: ThreadId,
    ready: Mutex<Vec<Resolution>>,
    watched: Mutex<Watched>,
    /// The loop's callbacks (bound once: a lookup per wake-up would cost more than the rest).
    on_ready: Py<PyAny>,
    on_timer: Py<PyAny>,
}

/// What the loop has been asked to watch.
#[derive(Default)]
struct Watched {
    socket: Option<(i32, u64)>,
    writing: bool,
    /// The timer set, and when it fires.
    timer: Option<(Instant, Py<PyAny>)>,
    /// Stopped watching: the client closed.
    detached: bool,
}

/// The loop's callbacks; they hold the connection weakly, so that the loop's registrations
/// do not keep it.
#[pyclass(frozen, module = "mqstore._native")]
pub struct LoopCallbacks {
    driven: Weak<Driven>,
}

#[pymethods]
impl LoopCallbacks {
    /// The socket, or the wake-up, is ready.
    fn ready(&self, py: Python<'_>) -> PyResult<()> {
        match self.driven.upgrade() {
            Some(driven) => driven.drive(py),
            None => Ok(()),
        }
    }

    /// The timer fired.
    fn timer(&self, py: Python<'_>) -> PyResult<()> {
        match self.driven.upgrade() {
            Some(driven) => {
                lock(&driven.watched).timer = None;
                driven.drive(py)
            }
            None => Ok(()),
        }
    }
}

/// `asyncio.get_running_loop()`.
pub(crate) fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    GET_RUNNING_LOOP
        .import(py, "asyncio", "get_running_loop")?
        .call0()
}

/// Sets `future`'s outcome, unless it is done already (cancelled: nobody waits).
pub(crate) fn resolve(
    py: Python<'_>,
    future: &Py<PyAny>,
    outcome: PyResult<Py<PyAny>>,
) -> PyResult<()> {
    let future = future.bind(py);
    if future.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    match outcome {
        Ok(value) => future.call_method1("set_result", (value,))?,
        Err(e) => future.call_method1("set_exception", (e.into_value(py),))?,
    };
    Ok(())
}

/// What a finished call's future is resolved with, made with the GIL held.
pub(crate) type Outcome = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// What resolves `future` with what `outcome` makes (a panic in it as an error). Not generic:
/// the unwinding and the resolving are compiled once, not once per call.
pub(crate) fn resolved_with(future: Py<PyAny>, outcome: Outcome) -> Resolution {
    Box::new(move |py| {
        let outcome = crate::runtime::unwind_safe(move || outcome(py).map_err(Failure::Python))
            .map_err(|e| e.into_py_err(py));
        resolve(py, &future, outcome)
    })
}

/// A finished value as Python's, or the failure's exception.
pub(crate) fn outcome<T: ToPy>(py: Python<'_>, value: Result<T, Failure>) -> PyResult<Py<PyAny>> {
    match value {
        Ok(value) => value.to_py(py),
        Err(e) => Err(e.into_py_err(py)),
    }
}

impl Driven {
    /// Starts driving `driver`'s connection on `event_loop` (this thread's running loop).
    pub(crate) fn attach(
        py: Python<'_>,
        driver: blocking::Driver,
        event_loop: Py<PyAny>,
    ) -> PyResult<Arc<Driven>> {
        let mut failed = None;
        let driven = Arc::new_cyclic(|weak: &Weak<Driven>| {
            let callbacks = Py::new(
                py,
                LoopCallbacks {
                    driven: weak.clone(),
                },
            );
            let bound = |name: &str| match &callbacks {
                Ok(callbacks) => callbacks.getattr(py, name),
                Err(e) => Err(e.clone_ref(py)),
            };
            let (on_ready, on_timer) = match (bound("ready"), bound("timer")) {
                (Ok(ready), Ok(timer)) => (ready, timer),
                (Err(e), _) | (_, Err(e)) => {
                    failed = Some(e);
                    (py.None(), py.None())
                }
            };
            Driven {
                driver,
                event_loop,
                loop_thread: std::thread::current().id(),
                ready: Mutex::new(Vec::new()),
                watched: Mutex::new(Watched::default()),
                on_ready,
                on_timer,
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        let wake_fd = driven.driver.wake_fd();
        (driven.event_loop).call_method1(py, "add_reader", (wake_fd, &driven.on_ready))?;
        driven.drive(py)?;
        Ok(driven)
    }

    /// Queues `resolution` for the loop, waking it when this is another thread.
    pub(crate) fn queue(&self, resolution: Resolution) {
        lock(&self.ready).push(resolution);
        if std::thread::current().id() != self.loop_thread {
            self.driver.wake();
        }
    }

    /// A new future of the loop.
    pub(crate) fn future(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.event_loop.call_method0(py, "create_future")
    }

    /// A future of the loop resolved with `value` already.
    pub(crate) fn ready_future<T: ToPy>(
        &self,
        py: Python<'_>,
        value: Result<T, Failure>,
    ) -> PyResult<Py<PyAny>> {
        let future = self.future(py)?;
        resolve(py, &future, outcome(py, value))?;
        Ok(future)
    }

    /// Starts `call` on `client`: its asyncio future, resolved with `then` of its value.
    pub(crate) fn call<S: Start, U: Send + 'static, T: ToPy>(
        self: &Arc<Self>,
        py: Python<'_>,
        client: &blocking::Client,
        call: Call<S, U>,
        then: impl FnOnce(U) -> Result<T, Failure> + Send + 'static,
    ) -> PyResult<Py<PyAny>> {
        let future = self.future(py)?;
        client.start_call(call, self.resolution(future.clone_ref(py), then));
        self.settle(py, self.driver.interest())?;
        Ok(future)
    }

    /// Starts what `start` starts, given where its outcome goes: an asyncio future resolved
    /// with `then` of its value.
    pub(crate) fn begin<U: Send + 'static, T: ToPy>(
        self: &Arc<Self>,
        py: Python<'_>,
        start: impl FnOnce(Delivered<U>),
        then: impl FnOnce(U) -> Result<T, Failure> + Send + 'static,
    ) -> PyResult<Py<PyAny>> {
        let future = self.future(py)?;
        start(Box::new(self.resolution(future.clone_ref(py), then)));
        self.started(py)?;
        Ok(future)
    }

    /// What hands a started call's value (made Python's by `then`) to `future`.
    pub(crate) fn resolution<U: Send + 'static, T: ToPy>(
        self: &Arc<Self>,
        future: Py<PyAny>,
        then: impl FnOnce(U) -> Result<T, Failure> + Send + 'static,
    ) -> impl FnOnce(Result<U, ClientError>) + Send + 'static {
        let driven = self.clone();
        move |value| {
            let value = value.map_err(Failure::Client);
            driven.queue(resolved_with(
                future,
                Box::new(move |py| outcome(py, value.and_then(then))),
            ))
        }
    }

    /// After calls were started outside [`Driven::call`]: resolves what finished at once and
    /// watches what the connection needs now.
    pub(crate) fn started(&self, py: Python<'_>) -> PyResult<()> {
        self.settle(py, self.driver.interest())
    }

    fn drive(&self, py: Python<'_>) -> PyResult<()> {
        let interest = self.driver.drive();
        self.settle(py, interest)
    }

    /// Runs the queued resolutions and watches what `interest` says.
    fn settle(&self, py: Python<'_>, interest: Interest) -> PyResult<()> {
        loop {
            let ready = std::mem::take(&mut *lock(&self.ready));
            if ready.is_empty() {
                break;
            }
            for resolution in ready {
                resolution(py)?;
            }
        }
        let event_loop = self.event_loop.bind(py);
        let mut watched = lock(&self.watched);
        if watched.detached {
            return Ok(());
        }
        if watched.socket != interest.socket {
            if let Some((fd, _)) = watched.socket.take() {
                event_loop.call_method1("remove_reader", (fd,))?;
                if watched.writing {
                    event_loop.call_method1("remove_writer", (fd,))?;
                    watched.writing = false;
                }
            }
            if let Some((fd, _)) = interest.socket {
                event_loop.call_method1("add_reader", (fd, &self.on_ready))?;
            }
            watched.socket = interest.socket;
        }
        if let Some((fd, _)) = watched.socket
            && watched.writing != interest.write
        {
            if interest.write {
                event_loop.call_method1("add_writer", (fd, &self.on_ready))?;
            } else {
                event_loop.call_method1("remove_writer", (fd,))?;
            }
            watched.writing = interest.write;
        }
        // A timer already set for sooner stays: when it fires the loop drives and sets the
        // next (the session's deadlines only move later as calls finish).
        if let Some(at) = interest.deadline
            && watched.timer.as_ref().is_none_or(|(set, _)| at < *set)
        {
            if let Some((_, timer)) = watched.timer.take() {
                timer.call_method0(py, "cancel")?;
            }
            let delay = at.saturating_duration_since(Instant::now()).as_secs_f64();
            let timer = event_loop.call_method1("call_later", (delay, &self.on_timer))?;
            watched.timer = Some((at, timer.unbind()));
        }
        Ok(())
    }

    /// Stops watching (the client closed), after running what the close resolved.
    pub(crate) fn detach(&self, py: Python<'_>) -> PyResult<()> {
        self.settle(py, self.driver.interest())?;
        self.detach_quietly(py)
    }
}

/// What a driven stream has: items not taken yet, the futures waiting for the next, and
/// whether it ended.
struct Waiting<T> {
    items: VecDeque<T>,
    waiters: VecDeque<Waiter>,
    /// No item comes any more.
    closed: bool,
}

/// A `next` waiting: its future, and the timer of its timeout (cancelled once it is resolved,
/// so that a long timeout does not keep a timer per item in the loop).
struct Waiter {
    future: Py<PyAny>,
    timer: Option<Py<PyAny>>,
}

impl Waiter {
    /// Resolves the future with `outcome` (unless it is done) and cancels the timer.
    fn resolve(self, py: Python<'_>, outcome: PyResult<Py<PyAny>>) -> PyResult<()> {
        if let Some(timer) = &self.timer {
            timer.call_method0(py, "cancel")?;
        }
        resolve(py, &self.future, outcome)
    }
}

/// A stream of a driven client (changes, notifications, records, events, results), fed by a
/// listener on whichever thread reads the connection and taken by `next` on the loop.
pub(crate) struct Queue<T> {
    driven: Arc<Driven>,
    waiting: Mutex<Waiting<T>>,
    /// Set once a `next` found the stream ended: closed, every item taken.
    ended: Arc<AtomicBool>,
    to_py: fn(Python<'_>, T) -> PyResult<Py<PyAny>>,
}

impl<T: Send + 'static> Queue<T> {
    pub(crate) fn new(
        driven: Arc<Driven>,
        ended: Arc<AtomicBool>,
        to_py: fn(Python<'_>, T) -> PyResult<Py<PyAny>>,
    ) -> Arc<Queue<T>> {
        Arc::new(Queue {
            driven,
            waiting: Mutex::new(Waiting {
                items: VecDeque::new(),
                waiters: VecDeque::new(),
                closed: false,
            }),
            ended,
            to_py,
        })
    }

    /// A listener that feeds this queue while it exists and ends it once dropped (the
    /// client closed, or the key was unobserved).
    pub(crate) fn listener(self: &Arc<Self>) -> Listener<T> {
        let feed = Feed(Arc::downgrade(self));
        Box::new(move |item| match feed.0.upgrade() {
            Some(queue) => {
                queue.push(item);
                true
            }
            None => false,
        })
    }

    /// Hands `item` to the first waiting future, or keeps it.
    pub(crate) fn push(self: &Arc<Self>, item: T) {
        let mut waiting = lock(&self.waiting);
        match waiting.waiters.pop_front() {
            Some(waiter) => {
                let queue = self.clone();
                self.driven.queue(Box::new(move |py| {
                    if waiter.future.bind(py).call_method0("done")?.is_truthy()? {
                        // Its waiter gave up: the item goes to the next.
                        queue.push_front(item);
                        return Ok(());
                    }
                    let value = (queue.to_py)(py, item);
                    waiter.resolve(py, value)
                }));
            }
            None => waiting.items.push_back(item),
        }
    }

    fn push_front(self: &Arc<Self>, item: T) {
        let mut waiting = lock(&self.waiting);
        if waiting.waiters.is_empty() {
            waiting.items.push_front(item);
        } else {
            drop(waiting);
            self.push(item);
        }
    }

    /// Whether the stream ended.
    pub(crate) fn ended(&self) -> bool {
        self.ended.load(Ordering::Relaxed)
    }

    /// Ends the stream: no item comes any more, waiting futures get `None`.
    pub(crate) fn end(&self) {
        let mut waiting = lock(&self.waiting);
        waiting.closed = true;
        let waiters = std::mem::take(&mut waiting.waiters);
        drop(waiting);
        if !waiters.is_empty() {
            // Waiters wait only when no item is there: the stream is found ended.
            self.ended.store(true, Ordering::Relaxed);
            self.driven.queue(Box::new(move |py| {
                for waiter in waiters {
                    waiter.resolve(py, Ok(py.None()))?;
                }
                Ok(())
            }));
        }
    }

    /// The next item as an asyncio future: at once when one is there (or the stream ended:
    /// `None`), else when one comes — or `None` once `timeout` passed.
    pub(crate) fn next(
        self: &Arc<Self>,
        py: Python<'_>,
        timeout: Option<Duration>,
    ) -> PyResult<Py<PyAny>> {
        let future = self.driven.future(py)?;
        let mut waiting = lock(&self.waiting);
        if let Some(item) = waiting.items.pop_front() {
            drop(waiting);
            resolve(py, &future, (self.to_py)(py, item))?;
            return Ok(future);
        }
        if waiting.closed {
            drop(waiting);
            self.ended.store(true, Ordering::Relaxed);
            resolve(py, &future, Ok(py.None()))?;
            return Ok(future);
        }
        drop(waiting);
        let timer = match timeout {
            None => None,
            Some(timeout) => {
                let (queue, waiter) = (Arc::downgrade(self), future.clone_ref(py));
                let expire = PyCFunction::new_closure(py, None, None, move |args, _| {
                    let py = args.py();
                    if let Some(queue) = queue.upgrade() {
                        let mut waiting = lock(&queue.waiting);
                        let at = waiting.waiters.iter().position(|w| w.future.is(&waiter));
                        if let Some(at) = at {
                            waiting.waiters.remove(at);
                        }
                    }
                    resolve(py, &waiter, Ok(py.None()))
                })?;
                let delay = timeout.as_secs_f64();
                let event_loop = self.driven.event_loop.bind(py);
                Some(
                    event_loop
                        .call_method1("call_later", (delay, expire))?
                        .unbind(),
                )
            }
        };
        let waiter = Waiter {
            future: future.clone_ref(py),
            timer,
        };
        let mut waiting = lock(&self.waiting);
        if let Some(item) = waiting.items.pop_front() {
            // An item came while the timer was set (from another thread).
            drop(waiting);
            waiter.resolve(py, (self.to_py)(py, item))?;
        } else if waiting.closed {
            drop(waiting);
            self.ended.store(true, Ordering::Relaxed);
            waiter.resolve(py, Ok(py.None()))?;
        } else {
            waiting.waiters.push_back(waiter);
        }
        Ok(future)
    }
}

/// A queue's listener end: dropping it ends the queue.
struct Feed<T: Send + 'static>(Weak<Queue<T>>);

impl<T: Send + 'static> Drop for Feed<T> {
    fn drop(&mut self) {
        if let Some(queue) = self.0.upgrade() {
            queue.end();
        }
    }
}

impl Drop for Driven {
    /// A client dropped without `close()`: the loop stops watching its descriptors, which
    /// close with it (a later socket may get their numbers).
    fn drop(&mut self) {
        crate::runtime::enter_python(|py| {
            let _ = self.detach_quietly(py);
        });
    }
}

impl Driven {
    fn detach_quietly(&self, py: Python<'_>) -> PyResult<()> {
        let mut watched = lock(&self.watched);
        if std::mem::replace(&mut watched.detached, true) {
            return Ok(());
        }
        let event_loop = self.event_loop.bind(py);
        if event_loop.call_method0("is_closed")?.is_truthy()? {
            return Ok(());
        }
        event_loop.call_method1("remove_reader", (self.driver.wake_fd(),))?;
        if let Some((fd, _)) = watched.socket.take() {
            event_loop.call_method1("remove_reader", (fd,))?;
            if watched.writing {
                event_loop.call_method1("remove_writer", (fd,))?;
            }
        }
        if let Some((_, timer)) = watched.timer.take() {
            timer.call_method0(py, "cancel")?;
        }
        Ok(())
    }
}
