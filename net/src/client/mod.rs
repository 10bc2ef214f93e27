//! The async Rust client: the core's client session ([`Session`]: the state store, jobs and
//! commands clients) driven by tokio and rumqttc.
//!
//! One background task owns the MQTT connection and the session (polled the way the server
//! polls, see `connection.rs`); the [`Client`] handle sends it calls and awaits their results. The task subscribes (and waits for the SUBACK)
//! before any call goes out, fails calls in flight when the connection drops, and after a
//! reconnect re-registers every observed key and reads it back, so a change made while the
//! client was away arrives as a (synthetic) notification.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bytes::Bytes;
use rumqttc::v5::AsyncClient;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::LastWill;
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

pub use crate::listeners::{KeyChange, KeyspaceEvent};
use crate::{BrokerConfig, random_u64};
use mqstore_core::client::jobs::{DeviceRequest, JobNotification, JobsAnswer};
use mqstore_core::client::{Answer, CallId, CallOptions, ClientConfig, ClientError};
pub use mqstore_core::client::{Deleted, Deletion, SetResult, Versioned};
use mqstore_core::codec::{Bulk, Condition, Request, SetRequest};
use mqstore_core::commands::CommandRequest;
use mqstore_core::commands::Record as CommandRecord;
use mqstore_core::hlc::Hlc;
use mqstore_core::session::{Completion, Session};
use mqstore_core::shadow;
use mqstore_core::topics;

mod task;

/// How to connect.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The broker to connect to.
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
    /// When to apply: always, NX (only if absent) or NEX (if absent or equal).
    pub condition: Condition,
    /// The key expires this long after the SET.
    pub expires: Option<Duration>,
    /// Ask that the key be kept durably (`aio-persistence`).
    pub persist: bool,
    /// The fencing token of the lease guarding the key, if it is protected.
    pub fencing_token: Option<Hlc>,
}

impl SetOptions {
    /// The SET of `value` at `key` with these options, and its call's options (for a call
    /// made as a [`Request`], e.g. with a timeout of its own).
    pub fn request(self, key: Bytes, value: Bytes) -> (Request, CallOptions) {
        let request = Request::Set(SetRequest {
            key,
            value: Bulk::new(value),
            condition: self.condition,
            expires_in_ms: self
                .expires
                .and_then(|d| std::num::NonZeroU64::new(d.as_millis().max(1) as u64)),
        });
        let options = CallOptions {
            fencing_token: self.fencing_token,
            persist: self.persist,
            timeout_ms: None,
        };
        (request, options)
    }
}

/// A DEL of `key` (a VDEL when `value` is given: only if the key holds it), guarded by
/// `fencing_token`, and its call's options.
pub(crate) fn deletion(
    key: Bytes,
    value: Option<Bytes>,
    fencing_token: Option<Hlc>,
) -> (Request, CallOptions) {
    let request = match value {
        Some(value) => Request::VDel { key, value },
        None => Request::Del { key },
    };
    let options = CallOptions {
        fencing_token,
        ..CallOptions::default()
    };
    (request, options)
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
        reply: oneshot::Sender<Result<JobsAnswer, ClientError>>,
    },
    /// Act as a thing of the jobs device API: subscribe to its replies and notifications.
    Thing {
        thing: String,
        notifications: mpsc::UnboundedSender<JobNotification>,
        reply: oneshot::Sender<Result<(), ClientError>>,
    },
    /// Use a device shadow: subscribe to its answers, delta and documents.
    Shadow {
        thing: String,
        name: Option<String>,
        notifications: mpsc::UnboundedSender<shadow::Notification>,
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
    /// Hear every key made or deleted.
    WatchKeyspace {
        events: mpsc::UnboundedSender<KeyspaceEvent>,
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
    /// An operator call's JSON.
    Operator(serde_json::Value),
    Device(String, DeviceRequest),
    /// A device shadow's request: thing, shadow name, operation, body.
    Shadow(String, Option<String>, shadow::Op, serde_json::Value),
}

impl JobsCall {
    fn start(self, session: &mut Session, now_ms: u64) -> Result<CallId, ClientError> {
        match self {
            JobsCall::Operator(request) => Ok(session.jobs_operate_json(&request, None, now_ms)),
            JobsCall::Device(thing, request) => session.jobs_device(&thing, &request, None, now_ms),
            JobsCall::Shadow(thing, name, op, body) => {
                session.shadow(&thing, name.as_deref(), op, &body, None, now_ms)
            }
        }
    }
}

/// A command service call for the client's task.
pub(crate) enum CommandsCall {
    Invoke(CommandRequest),
    Status(String, u64),
    Definitions(mqstore_core::commands::definitions::DefinitionsRequest, u64),
}

impl CommandsCall {
    fn start(self, session: &mut Session, now_ms: u64) -> CallId {
        match self {
            CommandsCall::Invoke(request) => session.command(&request, now_ms),
            CommandsCall::Definitions(request, timeout_ms) => {
                session.command_definitions(&request, timeout_ms, now_ms)
            }
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
        tokio::spawn(task::run(
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
        let (request, call_options) = options.request(key.into(), value.into());
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
        let (request, options) = deletion(key.into(), None, fencing_token);
        Ok(self.call(request, options).await?.into_deletion())
    }

    /// VDEL: delete `key` only if it holds `value`.
    pub async fn vdel(
        &self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
        fencing_token: Option<Hlc>,
    ) -> Result<Deletion, ClientError> {
        let (request, options) = deletion(key.into(), Some(value.into()), fencing_token);
        Ok(self.call(request, options).await?.into_deletion())
    }

    /// Every key made or deleted from now on, from the server's keyspace events (`mqstore
    /// serve` publishes them unless started with `--no-keyspace-events`). They are QoS 0 and
    /// may come out of order across nodes: a browser of keys scans again after a reconnect.
    pub async fn watch_keyspace(&self) -> Result<KeyspaceWatch, ClientError> {
        let (events, rx) = mpsc::unbounded_channel();
        let (reply, subscribed) = oneshot::channel();
        self.send(Command::WatchKeyspace { events, reply }).await?;
        subscribed.await.map_err(|_| ClientError::Disconnected)??;
        Ok(KeyspaceWatch { events: rx })
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

/// A stream of keyspace events ([`Client::watch_keyspace`]).
pub struct KeyspaceWatch {
    events: mpsc::UnboundedReceiver<KeyspaceEvent>,
}

impl KeyspaceWatch {
    /// The next event; `None` once the client is closed.
    pub async fn next(&mut self) -> Option<KeyspaceEvent> {
        self.events.recv().await
    }
}
