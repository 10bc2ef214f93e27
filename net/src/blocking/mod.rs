//! The blocking client: the core's client [`Session`] driven by the threads that call it, with
//! no async runtime and no hand-off of a call to another thread.
//!
//! A call starts in the session and its request is written to the socket by the calling thread
//! itself; then one waiting caller at a time — the *reader* — polls the socket, feeds the
//! session what arrives, and hands each finished call to its thread (leader and followers).
//! A caller alone with the connection thus writes, waits in poll(2) and reads its answer on its
//! own thread: no wake-up of another thread on the way. When the reader's own call finishes it
//! passes the socket to another waiting caller.
//!
//! While no call is in progress a helper thread reads instead, so observations, keep-alive and
//! reconnects go on: it takes the socket once it has been left alone for [`IDLE_GRACE`] (so
//! calls made back to back never wait for it), gives it to the next caller that arrives
//! (interrupting its poll through a socket pair), and reconnects after a lost connection,
//! failing the calls in flight as the session decides. It never runs a call's I/O while a
//! caller could.
//!
//! An event loop can drive the connection instead ([`Client::connect_driven`]): it waits on
//! what the [`Driver`] says (the socket, a wake-up socket, the next deadline) and calls
//! [`Driver::drive`]; calls are started ([`Client::start_call`], the calls of [`calls`]) and
//! their results delivered on the loop's thread. The helper thread then only reconnects.

pub mod calls;
mod link;
mod poll;
mod services;
mod shadow;

pub use calls::{Call, Start};
pub use services::{FanOut, Jobs, Lease};
pub use shadow::Shadow;

use std::cell::Cell;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::LastWill;
use tracing::{debug, warn};

use crate::client::{ClientOptions, KeyChange, SetOptions};
use crate::listeners::{Functions, Listener, Listeners};
use crate::{now_ms, random_u64};
use link::{Hello, Link, Received};
use mqstore_core::client::{
    Answer, CallId, CallOptions, ClientConfig, ClientError, Deletion, SetResult, Versioned,
};
use mqstore_core::codec::Request;
use mqstore_core::envelope::Publish;
use mqstore_core::hlc::Hlc;
use mqstore_core::session::{Completion, Session};
use mqstore_core::topics;

/// How long the socket stays without a reader after a call before the helper thread takes it.
pub const IDLE_GRACE: Duration = Duration::from_millis(5);

/// How long closing may take: the DISCONNECT, then the broker closing the connection.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The longest a driven client's helper thread sleeps before it looks again (a safety net: the
/// driver wakes it when the connection is lost).
const DRIVEN_HELPER_WAIT: Duration = Duration::from_secs(1);

/// The longest a waiting caller sleeps before it looks again (a safety net: it is woken when
/// its call finishes or the socket is its to read).
const WAIT_LIMIT: Duration = Duration::from_millis(100);

/// A connected state store client whose calls block the calling thread. Cheap to clone and
/// usable from many threads at once; the connection closes when the last clone is dropped or
/// [`Client::close`] is called.
#[derive(Clone)]
pub struct Client {
    handle: Arc<Handle>,
}

/// Closes the connection when the last [`Client`] clone goes (the helper thread holds only
/// [`Shared`]).
struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.close();
    }
}

struct Shared {
    state: Mutex<State>,
    /// The helper thread waits here for the socket to be left alone, or to reconnect.
    helper_wait: Condvar,
    /// A byte written here interrupts whoever polls the socket.
    interrupt_tx: UnixStream,
    interrupt_rx: UnixStream,
    options: ClientOptions,
    helper: Mutex<Option<JoinHandle<()>>>,
}

/// Who reads the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// Nobody, since then.
    Vacant(Instant),
    /// The caller waiting for this.
    Caller(Awaited),
    /// The helper thread (no call waits, or one just asked for the socket).
    Helper,
    /// The [`Driver`] of a driven client: always, while connected.
    Driver,
}

/// What a caller waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Awaited {
    /// A call of the session.
    Call(CallId),
    /// The SUBACK of a SUBSCRIBE on the live connection (its packet id).
    Subscription(u16),
}

/// How a call or subscription ended: its completion (none for a subscription), or why not.
type Finished = Result<Option<Completion>, ClientError>;

/// Where a call's or subscription's end goes: the thread waiting for it, or a [`Deliver`]
/// (a driven call's, see [`Driver`]).
enum Wake {
    /// The caller waits on this condition variable with the state's lock (its own, not the
    /// thread's park token: `thread::current()` allocates a handle that a C program's main
    /// thread never frees).
    Thread(Arc<Condvar>),
    Deliver(Deliver),
}

/// What a call started with [`Client::start`] hands its result to: run on the thread that
/// finished it — the [`Driver`]'s, mostly; another for a call that fails at once or when the
/// connection is lost — with the client locked, so it should only pass the result on.
pub type Deliver = Box<dyn FnOnce(Result<Option<Completion>, ClientError>) + Send>;

/// A waiting caller's wake-up and, once it is there, what it waits for (a subscription's is
/// `Ok(None)`).
struct Slot {
    wake: Wake,
    result: Option<Finished>,
    /// A thread waits on `wake` now (a fan-out's calls wait between its `next`s without one).
    waiting: bool,
}

impl Slot {
    /// A slot nobody waits on yet ([`Shared::wait_any`] marks its thread's).
    fn new(wake: Arc<Condvar>) -> Slot {
        Slot {
            wake: Wake::Thread(wake),
            result: None,
            waiting: false,
        }
    }
}

/// Ends the call or subscription `awaited`, if a slot waits for it: records the result and
/// wakes the caller — or, while the reader acts on what it read (`woken` given), lists it to
/// wake once the state is unlocked ([`Shared::release`]), so that it does not wake only to wait
/// for the lock. A driven call's slot goes, its result to its [`Deliver`].
fn finish(
    slots: &mut HashMap<Awaited, Slot>,
    woken: Option<&mut Vec<Arc<Condvar>>>,
    awaited: Awaited,
    result: Finished,
) {
    let Some(slot) = slots.get_mut(&awaited) else {
        return;
    };
    match &slot.wake {
        Wake::Thread(wake) => {
            slot.result = Some(result);
            match woken {
                Some(woken) => woken.push(wake.clone()),
                None => wake.notify_one(),
            }
        }
        Wake::Deliver(_) => {
            if let Some(Slot {
                wake: Wake::Deliver(deliver),
                ..
            }) = slots.remove(&awaited)
            {
                deliver(result);
            }
        }
    }
}

thread_local! {
    /// Whether this is a client's helper thread (a const `Cell`: nothing to allocate or free).
    static IS_HELPER: Cell<bool> = const { Cell::new(false) };
    /// The check [`interruptible`] installed on this thread.
    static INTERRUPT: Cell<Option<fn() -> bool>> = const { Cell::new(None) };
    /// Whether a call on this thread gave up since [`interruptible`] began.
    static INTERRUPTED: Cell<bool> = const { Cell::new(false) };
}

/// How often a waiting call asks [`interruptible`]'s check whether to give up.
pub const INTERRUPT_CHECK: Duration = Duration::from_millis(50);

/// Runs `f` — calls of blocking clients on this thread — so that a call waiting for its
/// answer asks `interrupted` every [`INTERRUPT_CHECK`] (with no client locked) whether to give
/// up: for a host that handles signals between calls only (Python's Ctrl-C). A call given up
/// fails with [`ClientError::Timeout`] (its request may still be applied, its late answer is
/// dropped), a fan-out's `next` returns `None`; the returned flag says whether that happened,
/// so that the host raises its own error instead.
pub fn interruptible<T>(interrupted: fn() -> bool, f: impl FnOnce() -> T) -> (T, bool) {
    let outer = (
        INTERRUPT.replace(Some(interrupted)),
        INTERRUPTED.replace(false),
    );
    let result = f();
    let gave_up = INTERRUPTED.replace(outer.1);
    INTERRUPT.set(outer.0);
    (result, gave_up)
}

struct State {
    session: Session,
    /// `None` while disconnected.
    link: Option<Link>,
    reader: Reader,
    /// A caller asked the helper for the socket.
    wanted: bool,
    slots: HashMap<Awaited, Slot>,
    /// Who hears what the session reports besides answers.
    listeners: Listeners<Functions>,
    /// Lease acquisitions in flight: the flag their handle gets once held.
    taking: HashMap<CallId, Arc<AtomicBool>>,
    /// While the reader acts on what it read: callers whose result is in, to wake once the
    /// lock is released ([`Shared::release`]).
    woken: Option<Vec<Arc<Condvar>>>,
    /// While the reader waits in poll(2): until when, and whether for writability too.
    polling: Option<(Instant, bool)>,
    /// The broker's DISCONNECT, until the connection's end that follows it.
    broker_disconnect: Option<ClientError>,
    closed: bool,
    /// A [`Driver`] reads and writes the connection (made by [`Client::connect_driven`]).
    driven: bool,
    /// Connections made so far: a new one may reuse a closed one's descriptor number.
    generation: u64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while it was held is a bug elsewhere; the state stays usable.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Client {
    /// Connects, subscribes, and returns once the client can make calls; the first failure
    /// (nothing listens, a CONNACK refusal, no answer within the timeout) is returned as it is.
    pub fn connect(options: ClientOptions) -> Result<Client, ClientError> {
        Client::open(options, false)
    }

    /// Connects as [`Client::connect`] does, for an event loop that drives the connection
    /// itself through the returned [`Driver`]: no thread of the client reads it then (the
    /// helper thread only reconnects), and calls are started with [`Client::start`].
    pub fn connect_driven(options: ClientOptions) -> Result<(Client, Driver), ClientError> {
        let client = Client::open(options, true)?;
        let driver = Driver {
            shared: client.handle.shared.clone(),
        };
        Ok((client, driver))
    }

    fn open(options: ClientOptions, driven: bool) -> Result<Client, ClientError> {
        let mut config = ClientConfig::new(options.client_id.clone(), random_u64());
        if options.standard_topics {
            config = config.standard_topics();
        }
        if let Some(topic) = &options.request_topic {
            config.request_topic.clone_from(topic);
        }
        config.default_timeout_ms = options.timeout.as_millis() as u64;
        let mut session = Session::new(config)?;
        let link = Link::open(&options.broker, hello(&session, &options))?;
        session.set_max_packet_size(Some(link.max_outgoing));
        let (interrupt_tx, interrupt_rx) =
            UnixStream::pair().map_err(|e| ClientError::Unreachable(e.to_string()))?;
        for end in [&interrupt_tx, &interrupt_rx] {
            end.set_nonblocking(true)
                .map_err(|e| ClientError::Unreachable(e.to_string()))?;
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                session,
                link: Some(link),
                reader: if driven {
                    Reader::Driver
                } else {
                    Reader::Vacant(Instant::now())
                },
                wanted: false,
                slots: HashMap::new(),
                listeners: Listeners::default(),
                taking: HashMap::new(),
                woken: None,
                polling: None,
                broker_disconnect: None,
                closed: false,
                driven,
                generation: 1,
            }),
            helper_wait: Condvar::new(),
            interrupt_tx,
            interrupt_rx,
            options,
            helper: Mutex::new(None),
        });
        let helper = {
            let shared = shared.clone();
            thread::Builder::new()
                .name("mqstore-io".into())
                .spawn(move || shared.help())
                .map_err(|e| ClientError::Unreachable(format!("cannot start a thread: {e}")))?
        };
        *lock(&shared.helper) = Some(helper);
        Ok(Client {
            handle: Arc::new(Handle { shared }),
        })
    }

    /// This client's id.
    pub fn client_id(&self) -> &str {
        &self.handle.shared.options.client_id
    }

    /// A state store call: its answer, or why there is none.
    pub fn call(&self, request: &Request, options: &CallOptions) -> Result<Answer, ClientError> {
        self.wait(Call {
            start: |session: &mut Session, now| session.call(request, options, now),
            finish: calls::store,
        })
    }

    /// Starts a call of the session (`start` makes it) and returns at once: `deliver` gets its
    /// result, from whichever thread finishes it (see [`Deliver`]). Made for a driven client,
    /// whose [`Driver`] reads the answer; on another the helper thread reads it.
    pub fn start(
        &self,
        start: impl FnOnce(&mut Session, u64) -> Result<CallId, ClientError>,
        deliver: Deliver,
    ) {
        (self.handle.shared).start(|state, now| start(&mut state.session, now), |_| deliver);
    }

    /// SET `key` to `value`.
    pub fn set(
        &self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
        options: SetOptions,
    ) -> Result<SetResult, ClientError> {
        self.wait(calls::set(key.into(), value.into(), options))
    }

    /// GET `key`: its value and version, or `None` when absent.
    pub fn get(&self, key: impl Into<Bytes>) -> Result<Option<Versioned>, ClientError> {
        self.wait(calls::get(key.into()))
    }

    /// DEL `key`.
    pub fn del(
        &self,
        key: impl Into<Bytes>,
        fencing_token: Option<Hlc>,
    ) -> Result<Deletion, ClientError> {
        self.wait(calls::delete(key.into(), None, fencing_token))
    }

    /// VDEL: delete `key` only if it holds `value`.
    pub fn vdel(
        &self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
        fencing_token: Option<Hlc>,
    ) -> Result<Deletion, ClientError> {
        self.wait(calls::delete(key.into(), Some(value.into()), fencing_token))
    }

    /// Every key matching `pattern` (the SCAN dialect), all pages collected.
    pub fn scan(&self, pattern: impl Into<Bytes>) -> Result<Vec<Bytes>, ClientError> {
        let pattern = pattern.into();
        let mut keys = Vec::new();
        let mut token = None;
        loop {
            let (page, next) = self.scan_page(pattern.clone(), token)?;
            keys.extend(page);
            match next {
                Some(next) => token = Some(next),
                None => return Ok(keys),
            }
        }
    }

    /// One page of the keys matching `pattern`: pass the page's token (`None` first) for the
    /// next; the last page has none.
    pub fn scan_page(
        &self,
        pattern: Bytes,
        token: Option<Bytes>,
    ) -> Result<(Vec<Bytes>, Option<Bytes>), ClientError> {
        self.wait(calls::scan_page(pattern, token))
    }

    /// Observes `key`: every change (SET, DEL, VDEL, expiry) arrives on the returned
    /// observation, and keeps arriving across reconnects, whether or not calls are made.
    pub fn observe(&self, key: impl Into<Bytes>) -> Result<Observation, ClientError> {
        let (changes, receiver) = mpsc::channel();
        self.observe_with(key, Box::new(move |change| changes.send(change).is_ok()))?;
        Ok(Observation { changes: receiver })
    }

    /// Observes `key`, handing each change to `on_change` on the thread that reads the
    /// connection, with the client locked: it should only hand the change over (to a queue of
    /// the program's), make no call of this client, and return false once it wants no more.
    pub fn observe_with(
        &self,
        key: impl Into<Bytes>,
        on_change: Listener<KeyChange>,
    ) -> Result<(), ClientError> {
        let key = key.into();
        let shared = &self.handle.shared;
        self.listen(&key, on_change);
        let registered = shared.run(|session, now| session.observe(key.clone(), now));
        if let Err(e) = registered {
            lock(&shared.state).listeners.observers.remove(&key);
            return Err(e);
        }
        Ok(())
    }

    /// [`Client::observe_with`], started: `deliver` hears whether the observation is
    /// registered (see [`Client::start`]). Should it fail, `on_change` stays until it returns
    /// false.
    pub fn start_observe(
        &self,
        key: Bytes,
        on_change: Listener<KeyChange>,
        deliver: impl FnOnce(Result<(), ClientError>) + Send + 'static,
    ) {
        self.listen(&key, on_change);
        self.start(
            move |session, now| session.observe(key, now),
            Box::new(move |finished| deliver(finished.map(drop))),
        );
    }

    fn listen(&self, key: &Bytes, on_change: Listener<KeyChange>) {
        (lock(&self.handle.shared.state).listeners.observers)
            .entry(key.clone())
            .or_default()
            .push(on_change);
    }

    /// Stops observing `key` (its observations end) and returns the call that tells the
    /// server so.
    pub fn unobserving(&self, key: Bytes) -> Call<impl Start, ()> {
        lock(&self.handle.shared.state)
            .listeners
            .observers
            .remove(&key);
        Call {
            start: move |session: &mut Session, now| session.unobserve(key, now),
            finish: |_| Ok(()),
        }
    }

    /// Stops observing `key`; its observations end.
    pub fn unobserve(&self, key: impl Into<Bytes>) -> Result<(), ClientError> {
        self.wait(self.unobserving(key.into()))
    }

    /// Disconnects politely (the broker does not publish the presence Will) and returns once
    /// the connection is closed. Calls still in flight fail with `Disconnected`.
    pub fn close(&self) {
        self.handle.shared.close();
    }
}

/// Changes of one observed key, in the order they happened.
pub struct Observation {
    changes: mpsc::Receiver<KeyChange>,
}

impl Observation {
    /// The next change, waiting up to `timeout`; `None` when none came or the client closed.
    pub fn next_timeout(&self, timeout: Duration) -> Option<KeyChange> {
        self.changes.recv_timeout(timeout).ok()
    }

    /// The next change if one has arrived already, without waiting.
    pub fn try_next(&self) -> Option<KeyChange> {
        self.changes.try_recv().ok()
    }
}

impl Iterator for Observation {
    type Item = KeyChange;

    /// The next change, waiting for it; `None` once the client is closed.
    fn next(&mut self) -> Option<KeyChange> {
        self.changes.recv().ok()
    }
}

/// The connection of a client made by [`Client::connect_driven`], for an event loop to drive:
/// it waits until the socket ([`Interest::socket`]) or [`Driver::wake_fd`] is readable, the
/// socket writable when [`Interest::write`] says so, or [`Interest::deadline`] passes, and
/// then calls [`Driver::drive`] — on the loop's thread, where the started calls' results are
/// then delivered. Holding it does not keep the connection open.
pub struct Driver {
    shared: Arc<Shared>,
}

/// What a [`Driver`]'s loop waits for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interest {
    /// The socket's descriptor and the connection's number (`None` while reconnecting): a new
    /// connection may reuse a closed one's descriptor number, so a loop registers the socket
    /// again whenever the number changes.
    pub socket: Option<(RawFd, u64)>,
    /// Whether bytes wait to be written: wait for writability too.
    pub write: bool,
    /// When to drive again at the latest (timeouts, keep-alive, lease renewals).
    pub deadline: Option<Instant>,
}

impl Driver {
    /// Readable when the loop should drive: after a reconnect, or when a call ended on another
    /// thread. [`Driver::drive`] empties it.
    pub fn wake_fd(&self) -> RawFd {
        self.shared.interrupt_rx.as_raw_fd()
    }

    /// Makes [`Driver::wake_fd`] readable (from another thread: a result delivered there).
    pub fn wake(&self) {
        self.shared.interrupt();
    }

    /// Reads what arrived and acts on it (results are delivered meanwhile), writes what waits,
    /// keeps the connection alive and times out what is due; returns what to wait for next.
    /// Never blocks. A lost connection is reconnected by the helper thread, which makes
    /// [`Driver::wake_fd`] readable once the new one is up.
    pub fn drive(&self) -> Interest {
        let mut state = lock(&self.shared.state);
        self.shared.drain_interrupts();
        if state.link.is_some() {
            state.service();
        } else {
            state.session.expire(now_ms());
            state.pump();
        }
        self.interest_in(&state)
    }

    /// What to wait for now, without driving (after calls were started).
    pub fn interest(&self) -> Interest {
        self.interest_in(&lock(&self.shared.state))
    }

    fn interest_in(&self, state: &State) -> Interest {
        if state.link.is_none() && !state.closed {
            self.shared.helper_wait.notify_all();
        }
        let now = Instant::now();
        let session = (state.session.next_deadline())
            .map(|at| now + Duration::from_millis(at.saturating_sub(now_ms())));
        let keep_alive = state.link.as_ref().map(Link::keep_alive_deadline);
        Interest {
            socket: (state.link.as_ref()).map(|link| (link.fd(), state.generation)),
            write: state.link.as_ref().is_some_and(Link::wants_write),
            deadline: match (session, keep_alive) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

/// What a connection of `session` asks for: its subscriptions and the presence Will.
fn hello<'a>(session: &Session, options: &'a ClientOptions) -> Hello<'a> {
    Hello {
        client_id: &options.client_id,
        will: LastWill::new(
            session.presence_topic(),
            topics::PRESENCE_GONE,
            QoS::AtLeastOnce,
            false,
            None,
        ),
        filters: session.subscriptions(),
        timeout: options.timeout,
    }
}

/// A completion of another kind than the call's (the session never gives one).
fn unexpected(completion: Completion) -> ClientError {
    ClientError::Malformed(format!("an unexpected completion: {completion:?}"))
}

impl Shared {
    /// Starts a call with `start` and waits for its result, reading the socket meanwhile when
    /// it is this thread's turn.
    fn run(
        &self,
        start: impl FnOnce(&mut Session, u64) -> Result<CallId, ClientError>,
    ) -> Result<Completion, ClientError> {
        let mut state = lock(&self.state);
        if state.closed {
            return Err(ClientError::Disconnected);
        }
        let call = start(&mut state.session, now_ms())?;
        self.wait(state, Awaited::Call(call))?
            .ok_or_else(|| ClientError::Malformed("a call finished without an answer".into()))
    }

    /// Subscribes to the filters `add` gives (none: subscribed already) and returns once the
    /// broker acknowledged them. While disconnected the session keeps them: the reconnect
    /// subscribes to them with the rest.
    fn subscribe(
        &self,
        add: impl FnOnce(&mut State) -> Result<Vec<String>, ClientError>,
    ) -> Result<(), ClientError> {
        let mut state = lock(&self.state);
        match state.subscribe(add)? {
            Some(pkid) => self.wait(state, Awaited::Subscription(pkid)).map(drop),
            None => Ok(()),
        }
    }

    /// Starts a call (`start` makes it) whose result goes to the [`Deliver`] that `deliver`
    /// makes, given the call's id (`None`: the call did not start, and the error goes there).
    fn start(
        &self,
        start: impl FnOnce(&mut State, u64) -> Result<CallId, ClientError>,
        deliver: impl FnOnce(Option<CallId>) -> Deliver,
    ) {
        let mut state = lock(&self.state);
        let started = match state.closed {
            true => Err(ClientError::Disconnected),
            false => start(&mut state, now_ms()),
        };
        let call = match started {
            Ok(call) => call,
            Err(e) => {
                drop(state);
                return deliver(None)(Err(e));
            }
        };
        let slot = Slot {
            wake: Wake::Deliver(deliver(Some(call))),
            result: None,
            waiting: false,
        };
        state.slots.insert(Awaited::Call(call), slot);
        state.pump();
        self.nudge_reader(&state);
        if matches!(state.reader, Reader::Vacant(_)) || state.link.is_none() {
            // Nobody reads: the helper thread takes the socket at once (or reconnects).
            self.helper_wait.notify_all();
        }
    }

    /// [`Shared::subscribe`], started: `deliver` hears when the broker acknowledged it.
    fn start_subscribe(
        &self,
        add: impl FnOnce(&mut State) -> Result<Vec<String>, ClientError>,
        deliver: impl FnOnce(Result<(), ClientError>) + Send + 'static,
    ) {
        let mut state = lock(&self.state);
        let pkid = match state.subscribe(add) {
            Ok(Some(pkid)) => pkid,
            subscribed => {
                drop(state);
                return deliver(subscribed.map(drop));
            }
        };
        let wake = Wake::Deliver(Box::new(move |finished| deliver(finished.map(drop))));
        let slot = Slot {
            wake,
            result: None,
            waiting: false,
        };
        state.slots.insert(Awaited::Subscription(pkid), slot);
        self.nudge_reader(&state);
    }

    /// Waits for `awaited`, reading the socket meanwhile when it is this thread's turn.
    fn wait<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        awaited: Awaited,
    ) -> Result<Option<Completion>, ClientError> {
        let wake = Arc::new(Condvar::new());
        state.slots.insert(awaited, Slot::new(wake.clone()));
        state.pump();
        self.nudge_reader(&state);
        let started = Instant::now();
        match self.wait_any(state, &[awaited], &wake) {
            Ok((_, result)) => result,
            Err(mut state) => {
                state.slots.remove(&awaited);
                if let Awaited::Call(call) = awaited {
                    state.taking.remove(&call);
                }
                Err(ClientError::Timeout(started.elapsed().as_millis() as u64))
            }
        }
    }

    /// Waits for the first of `set` (registered slots, woken through `wake`) to finish and
    /// returns it, its slot removed — or the state, the slots kept, when [`interruptible`]'s
    /// check says to give up.
    fn wait_any<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        set: &[Awaited],
        wake: &Condvar,
    ) -> Result<(Awaited, Finished), MutexGuard<'a, State>> {
        let me = set[0];
        let interrupted = INTERRUPT.get();
        let mut next_check = Instant::now() + INTERRUPT_CHECK;
        for awaited in set {
            if let Some(slot) = state.slots.get_mut(awaited) {
                slot.waiting = true;
            }
        }
        loop {
            let done = set.iter().find_map(|awaited| {
                let slot = state.slots.get_mut(awaited)?;
                Some((*awaited, slot.result.take()?))
            });
            if let Some((awaited, result)) = done {
                state.slots.remove(&awaited);
                self.stop_waiting(&mut state, set, me);
                return Ok((awaited, result));
            }
            if let Some(interrupted) = interrupted
                && Instant::now() >= next_check
            {
                drop(state);
                let give_up = interrupted();
                state = lock(&self.state);
                if give_up {
                    INTERRUPTED.set(true);
                    self.stop_waiting(&mut state, set, me);
                    return Err(state);
                }
                next_check = Instant::now() + INTERRUPT_CHECK;
                continue;
            }
            match state.reader {
                Reader::Vacant(_) if state.link.is_some() => {
                    state.reader = Reader::Caller(me);
                }
                Reader::Helper if !state.wanted => {
                    state.wanted = true;
                    self.interrupt();
                }
                _ => {}
            }
            let limit = interrupted.map(|_| next_check);
            if state.reader == Reader::Caller(me) && state.link.is_some() {
                state = self.read_once(state, limit);
            } else {
                let timeout = limit.map_or(WAIT_LIMIT, |at| {
                    WAIT_LIMIT.min(at.saturating_duration_since(Instant::now()))
                });
                state = wake
                    .wait_timeout(state, timeout)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }

    /// The waiting thread of `set` leaves: their slots are nobody's to wake, and the socket,
    /// when it read it, goes to another.
    fn stop_waiting(&self, state: &mut State, set: &[Awaited], me: Awaited) {
        for awaited in set {
            if let Some(slot) = state.slots.get_mut(awaited) {
                slot.waiting = false;
            }
        }
        if state.reader == Reader::Caller(me) {
            state.hand_over();
        }
    }

    /// One turn of the reader: waits (unlocked) until the socket has something, the session or
    /// keep-alive a deadline, or an interrupt comes; then reads and acts on what came.
    /// `limit`: the latest it may wait (an interruption check due).
    fn read_once<'a>(
        &'a self,
        state: MutexGuard<'a, State>,
        limit: Option<Instant>,
    ) -> MutexGuard<'a, State> {
        let Some(link) = &state.link else {
            return state;
        };
        let (fd, write) = (link.fd(), link.wants_write());
        let now = Instant::now();
        let mut deadline = link.keep_alive_deadline();
        if let Some(at) = state.session.next_deadline() {
            let wall = now_ms();
            deadline = deadline.min(now + Duration::from_millis(at.saturating_sub(wall)));
        }
        let until = limit.map_or(deadline, |limit| deadline.min(limit));
        let timeout = until.saturating_duration_since(now);
        let mut state = state;
        state.polling = Some((until, write));
        drop(state);
        let interrupt = self.interrupt_rx.as_raw_fd();
        if let Err(e) = poll::wait(&[(fd, write), (interrupt, false)], Some(timeout)) {
            warn!(error = %e, "poll failed");
            thread::sleep(Duration::from_millis(1));
        }
        let mut state = lock(&self.state);
        state.polling = None;
        self.drain_interrupts();
        state.woken = Some(Vec::new());
        state.service();
        self.release(state)
    }

    /// Wakes the callers whose results came in, with the state unlocked for them, and locks it
    /// again.
    fn release<'a>(&'a self, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        let woken = state.woken.take().unwrap_or_default();
        if woken.is_empty() {
            return state;
        }
        drop(state);
        for wake in &woken {
            wake.notify_one();
        }
        lock(&self.state)
    }

    /// Interrupts the reader's poll when it would wake too late for what was just started: a
    /// deadline before its timeout, or bytes the socket did not take while it waits only to
    /// read.
    fn nudge_reader(&self, state: &State) {
        let (Some((until, write)), Some(link)) = (state.polling, &state.link) else {
            return;
        };
        let sooner = state.session.next_deadline().is_some_and(|at| {
            Instant::now() + Duration::from_millis(at.saturating_sub(now_ms())) < until
        });
        if sooner || (link.wants_write() && !write) {
            self.interrupt();
        }
    }

    /// Interrupts whoever polls the socket.
    fn interrupt(&self) {
        let _ = (&self.interrupt_tx).write(&[1]);
    }

    fn drain_interrupts(&self) {
        let mut sink = [0u8; 64];
        while matches!((&self.interrupt_rx).read(&mut sink), Ok(n) if n > 0) {}
    }

    /// The helper thread: reads while no caller does, and reconnects.
    fn help(&self) {
        IS_HELPER.set(true);
        let mut failures = 0u32;
        let mut state = lock(&self.state);
        loop {
            if state.closed {
                return;
            }
            if state.link.is_none() {
                state = self.reconnect(state, &mut failures);
                continue;
            }
            if state.driven {
                // The driver reads; it wakes this thread once the connection is lost.
                state = self.wait_helper(state, DRIVEN_HELPER_WAIT);
                continue;
            }
            match state.reader {
                Reader::Vacant(since) if since.elapsed() >= IDLE_GRACE || state.delivering() => {
                    state.reader = Reader::Helper;
                }
                Reader::Vacant(since) => {
                    let left = IDLE_GRACE.saturating_sub(since.elapsed());
                    state = self.wait_helper(state, left);
                    continue;
                }
                Reader::Caller(_) | Reader::Driver => {
                    state = self.wait_helper(state, IDLE_GRACE);
                    continue;
                }
                Reader::Helper => {}
            }
            if state.wanted {
                // A caller asked for the socket: it reads from now on.
                state.wanted = false;
                state.hand_over();
                continue;
            }
            state = self.read_once(state, None);
        }
    }

    fn wait_helper<'a>(
        &'a self,
        state: MutexGuard<'a, State>,
        timeout: Duration,
    ) -> MutexGuard<'a, State> {
        self.helper_wait
            .wait_timeout(state, timeout)
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    /// Connects again after a backoff, failing what times out meanwhile.
    fn reconnect<'a>(
        &'a self,
        state: MutexGuard<'a, State>,
        failures: &mut u32,
    ) -> MutexGuard<'a, State> {
        // Wait out the backoff, with the session's deadlines kept.
        let until = Instant::now() + crate::backoff(*failures);
        let mut state = state;
        while !state.closed && Instant::now() < until {
            let mut wait = until - Instant::now();
            if let Some(at) = state.session.next_deadline() {
                wait = wait.min(Duration::from_millis(at.saturating_sub(now_ms())));
            }
            state = self.wait_helper(state, wait);
            state.session.expire(now_ms());
            state.pump();
        }
        if state.closed {
            return state;
        }
        let hello = hello(&state.session, &self.options);
        drop(state);
        let opened = Link::open(&self.options.broker, hello);
        let mut state = lock(&self.state);
        match opened {
            Ok(_) if state.closed => {}
            Ok(link) => {
                *failures = 0;
                debug!(client = %self.options.client_id, "reconnected");
                state.session.set_max_packet_size(Some(link.max_outgoing));
                state.link = Some(link);
                state.generation += 1;
                if let Err(e) = state.session.resume(now_ms()) {
                    warn!(error = %e, "could not restore observations");
                }
                state.pump();
                if state.driven {
                    // The driver waits on the new socket from now on.
                    self.interrupt();
                } else {
                    // A caller may wait for the socket.
                    state.hand_over();
                }
            }
            Err(e) => {
                *failures = failures.saturating_add(1);
                debug!(error = %e, "reconnecting failed");
            }
        }
        state
    }

    fn close(&self) {
        let mut state = lock(&self.state);
        if state.closed {
            return;
        }
        state.closed = true;
        let link = state.link.take();
        state.session.connection_lost();
        state.pump();
        state.listeners.observers.clear();
        let presence = state.session.presence_topic();
        drop(state);
        self.interrupt();
        self.helper_wait.notify_all();
        let helper = lock(&self.helper).take();
        if let Some(helper) = helper
            && !IS_HELPER.get()
        {
            let _ = helper.join();
        }
        if let Some(mut link) = link {
            // The presence message the Will would have sent: the server drops this client's
            // registrations now rather than when a key changes.
            let gone = Publish {
                topic: presence,
                payload: Bytes::from_static(topics::PRESENCE_GONE),
                qos: 1,
                properties: Default::default(),
            };
            if link.publish(gone, None).is_ok() {
                link.disconnect(CLOSE_GRACE);
            }
        }
    }
}

impl State {
    /// Reads what came, keeps the connection alive, times out what is due, and sends and hands
    /// over what the session decided. A failed connection is dropped here (the helper
    /// reconnects).
    fn service(&mut self) {
        let now = now_ms();
        if let Some(link) = &mut self.link {
            let session = &mut self.session;
            let disconnect = &mut self.broker_disconnect;
            let slots = &mut self.slots;
            let woken = &mut self.woken;
            let result = link
                .receive(|received| match received {
                    Received::Publish(publish) => session.handle(&publish, now),
                    Received::Refused(call, code) => session.publish_refused(call, code),
                    Received::Disconnect(reason) => *disconnect = Some(reason),
                    Received::SubAck { pkid, refused } => {
                        let result = match refused {
                            None => Ok(None),
                            Some(code) => Err(ClientError::Unreachable(format!(
                                "the broker refused the subscription: {code:?}"
                            ))),
                        };
                        finish(slots, woken.as_mut(), Awaited::Subscription(pkid), result);
                    }
                })
                .and_then(|()| link.keep_alive(Instant::now()));
            if let Err(e) = result {
                self.lose(e);
            }
        }
        self.session.expire(now);
        self.pump();
    }

    /// The connection is gone: calls in flight fail, the helper reconnects.
    fn lose(&mut self, error: ClientError) {
        self.link = None;
        let subscribing: Vec<Awaited> = (self.slots.iter())
            .filter(|(awaited, slot)| {
                matches!(awaited, Awaited::Subscription(_)) && slot.result.is_none()
            })
            .map(|(awaited, _)| *awaited)
            .collect();
        for awaited in subscribing {
            let error = Err(ClientError::Disconnected);
            finish(&mut self.slots, self.woken.as_mut(), awaited, error);
        }
        let error = self.broker_disconnect.take().unwrap_or(error);
        match error {
            ClientError::Protocol(_) | ClientError::BrokerDisconnected { .. } => {
                warn!(%error, "broker connection dropped; reconnecting");
                self.session.connection_failed(error);
            }
            error => {
                debug!(%error, "broker connection lost; reconnecting");
                self.session.connection_lost();
            }
        }
        if matches!(self.reader, Reader::Caller(_)) {
            self.reader = Reader::Vacant(Instant::now());
        }
    }

    /// Adds what `add` registers and subscribes to the filters it gives: the SUBSCRIBE's packet
    /// id, or `None` when they are subscribed already. While disconnected the session keeps
    /// them: the reconnect subscribes to them with the rest.
    fn subscribe(
        &mut self,
        add: impl FnOnce(&mut State) -> Result<Vec<String>, ClientError>,
    ) -> Result<Option<u16>, ClientError> {
        if self.closed {
            return Err(ClientError::Disconnected);
        }
        let filters = add(self)?;
        if filters.is_empty() {
            return Ok(None);
        }
        let Some(link) = &mut self.link else {
            return Err(ClientError::Disconnected);
        };
        match link.subscribe(filters) {
            Ok(pkid) => Ok(Some(pkid)),
            Err(e) => {
                self.lose(e);
                Err(ClientError::Disconnected)
            }
        }
    }

    /// Whether a started call ([`Client::start`]) waits for its result.
    fn delivering(&self) -> bool {
        (self.slots.values()).any(|slot| matches!(slot.wake, Wake::Deliver(_)))
    }

    /// Publishes what the session has to send, and hands its events to who waits for them.
    fn pump(&mut self) {
        while let Some(link) = &mut self.link {
            let Some(outgoing) = self.session.poll_publish() else {
                break;
            };
            let call = outgoing.call;
            match link.publish(outgoing.publish, call) {
                Ok(()) => {}
                Err(ClientError::Malformed(_)) => {
                    // Larger than the broker takes: refused as the broker would (0x95).
                    if let Some(call) = call {
                        self.session.publish_refused(call, 0x95);
                    }
                }
                Err(e) => self.lose(e),
            }
        }
        while let Some(event) = self.session.poll_event() {
            let Some((call, result)) = self.listeners.tell(event) else {
                continue;
            };
            if self.slots.contains_key(&Awaited::Call(call)) {
                if let (Ok(Completion::Lease(Some(_))), Some(held)) =
                    (&result, self.taking.remove(&call))
                {
                    self.listeners.leases.insert(call, held);
                }
                let result = result.map(Some);
                finish(
                    &mut self.slots,
                    self.woken.as_mut(),
                    Awaited::Call(call),
                    result,
                );
            }
        }
    }

    /// The reader leaves: the socket goes to a caller still waiting, or (after
    /// [`IDLE_GRACE`]) to the helper.
    fn hand_over(&mut self) {
        self.reader = Reader::Vacant(Instant::now());
        let waiting = self.slots.values().find_map(|slot| match &slot.wake {
            Wake::Thread(wake) if slot.waiting && slot.result.is_none() => Some(wake),
            _ => None,
        });
        if let Some(wake) = waiting {
            wake.notify_one();
        }
    }
}
