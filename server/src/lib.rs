//! # mqstore-server
//!
//! `mqstore serve`: the core's server node ([`mqstore_core::server::Node`]) next to an MQTT 5
//! broker, over tokio and rumqttc; the Redis store ([`redis_store`]: one primary, Sentinel
//! or Cluster) that many nodes share; the command service on Redis ([`commander`]);
//! Prometheus [`metrics`]; and the load generator ([`bench`](mod@bench)). A crate of its own so that no
//! client artifact (the Python wheel, the C library, the npm package) can pull Redis or the
//! server in by a feature.
//!
//! One task owns the [`Engine`] and the broker connection (see `connection.rs` for how it
//! polls without ever dropping a poll half-way) and handles each event as the connection
//! reports it: it re-subscribes on every CONNACK, answers requests (publishing what the engine
//! returns in that order: notifications before responses), drops the registrations of clients
//! that are gone (a presence Will, or a notification's PUBACK saying "no matching
//! subscribers"), wakes at the engine's next expiry deadline, and reconnects with backoff when
//! the broker is away. On shutdown it unsubscribes, answers what still arrives, waits for the
//! broker's acknowledgements, and disconnects.

#![deny(missing_docs)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::LastWill;
use tracing::{info, warn};

use crate::done::{CommandsDone, Done};
use crate::metrics::Metrics;
use crate::redis_store::{RedisJobs, RedisRegistry, RedisStore, RedisStoreError};
use crate::registry_calls::{PipeReader, RegistryCalls};
use jobs::ROLLOUT_BATCH;
use jobs::{JobsService, Listener, SharedJobs};
use mqstore_core::commands::definitions::DEFINITIONS_TOPIC;
use mqstore_core::commands::wire;
use mqstore_core::engine::{Engine, EngineConfig};
use mqstore_core::envelope::Publish;
use mqstore_core::jobs::{OPERATOR_TOPIC, topics as jobs_topics};
use mqstore_core::presence::{self, Peers, ServerPresence, Services, Subscription};
use mqstore_core::server;
use mqstore_core::shadow;
use mqstore_core::topics;
use mqstore_net::host::now_ms;
use mqstore_net::host::{Connection, Outbox};
use node::{Node, REQUEST_QUEUE, Remote, RemoteCommands, Signals, State, Stop};

pub mod bench;
pub mod commander;
mod config;
mod done;
mod jobs;
pub mod metrics;
mod node;
pub mod redis_store;
mod registry_calls;

/// Locks `mutex`; a panic while it was held is a bug elsewhere, and the data stays usable.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

pub use config::{
    DEFAULT_MAX_PENDING_ANSWERS, DEFAULT_REGISTRATION_LEASE, ServerConfig, ServerError, StoreConfig,
};

/// A running server's handles, for tests and embedding.
pub struct Running {
    /// The server's counters (what `/metrics` serves).
    pub metrics: Arc<Metrics>,
    /// The bound metrics address, when serving metrics.
    pub metrics_addr: Option<SocketAddr>,
    /// Becomes `true` once the node is connected and its subscriptions are in: requests
    /// published from then on are served.
    pub subscribed: tokio::sync::watch::Receiver<bool>,
}

/// A server running in a task of its own (for embedding and tests).
pub struct ServerHandle {
    /// The server's counters (what `/metrics` serves).
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
        Ok(mut running) => {
            // Returned once requests are served (the first subscriptions are in), or why the
            // server stopped before that.
            tokio::select! {
                subscribed = running.subscribed.wait_for(|subscribed| *subscribed) => {
                    if subscribed.is_err() {
                        return match (&mut task).await {
                            Ok(Err(e)) => Err(e),
                            _ => Err(ServerError::Stopped),
                        };
                    }
                }
                ended = &mut task => return match ended {
                    Ok(Err(e)) => Err(e),
                    _ => Err(ServerError::Stopped),
                },
            }
            Ok(ServerHandle {
                metrics: running.metrics,
                metrics_addr: running.metrics_addr,
                stop,
                task,
            })
        }
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
    if let Some(group) = &config.share_group
        && !presence::is_valid_share_group(group)
    {
        return Err(ServerError::ShareGroup(group.clone()));
    }
    let mut shutdown = Box::pin(shutdown);
    // The metrics endpoint and its probes first: /healthz answers while the node waits for
    // Redis or the broker (a liveness probe must not restart it meanwhile), /readyz once it is
    // connected and subscribed.
    let metrics = Arc::new(Metrics::default());
    metrics.store_call(true, 0);
    let mut metrics_addr = None;
    let metrics_task = match config.metrics_addr {
        Some(addr) => {
            let listener = metrics::bind(addr)
                .await
                .map_err(|source| ServerError::Metrics { addr, source })?;
            metrics_addr = listener.local_addr().ok();
            info!(addr = ?metrics_addr, "serving Prometheus metrics at /metrics, probes at /healthz and /readyz");
            Some(tokio::spawn(metrics::serve(listener, metrics.clone())))
        }
        None => None,
    };
    // Nodes on one Redis share the SCAN token secret (unless one is configured), so that any
    // node continues a scan another began.
    let redis = match &config.store {
        StoreConfig::Memory => None,
        StoreConfig::Redis(redis) => {
            let store_error = |source| ServerError::Store {
                url: redis.display(),
                source,
            };
            let waited = wait_for(
                &format!("Redis at {}", redis.display()),
                config.fail_fast,
                &mut shutdown,
                RedisStoreError::is_refusal,
                || RedisStore::connect(redis, config.quotas),
            )
            .await
            .map_err(store_error)?;
            let Some(store) = waited else {
                return Ok(()); // Stopped while waiting.
            };
            let secret = match config.scan_token_key {
                Some(key) => key,
                None => store
                    .shared_secret(mqstore_net::random_bytes::<32>())
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
            (None, key) => key.unwrap_or_else(mqstore_net::random_bytes::<32>),
        },
        scan_token_seed: mqstore_net::random_bytes::<16>(),
        registration_lease_ms: config.registration_lease.map(|d| d.as_millis() as u64),
        standard_registration_lease_ms: config
            .standard_registration_lease
            .map(|d| d.as_millis() as u64),
        keyspace_events: config.keyspace_events,
        ..EngineConfig::new(config.node_id.clone())
    };
    let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
    let done_tx_disk = done_tx.clone();
    let done_tx_commands = done_tx.clone();
    let minute_ms = config.jobs_minute.as_millis() as u64;
    let jobs = config.jobs.then(|| match &redis {
        None => JobsService::Local,
        Some((store, _)) => JobsService::Shared(SharedJobs {
            store: Arc::new(RedisJobs::new(store.clone())),
            done: done_tx.clone(),
            minute_ms,
            in_flight: 0,
            shadows_in_flight: Default::default(),
            ticking: 0,
            busy: false,
            next_tick: 0,
            // Brokers such as mosquitto deliver no `$aws/...` message to a shared
            // subscription: with a share group, one node at a time listens to the device API.
            listener: config.share_group.is_some().then(|| Listener {
                token: format!("{}/{:016x}", config.node_id, mqstore_net::random_u64()),
                leader: false,
                claiming: false,
                next_claim: 0,
                held_until: 0,
                releasing: false,
            }),
        }),
    });
    if matches!(jobs, Some(JobsService::Local)) && config.share_group.is_some() {
        warn!(
            "jobs on the memory store with --share-group: each node keeps jobs of its own, and \
             brokers such as mosquitto deliver no device API message ($aws/...) to a shared \
             subscription; share jobs between nodes with --store redis://…"
        );
    }
    let command_registry = match (&redis, config.commands) {
        (Some((store, _)), true) => Some(RedisRegistry::new(store.clone())),
        _ => None,
    };
    if redis.is_some() && config.durability.is_some() {
        return Err(ServerError::DiskWithRedis);
    }
    if !(config.state_store || config.jobs || config.commands) {
        return Err(ServerError::NothingToServe);
    }
    let command_service = || server::commands::ServiceConfig {
        node_id: config.node_id.clone(),
        client_id: config.client_id.clone(),
        profiles: config.command_profiles.clone(),
        events: true,
        random_id: mqstore_net::random_bytes::<16>,
    };
    let state = match redis {
        None => {
            let now = now_ms().saturating_add_signed(config.clock_offset_ms);
            let opening = Instant::now();
            let node_config = server::NodeConfig {
                engine: engine_config,
                quotas: config.quotas,
                jobs: config.jobs.then_some(server::JobsConfig {
                    minute_ms,
                    rollout_batch: ROLLOUT_BATCH,
                }),
                durability: config.durability.clone(),
                // Commands with their registry in memory: the core node's own.
                commands: config.commands.then(command_service),
            };
            let (node, opened) = server::Node::open(node_config, now).map_err(|e| match e {
                server::NodeError::NodeId(..) => ServerError::NodeId(config.node_id.clone()),
                server::NodeError::Disk(e) => ServerError::Disk(e),
            })?;
            if let (Some(opened), Some(durability)) = (opened, &config.durability) {
                let recovered = &opened.recovered;
                if let Some(offset) = recovered.torn_at {
                    warn!(
                        path = %opened.path.display(),
                        offset,
                        "the data file ended in a record cut off by a crash (never acknowledged): \
                         recovered up to the last complete record"
                    );
                }
                info!(
                    path = %opened.path.display(),
                    fsync = ?durability.fsync,
                    keys = recovered.keys,
                    records = recovered.records,
                    expired_while_down = recovered.expired,
                    took_ms = opening.elapsed().as_millis() as u64,
                    "state store on disk"
                );
            }
            State::Local(Box::new(node))
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
    if let State::Redis(_, remote) = &state {
        metrics.watch_replication(remote.store.replication().clone());
    }
    if config.commands && command_registry.is_none() && config.share_group.is_some() {
        warn!(
            "commands on the memory store with --share-group: an answer read on the topic of a \
             topic profile (DJI-style devices) reaches only the node that sent the command if \
             that node read it; share the registry with --store redis://…"
        );
    }
    // The jobs listener's election covers the command answer topics on `$…` too.
    let elected = matches!(
        &jobs,
        Some(JobsService::Shared(SharedJobs {
            listener: Some(_),
            ..
        }))
    );
    let mut pipe = PipeReader::default();
    let commands = match command_registry {
        None => None,
        Some(registry) => {
            // Answers other nodes read for this node's callers: heard before any command goes.
            let (ready, listening) = tokio::sync::oneshot::channel();
            let done = done_tx_commands.clone();
            let listening_task = registry.listen(
                &config.node_id,
                move |record| {
                    let forwarded = CommandsDone::Forwarded(Box::new(record));
                    let _ = done.send(Done::Commands(forwarded));
                },
                ready,
            );
            let heard = listening
                .await
                .unwrap_or_else(|_| Err(RedisStoreError::Reply("the pub/sub task ended".into())));
            if let Err(source) = heard {
                listening_task.abort();
                let url = match &config.store {
                    StoreConfig::Redis(redis) => redis.display(),
                    StoreConfig::Memory => String::new(),
                };
                return Err(ServerError::Store { url, source });
            }
            let answered = |token, answer| Done::Commands(CommandsDone::Answered(token, answer));
            let (calls, reader) =
                RegistryCalls::open(registry, done_tx_commands, answered, Done::PipeOpened).await;
            pipe = reader;
            Some(RemoteCommands {
                service: server::commands::Service::remote(command_service()),
                calls,
                elected_filters: match elected {
                    true => config
                        .command_profiles
                        .answer_filters()
                        .into_iter()
                        .filter(|f| f.starts_with('$'))
                        .collect(),
                    false => Vec::new(),
                },
                listening: listening_task,
            })
        }
    };
    let (subscribed, subscribed_rx) = tokio::sync::watch::channel(false);
    started(Running {
        metrics: metrics.clone(),
        metrics_addr,
        subscribed: subscribed_rx,
    });

    // A new epoch at every start: clients that see it change register again (see
    // `mqstore_core::presence`). The Will says "offline" if the node vanishes.
    let epoch = format!("{:016x}", mqstore_net::random_u64());
    let presence_topic = topics::server_presence_topic(&config.node_id);
    let subscription = match &config.share_group {
        Some(group) => Subscription::Shared(group.clone()),
        None => Subscription::Every,
    };
    let services = Services {
        state_store: config.state_store,
        jobs: config.jobs,
        commands: config.commands,
    };
    // A node without the state store says only what other nodes read: how it subscribes and
    // what it serves (clients pass such a node by).
    let presence = |online| ServerPresence {
        epoch: epoch.clone(),
        online,
        max_packet_size: config.state_store.then_some(config.broker.max_packet_size),
        registration_lease_ms: config
            .registration_lease
            .filter(|_| config.state_store)
            .map(|d| d.as_millis() as u64),
        subscription: Some(subscription.clone()),
        services: Some(services),
    };
    let mut options = config.broker.options(&config.client_id);
    options.set_last_will(LastWill::new(
        presence_topic.clone(),
        presence(false).to_bytes(),
        QoS::AtLeastOnce,
        true,
        None,
    ));
    let (client, eventloop) = rumqttc::v5::AsyncClient::new(options, REQUEST_QUEUE);
    // Identified requests (in each client's own tree) always; the standard, shared request
    // topic (what the Azure SDK clients use: they name themselves in `__srcId`, which nothing
    // checks) unless identities are required.
    let mut invoke_filters = Vec::new();
    // Other nodes' presence: whether one answers the requests this node answers.
    let mut presence_filters = vec![topics::SERVER_PRESENCE_FILTER];
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
            // Device shadows, served by the jobs service from its store.
            invoke_filters.extend(shadow::REQUEST_FILTERS);
        }
        invoke_filters.push(OPERATOR_TOPIC);
    }
    // Brokers such as mosquitto deliver no `$…` topic to a shared subscription: those (the
    // jobs device API and the shadows of a node with its own jobs) are subscribed plainly.
    let mut invoke_filters: Vec<String> = invoke_filters
        .into_iter()
        .map(|filter| match &config.share_group {
            Some(group) if !filter.starts_with('$') => format!("$share/{group}/{filter}"),
            _ => filter.to_owned(),
        })
        .collect();
    if config.commands {
        // The command service: its requests and the topic profiles' answers (shared, but
        // mosquitto delivers no `$…` topic to a shared subscription: every node reads those,
        // the registry settling each command once, or the elected one), and the answers of
        // MQTT 5 devices, which come to this connection's own tree.
        let service = [wire::INVOKE_TOPIC, wire::STATUS_TOPIC, DEFINITIONS_TOPIC];
        let answers = config.command_profiles.answer_filters();
        let elected = commands
            .as_ref()
            .map_or(&[][..], |c| &c.elected_filters[..]);
        for filter in service.iter().map(|f| f.to_string()).chain(answers) {
            if elected.contains(&filter) {
                continue;
            }
            invoke_filters.push(match &config.share_group {
                Some(group) if !filter.starts_with('$') => format!("$share/{group}/{filter}"),
                _ => filter,
            });
        }
        invoke_filters.push(format!("clients/{}/#", config.client_id));
    }
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
        commands,
        probe_topic: topics::probe_topic(&config.client_id),
        peers: Peers::new(config.node_id.clone(), subscription.clone(), services),
        presence: Some(Publish {
            topic: presence_topic.clone(),
            payload: presence(true).to_bytes(),
            qos: 1,
            properties: Default::default(),
        }),
        offline: Some(Publish {
            topic: presence_topic,
            payload: presence(false).to_bytes(),
            qos: 1,
            properties: Default::default(),
        }),
        protocol_errors: 0,
        reports_no_subscribers: None,
        max_packet_size: config.broker.max_packet_size,
        own_max_packet_size: config.broker.max_packet_size,
        state,
        clock_offset_ms: config.clock_offset_ms,
        started: std::time::Instant::now(),
        outbox: Outbox::new(client),
        metrics: metrics.clone(),
        invoke_filters,
        presence_filters,
        unsubacks: 0,
        subacks: 0,
        out: Vec::new(),
        unacked: Default::default(),
        max_pending_answers: config.max_pending_answers,
        stop: Stop::Running,
        disk_done: done_tx_disk,
        subscribed,
        fatal: None,
        broker: format!("{}:{}", config.broker.host, config.broker.port),
        fail_fast: config.fail_fast,
        start_failures: Some(0),
    };
    let mut signals = Signals {
        shutdown,
        fired: false,
        grace: Box::pin(tokio::time::sleep(Duration::ZERO)),
        store_done: done_rx,
        pipe,
    };
    Connection::new(eventloop)
        .run(&mut signals, &mut node)
        .await;
    let closed = match &mut node.state {
        State::Local(local) => local.close(),
        State::Redis(..) => Ok(()),
    };
    if let Some(commands) = &node.commands {
        commands.listening.abort();
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

/// Waits for what the node needs at start (`what`: Redis, the broker): `attempt` again, with
/// the backoff of a connection loss, while it fails — unless `fail_fast`, or the failure is
/// one that waiting cannot mend (`permanent`: a refused password). Says what it waits for at
/// the first failure and every tenth. `Ok(None)` when `shutdown` came first.
async fn wait_for<T, E: std::fmt::Display, F: Future<Output = Result<T, E>>>(
    what: &str,
    fail_fast: bool,
    shutdown: &mut std::pin::Pin<Box<impl Future<Output = ()>>>,
    permanent: impl Fn(&E) -> bool,
    mut attempt: impl FnMut() -> F,
) -> Result<Option<T>, E> {
    let mut failures = 0u32;
    loop {
        let tried = tokio::select! {
            tried = attempt() => tried,
            () = shutdown.as_mut() => return Ok(None),
        };
        let error = match tried {
            Ok(done) => {
                if failures > 0 {
                    info!(tries = failures + 1, "{what} answers: starting");
                }
                return Ok(Some(done));
            }
            Err(e) if fail_fast || permanent(&e) => return Err(e),
            Err(e) => e,
        };
        failures += 1;
        let wait = mqstore_net::host::backoff(failures);
        if failures == 1 || failures.is_multiple_of(10) {
            warn!(%error, retry_in = ?wait, tries = failures, "waiting for {what} (not reachable yet; --fail-fast exits instead)");
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shutdown.as_mut() => return Ok(None),
        }
    }
}
