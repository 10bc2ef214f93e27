//! `mqstore command ...`: send a command to a device through `mqstore serve`, read a
//! command's status, watch every command's status changes.

use std::process::ExitCode;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use clap::Subcommand;
use mqstore_core::client::ClientError;
use mqstore_core::client::commands::CommandReply;
use mqstore_core::commands::{CommandRequest, DEFAULT_TIMEOUT_MS, Mode, Record};
use mqstore_net::client::Client;
use serde_json::{Value, json};

use crate::call::{CallArgs, ValueArgs, write_stdout};
use crate::shutdown_signal;

#[derive(Subcommand)]
pub enum CommandCommand {
    /// Send a command to a device and print its answer (exit 0 succeeded, 1 the device
    /// answered with an error or reported TIMED_OUT itself, 3 it refused the command, 6 no
    /// answer within --timeout).
    Send {
        /// The device's command topic (`{id}` in it becomes the command id).
        topic: String,
        #[command(flatten)]
        payload: ValueArgs,
        /// How the device is spoken to: mqtt5 (MQTT 5 request/response, the default), dji,
        /// iothub, aws (AWS IoT commands devices), or a profile of the server's
        /// --command-profiles file.
        #[arg(long, default_value = "mqtt5")]
        profile: String,
        /// The payload's content type (default: application/json when it is JSON).
        #[arg(long)]
        content_type: Option<String>,
        /// A user property for the device, NAME=VALUE (repeatable).
        #[arg(long = "header", value_parser = parse_header)]
        headers: Vec<(String, String)>,
        /// Do not wait for an answer: end once the broker took the command.
        #[arg(long, conflicts_with = "detach")]
        oneway: bool,
        /// Print the command id at once; follow it with `command status` or `command watch`.
        #[arg(long)]
        detach: bool,
    },
    /// Start a stored command (see `command define`) on a device written for AWS IoT
    /// commands, and print its answer (exit codes as `send`), as AWS's StartCommandExecution.
    Start {
        /// The stored command's id.
        command_id: String,
        /// The device: a thing name, thing/NAME, clients/CLIENT_ID, or a thing's ARN.
        target: String,
        /// A parameter of the command's payload template, NAME=VALUE (repeatable; a VALUE
        /// that is JSON, such as 42 or true, is taken as that).
        #[arg(long = "param", value_parser = parse_header)]
        parameters: Vec<(String, String)>,
        /// Print the execution id at once; follow it with `command status` or `command watch`.
        #[arg(long)]
        detach: bool,
    },
    /// Store a command that `command start` sends by its id (AWS's CreateCommand): JSON
    /// `{"commandId": …, "payload": {"content": …, "contentType": …}}` or `{"commandId": …,
    /// "payloadTemplate": "…${aws:iot:commandexecution::parameter:NAME}…",
    /// "mandatoryParameters": [{"name": …, "defaultValue": {"S": …}}]}`.
    Define {
        #[command(flatten)]
        definition: ValueArgs,
    },
    /// Print the stored commands, or the one with this id.
    Definitions { command_id: Option<String> },
    /// Delete a stored command.
    Undefine { command_id: String },
    /// Print a command's status record (kept three timeouts after it was sent).
    Status { id: String },
    /// Print every command's status changes as they happen, until Ctrl-C.
    Watch,
}

/// A command subcommand with its payload read.
pub struct CommandCall {
    command: CommandCommand,
    payload: Option<bytes::Bytes>,
}

impl CommandCall {
    pub fn read(mut command: CommandCommand) -> Result<Self, String> {
        let payload = match &mut command {
            CommandCommand::Send { payload, .. }
            | CommandCommand::Define {
                definition: payload,
            } => Some(
                std::mem::replace(
                    payload,
                    ValueArgs {
                        value: None,
                        value_file: None,
                    },
                )
                .read()?,
            ),
            _ => None,
        };
        Ok(Self { command, payload })
    }

    pub async fn run(self, client: &Client, call: CallArgs) -> Result<ExitCode, ClientError> {
        match self.command {
            CommandCommand::Send {
                topic,
                profile,
                content_type,
                oneway,
                detach,
                headers,
                ..
            } => {
                let payload = self.payload.unwrap_or_default();
                let content_type = content_type.or_else(|| {
                    serde_json::from_slice::<Value>(&payload)
                        .is_ok()
                        .then(|| "application/json".to_owned())
                });
                let request = CommandRequest {
                    topic,
                    payload,
                    content_type,
                    profile,
                    timeout_ms: call
                        .timeout
                        .map_or(DEFAULT_TIMEOUT_MS, |t| t.as_millis() as u64),
                    mode: match (oneway, detach) {
                        (true, _) => Mode::OneWay,
                        (_, true) => Mode::Detached,
                        _ => Mode::Await,
                    },
                    headers,
                    command: None,
                    parameters: Default::default(),
                };
                send(client, call, request).await
            }
            CommandCommand::Start {
                command_id,
                target,
                parameters,
                detach,
            } => {
                let request = CommandRequest {
                    timeout_ms: call
                        .timeout
                        .map_or(DEFAULT_TIMEOUT_MS, |t| t.as_millis() as u64),
                    mode: if detach { Mode::Detached } else { Mode::Await },
                    parameters: parameters
                        .into_iter()
                        .map(|(name, value)| {
                            let value =
                                serde_json::from_str(&value).unwrap_or(Value::String(value));
                            (name, value)
                        })
                        .collect(),
                    ..CommandRequest::start(command_id, target)
                };
                send(client, call, request).await
            }
            CommandCommand::Define { .. } => {
                let definition = self.payload.unwrap_or_default();
                let definition = serde_json::from_slice(&definition).map_err(|e| {
                    ClientError::Malformed(format!("the definition is not a stored command: {e}"))
                })?;
                let stored = client.define_command(&definition).await?;
                println!("{}", serde_json::to_string(&stored).unwrap_or_default());
                Ok(ExitCode::SUCCESS)
            }
            CommandCommand::Definitions { command_id } => {
                let answer = match command_id {
                    Some(id) => serde_json::to_value(client.command_definition(&id).await?),
                    None => serde_json::to_value(client.command_definition_list().await?),
                };
                println!("{}", answer.unwrap_or_default());
                Ok(ExitCode::SUCCESS)
            }
            CommandCommand::Undefine { command_id } => {
                match client.delete_command_definition(&command_id).await? {
                    true => Ok(ExitCode::SUCCESS),
                    false => Err(ClientError::Status {
                        status: 404,
                        message: format!("no stored command {command_id:?}"),
                    }),
                }
            }
            CommandCommand::Status { id } => {
                let record = client.command_status(&id).await?;
                println!("{}", record_json(&record, call.json));
                Ok(ExitCode::SUCCESS)
            }
            CommandCommand::Watch => {
                let mut watch = client.watch_commands().await?;
                eprintln!("watching command status changes; Ctrl-C to stop");
                loop {
                    tokio::select! {
                        _ = shutdown_signal() => return Ok(ExitCode::SUCCESS),
                        record = watch.next() => {
                            let Some(record) = record else { return Ok(ExitCode::from(4)) };
                            match call.json {
                                true => println!("{}", record_json(&record, false)),
                                false => println!(
                                    "{} {} {}{}{}",
                                    record.id,
                                    record.status,
                                    record.topic,
                                    if record.late { " (late)" } else { "" },
                                    if record.orphaned { " (orphaned)" } else { "" },
                                ),
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Sends `request` and prints its answer (a device's error answer too, with `--json`).
async fn send(
    client: &Client,
    call: CallArgs,
    request: CommandRequest,
) -> Result<ExitCode, ClientError> {
    match client.command(request).await {
        Ok(reply) => {
            print_reply(call, &reply);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if let (
                true,
                ClientError::CommandFailed { id, answer }
                | ClientError::CommandRejected { id, answer },
            ) = (call.json, &e)
            {
                println!(
                    "{}",
                    json!({"id": id, "status": answer.status, "deviceStatus": answer.code,
                           "message": answer.message, "appErrCode": answer.app_error_code,
                           "payload": payload_json(&answer.payload)})
                );
            }
            Err(e)
        }
    }
}

fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err("expected NAME=VALUE".into()),
    }
}

/// The exit code of a command error (see `command send --help`).
pub fn exit_code(error: &ClientError) -> Option<ExitCode> {
    match error {
        ClientError::CommandFailed { .. } => Some(ExitCode::from(1)),
        ClientError::CommandRejected { .. } => Some(ExitCode::from(3)),
        ClientError::CommandTimedOut { .. } => Some(ExitCode::from(6)),
        _ => None,
    }
}

fn print_reply(call: CallArgs, reply: &CommandReply) {
    if call.json {
        let json = json!({
            "id": reply.id,
            "status": reply.status,
            "deviceStatus": reply.device_status,
            "contentType": reply.content_type,
            "payload": payload_json(&reply.payload),
        });
        println!("{json}");
        return;
    }
    match reply.status {
        mqstore_core::commands::Status::Succeeded => {
            write_stdout(&[&reply.payload[..], b"\n"].concat())
        }
        status => println!("{} {status}", reply.id),
    }
}

/// A payload in JSON: itself when it is JSON, a string when it is text, else base64.
fn payload_json(payload: &[u8]) -> Value {
    if let Ok(value) = serde_json::from_slice(payload) {
        return value;
    }
    match std::str::from_utf8(payload) {
        Ok(text) => Value::String(text.to_owned()),
        Err(_) => json!({ "base64": STANDARD.encode(payload) }),
    }
}

/// A record as JSON, its answer's payload decoded for people (unless `raw`).
fn record_json(record: &Record, raw: bool) -> String {
    let mut value = serde_json::to_value(record).unwrap_or_default();
    if !raw && let Some(answer) = &record.answer {
        value["answer"]["payload"] = payload_json(&answer.payload);
    }
    value.to_string()
}
