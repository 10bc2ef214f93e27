//! The client's background task: it owns the MQTT connection and the session, takes the
//! handle's [`Command`]s, publishes what the session queues, feeds it what arrives, and hands
//! results back (see `connection.rs` for how the connection is polled).

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Filter, Packet, SubscribeReasonCode};
use rumqttc::v5::{AsyncClient, Event as MqttEvent, EventLoop};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::connection::{Connection, Driver, Outbox, Unacked, Wakes};
use crate::listeners::{Listeners, Tokio};
use crate::{Polled, from_mqtt, now_ms};
use mqstore_core::client::jobs::{JobNotification, JobsAnswer};
use mqstore_core::client::{Answer, CallId, ClientError};
use mqstore_core::envelope::Publish;
use mqstore_core::hlc::Hlc;
use mqstore_core::session::{Completion, Session};
use mqstore_core::shadow;
use mqstore_core::topics;

use super::Command;

/// How long closing may take: the DISCONNECT, then the broker closing the connection.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The background task: the connection and the state machine.
pub(super) async fn run(
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
        listeners: Listeners::default(),
        outbox: Outbox::new(client),
        unacked: Unacked::default(),
        waiting: HashMap::new(),
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
    Jobs(oneshot::Sender<Result<JobsAnswer, ClientError>>),
    Commands(oneshot::Sender<Result<Completion, ClientError>>),
    Lease(
        oneshot::Sender<Result<Option<(CallId, Hlc)>, ClientError>>,
        Arc<AtomicBool>,
    ),
    Released(oneshot::Sender<Result<bool, ClientError>>),
}

/// The state machine and what the task keeps around it.
struct Task {
    /// The largest packet this client sends
    /// ([`BrokerConfig::max_packet_size`](crate::BrokerConfig::max_packet_size)).
    max_packet_size: u32,
    /// The broker's DISCONNECT, until the connection error that follows it.
    broker_disconnect: Option<ClientError>,
    session: Session,
    /// Who hears what the session reports besides answers.
    listeners: Listeners<Tokio>,
    outbox: Outbox<Option<Origin>>,
    /// Publishes handed to rumqttc and not yet acknowledged, so that a PUBACK finds its call
    /// (a connection that drops forgets them all: with a clean start, rumqttc sends nothing
    /// again, and every call in flight fails anyway).
    unacked: Unacked<Origin>,
    waiting: HashMap<CallId, Waiter>,
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
                self.listeners
                    .observers
                    .entry(key.clone())
                    .or_default()
                    .push(changes);
                let started = self.session.observe(key, now);
                self.start(started, Waiter::Store(reply));
            }
            Wake::Command(Command::Unobserve { key, reply }) => {
                self.listeners.observers.remove(&key);
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
            Wake::Command(Command::Shadow {
                thing,
                name,
                notifications,
                reply,
            }) => self.use_shadow(thing, name, notifications, reply),
            Wake::Command(Command::Commands { call, reply }) => {
                let started = call.start(&mut self.session, now);
                self.start(Ok(started), Waiter::Commands(reply));
            }
            Wake::Command(Command::WatchCommands { records, reply }) => {
                self.listeners.command_watchers.push(records);
                let filter = self.session.watch_commands();
                self.subscribe_events(filter, reply);
            }
            Wake::Command(Command::WatchKeyspace { events, reply }) => {
                self.listeners.keyspace_watchers.push(events);
                let filter = self.session.watch_keyspace();
                self.subscribe_events(filter, reply);
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
                self.listeners.leases.remove(&lease);
                let started = self.session.release_lease(lease, now);
                self.start(started, Waiter::Released(reply));
            }
            Wake::Command(Command::ForgetLease { lease }) => {
                self.listeners.leases.remove(&lease);
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
                    if let Some(&origin) = self.unacked.oldest() {
                        self.refused(origin, code);
                    }
                    error = ClientError::Disconnected;
                }
                self.unacked.lost();
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
        let unacked = &mut self.unacked;
        self.outbox.flush(|origin| unacked.taken(origin));
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
        match self.session.act_as(&thing) {
            Ok(filters) => {
                (self.listeners.things.entry(thing))
                    .or_default()
                    .push(notifications);
                self.subscribe(filters, reply, SubackWaiter::Thing);
            }
            Err(e) => drop(reply.send(Err(e))),
        }
    }

    /// Uses a device shadow: its subscriptions (once), and who hears its notifications.
    fn use_shadow(
        &mut self,
        thing: String,
        name: Option<String>,
        notifications: mpsc::UnboundedSender<shadow::Notification>,
        reply: Subscribed,
    ) {
        match self.session.use_shadow(&thing, name.as_deref()) {
            Ok(filters) => {
                (self.listeners.shadows.entry((thing, name)))
                    .or_default()
                    .push(notifications);
                self.subscribe(filters, reply, SubackWaiter::Watch);
            }
            Err(e) => drop(reply.send(Err(e))),
        }
    }

    /// Subscribes to the filter of the events the session began to watch (`None`: it did
    /// already), and answers once it is.
    fn subscribe_events(&mut self, filter: Option<&'static str>, reply: Subscribed) {
        let filters = filter.map(str::to_owned).into_iter().collect();
        self.subscribe(filters, reply, SubackWaiter::Watch);
    }

    /// Subscribes to `filters` and answers `reply` once the broker took them (at once when
    /// there are none); `waiter` says how their SUBACK is read.
    fn subscribe(
        &mut self,
        filters: Vec<String>,
        reply: Subscribed,
        waiter: fn(Subscribed) -> SubackWaiter,
    ) {
        if filters.is_empty() {
            let _ = reply.send(Ok(()));
            return;
        }
        let filters = filters
            .into_iter()
            .map(|f| Filter::new(f, QoS::AtLeastOnce));
        match self.outbox.client().try_subscribe_many(filters) {
            Ok(()) => self.subacks.push_back(waiter(reply)),
            // rumqttc's queue is full: the filters are subscribed again with the session
            // after the reconnect this implies.
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
            let Some((call, result)) = self.listeners.tell(event) else {
                continue;
            };
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
                        self.listeners.leases.insert(call, held);
                    }
                    drop(reply.send(result.map(|t| t.map(|token| (call, token)))));
                }
                Waiter::Released(reply) => drop(reply.send(result.and_then(|c| match c {
                    Completion::Released(held) => Ok(held),
                    other => Err(unexpected(other)),
                }))),
            }
        }
    }

    /// Hands `message` to rumqttc behind everything before it.
    fn publish(&mut self, message: Publish, origin: Option<Origin>) {
        let unacked = &mut self.unacked;
        self.outbox
            .push(message, origin, |origin| unacked.taken(origin));
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
