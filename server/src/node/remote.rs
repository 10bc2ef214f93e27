//! A node whose state store is in Redis: each call runs in a task of its own and comes back as
//! a [`StoreDone`]; the sweeps of expired keys and ended leases.

use super::*;

/// How often a node on Redis sweeps expired keys and ended leases (any node's sweep finds
/// any key; each expiry is notified once).
pub(crate) const SWEEP_INTERVAL_MS: u64 = 100;

/// The Redis side of a node.
pub(crate) struct Remote {
    pub(crate) store: RedisStore,
    pub(crate) done: tokio::sync::mpsc::UnboundedSender<Done>,
    /// Requests waiting for Redis.
    pub(crate) in_flight: usize,
    /// A sweep is running.
    pub(crate) sweeping: bool,
    /// When the next sweep is due.
    pub(crate) next_sweep: u64,
    /// Whether the last Redis call succeeded.
    pub(crate) up: bool,
}

impl Remote {
    /// Records a Redis call's result: metrics, and a log line when Redis goes away or comes
    /// back (not one per failed call).
    pub(crate) fn note(&mut self, error: Option<&RedisStoreError>, metrics: &Metrics) {
        metrics.store_call(error.is_none(), self.in_flight);
        match (self.up, error) {
            (true, Some(error)) => warn!(
                %error,
                "Redis failed: requests are answered with status 503 until it answers again \
                 (the node reconnects by itself; is Redis running and reachable?)"
            ),
            (false, None) => info!("Redis answers again"),
            _ => {}
        }
        self.up = error.is_none();
    }
}

impl Node {
    /// What Redis answered.
    pub(crate) fn store_done(&mut self, done: StoreDone) {
        let now = self.now();
        let State::Redis(engine, remote) = &mut self.state else {
            return;
        };
        match done {
            StoreDone::Call {
                call,
                result,
                received,
            } => {
                remote.in_flight -= 1;
                remote.note(result.as_ref().err(), &self.metrics);
                let outcome = match result {
                    Ok(applied) => {
                        let applied = *applied;
                        if let Some(expired) = applied.expired {
                            engine.expired(expired, now, &mut self.out);
                        }
                        engine.complete(call, applied.reply, now, &mut self.out)
                    }
                    Err(error) => {
                        debug!(%error, command = ?call.command(), "Redis failed: answered 503");
                        engine.fail(call, error.to_string(), &mut self.out)
                    }
                };
                self.answered(outcome, received);
            }
            StoreDone::Sweep(expired, swept) => {
                remote.sweeping = false;
                remote.next_sweep = now + SWEEP_INTERVAL_MS;
                remote.note(swept.as_ref().err(), &self.metrics);
                let notified = !expired.is_empty();
                for expired in expired {
                    engine.expired(expired, now, &mut self.out);
                }
                if notified {
                    self.queue_out();
                }
                match swept {
                    Ok(swept) => {
                        for (client, registrations) in swept.leases {
                            debug!(?client, registrations, "registration lease ended: dropped");
                            self.metrics.client_dropped();
                        }
                        self.metrics.set_store(swept.stats);
                        self.queue_out();
                    }
                    Err(error) => debug!(%error, "Redis failed during a sweep; retrying"),
                }
            }
            StoreDone::Dropped(clients, result) => {
                remote.note(result.as_ref().err(), &self.metrics);
                match result {
                    Ok(0) => {}
                    Ok(dropped) => {
                        info!(
                            ?clients,
                            registrations = dropped,
                            "client gone: dropped its registrations"
                        );
                        self.metrics.client_dropped();
                    }
                    Err(error) => {
                        warn!(%error, ?clients, "Redis failed while dropping registrations of clients that are gone (their leases end them)");
                    }
                }
            }
        }
    }
}
