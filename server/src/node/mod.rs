//! One node's loop: the engine, the stores and what is queued for the broker, driven by the
//! connection's events ([`Driver`]): here the loop, the routing of what arrives and what is
//! queued for the broker; the jobs service on Redis and the device API listener's election in
//! `jobs.rs`, the state store's calls on Redis in `remote.rs`, a local node's commands in
//! `commands.rs`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rumqttc::Outgoing;
use rumqttc::v5::Event;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Filter, Packet, PubAckReason};
use tracing::{debug, error, info, warn};

mod commands;
mod jobs;
mod remote;

pub(crate) use commands::RemoteCommands;
pub(crate) use remote::Remote;

use super::ServerError;
use super::done::{Done, JobsDone, StoreDone, Swept};
use super::jobs::{
    JOBS_TICK_MS, JobsService, LISTENER_LEASE_MS, LISTENER_RENEW_MS, Listener, SharedJobs,
};
use crate::metrics::Metrics;
use crate::redis_store::{RedisStore, RedisStoreError};
use crate::registry_calls::{PipeReader, PipeReply};
use mqstore_core::client::ClientError;
use mqstore_core::engine::{Accepted, Engine, Fit, Outcome, fit_for_broker};
use mqstore_core::envelope::{self, DropReason, EnvelopeError, Publish};
use mqstore_core::jobs::topics as jobs_topics;
use mqstore_core::presence::Peers;
use mqstore_core::server::{self, Handled, JobsHandled, NotAnswered, Receipt, Route, To};
use mqstore_core::topics;
use mqstore_net::host::{Driver, Outbox, Unacked, Wakes};
use mqstore_net::host::{Polled, connection_error, from_mqtt, now_ms};
use mqstore_net::protocol_hint;

/// A job's rollout pauses while this many publishes are on their way to the broker (waiting
/// in the outbox or in rumqttc's queue, or sent and not yet acknowledged): an answer to
/// another request queues behind no more than these and one batch.
pub(super) const ROLLOUT_MAX_PENDING: usize = 128;

/// How many 503 answers to overloaded requests may wait beyond `max_pending_answers`.
pub(super) const OVERLOAD_REPLIES: usize = 1_000;

/// Requests (publishes, subscribes) queued for the connection. Answers that do not fit wait in
/// the node's own backlog, in order.
pub(super) const REQUEST_QUEUE: usize = 1024;

/// How long shutdown waits for the answers still queued to be written.
pub(super) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Where shutdown is, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Stop {
    Running,
    /// The UNSUBSCRIBE of the invoke topic is on its way; requests still arriving are answered.
    Unsubscribing,
    /// The broker sends no more requests; the DISCONNECT waits until the broker has
    /// acknowledged every answer.
    Unsubscribed,
    /// The DISCONNECT is queued behind every answer.
    Disconnecting,
    /// The DISCONNECT is sent; waiting for the broker to close the connection. Closing it
    /// first, with the broker's packets still unread, would reset it, and the broker could lose
    /// what it has not read yet.
    Closing,
}

/// The server's wake-ups besides its connection: the shutdown signal, then the end of the
/// grace period shutdown may take.
pub(super) struct Signals<F> {
    pub(super) shutdown: Pin<Box<F>>,
    pub(super) fired: bool,
    pub(super) grace: Pin<Box<tokio::time::Sleep>>,
    /// What Redis answered (requests, sweeps and jobs calls run off the loop).
    pub(super) store_done: tokio::sync::mpsc::UnboundedReceiver<Done>,
    /// The command registry's pipe to Redis (none on a local node).
    pub(super) pipe: PipeReader,
}

pub(super) enum Signal {
    Shutdown,
    GraceOver,
    Done(Done),
    /// A reply on the command registry's pipe to Redis (an error: the pipe is gone).
    Piped(std::io::Result<PipeReply>),
}

impl<F: Future<Output = ()>> Wakes for Signals<F> {
    type Wake = Signal;

    async fn next(&mut self) -> Signal {
        let Self {
            shutdown,
            fired,
            grace,
            store_done,
            pipe,
        } = self;
        let lifecycle = async {
            if !*fired {
                shutdown.as_mut().await;
                *fired = true;
                grace
                    .as_mut()
                    .reset(tokio::time::Instant::now() + SHUTDOWN_GRACE);
                return Signal::Shutdown;
            }
            grace.as_mut().await;
            Signal::GraceOver
        };
        tokio::pin!(lifecycle);
        // All are cancel-safe: pinned futures, a channel and the pipe's reader.
        loop {
            tokio::select! {
                Some(done) = store_done.recv() => match done {
                    Done::PipeOpened(opened) => pipe.open(opened),
                    done => return Signal::Done(done),
                },
                signal = &mut lifecycle => return signal,
                reply = pipe.reply() => return Signal::Piped(reply),
            }
        }
    }
}

/// Where the state lives, and the engine that drives it.
#[allow(clippy::large_enum_variant)] // one per node, made once and never moved after
pub(super) enum State {
    /// The core's node on its own store (memory, or the log of `--data-dir`), with the jobs
    /// service in memory: it answers at once.
    Local(Box<server::Node>),
    /// The engine owns no store: each op runs in Redis in a task of its own, many at once,
    /// and comes back as a [`StoreDone`].
    Redis(Engine<()>, Remote),
}

impl State {
    fn node_id(&self) -> &str {
        match self {
            Self::Local(node) => node.node_id(),
            Self::Redis(engine, _) => engine.node_id(),
        }
    }

    /// The next deadline of the store (and, on a local node, its jobs while the broker has
    /// `room` for a rollout's next batch, and its disk).
    fn next_deadline(&self, now_ms: u64, room: bool) -> Option<u64> {
        match self {
            Self::Local(node) => node.next_deadline(now_ms, room),
            Self::Redis(_, remote) => (!remote.sweeping).then_some(remote.next_sweep),
        }
    }

    /// Requests waiting for the store.
    fn in_flight(&self) -> usize {
        match self {
            Self::Local(_) => 0,
            Self::Redis(_, remote) => remote.in_flight,
        }
    }
}

/// What a publish handed to the broker was: what its PUBACK means depends on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Sent {
    Answer,
    /// A notification for this client: "no matching subscribers" means it stopped listening.
    /// With a copy, published again if the connection drops before its PUBACK: nobody else
    /// would ever tell the client of that change (a caller whose answer is lost asks again).
    Notification {
        client: String,
        copy: Publish,
    },
    /// The probe that tells whether the broker reports "no matching subscribers" at all.
    Probe,
    /// This node's retained presence.
    Presence,
    /// A publish whose PUBACK the node waits for (a one-way command's).
    Receipt(Receipt),
}

/// How the node learned that clients stopped listening.
enum Gone {
    /// Their presence Will (or goodbye) arrived.
    Presence(Vec<String>),
    /// The broker found nobody subscribed to this notification of the client's.
    Unheard { client: String, copy: Publish },
}

/// One server node: the engine and what it has queued for the broker.
pub(super) struct Node {
    pub(super) state: State,
    /// Added to the system clock (tests of skewed nodes).
    pub(super) clock_offset_ms: i64,
    /// When the node started: what its monotonic clock ([`Node::monotonic`]) counts from.
    pub(super) started: std::time::Instant,
    /// The jobs service, unless switched off.
    pub(super) jobs: Option<JobsService>,
    /// The command service on Redis, unless switched off (a local node's is in its core node).
    pub(super) commands: Option<RemoteCommands>,
    /// Answers and notifications, tagged with what they are.
    pub(super) outbox: Outbox<Sent>,
    pub(super) metrics: Arc<Metrics>,
    /// What requests arrive on (shared subscriptions with a share group).
    pub(super) invoke_filters: Vec<String>,
    /// Where clients' and server nodes' presence messages arrive.
    pub(super) presence_filters: Vec<&'static str>,
    /// The other nodes on the broker, as their presence says.
    pub(super) peers: Peers,
    /// UNSUBACKs still expected while shutting down.
    pub(super) unsubacks: usize,
    /// SUBACKs still expected after a connection: requests are served once they are in.
    pub(super) subacks: usize,
    /// What the engine returned for the current request or expiry sweep.
    pub(super) out: Vec<Publish>,
    /// The publishes rumqttc took until their PUBACKs, with what each is (answers are not
    /// kept: nothing waits for their acknowledgement).
    pub(super) unacked: Unacked<Sent>,
    /// Where this node's probe goes (see [`topics::probe_topic`]).
    pub(super) probe_topic: String,
    /// This node's retained presence ("online", its epoch and limit), published at every
    /// connection (none without the state store).
    pub(super) presence: Option<Publish>,
    /// Its presence once stopped ("offline", as its Will says): published when it stops
    /// cleanly, since a clean DISCONNECT discards the Will (other nodes and clients would take
    /// it for online).
    pub(super) offline: Option<Publish>,
    /// Connections the broker broke the protocol on. Not reset by a proper PUBACK: what
    /// Mochi refuses depends on the publish (user properties), and a PUBACK in between says
    /// nothing about the next answer.
    pub(super) protocol_errors: u32,
    /// What the probe found (`None` until its PUBACK came).
    pub(super) reports_no_subscribers: Option<bool>,
    /// The largest packet this node sends: its own limit, lowered by the broker's CONNACK.
    pub(super) max_packet_size: u32,
    /// This node's own limit ([`mqstore_net::BrokerConfig::max_packet_size`]).
    pub(super) own_max_packet_size: u32,
    pub(super) max_pending_answers: usize,
    pub(super) stop: Stop,
    /// Told when the node's subscriptions are in (at every connection).
    pub(super) subscribed: tokio::sync::watch::Sender<bool>,
    /// Where a finished sync of the data directory reports.
    pub(super) disk_done: tokio::sync::mpsc::UnboundedSender<Done>,
    /// Why the node stopped on its own (the disk failed; the broker not there at start with
    /// `fail_fast`).
    pub(super) fatal: Option<ServerError>,
    /// The broker's address, for what the node says while it waits for it.
    pub(super) broker: String,
    /// Exit when the broker cannot be reached at start instead of waiting for it.
    pub(super) fail_fast: bool,
    /// Connections that failed before the first one succeeded (`None` once one did).
    pub(super) start_failures: Option<u32>,
}

/// The node's subscription to `filter`, at least once. The jobs device API's asks for No Local:
/// the node's own replies and notifications match it, and the broker would send each back to
/// the node, to be read, acknowledged and ignored (three deliveries more per device call, two
/// per execution a rollout queues). A shared subscription (`$share/…`, never equal to the
/// filter) may not ask for it (MQTT 5, 3.8.3.1).
fn subscription(filter: &str) -> Filter {
    let mut subscription = Filter::new(filter, QoS::AtLeastOnce);
    subscription.nolocal = filter == jobs_topics::DEVICE_FILTER;
    subscription
}

impl Node {
    /// This node's clock.
    fn now(&self) -> u64 {
        now_ms().saturating_add_signed(self.clock_offset_ms)
    }

    /// Milliseconds since the node started, on a clock that never jumps: what the listener's
    /// lease is timed by (a wall clock set back would keep a listener that lost its lease
    /// listening beside the next, and hold its renewals back).
    fn monotonic(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Whether a job's rollout may queue its next batch (see [`ROLLOUT_MAX_PENDING`]).
    fn rollout_has_room(&self) -> bool {
        self.outbox.len() + self.unacked.len() < ROLLOUT_MAX_PENDING
    }
}

impl Driver for Node {
    type Wake = Signal;

    fn deadline(&self) -> Option<u64> {
        // Not once the DISCONNECT is queued: what expiry sends would queue behind it.
        match self.stop {
            Stop::Running | Stop::Unsubscribing | Stop::Unsubscribed => {
                let jobs = match &self.jobs {
                    Some(JobsService::Shared(shared)) => {
                        // The next tick, the next claim; and a listener whose renewal is late
                        // stops at `held_until` whatever the claim in flight says later (all on
                        // the monotonic clock, given in the wall clock's terms).
                        let (now, monotonic) = (self.now(), self.monotonic());
                        let claim = shared.listener.as_ref().and_then(|listener| {
                            let claim = (!listener.claiming).then_some(listener.next_claim);
                            let stop = listener.leader.then_some(listener.held_until);
                            claim.into_iter().chain(stop).min()
                        });
                        let due = shared
                            .may_tick()
                            .then_some(shared.next_tick)
                            .into_iter()
                            .chain(claim)
                            .min();
                        due.map(|due| now + due.saturating_sub(monotonic))
                    }
                    // A local node's jobs are the node's: a job's rollout goes on at once,
                    // while the broker keeps up (requests that arrive meanwhile come first:
                    // see `Connection::next`).
                    Some(JobsService::Local) | None => None,
                };
                let room = self.rollout_has_room();
                self.state
                    .next_deadline(self.now(), room)
                    .into_iter()
                    .chain(jobs)
                    .chain(self.commands_next_deadline())
                    .min()
            }
            Stop::Disconnecting | Stop::Closing => None,
        }
    }

    fn on_deadline(&mut self, _: u64) {
        let now_ms = self.now();
        let monotonic = self.monotonic();
        let rollout_room = self.rollout_has_room();
        self.state_deadline(now_ms, rollout_room);
        if let Some(JobsService::Shared(shared)) = &mut self.jobs
            && shared.may_tick()
            && shared.next_tick <= monotonic
        {
            shared.ticking += 1;
            let work = shared.tick(now_ms, rollout_room);
            self.drive_jobs(work);
        }
        if let Some(JobsService::Shared(SharedJobs {
            listener: Some(listener),
            ..
        })) = &self.jobs
            && listener.leader
            && listener.held_until <= monotonic
        {
            warn!("the jobs device API lease was not renewed in time (is Redis reachable?)");
            self.stop_listening();
        }
        if self.stop == Stop::Running
            && let Some(JobsService::Shared(shared)) = &mut self.jobs
            && let Some(listener) = &mut shared.listener
            && !listener.claiming
            && listener.next_claim <= monotonic
        {
            listener.claiming = true;
            let (store, done, token) = (
                shared.store.clone(),
                shared.done.clone(),
                listener.token.clone(),
            );
            tokio::spawn(async move {
                let held = store.claim_listener(&token, LISTENER_LEASE_MS).await;
                let _ = done.send(Done::Jobs(JobsDone::Claim(monotonic, held)));
            });
        }
        self.commands_deadline(now_ms);
        self.queue_out();
    }

    fn on_wake(&mut self, signal: Signal) -> bool {
        let go_on = match signal {
            Signal::Shutdown => {
                // Stop taking requests; answer those already taken, then disconnect.
                info!("shutting down");
                let mut filters = self.invoke_filters.clone();
                filters.extend(self.elected_filters());
                for filter in filters {
                    if self.outbox.client().try_unsubscribe(filter).is_ok() {
                        self.unsubacks += 1;
                    }
                }
                if let Some(offline) = self.offline.take() {
                    let (unacked, metrics) = (&mut self.unacked, &self.metrics);
                    self.outbox.push_retained(offline, Sent::Presence, |tag| {
                        note_sent(unacked, metrics, tag)
                    });
                    self.presence = None; // Not online again on a reconnect while stopping.
                }
                // Another node takes the device API over at once.
                if let Some(JobsService::Shared(shared)) = &mut self.jobs
                    && let Some(listener) = &mut shared.listener
                    && listener.leader
                {
                    (listener.leader, listener.releasing) = (false, true);
                    let (store, token) = (shared.store.clone(), listener.token.clone());
                    let done = shared.done.clone();
                    tokio::spawn(async move {
                        let released = store.release_listener(&token).await;
                        let _ = done.send(Done::Jobs(JobsDone::Released(released)));
                    });
                }
                self.stop = match self.unsubacks {
                    0 => Stop::Unsubscribed,
                    _ => Stop::Unsubscribing,
                };
                true
            }
            Signal::GraceOver => {
                warn!("gave up waiting for in-flight publishes after {SHUTDOWN_GRACE:?}");
                false
            }
            Signal::Done(Done::State(done)) => {
                self.store_done(done);
                true
            }
            Signal::Done(Done::Jobs(done)) => {
                self.jobs_done(done);
                self.disconnect_when_done();
                true
            }
            Signal::Done(Done::Commands(done)) => {
                self.commands_done(done);
                self.disconnect_when_done();
                true
            }
            Signal::Done(Done::Synced(result)) => self.synced(result),
            Signal::Done(Done::PipeOpened(_)) => true, // Taken by the wait (`Signals`).
            Signal::Piped(reply) => {
                self.commands_piped(reply);
                self.disconnect_when_done();
                true
            }
        };
        go_on && self.fatal.is_none()
    }

    /// Handles what the connection reported; `false` once the node is done.
    fn on_polled(&mut self, polled: Polled) -> bool {
        match polled {
            Ok(Event::Outgoing(Outgoing::Disconnect)) => self.stop = Stop::Closing,
            Ok(_) if self.stop == Stop::Closing => {}
            Err(_) if self.stop == Stop::Closing => return false,
            Ok(Event::Incoming(Packet::SubAck(_))) if self.subacks > 0 => {
                self.subacks -= 1;
                if self.subacks == 0 {
                    // Only now does the broker deliver requests: a caller that connects after
                    // this line is served.
                    info!("connected to the broker; subscribed");
                    self.subscribed.send_replace(true);
                    self.metrics.set_subscribed(true);
                }
            }
            Ok(Event::Incoming(Packet::UnsubAck(_))) if self.stop == Stop::Unsubscribing => {
                self.unsubacks = self.unsubacks.saturating_sub(1);
                if self.unsubacks == 0 {
                    self.stop = Stop::Unsubscribed;
                }
            }
            Ok(Event::Incoming(Packet::Publish(p))) if self.stop == Stop::Disconnecting => {
                // Its answer would queue behind the DISCONNECT: leave it untouched, so the
                // caller's timeout tells the truth (nothing was done).
                debug!(topic = ?p.topic, "a request arrived after the DISCONNECT was queued: not handled");
            }
            Ok(event) => self.on_event(event),
            Err(e) if self.stop != Stop::Running => {
                warn!(error = %e, "the broker went away during shutdown");
                return false;
            }
            Err(e) => {
                self.metrics.set_subscribed(false);
                if self.outbox.hold() {
                    self.connection_lost();
                }
                let error = connection_error(&e);
                if self.start_failures.is_some() && self.fail_fast {
                    let (addr, error) = (self.broker.clone(), error.to_string());
                    self.fatal = Some(ServerError::Broker { addr, error });
                    return false;
                }
                match (&mut self.start_failures, &error) {
                    // Not there yet (started before it): said as Redis's wait says it, at the
                    // first failure and every tenth.
                    (Some(failures), ClientError::Unreachable(_)) => {
                        *failures += 1;
                        if *failures == 1 || failures.is_multiple_of(10) {
                            warn!(%error, tries = *failures, "waiting for the broker at {} (not reachable yet; --fail-fast exits instead)", self.broker);
                        }
                    }
                    // There, and refusing (a password): said at every attempt.
                    _ => warn!(%error, "broker connection failed; reconnecting"),
                }
                if let Some(hint) = protocol_hint(&error) {
                    self.protocol_errors += 1;
                    if self.protocol_errors >= 2 {
                        warn!(
                            times = self.protocol_errors,
                            "the broker keeps breaking the protocol: {hint}"
                        );
                    }
                }
            }
        }
        // rumqttc may have taken requests from its queue: hand over what waits.
        let (unacked, metrics) = (&mut self.unacked, &self.metrics);
        self.outbox.flush(|tag| note_sent(unacked, metrics, tag));
        self.disconnect_when_done();
        self.fatal.is_none()
    }
}

impl Node {
    /// Once the broker sends no more requests, every call off the loop has come back, and the
    /// broker has acknowledged every answer, the DISCONNECT goes last.
    fn disconnect_when_done(&mut self) {
        if self.stop == Stop::Unsubscribed
            && self.state.in_flight() == 0
            && self.jobs_in_flight() == 0
            && self.commands_in_flight() == 0
            && match &self.state {
                State::Local(node) => node.idle(),
                State::Redis(..) => true,
            }
            && self.outbox.is_empty()
            && self.unacked.is_empty()
            && self.outbox.client().try_disconnect().is_ok()
        {
            self.stop = Stop::Disconnecting;
        }
    }
}

impl Node {
    /// The broker connection dropped, and with it (clean start) every publish rumqttc had
    /// taken and the broker had not acknowledged: the notifications among them go out again
    /// once reconnected, ahead of anything made meanwhile (a client that got one already drops
    /// the copy: it is not newer than what it saw); a one-way command's caller hears that its
    /// command's fate is unknown.
    fn connection_lost(&mut self) {
        let mut again = Vec::new();
        for tag in self.unacked.lost() {
            match tag {
                Sent::Receipt(receipt) => self.command_acknowledged(&receipt, None),
                Sent::Notification { client, copy } => {
                    let tag = Sent::Notification {
                        client,
                        copy: copy.clone(),
                    };
                    again.push((copy, tag));
                }
                Sent::Answer | Sent::Probe | Sent::Presence => {}
            }
        }
        if !again.is_empty() {
            info!(
                notifications = again.len(),
                "the broker connection dropped before it acknowledged these notifications: they go out again once reconnected"
            );
        }
        self.outbox.requeue(again.into_iter());
    }

    fn on_event(&mut self, event: Event) {
        let gone = match event {
            Event::Incoming(Packet::ConnAck(connack)) => {
                if let Some(failures) = self.start_failures.take()
                    && failures > 0
                {
                    info!(
                        tries = failures + 1,
                        "the broker at {} answers: starting", self.broker
                    );
                }
                let broker = connack.properties.and_then(|p| p.max_packet_size);
                self.max_packet_size = broker.map_or(self.own_max_packet_size, |b| {
                    b.min(self.own_max_packet_size)
                });
                // Clean start: nothing survives a reconnect, so subscribe again every time.
                let mut filters = self.invoke_filters.clone();
                filters.extend(self.elected_filters());
                filters.extend(self.presence_filters.iter().map(|f| f.to_string()));
                self.subacks = 0;
                for filter in &filters {
                    match self
                        .outbox
                        .client()
                        .try_subscribe_many([subscription(filter)])
                    {
                        Ok(()) => self.subacks += 1,
                        Err(e) => warn!(%filter, error = %e, "subscribe failed"),
                    }
                }
                info!("connected to the broker; subscribing");
                self.metrics.connected();
                let probe = Publish {
                    topic: self.probe_topic.clone(),
                    payload: bytes::Bytes::from_static(b"probe"),
                    qos: 1,
                    properties: Default::default(),
                };
                let (unacked, metrics) = (&mut self.unacked, &self.metrics);
                if let Some(presence) = &self.presence {
                    self.outbox
                        .push_retained(presence.clone(), Sent::Presence, |tag| {
                            note_sent(unacked, metrics, tag)
                        });
                }
                self.outbox
                    .push(probe, Sent::Probe, |tag| note_sent(unacked, metrics, tag));
                // What waited while the connection was down: the notifications lost with the
                // last one first, then what was made meanwhile.
                self.outbox.resume(|tag| note_sent(unacked, metrics, tag));
                self.queue_out();
                None
            }
            Event::Incoming(Packet::Publish(p)) => {
                let received = Instant::now();
                let retained = p.retain;
                let message = from_mqtt(p);
                // A retained presence replays at every subscribe: it says nothing about the
                // client now (and would drop its registrations again and again).
                let route = match &self.state {
                    State::Local(node) => node.route(&message.topic, retained),
                    State::Redis(..) => {
                        let commands = self.commands.as_ref().map(|c| &c.service);
                        server::route(&message.topic, retained, self.jobs.is_some(), commands)
                    }
                };
                match route {
                    Route::Presence(clients) => Some(Gone::Presence(clients)),
                    Route::ServerPresence => {
                        self.peer_seen(&message);
                        None
                    }
                    Route::Jobs => {
                        self.handle_jobs(message);
                        None
                    }
                    Route::Commands => {
                        self.handle_commands(message);
                        None
                    }
                    _ if self.outbox.len() >= self.max_pending_answers => {
                        // Not applied. Answered 503 (a small publish, no engine work) while
                        // the backlog has room for that; beyond it, not even that.
                        let reply = (self.outbox.len()
                            < self.max_pending_answers + OVERLOAD_REPLIES)
                            .then(|| {
                                envelope::unavailable_reply(
                                    message.qos,
                                    message.properties,
                                    self.state.node_id(),
                                )
                            })
                            .flatten();
                        let outcome = match reply {
                            Some(reply) => {
                                self.out.push(reply);
                                self.queue_out();
                                Outcome::Rejected(EnvelopeError::Unavailable)
                            }
                            None => Outcome::Dropped(DropReason::Overloaded),
                        };
                        debug!(pending = self.outbox.len(), "request refused: overloaded");
                        self.metrics.record(&outcome, received.elapsed());
                        None
                    }
                    _ => {
                        self.handle_request(message, received);
                        None
                    }
                }
            }
            Event::Outgoing(Outgoing::Publish(pkid)) => {
                // Packet id 0: a QoS 0 publish (jobs and keyspace events), never acknowledged.
                self.unacked.on_sent(pkid);
                None
            }
            Event::Incoming(Packet::PubAck(ack)) => {
                let sent = self.unacked.on_acked(ack.pkid);
                if let Some(Sent::Receipt(receipt)) = &sent {
                    let code = mqstore_net::host::puback_code(ack.reason);
                    self.command_acknowledged(receipt, Some(code));
                    self.queue_out();
                }
                match (ack.reason, sent) {
                    (
                        PubAckReason::NoMatchingSubscribers,
                        Some(Sent::Notification { client, copy }),
                    ) => {
                        debug!(?client, "nobody receives this client's notifications");
                        Some(Gone::Unheard { client, copy })
                    }
                    (reason, Some(Sent::Probe)) => {
                        self.probed(reason == PubAckReason::NoMatchingSubscribers);
                        None
                    }
                    (PubAckReason::Success | PubAckReason::NoMatchingSubscribers, _) => None,
                    (reason, _) => {
                        warn!(?reason, pkid = ack.pkid, "the broker refused a publish");
                        None
                    }
                }
            }
            Event::Incoming(Packet::Disconnect(d)) => {
                warn!(reason = ?d.reason_code, "the broker disconnected us");
                None
            }
            _ => None,
        };
        if let Some(gone) = gone {
            self.drop_clients(gone);
        }
    }

    /// A server node's presence: says so when another node answers requests this one answers.
    fn peer_seen(&mut self, message: &Publish) {
        let peers = &mut self.peers;
        if let Some(clash) = peers.seen(&message.topic, &message.payload) {
            let theirs = match &clash.theirs {
                Some(theirs) => theirs.to_string(),
                None => "(its version does not say how it subscribes)".to_owned(),
            };
            error!(
                node = %clash.node,
                services = %clash.services,
                "node {} serves {} on this broker {theirs}, and this node {}: each such request \
                 both receive is answered twice (a SET applied twice, a command sent to \
                 its device twice); give every node on one broker the same --share-group",
                clash.node,
                clash.services,
                peers.subscription(),
            );
        }
        self.metrics.set_clashing_nodes(peers.clashing());
    }

    /// A request for the state store: answered now (memory), or once Redis has run its op.
    fn handle_request(&mut self, message: Publish, received: Instant) {
        let now = self.now();
        let outcome = match &mut self.state {
            State::Local(node) => {
                let handled = node.handle(message, None, false, now);
                self.metrics.set_store(node.stats());
                match handled {
                    Handled::State(outcome) => outcome,
                    // The data directory failed: the node stops (see `synced`).
                    _ => return self.check_disk(),
                }
            }
            State::Redis(engine, remote) => match engine.accept(message, now, &mut self.out) {
                Accepted::Done(outcome) => outcome,
                Accepted::Store(call) => {
                    remote.in_flight += 1;
                    let (store, done) = (remote.store.clone(), remote.done.clone());
                    tokio::spawn(async move {
                        let result = store.apply(call.op(), now).await.map(Box::new);
                        let _ = done.send(Done::State(StoreDone::Call {
                            call,
                            result,
                            received,
                        }));
                    });
                    return;
                }
            },
        };
        self.answered(outcome, received);
    }

    /// Logs and counts a handled request, and queues what it published.
    fn answered(&mut self, outcome: Outcome, received: Instant) {
        match &outcome {
            Outcome::Dropped(reason) => warn!(%reason, "request dropped"),
            Outcome::Rejected(error) => warn!(%error, "request rejected"),
            Outcome::Answered { .. } => {}
        }
        self.queue_out();
        self.metrics.record(&outcome, received.elapsed());
    }

    /// Expiry and ended leases (and a local node's jobs timers and rollouts, while the
    /// broker has `room`): at once on a local node; on Redis, a sweep in a task of its own.
    fn state_deadline(&mut self, now_ms: u64, room: bool) {
        match &mut self.state {
            State::Local(node) => {
                let ticked = node.on_deadline(now_ms, room);
                for (client, registrations) in ticked.leases_ended {
                    debug!(?client, registrations, "registration lease ended: dropped");
                    self.metrics.client_dropped();
                }
                if let Some(error) = ticked.jobs_error {
                    warn!(%error, "jobs timers");
                }
                self.metrics.jobs_notified(ticked.jobs_notified as u64);
                self.metrics.set_store(node.stats());
                self.commands_moved();
                self.queue_out();
            }
            State::Redis(_, remote) if !remote.sweeping && remote.next_sweep <= now_ms => {
                remote.sweeping = true;
                let (store, done) = (remote.store.clone(), remote.done.clone());
                tokio::spawn(async move {
                    let (expired, failed) = store.sweep(now_ms).await;
                    let swept = async {
                        if let Some(error) = failed {
                            return Err(error);
                        }
                        Ok(Swept {
                            leases: store.expire_leases(now_ms).await?,
                            stats: store.stats().await?,
                        })
                    };
                    let _ = done.send(Done::State(StoreDone::Sweep(expired, swept.await)));
                });
            }
            State::Redis(..) => {}
        }
    }

    /// Drops the registrations of clients that are gone.
    fn drop_clients(&mut self, gone: Gone) {
        let (gone, before) = match gone {
            Gone::Presence(clients) => {
                self.metrics.clients_gone(clients.len() as u64);
                (clients, None)
            }
            Gone::Unheard { client, copy } => (vec![client], envelope::notified_change(&copy)),
        };
        match &mut self.state {
            // Its requests and the broker's PUBACKs come on one connection, in the broker's
            // order, and are handled in turn: a client back and registering again comes after.
            State::Local(node) => {
                let dropped = node.drop_clients(&gone);
                if dropped > 0 {
                    info!(clients = ?gone, registrations = dropped, "client gone: dropped its registrations");
                    self.metrics.client_dropped();
                    self.metrics.set_store(node.stats());
                }
            }
            // A client's Will says nothing of when it went relative to its KEYNOTIFYs, which
            // another node may be writing to Redis now, after the client came back: dropping
            // on it could drop those. Where the broker reports "no matching subscribers", a
            // gone client is found at its next notification instead, whose version orders the
            // drop against its registrations (`drop_client_before`).
            State::Redis(..) if before.is_none() && self.reports_no_subscribers == Some(true) => {
                debug!(clients = ?gone, "client gone: its registrations end at its next notification nobody receives, or with their lease");
            }
            State::Redis(_, remote) => {
                let (store, done) = (remote.store.clone(), remote.done.clone());
                tokio::spawn(async move {
                    let mut dropped = Ok(0);
                    for client in &gone {
                        let result = match &before {
                            Some((key, version)) => {
                                store.drop_client_before(client, key, version).await
                            }
                            None => store.drop_client(client).await,
                        };
                        match result {
                            Ok(n) => dropped = dropped.map(|d| d + n),
                            Err(e) => dropped = Err(e),
                        }
                    }
                    let _ = done.send(Done::State(StoreDone::Dropped(gone, dropped)));
                });
            }
        }
    }

    /// Queues what the node or the engine returned, in order (notifications before
    /// responses); a local node's with `--fsync always` once the writes before it are synced.
    fn queue_out(&mut self) {
        let (unacked, metrics) = (&mut self.unacked, &self.metrics);
        let mut push = |message: Publish, tag: Sent| {
            if let Some(message) = fit(message, &tag, self.max_packet_size, metrics) {
                self.outbox
                    .push(message, tag, |tag| note_sent(unacked, metrics, tag));
            }
        };
        let mut push_out = |out: server::Out| {
            let tag = match (out.to, out.receipt) {
                (_, Some(receipt)) => Sent::Receipt(receipt),
                (To::Watcher(client), None) => Sent::Notification {
                    client,
                    copy: out.publish.clone(),
                },
                (To::Requester(_) | To::Subscribers, None) => Sent::Answer,
            };
            push(out.publish, tag);
        };
        match (&mut self.state, &mut self.commands) {
            (State::Local(node), _) => {
                while let Some(out) = node.poll_output() {
                    push_out(out);
                }
                while let Some(sync) = node.poll_sync() {
                    let done = self.disk_done.clone();
                    tokio::task::spawn_blocking(move || {
                        let _ = done.send(Done::Synced(sync.run()));
                    });
                }
            }
            (State::Redis(..), Some(remote)) => {
                while let Some(out) = remote.service.poll_output() {
                    push_out(out);
                }
            }
            (State::Redis(..), None) => {}
        }
        // What the node made itself (a 503 while overloaded), and the engine's on Redis.
        for message in self.out.drain(..) {
            let tag = match topics::client_of_notify_topic(&message.topic) {
                Some(client) => Sent::Notification {
                    client,
                    copy: message.clone(),
                },
                None => Sent::Answer,
            };
            push(message, tag);
        }
        self.check_disk();
    }

    /// A sync of the data directory ended: what waited for it goes out; the next one starts.
    fn synced(&mut self, result: std::io::Result<()>) -> bool {
        let now = self.now();
        if let State::Local(node) = &mut self.state
            && let Some(c) = node.synced(result, now)
        {
            info!(
                before = c.before,
                after = c.after,
                took_ms = c.took.as_millis() as u64,
                "compacted the data file"
            );
        }
        self.queue_out();
        self.disconnect_when_done();
        self.fatal.is_none()
    }

    /// Stops the node once its data directory failed: what waits for the disk is never sent
    /// (those writes may not be on disk).
    fn check_disk(&mut self) {
        if let (State::Local(node), None) = (&self.state, &self.fatal)
            && let Some(error) = node.failure()
        {
            error!(%error, "the data directory failed: stopping (answers not yet on disk are not sent)");
            self.fatal = Some(ServerError::Disk(error.clone()));
        }
    }

    /// The probe's PUBACK came: whether the broker reports "no matching subscribers".
    fn probed(&mut self, reports: bool) {
        if self.reports_no_subscribers.replace(reports) == Some(reports) {
            return; // Said already, at an earlier connection.
        }
        self.metrics.set_broker_reports_no_subscribers(reports);
        if reports {
            debug!("the broker reports \"no matching subscribers\" (PUBACK 0x10)");
        } else {
            warn!(
                "the broker does not report \"no matching subscribers\" (PUBACK 0x10) for a \
                 message nobody should receive (it lacks the feature, as Mochi MQTT does, or \
                 something subscribes to everything under clients/): the registrations of a \
                 client that stops listening without its presence Will are kept until it \
                 re-registers or its Will arrives"
            );
        }
    }
}

/// `message` if the broker takes it (at most `max` bytes), as [`fit_for_broker`] decides;
/// logs what it changed and counts what it dropped.
pub(super) fn fit(message: Publish, tag: &Sent, max: u32, metrics: &Metrics) -> Option<Publish> {
    match fit_for_broker(message, *tag == Sent::Answer, max as usize) {
        Fit::Fits(message) => Some(message),
        Fit::Replaced { message, size } => {
            warn!(size, max, topic = %message.topic, "answer too large for the broker: answered with an error instead");
            Some(message)
        }
        Fit::TooLarge { topic, size } => {
            warn!(size, max, %topic, "dropped a publish the broker would refuse (too large)");
            metrics.publish_dropped();
            None
        }
    }
}

/// rumqttc took a publish: remember what it was until its PUBACK (an answer: nothing).
pub(super) fn note_sent(unacked: &mut Unacked<Sent>, metrics: &Metrics, tag: Sent) {
    if matches!(tag, Sent::Notification { .. }) {
        metrics.notified(1);
    }
    unacked.taken((tag != Sent::Answer).then_some(tag));
}

#[cfg(test)]
mod tests {
    use super::*;
    use mqstore_core::ServiceError;
    use mqstore_core::codec::Response;
    use mqstore_core::envelope::Properties;

    fn publish(topic: &str, payload: &'static [u8]) -> Publish {
        Publish {
            topic: topic.to_owned(),
            payload: bytes::Bytes::from_static(payload),
            qos: 1,
            properties: Properties::default(),
        }
    }

    #[test]
    fn what_the_broker_would_refuse_is_replaced_or_dropped_and_counted() {
        let metrics = Metrics::default();
        let small = publish("r/1", b"+OK\r\n");
        assert_eq!(
            fit(small.clone(), &Sent::Answer, 100, &metrics),
            Some(small)
        );
        // An answer too large becomes the error, to the same topic.
        let big = publish("r/1", &[b'x'; 200]);
        let replaced = fit(big, &Sent::Answer, 150, &metrics).expect("an error answer");
        assert_eq!(replaced.topic, "r/1");
        assert_eq!(
            replaced.payload,
            Response::Error(ServiceError::ResponseTooLarge).to_bytes()
        );
        // A notification too large, or an answer whose topic alone is too large: dropped.
        let notification = publish("n/1", &[b'x'; 200]);
        let client = Sent::Notification {
            client: "c".into(),
            copy: notification.clone(),
        };
        assert_eq!(fit(notification, &client, 150, &metrics), None);
        assert_eq!(
            fit(publish("r/1", &[b'x'; 200]), &Sent::Answer, 10, &metrics),
            None
        );
        assert!(
            metrics
                .render()
                .contains("mqstore_publishes_dropped_total 2")
        );
    }
}
