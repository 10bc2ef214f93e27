//! How a host — `mqstore serve`'s node on Redis, or a [`Commander`](crate::commander::Commander)
//! — runs the registry calls of the core's command service on Redis: the two that every
//! awaited command makes (its record's first write, and the write of its answer from the
//! record this node wrote: [`RedisRegistry::put_of`]) on a [`Pipe`] of the host's own, every
//! other call on the shared Redis client in a task of its own. What the pipe carries goes out
//! together on the host's next wait — once the batch before it is answered: one batch at Redis
//! at a time — and comes back, in order, as its wake-ups ([`PipeReader::reply`]): no task,
//! channel or timer per call (docs/performance.md, "The command registry's own pipe to Redis").
//!
//! A pipe that drops, or whose oldest write goes unanswered for [`REPLY_TIMEOUT`], fails the
//! calls on it (their callers get the registry's 503, as from the shared client) and is
//! opened again, once a second until Redis takes it; meanwhile every call uses the shared
//! client. On Sentinel the pipe goes to the primary the sentinels name, and one that answers
//! `READONLY` (deposed by a failover) fails so too. When writes wait for replicas
//! (`--redis-wait-replicas`), each batch ends in one `WAIT`, and its writes are answered once
//! that `WAIT` is: confirmed on the replicas asked for, or each a failed call, as one `WAIT` per
//! write on the shared client would answer them. A Redis the pipe does not serve (a Cluster,
//! `rediss://…#insecure`) gets no pipe.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::lock;
use crate::redis_store::pipe::{Pipe, Reply};
use crate::redis_store::{Put, RESPONSE_TIMEOUT, RedisRegistry};
use mqstore_core::commands::{RegistryAnswer, RegistryCall};
use mqstore_core::server::commands::Service;

/// How long the oldest write on the pipe may wait for its reply before the pipe is given up:
/// what the shared client allows a call (when writes wait for replicas, their `WAIT`'s
/// timeout is added, as the shared client adds it).
const REPLY_TIMEOUT: Duration = RESPONSE_TIMEOUT;

/// How long after a pipe failed the next one is tried.
const REOPEN_EVERY: Duration = Duration::from_secs(1);

/// The writes the host queued, until its wait sends them. The host and its wait run in one
/// task, one after the other: the lock is never contended (a mutex only because the task must
/// be `Send`).
#[derive(Default)]
struct Queue {
    commands: Vec<u8>,
    /// How many commands `commands` holds (the pipe counts the replies it awaits).
    count: usize,
    /// Whether there is a pipe to send them on (the host writes only then).
    up: bool,
    /// Whether a task is opening a new pipe.
    reopening: bool,
}

/// A host's runner of its command service's calls on a Redis registry. `I` is the host's
/// wake-up type: answers from the shared client and a reopened pipe come back as one.
pub(crate) struct RegistryCalls<I> {
    registry: RedisRegistry,
    inputs: mpsc::UnboundedSender<I>,
    answered: fn(u64, RegistryAnswer) -> I,
    opened: fn(Pipe) -> I,
    queue: Arc<Mutex<Queue>>,
    /// The writes sent or queued on the pipe, in order: their call's token, and when they
    /// were queued.
    waiting: VecDeque<(u64, Put, u64)>,
    /// When writes wait for replicas: the writes answered, with their replies, until the
    /// `WAIT` after them is.
    held: Vec<(u64, Put, u64, Reply)>,
    /// Whether writes wait for replicas.
    waits: bool,
    /// How long the oldest write may wait for its answer (its `WAIT`'s included).
    reply_timeout: Duration,
}

/// A reply read on a host's pipe, for [`RegistryCalls::replied`].
#[derive(Debug)]
pub(crate) enum PipeReply {
    /// A write's.
    Write(Reply),
    /// The `WAIT` after a batch of writes, when writes wait for replicas: how many replicas
    /// have them all.
    Replicas(Reply),
}

/// The host's wait's side of its pipe: read while the host waits for its other wake-ups.
#[derive(Default)]
pub(crate) struct PipeReader {
    pipe: Option<Pipe>,
    queue: Arc<Mutex<Queue>>,
    /// The `WAIT` sent after each batch when writes wait for replicas.
    wait: Option<Vec<u8>>,
    /// The replies of the batch at Redis still to read before its `WAIT`'s.
    before_wait: usize,
}

impl<I: Send + 'static> RegistryCalls<I> {
    /// Opens the host's pipe to `registry`'s Redis (when it serves one) and gives the two
    /// sides: answers from the shared client come to `inputs` as `answered`, a pipe opened
    /// again as `opened` (for the host's wait to hand to [`PipeReader::open`]).
    pub(crate) async fn open(
        registry: RedisRegistry,
        inputs: mpsc::UnboundedSender<I>,
        answered: fn(u64, RegistryAnswer) -> I,
        opened: fn(Pipe) -> I,
    ) -> (Self, PipeReader) {
        let pipe = registry.pipe().await;
        let queue = Arc::new(Mutex::new(Queue::default()));
        let (wait, wait_timeout) = registry.pipe_wait().unzip();
        let waits = wait.is_some();
        let reply_timeout = REPLY_TIMEOUT + wait_timeout.unwrap_or_default();
        let mut calls = Self {
            registry,
            inputs,
            answered,
            opened,
            queue: queue.clone(),
            waiting: VecDeque::new(),
            held: Vec::new(),
            waits,
            reply_timeout,
        };
        let mut reader = PipeReader {
            pipe: None,
            queue,
            wait,
            before_wait: 0,
        };
        match pipe {
            Some(Ok(pipe)) => reader.open(pipe),
            Some(Err(e)) => {
                warn!(error = %e, "commands: no pipe to Redis for command records; using the shared connection meanwhile");
                calls.reopen();
            }
            None => {}
        }
        (calls, reader)
    }

    /// Starts the registry calls `service` asks for.
    pub(crate) fn start(&mut self, service: &mut Service) {
        while let Some(work) = service.poll_call() {
            if let Err(call) = self.pipe(work.token, work.call, work.now_ms) {
                self.run(work.token, call, work.now_ms);
            }
        }
    }

    /// Queues `call` on the pipe when it is one that goes there and there is a pipe; gives it
    /// back otherwise.
    #[allow(clippy::result_large_err)] // the call moves in and out once, as it would anyway
    fn pipe(&mut self, token: u64, call: RegistryCall, now_ms: u64) -> Result<(), RegistryCall> {
        let mut queue = lock(&self.queue);
        if !queue.up {
            return Err(call);
        }
        let put = self.registry.put_of(call, now_ms)?;
        self.registry.encode(&mut queue.commands, &put, false);
        queue.count += 1;
        self.waiting.push_back((token, put, now_ms));
        Ok(())
    }

    /// Runs `call` on the shared client, in a task; its answer comes back as an input.
    fn run(&self, token: u64, call: RegistryCall, now_ms: u64) {
        let (registry, inputs, answered) =
            (self.registry.clone(), self.inputs.clone(), self.answered);
        tokio::spawn(async move {
            let answer = registry.run(call, now_ms).await;
            let _ = inputs.send(answered(token, answer));
        });
    }

    /// A reply on the pipe (an error: the pipe is gone) for `service`.
    pub(crate) fn replied(
        &mut self,
        service: &mut Service,
        reply: io::Result<PipeReply>,
        now_ms: u64,
    ) {
        let reply = match reply {
            Ok(PipeReply::Write(reply)) => reply,
            Ok(PipeReply::Replicas(wait)) => return self.replicated(service, &wait, now_ms),
            Err(e) => return self.failed(service, &format!("Redis: {e}"), now_ms),
        };
        if let Reply::Error(e) = &reply
            && e.starts_with("READONLY")
        {
            // A Sentinel failover made the server a replica: every write on this pipe will be
            // refused so; the next pipe goes to the primary the sentinels name.
            return self.failed(service, &format!("Redis: {e}"), now_ms);
        }
        let Some((token, put, queued)) = self.waiting.pop_front() else {
            return;
        };
        if matches!(&reply, Reply::Error(e) if e.starts_with("NOSCRIPT")) {
            // Redis forgot the script (it restarted): sent again with its code, last.
            let mut queue = lock(&self.queue);
            self.registry.encode(&mut queue.commands, &put, true);
            queue.count += 1;
            drop(queue);
            self.waiting.push_back((token, put, queued));
            return;
        }
        if self.waits {
            self.held.push((token, put, queued, reply));
            return;
        }
        self.settle(service, token, put, reply, now_ms);
    }

    /// A write's answer, from its reply.
    fn settle(&self, service: &mut Service, token: u64, put: Put, reply: Reply, now_ms: u64) {
        match self.registry.put_answer(put, reply) {
            Ok(answer) => service.answered(token, answer, now_ms),
            Err(call) => self.run(token, call, now_ms),
        }
    }

    /// The `WAIT` after the held writes answered: they are settled, and those that wrote fail
    /// unless the replicas asked for have them (the shared client's answer to such a write).
    fn replicated(&mut self, service: &mut Service, wait: &Reply, now_ms: u64) {
        let held = std::mem::take(&mut self.held);
        let wrote = |reply: &Reply| *reply == Reply::Int(1);
        let writes = held.iter().filter(|(.., reply)| wrote(reply)).count();
        let confirmed = self.registry.replicated(wait, writes as u64);
        for (token, put, _, reply) in held {
            match &confirmed {
                Err(why) if wrote(&reply) => {
                    service.answered(token, RegistryAnswer::Failed(why.clone()), now_ms)
                }
                _ => self.settle(service, token, put, reply, now_ms),
            }
        }
    }

    /// When the oldest write on the pipe has waited too long for its reply, rounded up to a
    /// quarter second: the host's timer is not moved at every reply.
    pub(crate) fn deadline(&self) -> Option<u64> {
        const GRAIN: u64 = 250;
        let queued = self.oldest()?;
        Some((queued + self.reply_timeout.as_millis() as u64).div_ceil(GRAIN) * GRAIN)
    }

    /// When the oldest write still unanswered was queued.
    fn oldest(&self) -> Option<u64> {
        let held = self.held.first().map(|(_, _, queued, _)| *queued);
        held.or_else(|| self.waiting.front().map(|(_, _, queued)| *queued))
    }

    /// At the host's deadline: a pipe whose oldest write has had no reply for its reply
    /// timeout is given up (the reader drops it), and its calls fail.
    pub(crate) fn on_deadline(&mut self, service: &mut Service, now_ms: u64) {
        let Some(queued) = self.oldest() else {
            return;
        };
        if queued + self.reply_timeout.as_millis() as u64 <= now_ms {
            let why = format!("Redis did not answer within {:?}", self.reply_timeout);
            self.failed(service, &why, now_ms);
        }
    }

    fn failed(&mut self, service: &mut Service, why: &str, now_ms: u64) {
        warn!(error = %why, "commands: the pipe to Redis for command records failed; opening another");
        self.registry.pipe_failed();
        {
            let mut queue = lock(&self.queue);
            queue.up = false;
            queue.commands.clear();
            queue.count = 0;
        }
        let held = std::mem::take(&mut self.held)
            .into_iter()
            .map(|(token, ..)| token);
        let waiting = std::mem::take(&mut self.waiting)
            .into_iter()
            .map(|(token, ..)| token);
        for token in held.chain(waiting) {
            service.answered(token, RegistryAnswer::Failed(why.to_owned()), now_ms);
        }
        self.reopen();
    }

    /// Opens a new pipe once a second until one opens (it comes back as an input), unless
    /// that is under way already.
    fn reopen(&mut self) {
        if std::mem::replace(&mut lock(&self.queue).reopening, true) {
            return;
        }
        let (registry, inputs, opened) = (self.registry.clone(), self.inputs.clone(), self.opened);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REOPEN_EVERY).await;
                if inputs.is_closed() {
                    return;
                }
                match registry.pipe().await {
                    Some(Ok(pipe)) => {
                        let _ = inputs.send(opened(pipe));
                        return;
                    }
                    Some(Err(e)) => debug!(error = %e, "commands: no pipe to Redis yet"),
                    None => return,
                }
            }
        });
    }
}

impl PipeReader {
    /// Puts a new pipe in place (the one [`RegistryCalls::open`] opened, or one opened again
    /// after a failure, which the host's wait got as a wake-up).
    pub(crate) fn open(&mut self, pipe: Pipe) {
        self.pipe = Some(pipe);
        self.before_wait = 0;
        let mut queue = lock(&self.queue);
        queue.up = true;
        if std::mem::take(&mut queue.reopening) {
            info!("commands: the pipe to Redis for command records is open again");
        }
    }

    /// Sends what the host queued unless a batch sent before awaits its replies, then the next
    /// reply; an error once the pipe is gone. Never ends while there is no pipe. Cancellation
    /// safe.
    pub(crate) async fn reply(&mut self) -> io::Result<PipeReply> {
        {
            let queue = &mut *lock(&self.queue);
            match (&mut self.pipe, queue.up) {
                // One batch at Redis at a time: what the host queues while one is there goes
                // out together once its replies are in, so Redis and the host each read and
                // write about half as often at load (docs/performance.md, "One batch at Redis
                // at a time"). A write made while nothing is at Redis goes at once.
                (Some(pipe), true) if pipe.awaiting() == 0 => {
                    let count = std::mem::take(&mut queue.count);
                    match &self.wait {
                        // One `WAIT` confirms every write of the batch before it.
                        Some(wait) if count > 0 => {
                            queue.commands.extend_from_slice(wait);
                            pipe.take(&mut queue.commands, count + 1);
                            self.before_wait = count;
                        }
                        _ => pipe.take(&mut queue.commands, count),
                    }
                }
                (Some(_), true) => {}
                // Given up by the host (its writes went unanswered), or none.
                (pipe, _) => *pipe = None,
            }
        }
        let Some(pipe) = &mut self.pipe else {
            return std::future::pending().await;
        };
        match pipe.reply().await {
            Err(e) => {
                self.pipe = None;
                lock(&self.queue).up = false;
                Err(e)
            }
            Ok(reply) if self.wait.is_some() && self.before_wait == 0 => {
                Ok(PipeReply::Replicas(reply))
            }
            Ok(reply) => {
                self.before_wait = self.before_wait.saturating_sub(1);
                Ok(PipeReply::Write(reply))
            }
        }
    }
}
