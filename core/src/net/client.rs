//! The async Rust client: [`ClientCore`] driven by tokio and rumqttc.
//!
//! One background task owns the MQTT connection and the state machine; the [`Client`] handle
//! sends it calls and awaits their results. The task subscribes (and waits for the SUBACK)
//! before any call goes out, fails calls in flight when the connection drops, and after a
//! reconnect re-registers every observed key and reads it back, so a change made while the
//! client was away arrives as a (synthetic) notification.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{LastWill, Packet};
use rumqttc::v5::{AsyncClient, Event as MqttEvent, EventLoop};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use super::{BrokerConfig, from_mqtt, now_ms, publish, random_u64, sleep_until_ms, spawn_poller};
pub use crate::client::Deleted;
use crate::client::{Answer, CallId, CallOptions, ClientConfig, ClientCore, ClientError, Event};
use crate::codec::{Bulk, Condition, Notification, Request, SetRequest};
use crate::hlc::Hlc;
use crate::topics;

/// How to connect.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub broker: BrokerConfig,
    /// The MQTT client id; also `__srcId` and the name of this client's notification topic.
    pub client_id: String,
    /// Timeout of each call.
    pub timeout: Duration,
    /// Where requests go: the state store's invoke topic unless another responder is wanted
    /// (`mqstore bench` measures an echo responder this way).
    pub request_topic: String,
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
            request_topic: topics::INVOKE.to_owned(),
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

/// What a SET did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetResult {
    /// False when NX/NEX did not hold.
    pub applied: bool,
    /// The key's version: the new one, or the current one when not applied.
    pub version: Option<Hlc>,
}

/// A value and the version of the SET that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    pub value: Bytes,
    pub version: Option<Hlc>,
}

/// What a DEL or VDEL did, and the version: of the deletion when it deleted, else the
/// engine's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    pub outcome: Deleted,
    pub version: Option<Hlc>,
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

enum Command {
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
    Close,
}

/// A connected state store client. Cheap to clone; the connection closes when the last clone
/// is dropped or [`Client::close`] is called.
#[derive(Clone)]
pub struct Client {
    commands: mpsc::Sender<Command>,
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
}

impl Client {
    /// Connects, subscribes, and returns once the client can make calls. Fails with
    /// [`ClientError::Disconnected`] if the broker cannot be reached within the timeout.
    pub async fn connect(options: ClientOptions) -> Result<Client, ClientError> {
        let seed = random_u64();
        let core = ClientCore::new(ClientConfig {
            default_timeout_ms: options.timeout.as_millis() as u64,
            request_topic: options.request_topic.clone(),
            ..ClientConfig::new(options.client_id.clone(), seed)
        })?;
        let mut mqtt = options.broker.options(&options.client_id);
        mqtt.set_last_will(LastWill::new(
            topics::presence_topic(&options.client_id),
            Vec::new(),
            QoS::AtLeastOnce,
            false,
            None,
        ));
        let (client, eventloop) = AsyncClient::new(mqtt, 256);
        let (commands, commands_rx) = mpsc::channel(256);
        let (ready_tx, ready_rx) = oneshot::channel();
        tokio::spawn(run(core, client, eventloop, commands_rx, ready_tx));
        match tokio::time::timeout(options.timeout, ready_rx).await {
            Ok(Ok(())) => Ok(Client {
                commands,
                client_id: options.client_id,
            }),
            _ => {
                let _ = commands.send(Command::Close).await;
                warn!(
                    broker = %format!("{}:{}", options.broker.host, options.broker.port),
                    "could not connect and subscribe in time"
                );
                Err(ClientError::Disconnected)
            }
        }
    }

    /// This client's id.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    async fn call(&self, request: Request, options: CallOptions) -> Result<Answer, ClientError> {
        let (reply, result) = oneshot::channel();
        self.send(Command::Call {
            request,
            options,
            reply,
        })
        .await?;
        result.await.map_err(|_| ClientError::Disconnected)?
    }

    async fn send(&self, command: Command) -> Result<(), ClientError> {
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
        let answer = self.call(request, call_options).await?;
        Ok(SetResult {
            applied: answer.applied(),
            version: answer.version,
        })
    }

    /// GET `key`: its value and version, or `None` when absent.
    pub async fn get(&self, key: impl Into<Bytes>) -> Result<Option<Versioned>, ClientError> {
        let answer = self
            .call(Request::Get { key: key.into() }, CallOptions::default())
            .await?;
        Ok(answer.value().map(|value| Versioned {
            value,
            version: answer.version,
        }))
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
        Ok(deletion(answer))
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
        Ok(deletion(self.call(request, options).await?))
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

    /// Disconnects (politely: the broker does not publish the presence Will).
    pub async fn close(&self) {
        let _ = self.commands.send(Command::Close).await;
    }
}

fn deletion(answer: Answer) -> Deletion {
    Deletion {
        outcome: answer.deleted(),
        version: answer.version,
    }
}

/// The background task: the connection and the state machine.
async fn run(
    mut core: ClientCore,
    client: AsyncClient,
    eventloop: EventLoop,
    mut commands: mpsc::Receiver<Command>,
    ready: oneshot::Sender<()>,
) {
    let (mut events, poller) = spawn_poller(eventloop);
    let mut ready = Some(ready);
    let mut waiting: HashMap<CallId, oneshot::Sender<Result<Answer, ClientError>>> = HashMap::new();
    let mut observers: HashMap<Bytes, Vec<mpsc::UnboundedSender<KeyChange>>> = HashMap::new();
    let mut pending_subacks = 0usize;
    let mut connected_before = false;
    let deliver =
        |events: Vec<Event>,
         waiting: &mut HashMap<CallId, oneshot::Sender<Result<Answer, ClientError>>>,
         observers: &mut HashMap<Bytes, Vec<mpsc::UnboundedSender<KeyChange>>>| {
            for event in events {
                match event {
                    Event::Completed { call, result } => {
                        if let Some(reply) = waiting.remove(&call) {
                            let _ = reply.send(result);
                        }
                    }
                    Event::Changed {
                        key,
                        change,
                        version,
                        synthetic,
                    } => {
                        if let Some(list) = observers.get_mut(&key) {
                            let change = KeyChange {
                                key: key.clone(),
                                value: match change {
                                    Notification::Set(value) => Some(value.value()),
                                    Notification::Delete => None,
                                },
                                version,
                                synthetic,
                            };
                            list.retain(|tx| tx.send(change.clone()).is_ok());
                        }
                    }
                }
            }
        };
    loop {
        let deadline = core.next_deadline();
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else { break };
                let (started, reply) = match command {
                    Command::Close => break,
                    Command::Call { request, options, reply } => {
                        (core.call(&request, &options, now_ms()).map(|(c, p)| (c, vec![p])), reply)
                    }
                    Command::Observe { key, changes, reply } => {
                        observers.entry(key.clone()).or_default().push(changes);
                        (core.observe(key, now_ms()), reply)
                    }
                    Command::Unobserve { key, reply } => {
                        observers.remove(&key);
                        (core.unobserve(key, now_ms()).map(|(c, p)| (c, vec![p])), reply)
                    }
                };
                match started {
                    Ok((call, messages)) => {
                        waiting.insert(call, reply);
                        for message in messages {
                            if let Err(e) = publish(&client, message).await {
                                debug!(error = %e, "publish failed");
                            }
                        }
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            _ = sleep_until_ms(deadline) => {
                let events = core.expire(now_ms());
                deliver(events, &mut waiting, &mut observers);
            }
            event = events.recv() => match event {
                None => break,
                Some(Ok(MqttEvent::Incoming(Packet::ConnAck(_)))) => {
                    pending_subacks = 0;
                    for filter in core.subscriptions() {
                        if client.try_subscribe(filter, QoS::AtLeastOnce).is_ok() {
                            pending_subacks += 1;
                        }
                    }
                }
                Some(Ok(MqttEvent::Incoming(Packet::SubAck(_)))) if pending_subacks > 0 => {
                    pending_subacks -= 1;
                    if pending_subacks == 0 {
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(());
                        }
                        if connected_before {
                            match core.resume(now_ms()) {
                                Ok(messages) => {
                                    for message in messages {
                                        let _ = publish(&client, message).await;
                                    }
                                }
                                Err(e) => warn!(error = %e, "could not restore observations"),
                            }
                        }
                        connected_before = true;
                    }
                }
                Some(Ok(MqttEvent::Incoming(Packet::Publish(p)))) => {
                    let message = from_mqtt(p);
                    let events = core.handle(&message, now_ms()).into_iter().collect();
                    deliver(events, &mut waiting, &mut observers);
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    // rumqttc reconnects on the next poll; what was in flight is gone.
                    let events = core.connection_lost();
                    deliver(events, &mut waiting, &mut observers);
                    debug!(error = %e, "broker connection lost; reconnecting");
                }
            }
        }
    }
    // A polite DISCONNECT (no Will); the poller ends once the broker has closed the connection.
    let _ = client.try_disconnect();
    // Keep reading events so the poller never waits on a full channel.
    let drained = async { while events.recv().await.is_some() {} };
    let _ = tokio::time::timeout(Duration::from_millis(1500), drained).await;
    poller.abort();
}
