//! Following Redis across failovers: the primary a Sentinel deployment names now
//! ([`Sentinel`]), a Redis Cluster's slots after a replica took a shard over ([`Cluster`]),
//! and what a node saw of replication and outages ([`Replication`], its metrics).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tracing::{info, warn};

use super::{RedisStoreError, RedisTls, SentinelConfig};

/// How long asking one sentinel may take.
const SENTINEL_TIMEOUT: Duration = Duration::from_secs(1);

/// How often a node asks the sentinels where the primary is, failed calls or not: a node that
/// is idle, or still reaches a primary the others deposed, moves within this time.
const SENTINEL_POLL: Duration = Duration::from_secs(1);

/// How long connecting to the primary the sentinels name may take before the node gives up
/// until the next poll. Why: connecting to a server this node cannot reach (a partition drops
/// its packets) waits out the connect timeout twice, and meanwhile no other attempt to follow
/// is made, so the node could stay on a deposed primary for seconds after the partition
/// healed (the likely cause of a nemesis failure: a write refused READONLY after all was healed).
const PRIMARY_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a Cluster connection is used before a failed call makes a new one.
const CLUSTER_RENEW_AFTER: Duration = Duration::from_secs(3);

/// What a node saw of Redis replication and outages, for its metrics.
#[derive(Debug)]
pub struct Replication {
    /// Writes whose replication to the replicas asked for was confirmed.
    pub confirmed: AtomicU64,
    /// Writes whose replication was not confirmed in time (answered with an error).
    pub unconfirmed: AtomicU64,
    /// Times the node moved to a new primary.
    pub failovers: AtomicU64,
    /// How long the last outage lasted, from the first failed call to the next one that
    /// succeeded (a failover's length as this node saw it), in milliseconds.
    pub last_outage_ms: AtomicU64,
    base: Instant,
    /// Since when calls fail (ms after `base`, plus one; 0: they do not).
    down_since: AtomicU64,
}

impl Default for Replication {
    fn default() -> Self {
        Self {
            confirmed: AtomicU64::new(0),
            unconfirmed: AtomicU64::new(0),
            failovers: AtomicU64::new(0),
            last_outage_ms: AtomicU64::new(0),
            base: Instant::now(),
            down_since: AtomicU64::new(0),
        }
    }
}

impl Replication {
    /// Now, as the outage clock counts it (ms after `base`, plus one: never 0).
    pub(super) fn now(&self) -> u64 {
        self.base.elapsed().as_millis() as u64 + 1
    }

    /// Records the result of a call that began at `started` ([`Replication::now`]): an outage
    /// begins with the first failure and ends with the first success of a call that began
    /// after it (a call already under way when Redis went may still succeed, which says
    /// nothing about Redis now).
    pub(super) fn note(&self, ok: bool, started: u64) {
        let since = self.down_since.load(Ordering::Relaxed);
        if ok {
            if since != 0
                && started >= since
                && self
                    .down_since
                    .compare_exchange(since, 0, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                self.last_outage_ms
                    .store(self.now().saturating_sub(since), Ordering::Relaxed);
            }
        } else if since == 0 {
            let _ = self.down_since.compare_exchange(
                0,
                self.now(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }
}

/// The primary of a Sentinel deployment: a connection to the one the sentinels name, replaced
/// when they name another.
pub(crate) struct Sentinel {
    sentinels: Vec<String>,
    config: SentinelConfig,
    /// TLS files for the sentinels and the primary alike.
    tls: Option<Arc<RedisTls>>,
    manager_config: ConnectionManagerConfig,
    /// The primary's URL and the connection to it.
    primary: RwLock<(String, ConnectionManager)>,
    /// Held while the sentinels are asked (one question at a time).
    following: tokio::sync::Mutex<()>,
    replication: Arc<Replication>,
}

impl Sentinel {
    /// Asks the sentinels where the primary is and connects to it; then keeps asking (every
    /// [`SENTINEL_POLL`], and after any failed call) for as long as the connection is used.
    pub(super) async fn connect(
        sentinels: Vec<String>,
        config: SentinelConfig,
        tls: Option<Arc<RedisTls>>,
        manager_config: ConnectionManagerConfig,
        replication: Arc<Replication>,
    ) -> Result<Arc<Self>, RedisStoreError> {
        let url = locate(&sentinels, &config, tls.as_deref(), &manager_config).await?;
        let manager = open_primary(&url, tls.as_deref(), &manager_config).await?;
        let sentinel = Arc::new(Self {
            sentinels,
            config,
            tls,
            manager_config,
            primary: RwLock::new((url, manager)),
            following: tokio::sync::Mutex::new(()),
            replication,
        });
        let watched = Arc::downgrade(&sentinel);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SENTINEL_POLL).await;
                let Some(sentinel) = watched.upgrade() else {
                    return; // the store is gone
                };
                sentinel.follow().await;
            }
        });
        Ok(sentinel)
    }

    /// The connection to the primary as far as this node knows.
    pub(super) fn connection(&self) -> ConnectionManager {
        self.primary
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .1
            .clone()
    }

    /// The primary's URL as far as this node knows.
    pub(super) fn url(&self) -> String {
        self.primary
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .0
            .clone()
    }

    /// After a failed call: asks the sentinels again, in the background.
    pub(super) fn failed(self: &Arc<Self>) {
        let sentinel = self.clone();
        tokio::spawn(async move { sentinel.follow().await });
    }

    /// Moves to the primary the sentinels name, if it is another one and answers as a
    /// primary (during a promotion the sentinels may name it a moment early).
    async fn follow(&self) {
        let Ok(_asking) = self.following.try_lock() else {
            return; // another call is asking already
        };
        let tls = self.tls.as_deref();
        let url = match locate(&self.sentinels, &self.config, tls, &self.manager_config).await {
            Ok(url) => url,
            Err(e) => {
                warn!(error = %e, "cannot ask the sentinels where the primary is");
                return;
            }
        };
        if url == self.url() {
            return;
        }
        match open_named_primary(&url, tls, &self.manager_config).await {
            Ok(manager) => {
                *self
                    .primary
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = (url.clone(), manager);
                self.replication.failovers.fetch_add(1, Ordering::Relaxed);
                info!(primary = %super::redact(&url), "the sentinels named a new primary: following it");
            }
            Err(e) => {
                warn!(primary = %super::redact(&url), error = %e, "the new primary does not answer as one yet")
            }
        }
    }
}

/// A Redis Cluster connection, made anew (in the background, at most every
/// [`CLUSTER_RENEW_AFTER`]) after a failed call. Why: once a shard's primary died and a
/// replica took over, the Redis client's own recovery sometimes never reads the new slots —
/// measured with redis 1.8: every call to that shard timed out for over 30 s after the
/// takeover, with no slot refresh in its log — while a new connection, which reads the slots
/// from whichever seed node answers, served at once.
pub(crate) struct Cluster {
    client: ClusterClient,
    connection: RwLock<ClusterConnection>,
    /// When the connection was made, on [`Replication::now`]'s clock.
    made: AtomicU64,
    /// Held while a new connection is made (one at a time).
    renewing: tokio::sync::Mutex<()>,
    replication: Arc<Replication>,
}

impl Cluster {
    /// Connects to the Cluster `client` describes (reading its slots from a seed node).
    pub(super) async fn connect(
        client: ClusterClient,
        replication: Arc<Replication>,
    ) -> Result<Arc<Self>, RedisStoreError> {
        let connection = client.get_async_connection().await?;
        Ok(Arc::new(Self {
            client,
            connection: RwLock::new(connection),
            made: AtomicU64::new(replication.now()),
            renewing: tokio::sync::Mutex::new(()),
            replication,
        }))
    }

    /// The connection in use.
    pub(super) fn connection(&self) -> ClusterConnection {
        self.connection
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// After a failed call: a new connection, in the background, unless the one in use is
    /// younger than [`CLUSTER_RENEW_AFTER`]. (Calls under way finish on the old one.)
    pub(super) fn failed(self: &Arc<Self>) {
        let age = self.replication.now() - self.made.load(Ordering::Relaxed);
        if age < CLUSTER_RENEW_AFTER.as_millis() as u64 {
            return;
        }
        let cluster = self.clone();
        tokio::spawn(async move {
            let Ok(_renewing) = cluster.renewing.try_lock() else {
                return; // another failed call is at it
            };
            let age = cluster.replication.now() - cluster.made.load(Ordering::Relaxed);
            if age < CLUSTER_RENEW_AFTER.as_millis() as u64 {
                return;
            }
            // Whatever comes of it, the next attempt waits its turn.
            cluster
                .made
                .store(cluster.replication.now(), Ordering::Relaxed);
            match cluster.client.get_async_connection().await {
                Ok(connection) => {
                    *cluster
                        .connection
                        .write()
                        .unwrap_or_else(|poisoned| poisoned.into_inner()) = connection;
                    info!("Redis Cluster calls failed: connected anew (the slots read again)");
                }
                Err(e) => {
                    warn!(error = %e, "Redis Cluster calls failed, and connecting anew failed too")
                }
            }
        });
    }
}

/// The URL of the primary the sentinels name (the first sentinel that answers).
async fn locate(
    sentinels: &[String],
    config: &SentinelConfig,
    tls: Option<&RedisTls>,
    manager_config: &ConnectionManagerConfig,
) -> Result<String, RedisStoreError> {
    let mut failures = Vec::new();
    for url in sentinels {
        let asked = async {
            let client = RedisTls::client(tls, url)?;
            // The primary's kind of connection (one copy of its code in the binary).
            let mut connection =
                ConnectionManager::new_with_config(client, manager_config.clone()).await?;
            let answer: redis::Value = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&config.primary)
                .query_async(&mut connection)
                .await?;
            Ok::<_, redis::RedisError>(redis::from_redis_value::<Option<(String, u16)>>(answer))
        };
        match tokio::time::timeout(SENTINEL_TIMEOUT, asked).await {
            Ok(Ok(Ok(Some((host, port))))) => return Ok(config.url(&host, port)),
            Ok(Ok(Err(e))) => failures.push(format!("{url}: {e}")),
            Ok(Ok(Ok(None))) => failures.push(format!(
                "{url} monitors no primary called {:?}",
                config.primary
            )),
            Ok(Err(e)) => failures.push(format!("{url}: {e}")),
            Err(_) => failures.push(format!("{url}: no answer within {SENTINEL_TIMEOUT:?}")),
        }
    }
    Err(RedisStoreError::Redis(format!(
        "no sentinel named the primary: {}",
        failures.join("; ")
    )))
}

/// [`open_primary`] for the primary the sentinels named, given up after [`PRIMARY_TIMEOUT`].
async fn open_named_primary(
    url: &str,
    tls: Option<&RedisTls>,
    config: &ConnectionManagerConfig,
) -> Result<ConnectionManager, RedisStoreError> {
    tokio::time::timeout(PRIMARY_TIMEOUT, open_primary(url, tls, config))
        .await
        .unwrap_or_else(|_| {
            Err(RedisStoreError::Redis(format!(
                "no answer within {PRIMARY_TIMEOUT:?}"
            )))
        })
}

/// A connection to `url`, once it answers `ROLE` as a primary.
async fn open_primary(
    url: &str,
    tls: Option<&RedisTls>,
    config: &ConnectionManagerConfig,
) -> Result<ConnectionManager, RedisStoreError> {
    let client = RedisTls::client(tls, url)?;
    let mut manager = ConnectionManager::new_with_config(client, config.clone()).await?;
    let role: redis::Value = redis::cmd("ROLE").query_async(&mut manager).await?;
    let first = match &role {
        redis::Value::Array(items) => items.first(),
        _ => None,
    };
    match first {
        Some(redis::Value::BulkString(role)) if role == b"master" => Ok(manager),
        other => Err(RedisStoreError::Reply(format!(
            "{} is not a primary (ROLE {other:?})",
            super::redact(url)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_ends_with_a_call_begun_after_it_not_one_already_under_way() {
        let replication = Replication::default();
        std::thread::sleep(Duration::from_millis(5));
        let under_way = replication.now();
        std::thread::sleep(Duration::from_millis(5));
        replication.note(false, replication.now());
        std::thread::sleep(Duration::from_millis(20));
        replication.note(true, under_way);
        assert_eq!(replication.last_outage_ms.load(Ordering::Relaxed), 0);
        replication.note(true, replication.now());
        assert!(replication.last_outage_ms.load(Ordering::Relaxed) >= 20);
    }

    /// A named primary that takes the connection and never answers (as one behind a
    /// partition) is given up after `PRIMARY_TIMEOUT`, however long the connection's own
    /// timeouts (a minute here: the only timer that can end the attempt first is ours).
    #[tokio::test]
    async fn a_named_primary_that_never_answers_is_given_up_after_primary_timeout() {
        // Bound but never accepted: the kernel completes the handshake, nothing answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://{}", silent.local_addr().unwrap());
        let minute = Some(Duration::from_secs(60));
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(minute)
            .set_response_timeout(minute);
        let attempt = open_named_primary(&url, None, &config);
        let Ok(opened) = tokio::time::timeout(Duration::from_secs(30), attempt).await else {
            panic!("still waiting for a server that never answers after 30 s");
        };
        let Err(error) = opened else {
            panic!("a server that never answers taken as the primary");
        };
        assert_eq!(
            error.to_string(),
            RedisStoreError::Redis("no answer within 2s".into()).to_string()
        );
    }
}
