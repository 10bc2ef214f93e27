//! `mqstore`: run the state store server, or talk to one, in the spirit of redis-cli.
//!
//! Exit codes: 0 done; 1 a GET found nothing, or a conditional write was not applied; 2 usage;
//! 3 the state store refused the request (`-ERR`); 4 the broker or server could not be reached
//! or did not answer in time; 5 the broker refused the connection (CONNACK reason code).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use mqstore_core::disk::Durability;
use mqstore_core::engine::AccessRules;
use mqstore_core::store::Quotas;
use mqstore_net::{BrokerConfig, TlsConfig};
use mqstore_server::bench::{self, BenchConfig};
use mqstore_server::redis_store::{RedisConfig, RedisTls};
use mqstore_server::{ServerConfig, StoreConfig, serve};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

use args::{BrokerArgs, Cli, Command, ServeArgs};
use store::run_client;

mod args;
mod call;
mod command;
mod health;
mod jobs;
mod nodes;
mod progress;
mod shadow;
mod store;

/// The log filter `MQSTORE_LOG` asks for (a level, `target=level` directives, or both, comma
/// separated: `info,mqstore_server::redis_store=debug`), else `default_level`. A filter that
/// does not read is said on stderr, with what is used instead, rather than ignored silently.
fn log_filter(asked: Option<&str>, default_level: &str) -> Targets {
    let default = || default_level.parse().unwrap_or_default();
    match asked.map(str::trim).filter(|asked| !asked.is_empty()) {
        None => default(),
        Some(asked) => asked.parse().unwrap_or_else(|e| {
            eprintln!(
                "warning: MQSTORE_LOG={asked:?} is not a log filter ({e}); logging at \
                 {default_level:?}. Give a level (error, warn, info, debug, trace, off) or \
                 target=level directives, comma separated: info,mqstore_server=debug"
            );
            default()
        }),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The server and the benchmark log their progress; client commands print only their
    // result or a clear error (logs with MQSTORE_LOG=debug, say).
    let default_level = match cli.command {
        Command::Serve(_) | Command::Bench { .. } => "info",
        _ => "off",
    };
    let filter = log_filter(std::env::var("MQSTORE_LOG").ok().as_deref(), default_level);
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .with(filter)
        .init();
    if let Command::Health { metrics, live } = &cli.command {
        return health::check(metrics, *live);
    }
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
    // --tls alone trusts the system's CAs (a broker whose certificate a public CA signed).
    let tls = match args.tls {
        false => None,
        true => {
            let client = args.cert_file.as_deref().zip(args.key_file.as_deref());
            let key_password = args.key_password.as_deref();
            Some(
                TlsConfig::from_files(args.ca_file.as_deref(), client, key_password)
                    .map_err(|e| e.to_string())?,
            )
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

/// The TLS files of `--store rediss://…`, read and checked (`None` without any).
fn redis_tls(args: &ServeArgs, redis: &RedisConfig) -> Result<Option<Arc<RedisTls>>, String> {
    let client = args
        .redis_cert_file
        .as_deref()
        .zip(args.redis_key_file.as_deref());
    if args.redis_ca_file.is_none() && client.is_none() {
        return match args.redis_key_password {
            Some(_) => Err(
                "--redis-key-password is for --redis-key-file: give it and --redis-cert-file too"
                    .into(),
            ),
            None => Ok(None),
        };
    }
    if !redis.urls.iter().all(|url| url.starts_with("rediss://")) {
        return Err(format!(
            "--redis-ca-file and --redis-cert-file are for TLS: the store {} is not rediss://…",
            redis.display()
        ));
    }
    let ca_pem = match &args.redis_ca_file {
        Some(path) => Some(TlsConfig::ca_from_file(path).map_err(|e| e.to_string())?),
        None => None,
    };
    let password = args.redis_key_password.as_deref();
    let client_auth = match client {
        Some((cert, key)) => Some(
            TlsConfig::client_auth_from_files(cert, key, password).map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    Ok(Some(Arc::new(RedisTls {
        ca_pem,
        client_auth,
    })))
}

pub(crate) fn random_suffix() -> String {
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
    if let Command::Nodes { all } = &cli.command {
        let client_id = cli
            .broker
            .client_id
            .clone()
            .unwrap_or_else(|| format!("mqstore-cli-{}", random_suffix()));
        return nodes::list(&broker_config, &client_id, *all, cli.call).await;
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
    let mut store = args.store.clone();
    match &mut store {
        StoreConfig::Redis(redis) => {
            redis.wait_replicas = args.redis_wait_replicas;
            redis.wait_timeout = Duration::from_millis(args.redis_wait_timeout);
            match redis_tls(args, redis) {
                Ok(tls) => redis.tls = tls,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        StoreConfig::Memory if args.redis_wait_replicas > 0 => {
            eprintln!(
                "error: --redis-wait-replicas needs --store redis://… (the memory store has no replicas)"
            );
            return ExitCode::from(2);
        }
        StoreConfig::Memory if args.redis_ca_file.is_some() || args.redis_cert_file.is_some() => {
            eprintln!("error: --redis-ca-file and --redis-cert-file need --store rediss://…");
            return ExitCode::from(2);
        }
        StoreConfig::Memory => {}
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
        keyspace_events: !args.no_keyspace_events,
        jobs_minute: Duration::from_secs(60),
        commands: !args.no_commands,
        command_profiles,
        max_pending_answers: args.max_pending_answers,
        store,
        clock_offset_ms: 0,
        durability: args.data_dir.clone().map(|data_dir| Durability {
            data_dir,
            fsync: args.fsync,
        }),
        fail_fast: args.fail_fast,
    };
    match serve(config, shutdown_signal(), |_| {}).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
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

#[cfg(test)]
mod tests {
    use super::log_filter;
    use tracing::Level;

    #[test]
    fn the_log_filter_takes_a_level_and_target_directives_and_falls_back_on_what_does_not_read() {
        let unset = log_filter(None, "info");
        assert!(unset.would_enable("mqstore_server::node", &Level::INFO));
        assert!(!unset.would_enable("mqstore_server::node", &Level::DEBUG));

        let quiet = log_filter(Some("  "), "off");
        assert!(
            !quiet.would_enable("mqstore", &Level::ERROR),
            "blank is unset"
        );

        let mixed = log_filter(Some("warn,mqstore_server::redis_store=debug"), "info");
        assert!(mixed.would_enable("mqstore_server::redis_store::commands", &Level::DEBUG));
        assert!(!mixed.would_enable("mqstore_server::node", &Level::INFO));
        assert!(mixed.would_enable("rumqttc::v5", &Level::WARN));

        let wrong = log_filter(Some("mqstore=loud"), "info");
        assert!(
            wrong.would_enable("mqstore", &Level::INFO),
            "the default (the warning: cli/tests/cli.rs)"
        );
        assert!(!wrong.would_enable("mqstore", &Level::DEBUG));
    }
}
