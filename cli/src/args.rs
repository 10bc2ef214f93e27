//! The command line: every subcommand and option, as clap reads them, and the parsers of
//! option values.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::call::{CallArgs, ValueArgs};
use crate::command::CommandCommand;
use crate::jobs::{GroupsCommand, JobsCommand, TemplatesCommand};
use clap::{Args, Parser, Subcommand};
use mqstore_core::engine::AccessRule;
use mqstore_core::hlc::Hlc;
use mqstore_core::store::Quotas;
use mqstore_server::StoreConfig;

#[derive(Parser)]
#[command(
    name = "mqstore",
    version,
    about = "State store for MQTT 5 device fleets",
    after_help = "Exit codes: 0 done; 1 not found or not applied; 2 usage; 3 the state store \
                  or the jobs service refused the request; 4 the broker or the server could not be reached or did \
                  not answer; 5 the broker refused the connection."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) broker: BrokerArgs,
    #[command(flatten)]
    pub(crate) call: CallArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// How to reach the broker: every command takes these, before or after its name.
#[derive(Args)]
#[command(next_help_heading = "Broker connection")]
pub(crate) struct BrokerArgs {
    /// The MQTT 5 broker's host.
    #[arg(long, global = true, env = "MQSTORE_HOST", default_value = "127.0.0.1")]
    pub(crate) host: String,
    /// The broker's port.
    #[arg(long, global = true, env = "MQSTORE_PORT", default_value_t = 1883)]
    pub(crate) port: u16,
    /// User name to log in to the broker with.
    #[arg(long, global = true, env = "MQSTORE_USERNAME")]
    pub(crate) username: Option<String>,
    /// Password to log in to the broker with. Prefer the environment variable: command lines
    /// are visible to other users.
    #[arg(long, global = true, env = "MQSTORE_PASSWORD", hide_env_values = true)]
    pub(crate) password: Option<String>,
    /// The MQTT client id (default: mqstore-server-{node id} or mqstore-cli-{random}).
    #[arg(long, global = true, env = "MQSTORE_CLIENT_ID")]
    pub(crate) client_id: Option<String>,
    /// Connect to the broker with TLS, trusting the authorities in --ca-file, or the system's
    /// trusted CAs without it.
    #[arg(long, global = true, env = "MQSTORE_TLS")]
    pub(crate) tls: bool,
    /// PEM file of the certificate authorities that may sign the broker's certificate
    /// (default: the system's, from SSL_CERT_FILE or its CA bundle).
    #[arg(long, global = true, env = "MQSTORE_CA_FILE", requires = "tls")]
    pub(crate) ca_file: Option<PathBuf>,
    /// PEM client certificate (chain), for brokers that authenticate clients by certificate.
    #[arg(long, global = true, env = "MQSTORE_CERT_FILE", requires = "key_file")]
    pub(crate) cert_file: Option<PathBuf>,
    /// PEM private key of --cert-file.
    #[arg(long, global = true, env = "MQSTORE_KEY_FILE", requires = "cert_file")]
    pub(crate) key_file: Option<PathBuf>,
    /// Password of --key-file when it is encrypted (PKCS#8, as `openssl pkcs8 -topk8` writes
    /// it). Prefer the environment variable: command lines are visible to other users.
    // Not `requires = "key_file"`: clap checks that of a global option set from the environment
    // in every subcommand, where the key file given before it is not seen. `TlsConfig` refuses a
    // password without a key instead.
    #[arg(
        long,
        global = true,
        env = "MQSTORE_KEY_PASSWORD",
        hide_env_values = true
    )]
    pub(crate) key_password: Option<String>,
    /// Largest MQTT packet to send or accept, in bytes.
    #[arg(long, global = true, default_value_t = 16 * 1024 * 1024)]
    pub(crate) max_packet_size: u32,
}

/// The fencing token a write presents.
#[derive(Args)]
pub(crate) struct FencingArgs {
    /// Fencing token: the version returned when the lock guarding this key was taken (an HLC,
    /// `wall:counter:node`, as `mqstore lock` prints it).
    #[arg(long, value_parser = parse_hlc)]
    pub(crate) fencing_token: Option<Hlc>,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run the state store next to the broker.
    Serve(Box<ServeArgs>),
    /// Print a key's value.
    Get {
        key: String,
        /// Write the value's exact bytes with no newline (binary values, pipes).
        #[arg(long, conflicts_with = "output")]
        raw: bool,
        /// Write the value's exact bytes to this file instead of standard output.
        #[arg(long, short = 'o')]
        output: Option<PathBuf>,
    },
    /// Set a key.
    Set {
        key: String,
        #[command(flatten)]
        value: ValueArgs,
        /// Only if the key does not exist.
        #[arg(long, conflicts_with = "nex")]
        nx: bool,
        /// Only if the key does not exist or already holds this value (lease renewal).
        #[arg(long)]
        nex: bool,
        /// Expire the key after this many milliseconds (at least 1).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        px: Option<u64>,
        /// Ask the server to keep the key durably (`aio-persistence`).
        #[arg(long)]
        persist: bool,
        #[command(flatten)]
        fencing: FencingArgs,
    },
    /// Delete a key.
    Del {
        key: String,
        #[command(flatten)]
        fencing: FencingArgs,
    },
    /// Delete a key only if it holds this value.
    Vdel {
        key: String,
        #[command(flatten)]
        value: ValueArgs,
        #[command(flatten)]
        fencing: FencingArgs,
    },
    /// List keys matching a pattern (`*`, `?`, `[a-z]`, `[!a-z]`).
    Scan { pattern: String },
    /// Hold a lock (a lease renewed in the background), then run a command, or wait for
    /// Ctrl-C; release it afterwards. The command gets the fencing token in
    /// MQSTORE_FENCING_TOKEN.
    Lock {
        key: String,
        /// The lease's time to live in milliseconds; it is renewed every third of it.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
        ttl_ms: u64,
        /// Seconds to wait for the lock (default: forever).
        #[arg(long)]
        wait: Option<u64>,
        /// The command to run while holding the lock.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Measure the running server against an echo responder through the same broker.
    Bench {
        /// Requests in flight, one run per value.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 16, 256])]
        in_flight: Vec<usize>,
        /// Seconds each target is measured at each level.
        #[arg(long, default_value_t = 5)]
        duration: u64,
        /// Turns each target takes at each level, alternating (spreads the machine's noise
        /// over both).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
        rounds: u32,
        /// Client connections the requests share.
        #[arg(long, default_value_t = 16)]
        connections: usize,
        /// Keys the load spreads over.
        #[arg(long, default_value_t = 1000)]
        keys: usize,
        /// Bytes per value.
        #[arg(long, default_value_t = 64)]
        value_size: usize,
        /// Percent of SETs (the rest are GETs).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
        set_percent: u8,
    },
    /// Print every change of the keys until interrupted. Changes not heard of (several server
    /// nodes publish independently) are said on stderr before the next one (`"gap": true`
    /// with --json).
    Watch {
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Jobs: create, cancel, delete, list, describe (the operator API), and watch a thing's
    /// notifications.
    Jobs {
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// Thing groups, which jobs target as thinggroup/NAME: create, delete, describe, list,
    /// add and remove things, list a group's things.
    Groups {
        #[command(subcommand)]
        command: GroupsCommand,
    },
    /// Job templates, which `jobs create --template` starts from.
    Templates {
        #[command(subcommand)]
        command: TemplatesCommand,
    },
    /// Device shadows (AWS IoT's Device Shadow API): get, update, delete, and watch a
    /// shadow's deltas and documents.
    Shadow {
        #[command(subcommand)]
        command: crate::shadow::ShadowCommand,
    },
    /// Commands to devices: send one and await the answer, read a command's status, watch
    /// every command's status changes.
    #[command(name = "command")]
    Devices {
        #[command(subcommand)]
        command: CommandCommand,
    },
    /// The server nodes on the broker, as their retained presence says: each one's state,
    /// share group, limits and epoch, and the pairs that would both answer one request (outside
    /// one share group). Exit 0 when a node is online, 1 when none is.
    Nodes {
        /// Nodes that stopped or vanished too (their presence stays retained on the broker).
        #[arg(long)]
        all: bool,
    },
    /// Ask a running `mqstore serve` whether it is ready (its /readyz probe; /healthz with
    /// --live): exit 0 if so, 1 if not (the reason printed), 4 if nothing answers. The health
    /// check of the container image, which has no shell and no curl.
    Health {
        /// The server's --metrics address (0.0.0.0 or [::] mean this machine).
        #[arg(long, env = "MQSTORE_METRICS", default_value = "127.0.0.1:9464")]
        metrics: String,
        /// Only whether the process answers (/healthz, the liveness probe), not whether it is
        /// connected to the broker and the store.
        #[arg(long)]
        live: bool,
    },
}

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// This node's id: the node part of every version (no ':'). Generated if absent.
    #[arg(long, env = "MQSTORE_NODE_ID")]
    pub(crate) node_id: Option<String>,
    /// Share requests with other nodes through `$share/{group}/...`.
    #[arg(long, env = "MQSTORE_SHARE_GROUP")]
    pub(crate) share_group: Option<String>,
    /// Most keys the store holds.
    #[arg(long)]
    pub(crate) max_keys: Option<u64>,
    /// Most bytes of keys and values the store holds.
    #[arg(long)]
    pub(crate) max_bytes: Option<u64>,
    /// Most KEYNOTIFY registrations in all; more are refused with "the quota has been
    /// exceeded".
    #[arg(long, default_value_t = Quotas::SERVER_DEFAULT.max_watches.unwrap_or(u64::MAX))]
    pub(crate) max_watches: u64,
    /// Seconds an identified client's registrations last after its last KEYNOTIFY (mqstore
    /// clients renew them every third of it); 0: until the client is known to be gone.
    #[arg(long, default_value_t = mqstore_server::DEFAULT_REGISTRATION_LEASE.as_secs())]
    pub(crate) registration_lease: u64,
    /// Seconds the registrations of clients on the standard topics last after their last
    /// KEYNOTIFY. They do not renew (the Azure SDK clients): default, until they are known to be
    /// gone.
    #[arg(long)]
    pub(crate) standard_registration_lease: Option<u64>,
    /// No state store: serve jobs and commands only, beside a broker whose mqstore plugin
    /// serves the state store (bindings-mosquitto/).
    #[arg(long)]
    pub(crate) no_state_store: bool,
    /// Serve only the state store: no jobs service ($aws/things/+/jobs/#, the operator API).
    #[arg(long)]
    pub(crate) no_jobs: bool,
    /// No command service (mqstore/commands/v1/...).
    #[arg(long)]
    pub(crate) no_commands: bool,
    /// Do not publish keyspace events (mqstore/statestore/v1/keyspace/created and /deleted,
    /// QoS 0, the key as payload: how the dashboard learns of new keys). They name every
    /// key made or deleted: restrict who may subscribe in the broker's ACL, or turn them off.
    #[arg(long)]
    pub(crate) no_keyspace_events: bool,
    /// Device profiles for commands (JSON, see docs/guide/commands.md), besides the built-in mqtt5, dji,
    /// iothub and aws.
    #[arg(long)]
    pub(crate) command_profiles: Option<PathBuf>,
    /// Most KEYNOTIFY registrations of one client.
    #[arg(long, default_value_t = Quotas::SERVER_DEFAULT.max_watches_per_client.unwrap_or(u64::MAX))]
    pub(crate) max_watches_per_client: u64,
    /// An access rule, "CLIENTS KEYS PERMS" (patterns in the SCAN dialect, PERMS one of r, w,
    /// rw, -), e.g. 'sensor-* sensors/* rw'. Repeatable; the first rule matching a client and
    /// key decides, and with any rules given a request no rule matches is refused.
    #[arg(long = "access-rule", value_parser = parse_rule)]
    pub(crate) access_rules: Vec<AccessRule>,
    /// Take only identified requests (each client publishes in its own clients/{clientId}/
    /// tree, which the broker's ACL guards; see docs/mosquitto-acl.conf): access rules then
    /// hold against clients that lie about who they are. The standard request topic (used by
    /// the Azure SDK clients) is not served.
    #[arg(long, env = "MQSTORE_REQUIRE_IDENTITY")]
    pub(crate) require_identity: bool,
    /// Answer requests that are not identified only on response topics starting with this
    /// (repeatable; default: any topic, so the server publishes wherever a request asks).
    #[arg(long = "response-topic-prefix")]
    pub(crate) response_topic_prefixes: Vec<String>,
    /// 64 hex digits: the secret SCAN continuation tokens are sealed with, so that nodes
    /// sharing a store continue each other's scans (default: a random one per process).
    #[arg(long, env = "MQSTORE_SCAN_TOKEN_SECRET", hide_env_values = true, value_parser = parse_secret)]
    pub(crate) scan_token_secret: Option<[u8; 32]>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9464), with the probes
    /// /healthz (the process answers) and /readyz (connected to the broker and the store).
    #[arg(long, env = "MQSTORE_METRICS")]
    pub(crate) metrics: Option<SocketAddr>,
    /// Exit when Redis or the broker cannot be reached at start, instead of waiting for them
    /// (with backoff, saying what it waits for) as after a connection loss.
    #[arg(long, env = "MQSTORE_FAIL_FAST")]
    pub(crate) fail_fast: bool,
    /// Where the state store's data lives: `memory` (this process; nothing survives a
    /// restart), or Redis shared by every node: redis://[user:pass@]host:port[/db],
    /// rediss://… (TLS), redis-cluster://host:port,host:port,… (a Redis Cluster's seed nodes),
    /// redis-sentinel://host:port,host:port,…/PRIMARY[/db] (the sentinels of a primary they
    /// fail over; rediss-sentinel:// for TLS).
    #[arg(
        long,
        env = "MQSTORE_STORE",
        default_value = "memory",
        hide_env_values = true
    )]
    pub(crate) store: StoreConfig,
    /// On Redis: answer a write only once this many replicas have it (Redis WAIT); a write
    /// not confirmed within --redis-wait-timeout is answered with an error (status 503), never
    /// OK. 0: answer once the primary applied it (a failover may lose it).
    #[arg(long, env = "MQSTORE_REDIS_WAIT_REPLICAS", default_value_t = 0)]
    pub(crate) redis_wait_replicas: u32,
    /// On rediss://: PEM file of the CAs that sign Redis's certificates, instead of the
    /// system's trusted ones.
    #[arg(long, env = "MQSTORE_REDIS_CA_FILE")]
    pub(crate) redis_ca_file: Option<std::path::PathBuf>,
    /// On rediss://: PEM certificate (chain) this node presents to Redis (which asks for one
    /// by default once its TLS is on: tls-auth-clients yes).
    #[arg(long, env = "MQSTORE_REDIS_CERT_FILE", requires = "redis_key_file")]
    pub(crate) redis_cert_file: Option<std::path::PathBuf>,
    /// PEM private key of --redis-cert-file.
    #[arg(long, env = "MQSTORE_REDIS_KEY_FILE", requires = "redis_cert_file")]
    pub(crate) redis_key_file: Option<std::path::PathBuf>,
    /// Password of --redis-key-file when it is encrypted (PKCS#8). Prefer the environment
    /// variable: command lines are visible to other users.
    #[arg(long, env = "MQSTORE_REDIS_KEY_PASSWORD", hide_env_values = true)]
    pub(crate) redis_key_password: Option<String>,
    /// Milliseconds a write waits for --redis-wait-replicas.
    #[arg(long, env = "MQSTORE_REDIS_WAIT_TIMEOUT", default_value_t = mqstore_server::redis_store::DEFAULT_WAIT_TIMEOUT.as_millis() as u64)]
    pub(crate) redis_wait_timeout: u64,
    /// Drop requests (unapplied; callers time out) while this many answers wait for the
    /// broker: bounds memory when the broker takes publishes more slowly than requests arrive.
    #[arg(long, default_value_t = mqstore_server::DEFAULT_MAX_PENDING_ANSWERS)]
    pub(crate) max_pending_answers: usize,
    /// Keep the state store on disk in this directory (created if missing): every key
    /// survives restarts and crashes, with its version, fencing token and expiry (memory
    /// store only). See docs/guide/durability.md.
    #[arg(long, env = "MQSTORE_DATA_DIR")]
    pub(crate) data_dir: Option<std::path::PathBuf>,
    /// With --data-dir: `always` (an answer is sent once its write is on disk; writes in
    /// flight share one fsync) or `everysec` (synced about once a second: a power loss loses
    /// at most about the last second; a crash of mqstore alone loses nothing).
    #[arg(long, default_value = "everysec", requires = "data_dir")]
    pub(crate) fsync: mqstore_core::disk::Fsync,
}

pub(crate) fn parse_secret(text: &str) -> Result<[u8; 32], String> {
    let bytes = mqstore_core::topics::from_hex(&text.to_ascii_uppercase())
        .ok_or("expected 64 hex digits (e.g. from `openssl rand -hex 32`)")?;
    bytes
        .try_into()
        .map_err(|_| "expected 64 hex digits (32 bytes)".into())
}

pub(crate) fn parse_rule(text: &str) -> Result<AccessRule, String> {
    text.parse()
}

pub(crate) fn parse_hlc(text: &str) -> Result<Hlc, String> {
    Hlc::parse(text)
        .map_err(|e| format!("{e} (expected wall:counter:node, e.g. 1700000000000:0:node-1)"))
}
