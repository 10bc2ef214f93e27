//! The Redis store: the state store's keys, versions, fencing tokens, deadlines and KEYNOTIFY
//! registrations in Redis (one primary, or a Redis Cluster), so that every node of a
//! deployment serves any request from one shared state.
//!
//! Every [`StoreOp`] is **one Lua script** over one *bucket*: a key's data, its watchers and
//! the bucket's indexes (SCAN order, deadlines, leases, counts) share a `{…}` hash tag, so a
//! script is atomic across nodes and runs on a Cluster. The rules are the store's
//! ([`mqstore_core::store`]); the scripts in this folder apply them inside Redis (see
//! `prelude.lua` for the key layout). On one primary there is one bucket: quotas, SCAN and
//! expiry sweeps are exact and one round trip. A Cluster gets [`CLUSTER_BUCKETS`] buckets,
//! spread over its primaries; quotas then hold per bucket (a share of each limit), which is
//! what keeps every op one atomic script.
//!
//! Expiry: a key whose deadline has passed is absent to every script from then on; the first
//! script that meets it (a request's, or a node's periodic [`RedisStore::sweep`]) removes it
//! and returns its watchers, so each expiry notifies once whichever node finds it.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use redis::Value;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

mod commands;
mod config;
mod failover;
mod jobs;
pub(crate) mod pipe;
mod replies;
mod script;

pub(crate) use commands::Put;
pub use commands::{PIPE_NAME, RedisRegistry, RegisterError};
use config::redact;
pub use config::{DEFAULT_PREFIX, DEFAULT_WAIT_TIMEOUT, RedisConfig, RedisTls, SentinelConfig};
pub use failover::Replication;
use failover::{Cluster, Sentinel};
pub use jobs::{BlockingRedisJobs, RedisJobs};
use replies::*;
pub(crate) use script::{Call, Lua};

use mqstore_core::ServiceError;
use mqstore_core::codec::{Bulk, Condition};
use mqstore_core::hlc::Hlc;
use mqstore_core::store::Pattern;
use mqstore_core::store::{
    ClientId, DelOutcome, Expired, Quotas, SetOutcome, StoreOp, StoreReply, StoreStats,
};

/// Buckets of a store on a Redis Cluster: enough to spread keys over every primary of a
/// typical cluster, few enough that a periodic sweep of all of them stays cheap.
pub const CLUSTER_BUCKETS: u32 = 64;

/// How long start-up waits for Redis before giving up with an error.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one Redis call may take before the request that needed it is answered with an
/// error (the node keeps reconnecting meanwhile).
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a call on a Redis Cluster is retried (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, a lost
/// connection) before it fails: with waits of 0.1 s growing to 1 s, about seven seconds, what a
/// failover with a node timeout of a few seconds needs.
const CLUSTER_RETRIES: u32 = 10;

/// How long connecting to one node of a Cluster may take: short, because requests wait while
/// the client reads the slots again, which tries every node (a dead one too).
const CLUSTER_CONNECT_ATTEMPTS: std::num::NonZeroUsize = std::num::NonZeroUsize::new(3).unwrap();

const CLUSTER_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// Why a Redis call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RedisStoreError {
    #[error("Redis: {0}")]
    /// Redis answered with an error, or the connection failed.
    Redis(String),
    #[error("Redis did not answer within {0:?}")]
    /// Redis did not answer within this time.
    Timeout(Duration),
    #[error("Redis answered something unexpected: {0}")]
    /// Redis answered something the store cannot read.
    Reply(String),
    #[error(
        "Redis refused the write: fewer of its replicas are in sync than its \
         min-replicas-to-write asks for, so nothing was written (send it again once they are \
         back)"
    )]
    /// Redis refused a write (`NOREPLICAS`: its `min-replicas-to-write` is not met). A call
    /// is one script or command (and its `WAIT`), refused before it wrote anything: unlike
    /// [`RedisStoreError::NotReplicated`], the write is known not to have happened.
    NoReplicas,
    #[error(
        "not confirmed on {wanted} replica(s) within {timeout:?} (only {confirmed}); it may \
         still be applied"
    )]
    /// `WAIT` confirmed the write on fewer replicas than asked, in time.
    NotReplicated {
        /// Replicas asked for (`--redis-wait-replicas`).
        wanted: u32,
        /// Replicas that confirmed it.
        confirmed: u32,
        /// How long `WAIT` waited.
        timeout: Duration,
    },
}

impl RedisStoreError {
    /// Whether Redis refused this node (a wrong or missing password, a user without the
    /// rights): trying again cannot mend it, unlike a Redis that is not reachable yet.
    pub fn is_refusal(&self) -> bool {
        let Self::Redis(message) = self else {
            return false;
        };
        let message = message.to_ascii_lowercase();
        ["noauth", "wrongpass", "authentication", "noperm"]
            .iter()
            .any(|refusal| message.contains(refusal))
    }
}

impl From<redis::RedisError> for RedisStoreError {
    fn from(e: redis::RedisError) -> Self {
        // A script's refusal comes inside the pipeline that carries its `WAIT`.
        let refused = e
            .clone()
            .into_server_errors()
            .is_some_and(|errors| errors.iter().any(|(_, error)| error.code() == "NOREPLICAS"));
        match refused {
            true => Self::NoReplicas,
            false => Self::Redis(e.to_string()),
        }
    }
}

type Result<T> = std::result::Result<T, RedisStoreError>;

/// What one op did: its reply, and the key it found expired on the way (whose watchers get a
/// DELETE notification before the op's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// A key the op found expired on the way, whose watchers are notified first.
    pub expired: Option<Expired>,
    /// The op's own reply.
    pub reply: StoreReply,
}

#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    /// Made anew when calls keep failing.
    Cluster(Arc<Cluster>),
    /// The primary the sentinels name, followed across failovers.
    Sentinel(Arc<Sentinel>),
}

/// The scripts, loaded once per process.
struct Scripts {
    get: Lua,
    set: Lua,
    del: Lua,
    watch: Lua,
    unwatch: Lua,
    drop: Lua,
    leases: Lua,
    sweep: Lua,
    scan: Lua,
}

macro_rules! script {
    ($file:literal) => {
        Lua::new(concat!(include_str!("prelude.lua"), include_str!($file)))
    };
}

impl Scripts {
    fn new() -> Self {
        Self {
            get: script!("get.lua"),
            set: script!("set.lua"),
            del: script!("del.lua"),
            watch: script!("watch.lua"),
            unwatch: script!("unwatch.lua"),
            drop: script!("drop.lua"),
            leases: script!("leases.lua"),
            sweep: script!("sweep.lua"),
            scan: script!("scan.lua"),
        }
    }
}

/// A store in Redis. Cheap to clone: clones share the connection, which multiplexes every
/// request in flight and reconnects by itself.
#[derive(Clone)]
pub struct RedisStore {
    connection: Connection,
    scripts: Arc<Scripts>,
    prefix: Arc<[u8]>,
    buckets: u32,
    quotas: Quotas,
    /// The Redis URLs given (a Cluster's seed nodes): where a node subscribes to its forwarded
    /// command answers (Redis pub/sub; on a Cluster PUBLISH reaches every node, so any seed
    /// node will do; with Sentinel, the primary now).
    urls: Arc<[String]>,
    /// TLS files for `rediss://` (pub/sub connections are opened with them too).
    tls: Option<Arc<RedisTls>>,
    cluster: bool,
    /// Replicas every write waits for (0: none), and for how long.
    wait_replicas: u32,
    wait_timeout: Duration,
    /// How long a call may take in all, waiting for a reconnection included (none on a
    /// Cluster: its client retries through a failover, [`CLUSTER_RETRIES`]).
    call_timeout: Option<Duration>,
    replication: Arc<Replication>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .field("buckets", &self.buckets)
            .finish()
    }
}

/// Most keys or clients one sweep script handles (a sweep goes on while it finds this many).
pub const SWEEP_BATCH: usize = 256;

impl RedisStore {
    /// Connects and checks that Redis answers (a wrong address, a refused password or a
    /// Cluster that is down fail here, within a few seconds, with Redis's own message).
    pub async fn connect(config: &RedisConfig, quotas: Quotas) -> Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let replication = Arc::new(Replication::default());
        // A write that waits for its replicas may take that much longer to be answered.
        let response_timeout =
            RESPONSE_TIMEOUT + config.wait_timeout * u32::from(config.wait_replicas > 0);
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(response_timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(1));
        let connect = async {
            if let Some(sentinel) = &config.sentinel {
                Ok(Connection::Sentinel(
                    Sentinel::connect(
                        config.urls.clone(),
                        sentinel.clone(),
                        config.tls.clone(),
                        manager_config,
                        replication.clone(),
                    )
                    .await?,
                ))
            } else if config.cluster {
                // A primary's failover takes the cluster's node timeout and an election:
                // MOVED, ASK, TRYAGAIN and CLUSTERDOWN are retried (with the slots read
                // again) for a few seconds before a request fails.
                let client = redis::cluster::ClusterClient::builder(config.urls.clone())
                    .connection_timeout(CLUSTER_CONNECT_TIMEOUT)
                    .response_timeout(response_timeout)
                    .retries(CLUSTER_RETRIES)
                    .min_retry_wait(100)
                    .max_retry_wait(1_000)
                    .max_connection_attempts(CLUSTER_CONNECT_ATTEMPTS);
                let client = match &config.tls {
                    Some(tls) => client.certs(tls.certificates()),
                    None => client,
                }
                .build()?;
                Ok::<_, RedisStoreError>(Connection::Cluster(
                    Cluster::connect(client, replication.clone()).await?,
                ))
            } else {
                let url = config.urls.first().map(String::as_str).unwrap_or_default();
                let client = RedisTls::client(config.tls.as_deref(), url)?;
                Ok(Connection::Single(
                    ConnectionManager::new_with_config(client, manager_config).await?,
                ))
            }
        };
        let connection = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| RedisStoreError::Timeout(CONNECT_TIMEOUT))??;
        let store = Self {
            connection,
            scripts: Arc::new(Scripts::new()),
            prefix: Arc::from(config.prefix.as_bytes()),
            buckets: if config.cluster { CLUSTER_BUCKETS } else { 1 },
            quotas,
            urls: Arc::from(config.urls.as_slice()),
            tls: config.tls.clone(),
            cluster: config.cluster,
            wait_replicas: config.wait_replicas,
            wait_timeout: config.wait_timeout,
            call_timeout: (!config.cluster).then_some(response_timeout),
            replication,
        };
        // A round trip that needs the keyspace: a Cluster without its slots covered fails.
        store.stats().await?;
        Ok(store)
    }

    /// The secret every node on this store seals SCAN continuation tokens with, so that any
    /// node continues a scan another began: the first node to ask stores `candidate`; the rest
    /// read it.
    pub async fn shared_secret(&self, candidate: [u8; 32]) -> Result<[u8; 32]> {
        let mut name = self.prefix.to_vec();
        name.extend_from_slice(b"scan-token-key");
        let _: Value = self
            .write(redis::cmd("SET").arg(&name).arg(&candidate[..]).arg("NX"))
            .await?;
        let stored: Vec<u8> = self.query(redis::cmd("GET").arg(&name)).await?;
        stored
            .try_into()
            .map_err(|_| RedisStoreError::Reply("a scan token key that is not 32 bytes".into()))
    }

    /// How many buckets the keys are spread over.
    pub fn buckets(&self) -> u32 {
        self.buckets
    }

    /// What this node saw of replication and outages (its metrics).
    pub fn replication(&self) -> &Arc<Replication> {
        &self.replication
    }

    /// Whether a [`pipe::Pipe`] can do this store's writes: one server (given, or the primary
    /// the sentinels name).
    pub(crate) fn pipeable(&self) -> bool {
        matches!(
            self.connection,
            Connection::Single(_) | Connection::Sentinel(_)
        )
    }

    /// The replicas every write waits for, and how long (`None`: none).
    pub(crate) fn waits_for_replicas(&self) -> Option<(u32, Duration)> {
        (self.wait_replicas > 0).then_some((self.wait_replicas, self.wait_timeout))
    }

    /// Whether the server this store writes to is the one the sentinels name (it may be
    /// deposed under a pipe to it).
    pub(crate) fn behind_sentinels(&self) -> bool {
        matches!(self.connection, Connection::Sentinel(_))
    }

    /// A call outside the shared client failed (a host's pipe): on Sentinel, asks the
    /// sentinels where the primary is now, as a failed call of the shared client does.
    pub(crate) fn call_failed(&self) {
        if let Connection::Sentinel(sentinel) = &self.connection {
            sentinel.failed();
        }
    }

    /// Where to subscribe to Redis pub/sub on the `attempt`th try: the primary as far as this
    /// node knows; on a Cluster each seed node in turn (a dead one is passed over).
    pub(crate) fn pubsub_url(&self, attempt: usize) -> String {
        match &self.connection {
            Connection::Sentinel(sentinel) => sentinel.url(),
            _ => self
                .urls
                .get(attempt % self.urls.len().max(1))
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// Runs one op at `now_ms`: one script (one round trip), plus on a Cluster the lease
    /// renewal of a KEYNOTIFY in the client's other buckets.
    pub async fn apply(&self, op: &StoreOp, now_ms: u64) -> Result<Applied> {
        match op {
            StoreOp::Get { key } => {
                let mut call = self.key_script(&self.scripts.get, key, now_ms);
                call.reads(self.name(self.bucket_of(key), b"stats", b""));
                let reply = self.eval(&call).await?;
                let (expired, rest) = split_expired(key, reply)?;
                let mut rest = rest.into_iter();
                // The value moves out of the reply: no second copy.
                let found = match (rest.next(), rest.next()) {
                    (Some(Value::BulkString(value)), Some(Value::BulkString(version))) => {
                        Some((Bulk::new(value), hlc(&version)?))
                    }
                    _ => None,
                };
                Ok(Applied {
                    expired,
                    reply: StoreReply::Get(found),
                })
            }
            StoreOp::Set {
                key,
                value,
                condition,
                expires_at,
                fencing_token,
                version,
                persist: _, // Redis's own persistence settings decide (see docs/guide/redis.md)
            } => {
                let mut call = self.key_script(&self.scripts.set, key, now_ms);
                call.arg(value.as_slice())
                    .arg(match condition {
                        Condition::Always => "A",
                        Condition::NotExists => "N",
                        Condition::NotExistsOrEqual => "E",
                    })
                    .arg(expires_at.map(|at| at.to_string()).unwrap_or_default())
                    .arg(token_arg(fencing_token.as_ref()))
                    .arg(version.wall_ms)
                    .arg(version.counter)
                    .arg(&*version.node)
                    .arg(self.bucket_share(self.quotas.max_keys))
                    .arg(self.bucket_share(self.quotas.max_bytes));
                let (expired, rest) = split_expired(key, self.eval(&call).await?)?;
                let outcome = match rest.split_first() {
                    Some((Value::BulkString(tag), rest)) if tag == b"A" || tag == b"C" => {
                        let (version, replaced, watchers) = versions_and_clients(rest)?;
                        Ok(SetOutcome::Applied {
                            watchers,
                            version,
                            replaced,
                        })
                    }
                    Some((Value::BulkString(tag), [Value::BulkString(version)])) if tag == b"N" => {
                        Ok(SetOutcome::NotApplied {
                            version: hlc(version)?,
                        })
                    }
                    Some((Value::BulkString(tag), [Value::BulkString(error)])) if tag == b"E" => {
                        Err(service_error(error)?)
                    }
                    _ => return Err(unexpected("SET", &rest)),
                };
                Ok(Applied {
                    expired,
                    reply: StoreReply::Set(outcome),
                })
            }
            StoreOp::Delete {
                key,
                if_value,
                fencing_token,
                version,
            } => {
                let mut call = self.key_script(&self.scripts.del, key, now_ms);
                call.arg(if if_value.is_some() { "V" } else { "D" })
                    .arg(if_value.as_deref().unwrap_or_default())
                    .arg(token_arg(fencing_token.as_ref()))
                    .arg(version.wall_ms)
                    .arg(version.counter)
                    .arg(&*version.node);
                let (expired, rest) = split_expired(key, self.eval(&call).await?)?;
                let outcome = match rest.split_first() {
                    Some((Value::BulkString(tag), rest)) if tag == b"D" => {
                        let (version, replaced, watchers) = versions_and_clients(rest)?;
                        let replaced = replaced.ok_or_else(|| unexpected("DEL", rest))?;
                        Ok(DelOutcome::Deleted {
                            watchers,
                            version,
                            replaced,
                        })
                    }
                    Some((Value::BulkString(tag), [])) if tag == b"absent" => {
                        Ok(DelOutcome::Absent)
                    }
                    Some((Value::BulkString(tag), [])) if tag == b"M" => {
                        Ok(DelOutcome::ValueMismatch)
                    }
                    Some((Value::BulkString(tag), [Value::BulkString(error)])) if tag == b"E" => {
                        Err(service_error(error)?)
                    }
                    _ => return Err(unexpected("DEL", &rest)),
                };
                Ok(Applied {
                    expired,
                    reply: StoreReply::Delete(outcome),
                })
            }
            StoreOp::Watch {
                client,
                key,
                lease_until,
            } => {
                let bucket = self.bucket_of(key);
                let mut call = self.scripts.watch.call();
                call.key(self.name(bucket, b"w:", key))
                    .key(self.name(bucket, b"c:", client.as_bytes()))
                    .key(self.name(bucket, b"leases", b""))
                    .key(self.name(bucket, b"stats", b""))
                    .key(self.name(bucket, b"r:", client.as_bytes()))
                    .arg(key.as_ref())
                    .arg(client.as_bytes())
                    .arg(lease_until.map(|at| at.to_string()).unwrap_or_default())
                    .arg(self.bucket_share(self.quotas.max_watches))
                    .arg(self.bucket_share(self.quotas.max_watches_per_client));
                let outcome = match self.eval(&call).await? {
                    Value::Okay => Ok(()),
                    Value::SimpleString(s) if s == "OK" => Ok(()),
                    Value::BulkString(s) if s == b"OK" => Ok(()),
                    Value::BulkString(s) if s == b"QuotaExceeded" => {
                        Err(ServiceError::QuotaExceeded)
                    }
                    other => return Err(unexpected("KEYNOTIFY", &[other])),
                };
                if outcome.is_ok() && self.buckets > 1 {
                    self.note_bucket(client, bucket, *lease_until).await?;
                }
                Ok(Applied {
                    expired: None,
                    reply: StoreReply::Watch(outcome),
                })
            }
            StoreOp::Unwatch { client, key } => {
                let bucket = self.bucket_of(key);
                let mut call = self.scripts.unwatch.call();
                call.key(self.name(bucket, b"w:", key))
                    .key(self.name(bucket, b"c:", client.as_bytes()))
                    .key(self.name(bucket, b"leases", b""))
                    .key(self.name(bucket, b"stats", b""))
                    .key(self.name(bucket, b"r:", client.as_bytes()))
                    .arg(key.as_ref())
                    .arg(client.as_bytes());
                let removed = match self.eval(&call).await? {
                    Value::Int(n) => n == 1,
                    other => return Err(unexpected("KEYNOTIFY STOP", &[other])),
                };
                Ok(Applied {
                    expired: None,
                    reply: StoreReply::Unwatch(removed),
                })
            }
            StoreOp::Scan {
                pattern,
                after,
                limit,
                budget,
            } => {
                let (keys, last) = self
                    .scan(pattern, after.as_deref(), *limit, *budget, now_ms)
                    .await?;
                Ok(Applied {
                    expired: None,
                    reply: StoreReply::Scan { keys, last },
                })
            }
        }
    }

    /// One SCAN page, in the order (bucket, key): batches of keys from each bucket in turn,
    /// matched here against the pattern (the engine's own matcher: the rules stay in one
    /// place), until the page is full or `budget` keys were examined.
    async fn scan(
        &self,
        pattern: &Pattern,
        after: Option<&[u8]>,
        limit: usize,
        budget: usize,
        now_ms: u64,
    ) -> Result<(Vec<Bytes>, Option<Bytes>)> {
        let (limit, budget) = (limit.max(1), budget.max(1));
        let prefix = pattern.literal_prefix();
        let mut from = match after {
            Some(after) if after >= prefix.as_slice() => lex_bound(b'(', after),
            _ => lex_bound(b'[', &prefix),
        };
        let first_bucket = after.map_or(0, |after| self.bucket_of(after));
        let (mut keys, mut examined) = (Vec::new(), 0usize);
        let mut last: Option<Bytes> = None;
        for bucket in first_bucket..self.buckets {
            if bucket != first_bucket {
                from = lex_bound(b'[', &prefix);
            }
            loop {
                let batch = (limit - keys.len()).max(16).min(budget - examined);
                let mut call = self.scripts.scan.call();
                call.key(self.name(bucket, b"keys", b""))
                    .key(self.name(bucket, b"exp", b""))
                    .arg(&from)
                    .arg("+")
                    .arg(batch)
                    .arg(now_ms)
                    .reads(self.name(bucket, b"stats", b""));
                let reply = self.eval(&call).await?;
                let Value::Array(items) = reply else {
                    return Err(unexpected("SCAN", &[reply]));
                };
                let (count, batch_last, live) = match items.as_slice() {
                    [Value::Int(count), batch_last, live @ ..] => {
                        (*count as usize, batch_last, live)
                    }
                    _ => return Err(unexpected("SCAN", &items)),
                };
                let mut past_prefix = false;
                let mut live = live.iter();
                while let Some(Value::BulkString(key)) = live.next() {
                    if !key.starts_with(&prefix) {
                        past_prefix = true;
                        break;
                    }
                    if pattern.matches(key) {
                        keys.push(Bytes::copy_from_slice(key));
                    }
                    if keys.len() == limit {
                        // Full: go on after this key next time (unless nothing follows).
                        let more = live.len() > 0 || count == batch || bucket + 1 < self.buckets;
                        return Ok((keys, more.then(|| Bytes::copy_from_slice(key))));
                    }
                }
                examined += count;
                if let Value::BulkString(key) = batch_last {
                    last = Some(Bytes::copy_from_slice(key));
                    from = lex_bound(b'(', key);
                }
                if past_prefix || count < batch {
                    break; // this bucket is done
                }
                if examined >= budget {
                    return Ok((keys, last));
                }
            }
        }
        Ok((keys, None))
    }

    /// Removes keys whose deadline passed by `now_ms` (up to [`SWEEP_BATCH`] per bucket) and
    /// returns them with their watchers: each removed by exactly one sweep or script. A
    /// bucket that fails (its primary is away) does not keep the others' keys from their
    /// watchers: they come back with the first error.
    pub async fn sweep(&self, now_ms: u64) -> (Vec<Expired>, Option<RedisStoreError>) {
        let mut expired = Vec::new();
        let mut failed = None;
        for bucket in 0..self.buckets {
            if let Err(e) = self.sweep_bucket(bucket, now_ms, &mut expired).await {
                failed.get_or_insert(e);
            }
        }
        (expired, failed)
    }

    async fn sweep_bucket(
        &self,
        bucket: u32,
        now_ms: u64,
        expired: &mut Vec<Expired>,
    ) -> Result<()> {
        let mut call = self.scripts.sweep.call();
        call.key(self.name(bucket, b"keys", b""))
            .key(self.name(bucket, b"exp", b""))
            .key(self.name(bucket, b"stats", b""))
            .arg(now_ms)
            .arg(SWEEP_BATCH)
            .arg(self.name(bucket, b"k:", b""))
            .arg(self.name(bucket, b"w:", b""));
        // The keys are gone once the script ran: their watchers hear of it even when the
        // removal's replication is not confirmed (else a removal that did replicate would
        // notify nobody). A failover that loses it expires them again: two DELETEs.
        let (reply, _confirmed) = self.eval_unconfirmed(&call).await?;
        let Value::Array(items) = reply else {
            return Err(unexpected("sweep", &[reply]));
        };
        for item in items {
            let Value::Array(parts) = item else {
                return Err(unexpected("sweep", &[item]));
            };
            match parts.split_first() {
                Some((Value::BulkString(key), rest)) => {
                    let (version, replaced, watchers) = versions_and_clients(rest)?;
                    let replaced = replaced.ok_or_else(|| unexpected("sweep", rest))?;
                    expired.push(Expired {
                        key: Bytes::from(key.clone()),
                        watchers,
                        version,
                        replaced,
                    });
                }
                _ => return Err(unexpected("sweep", &parts)),
            }
        }
        Ok(())
    }

    /// Drops the registrations of clients whose lease ended by `now_ms`; returns each with
    /// how many it had (a client with registrations in several buckets is listed once per
    /// bucket).
    pub async fn expire_leases(&self, now_ms: u64) -> Result<Vec<(ClientId, usize)>> {
        let mut dropped = Vec::new();
        for bucket in 0..self.buckets {
            let mut call = self.scripts.leases.call();
            call.key(self.name(bucket, b"leases", b""))
                .key(self.name(bucket, b"stats", b""))
                .arg(now_ms)
                .arg(SWEEP_BATCH)
                .arg(self.name(bucket, b"c:", b""))
                .arg(self.name(bucket, b"w:", b""))
                .arg(self.name(bucket, b"r:", b""));
            let reply = self.eval(&call).await?;
            let Value::Array(items) = reply else {
                return Err(unexpected("lease sweep", &[reply]));
            };
            for pair in items.chunks(2) {
                match pair {
                    [Value::BulkString(client), Value::Int(count)] => dropped.push((
                        ClientId::from(String::from_utf8_lossy(client).as_ref()),
                        *count as usize,
                    )),
                    _ => return Err(unexpected("lease sweep", pair)),
                }
            }
        }
        Ok(dropped)
    }

    /// Drops every registration of `client` (it is gone); how many there were.
    pub async fn drop_client(&self, client: &str) -> Result<usize> {
        let buckets: Vec<u32> = if self.buckets == 1 {
            vec![0]
        } else {
            let members: Vec<u32> = self
                .query(redis::cmd("SMEMBERS").arg(self.directory(client)))
                .await?;
            members
        };
        let mut dropped = 0;
        for bucket in buckets {
            dropped += self.drop_in_bucket(client, bucket, None).await?;
        }
        if self.buckets > 1 {
            let _: i64 = self
                .write(redis::cmd("DEL").arg(self.directory(client)))
                .await?;
        }
        Ok(dropped)
    }

    /// Drops the registrations of `client` made before the change `version` of `key`, which
    /// the broker found nobody listening for (PUBACK 0x10); how many. Those made since stay:
    /// the client may be back already, subscribed again and registering anew (the broker
    /// ordered its SUBSCRIBE after that publish, but this drop and its KEYNOTIFYs reach Redis
    /// from different nodes, in any order). Only `key`'s bucket is looked at: versions of
    /// other buckets do not order against `version`, and a registration there is dropped when
    /// a notification of its own finds nobody, or when its lease ends.
    pub async fn drop_client_before(
        &self,
        client: &str,
        key: &[u8],
        version: &Hlc,
    ) -> Result<usize> {
        self.drop_in_bucket(client, self.bucket_of(key), Some(version))
            .await
    }

    /// `drop.lua` in one bucket: every registration of `client`, or those made before the
    /// change `before`.
    async fn drop_in_bucket(
        &self,
        client: &str,
        bucket: u32,
        before: Option<&Hlc>,
    ) -> Result<usize> {
        let mut call = self.scripts.drop.call();
        call.key(self.name(bucket, b"c:", client.as_bytes()))
            .key(self.name(bucket, b"leases", b""))
            .key(self.name(bucket, b"stats", b""))
            .key(self.name(bucket, b"r:", client.as_bytes()))
            .arg(client.as_bytes())
            .arg(self.name(bucket, b"w:", b""))
            .arg(before.map(Hlc::to_string).unwrap_or_default());
        match self.eval(&call).await? {
            Value::Int(n) => Ok(n as usize),
            other => Err(unexpected("drop", &[other])),
        }
    }

    /// The earliest deadline of any key or registration lease.
    pub async fn next_deadline(&self) -> Result<Option<u64>> {
        let mut earliest: Option<u64> = None;
        for bucket in 0..self.buckets {
            for index in [&b"exp"[..], b"leases"] {
                let first: Vec<(Vec<u8>, f64)> = self
                    .query(
                        redis::cmd("ZRANGE")
                            .arg(self.name(bucket, index, b""))
                            .arg(0)
                            .arg(0)
                            .arg("WITHSCORES"),
                    )
                    .await?;
                if let Some((_, score)) = first.first() {
                    let at = *score as u64;
                    earliest = Some(earliest.map_or(at, |e| e.min(at)));
                }
            }
        }
        Ok(earliest)
    }

    /// How much the store holds, summed over buckets.
    pub async fn stats(&self) -> Result<StoreStats> {
        let mut stats = StoreStats::default();
        for bucket in 0..self.buckets {
            let counts: Vec<Option<i64>> = self
                .query(
                    redis::cmd("HMGET")
                        .arg(self.name(bucket, b"stats", b""))
                        .arg("keys")
                        .arg("bytes")
                        .arg("watches"),
                )
                .await?;
            let count = |i: usize| counts.get(i).copied().flatten().unwrap_or(0).max(0) as u64;
            stats.keys += count(0);
            stats.bytes += count(1);
            stats.watches += count(2);
        }
        Ok(stats)
    }

    /// On a Cluster: records that `client` has registrations in `bucket`, and extends its
    /// lease in every bucket where it has some (one KEYNOTIFY renews them all).
    async fn note_bucket(&self, client: &str, bucket: u32, lease_until: Option<u64>) -> Result<()> {
        let directory = self.directory(client);
        let _: i64 = self
            .write(redis::cmd("SADD").arg(&directory).arg(bucket))
            .await?;
        if let Some(until) = lease_until {
            let buckets: Vec<u32> = self.query(redis::cmd("SMEMBERS").arg(&directory)).await?;
            for other in buckets.into_iter().filter(|b| *b != bucket) {
                let _: i64 = self
                    .write(
                        redis::cmd("ZADD")
                            .arg(self.name(other, b"leases", b""))
                            .arg("XX")
                            .arg("GT")
                            .arg(until)
                            .arg(client.as_bytes()),
                    )
                    .await?;
            }
        }
        Ok(())
    }

    /// A bucket's share of a quota, as the scripts take it (-1: none): the whole quota on one
    /// primary, an even share of it per bucket on a Cluster.
    fn bucket_share(&self, limit: Option<u64>) -> i64 {
        limit.map_or(-1, |l| {
            i64::try_from(l.div_ceil(u64::from(self.buckets))).unwrap_or(i64::MAX)
        })
    }

    /// The script call for an op on one key, with the key script's KEYS and first ARGVs.
    fn key_script<'a>(&self, script: &'a Lua, key: &[u8], now_ms: u64) -> Call<'a> {
        let bucket = self.bucket_of(key);
        let mut call = script.call();
        call.key(self.name(bucket, b"k:", key))
            .key(self.name(bucket, b"w:", key))
            .key(self.name(bucket, b"keys", b""))
            .key(self.name(bucket, b"exp", b""))
            .key(self.name(bucket, b"stats", b""))
            .arg(key)
            .arg(now_ms);
        call
    }

    /// `{prefix}{b<bucket>}:<kind><suffix>`: every name of a bucket shares its hash tag.
    fn name(&self, bucket: u32, kind: &[u8], suffix: &[u8]) -> Vec<u8> {
        let mut name = Vec::with_capacity(self.prefix.len() + 16 + kind.len() + suffix.len());
        name.extend_from_slice(&self.prefix);
        // Written straight into the name (a Vec never fails to take bytes).
        let _ = write!(name, "{{b{bucket}}}:");
        name.extend_from_slice(kind);
        name.extend_from_slice(suffix);
        name
    }

    /// On a Cluster, the set of buckets a client has registrations in (its own slot).
    fn directory(&self, client: &str) -> Vec<u8> {
        let mut name = self.prefix.to_vec();
        name.extend_from_slice(b"{c:");
        name.extend_from_slice(client.replace('}', "_").as_bytes());
        name.extend_from_slice(b"}:buckets");
        name
    }

    /// The bucket a key lives in: FNV-1a, stable across versions and nodes.
    fn bucket_of(&self, key: &[u8]) -> u32 {
        if self.buckets == 1 {
            return 0;
        }
        let hash = key.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        (hash % u64::from(self.buckets)) as u32
    }
}
