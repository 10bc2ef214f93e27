//! `mqstore serve`: the engine next to an MQTT 5 broker.
//!
//! One task owns the [`Engine`] and the broker connection (see `connection.rs` for how it
//! polls without ever dropping a poll half-way) and handles each event as the connection
//! reports it: it re-subscribes on every CONNACK, answers requests (publishing what the engine
//! returns in that order: notifications before responses), drops the registrations of clients
//! that are gone (a presence Will, or a notification's PUBACK saying "no matching
//! subscribers"), wakes at the engine's next expiry deadline, and reconnects with backoff when
//! the broker is away. On shutdown it unsubscribes, answers what still arrives, waits for the
//! broker's acknowledgements, and disconnects.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rumqttc::Outgoing;
use rumqttc::v5::Event;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{LastWill, Packet, PubAckReason};
use tracing::{debug, error, info, warn};

use crate::commander::{Commander, CommanderConfig, CommanderError, RegistryConfig};
use crate::connection::{Connection, Driver, Outbox, Wakes};
use crate::metrics::{self, Metrics};
use crate::redis_store::{Applied, RedisConfig, RedisJobs, RedisStore, RedisStoreError};
use crate::{BrokerConfig, Polled, connection_error, from_mqtt, now_ms, protocol_hint};
use mqstore_core::engine::{
    Accepted, AccessRules, Call, Engine, EngineConfig, Fit, Outcome, fit_for_broker,
};
use mqstore_core::envelope::{self, DropReason, EnvelopeError, Publish};
use mqstore_core::jobs::wire::OperatorAnswer;
use mqstore_core::jobs::{
    DurableJobs, Jobs, JobsStore, OPERATOR_TOPIC, Stored, topics as jobs_topics,
};
use mqstore_core::presence::ServerPresence;
use mqstore_core::store::disk::{self as durable, Disk, DiskError, Durability};
use mqstore_core::store::{ClientId, DurableStore, Expired, Quotas, StoreStats};
use mqstore_core::topics;

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
    /// Take only identified requests (published in each client's own `clients/{clientId}/`
    /// tree, which the broker's ACL guards): access rules then hold against clients that lie
    /// about who they are. The standard request topic (the Azure SDK clients') is not served.
    pub require_identity: bool,
    /// Response topics a request that is not identified may name (empty: any).
    pub response_topic_prefixes: Vec<String>,
    /// The secret SCAN continuation tokens are sealed with. `None`: on Redis, one the nodes
    /// share through Redis (any node continues another's scan); in memory, a random one per
    /// process.
    pub scan_token_key: Option<[u8; 32]>,
    /// How long an identified client's registrations outlive its last KEYNOTIFY (mqstore
    /// clients renew every third of it, as the server's presence tells them).
    pub registration_lease: Option<Duration>,
    /// The same for clients on the standard topics (which do not renew): `None` by default.
    pub standard_registration_lease: Option<Duration>,
    /// Serve the state store (the standard and identified request topics, the clients'
    /// presence, this node's presence). Off beside a broker whose plugin serves it: the node
    /// then serves jobs and commands only.
    pub state_store: bool,
    /// Serve the jobs service (the AWS IoT Jobs device API and the operator API).
    pub jobs: bool,
    /// How long a minute of the jobs timers lasts (timeouts are given in minutes): 60 s;
    /// shorter only for tests that must see executions time out.
    pub jobs_minute: Duration,
    /// Serve commands to devices (`mqstore/commands/v1/...`) on a connection of their own.
    pub commands: bool,
    /// The device profiles commands can use (the built-in ones unless told).
    pub command_profiles: mqstore_core::commands::Profiles,
    /// Requests that arrive while this many answers wait for the broker to take them are
    /// dropped unapplied (their callers time out): memory stays bounded when the broker
    /// accepts publishes more slowly than requests come in (0: drop every request).
    pub max_pending_answers: usize,
    /// Where the state store's state lives: this process (the default), or Redis, shared by
    /// every node of a deployment.
    pub store: StoreConfig,
    /// Added to the system clock (tests of nodes whose clocks disagree).
    pub clock_offset_ms: i64,
    /// Keep the state store on local disk (`--data-dir`, `--fsync`); memory store only.
    pub durability: Option<Durability>,
}

/// Where the state store's state lives.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StoreConfig {
    /// In this process: nothing to install; one node.
    #[default]
    Memory,
    /// In Redis (one primary or a Cluster): every node serves any request.
    Redis(RedisConfig),
}

impl std::str::FromStr for StoreConfig {
    type Err = String;

    /// `memory`, or a Redis URL (see [`RedisConfig::parse`]).
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "memory" => Ok(Self::Memory),
            _ => RedisConfig::parse(text).map(Self::Redis),
        }
    }
}

impl ServerConfig {
    /// A node called `node_id` on `broker`: client id `mqstore-server-{node_id}`, no shared
    /// subscription, no key quotas (registrations: [`Quotas::SERVER_DEFAULT`]), no access
    /// rules, no metrics endpoint.
    pub fn new(broker: BrokerConfig, node_id: impl Into<String>) -> Self {
        let node_id = node_id.into();
        Self {
            broker,
            client_id: format!("mqstore-server-{node_id}"),
            node_id,
            share_group: None,
            quotas: Quotas::SERVER_DEFAULT,
            access: AccessRules::default(),
            metrics_addr: None,
            require_identity: false,
            response_topic_prefixes: Vec::new(),
            scan_token_key: None,
            registration_lease: Some(DEFAULT_REGISTRATION_LEASE),
            standard_registration_lease: None,
            state_store: true,
            jobs: true,
            jobs_minute: Duration::from_secs(60),
            commands: true,
            command_profiles: mqstore_core::commands::Profiles::built_in(),
            max_pending_answers: DEFAULT_MAX_PENDING_ANSWERS,
            store: StoreConfig::Memory,
            clock_offset_ms: 0,
            durability: None,
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
    #[error(
        "cannot use the Redis store at {url}: {source} (is Redis running there, and are the address and password right?)"
    )]
    Store {
        url: String,
        source: RedisStoreError,
    },
    #[error("cannot start the command service: {0}")]
    Commands(#[from] CommanderError),
    #[error("{0}")]
    Disk(#[from] DiskError),
    #[error(
        "--data-dir keeps the memory store on disk; with --store redis://… the state is in Redis \
         (use Redis's own persistence, appendonly yes)"
    )]
    DiskWithRedis,
    #[error("--no-state-store with --no-jobs and --no-commands leaves nothing to serve")]
    NothingToServe,
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
    let node_id_error = |_| ServerError::NodeId(config.node_id.clone());
    // Nodes on one Redis share the SCAN token secret (unless one is configured), so that any
    // node continues a scan another began.
    let redis = match &config.store {
        StoreConfig::Memory => None,
        StoreConfig::Redis(redis) => {
            let store_error = |source| ServerError::Store {
                url: redis.display(),
                source,
            };
            let store = RedisStore::connect(redis, config.quotas)
                .await
                .map_err(store_error)?;
            let secret = match config.scan_token_key {
                Some(key) => key,
                None => store
                    .shared_secret(crate::random_bytes::<32>())
                    .await
                    .map_err(store_error)?,
            };
            info!(redis = %redis.display(), buckets = store.buckets(), "state in Redis");
            Some((store, secret))
        }
    };
    let engine_config = EngineConfig {
        access: config.access.clone(),
        response_topic_prefixes: config.response_topic_prefixes.clone(),
        scan_token_key: match (&redis, config.scan_token_key) {
            (Some((_, shared)), _) => *shared,
            (None, key) => key.unwrap_or_else(crate::random_bytes::<32>),
        },
        scan_token_seed: crate::random_bytes::<16>(),
        registration_lease_ms: config.registration_lease.map(|d| d.as_millis() as u64),
        standard_registration_lease_ms: config
            .standard_registration_lease
            .map(|d| d.as_millis() as u64),
        ..EngineConfig::new(config.node_id.clone())
    };
    let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
    let done_tx_disk = done_tx.clone();
    let minute_ms = config.jobs_minute.as_millis() as u64;
    let mut jobs = config.jobs.then(|| match &redis {
        None => JobsService::Local(
            Jobs::with_store(DurableJobs::default(), minute_ms).with_rollout_batch(ROLLOUT_BATCH),
        ),
        Some((store, _)) => JobsService::Shared(SharedJobs {
            store: RedisJobs::new(store.clone(), tokio::runtime::Handle::current()),
            done: done_tx.clone(),
            minute_ms,
            in_flight: 0,
            ticking: false,
            next_tick: 0,
            // Brokers such as mosquitto deliver no `$aws/...` message to a shared
            // subscription: with a share group, one node at a time listens to the device API.
            listener: config.share_group.is_some().then(|| Listener {
                token: format!("{}/{:016x}", config.node_id, crate::random_u64()),
                leader: false,
                claiming: false,
                next_claim: 0,
                held_until: 0,
                releasing: false,
            }),
        }),
    });
    if matches!(jobs, Some(JobsService::Local(_))) && config.share_group.is_some() {
        warn!(
            "jobs on the memory store with --share-group: each node keeps jobs of its own, and \
             brokers such as mosquitto deliver no device API message ($aws/...) to a shared \
             subscription; share jobs between nodes with --store redis://…"
        );
    }
    let command_registry = match &redis {
        Some((store, _)) => RegistryConfig::Store(store.clone()),
        None => RegistryConfig::Memory,
    };
    if redis.is_some() && config.durability.is_some() {
        return Err(ServerError::DiskWithRedis);
    }
    if !(config.state_store || config.jobs || config.commands) {
        return Err(ServerError::NothingToServe);
    }
    let mut disk = None;
    let mut kept_jobs = DurableJobs::default();
    let state = match redis {
        None => {
            let store = DurableStore::with_quotas(config.quotas);
            let mut engine = Engine::new(engine_config, store).map_err(node_id_error)?;
            if let Some(durability) = &config.durability {
                let now = now_ms().saturating_add_signed(config.clock_offset_ms);
                let opening = Instant::now();
                let (store, durable_jobs, recovered, opened) =
                    durable::open(durability, config.quotas, now, |recovered| {
                        if let Some(newest) = &recovered.newest {
                            engine.witness(newest);
                        }
                        engine.clock_now(now)
                    })?;
                *engine.store_mut() = store;
                match &mut jobs {
                    Some(JobsService::Local(jobs)) => *jobs.store_mut() = durable_jobs,
                    // Jobs off (--no-jobs): the jobs on disk are kept as they are.
                    _ => kept_jobs = durable_jobs,
                }
                if let Some(offset) = recovered.torn_at {
                    warn!(
                        path = %opened.path().display(),
                        offset,
                        "the data file ended in a record cut off by a crash (never acknowledged): \
                         recovered up to the last complete record"
                    );
                }
                info!(
                    path = %opened.path().display(),
                    fsync = ?durability.fsync,
                    keys = recovered.keys,
                    records = recovered.records,
                    expired_while_down = recovered.expired,
                    took_ms = opening.elapsed().as_millis() as u64,
                    "state store on disk"
                );
                disk = Some(opened);
            }
            State::Memory(engine)
        }
        Some((store, _)) => State::Redis(
            Engine::new(engine_config, ()).map_err(node_id_error)?,
            Remote {
                store,
                done: done_tx,
                in_flight: 0,
                sweeping: false,
                next_sweep: 0,
                up: true,
            },
        ),
    };
    let metrics = Arc::new(Metrics::default());
    metrics.store_call(true, 0);
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
    let commander = match config.commands {
        false => None,
        true => {
            if matches!(command_registry, RegistryConfig::Memory) && config.share_group.is_some() {
                warn!(
                    "commands on the memory store with --share-group: an answer read on the topic of a \
                     topic profile (DJI-style devices) reaches only the node that sent the command if \
                     that node read it; share the registry with --store redis://…"
                );
            }
            let commands = CommanderConfig {
                client_id: format!("{}-commands", config.client_id),
                share_group: config.share_group.clone(),
                profiles: config.command_profiles.clone(),
                registry: command_registry,
                serve: true,
                events: true,
                ..CommanderConfig::new(config.broker.clone(), config.node_id.clone())
            };
            Some(Commander::start(commands, Some(metrics.clone())).await?)
        }
    };
    started(Running {
        metrics: metrics.clone(),
        metrics_addr,
    });

    // A new epoch at every start: clients that see it change register again (see
    // `mqstore_core::presence`). The Will says "offline" if the node vanishes.
    let epoch = format!("{:016x}", crate::random_u64());
    let presence_topic = topics::server_presence_topic(&config.node_id);
    let presence = |online| ServerPresence {
        epoch: epoch.clone(),
        online,
        max_packet_size: Some(config.broker.max_packet_size),
        registration_lease_ms: config.registration_lease.map(|d| d.as_millis() as u64),
    };
    let mut options = config.broker.options(&config.client_id);
    if config.state_store {
        options.set_last_will(LastWill::new(
            presence_topic.clone(),
            presence(false).to_bytes(),
            QoS::AtLeastOnce,
            true,
            None,
        ));
    }
    let (client, eventloop) = rumqttc::v5::AsyncClient::new(options, REQUEST_QUEUE);
    // Identified requests (in each client's own tree) always; the standard, shared request
    // topic (what the Azure SDK clients use: they name themselves in `__srcId`, which nothing
    // checks) unless identities are required.
    let mut invoke_filters = Vec::new();
    let mut presence_filters = Vec::new();
    if config.state_store {
        invoke_filters.push(topics::IDENTIFIED_INVOKE_FILTER);
        presence_filters.push(topics::IDENTIFIED_PRESENCE_FILTER);
        if !config.require_identity {
            invoke_filters.push(topics::INVOKE);
            presence_filters.push(topics::PRESENCE_FILTER);
        }
    }
    if let Some(jobs) = &jobs {
        // The AWS IoT Jobs device API (`#` alone does not match `$aws/...`) unless one node
        // listens to it for all, and ours.
        if !matches!(
            jobs,
            JobsService::Shared(SharedJobs {
                listener: Some(_),
                ..
            })
        ) {
            invoke_filters.push(jobs_topics::DEVICE_FILTER);
        }
        invoke_filters.push(OPERATOR_TOPIC);
    }
    let invoke_filters: Vec<String> = invoke_filters
        .into_iter()
        .map(|filter| match &config.share_group {
            Some(group) => format!("$share/{group}/{filter}"),
            None => filter.to_owned(),
        })
        .collect();
    info!(
        broker = %format!("{}:{}", config.broker.host, config.broker.port),
        node_id = %config.node_id,
        topics = ?invoke_filters,
        state_store = config.state_store,
        require_identity = config.require_identity,
        "mqstore serve starting"
    );
    let mut node = Node {
        jobs,
        probe_topic: topics::probe_topic(&config.client_id),
        presence: config.state_store.then(|| Publish {
            topic: presence_topic,
            payload: presence(true).to_bytes(),
            qos: 1,
            properties: Default::default(),
        }),
        protocol_errors: 0,
        reports_no_subscribers: None,
        max_packet_size: config.broker.max_packet_size,
        own_max_packet_size: config.broker.max_packet_size,
        state,
        clock_offset_ms: config.clock_offset_ms,
        outbox: Outbox::new(client),
        metrics: metrics.clone(),
        invoke_filters,
        presence_filters,
        unsubacks: 0,
        subacks: 0,
        out: Vec::new(),
        sent: VecDeque::new(),
        notified: HashMap::new(),
        unacked: 0,
        max_pending_answers: config.max_pending_answers,
        stop: Stop::Running,
        disk,
        kept_jobs,
        disk_done: done_tx_disk,
        fatal: None,
    };
    let mut signals = Signals {
        shutdown: Box::pin(shutdown),
        fired: false,
        grace: Box::pin(tokio::time::sleep(Duration::ZERO)),
        store_done: done_rx,
    };
    Connection::new(eventloop)
        .run(&mut signals, &mut node)
        .await;
    let closed = node.disk.as_mut().map(Disk::close).transpose();
    if let Some(commander) = commander {
        commander.stop().await;
    }
    if let Some(task) = metrics_task {
        task.abort();
    }
    if let Some(fatal) = node.fatal {
        return Err(fatal);
    }
    closed?;
    info!("stopped");
    Ok(())
}

/// Targets of a new job queued per turn of the server's loop: each makes up to two
/// notifications, and an answer to another request waits behind at most one batch's.
const ROLLOUT_BATCH: usize = 64;

/// A job's rollout pauses while this many publishes are on their way to the broker (waiting
/// in the outbox or in rumqttc's queue, or sent and not yet acknowledged): an answer to
/// another request queues behind no more than these and one batch.
const ROLLOUT_MAX_PENDING: usize = 128;

/// The default of [`ServerConfig::registration_lease`].
pub const DEFAULT_REGISTRATION_LEASE: Duration = Duration::from_secs(60);

/// The default of [`ServerConfig::max_pending_answers`].
pub const DEFAULT_MAX_PENDING_ANSWERS: usize = 10_000;

/// How many 503 answers to overloaded requests may wait beyond `max_pending_answers`.
const OVERLOAD_REPLIES: usize = 1_000;

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
struct Signals<F> {
    shutdown: Pin<Box<F>>,
    fired: bool,
    grace: Pin<Box<tokio::time::Sleep>>,
    /// What Redis answered (requests, sweeps and jobs calls run off the loop).
    store_done: tokio::sync::mpsc::UnboundedReceiver<Done>,
}

enum Signal {
    Shutdown,
    GraceOver,
    Done(Done),
}

impl<F: Future<Output = ()>> Wakes for Signals<F> {
    type Wake = Signal;

    async fn next(&mut self) -> Signal {
        let Self {
            shutdown,
            fired,
            grace,
            store_done,
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
        // Both are cancel-safe: pinned futures and a channel.
        tokio::select! {
            Some(done) = store_done.recv() => Signal::Done(done),
            signal = lifecycle => signal,
        }
    }
}

/// A Redis call that ended, back in the server's loop.
enum StoreDone {
    /// A request's op.
    Call {
        call: Box<Call>,
        result: Result<Applied, RedisStoreError>,
        received: Instant,
    },
    /// A periodic sweep: expired keys, clients whose lease ended, and what the store holds.
    Sweep(Result<Swept, RedisStoreError>),
    /// Registrations of clients that are gone were dropped.
    Dropped(Vec<String>, Result<usize, RedisStoreError>),
}

/// A jobs call on Redis that ended, back in the server's loop.
enum JobsDone {
    /// A request ran: what it published (its notifications, then its reply).
    Request(Vec<Publish>, Option<JobsHandled>),
    /// A timer tick ran: what it published, and whether rollouts remain.
    Tick(Vec<Publish>, Stored<bool>),
    /// A claim of the listener lease ran (started at the time given): whether it holds.
    Claim(u64, Result<bool, RedisStoreError>),
    /// The listener lease was given up.
    Released(Result<(), RedisStoreError>),
}

/// Work that ran off the server's loop and came back to it.
enum Done {
    State(StoreDone),
    Jobs(JobsDone),
    /// A sync of the data file ended.
    Synced(std::io::Result<()>),
}

/// What a jobs request was, for the metrics.
struct JobsHandled {
    accepted: bool,
    notifications: usize,
}

/// The jobs service of a node.
enum JobsService {
    /// In this process's memory: answered at once.
    Local(Jobs<DurableJobs>),
    /// In Redis, shared by every node: the engine waits for Redis, so each request (and each
    /// timer tick) runs on a blocking thread of its own, many at once, and comes back as a
    /// [`JobsDone`]. Compare-and-set keeps them atomic (see [`mqstore_core::jobs`]).
    Shared(SharedJobs),
}

struct SharedJobs {
    store: RedisJobs,
    done: tokio::sync::mpsc::UnboundedSender<Done>,
    minute_ms: u64,
    /// Requests running.
    in_flight: usize,
    /// A tick (timeouts, the next rollout batch) is running.
    ticking: bool,
    /// When the next tick is due.
    next_tick: u64,
    /// With a share group: the election of the node that listens to the device API.
    listener: Option<Listener>,
}

/// This node's part in electing the one node that subscribes to the device API (a lease in
/// Redis, renewed every [`LISTENER_RENEW_MS`]; another node takes over within
/// [`LISTENER_LEASE_MS`] of the listener's death, and at once when it stops cleanly).
struct Listener {
    /// Who this node is in the lease (node id and a random part: a restarted node is new).
    token: String,
    /// Whether this node holds the lease and is subscribed.
    leader: bool,
    /// A claim is running.
    claiming: bool,
    next_claim: u64,
    /// Until when this node may listen after its last successful claim, by its own clock: a
    /// renewal short of the lease's end, so that it has unsubscribed before another node can
    /// claim the lease.
    held_until: u64,
    /// Giving the lease up (the node stops once it is done).
    releasing: bool,
}

/// How long the device API listener's lease lasts without renewal.
const LISTENER_LEASE_MS: u64 = 3_000;

/// How often the listener renews its lease, and the others try to take it.
const LISTENER_RENEW_MS: u64 = 1_000;

impl SharedJobs {
    /// The engine over the shared state (cheap: it holds a handle on the connection).
    fn engine(&self) -> Jobs<RedisJobs> {
        Jobs::with_store(self.store.clone(), self.minute_ms).with_rollout_batch(ROLLOUT_BATCH)
    }
}

/// A jobs timer tick: times out what ran out, and (while the broker keeps up) queues the next
/// batch of a rollout; whether rollouts remain.
fn jobs_tick<S: JobsStore>(
    jobs: &mut Jobs<S>,
    now_ms: u64,
    rollout_room: bool,
    out: &mut Vec<Publish>,
) -> Stored<bool> {
    jobs.expire(now_ms, out)?;
    if rollout_room && jobs.rolling_out()? {
        jobs.roll_out(now_ms, out)?;
    }
    jobs.rolling_out()
}

/// How often each node on Redis looks for jobs timers that ran out and for rollouts to go on
/// with (any node's tick may take any of them; each is done once).
const JOBS_TICK_MS: u64 = 100;

/// Runs one jobs request on `jobs`: a device request (`$aws/things/T/jobs/...`) or an operator
/// request, pushing the notifications it causes and then its reply onto `out`. `None` for the
/// service's own replies and notifications coming back (not requests).
fn run_jobs<S: JobsStore>(
    jobs: &mut Jobs<S>,
    message: Publish,
    node: &str,
    now: u64,
    out: &mut Vec<Publish>,
) -> Option<JobsHandled> {
    let before = out.len();
    if message.topic != OPERATOR_TOPIC {
        jobs.handle(&message.topic, &message.payload, now, out)?;
        let (reply, notifications) = out[before..].split_last()?;
        return Some(JobsHandled {
            accepted: reply.topic.ends_with("/accepted"),
            notifications: notifications.len(),
        });
    }
    match envelope::check_request(message.qos, message.properties, node) {
        envelope::Checked::Accept(invocation) => {
            let answer = jobs.operate(&message.payload, now, out);
            let handled = JobsHandled {
                accepted: matches!(answer, OperatorAnswer::Ok(_)),
                notifications: out.len() - before,
            };
            let mut properties = envelope::response_properties(&invocation, 200, None, node);
            properties.content_type = Some("application/json".into());
            out.push(Publish {
                topic: invocation.response_topic,
                // Our own type: it always serializes.
                payload: bytes::Bytes::from(serde_json::to_vec(&answer).unwrap_or_default()),
                qos: 1,
                properties,
            });
            Some(handled)
        }
        envelope::Checked::Reject(reply, _) => {
            out.push(*reply);
            None
        }
        envelope::Checked::Drop(reason) => {
            debug!(%reason, "operator request dropped");
            None
        }
    }
}

struct Swept {
    expired: Vec<Expired>,
    leases: Vec<(ClientId, usize)>,
    stats: StoreStats,
}

/// How often a node on Redis sweeps expired keys and ended leases (any node's sweep finds
/// any key; each expiry is notified once).
const SWEEP_INTERVAL_MS: u64 = 100;

/// Where the state lives, and the engine that drives it.
#[allow(clippy::large_enum_variant)] // one per node, made once and never moved after
enum State {
    /// The engine owns its memory store (recording its writes for the disk with
    /// `--data-dir`) and answers at once.
    Memory(Engine<DurableStore>),
    /// The engine owns no store: each op runs in Redis in a task of its own, many at once,
    /// and comes back as a [`StoreDone`].
    Redis(Engine<()>, Remote),
}

/// The Redis side of a node.
struct Remote {
    store: RedisStore,
    done: tokio::sync::mpsc::UnboundedSender<Done>,
    /// Requests waiting for Redis.
    in_flight: usize,
    /// A sweep is running.
    sweeping: bool,
    /// When the next sweep is due.
    next_sweep: u64,
    /// Whether the last Redis call succeeded.
    up: bool,
}

impl Remote {
    /// Records a Redis call's result: metrics, and a log line when Redis goes away or comes
    /// back (not one per failed call).
    fn note(&mut self, error: Option<&RedisStoreError>, metrics: &Metrics) {
        metrics.store_call(error.is_none(), self.in_flight);
        match (self.up, error) {
            (true, Some(error)) => warn!(
                %error,
                "Redis failed: requests are answered with status 503 until it answers again \
                 (the node reconnects by itself; is Redis running and reachable?)"
            ),
            (false, None) => info!("Redis answers again"),
            _ => {}
        }
        self.up = error.is_none();
    }
}

impl State {
    fn node_id(&self) -> &str {
        match self {
            Self::Memory(engine) => engine.node_id(),
            Self::Redis(engine, _) => engine.node_id(),
        }
    }

    fn next_deadline(&self) -> Option<u64> {
        match self {
            Self::Memory(engine) => engine.next_deadline(),
            Self::Redis(_, remote) => (!remote.sweeping).then_some(remote.next_sweep),
        }
    }

    /// Requests waiting for the store.
    fn in_flight(&self) -> usize {
        match self {
            Self::Memory(_) => 0,
            Self::Redis(_, remote) => remote.in_flight,
        }
    }
}

/// What a publish handed to the broker was: what its PUBACK means depends on it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sent {
    Answer,
    /// A notification for this client: "no matching subscribers" means it stopped listening.
    Notification(String),
    /// The probe that tells whether the broker reports "no matching subscribers" at all.
    Probe,
    /// This node's retained presence.
    Presence,
}

/// One server node: the engine and what it has queued for the broker.
struct Node {
    state: State,
    /// Added to the system clock (tests of skewed nodes).
    clock_offset_ms: i64,
    /// The jobs service, unless switched off.
    jobs: Option<JobsService>,
    /// Answers and notifications, tagged with what they are.
    outbox: Outbox<Sent>,
    metrics: Arc<Metrics>,
    /// What requests arrive on (shared subscriptions with a share group).
    invoke_filters: Vec<String>,
    /// Where clients' presence messages arrive.
    presence_filters: Vec<&'static str>,
    /// UNSUBACKs still expected while shutting down.
    unsubacks: usize,
    /// SUBACKs still expected after a connection: requests are served once they are in.
    subacks: usize,
    /// What the engine returned for the current request or expiry sweep.
    out: Vec<Publish>,
    /// The tags of the publishes rumqttc took, in order, until it reports their packet ids.
    sent: VecDeque<Sent>,
    /// Packet id → what a notification or probe in flight is (answers are not kept).
    notified: HashMap<u16, Sent>,
    /// Where this node's probe goes (see [`topics::probe_topic`]).
    probe_topic: String,
    /// This node's retained presence ("online", its epoch and limit), published at every
    /// connection (none without the state store).
    presence: Option<Publish>,
    /// Connections in a row that the broker broke the protocol on.
    protocol_errors: u32,
    /// What the probe found (`None` until its PUBACK came).
    reports_no_subscribers: Option<bool>,
    /// The largest packet this node sends: its own limit, lowered by the broker's CONNACK.
    max_packet_size: u32,
    /// This node's own limit ([`BrokerConfig::max_packet_size`]).
    own_max_packet_size: u32,
    /// Publishes sent and not yet acknowledged by the broker.
    unacked: usize,
    max_pending_answers: usize,
    stop: Stop,
    /// The data directory's log (`--data-dir`), and what waits for it.
    disk: Option<Disk<(Publish, Sent)>>,
    /// The jobs on disk while the jobs service is off: written back when the log is compacted.
    kept_jobs: DurableJobs,
    /// Where a finished sync reports.
    disk_done: tokio::sync::mpsc::UnboundedSender<Done>,
    /// Why the node stopped on its own (the disk failed).
    fatal: Option<ServerError>,
}

impl Node {
    /// This node's clock.
    fn now(&self) -> u64 {
        now_ms().saturating_add_signed(self.clock_offset_ms)
    }

    /// Whether a job's rollout may queue its next batch (see [`ROLLOUT_MAX_PENDING`]).
    fn rollout_has_room(&self) -> bool {
        self.outbox.len() + self.sent.len() + self.unacked < ROLLOUT_MAX_PENDING
    }
}

impl Driver for Node {
    type Wake = Signal;

    fn deadline(&self) -> Option<u64> {
        // Not once the DISCONNECT is queued: what expiry sends would queue behind it.
        match self.stop {
            Stop::Running | Stop::Unsubscribing | Stop::Unsubscribed => {
                let jobs = self.jobs.as_ref().and_then(|jobs| match jobs {
                    // A job's rollout goes on at once, while the broker keeps up (requests
                    // that arrive meanwhile come first: see `Connection::next`). The memory
                    // store does not fail.
                    JobsService::Local(jobs) => {
                        if jobs.rolling_out() == Ok(true) && self.rollout_has_room() {
                            Some(0)
                        } else {
                            jobs.next_deadline().ok().flatten()
                        }
                    }
                    JobsService::Shared(shared) => {
                        // The next claim; and a listener whose renewal is late stops at
                        // `held_until` whatever the claim in flight says later.
                        let claim = shared.listener.as_ref().and_then(|listener| {
                            let claim = (!listener.claiming).then_some(listener.next_claim);
                            let stop = listener.leader.then_some(listener.held_until);
                            claim.into_iter().chain(stop).min()
                        });
                        (!shared.ticking)
                            .then_some(shared.next_tick)
                            .into_iter()
                            .chain(claim)
                            .min()
                    }
                });
                let disk = self.disk.as_ref().and_then(Disk::deadline);
                self.state
                    .next_deadline()
                    .into_iter()
                    .chain(jobs)
                    .chain(disk)
                    .min()
            }
            Stop::Disconnecting | Stop::Closing => None,
        }
    }

    fn on_deadline(&mut self, _: u64) {
        let now_ms = self.now();
        self.state_deadline(now_ms);
        let rollout_room = self.rollout_has_room();
        match &mut self.jobs {
            Some(JobsService::Local(jobs)) => {
                let before = self.out.len();
                let ticked = jobs_tick(jobs, now_ms, rollout_room, &mut self.out);
                if let Err(error) = ticked {
                    warn!(%error, "jobs timers");
                }
                self.metrics.jobs_notified((self.out.len() - before) as u64);
            }
            Some(JobsService::Shared(shared)) if !shared.ticking && shared.next_tick <= now_ms => {
                shared.ticking = true;
                let (mut jobs, done) = (shared.engine(), shared.done.clone());
                tokio::task::spawn_blocking(move || {
                    let mut out = Vec::new();
                    let ticked = jobs_tick(&mut jobs, now_ms, rollout_room, &mut out);
                    let _ = done.send(Done::Jobs(JobsDone::Tick(out, ticked)));
                });
            }
            Some(JobsService::Shared(_)) | None => {}
        }
        if let Some(JobsService::Shared(SharedJobs {
            listener: Some(listener),
            ..
        })) = &self.jobs
            && listener.leader
            && listener.held_until <= now_ms
        {
            warn!("the jobs device API lease was not renewed in time (is Redis reachable?)");
            self.stop_listening();
        }
        if self.stop == Stop::Running
            && let Some(JobsService::Shared(shared)) = &mut self.jobs
            && let Some(listener) = &mut shared.listener
            && !listener.claiming
            && listener.next_claim <= now_ms
        {
            listener.claiming = true;
            let (store, done, token) = (
                shared.store.clone(),
                shared.done.clone(),
                listener.token.clone(),
            );
            tokio::spawn(async move {
                let held = store.claim_listener(&token, LISTENER_LEASE_MS).await;
                let _ = done.send(Done::Jobs(JobsDone::Claim(now_ms, held)));
            });
        }
        self.queue_out();
    }

    fn on_wake(&mut self, signal: Signal) -> bool {
        let go_on = match signal {
            Signal::Shutdown => {
                // Stop taking requests; answer those already taken, then disconnect.
                info!("shutting down");
                let listener = self.elected_listener().map(|_| jobs_topics::DEVICE_FILTER);
                let filters = self.invoke_filters.iter().map(String::as_str);
                for filter in filters.chain(listener) {
                    if self.outbox.client().try_unsubscribe(filter).is_ok() {
                        self.unsubacks += 1;
                    }
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
            Signal::Done(Done::Synced(result)) => self.synced(result),
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
                let error = connection_error(&e);
                warn!(%error, "broker connection failed; reconnecting");
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
        let (sent, metrics) = (&mut self.sent, &self.metrics);
        self.outbox.flush(|tag| note_sent(sent, metrics, tag));
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
            && self.disk.as_ref().is_none_or(Disk::idle)
            && self.outbox.is_empty()
            && self.unacked == 0
            && self.outbox.client().try_disconnect().is_ok()
        {
            self.stop = Stop::Disconnecting;
        }
    }
}

impl Node {
    fn on_event(&mut self, event: Event) {
        let gone = match event {
            Event::Incoming(Packet::ConnAck(connack)) => {
                let broker = connack.properties.and_then(|p| p.max_packet_size);
                self.max_packet_size = broker.map_or(self.own_max_packet_size, |b| {
                    b.min(self.own_max_packet_size)
                });
                // Clean start: nothing survives a reconnect, so subscribe again every time,
                // and forget which packet ids were notifications.
                self.notified.clear();
                self.sent.clear();
                self.unacked = 0;
                let filters = self.invoke_filters.iter().map(String::as_str);
                let listener = self.elected_listener().map(|_| jobs_topics::DEVICE_FILTER);
                let filters = filters.chain(listener);
                self.subacks = 0;
                for filter in filters.chain(self.presence_filters.iter().copied()) {
                    match self.outbox.client().try_subscribe(filter, QoS::AtLeastOnce) {
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
                let (sent, metrics) = (&mut self.sent, &self.metrics);
                if let Some(presence) = &self.presence {
                    self.outbox
                        .push_retained(presence.clone(), Sent::Presence, |tag| {
                            note_sent(sent, metrics, tag)
                        });
                }
                self.outbox
                    .push(probe, Sent::Probe, |tag| note_sent(sent, metrics, tag));
                None
            }
            Event::Incoming(Packet::Publish(p)) => {
                let received = Instant::now();
                let retained = p.retain;
                let message = from_mqtt(p);
                match presence_of(&message.topic) {
                    // A retained presence replays at every subscribe: it says nothing about
                    // the client now (and would drop its registrations again and again).
                    Some(clients) if retained => {
                        debug!(?clients, "ignored a retained presence message");
                        None
                    }
                    Some(clients) => Some(clients),
                    None if self.jobs.is_some() && jobs_topics::is_jobs(&message.topic) => {
                        self.handle_jobs(message);
                        None
                    }
                    None if self.outbox.len() >= self.max_pending_answers => {
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
                    None => {
                        self.handle_request(message, received);
                        None
                    }
                }
            }
            Event::Outgoing(Outgoing::Publish(pkid)) => {
                self.unacked += 1;
                match self.sent.pop_front() {
                    Some(Sent::Answer) | None => {}
                    Some(tag) => {
                        self.notified.insert(pkid, tag);
                    }
                }
                None
            }
            Event::Incoming(Packet::PubAck(ack)) => {
                self.unacked = self.unacked.saturating_sub(1);
                let sent = self.notified.remove(&ack.pkid);
                if !matches!(sent, Some(Sent::Probe | Sent::Presence)) {
                    // An answer or notification (they carry user properties) was acknowledged
                    // properly: the broker keeps the protocol.
                    self.protocol_errors = 0;
                }
                match (ack.reason, sent) {
                    (PubAckReason::NoMatchingSubscribers, Some(Sent::Notification(client))) => {
                        debug!(?client, "nobody receives this client's notifications");
                        Some(vec![client])
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

    /// A request for the state store: answered now (memory), or once Redis has run its op.
    fn handle_request(&mut self, message: Publish, received: Instant) {
        let now = self.now();
        let outcome = match &mut self.state {
            State::Memory(engine) => {
                let outcome = engine.handle(message, now, &mut self.out);
                self.metrics.set_store(engine.stats());
                outcome
            }
            State::Redis(engine, remote) => match engine.accept(message, now, &mut self.out) {
                Accepted::Done(outcome) => outcome,
                Accepted::Store(call) => {
                    remote.in_flight += 1;
                    let (store, done) = (remote.store.clone(), remote.done.clone());
                    tokio::spawn(async move {
                        let result = store.apply(call.op(), now).await;
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

    /// Expiry and ended leases: at once in memory; on Redis, a sweep in a task of its own.
    fn state_deadline(&mut self, now_ms: u64) {
        match &mut self.state {
            State::Memory(engine) => {
                engine.expire(now_ms, &mut self.out);
                for (client, registrations) in engine.expire_leases(now_ms) {
                    debug!(?client, registrations, "registration lease ended: dropped");
                    self.metrics.client_dropped();
                }
                self.metrics.set_store(engine.stats());
            }
            State::Redis(_, remote) if !remote.sweeping && remote.next_sweep <= now_ms => {
                remote.sweeping = true;
                let (store, done) = (remote.store.clone(), remote.done.clone());
                tokio::spawn(async move {
                    let swept = async {
                        Ok(Swept {
                            expired: store.sweep(now_ms).await?,
                            leases: store.expire_leases(now_ms).await?,
                            stats: store.stats().await?,
                        })
                    };
                    let _ = done.send(Done::State(StoreDone::Sweep(swept.await)));
                });
            }
            State::Redis(..) => {}
        }
    }

    /// Drops the registrations of clients that are gone.
    fn drop_clients(&mut self, gone: Vec<String>) {
        match &mut self.state {
            State::Memory(engine) => {
                let dropped: usize = gone.iter().map(|client| engine.drop_client(client)).sum();
                if dropped > 0 {
                    info!(clients = ?gone, registrations = dropped, "client gone: dropped its registrations");
                    self.metrics.client_dropped();
                    self.metrics.set_store(engine.stats());
                }
            }
            State::Redis(_, remote) => {
                let (store, done) = (remote.store.clone(), remote.done.clone());
                tokio::spawn(async move {
                    let mut dropped = Ok(0);
                    for client in &gone {
                        match store.drop_client(client).await {
                            Ok(n) => dropped = dropped.map(|d| d + n),
                            Err(e) => dropped = Err(e),
                        }
                    }
                    let _ = done.send(Done::State(StoreDone::Dropped(gone, dropped)));
                });
            }
        }
    }

    /// A jobs call on Redis ended.
    fn jobs_done(&mut self, done: JobsDone) {
        let now = self.now();
        let Some(JobsService::Shared(shared)) = &mut self.jobs else {
            return;
        };
        match done {
            JobsDone::Request(out, handled) => {
                shared.in_flight -= 1;
                self.out.extend(out);
                self.jobs_handled(handled);
            }
            JobsDone::Tick(out, ticked) => {
                shared.ticking = false;
                // Rollouts go on at the next turn of the loop; timers are looked for again
                // after a tick's pause.
                let pause = if ticked == Ok(true) { 0 } else { JOBS_TICK_MS };
                shared.next_tick = now + pause;
                if let Err(error) = ticked {
                    debug!(%error, "Redis failed during a jobs tick; retrying");
                }
                self.metrics.jobs_notified(out.len() as u64);
                self.out.extend(out);
                self.queue_out();
            }
            JobsDone::Released(released) => {
                if let Some(listener) = &mut shared.listener {
                    listener.releasing = false;
                }
                if let Err(error) = released {
                    warn!(%error, "could not give the jobs device API up: another node takes it over when its lease ends");
                }
            }
            JobsDone::Claim(started, held) => {
                let Some(listener) = &mut shared.listener else {
                    return;
                };
                listener.claiming = false;
                listener.next_claim = now + LISTENER_RENEW_MS;
                if matches!(held, Ok(true)) {
                    // The lease runs from when Redis ran the claim, after `started`.
                    listener.held_until = started + LISTENER_LEASE_MS - LISTENER_RENEW_MS;
                }
                // Redis away: the listener goes on until `held_until` (the others cannot take
                // the lease before it ends either).
                let leads = match held {
                    Ok(held) => held,
                    Err(ref error) => {
                        debug!(%error, "Redis failed during a listener claim; retrying");
                        listener.leader && now < listener.held_until
                    }
                };
                if leads && !listener.leader && self.stop == Stop::Running {
                    let client = self.outbox.client();
                    if let Err(e) =
                        client.try_subscribe(jobs_topics::DEVICE_FILTER, QoS::AtLeastOnce)
                    {
                        warn!(error = %e, "subscribe failed");
                    }
                    listener.leader = true;
                    info!("this node now listens to the jobs device API for all nodes");
                } else if !leads {
                    self.stop_listening();
                }
            }
        }
    }

    /// Unsubscribes from the device API if this node listened to it as the elected node.
    fn stop_listening(&mut self) {
        if let Some(JobsService::Shared(shared)) = &mut self.jobs
            && let Some(listener) = &mut shared.listener
            && listener.leader
        {
            let _ = self
                .outbox
                .client()
                .try_unsubscribe(jobs_topics::DEVICE_FILTER);
            listener.leader = false;
            info!("this node no longer listens to the jobs device API");
        }
    }

    /// Whether this node listens to the jobs device API as the elected node.
    fn elected_listener(&self) -> Option<&Listener> {
        match &self.jobs {
            Some(JobsService::Shared(SharedJobs {
                listener: Some(listener),
                ..
            })) if listener.leader => Some(listener),
            _ => None,
        }
    }

    /// What Redis answered.
    fn store_done(&mut self, done: StoreDone) {
        let now = self.now();
        let State::Redis(engine, remote) = &mut self.state else {
            return;
        };
        match done {
            StoreDone::Call {
                call,
                result,
                received,
            } => {
                remote.in_flight -= 1;
                remote.note(result.as_ref().err(), &self.metrics);
                let outcome = match result {
                    Ok(applied) => {
                        if let Some(expired) = applied.expired {
                            engine.expired(expired, now, &mut self.out);
                        }
                        engine.complete(call, applied.reply, now, &mut self.out)
                    }
                    Err(error) => {
                        debug!(%error, command = ?call.command(), "Redis failed: answered 503");
                        engine.fail(call, error.to_string(), &mut self.out)
                    }
                };
                self.answered(outcome, received);
            }
            StoreDone::Sweep(swept) => {
                remote.sweeping = false;
                remote.next_sweep = now + SWEEP_INTERVAL_MS;
                remote.note(swept.as_ref().err(), &self.metrics);
                match swept {
                    Ok(swept) => {
                        for expired in swept.expired {
                            engine.expired(expired, now, &mut self.out);
                        }
                        for (client, registrations) in swept.leases {
                            debug!(?client, registrations, "registration lease ended: dropped");
                            self.metrics.client_dropped();
                        }
                        self.metrics.set_store(swept.stats);
                        self.queue_out();
                    }
                    Err(error) => debug!(%error, "Redis failed during a sweep; retrying"),
                }
            }
            StoreDone::Dropped(clients, result) => {
                remote.note(result.as_ref().err(), &self.metrics);
                match result {
                    Ok(0) => {}
                    Ok(dropped) => {
                        info!(
                            ?clients,
                            registrations = dropped,
                            "client gone: dropped its registrations"
                        );
                        self.metrics.client_dropped();
                    }
                    Err(error) => {
                        warn!(%error, ?clients, "Redis failed while dropping registrations of clients that are gone (their leases end them)");
                    }
                }
            }
        }
    }

    /// Queues what the engine returned, in order (notifications before responses); with
    /// `--fsync always`, behind the sync of the writes before it.
    fn queue_out(&mut self) {
        let hold_until = self.persist();
        let (sent, metrics) = (&mut self.sent, &self.metrics);
        for message in self.out.drain(..) {
            let tag = topics::client_of_notify_topic(&message.topic)
                .map_or(Sent::Answer, Sent::Notification);
            let Some(message) = fit(message, &tag, self.max_packet_size, metrics) else {
                continue;
            };
            match (hold_until, &mut self.disk) {
                (Some(batch), Some(disk)) => disk.hold(batch, (message, tag)),
                _ => self
                    .outbox
                    .push(message, tag, |tag| note_sent(sent, metrics, tag)),
            }
        }
    }

    /// Hands the store's new records to the disk and starts a sync if one is due; the batch
    /// what is queued now must wait for (`--fsync always`).
    fn persist(&mut self) -> Option<u64> {
        let (State::Memory(engine), Some(disk)) = (&mut self.state, &mut self.disk) else {
            return None;
        };
        let mut records = engine.store_mut().take_pending();
        if let Some(JobsService::Local(jobs)) = &mut self.jobs {
            records.extend(jobs.store_mut().take_pending());
        }
        let done = self.disk_done.clone();
        let synced = move |result| {
            let _ = done.send(Done::Synced(result));
        };
        let persisted = disk.persist(records, now_ms(), synced, |sync| {
            tokio::task::spawn_blocking(sync);
        });
        persisted.unwrap_or_else(|error| {
            self.fail(error);
            None
        })
    }

    /// A sync of the data file ended: what waited for it goes out; the next one starts.
    fn synced(&mut self, result: std::io::Result<()>) -> bool {
        let Some(disk) = &mut self.disk else {
            return true;
        };
        let released = match disk.sync_ended(result, now_ms()) {
            Ok(released) => released,
            Err(error) => {
                self.fail(error);
                return false;
            }
        };
        let (sent, metrics) = (&mut self.sent, &self.metrics);
        for (message, tag) in released {
            self.outbox
                .push(message, tag, |tag| note_sent(sent, metrics, tag));
        }
        self.persist();
        if let (State::Memory(engine), Some(disk)) = (&mut self.state, &mut self.disk) {
            let jobs = match &self.jobs {
                Some(JobsService::Local(jobs)) => jobs.store(),
                _ => &self.kept_jobs,
            };
            let clock = engine.clock_now(now_ms());
            match disk.compact_if_due(engine.store(), jobs, &clock) {
                Ok(Some(c)) => info!(
                    path = %disk.path().display(),
                    before = c.before,
                    after = c.after,
                    took_ms = c.took.as_millis() as u64,
                    "compacted the data file"
                ),
                Ok(None) => {}
                Err(error) => {
                    self.fail(error);
                    return false;
                }
            }
        }
        self.disconnect_when_done();
        self.fatal.is_none()
    }

    /// The disk failed: the node stops, and what waits for the disk is never sent (those
    /// writes may not be on disk).
    fn fail(&mut self, error: DiskError) {
        error!(%error, "the data directory failed: stopping (answers not yet on disk are not sent)");
        self.fatal.get_or_insert(ServerError::Disk(error));
    }

    /// A device request (`$aws/things/T/jobs/...`) or an operator request: the reply after the
    /// notifications it causes (now in memory; on Redis once its thread is done).
    fn handle_jobs(&mut self, message: Publish) {
        let now = self.now();
        let node = self.state.node_id();
        match &mut self.jobs {
            Some(JobsService::Local(jobs)) => {
                let handled = run_jobs(jobs, message, node, now, &mut self.out);
                self.jobs_handled(handled);
            }
            Some(JobsService::Shared(shared)) => {
                shared.in_flight += 1;
                let (mut jobs, done, node) =
                    (shared.engine(), shared.done.clone(), node.to_owned());
                tokio::task::spawn_blocking(move || {
                    let mut out = Vec::new();
                    let handled = run_jobs(&mut jobs, message, &node, now, &mut out);
                    let _ = done.send(Done::Jobs(JobsDone::Request(out, handled)));
                });
            }
            None => {}
        }
    }

    /// Counts a jobs request that ran, and queues what it published.
    fn jobs_handled(&mut self, handled: Option<JobsHandled>) {
        if let Some(handled) = handled {
            self.metrics
                .jobs_handled(handled.accepted, handled.notifications);
        }
        self.queue_out();
    }

    /// Jobs requests (on Redis) still running.
    fn jobs_in_flight(&self) -> usize {
        match &self.jobs {
            Some(JobsService::Shared(shared)) => {
                let releasing = shared.listener.as_ref().is_some_and(|l| l.releasing);
                shared.in_flight + usize::from(shared.ticking) + usize::from(releasing)
            }
            _ => 0,
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

/// Whose registrations a presence message on `topic` ends: an identified client's (in its own
/// tree, which only it may publish to) end both its identified registrations and those made
/// in its name on the standard topic; a standard presence (which anyone could publish) only
/// the latter.
fn presence_of(topic: &str) -> Option<Vec<String>> {
    if let Some(client) = topics::client_of_identified_presence(topic) {
        return Some(vec![topics::identified(&client), client]);
    }
    topics::client_of_presence_topic(topic).map(|client| vec![client])
}

/// `message` if the broker takes it (at most `max` bytes), as [`fit_for_broker`] decides;
/// logs what it changed and counts what it dropped.
fn fit(message: Publish, tag: &Sent, max: u32, metrics: &Metrics) -> Option<Publish> {
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

/// rumqttc took a publish: remember what it was until its packet id is reported.
fn note_sent(sent: &mut VecDeque<Sent>, metrics: &Metrics, tag: Sent) {
    if matches!(tag, Sent::Notification(_)) {
        metrics.notified(1);
    }
    sent.push_back(tag);
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
        let client = Sent::Notification("c".into());
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
