//! The async Rust client: the core's client session ([`Session`]: the state store, jobs and
//! commands clients) driven by tokio and rumqttc.
//!
//! One background task owns the MQTT connection and the session (polled the way the server
//! polls, see `connection.rs`); the [`Client`] handle sends it calls and awaits their results. The task subscribes (and waits for the SUBACK)
//! before any call goes out, fails calls in flight when the connection drops, and after a
//! reconnect re-registers every observed key and reads it back, so a change made while the
//! client was away arrives as a (synthetic) notification.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Filter, LastWill, Packet, SubscribeReasonCode};
use rumqttc::v5::{AsyncClient, Event as MqttEvent, EventLoop};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::connection::{Connection, Driver, Outbox, Wakes};
use crate::{BrokerConfig, Polled, from_mqtt, now_ms, random_u64};
use mqstore_core::client::jobs::{DeviceRequest, JobNotification};
use mqstore_core::client::{Answer, CallId, CallOptions, ClientConfig, ClientError};
pub use mqstore_core::client::{Deleted, Deletion, SetResult, Versioned};
use mqstore_core::codec::{Bulk, Condition, Request, SetRequest};
use mqstore_core::commands::CommandRequest;
use mqstore_core::commands::Record as CommandRecord;
use mqstore_core::envelope::Publish;
use mqstore_core::hlc::Hlc;
use mqstore_core::jobs::OperatorRequest;
use mqstore_core::session::{Completion, Session, SessionEvent};
use mqstore_core::topics;

/// How to connect.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub broker: BrokerConfig,
    /// The MQTT client id; also `__srcId` and the name of this client's notification topic.
    pub client_id: String,
    /// Timeout of each call.
    pub timeout: Duration,
    /// Where requests go: the state store's (identified, or standard with
    /// `standard_topics`) unless another responder is wanted (`mqstore bench` measures an echo
    /// responder this way).
    pub request_topic: Option<String>,
    /// Use the protocol's standard, shared request and notification topics instead of the
    /// identified ones in this client's own tree (see [`ClientConfig::identified`]): for a
    /// state store other than mqstore.
    pub standard_topics: bool,
}

impl ClientOptions {
    /// A client `client_id` of the broker at `host:port`, with 10 s timeouts.
    pub fn new(client_id: impl Into<String>, host: impl Into<String>, port: u16) -> Self {
        Self {
            broker: BrokerConfig {
                host: host.into(),
                port,
                ..BrokerConfig::default()
            },
            client_id: client_id.into(),
            timeout: Duration::from_secs(10),
            request_topic: None,
            standard_topics: false,
        }
    }
}

/// Options of a SET.
#[derive(Debug, Clone, Default)]
pub struct SetOptions {
    pub condition: Condition,
    /// The key expires this long after the SET.
    pub expires: Option<Duration>,
    /// Ask that the key be kept durably (`aio-persistence`).
    pub persist: bool,
    pub fencing_token: Option<Hlc>,
}

/// A change of an observed key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyChange {
    pub key: Bytes,
    /// The new value, or `None` when the key was deleted (or expired).
    pub value: Option<Bytes>,
    pub version: Option<Hlc>,
    /// Found by reading the key back after a reconnect: the notification itself was missed.
    pub synthetic: bool,
}

pub(super) enum Command {
    Call {
        request: Request,
        options: CallOptions,
        reply: oneshot::Sender<Result<Answer, ClientError>>,
    },
    Observe {
        key: Bytes,
        changes: mpsc::UnboundedSender<KeyChange>,
        reply: oneshot::Sender<Result<Answer, ClientError>>,
    },
    Unobserve {
        key: Bytes,
        reply: oneshot::Sender<Result<Answer, ClientError>>,
    },
    /// A jobs call (operator or device API).
    Jobs {
        call: JobsCall,
        reply: oneshot::Sender<Result<serde_json::Value, ClientError>>,
    },
    /// Act as a thing of the jobs device API: subscribe to its replies and notifications.
    Thing {
        thing: String,
        notifications: mpsc::UnboundedSender<JobNotification>,
        reply: oneshot::Sender<Result<(), ClientError>>,
    },
    /// A call of the command service.
    Commands {
        call: CommandsCall,
        reply: oneshot::Sender<Result<Completion, ClientError>>,
    },
    /// Hear every command's status changes.
    WatchCommands {
        records: mpsc::UnboundedSender<CommandRecord>,
        reply: oneshot::Sender<Result<(), ClientError>>,
    },
    /// Take a lease (the session's lease machine keeps it: `held` turns false when lost).
    Lease {
        key: Bytes,
        ttl_ms: u64,
        wait_ms: Option<u64>,
        held: Arc<AtomicBool>,
        reply: oneshot::Sender<Result<Option<(CallId, Hlc)>, ClientError>>,
    },
    /// Release a held lease: whether it was still held.
    ReleaseLease {
        lease: CallId,
        reply: oneshot::Sender<Result<bool, ClientError>>,
    },
    /// Stop renewing a lease (its handle was dropped): it lapses.
    ForgetLease { lease: CallId },
    /// Disconnect; `done` hears when the connection is closed.
    Close { done: oneshot::Sender<()> },
}

/// A jobs call for the client's task.
pub(crate) enum JobsCall {
    Operator(OperatorRequest),
    Device(String, DeviceRequest),
}

impl JobsCall {
    fn start(self, session: &mut Session, now_ms: u64) -> Result<CallId, ClientError> {
        match self {
            JobsCall::Operator(request) => Ok(session.jobs_operate(&request, None, now_ms)),
            JobsCall::Device(thing, request) => session.jobs_device(&thing, &request, None, now_ms),
        }
    }
}

/// A command service call for the client's task.
pub(crate) enum CommandsCall {
    Invoke(CommandRequest),
    Status(String, u64),
}

impl CommandsCall {
    fn start(self, session: &mut Session, now_ms: u64) -> CallId {
        match self {
            CommandsCall::Invoke(request) => session.command(&request, now_ms),
            CommandsCall::Status(id, timeout_ms) => session.command_status(&id, timeout_ms, now_ms),
        }
    }
}

/// A connected state store client. Cheap to clone; the connection closes when the last clone
/// is dropped or [`Client::close`] is called.
#[derive(Clone)]
pub struct Client {
    pub(super) commands: mpsc::Sender<Command>,
    client_id: String,
}

/// A SCAN, page by page: see [`Client::scan_pages`].
pub struct ScanPages {
    client: Client,
    pattern: Bytes,
    token: Option<Bytes>,
    done: bool,
}

impl ScanPages {
    /// The next page of keys (possibly empty); `None` after the last.
    pub async fn next_page(&mut self) -> Option<Result<Vec<Bytes>, ClientError>> {
        if self.done {
            return None;
        }
        let request = Request::Scan {
            pattern: self.pattern.clone(),
            token: self.token.take(),
        };
        let page = match self.client.call(request, CallOptions::default()).await {
            Ok(answer) => answer.into_page(),
            Err(e) => Err(e),
        };
        match page {
            Ok((keys, token)) => {
                self.done = token.is_none();
                self.token = token;
                Some(Ok(keys))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Changes of one observed key, in the order they happened.
pub struct Observation {
    changes: mpsc::UnboundedReceiver<KeyChange>,
}

impl Observation {
    /// The next change; `None` once the client is closed.
    pub async fn next(&mut self) -> Option<KeyChange> {
        self.changes.recv().await
    }

    /// The next change if one has arrived already, without waiting.
    pub fn try_next(&mut self) -> Option<KeyChange> {
        self.changes.try_recv().ok()
    }
}

impl Client {
    /// Connects, subscribes, and returns once the client can make calls. Fails with
    /// [`ClientError::Disconnected`] if the broker cannot be reached within the timeout.
    pub async fn connect(options: ClientOptions) -> Result<Client, ClientError> {
        let seed = random_u64();
        let mut config = ClientConfig::new(options.client_id.clone(), seed);
        if options.standard_topics {
            config = config.standard_topics();
        }
        if let Some(topic) = &options.request_topic {
            config.request_topic.clone_from(topic);
        }
        config.default_timeout_ms = options.timeout.as_millis() as u64;
        let session = Session::new(config)?;
        let mut mqtt = options.broker.options(&options.client_id);
        mqtt.set_last_will(LastWill::new(
            session.presence_topic(),
            topics::PRESENCE_GONE,
            QoS::AtLeastOnce,
            false,
            None,
        ));
        let (client, eventloop) = AsyncClient::new(mqtt, 256);
        let (commands, commands_rx) = mpsc::channel(256);
        let (ready_tx, ready_rx) = oneshot::channel();
        tokio::spawn(run(
            options.broker.max_packet_size,
            session,
            client,
            eventloop,
            commands_rx,
            ready_tx,
        ));
        let failed = match tokio::time::timeout(options.timeout, ready_rx).await {
            Ok(Ok(Ok(()))) => {
                return Ok(Client {
                    commands,
                    client_id: options.client_id,
                });
            }
            // The first attempt failed: say why at once (a refused connection, a CONNACK
            // refusal) instead of retrying until the timeout.
            Ok(Ok(Err(e))) => e,
            Ok(Err(_)) => ClientError::Disconnected,
            Err(_) => ClientError::Unreachable(format!(
                "no CONNACK and SUBACK within {} ms",
                options.timeout.as_millis()
            )),
        };
        let (done, _) = oneshot::channel();
        let _ = commands.send(Command::Close { done }).await;
        debug!(
            broker = %format!("{}:{}", options.broker.host, options.broker.port),
            error = %failed,
            "could not connect"
        );
        Err(failed)
    }

    /// This client's id.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    pub(crate) async fn call(
        &self,
        request: Request,
        options: CallOptions,
    ) -> Result<Answer, ClientError> {
        let (reply, result) = oneshot::channel();
        self.send(Command::Call {
            request,
            options,
            reply,
        })
        .await?;
        result.await.map_err(|_| ClientError::Disconnected)?
    }

    pub(super) async fn send(&self, command: Command) -> Result<(), ClientError> {
        self.commands
            .send(command)
            .await
            .map_err(|_| ClientError::Disconnected)
    }

    /// SET `key` to `value`.
    pub async fn set(
        &self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
        options: SetOptions,
    ) -> Result<SetResult, ClientError> {
        let request = Request::Set(SetRequest {
            key: key.into(),
            value: Bulk::new(value),
            condition: options.condition,
            expires_in_ms: options
                .expires
                .and_then(|d| std::num::NonZeroU64::new(d.as_millis().max(1) as u64)),
        });
        let call_options = CallOptions {
            fencing_token: options.fencing_token,
            persist: options.persist,
            timeout_ms: None,
        };
        Ok(self.call(request, call_options).await?.into_set_result())
    }

    /// GET `key`: its value and version, or `None` when absent.
    pub async fn get(&self, key: impl Into<Bytes>) -> Result<Option<Versioned>, ClientError> {
        let answer = self
            .call(Request::Get { key: key.into() }, CallOptions::default())
            .await?;
        Ok(answer.into_versioned())
    }

    /// DEL `key`.
    pub async fn del(
        &self,
        key: impl Into<Bytes>,
        fencing_token: Option<Hlc>,
    ) -> Result<Deletion, ClientError> {
        let options = CallOptions {
            fencing_token,
            ..CallOptions::default()
        };
        let answer = self.call(Request::Del { key: key.into() }, options).await?;
        Ok(answer.into_deletion())
    }

    /// VDEL: delete `key` only if it holds `value`.
    pub async fn vdel(
        &self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
        fencing_token: Option<Hlc>,
    ) -> Result<Deletion, ClientError> {
        let options = CallOptions {
            fencing_token,
            ..CallOptions::default()
        };
        let request = Request::VDel {
            key: key.into(),
            value: value.into(),
        };
        Ok(self.call(request, options).await?.into_deletion())
    }

    /// Every key matching `pattern` (the SCAN dialect), all pages collected.
    pub async fn scan(&self, pattern: impl Into<Bytes>) -> Result<Vec<Bytes>, ClientError> {
        let mut pages = self.scan_pages(pattern);
        let mut keys = Vec::new();
        while let Some(page) = pages.next_page().await {
            keys.extend(page?);
        }
        Ok(keys)
    }

    /// The keys matching `pattern`, a page at a time (for keyspaces too large to collect).
    pub fn scan_pages(&self, pattern: impl Into<Bytes>) -> ScanPages {
        ScanPages {
            client: self.clone(),
            pattern: pattern.into(),
            token: None,
            done: false,
        }
    }

    /// Observes `key`: every change (SET, DEL, VDEL, expiry) arrives on the returned
    /// observation, and keeps arriving across reconnects.
    pub async fn observe(&self, key: impl Into<Bytes>) -> Result<Observation, ClientError> {
        let (changes, changes_rx) = mpsc::unbounded_channel();
        let (reply, result) = oneshot::channel();
        self.send(Command::Observe {
            key: key.into(),
            changes,
            reply,
        })
        .await?;
        result.await.map_err(|_| ClientError::Disconnected)??;
        Ok(Observation {
            changes: changes_rx,
        })
    }

    /// Stops observing `key`; its observations end.
    pub async fn unobserve(&self, key: impl Into<Bytes>) -> Result<(), ClientError> {
        let (reply, result) = oneshot::channel();
        self.send(Command::Unobserve {
            key: key.into(),
            reply,
        })
        .await?;
        result.await.map_err(|_| ClientError::Disconnected)??;
        Ok(())
    }

    /// Disconnects politely (the broker does not publish the presence Will) and returns once
    /// the connection is closed. Calls still in flight fail with `Disconnected`.
    pub async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.commands.send(Command::Close { done }).await.is_ok() {
            let _ = closed.await;
        }
    }
}

/// How long closing may take: the DISCONNECT, then the broker closing the connection.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The background task: the connection and the state machine.
async fn run(
    max_packet_size: u32,
    session: Session,
    client: AsyncClient,
    eventloop: EventLoop,
    commands: mpsc::Receiver<Command>,
    ready: oneshot::Sender<Result<(), ClientError>>,
) {
    let mut task = Task {
        max_packet_size,
        broker_disconnect: None,
        session,
        command_watchers: Vec::new(),
        things: BTreeMap::new(),
        outbox: Outbox::new(client),
        unacked: Unacked::default(),
        waiting: HashMap::new(),
        leases: HashMap::new(),
        observers: HashMap::new(),
        subacks: VecDeque::new(),
        connected_before: false,
        ready: Some(ready),
        phase: Phase::Open,
        closed: Vec::new(),
    };
    let mut commands = Commands {
        commands,
        open: true,
        grace: Box::pin(tokio::time::sleep(Duration::ZERO)),
    };
    Connection::new(eventloop)
        .run(&mut commands, &mut task)
        .await;
    // Calls still waiting fail with `Disconnected` as their senders drop.
    for done in task.closed {
        let _ = done.send(());
    }
}

/// The task's wake-ups besides its connection: commands from the handles until a close (or
/// the last handle dropped), then the end of the grace period closing may take.
struct Commands {
    commands: mpsc::Receiver<Command>,
    open: bool,
    grace: Pin<Box<tokio::time::Sleep>>,
}

enum Wake {
    Command(Command),
    /// Every handle is gone.
    Dropped,
    GraceOver,
}

impl Wakes for Commands {
    type Wake = Wake;

    async fn next(&mut self) -> Wake {
        if self.open {
            let command = self.commands.recv().await;
            if matches!(command, None | Some(Command::Close { .. })) {
                self.open = false;
                let until = tokio::time::Instant::now() + CLOSE_GRACE;
                self.grace.as_mut().reset(until);
            }
            return command.map_or(Wake::Dropped, Wake::Command);
        }
        self.grace.as_mut().await;
        Wake::GraceOver
    }
}

/// Where the connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// The DISCONNECT waits until every request is handed to rumqttc.
    CloseRequested,
    /// The DISCONNECT is queued.
    Disconnecting,
    /// The DISCONNECT is sent; waiting for the broker to close the connection (closing first,
    /// with its packets unread, would reset it, and the broker could lose the DISCONNECT and
    /// publish the presence Will).
    Closing,
}

type Reply = oneshot::Sender<Result<Answer, ClientError>>;
type Subscribed = oneshot::Sender<Result<(), ClientError>>;

/// Who waits for a SUBACK (they come in the order of the SUBSCRIBEs).
enum SubackWaiter {
    /// Everything this connection needs, after its CONNACK: the client is ready then; things
    /// added while it was pending were in it.
    Session(Vec<Subscribed>),
    /// A thing's jobs topics, added on a live connection.
    Thing(Subscribed),
    /// The command events, added on a live connection.
    Watch(Subscribed),
}

/// Whose call a publish is (the session's id): the broker's refusal of it (a PUBACK reason
/// code of 0x80 or more) fails that call.
type Origin = CallId;

/// Who waits for a call's result.
enum Waiter {
    Store(Reply),
    Jobs(oneshot::Sender<Result<serde_json::Value, ClientError>>),
    Commands(oneshot::Sender<Result<Completion, ClientError>>),
    Lease(
        oneshot::Sender<Result<Option<(CallId, Hlc)>, ClientError>>,
        Arc<AtomicBool>,
    ),
    Released(oneshot::Sender<Result<bool, ClientError>>),
}

/// Publishes handed to rumqttc and not yet acknowledged, so that a PUBACK finds its call.
/// rumqttc reports each publish it sends (`Outgoing::Publish(pkid)`) in the order it took
/// them. A connection that drops forgets them all: with a clean start, rumqttc sends nothing
/// again, and every call in flight fails anyway.
#[derive(Default)]
struct Unacked {
    /// Taken by rumqttc, not yet sent; `None`: a publish no call waits for.
    taken: VecDeque<Option<Origin>>,
    /// Sent with a packet id, oldest first.
    sent: VecDeque<(u16, Option<Origin>)>,
}

impl Unacked {
    fn on_sent(&mut self, pkid: u16) {
        let origin = self.taken.pop_front().flatten();
        if pkid != 0 {
            self.sent.push_back((pkid, origin));
        }
    }

    /// The call whose publish `pkid` acknowledged (usually the oldest).
    fn on_acked(&mut self, pkid: u16) -> Option<Origin> {
        let at = self.sent.iter().position(|(id, _)| *id == pkid)?;
        self.sent.remove(at).and_then(|(_, origin)| origin)
    }

    /// The oldest publish's call: the one an acknowledgement rumqttc could not read was for
    /// (a broker acknowledges QoS 1 publishes in the order it received them).
    fn oldest(&self) -> Option<Origin> {
        self.sent.front().and_then(|(_, origin)| *origin)
    }

    fn clear(&mut self) {
        self.taken.clear();
        self.sent.clear();
    }
}

/// The state machine and what the task keeps around it.
struct Task {
    /// The largest packet this client sends ([`BrokerConfig::max_packet_size`]).
    max_packet_size: u32,
    /// The broker's DISCONNECT, until the connection error that follows it.
    broker_disconnect: Option<ClientError>,
    session: Session,
    /// The things this client acts for in the jobs device API, and who hears their
    /// notifications.
    things: BTreeMap<String, Vec<mpsc::UnboundedSender<JobNotification>>>,
    /// Who hears command status changes (subscribed while there is one).
    command_watchers: Vec<mpsc::UnboundedSender<CommandRecord>>,
    outbox: Outbox<Option<Origin>>,
    unacked: Unacked,
    waiting: HashMap<CallId, Waiter>,
    /// Held leases: their handles' flag, cleared when the session reports one lost.
    leases: HashMap<CallId, Arc<AtomicBool>>,
    observers: HashMap<Bytes, Vec<mpsc::UnboundedSender<KeyChange>>>,
    subacks: VecDeque<SubackWaiter>,
    connected_before: bool,
    /// Hears once the client can make calls, or why it never will.
    ready: Option<oneshot::Sender<Result<(), ClientError>>>,
    phase: Phase,
    /// Who waits for the connection to close.
    closed: Vec<oneshot::Sender<()>>,
}

impl Driver for Task {
    type Wake = Wake;

    fn deadline(&self) -> Option<u64> {
        self.session.next_deadline()
    }

    fn on_deadline(&mut self, now_ms: u64) {
        self.session.expire(now_ms);
        self.deliver();
    }

    fn on_wake(&mut self, wake: Wake) -> bool {
        let now = now_ms();
        match wake {
            Wake::GraceOver => {
                debug!("closing took too long; dropping the connection");
                return false;
            }
            Wake::Dropped => self.close(),
            Wake::Command(Command::Close { done }) => {
                self.closed.push(done);
                self.close();
            }
            Wake::Command(Command::Call {
                request,
                options,
                reply,
            }) => {
                let started = self.session.call(&request, &options, now);
                self.start(started, Waiter::Store(reply));
            }
            Wake::Command(Command::Observe {
                key,
                changes,
                reply,
            }) => {
                self.observers.entry(key.clone()).or_default().push(changes);
                let started = self.session.observe(key, now);
                self.start(started, Waiter::Store(reply));
            }
            Wake::Command(Command::Unobserve { key, reply }) => {
                self.observers.remove(&key);
                let started = self.session.unobserve(key, now);
                self.start(started, Waiter::Store(reply));
            }
            Wake::Command(Command::Jobs { call, reply }) => {
                let started = call.start(&mut self.session, now);
                self.start(started, Waiter::Jobs(reply));
            }
            Wake::Command(Command::Thing {
                thing,
                notifications,
                reply,
            }) => self.act_for(thing, notifications, reply),
            Wake::Command(Command::Commands { call, reply }) => {
                let started = call.start(&mut self.session, now);
                self.start(Ok(started), Waiter::Commands(reply));
            }
            Wake::Command(Command::WatchCommands { records, reply }) => {
                self.watch_commands(records, reply)
            }
            Wake::Command(Command::Lease {
                key,
                ttl_ms,
                wait_ms,
                held,
                reply,
            }) => {
                let started = self.session.lease(key, ttl_ms, wait_ms, now);
                self.start(started, Waiter::Lease(reply, held));
            }
            Wake::Command(Command::ReleaseLease { lease, reply }) => {
                self.leases.remove(&lease);
                let started = self.session.release_lease(lease, now);
                self.start(started, Waiter::Released(reply));
            }
            Wake::Command(Command::ForgetLease { lease }) => {
                self.leases.remove(&lease);
                self.session.forget_lease(lease);
            }
        }
        true
    }

    /// Handles what the connection reported; `false` once the task is done.
    fn on_polled(&mut self, polled: Polled) -> bool {
        match polled {
            Ok(MqttEvent::Outgoing(Outgoing::Disconnect)) => self.phase = Phase::Closing,
            Ok(MqttEvent::Outgoing(Outgoing::Publish(pkid))) => self.unacked.on_sent(pkid),
            Ok(MqttEvent::Incoming(Packet::PubAck(ack))) => {
                let code = crate::puback_code(ack.reason);
                if let Some(origin) = self.unacked.on_acked(ack.pkid)
                    && code >= 0x80
                {
                    self.refused(origin, code);
                }
            }
            Ok(_) if self.phase == Phase::Closing => {}
            Ok(MqttEvent::Incoming(Packet::ConnAck(connack))) => {
                // The smaller of the broker's limit and our own (some brokers, Mochi among
                // them, enforce a limit without announcing it: configure it here too).
                let broker = connack.properties.and_then(|p| p.max_packet_size);
                let own = self.max_packet_size;
                self.session
                    .set_max_packet_size(Some(broker.map_or(own, |b| b.min(own))));
                // One SUBSCRIBE for everything; things still waiting for theirs are in it.
                let mut waiting = Vec::new();
                for waiter in self.subacks.drain(..) {
                    match waiter {
                        SubackWaiter::Session(replies) => waiting.extend(replies),
                        SubackWaiter::Thing(reply) | SubackWaiter::Watch(reply) => {
                            waiting.push(reply)
                        }
                    }
                }
                // The session's whole set: things and the command events included.
                let filters = self
                    .session
                    .subscriptions()
                    .into_iter()
                    .map(|f| Filter::new(f, QoS::AtLeastOnce));
                if self.outbox.client().try_subscribe_many(filters).is_ok() {
                    self.subacks.push_back(SubackWaiter::Session(waiting));
                }
            }
            Ok(MqttEvent::Incoming(Packet::SubAck(suback))) => match self.subacks.pop_front() {
                Some(SubackWaiter::Session(replies)) => {
                    for reply in replies {
                        let _ = reply.send(Ok(()));
                    }
                    if let Some(ready) = self.ready.take() {
                        let _ = ready.send(Ok(()));
                    }
                    if self.connected_before
                        && let Err(e) = self.session.resume(now_ms())
                    {
                        warn!(error = %e, "could not restore observations");
                    }
                    self.connected_before = true;
                }
                Some(SubackWaiter::Thing(reply)) => {
                    let _ = reply.send(match refused(&suback.return_codes) {
                        None => Ok(()),
                        Some(code) => Err(ClientError::Jobs {
                            code: "SubscriptionRefused".into(),
                            message: format!(
                                "the broker refused the subscription to the thing's jobs topics: {code:?}"
                            ),
                            execution_state: None,
                        }),
                    });
                }
                Some(SubackWaiter::Watch(reply)) => {
                    let _ = reply.send(match refused(&suback.return_codes) {
                        None => Ok(()),
                        Some(code) => Err(ClientError::Unreachable(format!(
                            "the broker refused the subscription to command events: {code:?}"
                        ))),
                    });
                }
                None => {}
            },
            Ok(MqttEvent::Incoming(Packet::Disconnect(disconnect))) => {
                // The connection error that follows says less than this.
                self.broker_disconnect = Some(ClientError::BrokerDisconnected {
                    code: disconnect.reason_code as u8,
                    reason: disconnect.properties.and_then(|p| p.reason_string),
                });
            }
            Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                self.session.handle(&from_mqtt(p), now_ms());
            }
            Ok(_) => {}
            Err(e) => {
                if let Some(ready) = self.ready.take() {
                    // Never connected: `connect` reports why, and nothing is retried.
                    let error = match crate::connection_error(&e) {
                        ClientError::PublishRefused { code } => {
                            ClientError::Refused { code, reason: None }
                        }
                        error => error,
                    };
                    let _ = ready.send(Err(error));
                    return false;
                }
                // What was in flight is gone; say why when the broker broke the protocol.
                let mut error = self
                    .broker_disconnect
                    .take()
                    .unwrap_or_else(|| crate::connection_error(&e));
                if let ClientError::PublishRefused { code } = error {
                    // A refusal rumqttc could not read (mosquitto's 0x95 packet too large)
                    // drops the connection: the oldest publish is the one refused; the other
                    // calls in flight lost their connection.
                    if let Some(origin) = self.unacked.oldest() {
                        self.refused(origin, code);
                    }
                    error = ClientError::Disconnected;
                }
                self.unacked.clear();
                if matches!(
                    error,
                    ClientError::Protocol(_) | ClientError::BrokerDisconnected { .. }
                ) {
                    warn!(%error, "broker connection dropped; reconnecting");
                } else {
                    debug!(%error, "broker connection lost; reconnecting");
                }
                match error {
                    ClientError::Protocol(_) | ClientError::BrokerDisconnected { .. } => {
                        self.session.connection_failed(error)
                    }
                    _ => self.session.connection_lost(),
                }
                self.deliver();
                if self.phase != Phase::Open {
                    return false;
                }
                // rumqttc reconnects on the next poll.
            }
        }
        // What the session decided (answers, events, publishes of its own).
        self.deliver();
        // rumqttc may have taken requests from its queue: hand over what waits.
        let taken = &mut self.unacked.taken;
        self.outbox.flush(|origin| taken.push_back(origin));
        self.disconnect_when_sent();
        true
    }
}

impl Task {
    /// Keeps a call's waiter until the answer and sends its publishes, or fails it now.
    fn start(&mut self, started: Result<CallId, ClientError>, waiter: Waiter) {
        match started {
            Ok(call) => {
                self.waiting.insert(call, waiter);
                self.deliver();
            }
            Err(e) => {
                // A receiver gone is a caller that stopped waiting.
                match waiter {
                    Waiter::Store(reply) => drop(reply.send(Err(e))),
                    Waiter::Jobs(reply) => drop(reply.send(Err(e))),
                    Waiter::Commands(reply) => drop(reply.send(Err(e))),
                    Waiter::Lease(reply, _) => drop(reply.send(Err(e))),
                    Waiter::Released(reply) => drop(reply.send(Err(e))),
                }
            }
        }
    }

    /// Subscribes to `thing`'s jobs topics (unless done already), and answers once they are.
    fn act_for(
        &mut self,
        thing: String,
        notifications: mpsc::UnboundedSender<JobNotification>,
        reply: Subscribed,
    ) {
        let filters = match self.session.act_as(&thing) {
            Ok(filters) => filters,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        self.things
            .entry(thing.clone())
            .or_default()
            .push(notifications);
        if filters.is_empty() {
            let _ = reply.send(Ok(()));
            return;
        }
        let filters = filters
            .into_iter()
            .map(|f| Filter::new(f, QoS::AtLeastOnce));
        match self.outbox.client().try_subscribe_many(filters) {
            Ok(()) => self.subacks.push_back(SubackWaiter::Thing(reply)),
            // rumqttc's queue is full: the thing is subscribed again with the session after
            // the reconnect this implies.
            Err(_) => {
                let _ = reply.send(Err(ClientError::Disconnected));
            }
        }
    }

    /// Subscribes to the command events (unless done already), and answers once it is.
    fn watch_commands(&mut self, records: mpsc::UnboundedSender<CommandRecord>, reply: Subscribed) {
        self.command_watchers.push(records);
        let Some(filter) = self.session.watch_commands() else {
            let _ = reply.send(Ok(()));
            return;
        };
        let filter = Filter::new(filter.to_owned(), QoS::AtLeastOnce);
        match self.outbox.client().try_subscribe_many([filter]) {
            Ok(()) => self.subacks.push_back(SubackWaiter::Watch(reply)),
            Err(_) => {
                let _ = reply.send(Err(ClientError::Disconnected));
            }
        }
    }

    /// Publishes what the session has to send, and hands its events to who waits for them.
    fn deliver(&mut self) {
        while let Some(outgoing) = self.session.poll_publish() {
            self.publish(outgoing.publish, outgoing.call);
        }
        while let Some(event) = self.session.poll_event() {
            match event {
                SessionEvent::Completed { call, result, .. } => {
                    let Some(waiter) = self.waiting.remove(&call) else {
                        continue;
                    };
                    match waiter {
                        Waiter::Store(reply) => drop(reply.send(result.and_then(|c| match c {
                            Completion::Store(answer) => Ok(answer),
                            other => Err(unexpected(other)),
                        }))),
                        Waiter::Jobs(reply) => drop(reply.send(result.and_then(|c| match c {
                            Completion::Jobs(value) => Ok(value),
                            other => Err(unexpected(other)),
                        }))),
                        Waiter::Commands(reply) => drop(reply.send(result)),
                        Waiter::Lease(reply, held) => {
                            let result = result.and_then(|c| match c {
                                Completion::Lease(token) => Ok(token),
                                other => Err(unexpected(other)),
                            });
                            if let Ok(Some(_)) = &result {
                                self.leases.insert(call, held);
                            }
                            drop(reply.send(result.map(|t| t.map(|token| (call, token)))));
                        }
                        Waiter::Released(reply) => drop(reply.send(result.and_then(|c| match c {
                            Completion::Released(held) => Ok(held),
                            other => Err(unexpected(other)),
                        }))),
                    }
                }
                SessionEvent::Changed {
                    key,
                    change,
                    version,
                    synthetic,
                } => {
                    if let Some(list) = self.observers.get_mut(&key) {
                        let change = KeyChange {
                            key: key.clone(),
                            value: change.into_value(),
                            version,
                            synthetic,
                        };
                        list.retain(|tx| tx.send(change.clone()).is_ok());
                    }
                }
                SessionEvent::Jobs(notification) => {
                    let thing = match &notification {
                        JobNotification::Notify { thing, .. }
                        | JobNotification::NotifyNext { thing, .. } => thing,
                    };
                    if let Some(list) = self.things.get_mut(thing) {
                        list.retain(|tx| tx.send(notification.clone()).is_ok());
                    }
                }
                SessionEvent::CommandRecord(record) => self
                    .command_watchers
                    .retain(|tx| tx.send(record.clone()).is_ok()),
                SessionEvent::LeaseRenewed { lease, .. } => {
                    debug!(lease = %lease, "lease renewed");
                }
                SessionEvent::LeaseLost { lease, key } => {
                    warn!(key = ?key, "lease lost: someone else holds the key, or no renewal was confirmed in time");
                    if let Some(held) = self.leases.remove(&lease) {
                        held.store(false, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    /// Hands `message` to rumqttc behind everything before it.
    fn publish(&mut self, message: Publish, origin: Option<Origin>) {
        let taken = &mut self.unacked.taken;
        self.outbox
            .push(message, origin, |origin| taken.push_back(origin));
    }

    /// The broker refused the publish of `origin`'s call with reason code `code`.
    fn refused(&mut self, origin: Origin, code: u8) {
        self.session.publish_refused(origin, code);
        self.deliver();
    }

    /// Starts closing: the DISCONNECT follows every request already made, and the presence
    /// message the Will would have sent, so the server drops this client's registrations now
    /// rather than when a key changes.
    fn close(&mut self) {
        if self.phase == Phase::Open {
            self.phase = Phase::CloseRequested;
            let gone = Publish {
                topic: self.session.presence_topic(),
                payload: bytes::Bytes::from_static(topics::PRESENCE_GONE),
                qos: 1,
                properties: Default::default(),
            };
            self.publish(gone, None);
            self.disconnect_when_sent();
        }
    }

    fn disconnect_when_sent(&mut self) {
        if self.phase == Phase::CloseRequested
            && self.outbox.is_empty()
            && self.outbox.client().try_disconnect().is_ok()
        {
            self.phase = Phase::Disconnecting;
        }
    }
}

/// A completion of another kind than the call's (the session never gives one).
fn unexpected(completion: Completion) -> ClientError {
    ClientError::Malformed(format!("an unexpected completion: {completion:?}"))
}

/// The first refusal among a SUBACK's reason codes.
fn refused(codes: &[SubscribeReasonCode]) -> Option<&SubscribeReasonCode> {
    codes
        .iter()
        .find(|c| !matches!(c, SubscribeReasonCode::Success(_)))
}
