//! The node's command service. A local node's is the core node's (its registry in memory); on
//! Redis the node holds the core's [`Service`] itself, runs the registry calls it asks for on
//! Redis from the loop (many at once, none waited on), and hears on its Redis channel the
//! answers other nodes read for its callers. Either way: one connection, the node's.

use super::*;
use crate::done::CommandsDone;
use crate::registry_calls::PipeReply;
use crate::registry_calls::RegistryCalls;
use mqstore_core::server::commands::Service;

/// The command service of a node on Redis.
pub(crate) struct RemoteCommands {
    pub(crate) service: Service,
    /// Runs the service's registry calls on Redis; answers come back as [`Done`].
    pub(crate) calls: RegistryCalls<Done>,
    /// The answer topics on `$…` read only while this node is the elected listener (brokers
    /// such as mosquitto deliver no `$…` topic to a shared subscription; one node reads them
    /// for all, so each update is acknowledged, and each event published, once).
    pub(crate) elected_filters: Vec<String>,
    /// Hears the answers forwarded to this node (aborted when the node stops).
    pub(crate) listening: tokio::task::JoinHandle<()>,
}

impl Node {
    /// A command request or a device's answer.
    pub(super) fn handle_commands(&mut self, message: Publish) {
        let now = self.now();
        match (&mut self.state, &mut self.commands) {
            (State::Local(node), _) => {
                node.handle(message, None, false, now);
            }
            (State::Redis(..), Some(remote)) => remote.service.handle(message, None, now),
            (State::Redis(..), None) => return,
        }
        self.commands_moved();
        self.queue_out();
    }

    /// A registry call on Redis ended, or another node forwarded an answer.
    pub(super) fn commands_done(&mut self, done: CommandsDone) {
        let now = self.now();
        if let Some(remote) = &mut self.commands {
            match done {
                CommandsDone::Answered(token, answer) => {
                    remote.service.answered(token, answer, now)
                }
                CommandsDone::Forwarded(record) => remote.service.forwarded(*record),
            }
        }
        self.commands_moved();
        self.queue_out();
    }

    /// The broker took or refused (`None`: the connection dropped first) the publish that
    /// carried a one-way command's `receipt`.
    pub(super) fn command_acknowledged(&mut self, receipt: &Receipt, code: Option<u8>) {
        let now = self.now();
        match (&mut self.state, &mut self.commands) {
            (State::Local(node), _) => node.acknowledged(receipt, code, now),
            (State::Redis(..), Some(remote)) => remote.service.acknowledged(receipt, code, now),
            (State::Redis(..), None) => {}
        }
        self.commands_moved();
    }

    /// A reply on the registry's pipe to Redis (an error: the pipe is gone).
    pub(super) fn commands_piped(&mut self, reply: std::io::Result<PipeReply>) {
        let now = self.now();
        if let Some(remote) = &mut self.commands {
            remote.calls.replied(&mut remote.service, reply, now);
        }
        self.commands_moved();
        self.queue_out();
    }

    /// The commands' timers (a local node's run with its other timers).
    pub(super) fn commands_deadline(&mut self, now_ms: u64) {
        if let Some(remote) = &mut self.commands {
            remote.calls.on_deadline(&mut remote.service, now_ms);
            remote.service.on_deadline(now_ms);
            self.commands_moved();
        }
    }

    /// Counts and logs what the command service did, and starts on Redis the registry calls
    /// it asked for; what it publishes is queued by [`Node::queue_out`].
    pub(super) fn commands_moved(&mut self) {
        let metrics = &self.metrics;
        match &mut self.state {
            State::Local(node) => {
                while let Some(seen) = node.poll_commands_seen() {
                    metrics.command_seen(seen);
                }
            }
            State::Redis(..) => {
                let Some(remote) = &mut self.commands else {
                    return;
                };
                while let Some(seen) = remote.service.poll_seen() {
                    metrics.command_seen(seen);
                }
                remote.calls.start(&mut remote.service);
            }
        }
    }

    /// Registry calls on Redis not answered yet.
    pub(super) fn commands_in_flight(&self) -> usize {
        self.commands
            .as_ref()
            .map_or(0, |remote| remote.service.calls_in_flight())
    }

    /// The next command timeout or record to forget on Redis, or when the registry's pipe
    /// has waited too long.
    pub(super) fn commands_next_deadline(&self) -> Option<u64> {
        let remote = self.commands.as_ref()?;
        let service = remote.service.next_deadline();
        service.into_iter().chain(remote.calls.deadline()).min()
    }
}
