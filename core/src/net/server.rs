//! `mqstore serve`: the engine next to an MQTT 5 broker.
//!
//! Two tasks. The *connection* task polls rumqttc: it re-subscribes on every CONNACK, forwards
//! requests and presence messages to the engine task, backs off when the broker is away, and
//! watches PUBACKs of notifications for "no matching subscribers" (the client is gone). The
//! *engine* task owns the [`Engine`]: it handles requests in arrival order, publishes what the
//! engine returns in that order (notifications before responses), and sleeps until the next
//! expiry deadline.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PubAckReason};
use rumqttc::v5::{AsyncClient, Event};
use tokio::sync::mpsc;
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

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid node id {0:?}: it must not contain ':'")]
    NodeId(String),
    #[error("cannot serve metrics on {addr}: {source}")]
    Metrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// What the connection task tells the engine task.
enum Input {
    Request(Publish, Instant),
    ClientGone(String),
}

/// Which client each outgoing publish notifies (None: a response), in the order the engine
/// task queued them, so the connection task can map packet ids to clients.
type Outbox = Arc<Mutex<VecDeque<Option<String>>>>;

/// A running server's handles, for tests and embedding.
pub struct Running {
    pub metrics: Arc<Metrics>,
    /// The bound metrics address, when serving metrics.
    pub metrics_addr: Option<SocketAddr>,
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
    let (input_tx, input_rx) = mpsc::channel::<Input>(4096);
    let outbox: Outbox = Arc::default();
    let engine_task = tokio::spawn(run_engine(
        engine,
        input_rx,
        client.clone(),
        outbox.clone(),
        metrics.clone(),
    ));

    info!(
        broker = %format!("{}:{}", config.broker.host, config.broker.port),
        node_id = %config.node_id,
        topic = %invoke_filter,
        "mqstore serve starting"
    );
    let mut notified: HashMap<u16, String> = HashMap::new();
    tokio::pin!(shutdown);
    loop {
        let event = tokio::select! {
            _ = &mut shutdown => break,
            event = events.recv() => match event {
                Some(event) => event,
                None => break,
            },
        };
        match event {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                // Clean start: nothing survives a reconnect, so subscribe again every time,
                // and forget which packet ids were notifications.
                notified.clear();
                if let Ok(mut outbox) = outbox.lock() {
                    outbox.clear();
                }
                for filter in [invoke_filter.as_str(), topics::PRESENCE_FILTER] {
                    if let Err(e) = client.try_subscribe(filter, QoS::AtLeastOnce) {
                        warn!(%filter, error = %e, "subscribe failed");
                    }
                }
                info!("connected to the broker; subscribed");
            }
            Ok(Event::Incoming(Packet::Publish(p))) => {
                let message = from_mqtt(p);
                let input = match topics::client_of_presence_topic(&message.topic) {
                    Some(client) => Input::ClientGone(client),
                    None => Input::Request(message, Instant::now()),
                };
                if input_tx.send(input).await.is_err() {
                    break;
                }
            }
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                let client = outbox.lock().ok().and_then(|mut o| o.pop_front()).flatten();
                if let Some(client) = client {
                    notified.insert(pkid, client);
                }
            }
            Ok(Event::Incoming(Packet::PubAck(ack))) => {
                let client = notified.remove(&ack.pkid);
                match (ack.reason, client) {
                    (PubAckReason::NoMatchingSubscribers, Some(client)) => {
                        debug!(%client, "nobody receives this client's notifications: dropping it");
                        let _ = input_tx.send(Input::ClientGone(client)).await;
                    }
                    (PubAckReason::Success | PubAckReason::NoMatchingSubscribers, _) => {}
                    (reason, _) => warn!(?reason, pkid = ack.pkid, "the broker refused a publish"),
                }
            }
            Ok(Event::Incoming(Packet::Disconnect(d))) => {
                warn!(reason = ?d.reason_code, "the broker disconnected us");
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "broker connection failed; reconnecting"),
        }
    }

    // Shutdown: stop taking requests, answer those already received, then disconnect. The
    // answers are queued before the DISCONNECT, so they are written first.
    info!("shutting down: answering requests already received");
    let _ = client.try_unsubscribe(invoke_filter.as_str());
    drop(input_tx);
    let answered = async {
        let _ = engine_task.await;
        let _ = client.disconnect().await;
        // Keep draining events so the poller can send everything and the DISCONNECT.
        while events.recv().await.is_some() {}
    };
    if tokio::time::timeout(Duration::from_secs(5), answered)
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

async fn run_engine(
    mut engine: Engine,
    mut inputs: mpsc::Receiver<Input>,
    client: AsyncClient,
    outbox: Outbox,
    metrics: Arc<Metrics>,
) {
    let mut out = Vec::new();
    loop {
        let deadline = engine.next_deadline();
        let input = tokio::select! {
            input = inputs.recv() => match input {
                Some(input) => Some(input),
                None => break,
            },
            _ = sleep_until_ms(deadline) => None,
        };
        let now = now_ms();
        match input {
            Some(Input::Request(message, received)) => {
                let outcome = engine.handle(message, now, &mut out);
                match &outcome {
                    Outcome::Dropped(reason) => warn!(%reason, "request dropped"),
                    Outcome::Rejected(error) => warn!(%error, "request rejected"),
                    Outcome::Answered { .. } => {}
                }
                metrics.record(&outcome, received.elapsed());
            }
            Some(Input::ClientGone(client_id)) => {
                let dropped = engine.drop_client(&client_id);
                if dropped > 0 {
                    info!(client = %client_id, registrations = dropped, "client gone: dropped its registrations");
                    metrics.client_dropped();
                }
            }
            None => {
                engine.expire(now, &mut out);
            }
        }
        metrics.set_store(engine.stats());
        if !send_all(&client, &outbox, &metrics, &mut out).await {
            break;
        }
    }
}

/// Publishes in order, telling the connection task which publishes are notifications.
async fn send_all(
    client: &AsyncClient,
    outbox: &Outbox,
    metrics: &Metrics,
    out: &mut Vec<Publish>,
) -> bool {
    for message in out.drain(..) {
        let notified = topics::parse_notify_topic(&message.topic).map(|(client, _)| client);
        if notified.is_some() {
            metrics.notified(1);
        }
        if let Ok(mut outbox) = outbox.lock() {
            outbox.push_back(notified);
        }
        if let Err(e) = publish(client, message).await {
            warn!(error = %e, "publish failed: the connection is closing");
            return false;
        }
    }
    true
}
