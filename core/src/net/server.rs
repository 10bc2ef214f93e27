//! `mqstore serve`: the engine next to an MQTT 5 broker.
//!
//! One task owns the [`Engine`] and handles what the connection's poller task reports, in
//! order: it re-subscribes on every CONNACK, answers requests (publishing what the engine
//! returns in that order: notifications before responses), drops the registrations of clients
//! that are gone (a presence Will, or a notification's PUBACK saying "no matching
//! subscribers"), and sleeps until the engine's next expiry deadline. The poller reconnects
//! with backoff when the broker is away.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PubAckReason};
use rumqttc::v5::{AsyncClient, Event};
use tracing::{debug, info, warn};

use super::metrics::{self, Metrics};
use super::{BrokerConfig, Queued, from_mqtt, now_ms, try_publish};
use crate::engine::{AccessRules, Engine, EngineConfig, Outcome};
use crate::envelope::{DropReason, Publish};
use crate::store::{MemoryStore, Quotas};
use crate::topics;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub broker: BrokerConfig,
    /// The MQTT client id of the server's connection.
    pub client_id: String,
    /// The engine's node id (the node part of every version).
    pub node_id: String,
    /// Subscribe through `$share/{group}/…` so that several nodes split the requests.
    pub share_group: Option<String>,
    pub quotas: Quotas,
    /// Which client may read or write which keys (none: everyone everything).
    pub access: AccessRules,
    /// Serve Prometheus metrics here.
    pub metrics_addr: Option<SocketAddr>,
    /// Requests that arrive while this many answers wait for the broker to take them are
    /// dropped unapplied (their callers time out): memory stays bounded when the broker
    /// accepts publishes more slowly than requests come in (0: drop every request).
    pub max_pending_answers: usize,
}

impl ServerConfig {
    /// A node called `node_id` on `broker`: client id `mqstore-server-{node_id}`, no shared
    /// subscription, no quotas, no access rules, no metrics endpoint.
    pub fn new(broker: BrokerConfig, node_id: impl Into<String>) -> Self {
        let node_id = node_id.into();
        Self {
            broker,
            client_id: format!("mqstore-server-{node_id}"),
            node_id,
            share_group: None,
            quotas: Quotas::default(),
            access: AccessRules::default(),
            metrics_addr: None,
            max_pending_answers: DEFAULT_MAX_PENDING_ANSWERS,
        }
    }
}

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid node id {0:?}: it must not contain ':'")]
    NodeId(String),
    #[error("the server task stopped before it started")]
    Stopped,
    #[error("cannot serve metrics on {addr}: {source}")]
    Metrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A running server's handles, for tests and embedding.
pub struct Running {
    pub metrics: Arc<Metrics>,
    /// The bound metrics address, when serving metrics.
    pub metrics_addr: Option<SocketAddr>,
}

/// A server running in a task of its own (for embedding and tests).
pub struct ServerHandle {
    pub metrics: Arc<Metrics>,
    /// The bound metrics address, when serving metrics.
    pub metrics_addr: Option<SocketAddr>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), ServerError>>,
}

impl ServerHandle {
    /// Stops the server the way SIGTERM does, and waits until it has.
    pub async fn stop(self) -> Result<(), ServerError> {
        let _ = self.stop.send(());
        self.task.await.unwrap_or(Ok(()))
    }
}

/// Starts [`serve`] in a task; returns once the metrics endpoint (if any) is bound, or the
/// error that kept the server from starting.
pub async fn spawn(config: ServerConfig) -> Result<ServerHandle, ServerError> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (running_tx, running_rx) = tokio::sync::oneshot::channel();
    let mut task = tokio::spawn(serve(
        config,
        async {
            let _ = stopped.await;
        },
        |running| {
            let _ = running_tx.send(running);
        },
    ));
    match running_rx.await {
        Ok(running) => Ok(ServerHandle {
            metrics: running.metrics,
            metrics_addr: running.metrics_addr,
            stop,
            task,
        }),
        // It stopped before starting: report why.
        Err(_) => match (&mut task).await {
            Ok(Err(e)) => Err(e),
            _ => Err(ServerError::Stopped),
        },
    }
}

/// Runs the server until `shutdown` completes; then stops taking requests, answers the ones
/// already received, and disconnects. `started` is called once the metrics endpoint (if any)
/// is bound.
pub async fn serve(
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
    started: impl FnOnce(Running),
) -> Result<(), ServerError> {
    let engine_config = EngineConfig {
        access: config.access.clone(),
        ..EngineConfig::new(config.node_id.clone())
    };
    let engine = Engine::new(engine_config, MemoryStore::with_quotas(config.quotas))
        .map_err(|_| ServerError::NodeId(config.node_id.clone()))?;
    let metrics = Arc::new(Metrics::default());
    let mut metrics_addr = None;
    let metrics_task = match config.metrics_addr {
        Some(addr) => {
            let listener = metrics::bind(addr)
                .await
                .map_err(|source| ServerError::Metrics { addr, source })?;
            metrics_addr = listener.local_addr().ok();
            info!(addr = ?metrics_addr, "serving Prometheus metrics at /metrics");
            Some(tokio::spawn(metrics::serve(listener, metrics.clone())))
        }
        None => None,
    };
    started(Running {
        metrics: metrics.clone(),
        metrics_addr,
    });

    let (client, eventloop) =
        rumqttc::v5::AsyncClient::new(config.broker.options(&config.client_id), REQUEST_QUEUE);
    let invoke_filter = match &config.share_group {
        Some(group) => topics::shared_invoke(group),
        None => topics::INVOKE.to_owned(),
    };
    info!(
        broker = %format!("{}:{}", config.broker.host, config.broker.port),
        node_id = %config.node_id,
        topic = %invoke_filter,
        "mqstore serve starting"
    );
    let mut node = Node {
        engine,
        client,
        metrics: metrics.clone(),
        invoke_filter,
        out: Vec::new(),
        backlog: VecDeque::new(),
        outbox: VecDeque::new(),
        notified: HashMap::new(),
        unacked: 0,
        max_pending_answers: config.max_pending_answers,
    };
    node.run(eventloop, shutdown).await;
    if let Some(task) = metrics_task {
        task.abort();
    }
    info!("stopped");
    Ok(())
}

/// The default of [`ServerConfig::max_pending_answers`].
pub const DEFAULT_MAX_PENDING_ANSWERS: usize = 10_000;

/// Requests (publishes, subscribes) queued for the connection. Answers that do not fit wait in
/// the node's own backlog, in order.
const REQUEST_QUEUE: usize = 1024;

/// How long shutdown waits for the answers still queued to be written.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Where shutdown is, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stop {
    Running,
    /// The UNSUBSCRIBE of the invoke topic is on its way; requests still arriving are answered.
    Unsubscribing,
    /// The broker sends no more requests; the DISCONNECT waits until every answer is queued.
    Unsubscribed,
    /// The DISCONNECT is queued behind every answer.
    Disconnecting,
    /// The DISCONNECT is sent; waiting for the broker to close the connection.
    Closing,
}

/// One server node: the engine and what it has queued for the broker.
struct Node {
    engine: Engine,
    client: AsyncClient,
    metrics: Arc<Metrics>,
    invoke_filter: String,
    /// What the engine returned for the current request or expiry sweep.
    out: Vec<Publish>,
    /// Publishes waiting for room in the connection's request queue, in order.
    backlog: VecDeque<Publish>,
    /// Which client each publish handed to the connection notifies (None: a response), in
    /// order, so packet ids can be matched to clients when rumqttc reports them.
    outbox: VecDeque<Option<String>>,
    /// Packet id → the client a notification in flight is for.
    notified: HashMap<u16, String>,
    /// Publishes sent and not yet acknowledged by the broker.
    unacked: usize,
    max_pending_answers: usize,
}

impl Node {
    /// Drives the connection and the engine in one task. Requests are answered as the
    /// connection reports them, with no hand-over to another task: `EventLoop::poll` is not
    /// cancellation safe, so its future is kept across the `select!` instead of being raced
    /// and dropped, and nothing here awaits while a poll is pending (answers are queued with
    /// `try_publish`; what does not fit waits in `backlog`).
    async fn run(
        &mut self,
        mut eventloop: rumqttc::v5::EventLoop,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let expiry = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(expiry);
        let mut armed = None;
        self.arm(&mut expiry, &mut armed);
        let grace = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(grace);
        let mut stop = Stop::Running;
        let mut failures = 0u32;
        loop {
            let polled = {
                let poll = eventloop.poll();
                tokio::pin!(poll);
                loop {
                    tokio::select! {
                        biased;
                        polled = &mut poll => break polled,
                        _ = &mut shutdown, if stop == Stop::Running => {
                            // Stop taking requests; answer those already taken, then
                            // disconnect (below).
                            info!("shutting down");
                            let _ = self.client.try_unsubscribe(self.invoke_filter.as_str());
                            stop = Stop::Unsubscribing;
                            grace.as_mut().reset(tokio::time::Instant::now() + SHUTDOWN_GRACE);
                        }
                        // Not once the DISCONNECT is queued: what it sent would queue behind.
                        _ = &mut expiry, if armed.is_some() && stop < Stop::Disconnecting => {
                            armed = None;
                            self.engine.expire(now_ms(), &mut self.out);
                            self.queue_out();
                            self.metrics.set_store(self.engine.stats());
                            self.arm(&mut expiry, &mut armed);
                        }
                        _ = &mut grace, if stop != Stop::Running => {
                            warn!("gave up waiting for in-flight publishes after {SHUTDOWN_GRACE:?}");
                            return;
                        }
                    }
                }
            };
            match polled {
                Ok(Event::Outgoing(Outgoing::Disconnect)) => stop = Stop::Closing,
                // The broker closes the connection after our DISCONNECT. Closing it first,
                // with its packets still unread, would reset the connection and could make the
                // broker lose what it has not read yet.
                Ok(_) if stop == Stop::Closing => {}
                Err(_) if stop == Stop::Closing => return,
                Ok(Event::Incoming(Packet::UnsubAck(_))) if stop == Stop::Unsubscribing => {
                    stop = Stop::Unsubscribed;
                }
                Ok(Event::Incoming(Packet::Publish(p))) if stop == Stop::Disconnecting => {
                    // Its answer would queue behind the DISCONNECT: leave it untouched, so
                    // the caller's timeout tells the truth (nothing was done).
                    debug!(topic = ?p.topic, "a request arrived after the DISCONNECT was queued: not handled");
                }
                Ok(event) => {
                    failures = 0;
                    self.on_event(event);
                }
                Err(e) => {
                    if stop != Stop::Running {
                        warn!(error = %e, "the broker went away during shutdown");
                        return;
                    }
                    warn!(error = %e, "broker connection failed; reconnecting");
                    tokio::select! {
                        _ = tokio::time::sleep(super::backoff(failures)) => {}
                        _ = &mut shutdown => return,
                    }
                    failures = failures.saturating_add(1);
                }
            }
            self.flush_backlog();
            // Once the broker sends no more requests and has acknowledged every answer, the
            // DISCONNECT goes last.
            if stop == Stop::Unsubscribed
                && self.backlog.is_empty()
                && self.unacked == 0
                && self.client.try_disconnect().is_ok()
            {
                stop = Stop::Disconnecting;
            }
            self.arm(&mut expiry, &mut armed);
        }
    }

    /// Sets the expiry timer to the engine's next deadline, when that moved.
    fn arm(&self, expiry: &mut std::pin::Pin<&mut tokio::time::Sleep>, armed: &mut Option<u64>) {
        let next = self.engine.next_deadline();
        if next != *armed {
            *armed = next;
            if let Some(deadline) = next {
                let wait = Duration::from_millis(deadline.saturating_sub(now_ms()));
                expiry.as_mut().reset(tokio::time::Instant::now() + wait);
            }
        }
    }

    fn on_event(&mut self, event: Event) {
        let gone = match event {
            Event::Incoming(Packet::ConnAck(_)) => {
                // Clean start: nothing survives a reconnect, so subscribe again every time,
                // and forget which packet ids were notifications.
                self.notified.clear();
                self.outbox.clear();
                self.unacked = 0;
                for filter in [self.invoke_filter.as_str(), topics::PRESENCE_FILTER] {
                    if let Err(e) = self.client.try_subscribe(filter, QoS::AtLeastOnce) {
                        warn!(%filter, error = %e, "subscribe failed");
                    }
                }
                info!("connected to the broker; subscribed");
                None
            }
            Event::Incoming(Packet::Publish(p)) => {
                let received = Instant::now();
                let message = from_mqtt(p);
                match topics::client_of_presence_topic(&message.topic) {
                    Some(client) => Some(client),
                    None if self.backlog.len() >= self.max_pending_answers => {
                        let outcome = Outcome::Dropped(DropReason::Overloaded);
                        warn!(pending = self.backlog.len(), "request dropped: overloaded");
                        self.metrics.record(&outcome, received.elapsed());
                        None
                    }
                    None => {
                        let outcome = self.engine.handle(message, now_ms(), &mut self.out);
                        match &outcome {
                            Outcome::Dropped(reason) => warn!(%reason, "request dropped"),
                            Outcome::Rejected(error) => warn!(%error, "request rejected"),
                            Outcome::Answered { .. } => {}
                        }
                        self.queue_out();
                        self.metrics.record(&outcome, received.elapsed());
                        self.metrics.set_store(self.engine.stats());
                        None
                    }
                }
            }
            Event::Outgoing(Outgoing::Publish(pkid)) => {
                self.unacked += 1;
                if let Some(client) = self.outbox.pop_front().flatten() {
                    self.notified.insert(pkid, client);
                }
                None
            }
            Event::Incoming(Packet::PubAck(ack)) => {
                self.unacked = self.unacked.saturating_sub(1);
                let client = self.notified.remove(&ack.pkid);
                match (ack.reason, client) {
                    (PubAckReason::NoMatchingSubscribers, Some(client)) => {
                        debug!(%client, "nobody receives this client's notifications");
                        Some(client)
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
        if let Some(client_id) = gone {
            let dropped = self.engine.drop_client(&client_id);
            if dropped > 0 {
                info!(client = %client_id, registrations = dropped, "client gone: dropped its registrations");
                self.metrics.client_dropped();
                self.metrics.set_store(self.engine.stats());
            }
        }
    }

    /// Queues what the engine returned, in order (notifications before responses).
    fn queue_out(&mut self) {
        self.backlog.extend(self.out.drain(..));
        self.flush_backlog();
    }

    /// Hands the backlog to the connection, in order, until its queue is full.
    fn flush_backlog(&mut self) {
        while let Some(message) = self.backlog.pop_front() {
            let notified = topics::client_of_notify_topic(&message.topic);
            match try_publish(&self.client, message) {
                Queued::Yes => {
                    if notified.is_some() {
                        self.metrics.notified(1);
                    }
                    self.outbox.push_back(notified);
                }
                Queued::Full(message) => {
                    self.backlog.push_front(message);
                    return;
                }
                Queued::Refused => warn!("dropped a publish to a topic with a wildcard"),
            }
        }
    }
}
