//! What `mqstore serve` is told: [`ServerConfig`], where the state lives ([`StoreConfig`]),
//! and why it stopped ([`ServerError`]).

use std::net::SocketAddr;
use std::time::Duration;

use crate::redis_store::{RedisConfig, RedisStoreError};
use mqstore_core::disk::{DiskError, Durability};
use mqstore_core::engine::AccessRules;
use mqstore_core::store::Quotas;
use mqstore_net::BrokerConfig;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The broker to serve through.
    pub broker: BrokerConfig,
    /// The MQTT client id of the server's connection.
    pub client_id: String,
    /// The engine's node id (the node part of every version).
    pub node_id: String,
    /// Subscribe through `$share/{group}/…` so that several nodes split the requests.
    pub share_group: Option<String>,
    /// Limits on keys, bytes and registrations.
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
    /// Publish the state store's keyspace events (a key made or gone; see
    /// [`mqstore_core::topics::KEYSPACE_FILTER`]).
    pub keyspace_events: bool,
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
    /// Exit when Redis or the broker cannot be reached at start (`--fail-fast`), instead of
    /// waiting for them with backoff as after a connection loss (the default: started in any
    /// order, the node serves once they are there).
    pub fail_fast: bool,
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
            keyspace_events: true,
            jobs: true,
            jobs_minute: Duration::from_secs(60),
            commands: true,
            command_profiles: mqstore_core::commands::Profiles::built_in(),
            max_pending_answers: DEFAULT_MAX_PENDING_ANSWERS,
            store: StoreConfig::Memory,
            clock_offset_ms: 0,
            durability: None,
            fail_fast: false,
        }
    }
}

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid node id {0:?}: it must not contain ':'")]
    /// The node id contains `:`.
    NodeId(String),
    #[error("the server task stopped before it started")]
    /// The server task ended before it was ready.
    Stopped,
    #[error("cannot serve metrics on {addr}: {source}")]
    /// The metrics address could not be bound.
    Metrics {
        /// The address asked for.
        addr: SocketAddr,
        /// Why it could not be bound.
        source: std::io::Error,
    },
    #[error(
        "cannot use the Redis store at {url}: {source} ({})",
        store_hint(source)
    )]
    /// The Redis store could not be used at start.
    Store {
        /// The store's address (its password hidden).
        url: String,
        /// What Redis said.
        source: RedisStoreError,
    },
    #[error(
        "cannot reach the broker at {addr}: {error} (is it running there, and are --host and --port right?)"
    )]
    /// The broker could not be reached at start (with `--fail-fast`).
    Broker {
        /// The broker's host and port.
        addr: String,
        /// Why the connection failed.
        error: String,
    },
    #[error("{0}")]
    /// The data directory could not be read or written.
    Disk(#[from] DiskError),
    #[error(
        "--data-dir keeps the memory store on disk; with --store redis://… the state is in Redis \
         (use Redis's own persistence, appendonly yes)"
    )]
    /// `--data-dir` was given with a Redis store.
    DiskWithRedis,
    #[error(
        "invalid share group {0:?}: it must not be empty, nor contain '/', '+', '#' (MQTT's \
         rule), '=', spaces or control characters"
    )]
    /// `--share-group` cannot name a share group.
    ShareGroup(String),
    #[error("--no-state-store with --no-jobs and --no-commands leaves nothing to serve")]
    /// Every service was switched off.
    NothingToServe,
}

/// The default of [`ServerConfig::registration_lease`].
pub const DEFAULT_REGISTRATION_LEASE: Duration = Duration::from_secs(60);

/// The default of [`ServerConfig::max_pending_answers`].
pub const DEFAULT_MAX_PENDING_ANSWERS: usize = 10_000;

/// What to check when the Redis store cannot be used at start: its TLS files when TLS is what
/// failed, else its address and password.
fn store_hint(source: &RedisStoreError) -> &'static str {
    let said = source.to_string();
    // rustls's words: "invalid peer certificate: UnknownIssuer", "received fatal alert:
    // CertificateRequired", "HandshakeFailure"; the redis crate's "TLS …".
    if [
        "certificate",
        "Certificate",
        "UnknownIssuer",
        "alert",
        "Handshake",
        "TLS",
    ]
    .iter()
    .any(|word| said.contains(word))
    {
        "TLS: --redis-ca-file names the CA that signed Redis's certificate, --redis-cert-file \
         and --redis-key-file the certificate Redis asks of its clients"
    } else {
        "is Redis running there, and are the address and password right?"
    }
}
