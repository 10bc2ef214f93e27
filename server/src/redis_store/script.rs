//! Running the Lua scripts: a [`Lua`] script and one [`Call`] of it (`EVALSHA`, `EVAL` on
//! `NOSCRIPT`), and the store's way of sending a call or a command — followed by `WAIT` when
//! writes wait for replicas, timed and counted for the metrics.

use redis::{ToRedisArgs, Value};

use std::sync::atomic::Ordering;

use super::replies::parsed;
use super::{Connection, RedisStore, RedisStoreError, Result};

/// A Lua script and its SHA-1 (Redis caches scripts by it; a Redis that forgot the script, a
/// new primary for one, gets it again on the first NOSCRIPT).
pub(crate) struct Lua {
    code: &'static str,
    sha: String,
}

impl Lua {
    pub(crate) fn new(code: &'static str) -> Self {
        let sha = redis::Script::new(code).get_hash().to_owned();
        Self { code, sha }
    }

    pub(crate) fn code(&self) -> &'static str {
        self.code
    }

    pub(crate) fn sha(&self) -> &str {
        &self.sha
    }

    /// A call of the script, to be given its keys and arguments.
    pub(crate) fn call(&self) -> Call<'_> {
        Call {
            lua: self,
            keys: Vec::new(),
            args: Vec::new(),
            reads: None,
        }
    }
}

/// One call of a [`Lua`] script.
pub(crate) struct Call<'a> {
    lua: &'a Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
    /// A script that only reads: with replicas to wait for, this key of its slot gets a tiny
    /// write first, so that `WAIT` covers every write the read saw (it waits for the offset of
    /// the connection's last write).
    reads: Option<Vec<u8>>,
}

impl Call<'_> {
    /// `KEYS[n]`.
    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    /// `ARGV[n]`.
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Marks a script that only reads; `key` is a key of its slot it may count in.
    pub(super) fn reads(&mut self, key: Vec<u8>) -> &mut Self {
        self.reads = Some(key);
        self
    }

    /// `EVALSHA sha …`, or `EVAL code …` for a Redis that does not have the script yet.
    pub(super) fn command(&self, with_code: bool) -> redis::Cmd {
        let mut cmd = if with_code {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(self.lua.code);
            cmd
        } else {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&self.lua.sha);
            cmd
        };
        cmd.arg(self.keys.len()).arg(&self.keys).arg(&self.args);
        cmd
    }
}

impl RedisStore {
    /// Runs a script call: `EVALSHA` (`EVAL` with the code on NOSCRIPT), followed on the same
    /// connection by `WAIT` when writes wait for replicas. A write whose replication is not
    /// confirmed in time is an error, although the primary applied it.
    pub(crate) async fn eval(&self, call: &Call<'_>) -> Result<Value> {
        let (value, confirmed) = self.eval_unconfirmed(call).await?;
        confirmed.map(|()| value)
    }

    /// [`RedisStore::eval`], but the script's answer also when its replication was not
    /// confirmed (the second part says whether it was).
    pub(super) async fn eval_unconfirmed(&self, call: &Call<'_>) -> Result<(Value, Result<()>)> {
        match self.eval_once(call, false).await {
            Err(e) if e.code() == Some("NOSCRIPT") => self.eval_once(call, true).await,
            other => other,
        }
        .map_err(RedisStoreError::from)
    }

    pub(super) async fn eval_once(
        &self,
        call: &Call<'_>,
        with_code: bool,
    ) -> redis::RedisResult<(Value, Result<()>)> {
        let command = call.command(with_code);
        if self.wait_replicas == 0 {
            return Ok((self.run(&command).await?, Ok(())));
        }
        let mut pipe = redis::pipe();
        pipe.add_command(command);
        if let Some(key) = &call.reads {
            pipe.cmd("HINCRBY").arg(key).arg("syncs").arg(1).ignore();
        }
        pipe.cmd("WAIT")
            .arg(self.wait_replicas)
            .arg(self.wait_timeout.as_millis() as u64);
        let (value, replicas) = self.run_with_wait(&pipe).await?;
        Ok((value, self.confirmed(replicas)))
    }

    /// A `WAIT`'s answer: whether enough replicas have the write (counted for the metrics).
    pub(super) fn confirmed(&self, replicas: u32) -> Result<()> {
        self.confirmed_writes(replicas, 1)
    }

    /// A `WAIT`'s answer for the `writes` before it on its connection (counted, each, for the
    /// metrics).
    pub(super) fn confirmed_writes(&self, replicas: u32, writes: u64) -> Result<()> {
        if replicas >= self.wait_replicas {
            self.replication
                .confirmed
                .fetch_add(writes, Ordering::Relaxed);
            Ok(())
        } else {
            self.replication
                .unconfirmed
                .fetch_add(writes, Ordering::Relaxed);
            Err(RedisStoreError::NotReplicated {
                wanted: self.wait_replicas,
                confirmed: replicas,
                timeout: self.wait_timeout,
            })
        }
    }

    /// A command that only reads.
    pub(super) async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        parsed(self.run(cmd).await?)
    }

    /// A command that writes: followed by `WAIT` when writes wait for replicas.
    pub(super) async fn write<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        if self.wait_replicas == 0 {
            return self.query(cmd).await;
        }
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone())
            .cmd("WAIT")
            .arg(self.wait_replicas)
            .arg(self.wait_timeout.as_millis() as u64);
        let (value, replicas) = self.run_with_wait(&pipe).await?;
        self.confirmed(replicas).and_then(|()| parsed(value))
    }

    // `run` and `run_pipeline` take and give plain `Value`s: one copy of each connection's
    // (large) async call code in the binary, not one per result type.

    pub(super) async fn run(&self, cmd: &redis::Cmd) -> redis::RedisResult<Value> {
        let started = self.replication.now();
        let result = self
            .bounded(async {
                match &self.connection {
                    Connection::Single(c) => cmd.query_async(&mut c.clone()).await,
                    Connection::Cluster(c) => cmd.query_async(&mut c.connection()).await,
                    Connection::Sentinel(s) => cmd.query_async(&mut s.connection()).await,
                }
            })
            .await;
        self.noted(result, started)
    }

    /// A call, failed once it took longer than [`RedisStore::call_timeout`]. Why: the Redis
    /// client's own response timeout does not count the wait for a reconnection, and a
    /// connection to a primary whose host is gone (a killed container: no reset, just silence)
    /// reconnects for up to twice its connect timeout; the request would go unanswered that
    /// long, where a prompt 503 lets the client retry on a node that already follows the new
    /// primary.
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> redis::RedisResult<T> {
        let Some(limit) = self.call_timeout else {
            return call.await;
        };
        tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
            Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer from Redis within {limit:?}"),
            )))
        })
    }

    /// A pipeline ending in `WAIT`, on one connection (its commands reach one node, in
    /// order): the first command's answer and the number of replicas `WAIT` counted.
    pub(super) async fn run_with_wait(
        &self,
        pipe: &redis::Pipeline,
    ) -> redis::RedisResult<(Value, u32)> {
        let started = self.replication.now();
        let result: redis::RedisResult<Vec<Value>> = self
            .bounded(async {
                match &self.connection {
                    Connection::Single(c) => pipe.query_async(&mut c.clone()).await,
                    Connection::Cluster(c) => pipe.query_async(&mut c.connection()).await,
                    Connection::Sentinel(s) => pipe.query_async(&mut s.connection()).await,
                }
            })
            .await;
        let mut values = self.noted(result, started)?.into_iter();
        match (values.next(), values.next_back()) {
            (Some(value), Some(Value::Int(replicas))) => Ok((value, replicas.max(0) as u32)),
            other => Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "a pipeline ending in WAIT",
                format!("{other:?}"),
            ))),
        }
    }

    /// Records a call's result; a failed one makes a Sentinel store ask where the primary is,
    /// and a Cluster store connect anew.
    pub(super) fn noted<T>(
        &self,
        result: redis::RedisResult<T>,
        started: u64,
    ) -> redis::RedisResult<T> {
        let failed = result.as_ref().is_err_and(|e| e.code() != Some("NOSCRIPT"));
        self.replication.note(!failed, started);
        match (failed, &self.connection) {
            (true, Connection::Sentinel(sentinel)) => sentinel.failed(),
            (true, Connection::Cluster(cluster)) => cluster.failed(),
            _ => {}
        }
        result
    }
}
