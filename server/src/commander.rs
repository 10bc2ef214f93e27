//! Commands to devices from a Rust service: a [`Commander`] sends a command, waits for the
//! device's answer with a timeout, and is correct when the service runs as several nodes.
//! `mqstore serve` runs one and serves it to callers over MQTT ([`mqstore_core::commands::wire`]);
//! a Rust backend can embed one directly.
//!
//! Each commander has its own MQTT connection (client id `…-commands`) and subscribes to:
//! `clients/{client id}/#`, where MQTT 5 devices answer ("direct" mode: each node gets its own
//! answers, no lookup); the answer topics of the topic profiles (through `$share/{group}/…`
//! with a share group, so one node reads each answer: "registry" mode); and, when serving,
//! the service's request topics.
//!
//! The commander is a host of the core's command service
//! ([`mqstore_core::server::commands::Service`], the one `mqstore serve` and the broker plugin
//! run): one task drives its connection (`mqstore_net::host::Connection`, the server node's
//! loop) and the service, runs the registry calls the service asks for on Redis, and hands
//! each caller its answer. A command is recorded in the registry before it is published (a
//! fast device may answer first), is published at QoS 1 with Message Expiry = its timeout,
//! and is never retried. An answer is looked up in the registry: the node that reads it either
//! hands it to its own caller, or forwards it over Redis pub/sub to the node that waits. Late,
//! duplicate, unknown and orphaned answers are recorded in the command's status (where there
//! is one), counted in [`Metrics`] and logged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Filter, Packet, SubscribeReasonCode};
use rumqttc::v5::{AsyncClient, Event};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use crate::lock;
use crate::metrics::Metrics;
use crate::redis_store::pipe::Pipe;
use crate::redis_store::{RedisConfig, RedisRegistry, RedisStore, RedisStoreError};
use crate::registry_calls::{PipeReader, PipeReply, RegistryCalls};
use mqstore_core::client::ClientError;
use mqstore_core::commands::definitions::DEFINITIONS_TOPIC;
use mqstore_core::commands::wire::{self, Refusal};
use mqstore_core::commands::{CommandError, CommandRequest, Profiles, Record, RegistryAnswer};
use mqstore_core::server::Receipt;
use mqstore_core::server::commands::{Declined, Service, ServiceConfig};
use mqstore_core::store::Quotas;
use mqstore_net::BrokerConfig;
use mqstore_net::host::{
    Connection, Driver, Outbox, Polled, Unacked, Wakes, connection_error, from_mqtt, now_ms,
    puback_code,
};

/// Where command records live.
#[derive(Debug, Clone)]
pub enum RegistryConfig {
    /// In this process: one node (or nodes whose answers come back to them: MQTT 5 devices).
    Memory,
    /// In Redis, shared by every node: answers read by one node reach the node that waits.
    Redis(RedisConfig),
    /// In Redis, on a connection the process already has.
    Store(RedisStore),
}

/// Settings of a [`Commander`].
#[derive(Debug, Clone)]
pub struct CommanderConfig {
    /// The broker the commander sends through (a connection of its own).
    pub broker: BrokerConfig,
    /// The MQTT client id of the commander's connection; MQTT 5 devices answer to
    /// `clients/{client_id}/…`.
    pub client_id: String,
    /// The node's name in records and its Redis channel (unique per node).
    pub node_id: String,
    /// Read the topic profiles' answers through `$share/{group}/…`.
    pub share_group: Option<String>,
    /// How commands go out and answers are matched, by profile name.
    pub profiles: Profiles,
    /// Where command records live: this process, or Redis for many nodes.
    pub registry: RegistryConfig,
    /// Serve the command API to callers (`mqstore/commands/v1/...`) too.
    pub serve: bool,
    /// Publish every status change on `mqstore/commands/v1/events/{id}`.
    pub events: bool,
}

impl CommanderConfig {
    /// Node `node_id` on `broker`: client id `mqstore-commands-{node_id}`, the built-in
    /// profiles, the memory registry, not serving, no events.
    pub fn new(broker: BrokerConfig, node_id: impl Into<String>) -> Self {
        let node_id = node_id.into();
        Self {
            broker,
            client_id: format!("mqstore-commands-{node_id}"),
            node_id,
            share_group: None,
            profiles: Profiles::built_in(),
            registry: RegistryConfig::Memory,
            serve: false,
            events: false,
        }
    }
}

/// Why a command could not be sent or followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommanderError {
    /// The request is wrong (unknown profile, bad timeout, topic or payload): nothing sent.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// The registry (Redis) failed: nothing sent, or the status could not be read.
    #[error("the command registry is unavailable: {0}")]
    Registry(String),
    /// The broker could not be reached, or the commander was stopped.
    #[error("not connected to the MQTT broker: {0}")]
    Connection(String),
    /// The broker refused the command (PUBACK reason code).
    #[error("the broker refused the command (PUBACK reason code 0x{0:02X})")]
    NotDelivered(u8),
    /// No command with this id is known (never sent, or forgotten).
    #[error("{}", wire::not_found(.0))]
    NotFound(String),
    /// Refused as the command service's wire API says.
    #[error("{}", .0.message)]
    Refused(Refusal),
}

impl CommanderError {
    /// The `__stat` the command service answers this error with.
    pub fn status(&self) -> u16 {
        match self {
            CommanderError::Command(CommandError::NoDefinition(_)) => 404,
            CommanderError::Command(_) => 400,
            CommanderError::NotFound(_) => 404,
            CommanderError::Refused(refusal) => refusal.status,
            _ => 503,
        }
    }
}

impl From<Declined> for CommanderError {
    fn from(declined: Declined) -> Self {
        match declined {
            Declined::Command(e) => CommanderError::Command(e),
            Declined::NotFound(id) => CommanderError::NotFound(id),
            Declined::Unavailable(why) => CommanderError::Registry(why),
            Declined::NotDelivered(code) => CommanderError::NotDelivered(code),
            Declined::Disconnected => CommanderError::Connection(
                "the connection dropped before the broker acknowledged the command".into(),
            ),
            other => CommanderError::Refused(other.refusal()),
        }
    }
}

/// What the commander's task is asked from outside its connection.
enum Input {
    Invoke(CommandRequest, oneshot::Sender<Result<Record, Declined>>),
    Status(String, oneshot::Sender<Result<Record, Declined>>),
    /// A registry call on Redis ended.
    Answered(u64, RegistryAnswer),
    /// Another node read the answer for a caller waiting here.
    Forwarded(Box<Record>),
    /// The next reply on the registry's pipe (an error: the pipe is gone).
    Piped(std::io::Result<PipeReply>),
    /// A new pipe to Redis, opened after the last one failed.
    PipeOpened(Pipe),
    Stop,
}

/// What the task reports for the commander's synchronous getters.
struct Shared {
    node: String,
    metrics: Arc<Metrics>,
    waiting: AtomicUsize,
    records: AtomicUsize,
    memory: bool,
}

/// Sends commands to devices and waits for their answers. Cheap to clone; [`Commander::stop`]
/// disconnects.
#[derive(Clone)]
pub struct Commander {
    inputs: mpsc::UnboundedSender<Input>,
    shared: Arc<Shared>,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl std::fmt::Debug for Commander {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commander")
            .field("node", &self.shared.node)
            .finish()
    }
}

impl Commander {
    /// Connects, subscribes, and (with Redis) listens for forwarded answers; returns once all
    /// of that is in place. `metrics`: where to count (the server's), or a fresh set.
    pub async fn start(
        config: CommanderConfig,
        metrics: Option<Arc<Metrics>>,
    ) -> Result<Commander, CommanderError> {
        let registry = match config.registry {
            RegistryConfig::Memory => None,
            RegistryConfig::Redis(redis) => {
                let store = RedisStore::connect(&redis, Quotas::SERVER_DEFAULT)
                    .await
                    .map_err(|e| CommanderError::Registry(format!("{}: {e}", redis.display())))?;
                Some(RedisRegistry::new(store))
            }
            RegistryConfig::Store(store) => Some(RedisRegistry::new(store)),
        };
        let service_config = ServiceConfig {
            node_id: config.node_id.clone(),
            client_id: config.client_id.clone(),
            profiles: config.profiles.clone(),
            events: config.events,
            random_id: mqstore_net::random_bytes::<16>,
        };
        let service = match registry {
            None => Service::new(service_config),
            Some(_) => Service::remote(service_config),
        };
        let mut filters = vec![format!("clients/{}/#", config.client_id)];
        let mut shared_filters = config.profiles.answer_filters();
        if config.serve {
            shared_filters.extend([
                wire::INVOKE_TOPIC.into(),
                wire::STATUS_TOPIC.into(),
                DEFINITIONS_TOPIC.into(),
            ]);
        }
        for filter in shared_filters {
            // mosquitto delivers no `$…` topic to a shared subscription: every node reads
            // those (the registry settles each command once).
            filters.push(match &config.share_group {
                Some(group) if !filter.starts_with('$') => format!("$share/{group}/{filter}"),
                _ => filter,
            });
        }
        let (inputs, received) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            node: config.node_id.clone(),
            metrics: metrics.unwrap_or_default(),
            waiting: AtomicUsize::new(0),
            records: AtomicUsize::new(0),
            memory: registry.is_none(),
        });
        let mut tasks = Vec::new();
        if let Some(registry) = &registry {
            let (ready, listening) = oneshot::channel();
            let forwarded = inputs.clone();
            tasks.push(registry.listen(
                &config.node_id,
                move |record| {
                    let _ = forwarded.send(Input::Forwarded(Box::new(record)));
                },
                ready,
            ));
            let heard = listening
                .await
                .unwrap_or_else(|_| Err(RedisStoreError::Reply("the pub/sub task ended".into())));
            if let Err(e) = heard {
                tasks.iter().for_each(|t| t.abort());
                return Err(CommanderError::Registry(e.to_string()));
            }
        }
        let mut options = config.broker.options(&config.client_id);
        options.set_manual_acks(false);
        let (client, eventloop) = AsyncClient::new(options, 1024);
        let (ready, subscribed) = oneshot::channel();
        let said = format!("{filters:?}");
        let (registry, reader) = match registry {
            Some(registry) => {
                let answered = |token, answer| Input::Answered(token, answer);
                let (calls, reader) =
                    RegistryCalls::open(registry, inputs.clone(), answered, Input::PipeOpened)
                        .await;
                (Some(calls), reader)
            }
            None => (None, PipeReader::default()),
        };
        let mut host = Host {
            service,
            registry,
            _inputs: inputs.clone(),
            outbox: Outbox::new(client),
            unacked: Unacked::default(),
            callers: HashMap::new(),
            next_token: 0,
            filters,
            ready: Some(ready),
            shared: shared.clone(),
        };
        let mut wakes = Inputs { received, reader };
        tasks.push(tokio::spawn(async move {
            Connection::new(eventloop).run(&mut wakes, &mut host).await;
        }));
        let commander = Commander {
            inputs,
            shared,
            tasks: Arc::new(Mutex::new(tasks)),
        };
        match subscribed.await {
            Ok(Ok(())) => {
                info!(node = %commander.shared.node, topics = %said, "commands subscribed");
                Ok(commander)
            }
            Ok(Err(e)) => {
                commander.stop().await;
                Err(CommanderError::Connection(e.to_string()))
            }
            Err(_) => Err(CommanderError::Connection(
                "the connection task ended".into(),
            )),
        }
    }

    /// The node id this commander records its commands under.
    pub fn node_id(&self) -> &str {
        &self.shared.node
    }

    /// The counters this commander reports to (`mqstore_commands_total`).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// Sends `request` and waits as its mode says: for the answer (the record settled, or
    /// TIMED_OUT), for the broker's PUBACK (DELIVERED), or not at all (SENT; the answer goes
    /// to the record).
    pub async fn invoke(&self, request: CommandRequest) -> Result<Record, CommanderError> {
        self.ask(|answer| Input::Invoke(request, answer)).await
    }

    /// Command `id`'s status record.
    pub async fn status(&self, id: &str) -> Result<Record, CommanderError> {
        self.ask(|answer| Input::Status(id.to_owned(), answer))
            .await
    }

    async fn ask(
        &self,
        input: impl FnOnce(oneshot::Sender<Result<Record, Declined>>) -> Input,
    ) -> Result<Record, CommanderError> {
        let (answer, answered) = oneshot::channel();
        let stopped = || CommanderError::Connection("the commander was stopped".into());
        self.inputs.send(input(answer)).map_err(|_| stopped())?;
        Ok(answered.await.map_err(|_| stopped())??)
    }

    /// Commands this node waits for (an answer, or the broker's acknowledgement).
    pub fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Relaxed)
    }

    /// Records in the memory registry (`None` with Redis).
    pub fn records(&self) -> Option<usize> {
        let records = self.shared.records.load(Ordering::Relaxed);
        self.shared.memory.then_some(records)
    }

    /// Disconnects from the broker (and Redis pub/sub). Callers still waiting are told the
    /// commander stopped.
    pub async fn stop(&self) {
        let _ = self.inputs.send(Input::Stop);
        let mut tasks: Vec<_> = lock(&self.tasks).drain(..).collect();
        // The connection's task (the last started) ends once the DISCONNECT is out; the
        // pub/sub listener runs until aborted.
        if let Some(mut connection) = tasks.pop()
            && tokio::time::timeout(Duration::from_secs(2), &mut connection)
                .await
                .is_err()
        {
            connection.abort();
        }
        for task in tasks {
            task.abort();
        }
    }
}

/// The commander's inputs, and its pipe's replies, as the connection loop's wake-ups.
struct Inputs {
    received: mpsc::UnboundedReceiver<Input>,
    reader: PipeReader,
}

impl Wakes for Inputs {
    type Wake = Input;

    async fn next(&mut self) -> Input {
        loop {
            tokio::select! {
                biased;
                // The host holds a sender: the channel ends only with the task.
                input = self.received.recv() => match input {
                    Some(Input::PipeOpened(pipe)) => self.reader.open(pipe),
                    other => return other.unwrap_or(Input::Stop),
                },
                reply = self.reader.reply() => return Input::Piped(reply),
            }
        }
    }
}

/// The task behind a [`Commander`]: its connection's events and its inputs drive the core's
/// command service.
struct Host {
    service: Service,
    /// The registry in Redis (`None`: the service's own, in memory).
    registry: Option<RegistryCalls<Input>>,
    /// Held so that the inputs' channel ends only with the task (the commander runs until
    /// [`Commander::stop`], its handles dropped or not).
    _inputs: mpsc::UnboundedSender<Input>,
    outbox: Outbox<Option<Receipt>>,
    /// One-way commands' publishes, until their PUBACKs.
    unacked: Unacked<Receipt>,
    /// Callers of [`Commander::invoke`] and [`Commander::status`], by token.
    callers: HashMap<u64, oneshot::Sender<Result<Record, Declined>>>,
    next_token: u64,
    filters: Vec<String>,
    /// Told once the first subscriptions are in (or the first connection failed).
    ready: Option<oneshot::Sender<Result<(), ClientError>>>,
    shared: Arc<Shared>,
}

impl Host {
    /// After the service moved: counts what it did, runs its registry calls, queues what it
    /// publishes and answers the callers it answered.
    fn moved(&mut self) {
        let Host {
            service,
            registry,
            outbox,
            unacked,
            callers,
            shared,
            ..
        } = self;
        while let Some(seen) = service.poll_seen() {
            shared.metrics.command_seen(seen);
        }
        if let Some(registry) = registry {
            registry.start(service);
        }
        while let Some(out) = service.poll_output() {
            outbox.push(out.publish, out.receipt, |tag| unacked.taken(tag));
        }
        while let Some((token, answer)) = service.poll_answer() {
            if let Some(caller) = callers.remove(&token) {
                let _ = caller.send(answer);
            }
        }
        shared.waiting.store(service.waiting(), Ordering::Relaxed);
        shared.records.store(service.records(), Ordering::Relaxed);
    }

    fn token(&mut self, caller: oneshot::Sender<Result<Record, Declined>>) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        self.callers.insert(token, caller);
        token
    }

    /// The PUBACKs still awaited will not come (the connection dropped): their callers hear so.
    fn receipts_lost(&mut self) {
        for receipt in self.unacked.lost() {
            self.service.acknowledged(&receipt, None, now_ms());
        }
    }
}

impl Driver for Host {
    type Wake = Input;

    fn deadline(&self) -> Option<u64> {
        let service = self.service.next_deadline();
        let registry = self.registry.as_ref().and_then(RegistryCalls::deadline);
        service.into_iter().chain(registry).min()
    }

    fn on_deadline(&mut self, now_ms: u64) {
        if let Some(registry) = &mut self.registry {
            registry.on_deadline(&mut self.service, now_ms);
        }
        self.service.on_deadline(now_ms);
        self.moved();
    }

    fn on_wake(&mut self, input: Input) -> bool {
        let now = now_ms();
        match input {
            Input::Invoke(request, caller) => {
                let token = self.token(caller);
                self.service.invoke(request, token, now);
            }
            Input::Status(id, caller) => {
                let token = self.token(caller);
                self.service.status(&id, token, now);
            }
            Input::Answered(token, answer) => self.service.answered(token, answer, now),
            Input::Forwarded(record) => self.service.forwarded(*record),
            Input::Piped(reply) => {
                if let Some(registry) = &mut self.registry {
                    registry.replied(&mut self.service, reply, now);
                }
            }
            Input::PipeOpened(_) => {} // Taken by the wait (`Inputs`).
            Input::Stop => {
                if self.outbox.client().try_disconnect().is_err() {
                    return false;
                }
            }
        }
        self.moved();
        true
    }

    fn on_polled(&mut self, polled: Polled) -> bool {
        match polled {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                self.receipts_lost();
                let subscriptions = self
                    .filters
                    .iter()
                    .map(|f| Filter::new(f.clone(), QoS::AtLeastOnce));
                if let Err(e) = self.outbox.client().try_subscribe_many(subscriptions) {
                    warn!(error = %e, "could not subscribe to the command topics");
                }
            }
            Ok(Event::Incoming(Packet::SubAck(suback))) => {
                let refused = suback
                    .return_codes
                    .iter()
                    .any(|code| !matches!(code, SubscribeReasonCode::Success(_)));
                if refused {
                    warn!(codes = ?suback.return_codes, "the broker refused some command subscriptions");
                }
                if let Some(ready) = self.ready.take() {
                    let _ = ready.send(match refused {
                        false => Ok(()),
                        true => Err(ClientError::Unreachable(format!(
                            "the broker refused the command subscriptions: {:?}",
                            suback.return_codes
                        ))),
                    });
                }
            }
            Ok(Event::Incoming(Packet::Publish(publish))) => {
                self.service.handle(from_mqtt(publish), None, now_ms());
            }
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => self.unacked.on_sent(pkid),
            Ok(Event::Incoming(Packet::PubAck(ack))) => {
                if let Some(receipt) = self.unacked.on_acked(ack.pkid) {
                    let code = puback_code(ack.reason);
                    self.service.acknowledged(&receipt, Some(code), now_ms());
                }
            }
            Ok(Event::Outgoing(Outgoing::Disconnect)) => return false,
            Ok(_) => {}
            Err(e) => {
                let error = connection_error(&e);
                if let Some(ready) = self.ready.take() {
                    let _ = ready.send(Err(error));
                    return false;
                }
                warn!(error = %error, "commands: broker connection lost; reconnecting");
                self.receipts_lost();
            }
        }
        self.moved();
        let unacked = &mut self.unacked;
        self.outbox.flush(|tag| unacked.taken(tag));
        true
    }
}
