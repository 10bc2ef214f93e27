//! A local node's command service (its registry in memory, in the core's node): counted as
//! the `Commander` counts on Redis.

use super::*;

impl Node {
    /// A command request or a device's answer, on a local node (its registry in memory):
    /// counted as the `Commander` counts them, and what it published queued.
    pub(super) fn handle_commands(&mut self, message: Publish) {
        let now = self.now();
        let State::Local(node) = &mut self.state else {
            return;
        };
        let topic = message.topic.clone();
        if let Handled::Commands(handled) = node.handle(message, None, false, now) {
            let metrics = &self.metrics;
            match handled {
                CommandsHandled::Request(Ok(true)) => metrics.command(CommandCount::Sent),
                CommandsHandled::Request(_) => {}
                CommandsHandled::Unanswerable => {
                    metrics.command(CommandCount::Malformed);
                    debug!(%topic, "dropped a command request without response topic or correlation data");
                }
                CommandsHandled::Answer(AnswerSeen::Malformed) => {
                    metrics.command(CommandCount::Malformed);
                    info!(%topic, "dropped an answer that cannot be read");
                }
                CommandsHandled::Answer(AnswerSeen::Unknown) => {
                    metrics.command(CommandCount::Unknown);
                    info!(%topic, "dropped an answer nobody waits for (unknown id, or forgotten)");
                }
                CommandsHandled::Answer(AnswerSeen::Matched(matched)) => {
                    for (how, status) in matched {
                        metrics.command(match how {
                            Matched::Live => match status {
                                CommandStatus::Succeeded => CommandCount::Succeeded,
                                CommandStatus::Failed => CommandCount::Failed,
                                _ => CommandCount::Rejected,
                            },
                            Matched::Progress => CommandCount::Progress,
                            Matched::Late => CommandCount::Late,
                            Matched::Duplicate => CommandCount::Duplicate,
                        });
                    }
                }
                _ => {}
            }
        }
        self.queue_out();
    }
}
