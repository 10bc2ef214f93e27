//! The state store commands (get, set, del, vdel, scan, watch, lock) and what they print.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::command::CommandCall;
use crate::jobs::{GroupsCommand, JobsCall, TemplatesCommand};
use crate::shadow::ShadowCall;
use bytes::Bytes;
use mqstore_core::client::ClientError;
use mqstore_core::codec::Condition;
use mqstore_core::hlc::Hlc;
use mqstore_net::BrokerConfig;
use mqstore_net::client::{Client, ClientOptions, Deleted, KeyChange, SetOptions};
use mqstore_net::lease::Lease;
use serde_json::json;

use crate::args::{Cli, Command};
use crate::call::{CallArgs, write_stdout};
use crate::{random_suffix, shutdown_signal};

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub(crate) fn version(v: &Option<Hlc>) -> String {
    v.as_ref().map_or_else(String::new, Hlc::to_string)
}

/// Prints `json` or `plain`.
pub(crate) fn emit(call: CallArgs, json: String, plain: String) {
    if call.json {
        println!("{json}");
    } else if !plain.is_empty() {
        println!("{plain}");
    }
}

pub(crate) async fn run_client(cli: Cli, broker_config: BrokerConfig) -> ExitCode {
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
        Err(e) => return not_connected(e, &broker),
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
            if let Some(code) = crate::command::exit_code(&e) {
                return code;
            }
            match e {
                ClientError::Jobs { code, .. } => crate::jobs::refusal_exit_code(&code),
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

/// Says why the connection to `broker` failed, and exits as a client command does: 2 for a
/// client id that cannot be one, 5 refused, 4 not reached.
pub(crate) fn not_connected(e: ClientError, broker: &str) -> ExitCode {
    match e {
        ClientError::Clock(e) => {
            eprintln!("error: --client-id: {e}");
            ExitCode::from(2)
        }
        e @ ClientError::Refused { .. } => {
            eprintln!(
                "error: {e} (broker {broker}; check --username/--password, --client-id and the broker's access rules)"
            );
            ExitCode::from(5)
        }
        e => {
            eprintln!(
                "error: cannot reach the MQTT broker at {broker}: {} (is it running? see --host/--port)",
                match &e {
                    ClientError::Unreachable(detail) => detail.clone(),
                    other => other.to_string(),
                }
            );
            ExitCode::from(4)
        }
    }
}

pub(crate) enum CliError {
    Usage(String),
    Client(ClientError),
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        CliError::Client(e)
    }
}

/// A client command with its value read.
pub(crate) enum ClientCommand {
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
    Groups(GroupsCommand),
    Templates(TemplatesCommand),
    Command(CommandCall),
    Shadow(ShadowCall),
}

impl ClientCommand {
    pub(crate) fn read(command: Command) -> Result<Self, String> {
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
            Command::Groups { command } => Self::Groups(command),
            Command::Templates { command } => Self::Templates(command),
            Command::Devices { command } => Self::Command(CommandCall::read(command)?),
            Command::Shadow { command } => Self::Shadow(ShadowCall::read(command)?),
            // `main` and `run` handle these without a client.
            Command::Serve(_)
            | Command::Bench { .. }
            | Command::Health { .. }
            | Command::Nodes { .. } => {
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
            Self::Groups(groups) => Ok(groups.run(client, call).await?),
            Self::Templates(templates) => Ok(templates.run(client, call).await?),
            Self::Command(command) => Ok(command.run(client, call).await?),
            Self::Shadow(shadow) => Ok(shadow.run(client).await?),
        }
    }
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
                if change.gap && !call.json {
                    // On stderr, so that the change lines keep one shape.
                    eprintln!("{key}: changes were missed before this one (its state now follows)");
                }
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
                        "gap": change.gap,
                    })
                    .to_string(),
                    format!("{key} {op} {value}").trim_end().to_owned(),
                );
            }
        }
    }
}

pub(crate) fn report_deleted(call: CallArgs, deleted: Deleted) {
    let (json, plain) = match deleted {
        Deleted::Deleted => ("{\"deleted\":1}", "(deleted)"),
        Deleted::Absent => ("{\"deleted\":0}", "(absent)"),
        Deleted::ValueMismatch => ("{\"deleted\":-1}", "(value did not match)"),
    };
    emit(call, json.into(), plain.into());
}
