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
//! A command is recorded in the registry before it is published (a fast device may answer
//! first), is published at QoS 1 with Message Expiry = its timeout, and is never retried.
//! An answer is looked up in the registry: the node that reads it either hands it to its own
//! caller, or forwards it over Redis pub/sub to the node that waits. Late, duplicate, unknown
//! and orphaned answers are recorded in the command's status (where there is one), counted in
//! [`Metrics`] and logged with the command id.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Filter, Packet};
use rumqttc::v5::{AsyncClient, Event, EventLoop};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use crate::metrics::{CommandCount, Metrics};
use crate::redis_store::{RedisConfig, RedisRegistry, RedisStore, RedisStoreError, RegisterError};
use mqstore_core::client::ClientError;
use mqstore_core::commands::definitions::{DEFINITIONS_TOPIC, Definition, DefinitionsRequest};
use mqstore_core::commands::wire::{self, Refusal};
use mqstore_core::commands::{
    Acknowledgement, Answer, AnswerKey, CommandError, CommandRequest, Matched, Mode, Profile,
    Profiles, Record, Registry, Sender, Status, aws_event,
};
use mqstore_core::envelope::Publish;
use mqstore_core::store::Quotas;
use mqstore_net::BrokerConfig;
use mqstore_net::host::{backoff, connection_error, from_mqtt, now_ms};
use mqstore_net::random_bytes;

/// Where command records live.
#[derive(Debug, Clone)]
pub enum RegistryConfig {
    /// In this process: one node (or nodes whose answers come back to them: MQTT 5 devices).
    Memory,
    /// In Redis, shared by every node: answers read by one node reach the node that waits.
    Redis(RedisConfig),
    /// In Redis, on a connection the process already has (the server's store).
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
    /// Serve the command API to callers (`mqstore/commands/v1/...`).
    pub serve: bool,
    /// Publish every status change on `mqstore/commands/v1/events/{id}`.
    pub events: bool,
    /// Read answers on `$…` topics (AWS IoT commands, IoT Hub) only while
    /// [`Commander::answer_for_all`] says so: brokers such as mosquitto deliver no `$…` topic
    /// to a shared subscription, so one elected node reads them for all (each update then
    /// acknowledged, and each progress event published, once).
    pub elected_dollar_answers: bool,
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
            elected_dollar_answers: false,
        }
    }
}

/// Why a command could not be sent or followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
    /// The broker refused the command's publish (PUBACK reason code).
    #[error("the broker refused the command (PUBACK reason code 0x{0:02X})")]
    NotDelivered(u8),
    /// No command with this id is known (never sent, or forgotten).
    #[error("{}", wire::not_found(.0))]
    NotFound(String),
}

impl CommanderError {
    /// The `__stat` the command service answers this error with.
    pub fn status(&self) -> u16 {
        match self {
            CommanderError::Command(CommandError::NoDefinition(_)) => 404,
            CommanderError::Command(_) => 400,
            CommanderError::NotFound(_) => 404,
            _ => 503,
        }
    }
}

impl From<RedisStoreError> for CommanderError {
    fn from(e: RedisStoreError) -> Self {
        CommanderError::Registry(e.to_string())
    }
}

impl From<RegisterError> for CommanderError {
    fn from(e: RegisterError) -> Self {
        match e {
            RegisterError::Command(e) => e.into(),
            RegisterError::Redis(e) => e.into(),
        }
    }
}

/// The registry behind a commander.
enum Backend {
    Memory(Mutex<Registry>),
    Redis(RedisRegistry),
}

impl Backend {
    fn memory(&self) -> Option<std::sync::MutexGuard<'_, Registry>> {
        match self {
            Backend::Memory(registry) => Some(lock(registry)),
            Backend::Redis(_) => None,
        }
    }

    async fn register(&self, record: &Record, now: u64) -> Result<(), CommanderError> {
        match self {
            Backend::Memory(registry) => Ok(lock(registry).register(record.clone(), now)?),
            Backend::Redis(redis) => Ok(redis.register(record, now).await?),
        }
    }

    async fn answer(
        &self,
        key: &AnswerKey,
        answer: Answer,
        now: u64,
    ) -> Result<Vec<(Matched, Record)>, CommanderError> {
        match self {
            Backend::Memory(_) => Ok(self
                .memory()
                .map(|mut r| r.answer(key, answer, now))
                .unwrap_or_default()),
            Backend::Redis(redis) => Ok(redis.answer(key, answer, now).await?),
        }
    }

    async fn delivered(&self, id: &str, now: u64) -> Result<Option<Record>, CommanderError> {
        match self {
            Backend::Memory(_) => Ok(self.memory().and_then(|mut r| r.delivered(id, now))),
            Backend::Redis(redis) => Ok(redis.delivered(id, now).await?),
        }
    }

    async fn time_out(&self, id: &str, now: u64) -> Result<Option<Record>, CommanderError> {
        match self {
            Backend::Memory(_) => Ok(self.memory().and_then(|mut r| r.time_out(id, now))),
            Backend::Redis(redis) => Ok(redis.time_out(id, now).await?),
        }
    }

    async fn orphan(&self, id: &str, now: u64) -> Result<Option<Record>, CommanderError> {
        match self {
            Backend::Memory(_) => Ok(self.memory().and_then(|mut r| r.orphan(id, now))),
            Backend::Redis(redis) => Ok(redis.orphan(id, now).await?),
        }
    }

    /// Stores `definition` unless its id is taken: whether it was stored.
    async fn define(&self, definition: &Definition) -> Result<bool, CommanderError> {
        match self {
            Backend::Memory(registry) => Ok(lock(registry).define(definition.clone())),
            Backend::Redis(redis) => Ok(redis.define(definition).await?),
        }
    }

    async fn definition(&self, id: &str) -> Result<Option<Definition>, CommanderError> {
        match self {
            Backend::Memory(registry) => Ok(lock(registry).definition(id).cloned()),
            Backend::Redis(redis) => Ok(redis.definition(id).await?),
        }
    }

    async fn definitions(&self) -> Result<Vec<Definition>, CommanderError> {
        match self {
            Backend::Memory(registry) => Ok(lock(registry).definitions().cloned().collect()),
            Backend::Redis(redis) => Ok(redis.definitions().await?),
        }
    }

    async fn undefine(&self, id: &str) -> Result<bool, CommanderError> {
        match self {
            Backend::Memory(registry) => Ok(lock(registry).undefine(id)),
            Backend::Redis(redis) => Ok(redis.undefine(id).await?),
        }
    }

    async fn get(&self, id: &str, now: u64) -> Result<Option<Record>, CommanderError> {
        match self {
            Backend::Memory(_) => Ok(self.memory().and_then(|mut r| {
                r.forget(now);
                r.get(id).cloned()
            })),
            Backend::Redis(redis) => Ok(redis.get(id).await?),
        }
    }
}

/// PUBACKs on their way to the publishes that wait for them. rumqttc reports each publish it
/// sends (`Outgoing::Publish(pkid)`) in the order it was handed over, so a queue of waiters in
/// that order learns each publish's packet id. After a reconnect rumqttc sends again what was
/// not acknowledged, so the waiters of that moment are told "disconnected" and the queue starts
/// afresh.
#[derive(Default)]
struct Acks {
    /// In publish order: who waits for the next publishes' PUBACKs (`None`: nobody).
    order: VecDeque<Option<oneshot::Sender<u8>>>,
    by_packet: HashMap<u16, oneshot::Sender<u8>>,
}

struct Shared {
    node: String,
    client_id: String,
    profiles: Profiles,
    client: AsyncClient,
    backend: Backend,
    metrics: Arc<Metrics>,
    events: bool,
    /// Callers waiting on this node, by command id.
    waiters: Mutex<HashMap<String, oneshot::Sender<Record>>>,
    acks: Mutex<Acks>,
    /// Keeps the order of [`Acks::order`] equal to the order publishes reach rumqttc.
    publishing: tokio::sync::Mutex<()>,
    /// The direct answers' topic prefix: `clients/{client_id}/`.
    direct_prefix: String,
    /// The answer filters on `$…` topics read only while this node is elected
    /// ([`CommanderConfig::elected_dollar_answers`]), and whether it is.
    elected_filters: Vec<String>,
    elected: AtomicBool,
}

/// Sends commands to devices and waits for their answers. Cheap to clone; [`Commander::stop`]
/// disconnects.
#[derive(Clone)]
pub struct Commander {
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

/// Locks `mutex`; a panic while it was held is a bug elsewhere, and the data stays usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Commander {
    /// Connects, subscribes, and (with Redis) listens for forwarded answers; returns once all
    /// of that is in place. `metrics`: where to count (the server's), or a fresh set.
    pub async fn start(
        config: CommanderConfig,
        metrics: Option<Arc<Metrics>>,
    ) -> Result<Commander, CommanderError> {
        let backend = match config.registry {
            RegistryConfig::Memory => Backend::Memory(Mutex::new(Registry::new())),
            RegistryConfig::Redis(redis) => {
                let store = RedisStore::connect(&redis, Quotas::SERVER_DEFAULT)
                    .await
                    .map_err(|e| CommanderError::Registry(format!("{}: {e}", redis.display())))?;
                Backend::Redis(RedisRegistry::new(store))
            }
            RegistryConfig::Store(store) => Backend::Redis(RedisRegistry::new(store)),
        };
        let mut options = config.broker.options(&config.client_id);
        options.set_manual_acks(false);
        let (client, eventloop) = AsyncClient::new(options, 1024);
        let shared = Arc::new(Shared {
            direct_prefix: format!("clients/{}/", config.client_id),
            elected_filters: match config.elected_dollar_answers {
                true => config
                    .profiles
                    .answer_filters()
                    .into_iter()
                    .filter(|f| f.starts_with('$'))
                    .collect(),
                false => Vec::new(),
            },
            elected: AtomicBool::new(false),
            node: config.node_id,
            client_id: config.client_id,
            profiles: config.profiles,
            client,
            backend,
            metrics: metrics.unwrap_or_default(),
            events: config.events,
            waiters: Mutex::new(HashMap::new()),
            acks: Mutex::new(Acks::default()),
            publishing: tokio::sync::Mutex::new(()),
        });
        let mut filters = vec![format!("{}#", shared.direct_prefix)];
        let mut shared_filters = shared.profiles.answer_filters();
        if config.serve {
            shared_filters.extend([
                wire::INVOKE_TOPIC.into(),
                wire::STATUS_TOPIC.into(),
                DEFINITIONS_TOPIC.into(),
            ]);
        }
        for filter in shared_filters {
            // mosquitto delivers no `$…` topic to a shared subscription: every node reads
            // those (the registry settles each command once), or the elected one.
            match &config.share_group {
                _ if filter.starts_with('$') && config.elected_dollar_answers => {}
                Some(group) if !filter.starts_with('$') => {
                    filters.push(format!("$share/{group}/{filter}"))
                }
                _ => filters.push(filter),
            }
        }
        let mut tasks = Vec::new();
        if let Backend::Redis(redis) = &shared.backend {
            let (ready, listening) = oneshot::channel();
            let weak = Arc::downgrade(&shared);
            tasks.push(redis.listen(
                &shared.node,
                move |record| {
                    if let Some(shared) = weak.upgrade() {
                        shared.deliver(record);
                    }
                },
                ready,
            ));
            listening
                .await
                .map_err(|_| CommanderError::Registry("the pub/sub task ended".into()))??;
        }
        let (ready, subscribed) = oneshot::channel();
        // Said once it is subscribed: a node waiting for its broker tries this again and again.
        debug!(node = %shared.node, topics = ?filters, "commands starting");
        let said = (shared.node.clone(), format!("{filters:?}"));
        tasks.push(tokio::spawn(drive(
            eventloop,
            shared.clone(),
            filters,
            ready,
        )));
        let commander = Commander {
            shared,
            tasks: Arc::new(Mutex::new(tasks)),
        };
        match subscribed.await {
            Ok(Ok(())) => {
                info!(node = %said.0, topics = %said.1, "commands subscribed");
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

    /// Whether this node reads the answers on `$…` topics for all nodes (with
    /// [`CommanderConfig::elected_dollar_answers`]; the server's elected listener does).
    pub fn answer_for_all(&self, elected: bool) {
        let shared = &self.shared;
        if shared.elected.swap(elected, Ordering::SeqCst) == elected {
            return;
        }
        for filter in &shared.elected_filters {
            let done = match elected {
                true => shared
                    .client
                    .try_subscribe(filter.clone(), QoS::AtLeastOnce),
                false => shared.client.try_unsubscribe(filter.clone()),
            };
            if let Err(e) = done {
                warn!(error = %e, %filter, "could not change the subscription to answers");
            }
        }
    }

    /// The counters this commander reports to (`mqstore_commands_total`).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// Sends `request` and waits as its mode says: for the answer (the record settled, or
    /// TIMED_OUT), for the broker's PUBACK (DELIVERED), or not at all (SENT; the answer goes
    /// to the record).
    pub async fn invoke(&self, request: CommandRequest) -> Result<Record, CommanderError> {
        self.shared.clone().invoke(request).await
    }

    /// Command `id`'s status record.
    pub async fn status(&self, id: &str) -> Result<Record, CommanderError> {
        self.shared
            .backend
            .get(id, now_ms())
            .await?
            .ok_or_else(|| CommanderError::NotFound(id.to_owned()))
    }

    /// Commands this node waits for.
    pub fn waiting(&self) -> usize {
        lock(&self.shared.waiters).len()
    }

    /// Records in the memory registry (`None` with Redis).
    pub fn records(&self) -> Option<usize> {
        self.shared.backend.memory().map(|mut r| {
            r.forget(now_ms());
            r.len()
        })
    }

    /// Disconnects from the broker (and Redis pub/sub). Callers still waiting get their
    /// timeouts.
    pub async fn stop(&self) {
        let _ = self.shared.client.disconnect().await;
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

impl Shared {
    async fn invoke(self: Arc<Self>, request: CommandRequest) -> Result<Record, CommanderError> {
        // A stored command: its payload, for the target the topic names.
        let definition = match &request.command {
            Some(id) => self.backend.definition(id).await?,
            None => None,
        };
        let request = request.start_stored(definition.as_ref())?;
        let profile = self.profiles.get(&request.profile)?;
        let sender = Sender {
            node: &self.node,
            client_id: &self.client_id,
        };
        let prepared = profile.prepare(&request, sender, random_bytes::<16>(), now_ms())?;
        let (record, publish) = (prepared.record, prepared.publish);
        let id = record.id.clone();
        // The waiter and the record exist before the publish: a fast device may answer first.
        let answered = match request.mode {
            Mode::OneWay => None,
            Mode::Await | Mode::Detached => {
                let (tx, rx) = oneshot::channel();
                lock(&self.waiters).insert(id.clone(), tx);
                Some(rx)
            }
        };
        if let Err(e) = self.backend.register(&record, now_ms()).await {
            lock(&self.waiters).remove(&id);
            return Err(e);
        }
        self.event(&record);
        let (acked_tx, acked) = oneshot::channel();
        let ack = (request.mode == Mode::OneWay).then_some(acked_tx);
        if let Err(e) = self.publish(publish, ack).await {
            lock(&self.waiters).remove(&id);
            return Err(e);
        }
        self.metrics.command(CommandCount::Sent);
        debug!(id = %id, topic = %record.topic, profile = %record.profile, "command sent");
        let Some(answered) = answered else {
            let deadline = tokio::time::Instant::now() + Duration::from_millis(request.timeout_ms);
            return match tokio::time::timeout_at(deadline, acked).await {
                Ok(Ok(code)) if code < 0x80 => Ok(self
                    .backend
                    .delivered(&id, now_ms())
                    .await?
                    .inspect(|r| self.event(r))
                    .unwrap_or(record)),
                Ok(Ok(code)) => Err(CommanderError::NotDelivered(code)),
                Ok(Err(_)) => Err(CommanderError::Connection(
                    "the connection dropped before the broker acknowledged the command".into(),
                )),
                Err(_) => Err(CommanderError::Connection(
                    "the broker did not acknowledge the command within its timeout".into(),
                )),
            };
        };
        let wait = self.clone().wait(record.clone(), answered);
        match request.mode {
            Mode::Detached => {
                tokio::spawn(wait);
                Ok(record)
            }
            _ => wait.await,
        }
    }

    /// Waits for command `record`'s answer until its deadline.
    async fn wait(
        self: Arc<Self>,
        record: Record,
        answered: oneshot::Receiver<Record>,
    ) -> Result<Record, CommanderError> {
        let left = record.deadline_ms.saturating_sub(now_ms());
        if let Ok(Ok(record)) = tokio::time::timeout(Duration::from_millis(left), answered).await {
            return Ok(record);
        }
        lock(&self.waiters).remove(&record.id);
        // An answer may have settled the record meanwhile (on its way here): it wins.
        let settled = self
            .backend
            .time_out(&record.id, now_ms().max(record.deadline_ms))
            .await?;
        let settled = settled.unwrap_or(record);
        if settled.status == Status::TimedOut {
            self.metrics.command(CommandCount::TimedOut);
            info!(id = %settled.id, topic = %settled.topic, "command timed out");
            self.event(&settled);
        }
        Ok(settled)
    }

    /// Publishes `message`; `ack` hears the PUBACK's reason code.
    async fn publish(
        &self,
        message: Publish,
        ack: Option<oneshot::Sender<u8>>,
    ) -> Result<(), CommanderError> {
        let qos = match message.qos {
            0 => QoS::AtMostOnce,
            _ => QoS::AtLeastOnce,
        };
        let _order = self.publishing.lock().await;
        // rumqttc reports QoS 0 publishes with packet id 0, which take no place in the order.
        if qos != QoS::AtMostOnce {
            lock(&self.acks).order.push_back(ack);
        }
        self.client
            .publish_with_properties(
                message.topic,
                qos,
                false,
                message.payload,
                mqstore_net::host::to_mqtt_properties(message.properties),
            )
            .await
            .map_err(|e| {
                if qos != QoS::AtMostOnce {
                    lock(&self.acks).order.pop_back();
                }
                CommanderError::Connection(e.to_string())
            })
    }

    /// Publishes a status change, if events are on (best effort, QoS 0).
    fn event(&self, record: &Record) {
        if !self.events {
            return;
        }
        // Ours, and AWS IoT commands' own for an execution of a stored command.
        for event in std::iter::once(wire::event(record)).chain(aws_event(record)) {
            let _ = self.client.try_publish_with_properties(
                event.topic,
                QoS::AtMostOnce,
                false,
                event.payload,
                mqstore_net::host::to_mqtt_properties(event.properties),
            );
        }
    }

    /// A device's answer arrived on one of our subscriptions: on our own response topics
    /// (`direct`, MQTT 5 devices) or on a topic profile's answer topic.
    async fn on_answer(self: Arc<Self>, publish: Publish, direct: bool) {
        let profile = match direct {
            true => &Profile::Mqtt5,
            false => match self.profiles.for_answer(&publish.topic) {
                Some((_, profile)) => profile,
                None => {
                    self.metrics.command(CommandCount::Unknown);
                    return;
                }
            },
        };
        let (key, answer) = match profile.read_answer(&publish) {
            Ok(read) => read,
            Err(unreadable) => {
                self.metrics.command(CommandCount::Malformed);
                info!(topic = %publish.topic, reason = %unreadable, "dropped an answer");
                let ack = Acknowledgement::unreadable(unreadable);
                return self.acknowledge(profile, &publish, &ack).await;
            }
        };
        let now = now_ms();
        let id = key.id.clone().unwrap_or_default();
        let matched = match self.backend.answer(&key, answer, now).await {
            Ok(matched) => matched,
            Err(e) => {
                warn!(topic = %publish.topic, id = ?key.id, error = %e, "could not look up an answer in the registry; it is lost");
                let ack = Acknowledgement::failed(e);
                return self.acknowledge(profile, &publish, &ack).await;
            }
        };
        let ack = Acknowledgement::of(&matched, &id);
        if matched.is_empty() {
            self.metrics.command(CommandCount::Unknown);
            info!(topic = %publish.topic, id = ?key.id, "dropped an answer nobody waits for (unknown id, or forgotten)");
            return self.acknowledge(profile, &publish, &ack).await;
        }
        for (how, record) in matched {
            if how != Matched::Duplicate {
                self.event(&record);
            }
            match how {
                Matched::Live => self.settled(record, now).await,
                Matched::Progress => {
                    self.metrics.command(CommandCount::Progress);
                    debug!(id = %record.id, "progress reported");
                }
                Matched::Late => {
                    self.metrics.command(CommandCount::Late);
                    info!(id = %record.id, status = %record.status, "late answer recorded");
                }
                Matched::Duplicate => {
                    self.metrics.command(CommandCount::Duplicate);
                    info!(id = %record.id, "dropped an answer to a command already settled");
                }
            }
        }
        self.acknowledge(profile, &publish, &ack).await;
    }

    /// Acknowledges a device's update, for the profiles that do (AWS IoT commands).
    async fn acknowledge(&self, profile: &Profile, update: &Publish, ack: &Acknowledgement) {
        if let Some(reply) = profile.acknowledge(update, ack)
            && let Err(e) = self.publish(reply, None).await
        {
            debug!(error = %e, "could not acknowledge a device's update");
        }
    }

    /// Hands a settled record to the caller waiting for it, here or on its node.
    async fn settled(&self, record: Record, now: u64) {
        self.metrics.command(match record.status {
            Status::Succeeded => CommandCount::Succeeded,
            Status::Failed => CommandCount::Failed,
            _ => CommandCount::Rejected,
        });
        if record.node == self.node {
            return self.deliver(record);
        }
        let forwarded = match &self.backend {
            Backend::Redis(redis) => redis.forward(&record.node, &record).await,
            Backend::Memory(_) => Ok(false),
        };
        match forwarded {
            Ok(true) => self.metrics.command(CommandCount::Forwarded),
            Ok(false) => {
                self.metrics.command(CommandCount::Orphaned);
                warn!(id = %record.id, node = %record.node, "answer for a node that is gone; recorded as orphaned");
                if let Ok(Some(record)) = self.backend.orphan(&record.id, now).await {
                    self.event(&record);
                }
            }
            Err(e) => {
                warn!(id = %record.id, node = %record.node, error = %e, "could not forward an answer; it stays in the command's status")
            }
        }
    }

    /// Gives a settled record (answered here, or read by another node and forwarded over Redis
    /// pub/sub) to the local caller waiting for it.
    fn deliver(&self, record: Record) {
        let waiter = lock(&self.waiters).remove(&record.id);
        match waiter {
            Some(waiter) => {
                let _ = waiter.send(record);
            }
            // Its caller stopped waiting (the timeout fired as the answer came); the record
            // has the answer.
            None => debug!(id = %record.id, "answer for a caller that stopped waiting"),
        }
    }

    /// A caller's request to the service (serve mode).
    async fn on_request(self: Arc<Self>, publish: Publish) {
        let reply = if publish.topic == DEFINITIONS_TOPIC {
            if publish.properties.response_topic.is_none() {
                self.metrics.command(CommandCount::Malformed);
                return;
            }
            match self.definitions_request(&publish.payload).await {
                Ok(answer) => wire::reply_json(&publish, &answer),
                Err(refusal) => wire::reply_refusal(&publish, &refusal),
            }
        } else if publish.topic == wire::STATUS_TOPIC {
            if publish.properties.response_topic.is_none() {
                self.metrics.command(CommandCount::Malformed);
                return;
            }
            let id = String::from_utf8_lossy(&publish.payload);
            match self.backend.get(id.trim(), now_ms()).await {
                Ok(Some(record)) => wire::reply_record(&publish, &record, true),
                Ok(None) => refuse(&publish, &CommanderError::NotFound(id.trim().to_owned())),
                Err(e) => refuse(&publish, &e),
            }
        } else {
            match wire::read_invoke(&publish) {
                None => {
                    self.metrics.command(CommandCount::Malformed);
                    debug!("dropped a command request without response topic or correlation data");
                    return;
                }
                Some(Err(refusal)) => wire::reply_refusal(&publish, &refusal),
                Some(Ok(request)) => match self.clone().invoke(request).await {
                    Ok(record) => wire::reply_record(&publish, &record, false),
                    Err(e) => refuse(&publish, &e),
                },
            }
        };
        if let Err(e) = self.publish(reply, None).await {
            debug!(error = %e, "could not answer a command request");
        }
    }

    /// Answers a request on [`DEFINITIONS_TOPIC`]: its JSON answer, or why not (400 a bad
    /// request, 404 no such command, 409 the id is taken, 503 the registry failed).
    async fn definitions_request(&self, payload: &[u8]) -> Result<serde_json::Value, Refusal> {
        let refusal = |status, message: String| Refusal { status, message };
        let unavailable = |e: CommanderError| refusal(e.status(), e.to_string());
        match DefinitionsRequest::read(payload).map_err(Refusal::bad_request)? {
            DefinitionsRequest::Create { mut command } => {
                command.check().map_err(Refusal::bad_request)?;
                command.created_ms = now_ms();
                match self.backend.define(&command).await.map_err(unavailable)? {
                    true => Ok(serde_json::json!({ "command": command })),
                    false => Err(Refusal::taken(&command.command_id)),
                }
            }
            DefinitionsRequest::Get { command_id } => {
                match self
                    .backend
                    .definition(&command_id)
                    .await
                    .map_err(unavailable)?
                {
                    Some(command) => Ok(serde_json::json!({ "command": command })),
                    None => Err(Refusal::no_definition(&command_id)),
                }
            }
            DefinitionsRequest::List => {
                let commands = self.backend.definitions().await.map_err(unavailable)?;
                Ok(serde_json::json!({ "commands": commands }))
            }
            DefinitionsRequest::Delete { command_id } => {
                let deleted = self
                    .backend
                    .undefine(&command_id)
                    .await
                    .map_err(unavailable)?;
                Ok(serde_json::json!({ "deleted": deleted }))
            }
        }
    }

    /// Routes a message from the broker.
    fn on_message(self: &Arc<Self>, publish: Publish) {
        if mqstore_core::server::commands::is_request(&publish.topic) {
            tokio::spawn(self.clone().on_request(publish));
        } else {
            let direct = publish.topic.starts_with(&self.direct_prefix);
            tokio::spawn(self.clone().on_answer(publish, direct));
        }
    }
}

fn refuse(to: &Publish, error: &CommanderError) -> Publish {
    wire::reply_refusal(
        to,
        &Refusal {
            status: error.status(),
            message: error.to_string(),
        },
    )
}

/// Drives the connection: subscribes on every CONNACK, routes messages, matches PUBACKs, and
/// reconnects with backoff. `ready` hears once the first subscriptions are acknowledged (or the
/// first connection failed).
async fn drive(
    mut eventloop: EventLoop,
    shared: Arc<Shared>,
    filters: Vec<String>,
    ready: oneshot::Sender<Result<(), ClientError>>,
) {
    let mut ready = Some(ready);
    let mut failures = 0;
    loop {
        match eventloop.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                failures = 0;
                let elected = match shared.elected.load(Ordering::SeqCst) {
                    true => &shared.elected_filters[..],
                    false => &[],
                };
                let subscriptions = filters
                    .iter()
                    .chain(elected)
                    .map(|f| Filter::new(f.clone(), QoS::AtLeastOnce));
                let _ = shared.client.try_subscribe_many(subscriptions);
            }
            Ok(Event::Incoming(Packet::SubAck(suback))) => {
                let refused = suback.return_codes.iter().any(|code| {
                    !matches!(
                        code,
                        rumqttc::v5::mqttbytes::v5::SubscribeReasonCode::Success(_)
                    )
                });
                if refused {
                    warn!(codes = ?suback.return_codes, "the broker refused some command subscriptions");
                }
                if let Some(ready) = ready.take() {
                    let _ = ready.send(match refused {
                        false => Ok(()),
                        true => Err(ClientError::Unreachable(format!(
                            "the broker refused the command subscriptions: {:?}",
                            suback.return_codes
                        ))),
                    });
                }
            }
            Ok(Event::Incoming(Packet::Publish(publish))) => shared.on_message(from_mqtt(publish)),
            Ok(Event::Incoming(Packet::PubAck(ack))) => {
                let waiter = lock(&shared.acks).by_packet.remove(&ack.pkid);
                if let Some(waiter) = waiter {
                    let _ = waiter.send(mqstore_net::host::puback_code(ack.reason));
                }
            }
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                let mut acks = lock(&shared.acks);
                if pkid != 0
                    && let Some(Some(waiter)) = acks.order.pop_front()
                {
                    acks.by_packet.insert(pkid, waiter);
                }
            }
            Ok(Event::Outgoing(Outgoing::Disconnect)) => return,
            Ok(_) => {}
            Err(e) => {
                let error = connection_error(&e);
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(error));
                    return;
                }
                {
                    let mut acks = lock(&shared.acks);
                    acks.order.clear();
                    acks.by_packet.clear();
                }
                warn!(error = %error, "commands: broker connection lost; reconnecting");
                tokio::time::sleep(backoff(failures)).await;
                failures = failures.saturating_add(1);
            }
        }
    }
}
