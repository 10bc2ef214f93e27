//! Commands from the client's side: [`Client::command`] asks a node (`mqstore serve`) to send
//! a command to a device and await its answer; [`Client::command_many`] fans one out to many
//! devices; [`Client::command_status`] and [`Client::watch_commands`] follow the records.
//! The node's side, which talks to the devices, is the `commander` (feature `server`).

use tokio::sync::{mpsc, oneshot};

use crate::client::{Client, Command as ClientCommand, CommandsCall};
use mqstore_core::client::ClientError;
use mqstore_core::client::commands::{CommandReply, DefinitionsReply};
use mqstore_core::commands::CommandRequest;
use mqstore_core::commands::Record;
use mqstore_core::commands::definitions::{Definition, DefinitionsAnswer, DefinitionsRequest};
use mqstore_core::session::Completion;

/// A stream of command status changes ([`Client::watch_commands`]).
pub struct CommandWatch {
    records: mpsc::UnboundedReceiver<Record>,
}

impl CommandWatch {
    /// The next change; `None` once the client is closed.
    pub async fn next(&mut self) -> Option<Record> {
        self.records.recv().await
    }
}

/// How a fan-out ended ([`FanOut::summary`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FanOutSummary {
    /// Devices that answered with success.
    pub succeeded: usize,
    /// Devices that answered with an error of their own.
    pub failed: usize,
    /// Devices (or the service) that refused the command.
    pub rejected: usize,
    /// Devices that did not answer in time.
    pub timed_out: usize,
    /// Not sent, or no answer from the service (see each result's error).
    pub errors: usize,
}

impl FanOutSummary {
    /// Counts `result`.
    pub fn count(&mut self, result: &Result<CommandReply, ClientError>) {
        match result {
            Ok(_) => self.succeeded += 1,
            Err(ClientError::CommandFailed { .. }) => self.failed += 1,
            Err(ClientError::CommandRejected { .. }) => self.rejected += 1,
            Err(ClientError::CommandTimedOut { .. }) => self.timed_out += 1,
            Err(_) => self.errors += 1,
        }
    }
}

/// One command sent to many devices: the results as they come ([`FanOut::next`]), then the
/// [`FanOut::summary`].
pub struct FanOut {
    results: mpsc::UnboundedReceiver<(String, Result<CommandReply, ClientError>)>,
    summary: FanOutSummary,
}

impl FanOut {
    /// The next device's result (its command topic and result); `None` when all are in.
    pub async fn next(&mut self) -> Option<(String, Result<CommandReply, ClientError>)> {
        let next = self.results.recv().await?;
        self.summary.count(&next.1);
        Some(next)
    }

    /// The results so far, counted.
    pub fn summary(&self) -> &FanOutSummary {
        &self.summary
    }
}

impl Client {
    async fn commands_call(&self, call: CommandsCall) -> Result<Completion, ClientError> {
        let (reply, result) = oneshot::channel();
        self.send(ClientCommand::Commands { call, reply }).await?;
        result.await.map_err(|_| ClientError::Disconnected)?
    }

    /// Asks `mqstore serve` to send `request` to a device. Awaited: the answer, or
    /// [`ClientError::CommandFailed`], [`ClientError::CommandRejected`],
    /// [`ClientError::CommandTimedOut`]; one-way: DELIVERED once the broker took it; detached:
    /// SENT with the command id at once (follow it with [`Client::command_status`] or
    /// [`Client::watch_commands`]).
    pub async fn command(&self, request: CommandRequest) -> Result<CommandReply, ClientError> {
        command_reply(self.commands_call(CommandsCall::Invoke(request)).await?)
    }

    /// Command `id`'s status record (kept three timeouts after it was sent).
    pub async fn command_status(&self, id: &str) -> Result<Record, ClientError> {
        let call = CommandsCall::Status(id.to_owned(), mqstore_core::commands::DEFAULT_TIMEOUT_MS);
        status_record(self.commands_call(call).await?)
    }

    /// A stored-commands call (create, get, list, delete): the service's answer.
    pub async fn command_definitions(
        &self,
        request: DefinitionsRequest,
    ) -> Result<DefinitionsAnswer, ClientError> {
        let call = CommandsCall::Definitions(request, DEFINITIONS_TIMEOUT_MS);
        definitions_reply(self.commands_call(call).await?)?.read()
    }

    /// Stores a command (AWS's `CreateCommand`): `{"commandId", "payload": {"content",
    /// "contentType"}}` or `{"commandId", "payloadTemplate", "mandatoryParameters": [{"name",
    /// "defaultValue"}]}`; 409 when the id is taken.
    pub async fn define_command(&self, command: &Definition) -> Result<Definition, ClientError> {
        let command = command.clone();
        definition_in(
            self.command_definitions(DefinitionsRequest::Create { command })
                .await?,
        )
    }

    /// The stored command `command_id` (404 when there is none).
    pub async fn command_definition(&self, command_id: &str) -> Result<Definition, ClientError> {
        let command_id = command_id.to_owned();
        definition_in(
            self.command_definitions(DefinitionsRequest::Get { command_id })
                .await?,
        )
    }

    /// Every stored command, by id.
    pub async fn command_definition_list(&self) -> Result<Vec<Definition>, ClientError> {
        match self.command_definitions(DefinitionsRequest::List).await? {
            DefinitionsAnswer::Commands { commands } => Ok(commands),
            other => Err(unexpected("a list of stored commands", &other)),
        }
    }

    /// Deletes stored command `command_id`: whether there was one.
    pub async fn delete_command_definition(&self, command_id: &str) -> Result<bool, ClientError> {
        let command_id = command_id.to_owned();
        match self
            .command_definitions(DefinitionsRequest::Delete { command_id })
            .await?
        {
            DefinitionsAnswer::Deleted { deleted } => Ok(deleted),
            other => Err(unexpected("whether it was deleted", &other)),
        }
    }

    /// Every command's status changes from now on (any node's, any caller's).
    pub async fn watch_commands(&self) -> Result<CommandWatch, ClientError> {
        let (records, rx) = mpsc::unbounded_channel();
        let (reply, subscribed) = oneshot::channel();
        self.send(ClientCommand::WatchCommands { records, reply })
            .await?;
        subscribed.await.map_err(|_| ClientError::Disconnected)??;
        Ok(CommandWatch { records: rx })
    }

    /// Sends each of `requests` (one command to many devices), all in flight at once.
    pub fn command_many(&self, requests: Vec<CommandRequest>) -> FanOut {
        let (tx, results) = mpsc::unbounded_channel();
        for request in requests {
            let (client, tx) = (self.clone(), tx.clone());
            tokio::spawn(async move {
                let topic = request.topic.clone();
                let _ = tx.send((topic, client.command(request).await));
            });
        }
        FanOut {
            results,
            summary: FanOutSummary::default(),
        }
    }
}

/// How long a stored-commands call waits for the service.
pub(crate) const DEFINITIONS_TIMEOUT_MS: u64 = 10_000;

/// A command's answer, from its call's completion.
pub(crate) fn command_reply(completion: Completion) -> Result<CommandReply, ClientError> {
    match completion {
        Completion::Command(reply) => Ok(reply),
        _ => Err(ClientError::Malformed(
            "a status record in answer to a command".into(),
        )),
    }
}

/// A status query's record, from its call's completion.
pub(crate) fn status_record(completion: Completion) -> Result<Record, ClientError> {
    match completion {
        Completion::CommandStatus(record) => Ok(record),
        _ => Err(ClientError::Malformed(
            "a command reply in answer to a status query".into(),
        )),
    }
}

/// A stored-commands call's answer as the service sent it, from its call's completion.
pub(crate) fn definitions_reply(completion: Completion) -> Result<DefinitionsReply, ClientError> {
    match completion {
        Completion::CommandDefinitions(reply) => Ok(reply),
        _ => Err(ClientError::Malformed(
            "another kind of answer to a stored-commands call".into(),
        )),
    }
}

/// The stored command a `create` or `get` answered.
pub(crate) fn definition_in(answer: DefinitionsAnswer) -> Result<Definition, ClientError> {
    match answer {
        DefinitionsAnswer::Command { command } => Ok(command),
        other => Err(unexpected("a stored command", &other)),
    }
}

/// The service answered another kind of stored-commands call than the one asked.
pub(crate) fn unexpected(wanted: &str, answer: &DefinitionsAnswer) -> ClientError {
    ClientError::Malformed(format!("wanted {wanted}, the service answered {answer:?}"))
}
