//! `mqstore`: run the state store server, or talk to one, in the spirit of redis-cli.
//!
//! Exit codes: 0 done; 1 a GET found nothing, or a conditional write was not applied; 2 usage;
//! 3 the state store refused the request (`-ERR`); 4 the broker or server could not be reached
//! or did not answer in time; 5 the broker refused the connection (CONNACK reason code).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use command::{CommandCall, CommandCommand};
use jobs::{JobsCall, JobsCommand};
use mqstore_core::client::ClientError;
use mqstore_core::codec::Condition;
use mqstore_core::disk::Durability;
use mqstore_core::engine::{AccessRule, AccessRules};
use mqstore_core::hlc::Hlc;
use mqstore_core::store::Quotas;
use mqstore_net::bench::{self, BenchConfig};
use mqstore_net::client::{Client, ClientOptions, Deleted, KeyChange, SetOptions};
use mqstore_net::lease::Lease;
use mqstore_net::server::{ServerConfig, StoreConfig, serve};
use mqstore_net::{BrokerConfig, TlsConfig};
use serde_json::json;

mod command;
mod jobs;
mod progress;

#[derive(Parser)]
#[command(
    name = "mqstore",
    version,
    about = "State store for MQTT 5 device fleets",
    after_help = "Exit codes: 0 done; 1 not found or not applied; 2 usage; 3 the state store \
                  or the jobs service refused the request; 4 the broker or the server could not be reached or did \
                  not answer; 5 the broker refused the connection."
)]
struct Cli {
    #[command(flatten)]
    broker: BrokerArgs,
    #[command(flatten)]
    call: CallArgs,
    #[command(subcommand)]
    command: Command,
}

/// How to reach the broker: every command takes these, before or after its name.
#[derive(Args)]
#[command(next_help_heading = "Broker connection")]
struct BrokerArgs {
    /// The MQTT 5 broker's host.
    #[arg(long, global = true, env = "MQSTORE_HOST", default_value = "127.0.0.1")]
    host: String,
    /// The broker's port.
    #[arg(long, global = true, env = "MQSTORE_PORT", default_value_t = 1883)]
    port: u16,
    /// User name to log in to the broker with.
    #[arg(long, global = true, env = "MQSTORE_USERNAME")]
    username: Option<String>,
    /// Password to log in to the broker with. Prefer the environment variable: command lines
    /// are visible to other users.
    #[arg(long, global = true, env = "MQSTORE_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// The MQTT client id (default: mqstore-server-{node id} or mqstore-cli-{random}).
    #[arg(long, global = true, env = "MQSTORE_CLIENT_ID")]
    client_id: Option<String>,
    /// Connect to the broker with TLS, trusting the authorities in --ca-file.
    #[arg(long, global = true, env = "MQSTORE_TLS")]
    tls: bool,
    /// PEM file of the certificate authorities that may sign the broker's certificate.
    #[arg(long, global = true, env = "MQSTORE_CA_FILE", requires = "tls")]
    ca_file: Option<PathBuf>,
    /// PEM client certificate (chain), for brokers that authenticate clients by certificate.
    #[arg(long, global = true, env = "MQSTORE_CERT_FILE", requires = "key_file")]
    cert_file: Option<PathBuf>,
    /// PEM private key of --cert-file.
    #[arg(long, global = true, env = "MQSTORE_KEY_FILE", requires = "cert_file")]
    key_file: Option<PathBuf>,
    /// Largest MQTT packet to send or accept, in bytes.
    #[arg(long, global = true, default_value_t = 16 * 1024 * 1024)]
    max_packet_size: u32,
}

/// How client commands wait and print: before or after the command's name.
#[derive(Args, Clone, Copy)]
#[command(
    next_help_heading = "Client commands (get, set, del, vdel, scan, watch, lock, jobs, command)"
)]
struct CallArgs {
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// How long to wait for each answer from the server: seconds, or a duration such as
    /// 500ms, 10s, 2m, 1h (default 5s; for `command send`, the command's timeout: default 10s).
    #[arg(long, global = true, value_parser = parse_duration)]
    timeout: Option<Duration>,
}

/// `5` (seconds), `500ms`, `10s`, `2m`, `1h`; more than zero.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a duration such as 10s, 500ms, 2m or 1h"))?;
    let ms = match unit {
        "" | "s" => number.saturating_mul(1000),
        "ms" => number,
        "m" => number.saturating_mul(60_000),
        "h" => number.saturating_mul(3_600_000),
        _ => return Err(format!("{text:?}: the unit is one of ms, s, m, h")),
    };
    match ms {
        0 => Err("the timeout must be more than zero".into()),
        ms => Ok(Duration::from_millis(ms)),
    }
}

/// A value given on the command line, from standard input (`-`), or from a file.
#[derive(Args)]
#[group(required = true, multiple = false)]
struct ValueArgs {
    /// The value; `-` reads it from standard input (any bytes, any size the broker takes).
    value: Option<String>,
    /// Read the value from this file (any bytes, any size the broker takes).
    #[arg(long)]
    value_file: Option<PathBuf>,
}

impl ValueArgs {
    /// The value's bytes.
    fn read(self) -> Result<Bytes, String> {
        match (self.value, self.value_file) {
            (Some(value), _) if value == "-" => {
                let mut buffer = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut buffer)
                    .map_err(|e| format!("cannot read the value from standard input: {e}"))?;
                Ok(buffer.into())
            }
            (Some(value), _) => Ok(value.into()),
            (None, Some(path)) => std::fs::read(&path)
                .map(Bytes::from)
                .map_err(|e| format!("--value-file {}: {e}", path.display())),
            (None, None) => Err("give a value, `-` for standard input, or --value-file".into()),
        }
    }
}

/// The fencing token a write presents.
#[derive(Args)]
struct FencingArgs {
    /// Fencing token: the version returned when the lock guarding this key was taken (an HLC,
    /// `wall:counter:node`, as `mqstore lock` prints it).
    #[arg(long, value_parser = parse_hlc)]
    fencing_token: Option<Hlc>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the state store next to the broker.
    Serve(ServeArgs),
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
    /// Print every change of the keys until interrupted.
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
    /// Commands to devices: send one and await the answer, read a command's status, watch
    /// every command's status changes.
    #[command(name = "command")]
    Devices {
        #[command(subcommand)]
        command: CommandCommand,
    },
}

#[derive(Args)]
struct ServeArgs {
    /// This node's id: the node part of every version (no ':'). Generated if absent.
    #[arg(long, env = "MQSTORE_NODE_ID")]
    node_id: Option<String>,
    /// Share requests with other nodes through `$share/{group}/...`.
    #[arg(long, env = "MQSTORE_SHARE_GROUP")]
    share_group: Option<String>,
    /// Most keys the store holds.
    #[arg(long)]
    max_keys: Option<u64>,
    /// Most bytes of keys and values the store holds.
    #[arg(long)]
    max_bytes: Option<u64>,
    /// Most KEYNOTIFY registrations in all; more are refused with "the quota has been
    /// exceeded".
    #[arg(long, default_value_t = Quotas::SERVER_DEFAULT.max_watches.unwrap_or(u64::MAX))]
    max_watches: u64,
    /// Seconds an identified client's registrations last after its last KEYNOTIFY (mqstore
    /// clients renew them every third of it); 0: until the client is known to be gone.
    #[arg(long, default_value_t = mqstore_net::server::DEFAULT_REGISTRATION_LEASE.as_secs())]
    registration_lease: u64,
    /// Seconds the registrations of clients on the standard topics last after their last
    /// KEYNOTIFY. They do not renew (the Azure SDK clients): default, until they are known to be
    /// gone.
    #[arg(long)]
    standard_registration_lease: Option<u64>,
    /// No state store: serve jobs and commands only, beside a broker whose mqstore plugin
    /// serves the state store (bindings-mosquitto/).
    #[arg(long)]
    no_state_store: bool,
    /// Serve only the state store: no jobs service ($aws/things/+/jobs/#, the operator API).
    #[arg(long)]
    no_jobs: bool,
    /// No command service (mqstore/commands/v1/...).
    #[arg(long)]
    no_commands: bool,
    /// Device profiles for commands (JSON, see the README), besides the built-in mqtt5, dji
    /// and iothub.
    #[arg(long)]
    command_profiles: Option<PathBuf>,
    /// Most KEYNOTIFY registrations of one client.
    #[arg(long, default_value_t = Quotas::SERVER_DEFAULT.max_watches_per_client.unwrap_or(u64::MAX))]
    max_watches_per_client: u64,
    /// An access rule, "CLIENTS KEYS PERMS" (patterns in the SCAN dialect, PERMS one of r, w,
    /// rw, -), e.g. 'sensor-* sensors/* rw'. Repeatable; the first rule matching a client and
    /// key decides, and with any rules given a request no rule matches is refused.
    #[arg(long = "access-rule", value_parser = parse_rule)]
    access_rules: Vec<AccessRule>,
    /// Take only identified requests (each client publishes in its own clients/{clientId}/
    /// tree, which the broker's ACL guards; see docs/mosquitto-acl.conf): access rules then
    /// hold against clients that lie about who they are. The standard request topic (used by
    /// the Azure SDK clients) is not served.
    #[arg(long, env = "MQSTORE_REQUIRE_IDENTITY")]
    require_identity: bool,
    /// Answer requests that are not identified only on response topics starting with this
    /// (repeatable; default: any topic, so the server publishes wherever a request asks).
    #[arg(long = "response-topic-prefix")]
    response_topic_prefixes: Vec<String>,
    /// 64 hex digits: the secret SCAN continuation tokens are sealed with, so that nodes
    /// sharing a store continue each other's scans (default: a random one per process).
    #[arg(long, env = "MQSTORE_SCAN_TOKEN_SECRET", hide_env_values = true, value_parser = parse_secret)]
    scan_token_secret: Option<[u8; 32]>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9464).
    #[arg(long, env = "MQSTORE_METRICS")]
    metrics: Option<SocketAddr>,
    /// Where the state store's data lives: `memory` (this process; nothing survives a
    /// restart), or Redis shared by every node: redis://[user:pass@]host:port[/db],
    /// rediss://… (TLS), redis-cluster://host:port,host:port,… (a Redis Cluster's seed nodes).
    #[arg(
        long,
        env = "MQSTORE_STORE",
        default_value = "memory",
        hide_env_values = true
    )]
    store: StoreConfig,
    /// Drop requests (unapplied; callers time out) while this many answers wait for the
    /// broker: bounds memory when the broker takes publishes more slowly than requests arrive.
    #[arg(long, default_value_t = mqstore_net::server::DEFAULT_MAX_PENDING_ANSWERS)]
    max_pending_answers: usize,
    /// Keep the state store on disk in this directory (created if missing): every key
    /// survives restarts and crashes, with its version, fencing token and expiry (memory
    /// store only). See docs/durability.md.
    #[arg(long, env = "MQSTORE_DATA_DIR")]
    data_dir: Option<std::path::PathBuf>,
    /// With --data-dir: `always` (an answer is sent once its write is on disk; writes in
    /// flight share one fsync) or `everysec` (synced about once a second: a power loss loses
    /// at most about the last second; a crash of mqstore alone loses nothing).
    #[arg(long, default_value = "everysec", requires = "data_dir")]
    fsync: mqstore_core::disk::Fsync,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The server and the benchmark log their progress; client commands print only their
    // result or a clear error (logs with MQSTORE_LOG=debug, say).
    let default_level = match cli.command {
        Command::Serve(_) | Command::Bench { .. } => "info",
        _ => "off",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MQSTORE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // The server is one engine behind one connection, driven by one task: a single thread
    // avoids cross-thread wake-ups (measured: markedly faster). The benchmark drives many
    // connections and wants every core.
    let runtime = match cli.command {
        Command::Serve(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        _ => tokio::runtime::Runtime::new(),
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(4);
        }
    };
    runtime.block_on(run(cli))
}

fn broker(args: &BrokerArgs) -> Result<BrokerConfig, String> {
    let tls = match (args.tls, &args.ca_file) {
        (false, _) => None,
        (true, None) => {
            return Err("--tls needs --ca-file (the broker's certificate authority)".into());
        }
        (true, Some(ca)) => {
            let client = args.cert_file.as_deref().zip(args.key_file.as_deref());
            Some(TlsConfig::from_files(ca, client).map_err(|e| e.to_string())?)
        }
    };
    Ok(BrokerConfig {
        host: args.host.clone(),
        port: args.port,
        username: args.username.clone(),
        password: args.password.clone(),
        max_packet_size: args.max_packet_size,
        tls,
        ..BrokerConfig::default()
    })
}

fn random_suffix() -> String {
    format!("{:08x}", mqstore_net::random_u64() as u32)
}

async fn run(cli: Cli) -> ExitCode {
    let broker_config = match broker(&cli.broker) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Command::Bench {
        in_flight,
        duration,
        rounds,
        connections,
        keys,
        value_size,
        set_percent,
    } = &cli.command
    {
        let config = BenchConfig {
            broker: broker_config.clone(),
            in_flight: in_flight.clone(),
            duration: Duration::from_secs(*duration),
            rounds: *rounds,
            warm_up: Duration::from_millis(500),
            connections: *connections,
            keys: *keys,
            value_size: *value_size,
            set_percent: *set_percent,
        };
        let mut bar = progress::BenchProgress::default();
        return match bench::run(&config, |p| bar.show(p)).await {
            Ok(rows) => {
                print!("{}", bench::render(&rows));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!(
                    "error: {e} (is the broker at {}:{} up, and `mqstore serve` running?)",
                    cli.broker.host, cli.broker.port
                );
                ExitCode::from(4)
            }
        };
    }
    let Command::Serve(args) = &cli.command else {
        return run_client(cli, broker_config).await;
    };
    let node_id = args
        .node_id
        .clone()
        .unwrap_or_else(|| format!("node-{}", random_suffix()));
    let mut command_profiles = mqstore_core::commands::Profiles::built_in();
    if let Some(path) = &args.command_profiles {
        let added = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| command_profiles.add_json(&text).map_err(|e| e.to_string()));
        if let Err(e) = added {
            eprintln!("error: --command-profiles {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    let config = ServerConfig {
        broker: broker_config.clone(),
        client_id: cli
            .broker
            .client_id
            .clone()
            .unwrap_or_else(|| format!("mqstore-server-{node_id}")),
        node_id,
        share_group: args.share_group.clone(),
        quotas: Quotas {
            max_keys: args.max_keys,
            max_bytes: args.max_bytes,
            max_watches: Some(args.max_watches),
            max_watches_per_client: Some(args.max_watches_per_client),
        },
        access: AccessRules::new(args.access_rules.clone()),
        metrics_addr: args.metrics,
        require_identity: args.require_identity,
        response_topic_prefixes: args.response_topic_prefixes.clone(),
        scan_token_key: args.scan_token_secret,
        registration_lease: (args.registration_lease > 0)
            .then(|| Duration::from_secs(args.registration_lease)),
        standard_registration_lease: args.standard_registration_lease.map(Duration::from_secs),
        state_store: !args.no_state_store,
        jobs: !args.no_jobs,
        jobs_minute: Duration::from_secs(60),
        commands: !args.no_commands,
        command_profiles,
        max_pending_answers: args.max_pending_answers,
        store: args.store.clone(),
        clock_offset_ms: 0,
        durability: args.data_dir.clone().map(|data_dir| Durability {
            data_dir,
            fsync: args.fsync,
        }),
    };
    match serve(config, shutdown_signal(), |_| {}).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn parse_secret(text: &str) -> Result<[u8; 32], String> {
    let bytes = mqstore_core::topics::from_hex(&text.to_ascii_uppercase())
        .ok_or("expected 64 hex digits (e.g. from `openssl rand -hex 32`)")?;
    bytes
        .try_into()
        .map_err(|_| "expected 64 hex digits (32 bytes)".into())
}

fn parse_rule(text: &str) -> Result<AccessRule, String> {
    text.parse()
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

fn parse_hlc(text: &str) -> Result<Hlc, String> {
    Hlc::parse(text)
        .map_err(|e| format!("{e} (expected wall:counter:node, e.g. 1700000000000:0:node-1)"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn version(v: &Option<Hlc>) -> String {
    v.as_ref().map_or_else(String::new, Hlc::to_string)
}

/// Prints `json` or `plain`.
fn emit(call: CallArgs, json: String, plain: String) {
    if call.json {
        println!("{json}");
    } else if !plain.is_empty() {
        println!("{plain}");
    }
}

async fn run_client(cli: Cli, broker_config: BrokerConfig) -> ExitCode {
    let call = cli.call;
    // Read a value from standard input or a file before connecting: a bad path is a usage
    // error, and nothing is sent.
    let command = match ClientCommand::read(cli.command) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let client_id = cli
        .broker
        .client_id
        .clone()
        .unwrap_or_else(|| format!("mqstore-cli-{}", random_suffix()));
    let options = ClientOptions {
        broker: broker_config.clone(),
        timeout: call.timeout.unwrap_or(Duration::from_secs(5)),
        ..ClientOptions::new(client_id, "", 0)
    };
    let broker = format!("{}:{}", cli.broker.host, cli.broker.port);
    let client = match Client::connect(options).await {
        Ok(client) => client,
        Err(ClientError::Clock(e)) => {
            eprintln!("error: --client-id: {e}");
            return ExitCode::from(2);
        }
        Err(e @ ClientError::Refused { .. }) => {
            eprintln!(
                "error: {e} (broker {broker}; check --username/--password, --client-id and the broker's access rules)"
            );
            return ExitCode::from(5);
        }
        Err(e) => {
            eprintln!(
                "error: cannot reach the MQTT broker at {broker}: {} (is it running? see --host/--port)",
                match &e {
                    ClientError::Unreachable(detail) => detail.clone(),
                    other => other.to_string(),
                }
            );
            return ExitCode::from(4);
        }
    };
    let result = command.run(&client, call).await;
    client.close().await;
    match result {
        Ok(code) => code,
        Err(CliError::Usage(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
        Err(CliError::Client(e)) => {
            eprintln!("error: {e}");
            if let Some(hint) = mqstore_net::protocol_hint(&e) {
                eprintln!("hint: {hint}");
            }
            if let Some(code) = command::exit_code(&e) {
                return code;
            }
            match e {
                ClientError::Jobs { code, .. } => jobs::refusal_exit_code(&code),
                ClientError::Service(_)
                | ClientError::Status { .. }
                | ClientError::PublishRefused { .. } => ExitCode::from(3),
                ClientError::Refused { .. } => ExitCode::from(5),
                ClientError::TooLarge { .. } => ExitCode::from(2),
                _ => ExitCode::from(4),
            }
        }
    }
}

enum CliError {
    Usage(String),
    Client(ClientError),
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        CliError::Client(e)
    }
}

/// A client command with its value read.
enum ClientCommand {
    Get {
        key: String,
        raw: bool,
        output: Option<PathBuf>,
    },
    Set {
        key: String,
        value: Bytes,
        options: SetOptions,
    },
    Del {
        key: String,
        fencing_token: Option<Hlc>,
    },
    Vdel {
        key: String,
        value: Bytes,
        fencing_token: Option<Hlc>,
    },
    Scan {
        pattern: String,
    },
    Lock {
        key: String,
        ttl: Duration,
        wait: Option<Duration>,
        command: Vec<String>,
    },
    Watch {
        keys: Vec<String>,
    },
    Jobs(JobsCall),
    Command(CommandCall),
}

impl ClientCommand {
    fn read(command: Command) -> Result<Self, String> {
        Ok(match command {
            Command::Get { key, raw, output } => Self::Get { key, raw, output },
            Command::Set {
                key,
                value,
                nx,
                nex,
                px,
                persist,
                fencing,
            } => Self::Set {
                key,
                value: value.read()?,
                options: SetOptions {
                    condition: match (nx, nex) {
                        (true, _) => Condition::NotExists,
                        (_, true) => Condition::NotExistsOrEqual,
                        _ => Condition::Always,
                    },
                    expires: px.map(Duration::from_millis),
                    persist,
                    fencing_token: fencing.fencing_token,
                },
            },
            Command::Del { key, fencing } => Self::Del {
                key,
                fencing_token: fencing.fencing_token,
            },
            Command::Vdel {
                key,
                value,
                fencing,
            } => Self::Vdel {
                key,
                value: value.read()?,
                fencing_token: fencing.fencing_token,
            },
            Command::Scan { pattern } => Self::Scan { pattern },
            Command::Lock {
                key,
                ttl_ms,
                wait,
                command,
            } => Self::Lock {
                key,
                ttl: Duration::from_millis(ttl_ms),
                wait: wait.map(Duration::from_secs),
                command,
            },
            Command::Watch { keys } => Self::Watch { keys },
            Command::Jobs { command } => Self::Jobs(JobsCall::read(command)?),
            Command::Devices { command } => Self::Command(CommandCall::read(command)?),
            // `run` handles these without a client.
            Command::Serve(_) | Command::Bench { .. } => {
                return Err("not a client command".into());
            }
        })
    }

    async fn run(self, client: &Client, call: CallArgs) -> Result<ExitCode, CliError> {
        let found = |yes: bool| {
            if yes {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        };
        match self {
            Self::Get { key, raw, output } => {
                let value = client.get(Bytes::from(key)).await?;
                match (&value, output) {
                    (Some(v), Some(path)) => std::fs::write(&path, &v.value).map_err(|e| {
                        CliError::Usage(format!("--output {}: {e}", path.display()))
                    })?,
                    (Some(v), None) if raw => write_stdout(&v.value),
                    (Some(v), None) if !call.json => write_stdout(&[&v.value[..], b"\n"].concat()),
                    (Some(v), None) => emit(
                        call,
                        json!({ "value": text(&v.value), "version": version(&v.version) })
                            .to_string(),
                        String::new(),
                    ),
                    (None, _) if raw => {}
                    (None, _) => emit(call, "{\"value\":null}".into(), "(nil)".into()),
                }
                Ok(found(value.is_some()))
            }
            Self::Set {
                key,
                value,
                options,
            } => {
                let result = client.set(Bytes::from(key), value, options).await?;
                emit(
                    call,
                    json!({ "applied": result.applied, "version": version(&result.version) })
                        .to_string(),
                    if result.applied {
                        "OK".into()
                    } else {
                        "(not applied)".into()
                    },
                );
                Ok(found(result.applied))
            }
            Self::Del { key, fencing_token } => {
                let deleted = client.del(Bytes::from(key), fencing_token).await?;
                report_deleted(call, deleted.outcome);
                Ok(found(deleted.outcome == Deleted::Deleted))
            }
            Self::Vdel {
                key,
                value,
                fencing_token,
            } => {
                let deleted = client.vdel(Bytes::from(key), value, fencing_token).await?;
                report_deleted(call, deleted.outcome);
                Ok(found(deleted.outcome == Deleted::Deleted))
            }
            Self::Scan { pattern } => {
                let mut keys = client.scan(Bytes::from(pattern)).await?;
                keys.sort();
                let names: Vec<String> = keys.iter().map(|k| text(k)).collect();
                emit(call, json!(names).to_string(), names.join("\n"));
                Ok(ExitCode::SUCCESS)
            }
            Self::Lock {
                key,
                ttl,
                wait,
                command,
            } => lock(client, call, key, ttl, wait, command).await,
            Self::Watch { keys } => watch(client, call, keys).await,
            Self::Jobs(jobs) => Ok(jobs.run(client, call).await?),
            Self::Command(command) => Ok(command.run(client, call).await?),
        }
    }
}

/// Writes bytes to standard output as they are.
fn write_stdout(bytes: &[u8]) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(bytes).and_then(|()| stdout.flush());
}

async fn lock(
    client: &Client,
    call: CallArgs,
    key: String,
    ttl: Duration,
    wait: Option<Duration>,
    command: Vec<String>,
) -> Result<ExitCode, CliError> {
    let Some(lease) = Lease::acquire(client, Bytes::from(key), ttl, wait).await? else {
        eprintln!("error: the lock is still held by someone else");
        return Ok(ExitCode::from(1));
    };
    let token = lease.fencing_token().to_string();
    emit(
        call,
        json!({ "fencing_token": token }).to_string(),
        token.clone(),
    );
    let code = match command.split_first() {
        Some((program, args)) => {
            let status = tokio::process::Command::new(program)
                .args(args)
                .env("MQSTORE_FENCING_TOKEN", &token)
                .status()
                .await;
            match status {
                Ok(status) => ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8),
                Err(e) => {
                    eprintln!("error: cannot run {program}: {e}");
                    ExitCode::from(2)
                }
            }
        }
        None => {
            eprintln!("holding the lock; Ctrl-C to release");
            shutdown_signal().await;
            ExitCode::SUCCESS
        }
    };
    if !lease.is_held() {
        eprintln!("warning: the lock was lost while held (renewals failed)");
    }
    lease.release().await?;
    Ok(code)
}

async fn watch(client: &Client, call: CallArgs, keys: Vec<String>) -> Result<ExitCode, CliError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<KeyChange>();
    for key in keys {
        let mut observation = client.observe(Bytes::from(key)).await?;
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(change) = observation.next().await {
                if tx.send(change).is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    eprintln!("watching; Ctrl-C to stop");
    loop {
        tokio::select! {
            _ = shutdown_signal() => return Ok(ExitCode::SUCCESS),
            change = rx.recv() => {
                let Some(change) = change else { return Ok(ExitCode::from(4)) };
                let key = text(&change.key);
                let (op, value) = match &change.value {
                    Some(v) => ("SET", text(v)),
                    None => ("DELETE", String::new()),
                };
                emit(
                    call,
                    json!({
                        "key": key,
                        "op": op,
                        "value": change.value.as_ref().map(|_| &value),
                        "version": version(&change.version),
                        "synthetic": change.synthetic,
                    })
                    .to_string(),
                    format!("{key} {op} {value}").trim_end().to_owned(),
                );
            }
        }
    }
}

fn report_deleted(call: CallArgs, deleted: Deleted) {
    let (json, plain) = match deleted {
        Deleted::Deleted => ("{\"deleted\":1}", "(deleted)"),
        Deleted::Absent => ("{\"deleted\":0}", "(absent)"),
        Deleted::ValueMismatch => ("{\"deleted\":-1}", "(value did not match)"),
    };
    emit(call, json.into(), plain.into());
}
