//! `mqstore shadow ...`: read, update and delete a device shadow (AWS IoT's Device Shadow
//! API), and print its deltas and documents as they come.

use std::process::ExitCode;

use clap::Subcommand;
use mqstore_core::client::ClientError;
use mqstore_net::client::Client;
use serde_json::{Value, json};

use crate::call::ValueArgs;
use crate::shutdown_signal;

#[derive(Subcommand)]
pub enum ShadowCommand {
    /// Print a shadow's document: state (desired, reported, delta), metadata, version (exit 1
    /// when the shadow does not exist).
    Get {
        thing: String,
        /// A named shadow (default: the thing's classic shadow).
        #[arg(long)]
        name: Option<String>,
    },
    /// Merge a partial state into a shadow, e.g. '{"desired": {"color": "red"}}' (a null
    /// removes a field, or a whole section); print the accepted update.
    Update {
        thing: String,
        /// The state: JSON with `desired` and/or `reported`; `-` reads it from standard input.
        #[command(flatten)]
        state: ValueArgs,
        /// A named shadow (default: the thing's classic shadow).
        #[arg(long)]
        name: Option<String>,
        /// Only if the shadow is at this version (else refused: 409).
        #[arg(long)]
        version: Option<u64>,
    },
    /// Delete a shadow (its version is kept: the next one follows it).
    Delete {
        thing: String,
        /// A named shadow (default: the thing's classic shadow).
        #[arg(long)]
        name: Option<String>,
    },
    /// List a thing's named shadows: `{"results": [names], "nextToken"?, "timestamp"}`, in
    /// name order, deleted ones left out (AWS's ListNamedShadowsForThing).
    List {
        thing: String,
        /// At most this many names (default: every one); `nextToken` then gives the next page.
        #[arg(long)]
        max_results: Option<u32>,
        /// The page after this token (a previous page's `nextToken`).
        #[arg(long)]
        next_token: Option<String>,
    },
    /// Print a shadow's deltas (what desired asks that reported lacks) and documents (each
    /// update's before and after) as they come, one JSON line each, until Ctrl-C.
    Watch {
        thing: String,
        /// A named shadow (default: the thing's classic shadow).
        #[arg(long)]
        name: Option<String>,
    },
}

/// A shadow subcommand with its state read.
pub struct ShadowCall {
    command: ShadowCommand,
    state: Option<Value>,
}

impl ShadowCall {
    pub fn read(mut command: ShadowCommand) -> Result<Self, String> {
        let state = match &mut command {
            ShadowCommand::Update { state, .. } => {
                let text = std::mem::replace(
                    state,
                    ValueArgs {
                        value: None,
                        value_file: None,
                    },
                )
                .read()?;
                let state = serde_json::from_slice(&text).map_err(|e| {
                    format!(
                        "the state is not JSON ({e}); give e.g. '{{\"desired\": {{\"color\": \"red\"}}}}'"
                    )
                })?;
                Some(state)
            }
            _ => None,
        };
        Ok(Self { command, state })
    }

    pub async fn run(self, client: &Client) -> Result<ExitCode, ClientError> {
        let (thing, name) = match &self.command {
            ShadowCommand::Get { thing, name }
            | ShadowCommand::Update { thing, name, .. }
            | ShadowCommand::Delete { thing, name }
            | ShadowCommand::Watch { thing, name } => (thing.as_str(), name.as_deref()),
            ShadowCommand::List {
                thing,
                max_results,
                next_token,
            } => {
                // An operator call: AWS has it on its REST API only.
                let mut request = json!({ "op": "listNamedShadowsForThing", "thingName": thing });
                if let Some(max_results) = max_results {
                    request["maxResults"] = (*max_results).into();
                }
                if let Some(token) = next_token {
                    request["nextToken"] = token.as_str().into();
                }
                println!("{}", client.operate_json(request).await?.into_json());
                return Ok(ExitCode::SUCCESS);
            }
        };
        let shadow = client.shadow(thing, name).await?;
        let answer = match self.command {
            ShadowCommand::Get { .. } => shadow.get().await,
            ShadowCommand::Update { version, .. } => {
                shadow.update(self.state.unwrap_or_default(), version).await
            }
            ShadowCommand::Delete { .. } => shadow.delete().await,
            ShadowCommand::List { .. } => unreachable!("answered above"),
            ShadowCommand::Watch { .. } => {
                eprintln!("watching the shadow's deltas and documents; Ctrl-C to stop");
                loop {
                    tokio::select! {
                        _ = shutdown_signal() => return Ok(ExitCode::SUCCESS),
                        heard = shadow.next_notification() => {
                            let Some(heard) = heard else { return Ok(ExitCode::from(4)) };
                            println!("{}", heard.to_json());
                        }
                    }
                }
            }
        };
        match answer {
            Ok(document) => {
                println!("{document}");
                Ok(ExitCode::SUCCESS)
            }
            // A shadow that does not exist is an answer, as a key that does not exist is.
            Err(ClientError::Status {
                status: 404,
                message,
            }) => {
                eprintln!("{message}");
                Ok(ExitCode::from(1))
            }
            Err(e) => Err(e),
        }
    }
}
