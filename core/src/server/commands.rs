//! The command service as a state machine, on the memory [`Registry`]: callers' requests
//! (`mqstore/commands/v1/…`) and devices' answers in, commands, answers to callers, events and
//! acknowledgements out, and the timeouts of commands at [`Service::next_deadline`]. The
//! server node ([`super::Node`]) runs it; a host only moves messages and time.
//!
//! Modes: `await` answers the caller when the command is settled or timed out; `detached`
//! answers at once with the SENT record (the answer goes to the record); `one-way` answers
//! DELIVERED once the broker took the command, which the host reports
//! ([`Service::acknowledged`], for the publish that carries a [`Receipt`]).

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::{Out, Receipt, To};
use crate::commands::definitions::{DEFINITIONS_TOPIC, Definition, DefinitionsRequest};
use crate::commands::wire::{self, Refusal};
use crate::commands::{
    Acknowledgement, CommandError, CommandRequest, Matched, Mode, Profile, Profiles, Record,
    Registry, Sender, Status, aws_event,
};
use crate::envelope::Publish;

/// Settings of a [`Service`].
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The node's name in records.
    pub node_id: String,
    /// The client id MQTT 5 devices answer to (`clients/{client_id}/…`): the service reads
    /// every answer published there.
    pub client_id: String,
    /// How commands go out and answers are matched, by profile name.
    pub profiles: Profiles,
    /// Publish every status change on `mqstore/commands/v1/events/{id}`.
    pub events: bool,
    /// 16 random bytes per command (its id), from the host's source of randomness.
    pub random_id: fn() -> [u8; 16],
}

/// What a message to the service was, for the host's logs and counters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommandsHandled {
    /// A caller's request: taken (`true` when it sent a command to a device), or refused.
    Request(Result<bool, Refusal>),
    /// A request that names no response topic or correlation data: dropped.
    Unanswerable,
    /// A device's answer, and what it matched.
    Answer(AnswerSeen),
}

/// What a device's answer matched.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnswerSeen {
    /// It could not be read (refused to the device where its profile acknowledges).
    Malformed,
    /// No command waits for it (unknown id, or forgotten).
    Unknown,
    /// It matched these commands: how, and the status each has now (an uncorrelated answer
    /// settles every command waiting on its topic).
    Matched(Vec<(Matched, Status)>),
}

/// A caller waiting for a command's end, by its request (to answer on its response topic).
#[derive(Debug)]
struct Caller {
    request: Publish,
    sender: Option<String>,
}

/// The command service: see the module's documentation.
#[derive(Debug)]
pub struct Service {
    config: ServiceConfig,
    /// `clients/{client_id}/`: where MQTT 5 devices answer.
    direct_prefix: String,
    registry: Registry,
    /// Callers waiting for an answer (await mode) or for the broker (one-way), by command id.
    callers: HashMap<String, Caller>,
    /// When each command waiting for its answer times out.
    deadlines: BTreeSet<(u64, String)>,
    output: VecDeque<Out>,
    /// Definitions created or deleted since the host last took them (see
    /// [`Service::take_definition_changes`]).
    definition_changes: Vec<(String, Option<Definition>)>,
}

impl Service {
    /// A service with an empty registry.
    pub fn new(config: ServiceConfig) -> Self {
        Self {
            direct_prefix: format!("clients/{}/", config.client_id),
            config,
            registry: Registry::new(),
            callers: HashMap::new(),
            deadlines: BTreeSet::new(),
            output: VecDeque::new(),
            definition_changes: Vec::new(),
        }
    }

    /// Stored commands kept from before (a data directory's), defined again at start.
    pub fn restore_definitions(&mut self, definitions: impl IntoIterator<Item = Definition>) {
        for definition in definitions {
            self.registry.define(definition);
        }
    }

    /// The stored commands created (`Some`) or deleted (`None`) since the last call, by id,
    /// in order: what a host that keeps them (a data directory) writes.
    pub fn take_definition_changes(&mut self) -> Vec<(String, Option<Definition>)> {
        std::mem::take(&mut self.definition_changes)
    }

    /// Whether a message on `topic` is the service's: a caller's request, or a device's
    /// answer (on the direct topics, or a topic profile's answer topic).
    pub fn is_for(&self, topic: &str) -> bool {
        is_request(topic)
            || topic.starts_with(&self.direct_prefix)
            || self.config.profiles.for_answer(topic).is_some()
    }

    /// Records kept (settled ones for a while, for status requests).
    pub fn records(&self) -> usize {
        self.registry.len()
    }

    /// Handles a caller's request or a device's answer (see [`Service::is_for`]); what it
    /// publishes is in [`Service::poll_output`].
    pub fn handle(
        &mut self,
        publish: Publish,
        sender: Option<&str>,
        now_ms: u64,
    ) -> CommandsHandled {
        if is_request(&publish.topic) {
            return self.request(publish, sender, now_ms);
        }
        let direct = publish.topic.starts_with(&self.direct_prefix);
        CommandsHandled::Answer(self.answer(publish, direct, now_ms))
    }

    /// When the next command waiting for its answer times out, or a record is forgotten.
    pub fn next_deadline(&self) -> Option<u64> {
        let timeout = self.deadlines.first().map(|(at, _)| *at);
        timeout.into_iter().chain(self.registry.next_forget()).min()
    }

    /// Times out the commands whose deadline passed (their waiting callers are answered
    /// TIMED_OUT) and forgets old records.
    pub fn on_deadline(&mut self, now_ms: u64) -> usize {
        let mut timed_out = 0;
        while let Some((at, _)) = self.deadlines.first()
            && *at <= now_ms
        {
            let Some((at, id)) = self.deadlines.pop_first() else {
                break;
            };
            let Some(record) = self.registry.time_out(&id, now_ms.max(at)) else {
                continue;
            };
            if record.status == Status::TimedOut {
                timed_out += 1;
                self.event(&record);
            }
            self.answer_caller(&record);
        }
        self.registry.forget(now_ms);
        timed_out
    }

    /// The broker took (reason code below 0x80) or refused the publish of a one-way command
    /// (`None`: the connection dropped before the broker said): its caller gets DELIVERED, or
    /// why not.
    pub fn acknowledged(&mut self, receipt: &Receipt, code: Option<u8>, now_ms: u64) {
        let Some(caller) = self.callers.remove(&receipt.0) else {
            return;
        };
        let Some(code) = code else {
            let refusal = Refusal {
                status: 503,
                message: "the connection dropped before the broker acknowledged the command".into(),
            };
            let reply = wire::reply_refusal(&caller.request, &refusal);
            return self.push(reply, To::Requester(caller.sender));
        };
        let reply = if code < 0x80 {
            match self.registry.delivered(&receipt.0, now_ms) {
                Some(record) => {
                    self.event(&record);
                    wire::reply_record(&caller.request, &record, false)
                }
                None => return,
            }
        } else {
            let refusal = Refusal {
                status: 503,
                message: format!(
                    "the broker refused the command (PUBACK reason code 0x{code:02X})"
                ),
            };
            wire::reply_refusal(&caller.request, &refusal)
        };
        self.push(reply, To::Requester(caller.sender));
    }

    /// The next publish, in order.
    pub fn poll_output(&mut self) -> Option<Out> {
        self.output.pop_front()
    }

    fn request(&mut self, publish: Publish, sender: Option<&str>, now_ms: u64) -> CommandsHandled {
        if publish.properties.response_topic.is_none() {
            return CommandsHandled::Unanswerable;
        }
        let to = || To::Requester(sender.map(str::to_owned));
        let answered = if publish.topic == DEFINITIONS_TOPIC {
            match self.definitions(&publish.payload, now_ms) {
                Ok(answer) => Ok(Some(wire::reply_json(&publish, &answer))),
                Err(refusal) => Err(refusal),
            }
        } else if publish.topic == wire::STATUS_TOPIC {
            let id = String::from_utf8_lossy(&publish.payload);
            self.registry.forget(now_ms);
            match self.registry.get(id.trim()) {
                Some(record) => Ok(Some(wire::reply_record(&publish, record, true))),
                None => Err(Refusal::not_found(id.trim())),
            }
        } else {
            match wire::read_invoke(&publish) {
                None => return CommandsHandled::Unanswerable,
                Some(Err(refusal)) => Err(refusal),
                Some(Ok(request)) => match self.invoke(request, &publish, sender, now_ms) {
                    // Answered now (detached) or when the command ends.
                    Ok(reply) => {
                        if let Some(reply) = reply {
                            self.push(reply, to());
                        }
                        return CommandsHandled::Request(Ok(true));
                    }
                    Err(e) => Err(Refusal::of_command(&e)),
                },
            }
        };
        match answered {
            Ok(reply) => {
                self.push_all(reply, to());
                CommandsHandled::Request(Ok(false))
            }
            Err(refusal) => {
                self.push(wire::reply_refusal(&publish, &refusal), to());
                CommandsHandled::Request(Err(refusal))
            }
        }
    }

    /// Sends a command: records it, publishes it in its profile's shape; the reply to the
    /// caller now (detached), or `None` (answered when the command ends).
    fn invoke(
        &mut self,
        request: CommandRequest,
        invoke: &Publish,
        sender: Option<&str>,
        now_ms: u64,
    ) -> Result<Option<Publish>, CommandError> {
        let definition = request
            .command
            .as_deref()
            .and_then(|id| self.registry.definition(id));
        let request = request.start_stored(definition)?;
        let profile = self.config.profiles.get(&request.profile)?;
        let node = Sender {
            node: &self.config.node_id,
            client_id: &self.config.client_id,
        };
        let prepared = profile.prepare(&request, node, (self.config.random_id)(), now_ms)?;
        let (record, publish) = (prepared.record, prepared.publish);
        self.registry.register(record.clone(), now_ms)?;
        self.event(&record);
        let caller = || Caller {
            request: Publish {
                payload: bytes::Bytes::new(),
                ..invoke.clone()
            },
            sender: sender.map(str::to_owned),
        };
        let id = record.id.clone();
        let reply = match request.mode {
            Mode::OneWay => {
                self.callers.insert(id.clone(), caller());
                self.output.push_back(Out {
                    publish,
                    to: To::Subscribers,
                    receipt: Some(Receipt(id)),
                });
                return Ok(None);
            }
            Mode::Await => {
                self.callers.insert(id.clone(), caller());
                None
            }
            Mode::Detached => Some(wire::reply_record(invoke, &record, false)),
        };
        self.deadlines.insert((record.deadline_ms, id));
        self.push(publish, To::Subscribers);
        Ok(reply)
    }

    /// A device's answer: looked up, the record settled, its caller answered, the device's
    /// update acknowledged where its profile does.
    fn answer(&mut self, publish: Publish, direct: bool, now_ms: u64) -> AnswerSeen {
        let profiles = &self.config.profiles;
        let profile = match direct {
            true => &Profile::Mqtt5,
            false => match profiles.for_answer(&publish.topic) {
                Some((_, profile)) => profile,
                None => return AnswerSeen::Unknown,
            },
        };
        let (key, answer) = match profile.read_answer(&publish) {
            Ok(read) => read,
            Err(unreadable) => {
                let ack = Acknowledgement::unreadable(unreadable);
                let reply = profile.acknowledge(&publish, &ack);
                self.push_all(reply, To::Subscribers);
                return AnswerSeen::Malformed;
            }
        };
        let id = key.id.clone().unwrap_or_default();
        let matched = self.registry.answer(&key, answer, now_ms);
        let ack = Acknowledgement::of(&matched, &id);
        let ack_reply = profile.acknowledge(&publish, &ack);
        let seen = match matched.is_empty() {
            true => AnswerSeen::Unknown,
            false => AnswerSeen::Matched(matched.iter().map(|(how, r)| (*how, r.status)).collect()),
        };
        for (how, record) in matched {
            if how != Matched::Duplicate {
                self.event(&record);
            }
            if how == Matched::Live && record.is_final() {
                self.deadlines
                    .remove(&(record.deadline_ms, record.id.clone()));
                self.answer_caller(&record);
            }
        }
        self.push_all(ack_reply, To::Subscribers);
        seen
    }

    /// Answers the caller waiting for `record`'s command, if one does.
    fn answer_caller(&mut self, record: &Record) {
        if let Some(caller) = self.callers.remove(&record.id) {
            let reply = wire::reply_record(&caller.request, record, false);
            self.push(reply, To::Requester(caller.sender));
        }
    }

    /// Answers a request on [`DEFINITIONS_TOPIC`].
    fn definitions(&mut self, payload: &[u8], now_ms: u64) -> Result<serde_json::Value, Refusal> {
        match DefinitionsRequest::read(payload).map_err(Refusal::bad_request)? {
            DefinitionsRequest::Create { mut command } => {
                command.check().map_err(Refusal::bad_request)?;
                command.created_ms = now_ms;
                match self.registry.define(command.clone()) {
                    true => {
                        let answer = serde_json::json!({ "command": command });
                        let id = command.command_id.clone();
                        self.definition_changes.push((id, Some(command)));
                        Ok(answer)
                    }
                    false => Err(Refusal::taken(&command.command_id)),
                }
            }
            DefinitionsRequest::Get { command_id } => match self.registry.definition(&command_id) {
                Some(command) => Ok(serde_json::json!({ "command": command })),
                None => Err(Refusal::no_definition(&command_id)),
            },
            DefinitionsRequest::List => {
                let commands: Vec<_> = self.registry.definitions().collect();
                Ok(serde_json::json!({ "commands": commands }))
            }
            DefinitionsRequest::Delete { command_id } => {
                let deleted = self.registry.undefine(&command_id);
                if deleted {
                    self.definition_changes.push((command_id, None));
                }
                Ok(serde_json::json!({ "deleted": deleted }))
            }
        }
    }

    /// Publishes a status change (QoS 0), if events are on: ours, and AWS IoT commands' own
    /// for an execution of a stored command.
    fn event(&mut self, record: &Record) {
        if self.config.events {
            let events = std::iter::once(wire::event(record)).chain(aws_event(record));
            for event in events {
                self.push(event, To::Subscribers);
            }
        }
    }

    fn push(&mut self, publish: Publish, to: To) {
        self.output.push_back(Out {
            publish,
            to,
            receipt: None,
        });
    }

    fn push_all(&mut self, publishes: impl IntoIterator<Item = Publish>, to: To) {
        for publish in publishes {
            self.push(publish, to.clone());
        }
    }
}

/// Whether `topic` is one of the service's request topics.
pub fn is_request(topic: &str) -> bool {
    topic == wire::INVOKE_TOPIC || topic == wire::STATUS_TOPIC || topic == DEFINITIONS_TOPIC
}
