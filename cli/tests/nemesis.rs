//! The nemesis: faults mixed at random over each deployment while clients run random state
//! store operations, devices race on job executions and a caller sends commands, as Jepsen
//! tests the stores people trust. Each node's links to the broker
//! and to Redis go through a proxy the nemesis cuts and restores (a partition: the node sees
//! nothing of that side while the others do) or vanishes for it (its connections closed, a
//! new one hanging in its handshake, as a killed container's address), its process is paused
//! (SIGSTOP … SIGCONT) or
//! killed and restarted, and its wall clock jumps (libfaketime); each client's link to the
//! broker goes through a proxy of its own too, cut the same way (its calls in flight end
//! unknown, and an observer cut off must say what it missed). On Redis Sentinel and a Redis
//! Cluster, where the nodes reach each server at the address the sentinels or the cluster
//! name, each node runs as a user of its own and an `iptables` rule drops its packets to one
//! server (a partition from that server alone; so this test runs as root); their servers are
//! paused, their primaries killed and failed over, their replicas restarted. Afterwards every
//! fault is healed and the run is checked:
//!
//! * the history (closing reads included) is linearizable — porcupine, `tests/linearizability`;
//!   so no acknowledged write was lost where the deployment keeps data across a restart; the
//!   job executions' histories too, against AWS IoT Jobs' rules for a device's updates;
//! * every command's answer is its caller's own, and its status agrees with what the caller
//!   was told;
//! * versions only grow: an applied SET that began after another one was answered has a
//!   higher version, whatever the clocks did (fencing tokens are versions);
//! * an observer sees each key's changes in version order, each once, and every acknowledged
//!   write either among them or covered by a change marked `gap` (it says what it missed);
//! * notify-next announces each job execution to a device at most once; a job canceled during
//!   the faults ends CANCELED with every execution CANCELED, and AWS's events say so at most
//!   once each (the job's, each execution's).
//!
//! The clients move on to new keys every minute of faults ([`GENERATION`]), so that no key's
//! history outgrows porcupine.
//!
//! Deployments: one node on memory (its data dies with it, so it is paused and cut off but not
//! killed), one node on `--data-dir`, three nodes on one Redis, on Redis Sentinel and on a Redis
//! Cluster (a primary killed and failed over), the plugin in mosquitto. `MQSTORE_NEMESIS_SECONDS` sets
//! how long faults are made per deployment (20 s unless set: the test command's short run;
//! docs/reliability.md has the long runs), `MQSTORE_NEMESIS_SEED` the seed (printed by every
//! run, so a failure can be replayed).

mod broker;
mod calls;
mod history;
#[path = "redis/mod.rs"]
mod redis;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use broker::Broker;
use mqstore_core::client::ClientError;
use mqstore_core::hlc::Hlc;
use mqstore_net::client::{KeyChange, SetOptions};
use redis::{Cluster, Proxy, Redis, Sentinels};
use serde_json::Value;

/// Keys the clients work on at a time.
const KEYS: u64 = 6;
/// How long the clients work on one generation of keys ([`history::Load::rotating`]).
const GENERATION: Duration = Duration::from_secs(60);
/// Clients running random operations.
const CLIENTS: usize = 4;
/// Clients acting as the devices of every thing at once, racing on the same job executions.
const JOB_CLIENTS: usize = 2;
/// Things the jobs target.
const THINGS: usize = 3;
/// Jobs, each targeting every thing: the devices work through them in order.
const JOBS: usize = 60;
/// Jobs canceled during the load, each targeting as many things again, which no device works
/// on (their executions stay QUEUED until the cancellation ends them).
const CANCELED_JOBS: usize = 4;
/// The clients' links: the load's, the observer's, the jobs devices', the command caller's and
/// the echo device's.
const LINKS: usize = CLIENTS + 1 + JOB_CLIENTS + 2;

fn nemesis_seconds() -> u64 {
    match std::env::var("MQSTORE_NEMESIS_SECONDS") {
        Ok(s) => s
            .parse()
            .expect("MQSTORE_NEMESIS_SECONDS is a number of seconds"),
        Err(_) => 20,
    }
}

fn seed() -> u64 {
    match std::env::var("MQSTORE_NEMESIS_SEED") {
        Ok(s) => s.parse().expect("MQSTORE_NEMESIS_SEED is a number"),
        Err(_) => {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        }
    }
}

/// xorshift: the nemesis's choices, reproducible from the seed.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.roll(to - from))
    }
}

/// libfaketime, which the nodes are started under so that their wall clock can jump.
fn faketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|dir| dir.path().join("faketime/libfaketime.so.1"))
        .find(|path| path.exists());
    found.expect(
        "libfaketime is not installed: `bash scripts/test` installs it (apt-get install faketime)",
    )
}

/// libfaketime keeps a semaphore and shared memory in `/dev/shm` for each process it runs in,
/// and removes them when that process exits; a node or broker the nemesis kills leaves them
/// behind. Removes those of processes no longer alive (whichever test ran them).
fn sweep_faketime_leftovers() {
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let pid = (name.strip_prefix("faketime_shm_"))
            .or_else(|| name.strip_prefix("sem.faketime_sem_"))
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The environment that runs a process under libfaketime with its wall clock set by `clock`
/// (an offset such as `+0`, read again every second); the monotonic clock (timeouts,
/// intervals) is left alone, as a real clock jump leaves it.
fn jumping_clock(clock: &Path) -> Vec<(String, String)> {
    let clock = clock.display().to_string();
    [
        ("LD_PRELOAD", faketime().display().to_string()),
        ("FAKETIME_TIMESTAMP_FILE", clock),
        ("FAKETIME_CACHE_DURATION", "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
        ("DONT_FAKE_MONOTONIC", "1".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// One `mqstore serve` process, its links through proxies, its clock in a file.
struct Node {
    id: String,
    /// The `mqstore` binary it runs.
    binary: PathBuf,
    /// The user it runs as, when it has one of its own: a firewall rule can then cut its
    /// link to one of the Redis servers it reaches directly ([`Firewall`]).
    uid: Option<u32>,
    store: Vec<String>,
    broker_link: Proxy,
    redis_link: Option<Proxy>,
    clock: PathBuf,
    child: Option<Child>,
}

impl Node {
    /// A node, its clock in `dir`; given `unprivileged`, it runs as a user of its own.
    fn new(
        id: &str,
        broker: &Broker,
        store: &Store,
        dir: &Path,
        unprivileged: Option<&Unprivileged>,
    ) -> Self {
        let (store, redis_link) = match store {
            Store::Memory => (Vec::new(), None),
            Store::DataDir => (
                vec![
                    "--data-dir".to_owned(),
                    dir.join(format!("data-{id}")).display().to_string(),
                ],
                None,
            ),
            Store::Replicated(url, replicas) => (
                // A write is answered once every replica has it: a failover loses nothing
                // acknowledged, whichever replica is promoted. Fewer leaves a window: a
                // primary deposed while held, resumed with a replica the sentinels have not
                // moved yet, confirms writes that are then lost (docs/guide/redis.md; the
                // failover tests show it).
                vec![
                    "--store".to_owned(),
                    url.clone(),
                    "--redis-wait-replicas".to_owned(),
                    replicas.to_string(),
                ],
                None,
            ),
            Store::Redis(port) => {
                let link = Proxy::to(*port);
                (
                    vec![
                        "--store".to_owned(),
                        format!("redis://127.0.0.1:{}", link.port),
                    ],
                    Some(link),
                )
            }
        };
        let clock = dir.join(format!("clock-{id}"));
        std::fs::write(&clock, "+0").unwrap();
        let (binary, uid) = match unprivileged {
            Some(unprivileged) => (unprivileged.binary(), Some(unused_uid())),
            None => (PathBuf::from(env!("CARGO_BIN_EXE_mqstore")), None),
        };
        let mut node = Self {
            id: id.to_owned(),
            binary,
            uid,
            store,
            broker_link: Proxy::to(broker.port),
            redis_link,
            clock,
            child: None,
        };
        node.start();
        node
    }

    fn start(&mut self) {
        let mut command = Command::new(&self.binary);
        if let Some(uid) = self.uid {
            command.uid(uid).gid(uid);
        }
        let child = command
            .args(["--port", &self.broker_link.port.to_string(), "serve"])
            .args(&self.store)
            .args(["--node-id", &self.id, "--share-group", "nemesis"])
            .env("MQSTORE_LOG", "warn")
            .envs(jumping_clock(&self.clock))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mqstore serve starts");
        self.child = Some(child);
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.signal("-CONT");
        self.kill();
    }
}

/// A directory every user may read, with the `mqstore` binary in it (a hard link, or a copy
/// across file systems) and the nodes' clocks: nodes running as users of their own may not
/// reach the test's target directory (a checkout in a private home). Removed on drop.
struct Unprivileged {
    dir: PathBuf,
}

impl Unprivileged {
    fn new(name: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir =
            std::env::temp_dir().join(format!("mqstore-nemesis-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let this = Self { dir };
        let binary = env!("CARGO_BIN_EXE_mqstore");
        if std::fs::hard_link(binary, this.binary()).is_err() {
            std::fs::copy(binary, this.binary()).expect("mqstore copied for the nodes");
        }
        this
    }

    fn binary(&self) -> PathBuf {
        self.dir.join("mqstore")
    }
}

impl Drop for Unprivileged {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A user id for one node (no such user needs to exist), none shared with another node, nor
/// (by the process id) with another test process's nodes.
fn unused_uid() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    200_000 + (std::process::id() % 100_000) * 16 + next % 16
}

/// Partitions between one node and one server (a Redis server or a sentinel) that the others
/// still reach: an `iptables` rule drops the node's packets to the server's port, matched by
/// the node's own user — the nodes reach those servers at the addresses the sentinels or the
/// cluster name, where a proxy cannot stand in. Rules still in place when the run ends (a
/// check failed mid-run) are deleted on drop.
#[derive(Default)]
struct Firewall {
    cut: Vec<(u32, u16)>,
}

impl Firewall {
    /// Fails at once, saying what to do, where rules cannot be made (not root, no iptables).
    fn check() {
        Self::must(&["-S".into(), "OUTPUT".into()]);
    }

    /// Runs `iptables -w args`: whether it succeeded.
    fn iptables(args: &[String]) -> bool {
        let status = Command::new("iptables")
            .arg("-w")
            .args(args)
            .stdout(Stdio::null())
            .status();
        status.is_ok_and(|s| s.success())
    }

    fn must(args: &[String]) {
        assert!(
            Self::iptables(args),
            "`iptables {}` failed: the nemesis cuts a node's link to one Redis server with an \
             iptables rule, so it runs as root with iptables installed (scripts/test installs \
             it: apt-get install iptables)",
            args.join(" ")
        );
    }

    /// The rule dropping `uid`'s packets to `port`, to add (`-A`) or delete (`-D`).
    fn rule(action: &str, uid: u32, port: u16) -> Vec<String> {
        let (port, uid) = (port.to_string(), uid.to_string());
        let rule = [
            action,
            "OUTPUT",
            "-p",
            "tcp",
            "-d",
            "127.0.0.1",
            "--dport",
            &port,
            "-m",
            "owner",
            "--uid-owner",
            &uid,
            "-j",
            "DROP",
        ];
        rule.map(str::to_owned).to_vec()
    }

    fn cut(&mut self, uid: u32, port: u16) {
        Self::must(&Self::rule("-A", uid, port));
        self.cut.push((uid, port));
    }

    fn restore(&mut self, uid: u32, port: u16) {
        Self::must(&Self::rule("-D", uid, port));
        self.cut.retain(|&cut| cut != (uid, port));
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        for (uid, port) in std::mem::take(&mut self.cut) {
            Self::iptables(&Self::rule("-D", uid, port));
        }
    }
}

enum Store {
    Memory,
    DataDir,
    /// One Redis at this port, each node's link to it through a proxy.
    Redis(u16),
    /// Redis Sentinel or a Redis Cluster at this URL (the nodes find the primaries), with
    /// this many replicas per primary.
    Replicated(String, u32),
}

/// Redis with replicas that take a dead primary's place: a primary and two replicas, each with
/// its append-only file fsynced at every write, and the sentinels that fail the primary over;
/// or a Redis Cluster of three primaries with a replica each, which fail over by themselves.
struct Replicated {
    servers: Vec<Redis>,
    /// The sentinels (none: a cluster).
    sentinels: Option<Sentinels>,
    /// When the primary was last killed: the sentinels fail one primary over again only after
    /// twice their failover timeout (8 s), and a primary killed meanwhile would leave none.
    killed_at: Option<Instant>,
}

impl Replicated {
    fn sentinel() -> Self {
        let primary = Redis::start_durable();
        let replicas = [
            Redis::durable_replica_of(&primary),
            Redis::durable_replica_of(&primary),
        ];
        let sentinels = Sentinels::start(&primary, 3);
        Self {
            servers: std::iter::once(primary).chain(replicas).collect(),
            sentinels: Some(sentinels),
            killed_at: None,
        }
        .requiring_replicas()
    }

    fn cluster() -> Self {
        Self {
            servers: Cluster::start_with_replicas(1).nodes,
            sentinels: None,
            killed_at: None,
        }
        .requiring_replicas()
    }

    /// Every server refuses writes as a primary unless all its replicas are in sync, as the
    /// nodes' `--redis-wait-replicas` waits for them (docs/guide/redis.md): a write made while
    /// a replica is away is refused before it is applied, and answered 503 saying so, where
    /// `WAIT` alone would answer it 503 after applying it — an outcome not known. Many of those
    /// on one key make the checker's search grow past the machine's memory.
    fn requiring_replicas(mut self) -> Self {
        let replicas = self.replicas_per_primary();
        for server in &mut self.servers {
            server.require_replicas(replicas);
        }
        self
    }

    fn url(&self) -> String {
        match &self.sentinels {
            Some(sentinels) => sentinels.url(),
            None => format!(
                "redis-cluster://{}",
                self.servers
                    .iter()
                    .map(|s| format!("127.0.0.1:{}", s.port))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }

    /// The running servers that answer as primaries.
    fn live_primaries(&self) -> usize {
        let live = self.servers.iter().filter(|s| s.pid().is_some());
        live.filter(|s| s.is_primary()).count()
    }

    /// Whether the primary may be killed now (see `killed_at`).
    fn may_kill(&self) -> bool {
        self.killed_at
            .is_none_or(|at| at.elapsed() > Duration::from_secs(10))
    }

    /// Kills the primary.
    fn kill_primary(&mut self) {
        self.killed_at = Some(Instant::now());
        if let Some(primary) = self.primary() {
            primary.kill();
        }
    }

    /// How many replicas each primary has: Sentinel's two, a cluster shard's one.
    fn replicas_per_primary(&self) -> u32 {
        if self.sentinels.is_some() { 2 } else { 1 }
    }

    /// Every server's and sentinel's port: what a node's link may be cut to.
    fn ports(&self) -> Vec<u16> {
        let sentinels = self.sentinels.iter().flat_map(|s| &s.nodes);
        self.servers
            .iter()
            .chain(sentinels)
            .map(|s| s.port)
            .collect()
    }

    /// Kills the `j`-th running replica (counting round), counted as a kill: a cluster's
    /// primary killed meanwhile would have no replica to take its place.
    fn kill_replica(&mut self, j: usize) {
        self.killed_at = Some(Instant::now());
        let replicas: Vec<usize> = (0..self.servers.len())
            .filter(|&k| self.servers[k].pid().is_some() && !self.servers[k].is_primary())
            .collect();
        if !replicas.is_empty() {
            self.servers[replicas[j % replicas.len()]].kill();
        }
    }

    /// Starts every killed server again, on its append-only file (a replica resyncs from its
    /// primary).
    fn start_killed(&mut self) {
        for server in &mut self.servers {
            server.start_again();
        }
    }

    /// Pauses server `j`: counted as a kill (a primary paused may be failed over, and none
    /// may go down again while the sentinels still refuse a second failover).
    fn pause(&mut self, j: usize) {
        self.killed_at = Some(Instant::now());
        signal(self.servers[j].pid(), "-STOP");
    }

    /// Once the sentinels promoted another server (up to 15 s), starts the killed one again:
    /// on its append-only file, it comes back as the new primary's replica.
    fn restart_killed(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !self.promoted() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        self.start_killed();
    }

    /// The primary to kill: the one the sentinels name now, or a cluster's first running one.
    fn primary(&mut self) -> Option<&mut Redis> {
        match &self.sentinels {
            Some(sentinels) => {
                let port = redis::named_primary(sentinels.nodes[0].port)?;
                self.servers.iter_mut().find(|s| s.port == port)
            }
            None => self
                .servers
                .iter_mut()
                .find(|s| s.pid().is_some() && s.is_primary()),
        }
    }

    /// Whether another server took the killed primary's place (a cluster: three primaries
    /// run again).
    fn promoted(&mut self) -> bool {
        match &self.sentinels {
            Some(_) => self.primary().is_some_and(|p| p.pid().is_some()),
            None => self.live_primaries() == 3,
        }
    }

    /// Waits (up to 30 s) until the sentinels name a running primary with a replica in sync,
    /// or the cluster has three primaries, each replica in sync, and its state is ok.
    fn settle(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let synced = |s: &Redis| {
            s.cli(&["info", "replication"])
                .contains("master_link_status:up")
        };
        loop {
            let settled = match &self.sentinels {
                Some(sentinels) => {
                    let port = redis::named_primary(sentinels.nodes[0].port);
                    let primary = self.servers.iter().find(|s| Some(s.port) == port);
                    // Every replica: the nodes wait for both to confirm a write.
                    primary.is_some_and(Redis::is_primary)
                        && self
                            .servers
                            .iter()
                            .filter(|s| Some(s.port) != port)
                            .all(|s| {
                                synced(s)
                                    && s.cli(&["info", "replication"])
                                        .contains(&format!("master_port:{}", port.unwrap()))
                            })
                }
                None => {
                    self.live_primaries() == 3
                        && self.servers.iter().all(|s| {
                            s.cli(&["cluster", "info"]).contains("cluster_state:ok")
                                && (s.is_primary() || synced(s))
                        })
                }
            };
            if settled {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no primary with a replica in sync after the faults healed"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// What the nemesis works on: the broker, Redis if the nodes share one, the `mqstore serve`
/// nodes (none when the service is the plugin inside the broker), and the clients' links to
/// the broker (made by [`nemesis`]: the load's clients', then the observer's).
struct Deployment {
    name: &'static str,
    broker: Broker,
    client_links: Vec<Proxy>,
    /// Redis Sentinel's servers, when the nodes use them.
    replicated: Option<Replicated>,
    /// The broker's clock file, when it runs under libfaketime (the plugin inside it).
    broker_clock: Option<PathBuf>,
    redis: Option<Redis>,
    nodes: Vec<Node>,
    /// Whether what was acknowledged survives a restart (so kills and restarts are faults).
    durable: bool,
    /// The links to single servers cut now (Sentinel and the cluster).
    firewall: Firewall,
    /// Where the nodes that run as users of their own find their binary (Sentinel and the
    /// cluster): held for its drop, after `nodes`, so removed once they are stopped.
    _unprivileged: Option<Unprivileged>,
}

/// One fault, and how it is healed.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// The node's link to the broker cut: its answers and notifications in flight are lost.
    CutBroker(usize),
    /// The node's link to Redis cut.
    CutRedis(usize),
    /// A client's link to the broker cut (the last one is the observer's): its calls in
    /// flight are lost, and it reconnects once the link is back.
    CutClient(usize),
    /// The broker's host vanishes for the node: its connection closed, a new one hanging in
    /// its handshake (as a killed container's address).
    VanishBroker(usize),
    /// Redis's host vanishes for the node, the same way.
    VanishRedis(usize),
    /// The node paused (SIGSTOP), then resumed.
    Pause(usize),
    /// The node killed (SIGKILL), then started again on the same store.
    Kill(usize),
    /// The node's wall clock jumps by this many seconds (and stays there).
    ClockJump(usize, i64),
    /// The broker's wall clock jumps (the plugin's, inside it), the same way.
    BrokerClockJump(i64),
    /// The broker killed, then started again on its port: every client and node reconnects.
    RestartBroker,
    /// The broker paused (SIGSTOP), then resumed.
    PauseBroker,
    /// Redis killed, then started again on its append-only file.
    RestartRedis,
    /// Redis paused, then resumed.
    PauseRedis,
    /// A primary killed (Redis Sentinel's, which the sentinels fail over once it is down for a
    /// second; or one of a cluster's, whose replica takes over), then, once another took its
    /// place, started again: it comes back as the new primary's replica.
    KillPrimary,
    /// One of Sentinel's or a cluster's servers paused (a primary or a replica), then resumed:
    /// a primary held past the sentinels' or the cluster's timeout (1 s) is failed over and
    /// comes back demoted; meanwhile it still takes commands from whoever reaches it.
    PauseServer(usize),
    /// One of Sentinel's or a cluster's replicas killed, then started again on its
    /// append-only file: it resyncs from its primary (meanwhile a cluster's shard has no
    /// replica to confirm a write to, and a write there is answered 503).
    RestartReplica(usize),
    /// A node cut off from one of Sentinel's or a cluster's servers or sentinels (at this
    /// port), which the other nodes still reach: the node's packets to it dropped.
    CutServer(usize, u16),
}

fn signal(pid: Option<u32>, signal: &str) {
    if let Some(pid) = pid {
        let _ = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status();
    }
}

impl Deployment {
    fn apply(&mut self, fault: Fault) {
        let nodes = &mut self.nodes;
        match fault {
            Fault::CutBroker(i) => nodes[i].broker_link.cut(),
            Fault::CutRedis(i) => nodes[i].redis_link.as_ref().unwrap().cut(),
            Fault::CutClient(c) => self.client_links[c].cut(),
            Fault::VanishBroker(i) => nodes[i].broker_link.vanish(),
            Fault::VanishRedis(i) => nodes[i].redis_link.as_ref().unwrap().vanish(),
            Fault::Pause(i) => nodes[i].signal("-STOP"),
            Fault::Kill(i) => nodes[i].kill(),
            Fault::ClockJump(i, seconds) => {
                std::fs::write(&nodes[i].clock, format!("{seconds:+}")).unwrap()
            }
            Fault::BrokerClockJump(seconds) => {
                let clock = self.broker_clock.as_ref().unwrap();
                std::fs::write(clock, format!("{seconds:+}")).unwrap()
            }
            Fault::RestartBroker => self.broker.stop(),
            Fault::PauseBroker => signal(self.broker.pid(), "-STOP"),
            Fault::RestartRedis => self.redis.as_mut().unwrap().kill(),
            Fault::PauseRedis => signal(self.redis.as_ref().unwrap().pid(), "-STOP"),
            Fault::KillPrimary => self.replicated.as_mut().unwrap().kill_primary(),
            Fault::PauseServer(j) => self.replicated.as_mut().unwrap().pause(j),
            Fault::RestartReplica(j) => self.replicated.as_mut().unwrap().kill_replica(j),
            Fault::CutServer(i, port) => self.firewall.cut(nodes[i].uid.unwrap(), port),
        }
    }

    fn heal(&mut self, fault: Fault) {
        let nodes = &mut self.nodes;
        match fault {
            Fault::CutBroker(i) | Fault::VanishBroker(i) => nodes[i].broker_link.restore(),
            Fault::CutClient(c) => self.client_links[c].restore(),
            Fault::CutRedis(i) | Fault::VanishRedis(i) => {
                nodes[i].redis_link.as_ref().unwrap().restore()
            }
            Fault::Pause(i) => nodes[i].signal("-CONT"),
            Fault::Kill(i) => nodes[i].start(),
            Fault::ClockJump(..) | Fault::BrokerClockJump(_) => {}
            Fault::RestartBroker => self.broker.restart(),
            Fault::PauseBroker => signal(self.broker.pid(), "-CONT"),
            Fault::RestartRedis => self.redis.as_mut().unwrap().start_again(),
            Fault::PauseRedis => signal(self.redis.as_ref().unwrap().pid(), "-CONT"),
            Fault::KillPrimary => self.replicated.as_mut().unwrap().restart_killed(),
            Fault::PauseServer(j) => {
                signal(self.replicated.as_ref().unwrap().servers[j].pid(), "-CONT")
            }
            Fault::RestartReplica(_) => self.replicated.as_mut().unwrap().start_killed(),
            Fault::CutServer(i, port) => self.firewall.restore(nodes[i].uid.unwrap(), port),
        }
    }

    /// A fault the deployment can take: no kills or restarts where the data dies with the
    /// process (memory), no Redis faults where there is none, no node faults without nodes.
    fn choose(&self, dice: &mut Dice) -> Fault {
        let n = self.nodes.len() as u64;
        loop {
            let i = dice.roll(n.max(1)) as usize;
            let fault = match dice.roll(17) {
                0 if n > 0 => Fault::CutBroker(i),
                1 if self.redis.is_some() => Fault::CutRedis(i),
                2 if n > 0 => Fault::Pause(i),
                3 if n > 0 && self.durable => Fault::Kill(i),
                4 if n > 0 => Fault::ClockJump(i, dice.roll(17) as i64 - 8),
                5 if self.durable => Fault::RestartBroker,
                6 => Fault::PauseBroker,
                7 if self.redis.is_some() => Fault::RestartRedis,
                8 if self.redis.is_some() => Fault::PauseRedis,
                9 if n > 0 => Fault::VanishBroker(i),
                10 if self.redis.is_some() => Fault::VanishRedis(i),
                11 => Fault::CutClient(dice.roll(self.client_links.len() as u64) as usize),
                12 if self.broker_clock.is_some() => {
                    Fault::BrokerClockJump(dice.roll(17) as i64 - 8)
                }
                13 if self.replicated.as_ref().is_some_and(Replicated::may_kill) => {
                    Fault::KillPrimary
                }
                14 if let Some(replicated) = &self.replicated
                    && replicated.may_kill() =>
                {
                    Fault::PauseServer(dice.roll(replicated.servers.len() as u64) as usize)
                }
                15 if let Some(replicated) = &self.replicated
                    && replicated.may_kill() =>
                {
                    Fault::RestartReplica(dice.roll(replicated.servers.len() as u64) as usize)
                }
                16 if let Some(replicated) = &self.replicated
                    && n > 0 =>
                {
                    let ports = replicated.ports();
                    Fault::CutServer(i, ports[dice.roll(ports.len() as u64) as usize])
                }
                _ => continue,
            };
            return fault;
        }
    }
}

/// `nodes` nodes on `store` beside mosquitto.
fn beside(
    name: &'static str,
    nodes: usize,
    store: Store,
    redis: Option<Redis>,
    durable: bool,
) -> Deployment {
    let broker = Broker::start();
    // Nodes on Sentinel or a cluster run as users of their own (see `Firewall`).
    let unprivileged = matches!(store, Store::Replicated(..)).then(|| {
        Firewall::check();
        Unprivileged::new(name)
    });
    let dir = unprivileged
        .as_ref()
        .map_or_else(|| tempdir(name), |u| u.dir.clone());
    let nodes = (0..nodes)
        .map(|i| {
            let id = format!("{name}-{i}");
            Node::new(&id, &broker, &store, &dir, unprivileged.as_ref())
        })
        .collect();
    Deployment {
        name,
        broker,
        client_links: Vec::new(),
        replicated: None,
        broker_clock: None,
        redis,
        nodes,
        durable,
        firewall: Firewall::default(),
        _unprivileged: unprivileged,
    }
}

/// Runs the nemesis over a deployment, and checks the run.
async fn nemesis(mut deployment: Deployment) {
    // What a run that failed before left.
    sweep_faketime_leftovers();
    let name = deployment.name;
    let seed = seed();
    let seconds = nemesis_seconds();
    println!("nemesis over {name}: {seconds} s, MQSTORE_NEMESIS_SEED={seed}");
    let port = deployment.broker.port;
    // Each client (the load's, the observer, the jobs') reaches the broker through its own link.
    deployment.client_links = (0..LINKS).map(|_| Proxy::to(port)).collect();
    let link = |c: usize| deployment.client_links[c].port;

    // A new generation of keys every minute of faults; the last one from then on.
    let load = history::Load::rotating(GENERATION, seconds / GENERATION.as_secs() + 1);
    let keys = load.keys(KEYS);

    // The observer first, so that every write comes after its first read.
    let observer =
        calls::ready_client_timing_out(link(CLIENTS), "observer", Duration::from_secs(3)).await;
    let changes = Arc::new(Mutex::new(BTreeMap::<String, Vec<KeyChange>>::new()));
    for key in &keys {
        let mut observation = observer.observe(key.clone()).await.unwrap();
        let key = key.clone();
        let changes = changes.clone();
        tokio::spawn(async move {
            while let Some(change) = observation.next().await {
                changes
                    .lock()
                    .unwrap()
                    .entry(key.clone())
                    .or_default()
                    .push(change);
            }
        });
    }

    // Jobs for the devices to work through, every execution queued before the load starts.
    let things: Arc<[String]> = (0..THINGS).map(|t| format!("thing-{t}")).collect();
    let job_ids: Arc<[String]> = (0..JOBS).map(|j| format!("job-{j}")).collect();
    let operator = calls::ready_client_timing_out(port, "operator", Duration::from_secs(3)).await;
    for job_id in job_ids.iter() {
        let spec = mqstore_core::jobs::JobSpec::new(job_id, things.to_vec(), serde_json::json!({}));
        operator.create_job(spec).await.expect("the job is created");
    }
    // Each thing's jobs in the order they were queued on it, which is the order the devices
    // work them in: a rollout may queue a later job on a thing before an earlier one (another
    // node's tick claimed the earlier job's things while its creation was answered), and a job
    // worked ahead of the thing's next one makes that one next twice.
    let mut queue_orders = Vec::new();
    for thing in things.iter() {
        let jobs = operator.jobs(thing).await.unwrap();
        let deadline = Instant::now() + calls::WAIT;
        let queued = loop {
            let queued = jobs.pending().await.unwrap().queued_jobs;
            if queued.len() == JOBS {
                break queued;
            }
            assert!(
                Instant::now() < deadline,
                "{thing}'s executions never queued"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let order: Vec<String> = queued.into_iter().map(|job| job.job_id).collect();
        if order.iter().ne(job_ids.iter()) {
            println!("{name}: {thing}'s jobs queued out of creation order: {order:?}");
        }
        queue_orders.push(order);
    }
    let queue_orders: Arc<[Vec<String>]> = queue_orders.into();
    let cancellations = Cancellations::start(operator, port, &load, seconds).await;

    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = calls::connect(link(c), &format!("client-{c}"), Duration::from_secs(3)).await;
        tasks.push(tokio::spawn(history::run(client, c, KEYS, load.clone())));
    }
    // Commands: a caller sends awaited commands, one at a time, to an MQTT 5 device that echoes
    // them.
    let echo = calls::mqtt5_devices(link(LINKS - 1), "echo-device").await;
    let caller = calls::connect(link(LINKS - 2), "caller", Duration::from_secs(3)).await;
    let commands = tokio::spawn(call_commands(caller, load.clone()));
    let mut job_tasks = Vec::new();
    for j in 0..JOB_CLIENTS {
        // Client ids after the checker's (porcupine wants each client's operations in turn).
        let c = CLIENTS + 1 + j;
        let client = calls::connect(link(c), &format!("device-{j}"), Duration::from_secs(3)).await;
        let (things, orders, load) = (things.clone(), queue_orders.clone(), load.clone());
        job_tasks.push((
            c,
            tokio::spawn(async move { history::run_jobs(client, c, &things, &orders, load).await }),
        ));
    }

    // Faults, one at a time: each held for a while, healed, then a quiet spell.
    let mut dice = Dice(seed);
    let mut faults = Vec::new();
    let end = Instant::now() + Duration::from_secs(seconds);
    tokio::time::sleep(Duration::from_millis(500)).await;
    while Instant::now() < end {
        let fault = deployment.choose(&mut dice);
        faults.push(format!("{:.1}s {fault:?}", load.elapsed().as_secs_f64()));
        deployment.apply(fault);
        tokio::time::sleep(dice.millis(300, 2_000)).await;
        deployment.heal(fault);
        tokio::time::sleep(dice.millis(300, 1_500)).await;
    }
    println!("faults: {faults:#?}");
    if let Some(replicated) = &mut deployment.replicated {
        replicated.settle();
    }

    // Healed: the service answers again, then the load stops.
    let checker = calls::ready_client_timing_out(port, "checker", Duration::from_secs(3)).await;
    load.stop_at(load.elapsed() + Duration::from_millis(500))
        .await;
    let mut history = Vec::new();
    for task in tasks {
        history.extend(task.await.unwrap());
    }
    let mut job_runs = Vec::new();
    for (c, task) in job_tasks {
        let mut run = task.await.unwrap();
        history.append(&mut run.lines);
        job_runs.push((c, run));
    }
    let commands = commands.await.unwrap();
    // First, while the last commands' records are kept.
    commands.check(&checker, name, seed).await;
    echo.abort();
    cancellations.check(&checker, name, seed, &faults).await;

    // Closing writes and reads: every key's last state, read back once all is healed, is in
    // the history porcupine checks (a lost acknowledged write cannot hide).
    let mut closing = BTreeMap::new();
    for (k, key) in keys.iter().enumerate() {
        let call = load.elapsed().as_nanos();
        let set = checker
            .set(key.clone(), format!("closing-{k}"), SetOptions::default())
            .await
            .expect("the healed service answers");
        let ret = load.elapsed().as_nanos();
        let version = set.version.expect("a SET's version");
        history.push(history::line(
            CLIENTS,
            key,
            "set",
            &format!("closing-{k}"),
            (call, ret),
            "ok",
            Some(&version),
        ));
        closing.insert(key.clone(), version);
        let call = load.elapsed().as_nanos();
        let got = checker
            .get(key.clone())
            .await
            .unwrap()
            .expect("the closing value");
        let ret = load.elapsed().as_nanos();
        let out = format!("value:{}", String::from_utf8_lossy(&got.value));
        history.push(history::line(
            CLIENTS,
            key,
            "get",
            "",
            (call, ret),
            &out,
            None,
        ));
    }

    // And every job execution described once all is healed.
    for thing in things.iter() {
        let jobs = checker.jobs(thing).await.unwrap();
        for job_id in job_ids.iter() {
            let call = load.elapsed().as_nanos();
            // A node may still be taking the device API over (its lease is claimed every
            // second, once writes are confirmed again): up to 20 s.
            let deadline = Instant::now() + Duration::from_secs(20);
            let described = loop {
                match jobs.describe(job_id).await {
                    Ok(described) => break described,
                    Err(e) if Instant::now() < deadline => {
                        println!("{name}: describe {thing} {job_id} after healing: {e}; again");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => panic!("the healed service does not answer in 20 s: {e}"),
                }
            };
            let ret = load.elapsed().as_nanos();
            let out = format!("{}:{}", described.status.as_str(), described.version_number);
            let key = history::execution_key(thing, job_id);
            let line = history::line(CLIENTS, &key, "describe", "", (call, ret), &out, None);
            history.push(line);
        }
    }
    let job_operations = history.iter().filter(|l| l.contains("\"job:")).count();
    println!("{name}: {job_operations} job execution operations");

    let (linearizable, report) = history::check(&history, &format!("nemesis-{name}.jsonl"));
    println!("{report}");
    assert!(
        linearizable,
        "{name}: not found linearizable (seed {seed}; the report says whether a violation or the checker gave up): {report}\nfaults: {faults:#?}"
    );
    // After the history is kept and checked (a state gone back would show there too).
    match history::each_execution_announced_at_most_once(&job_runs) {
        Ok(0) => panic!("{name} (seed {seed}): notify-next announced no job execution at all"),
        Ok(n) => println!("{name}: {n} job executions announced by notify-next, none twice"),
        Err(e) => panic!("{name} (seed {seed}): {e}\nfaults: {faults:#?}"),
    }

    let records: Vec<Value> = history
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // One Redis (or one node) issues every version from one newest; a cluster each of its
    // buckets its own (docs/guide/redis.md): there versions grow key by key.
    let per_key = deployment
        .replicated
        .as_ref()
        .is_some_and(|r| r.sentinels.is_none());
    if per_key {
        for key in &keys {
            let of_key: Vec<Value> = records
                .iter()
                .filter(|r| r["key"] == key.as_str())
                .cloned()
                .collect();
            versions_only_grow(&of_key, &format!("{name} {key}"), seed);
        }
    } else {
        versions_only_grow(&records, name, seed);
    }

    // The observer comes to see each key's closing write or a later change: the key as it is
    // now (a request from before the last fault that a client's reconnection sent again may
    // land late, a deletion among them, which a read-back reports without a version), or a
    // version from the closing write on (a late change's notification may be lost with a
    // node's broker connection: docs/reliability.md, known). Then its view is checked against
    // every acknowledged write.
    let deadline = Instant::now() + calls::WAIT;
    loop {
        let mut now = BTreeMap::new();
        for key in closing.keys() {
            let got = checker
                .get(key.clone())
                .await
                .expect("the healed service answers");
            now.insert(key.clone(), got.map(|got| got.version));
        }
        let seen_all = {
            let changes = changes.lock().unwrap();
            now.iter().all(|(key, state)| {
                let Some(last) = changes.get(key).and_then(|c| c.last()) else {
                    return false;
                };
                let as_now = match state {
                    Some(version) => last.version.as_ref() == version.as_ref(),
                    None => last.value.is_none(),
                };
                as_now || last.version.as_ref() >= Some(&closing[key])
            })
        };
        if seen_all {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{name} (seed {seed}): the observer never saw the keys as they are {now:#?} (closing writes {closing:#?}); it saw {:#?}\nfaults: {faults:#?}",
            changes
                .lock()
                .unwrap()
                .iter()
                .map(|(k, c)| (k.clone(), c.last().cloned()))
                .collect::<Vec<_>>(),
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let changes = changes.lock().unwrap().clone();
    // What the observer saw, beside the history, for a failure's post-mortem.
    let seen: Vec<String> = changes
        .iter()
        .flat_map(|(key, seen)| {
            seen.iter().map(move |c| {
                serde_json::json!({ "key": key, "version": c.version.as_ref().map(Hlc::to_string),
                    "present": c.value.is_some(), "synthetic": c.synthetic, "gap": c.gap })
                .to_string()
            })
        })
        .collect();
    let file =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nemesis-{name}.observed.jsonl"));
    std::fs::write(&file, seen.join("\n") + "\n").unwrap();
    observers_see_every_change_or_a_gap(&records, &changes, name, seed);
    println!(
        "{name}: {} operations, {} changes observed, {} faults",
        records.len(),
        changes.values().map(Vec::len).sum::<usize>(),
        faults.len()
    );
    drop(deployment);
    sweep_faketime_leftovers();
}

/// How long the commands' status records surely last after the load (the service keeps one
/// three timeouts of 2 s).
const STATUS_KEPT: Duration = Duration::from_secs(4);

/// What the command caller saw.
#[derive(Default)]
struct Commands {
    /// Commands answered, by id: the payload sent and the payload answered, and when.
    answered: Vec<(String, String, Vec<u8>, Instant)>,
    /// Commands without an answer (timed out, refused while the store was away, the caller's
    /// connection lost), with their id where the error names it, and when.
    unanswered: Vec<(Option<String>, String, Instant)>,
}

/// Sends awaited commands (a 2 s timeout) to `dev/N/cmd`, one after another, until `load` stops.
async fn call_commands(caller: mqstore_net::client::Client, load: Arc<history::Load>) -> Commands {
    use mqstore_core::client::ClientError;
    use mqstore_core::commands::CommandRequest;
    let mut seen = Commands::default();
    let mut n = 0u64;
    while load.running() {
        n += 1;
        let payload = format!("{{\"n\":{n}}}");
        let mut request = CommandRequest::new(format!("dev/{}/cmd", n % 4), payload.clone());
        request.timeout_ms = 2_000;
        match caller.command(request).await {
            Ok(reply) => {
                let answer = reply.payload.to_vec();
                seen.answered
                    .push((reply.id, payload, answer, Instant::now()))
            }
            Err(ClientError::CommandTimedOut { id }) => {
                seen.unanswered
                    .push((Some(id), "timed out".into(), Instant::now()))
            }
            Err(e) => {
                seen.unanswered.push((None, e.to_string(), Instant::now()));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    seen
}

impl Commands {
    /// Every answer was the caller's own command's (no answer given to another); once all is
    /// healed each command's status is final and agrees with what its caller was told: an
    /// answered one SUCCEEDED, a timed-out one TIMED_OUT (or SUCCEEDED, late) — of the commands
    /// of the last [`STATUS_KEPT`] (a record is kept three timeouts, 6 s here); and three
    /// closing commands sent once healed are answered and SUCCEEDED.
    async fn check(&self, checker: &mqstore_net::client::Client, name: &str, seed: u64) {
        use mqstore_core::commands::{CommandRequest, Status};
        // How many the load gets answered is the faults' timing, not a property: the same
        // seed (1796564890618084827, one node on a data directory, its early kill, broker
        // restarts and clock jumps) answered 10 or 35 in 20 s, run to run, with the code of
        // 2026-12-06 and the day before. So the load must have had some answered (the checks
        // below look at them), and the closing commands, sent once all is healed, show the
        // service working.
        assert!(
            !self.answered.is_empty(),
            "{name} (seed {seed}): no command answered; unanswered: {:?}",
            self.unanswered.iter().take(5).collect::<Vec<_>>()
        );
        // Closing commands, once all is healed (the last ones of the load may be older than
        // STATUS_KEPT by now, or forgotten): each answered with its own answer, its status
        // SUCCEEDED at once (kept three of the default timeouts: longer than any clock jump).
        // Healed, a node may still take a moment to follow a new primary (it asks the
        // sentinels every second): a closing command answered 503 meanwhile is sent again.
        for n in 0..3 {
            let payload = format!("{{\"closing\":{n}}}");
            let deadline = Instant::now() + calls::WAIT;
            let reply = loop {
                let request = CommandRequest::new(format!("dev/{n}/cmd"), payload.clone());
                match checker.command(request).await {
                    Ok(reply) => break reply,
                    Err(ClientError::Status { status: 503, .. }) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(200)).await
                    }
                    Err(e) => panic!("{name} (seed {seed}): closing command {n} once healed: {e}"),
                }
            };
            assert_eq!(
                &reply.payload[..],
                payload.as_bytes(),
                "{name} (seed {seed})"
            );
            let record = checker.command_status(&reply.id).await.unwrap_or_else(|e| {
                panic!("{name} (seed {seed}): closing command {n}'s status: {e}")
            });
            assert_eq!(record.status, Status::Succeeded, "{name} (seed {seed})");
        }
        // A record the service no longer has (forgotten early: a node's clock jumped ahead)
        // says nothing; one it has must agree with the caller.
        let (mut agreed, mut forgotten) = (0, 0);
        let mut status = async |id: &str| match checker.command_status(id).await {
            Ok(record) => Some(record.status),
            Err(mqstore_core::client::ClientError::Status { status: 404, .. }) => {
                forgotten += 1;
                None
            }
            Err(e) => panic!("{name} (seed {seed}): command {id}'s status: {e}"),
        };
        for (id, sent, answer, at) in &self.answered {
            assert_eq!(
                sent.as_bytes(),
                &answer[..],
                "{name} (seed {seed}): command {id} got another command's answer"
            );
            if at.elapsed() < STATUS_KEPT
                && let Some(found) = status(id).await
            {
                assert_eq!(found, Status::Succeeded, "{name} (seed {seed}): {id}");
                agreed += 1;
            }
        }
        for (id, _, at) in &self.unanswered {
            if let Some(id) = id.as_ref().filter(|_| at.elapsed() < STATUS_KEPT)
                && let Some(found) = status(id).await
            {
                assert!(
                    matches!(found, Status::TimedOut | Status::Succeeded),
                    "{name} (seed {seed}): command {id} timed out for its caller, and is {found:?}"
                );
                agreed += 1;
            }
        }
        println!(
            "{name}: {} commands answered, each with its own answer; {} not ({} timed out); of the last ones' statuses {agreed} agreed, {forgotten} were forgotten; 3 closing commands answered and SUCCEEDED",
            self.answered.len(),
            self.unanswered.len(),
            self.unanswered
                .iter()
                .filter(|(id, ..)| id.is_some())
                .count()
        );
    }
}

/// Jobs canceled one at a time during the load by an operator (an answer lost to a fault is
/// asked again: "canceled already" then says the first one landed), and AWS's jobs events as a
/// listener heard them.
struct Cancellations {
    job_ids: Vec<String>,
    things: Vec<String>,
    /// What each cancellation was answered, in the end.
    canceled: tokio::task::JoinHandle<Vec<String>>,
    /// Each event's topic and payload, as they came.
    events: Arc<Mutex<Vec<(String, Value)>>>,
    listener: tokio::task::JoinHandle<()>,
}

impl Cancellations {
    /// Creates the jobs (queued on things of their own before this returns) and starts the
    /// events listener and the operator that cancels them, spread over the `seconds` of faults.
    async fn start(
        operator: mqstore_net::client::Client,
        port: u16,
        load: &Arc<history::Load>,
        seconds: u64,
    ) -> Self {
        let job_ids: Vec<String> = (0..CANCELED_JOBS).map(|j| format!("cancel-{j}")).collect();
        let things: Vec<String> = (0..THINGS).map(|t| format!("spare-{t}")).collect();
        for job_id in &job_ids {
            let spec =
                mqstore_core::jobs::JobSpec::new(job_id, things.clone(), serde_json::json!({}));
            operator.create_job(spec).await.expect("the job is created");
        }
        for thing in &things {
            let jobs = operator.jobs(thing).await.unwrap();
            let deadline = Instant::now() + calls::WAIT;
            while jobs.pending().await.unwrap().queued_jobs.len() < CANCELED_JOBS {
                assert!(
                    Instant::now() < deadline,
                    "{thing}'s executions never queued"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let events: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
        let heard = events.clone();
        let listener = calls::device(
            port,
            "events-listener",
            "$aws/events/#",
            move |topic, payload, _| {
                let event = serde_json::from_slice(payload).unwrap_or(Value::Null);
                heard.lock().unwrap().push((topic.to_owned(), event));
                Vec::new()
            },
        )
        .await;
        let (ids, load) = (job_ids.clone(), load.clone());
        let canceled = tokio::spawn(async move {
            let mut answers = Vec::new();
            for (i, job_id) in ids.iter().enumerate() {
                let at = Duration::from_secs(seconds) * (i as u32 + 1) / (CANCELED_JOBS as u32 + 1);
                tokio::time::sleep(at.saturating_sub(load.elapsed())).await;
                let answer = loop {
                    match operator.cancel_job(job_id, false).await {
                        Ok(()) => break "canceled".to_owned(),
                        Err(ClientError::Jobs { code, message, .. })
                            if code == "InvalidStateTransition"
                                && message.contains("canceled already") =>
                        {
                            break "canceled already (an earlier answer was lost)".to_owned();
                        }
                        // Unknown (no answer, 503, or the store failed midway): again.
                        Err(e) => {
                            println!(
                                "cancel {job_id} at {:.1} s: {e}; again",
                                load.elapsed().as_secs_f64()
                            );
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                };
                answers.push(format!("{job_id}: {answer}"));
            }
            answers
        });
        Self {
            job_ids,
            things,
            canceled,
            events,
            listener,
        }
    }

    /// Once all is healed: every job CANCELED with each execution CANCELED (a cancellation
    /// cut short is finished by a tick within its 30-s grace, so up to 45 s), and no event
    /// heard twice.
    async fn check(
        self,
        checker: &mqstore_net::client::Client,
        name: &str,
        seed: u64,
        faults: &[String],
    ) {
        use mqstore_core::jobs::{JobStatus, Status};
        let answers = self.canceled.await.unwrap();
        println!("{name}: {answers:?}");
        let deadline = Instant::now() + Duration::from_secs(45);
        for job_id in &self.job_ids {
            loop {
                let job = checker.describe_job(job_id).await;
                let mut executions = Vec::new();
                for thing in &self.things {
                    let execution = checker.describe_job_execution(job_id, thing).await;
                    executions.push(execution.map(|e| e.status));
                }
                let done = matches!(&job, Ok(job) if job.status == JobStatus::Canceled)
                    && executions.iter().all(|e| matches!(e, Ok(Status::Canceled)));
                if done {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{name} (seed {seed}): {job_id} not canceled everywhere 45 s after the faults: {:?}, executions {executions:?}\nfaults: {faults:#?}",
                    job.map(|j| j.status)
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        self.listener.abort();
        let events = self.events.lock().unwrap();
        // Each event, whole, by what it announces (so that a failure shows every copy).
        let mut seen = std::collections::BTreeMap::<String, Vec<String>>::new();
        for (topic, event) in events.iter() {
            let thing = event["thingArn"].as_str().unwrap_or_default();
            seen.entry(format!("{topic} {thing}"))
                .or_default()
                .push(event.to_string());
        }
        let twice: Vec<_> = seen.iter().filter(|(_, heard)| heard.len() > 1).collect();
        assert!(
            twice.is_empty(),
            "{name} (seed {seed}): jobs events heard more than once: {twice:#?}\nfaults: {faults:#?}"
        );
        let ours = seen.keys().filter(|e| e.contains("/cancel-")).count();
        assert!(
            ours > 0,
            "{name} (seed {seed}): no event of the canceled jobs heard at all"
        );
        println!(
            "{name}: {} jobs canceled, each execution CANCELED; {ours} of their events heard, none twice ({} events in all)",
            self.job_ids.len(),
            events.len()
        );
    }
}

/// Every applied SET among `records` that began after another was answered has the higher
/// version.
fn versions_only_grow(records: &[Value], name: &str, seed: u64) {
    let mut applied: Vec<(u64, u64, Hlc)> = records
        .iter()
        .filter_map(|r| {
            let version = Hlc::parse(r["version"].as_str()?).unwrap();
            Some((r["call"].as_u64()?, r["ret"].as_u64()?, version))
        })
        .collect();
    assert!(
        applied.len() > 2,
        "{name}: only {} applied SETs",
        applied.len()
    );
    let mut answered: Vec<(u64, Hlc)> = applied
        .iter()
        .map(|(_, ret, v)| (*ret, v.clone()))
        .collect();
    answered.sort_by_key(|(ret, _)| *ret);
    applied.sort_by_key(|(call, ..)| *call);
    // Sweep by call time: the highest version among the SETs answered before this one began.
    let (mut i, mut highest): (usize, Option<&Hlc>) = (0, None);
    for (call, _, version) in &applied {
        while i < answered.len() && answered[i].0 < *call {
            highest = highest.max(Some(&answered[i].1));
            i += 1;
        }
        if let Some(highest) = highest {
            assert!(
                version > highest,
                "{name} (seed {seed}): a SET begun at {call} ns got {version}, not above {highest} answered before"
            );
        }
    }
}

/// The observer saw each key's versions in increasing order (each once), and every
/// acknowledged SET either among them or skipped over by a change that says `gap`.
fn observers_see_every_change_or_a_gap(
    records: &[Value],
    changes: &BTreeMap<String, Vec<KeyChange>>,
    name: &str,
    seed: u64,
) {
    let mut gaps = 0;
    for (key, seen) in changes {
        let versions: Vec<&Hlc> = seen.iter().filter_map(|c| c.version.as_ref()).collect();
        assert!(
            versions.windows(2).all(|w| w[0] < w[1]),
            "{name} (seed {seed}): {key}'s changes out of order or twice: {:#?}",
            seen.iter()
                .map(|c| format!(
                    "{:?} {:?} synthetic {} gap {}",
                    c.version, c.value, c.synthetic, c.gap
                ))
                .collect::<Vec<_>>()
        );
        gaps += seen.iter().filter(|c| c.gap).count();
    }
    let (mut missed_silently, mut made_and_deleted) = (Vec::new(), 0);
    for r in records {
        let (Some(key), Some(version)) = (r["key"].as_str(), r["version"].as_str()) else {
            continue;
        };
        let version = Hlc::parse(version).unwrap();
        let seen = changes.get(key).map(Vec::as_slice).unwrap_or_default();
        if seen.iter().any(|c| c.version.as_ref() == Some(&version)) {
            continue;
        }
        // Not seen: a change after the last one before it, up to the first one after it, must
        // say that some were missed — a versioned one, or a read-back without a version (the
        // key found absent after a reconnect, or deleted by a request that landed late).
        let from = seen
            .iter()
            .rposition(|c| c.version.as_ref().is_some_and(|v| *v < version))
            .map_or(0, |before| before + 1);
        let next = seen[from..]
            .iter()
            .position(|c| c.version.as_ref().is_some_and(|v| *v > version))
            .map(|i| from + i);
        let told = &seen[from..next.map_or(seen.len(), |next| next + 1)];
        if told.iter().any(|c| c.gap) {
            continue;
        }
        let Some(next) = next else {
            missed_silently.push(format!("{key} {version}: no change after it"));
            continue;
        };
        // The blind spot docs/protocol/state-store.md §4 names: the key absent when last seen,
        // made (this write) and deleted again unheard, then made again by the next change —
        // which replaced nothing, as the store keeps no tombstone to say otherwise.
        let absent_before = next == 0 || seen[next - 1].value.is_none();
        if absent_before && seen[next].value.is_some() {
            made_and_deleted += 1;
            continue;
        }
        missed_silently.push(format!(
            "{key} {version}: next seen {:?}, before it {:?}",
            seen[next],
            next.checked_sub(1).map(|i| &seen[i])
        ));
    }
    assert!(
        missed_silently.is_empty(),
        "{name} (seed {seed}): acknowledged writes the observer missed without a gap: {missed_silently:#?}"
    );
    println!(
        "{name}: the observer reported {gaps} gaps; {made_and_deleted} writes missed were made and deleted between two absences (not detectable)"
    );
}

fn tempdir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("nemesis-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_on_memory() {
    nemesis(beside("memory", 1, Store::Memory, None, false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_on_a_data_dir() {
    nemesis(beside("data-dir", 1, Store::DataDir, None, true)).await;
}

/// Redis with its append-only file fsynced at every write, as docs/guide/redis.md asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_redis() {
    let redis = Redis::start_durable();
    let port = redis.port;
    nemesis(beside("redis", 3, Store::Redis(port), Some(redis), true)).await;
}

/// Redis Sentinel: a primary, two replicas and three sentinels, every server with its
/// append-only file fsynced at every write, and the nodes writing with
/// `--redis-wait-replicas 2` (every replica); the primary killed and failed over among the
/// other faults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_redis_sentinel() {
    nemesis(on_replicated("sentinel", Replicated::sentinel())).await;
}

/// A Redis Cluster of three primaries with a replica each, the nodes writing with
/// `--redis-wait-replicas 1` (every replica); a primary killed and failed over among the other faults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_a_redis_cluster() {
    nemesis(on_replicated("cluster", Replicated::cluster())).await;
}

/// Three nodes on `replicated`.
fn on_replicated(name: &'static str, replicated: Replicated) -> Deployment {
    let store = Store::Replicated(replicated.url(), replicated.replicas_per_primary());
    let mut deployment = beside(name, 3, store, None, true);
    deployment.replicated = Some(replicated);
    deployment
}

/// The plugin inside mosquitto, on `plugin_opt_data_dir`: the broker is the node, and its
/// wall clock jumps as a node's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_on_a_data_dir() {
    let dir = tempdir("plugin");
    let clock = dir.join("clock-broker");
    std::fs::write(&clock, "+0").unwrap();
    let broker = Broker::start_config_env(
        &format!(
            "plugin {}\nplugin_opt_node_id inside\nplugin_opt_data_dir {}\n",
            broker::plugin_path().display(),
            dir.join("data").display()
        ),
        jumping_clock(&clock),
    );
    nemesis(Deployment {
        name: "plugin",
        broker,
        client_links: Vec::new(),
        replicated: None,
        broker_clock: Some(clock),
        redis: None,
        nodes: Vec::new(),
        durable: true,
        firewall: Firewall::default(),
        _unprivileged: None,
    })
    .await;
}

/// The nemesis's cut of one node's link to one server is a partition, not a no-op: a node on
/// Sentinel cut off from the primary by its firewall rule answers 503 (never the value it
/// cannot read), on its open connection and on the new ones it tries; once the rule is gone
/// it answers with the value again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_the_primary_by_the_firewall_answers_503_then_recovers() {
    let replicated = Replicated::sentinel();
    let sentinel = replicated.sentinels.as_ref().unwrap().nodes[0].port;
    let store = Store::Replicated(replicated.url(), replicated.replicas_per_primary());
    let mut deployment = beside("cut", 1, store, None, true);
    let port = deployment.broker.port;
    calls::ready_client_timing_out(port, "ready", Duration::from_secs(3)).await;
    // Patient: the node's own bound on a Redis call (2 s, and the replicas' wait) comes first.
    let client = calls::connect(port, "c", Duration::from_secs(10)).await;
    client
        .set("k", "before", SetOptions::default())
        .await
        .unwrap();

    let uid = deployment.nodes[0].uid.unwrap();
    let primary = redis::named_primary(sentinel).unwrap();
    deployment.firewall.cut(uid, primary);
    for _ in 0..2 {
        match client.get("k").await {
            Err(ClientError::Status { status: 503, .. }) => {}
            other => panic!("a node cut off from the primary answered {other:?}, not 503"),
        }
    }
    deployment.firewall.restore(uid, primary);
    let deadline = Instant::now() + calls::WAIT;
    loop {
        match client.get("k").await {
            Ok(Some(value)) => break assert_eq!(value.value, "before"),
            other => assert!(
                Instant::now() < deadline,
                "no answer after the link was restored: {other:?}"
            ),
        }
    }
    drop(deployment);
    sweep_faketime_leftovers();
}

/// The job execution model is not a rubber stamp either: an update accepted twice from one
/// version (two devices both started the execution), or a describe that goes back a version,
/// is refused; the honest history passes.
#[test]
fn the_checker_refuses_a_job_execution_updated_twice_from_one_version() {
    let op = |client, op: &str, value: &str, call: u128, ret: u128, out: &str| {
        history::line(client, "job:t:j", op, value, (call, ret), out, None)
    };
    let honest = vec![
        op(0, "describe", "", 0, 5, "QUEUED:1"),
        op(0, "update", "IN_PROGRESS@1", 10, 20, "ok:IN_PROGRESS:2"),
        op(1, "update", "IN_PROGRESS@1", 15, 25, "VersionMismatch"),
        op(1, "update", "SUCCEEDED", 30, 40, "ok:SUCCEEDED:3"),
        op(0, "update", "FAILED@3", 50, 60, "InvalidStateTransition"),
        op(0, "describe", "", 70, 80, "SUCCEEDED:3"),
    ];
    let (linearizable, report) = history::check(&honest, "jobs-honest.jsonl");
    assert!(linearizable, "{report}");
    for (i, planted, what) in [
        (2, "ok:IN_PROGRESS:2", "a second start from version 1"),
        (4, "ok:FAILED:4", "a finished execution changed again"),
        (5, "IN_PROGRESS:2", "a describe gone back a version"),
    ] {
        let mut history = honest.clone();
        let record: Value = serde_json::from_str(&history[i]).unwrap();
        let (client, call, ret) = (
            record["client"].as_u64().unwrap() as usize,
            u128::from(record["call"].as_u64().unwrap()),
            u128::from(record["ret"].as_u64().unwrap()),
        );
        let op_name = record["op"].as_str().unwrap();
        history[i] = op(
            client,
            op_name,
            record["value"].as_str().unwrap(),
            call,
            ret,
            planted,
        );
        let (linearizable, report) = history::check(&history, "jobs-planted.jsonl");
        assert!(!linearizable, "{what} passed: {report}");
    }
}

/// The checker is not a rubber stamp: a history with a stale read planted in it is refused,
/// with porcupine's visualisation written beside it; the same history without the plant passes.
#[test]
fn the_checker_refuses_a_planted_stale_read() {
    let op = |client, op: &str, value: &str, call: u128, ret: u128, out: &str| {
        history::line(client, "k0", op, value, (call, ret), out, None)
    };
    let honest = vec![
        op(0, "set", "a", 0, 10, "ok"),
        op(1, "set", "b", 20, 30, "ok"),
        op(2, "get", "", 40, 50, "value:b"),
    ];
    let (linearizable, report) = history::check(&honest, "honest.jsonl");
    assert!(linearizable, "{report}");
    // The read after both writes returned the first one: stale.
    let mut planted = honest.clone();
    planted[2] = op(2, "get", "", 40, 50, "value:a");
    let (linearizable, report) = history::check(&planted, "planted.jsonl");
    assert!(!linearizable, "the planted stale read passed: {report}");
    assert!(report.contains("Illegal"), "{report}");
    let page = Path::new(env!("CARGO_TARGET_TMPDIR")).join("planted.jsonl.html");
    let html = std::fs::read_to_string(&page).expect("porcupine's visualisation");
    assert!(
        html.contains("value:a"),
        "the visualisation shows the stale read"
    );
}

/// A key whose check would outgrow the machine stops the checker once it holds more than
/// `MQSTORE_PORCUPINE_GB`, naming the key; the history is then not taken as linearizable.
#[test]
fn the_checker_stops_past_its_memory_limit_naming_the_key() {
    // Forty writes without an answer, all at once, then reads of them in an order that only
    // the last read (of a value never written) rules out: porcupine tries every subset.
    let mut history: Vec<String> = (0..40u128)
        .map(|i| {
            let value = format!("v{i}");
            history::line(i as usize, "k", "set", &value, (i, i + 1), "unknown", None)
        })
        .collect();
    let mut t = 1_000;
    for j in 0..120 {
        let out = format!("value:v{}", (j * 7) % 40);
        history.push(history::line(41, "k", "get", "", (t, t + 5), &out, None));
        t += 10;
    }
    history.push(history::line(
        41,
        "k",
        "get",
        "",
        (t, t + 5),
        "value:never",
        None,
    ));
    let limit = [("MQSTORE_PORCUPINE_GB", "0.05")];
    let (linearizable, report) = history::check_with(&history, "outgrown.jsonl", &limit);
    assert!(!linearizable, "{report}");
    assert!(
        report.contains("the checker stopped past 0.05 GB") && report.contains("on key k ("),
        "{report}"
    );
}

/// A write answered "refused" (Redis refused it before applying it) is left out, where one
/// without an answer may have happened: a read of the refused value is refused, of the
/// unknown one taken.
#[test]
fn the_checker_takes_a_refused_write_as_never_made() {
    let op = |op: &str, value: &str, call: u128, ret: u128, out: &str| {
        history::line(0, "k0", op, value, (call, ret), out, None)
    };
    let history = |second: &str| {
        vec![
            op("set", "a", 0, 10, "ok"),
            op("set", "b", 20, 30, second),
            op("get", "", 40, 50, "value:b"),
        ]
    };
    let (linearizable, report) = history::check(&history("unknown"), "unknown.jsonl");
    assert!(linearizable, "{report}");
    let (linearizable, report) = history::check(&history("refused"), "refused.jsonl");
    assert!(!linearizable, "a read of a refused write passed: {report}");
    assert!(report.contains("1 more refused"), "{report}");
}

/// The notify-next check takes executions announced once, or missed, and refuses one
/// announced twice to one client.
#[test]
fn the_check_refuses_a_job_execution_announced_twice() {
    let run = |announced: &[&str]| history::JobsRun {
        lines: Vec::new(),
        announced: vec![(
            "thing-0".into(),
            announced
                .iter()
                .map(|j| (j.to_string(), format!("{j} heard")))
                .collect(),
        )],
    };
    let honest = [(7, run(&["job-1", "job-2", "job-4"])), (8, run(&["job-1"]))];
    assert_eq!(
        history::each_execution_announced_at_most_once(&honest),
        Ok(4)
    );
    let planted = [(7, run(&["job-1", "job-2", "job-2"]))];
    let refused = history::each_execution_announced_at_most_once(&planted).unwrap_err();
    assert!(refused.contains("job-2 announced twice"), "{refused}");
}
