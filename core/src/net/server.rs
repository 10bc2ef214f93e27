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
use super::{BrokerConfig, from_mqtt, now_ms, publish, sleep_until_ms, spawn_poller};
use crate::engine::{AccessRules, Engine, EngineConfig, Outcome};
use crate::envelope::Publish;
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
        rumqttc::v5::AsyncClient::new(config.broker.options(&config.client_id), 1024);
    let (mut events, poller) = spawn_poller(eventloop);
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
    let mut engine = engine;
    let mut out = Vec::new();
    // Which client each queued publish notifies (None: a response), in publish order, so
    // packet ids can be matched to clients when rumqttc reports them.
    let mut outbox: VecDeque<Option<String>> = VecDeque::new();
    let mut notified: HashMap<u16, String> = HashMap::new();
    tokio::pin!(shutdown);
    loop {
        // Every branch is cancellation safe: the connection itself is polled by its own task.
        let event = tokio::select! {
            _ = &mut shutdown => break,
            _ = sleep_until_ms(engine.next_deadline()) => {
                engine.expire(now_ms(), &mut out);
                send_all(&client, &mut outbox, &metrics, &mut out).await;
                metrics.set_store(engine.stats());
                continue;
            }
            event = events.recv() => match event {
                Some(event) => event,
                None => break,
            },
        };
        let gone = match event {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                // Clean start: nothing survives a reconnect, so subscribe again every time,
                // and forget which packet ids were notifications.
                notified.clear();
                outbox.clear();
                for filter in [invoke_filter.as_str(), topics::PRESENCE_FILTER] {
                    if let Err(e) = client.try_subscribe(filter, QoS::AtLeastOnce) {
                        warn!(%filter, error = %e, "subscribe failed");
                    }
                }
                info!("connected to the broker; subscribed");
                None
            }
            Ok(Event::Incoming(Packet::Publish(p))) => {
                let received = Instant::now();
                let message = from_mqtt(p);
                match topics::client_of_presence_topic(&message.topic) {
                    Some(client) => Some(client),
                    None => {
                        let outcome = engine.handle(message, now_ms(), &mut out);
                        match &outcome {
                            Outcome::Dropped(reason) => warn!(%reason, "request dropped"),
                            Outcome::Rejected(error) => warn!(%error, "request rejected"),
                            Outcome::Answered { .. } => {}
                        }
                        send_all(&client, &mut outbox, &metrics, &mut out).await;
                        metrics.record(&outcome, received.elapsed());
                        metrics.set_store(engine.stats());
                        None
                    }
                }
            }
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                if let Some(client) = outbox.pop_front().flatten() {
                    notified.insert(pkid, client);
                }
                None
            }
            Ok(Event::Incoming(Packet::PubAck(ack))) => {
                let client = notified.remove(&ack.pkid);
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
            Ok(Event::Incoming(Packet::Disconnect(d))) => {
                warn!(reason = ?d.reason_code, "the broker disconnected us");
                None
            }
            Ok(_) => None,
            Err(e) => {
                warn!(error = %e, "broker connection failed; reconnecting");
                None
            }
        };
        if let Some(client_id) = gone {
            let dropped = engine.drop_client(&client_id);
            if dropped > 0 {
                info!(client = %client_id, registrations = dropped, "client gone: dropped its registrations");
                metrics.client_dropped();
                metrics.set_store(engine.stats());
            }
        }
    }

    // Shutdown: stop taking requests; every request received so far was answered in the loop
    // and its answer queued before the DISCONNECT, so it is written first.
    info!("shutting down");
    let _ = client.try_unsubscribe(invoke_filter.as_str());
    let disconnected = async {
        let _ = client.disconnect().await;
        // Keep draining events so the poller can send everything and the DISCONNECT.
        while events.recv().await.is_some() {}
    };
    if tokio::time::timeout(Duration::from_secs(5), disconnected)
        .await
        .is_err()
    {
        warn!("gave up waiting for in-flight publishes after 5 s");
    }
    poller.abort();
    if let Some(task) = metrics_task {
        task.abort();
    }
    info!("stopped");
    Ok(())
}

/// Publishes in order, noting which publishes are notifications (and to whom).
async fn send_all(
    client: &AsyncClient,
    outbox: &mut VecDeque<Option<String>>,
    metrics: &Metrics,
    out: &mut Vec<Publish>,
) {
    for message in out.drain(..) {
        let notified = topics::parse_notify_topic(&message.topic).map(|(client, _)| client);
        if notified.is_some() {
            metrics.notified(1);
        }
        outbox.push_back(notified);
        if let Err(e) = publish(client, message).await {
            warn!(error = %e, "publish failed: the connection is closing");
        }
    }
}
