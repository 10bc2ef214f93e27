//! The node's jobs service on Redis (each request and tick a [`JobsWork`] whose store calls
//! run on the node's connection and come back as [`JobsDone::Step`]) and the election of the
//! node that listens to the device API.

use super::*;
use mqstore_core::server::{JobsStep, JobsWork};
use mqstore_core::shadow;

impl Node {
    /// A jobs call on Redis ended.
    pub(super) fn jobs_done(&mut self, done: JobsDone) {
        if let JobsDone::Step(mut work, answer) = done {
            work.answered(answer);
            return self.drive_jobs(work);
        }
        let (now, monotonic) = (self.now(), self.monotonic());
        let Some(JobsService::Shared(shared)) = &mut self.jobs else {
            return;
        };
        match done {
            JobsDone::Step(..) => {}
            JobsDone::Request(out, handled) => {
                shared.in_flight -= 1;
                self.out.extend(out);
                self.jobs_handled(handled);
            }
            JobsDone::Tick(out, ticked) => {
                shared.ticking -= 1;
                // Rollouts go on at the next turn of the loop; timers are looked for again
                // after a tick's pause.
                // Timers and rollouts other nodes started are looked for every tick.
                let wake = ticked.as_ref().ok().copied().flatten();
                shared.busy = wake.is_some_and(|at| at <= now);
                let after = wake.map_or(JOBS_TICK_MS, |at| at.clamp(now, now + JOBS_TICK_MS) - now);
                shared.next_tick = monotonic + after;
                if let Err(error) = ticked {
                    debug!(%error, "Redis failed during a jobs tick; retrying");
                }
                self.metrics
                    .jobs_notified(server::jobs::notifications_in(&out) as u64);
                self.out.extend(out);
                self.queue_out();
            }
            JobsDone::Released(released) => {
                if let Some(listener) = &mut shared.listener {
                    listener.releasing = false;
                }
                if let Err(error) = released {
                    warn!(%error, "could not give the jobs device API up: another node takes it over when its lease ends");
                }
            }
            JobsDone::Claim(started, held) => {
                let Some(listener) = &mut shared.listener else {
                    return;
                };
                listener.claiming = false;
                listener.next_claim = monotonic + LISTENER_RENEW_MS;
                if matches!(held, Ok(true)) {
                    // The lease runs from when Redis ran the claim, after `started`.
                    listener.held_until = started + LISTENER_LEASE_MS - LISTENER_RENEW_MS;
                }
                // Redis away: the listener goes on until `held_until` (the others cannot take
                // the lease before it ends either).
                let leads = match held {
                    Ok(held) => held,
                    Err(ref error) => {
                        debug!(%error, "Redis failed during a listener claim; retrying");
                        listener.leader && monotonic < listener.held_until
                    }
                };
                if leads && !listener.leader && self.stop == Stop::Running {
                    listener.leader = true;
                    for filter in self.elected_filters() {
                        let client = self.outbox.client();
                        if let Err(e) = client.try_subscribe_many([subscription(&filter)]) {
                            warn!(error = %e, %filter, "subscribe failed");
                        }
                    }
                    self.metrics.set_jobs_listener(true);
                    info!("this node now listens to the jobs device API for all nodes");
                } else if !leads {
                    self.stop_listening();
                }
            }
        }
    }

    /// Unsubscribes from the device API if this node listened to it as the elected node.
    pub(super) fn stop_listening(&mut self) {
        let filters = self.elected_filters();
        if let Some(JobsService::Shared(shared)) = &mut self.jobs
            && let Some(listener) = &mut shared.listener
            && listener.leader
        {
            for filter in filters {
                let _ = self.outbox.client().try_unsubscribe(filter);
            }
            listener.leader = false;
            self.metrics.set_jobs_listener(false);
            info!("this node no longer listens to the jobs device API");
        }
    }

    /// What this node subscribes to as the elected listener (nothing unless it is): the jobs
    /// device API, the shadows' requests, and the command answer topics on `$…`.
    pub(super) fn elected_filters(&self) -> Vec<String> {
        if self.elected_listener().is_none() {
            return Vec::new();
        }
        let commands = self
            .commands
            .iter()
            .flat_map(|c| c.elected_filters.iter().cloned());
        std::iter::once(jobs_topics::DEVICE_FILTER)
            .chain(shadow::REQUEST_FILTERS)
            .map(str::to_owned)
            .chain(commands)
            .collect()
    }

    /// Whether this node listens to the jobs device API as the elected node.
    pub(super) fn elected_listener(&self) -> Option<&Listener> {
        match &self.jobs {
            Some(JobsService::Shared(SharedJobs {
                listener: Some(listener),
                ..
            })) if listener.leader => Some(listener),
            _ => None,
        }
    }

    /// A device request (`$aws/things/T/jobs/...`) or an operator request: the reply after the
    /// notifications it causes (now in memory; on Redis once its thread is done).
    pub(super) fn handle_jobs(&mut self, message: Publish) {
        let now = self.now();
        match (&mut self.state, &mut self.jobs) {
            (State::Local(node), Some(JobsService::Local)) => {
                if let Handled::Jobs(handled) = node.handle(message, None, false, now) {
                    self.jobs_handled(handled);
                } else {
                    self.check_disk();
                }
            }
            (_, Some(JobsService::Shared(shared))) => {
                match shared.shadows_in_flight.start(&message, now) {
                    shadow::Admitted::Refused(op, refusal) => {
                        self.metrics.shadow_handled(op, false);
                        self.out.push(refusal);
                        self.queue_out();
                    }
                    // Counted in flight now (a stop waits for it); run when its thing's
                    // request before it is answered (`drive_jobs`).
                    shadow::Admitted::Waiting => shared.in_flight += 1,
                    _ => {
                        shared.in_flight += 1;
                        self.run_jobs_request(message);
                    }
                }
            }
            _ => {}
        }
    }

    /// Runs a jobs request (admitted and counted in flight) on Redis.
    fn run_jobs_request(&mut self, message: Publish) {
        let now = self.now();
        let Some(JobsService::Shared(shared)) = &self.jobs else {
            return;
        };
        let work = shared.request(message, self.state.node_id(), now);
        self.drive_jobs(work);
    }

    /// Takes a jobs work on Redis one step on: its next store call runs on the node's
    /// connection (and comes back as [`JobsDone::Step`]), or its outcome is taken in.
    pub(super) fn drive_jobs(&mut self, mut work: Box<JobsWork>) {
        match work.step() {
            JobsStep::Call(call) => {
                let Some(JobsService::Shared(shared)) = &self.jobs else {
                    return;
                };
                let (store, done) = (shared.store.clone(), shared.done.clone());
                tokio::spawn(async move {
                    let answer = store.run(call).await;
                    let _ = done.send(Done::Jobs(JobsDone::Step(work, answer)));
                });
            }
            JobsStep::Request(out, handled) => {
                let next = match (&mut self.jobs, work.message()) {
                    (Some(JobsService::Shared(shared)), Some(message)) => {
                        shared.shadows_in_flight.finish(&message.topic)
                    }
                    _ => None,
                };
                self.jobs_done(JobsDone::Request(out, handled));
                // The thing's next shadow request, which waited for this one.
                if let Some(next) = next {
                    self.run_jobs_request(next);
                }
            }
            JobsStep::Tick(out, ticked) => self.jobs_done(JobsDone::Tick(out, ticked)),
            _ => {}
        }
    }

    /// Counts a jobs request that ran, and queues what it published.
    pub(super) fn jobs_handled(&mut self, handled: Result<JobsHandled, NotAnswered>) {
        match handled {
            Ok(handled) => {
                let accepted = handled.answered == mqstore_core::jobs::Answered::Accepted;
                self.metrics.shadow_raced(handled.races);
                match handled.shadow {
                    Some(op) => self.metrics.shadow_handled(op, accepted),
                    None => self.metrics.jobs_handled(accepted, handled.notifications),
                }
            }
            Err(NotAnswered::Dropped(reason)) => debug!(%reason, "operator request dropped"),
            Err(NotAnswered::NoRequest) => self.metrics.jobs_ignored(),
            Err(_) => {}
        }
        self.queue_out();
    }

    /// Jobs requests (on Redis) still running.
    pub(super) fn jobs_in_flight(&self) -> usize {
        match &self.jobs {
            Some(JobsService::Shared(shared)) => {
                let releasing = shared.listener.as_ref().is_some_and(|l| l.releasing);
                shared.in_flight + shared.ticking + usize::from(releasing)
            }
            _ => 0,
        }
    }
}
