//! Real Redis servers for the tests (Debian's redis-server), on free loopback ports, stopped
//! when dropped: one primary (with replicas and sentinels, `redis-server --sentinel`), or a
//! Redis Cluster of three primaries (with or without a replica each) created with
//! `redis-cli --cluster create`.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running redis-server.
pub struct Redis {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
}

/// The append-only file on, fsynced at every write.
fn durable_args() -> Vec<String> {
    ["--appendonly", "yes", "--appendfsync", "always"]
        .map(String::from)
        .to_vec()
}

/// redis-server's arguments for TLS on `tls_port` with `cert` and `key`, asking every TLS client
/// for a certificate `ca` signed (its default, `tls-auth-clients yes`).
fn tls_args(
    tls_port: u16,
    ca: &std::path::Path,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Vec<String> {
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    vec![
        "--tls-port".into(),
        tls_port.to_string(),
        "--tls-ca-cert-file".into(),
        path(ca),
        "--tls-cert-file".into(),
        path(cert),
        "--tls-key-file".into(),
        path(key),
    ]
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// How far above a cluster node's port its cluster bus listens (Redis's fixed offset).
const CLUSTER_BUS_OFFSET: u16 = 10_000;

/// A free port for a cluster node whose bus port is free too (and below 65,536: redis-server
/// refuses a port above 55,535 with cluster mode on).
fn cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port <= u16::MAX - CLUSTER_BUS_OFFSET
            && TcpListener::bind(("127.0.0.1", port + CLUSTER_BUS_OFFSET)).is_ok()
        {
            return port;
        }
    }
}

fn binary(name: &str) -> PathBuf {
    let path = PathBuf::from("/usr/bin").join(name);
    assert!(
        path.exists(),
        "{name} is not installed: `bash scripts/test` installs it (apt-get install redis-server)"
    );
    path
}

impl Redis {
    /// A primary on a free port, without persistence.
    pub fn start() -> Self {
        Self::launch(free_port(), Vec::new())
    }

    /// A primary on `port` (one a node was told of before Redis started), without persistence.
    pub fn start_on(port: u16) -> Self {
        Self::launch(port, Vec::new())
    }

    /// A primary whose second port `tls_port` takes TLS only, with the broker certificate of
    /// `files` (signed by its CA), and asks every TLS client for a certificate that CA signed
    /// (Redis's default, `tls-auth-clients yes`). Its plain `port` stays open for redis-cli.
    pub fn start_tls(
        tls_port: u16,
        ca: &std::path::Path,
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> Self {
        let redis = Self::launch(free_port(), tls_args(tls_port, ca, cert, key));
        wait_for_port(tls_port);
        redis
    }

    /// A replica of the primary whose TLS port is `primary_tls_port`, replicating over TLS
    /// with the certificate `cert` (which `ca` signed) and taking TLS on its own `tls_port`
    /// as [`Redis::start_tls`] does; it tells its primary (and so the sentinels) that port.
    pub fn tls_replica_of(
        primary_tls_port: u16,
        tls_port: u16,
        ca: &std::path::Path,
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> Self {
        let mut args = tls_args(tls_port, ca, cert, key);
        args.extend([
            "--tls-replication".into(),
            "yes".into(),
            "--replicaof".into(),
        ]);
        args.extend(["127.0.0.1".into(), primary_tls_port.to_string()]);
        let replica = Self::launch(free_port(), args);
        replica.wait_synced_replica();
        replica
    }

    /// A primary that asks for this password.
    pub fn start_with_password(password: &str) -> Self {
        Self::launch(free_port(), vec!["--requirepass".into(), password.into()])
    }

    /// A primary with the append-only file on and fsync at every write: what it acknowledged
    /// survives a restart.
    pub fn start_durable() -> Self {
        Self::launch(free_port(), durable_args())
    }

    /// A replica of `primary` with the append-only file on and fsync at every write (so that
    /// it comes back with its data when restarted after it was promoted).
    pub fn durable_replica_of(primary: &Redis) -> Self {
        let port = free_port();
        Self::durable_replica_announced(primary, port, port)
    }

    /// [`Redis::durable_replica_of`] on `port`, telling its primary (and so the sentinels) to
    /// reach it at `announced` (a [`Proxy`] to `port`, say): cutting that proxy cuts the
    /// sentinels off from it, not its primary.
    pub fn durable_replica_announced(primary: &Redis, port: u16, announced: u16) -> Self {
        let mut args = durable_args();
        args.extend([
            "--replicaof".into(),
            "127.0.0.1".into(),
            primary.port.to_string(),
            "--replica-announce-port".into(),
            announced.to_string(),
        ]);
        let replica = Self::launch(port, args);
        replica.wait_synced_replica();
        replica
    }

    /// A replica of `primary`, without persistence.
    pub fn replica_of(primary: &Redis) -> Self {
        Self::replica_of_port(primary.port)
    }

    /// A replica of the primary reached at `port` (a [`Proxy`] in front of it, say).
    pub fn replica_of_port(port: u16) -> Self {
        let replica = Self::launch(
            free_port(),
            vec!["--replicaof".into(), "127.0.0.1".into(), port.to_string()],
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while !replica
            .cli(&["info", "replication"])
            .contains("master_link_status:up")
        {
            assert!(Instant::now() < deadline, "the replica did not sync");
            std::thread::sleep(Duration::from_millis(20));
        }
        replica
    }

    /// Waits (up to 30 s) until it is a replica in sync with its primary.
    pub fn wait_synced_replica(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self
            .cli(&["info", "replication"])
            .contains("master_link_status:up")
        {
            assert!(
                Instant::now() < deadline,
                "not a synced replica: {}",
                self.cli(&["info", "replication"])
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Makes it refuse writes, while it is a primary, unless `replicas` replicas are in sync
    /// (acknowledged within the last two seconds): `min-replicas-to-write`, kept across
    /// restarts.
    pub fn require_replicas(&mut self, replicas: u32) {
        let settings = [
            ("min-replicas-to-write", replicas.to_string()),
            ("min-replicas-max-lag", "2".to_owned()),
        ];
        for (name, value) in settings {
            self.cli(&["config", "set", name, &value]);
            self.extra.extend([format!("--{name}"), value]);
        }
    }

    /// Holds its writes (`CLIENT PAUSE … WRITE`, for `pause`) and waits until every replica
    /// has all it wrote: a primary that then dies loses nothing to the choice of replica
    /// promoted, which Redis makes from offsets up to a second old.
    pub fn hold_writes_until_replicas_caught_up(&self, pause: Duration) {
        self.cli(&["client", "pause", &pause.as_millis().to_string(), "write"]);
        let deadline = Instant::now() + pause;
        loop {
            let info = self.cli(&["info", "replication"]);
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.trim().strip_prefix(name))
                    .map(str::to_owned)
            };
            let written = field("master_repl_offset:").expect("a primary's offset");
            let replicas: usize = field("connected_slaves:")
                .and_then(|n| n.trim().parse().ok())
                .expect("a primary's replica count");
            let offsets: Vec<String> = info
                .lines()
                .filter(|l| l.starts_with("slave"))
                .filter_map(|l| l.split(',').find_map(|f| f.strip_prefix("offset=")))
                .map(str::to_owned)
                .collect();
            if offsets.len() == replicas && offsets.iter().all(|o| *o == written.trim()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the replicas did not catch up: {info}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether it answers as a primary now.
    pub fn is_primary(&self) -> bool {
        self.cli(&["role"]).starts_with("master")
    }

    fn launch(port: u16, extra: Vec<String>) -> Self {
        let mut redis = Self::unstarted(port, extra);
        redis.spawn();
        redis
    }

    /// A server on `port` with its own directory, its process not started yet.
    fn unstarted(port: u16, extra: Vec<String>) -> Self {
        let dir =
            std::env::temp_dir().join(format!("mqstore-test-redis-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self {
            port,
            child: None,
            dir,
            extra,
        }
    }

    fn spawn(&mut self) {
        self.start_process();
        wait_for_port(self.port);
    }

    fn start_process(&mut self) {
        let child = Command::new(binary("redis-server"))
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", ""])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
    }

    /// A cluster node on `port` whose cluster bus listens on `bus`; `None` when it exits
    /// before both listen. Why: redis-server exits at start when it cannot bind its bus port
    /// (10,000 above its client port, which [`free_port`] did not check, or which another
    /// test's server or connection took meanwhile) — after it briefly listened on `port`.
    fn launch_cluster_node(port: u16, bus: u16, extra: Vec<String>) -> Option<Self> {
        let mut redis = Self::unstarted(port, extra);
        redis.start_process();
        let deadline = Instant::now() + Duration::from_secs(10);
        let listens = |port: u16| TcpStream::connect(("127.0.0.1", port)).is_ok();
        loop {
            let exited = redis.child.as_mut().map(|c| c.try_wait());
            if matches!(exited, Some(Ok(Some(_)))) {
                return None; // dropped: its directory removed
            }
            if listens(port) && listens(bus) {
                return Some(redis);
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {port} and its cluster bus {bus}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills it (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, with the same data directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Its process id while it runs (to pause it with SIGSTOP, say).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends it `signal` (`-STOP` holds it, `-CONT` lets it go on).
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().expect("redis-server runs").to_string();
        let status = Command::new("kill").args([signal, &pid]).status();
        assert!(status.unwrap().success(), "kill {signal} {pid}");
    }

    /// Starts it again after [`Redis::kill`] (a restart with a downtime of the caller's
    /// choosing).
    pub fn start_again(&mut self) {
        if self.child.is_none() {
            self.spawn();
        }
    }

    /// Runs redis-cli against it and returns what it printed.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs redis-cli against the server on `port`.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new(binary("redis-cli"))
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "redis-server did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The name the sentinels monitor the primary under.
pub const PRIMARY_NAME: &str = "fleet";

/// Sentinels watching a primary (quorum: a majority of them), which they fail over a second
/// after it stops answering.
pub struct Sentinels {
    pub nodes: Vec<Redis>,
    /// Each sentinel's TLS port (sentinels started with [`Sentinels::start_tls`]), in
    /// `nodes`' order.
    pub tls_ports: Vec<u16>,
}

impl Sentinels {
    pub fn start(primary: &Redis, count: usize) -> Self {
        Self::launch(primary.port, count, None)
    }

    /// Sentinels that watch the primary on its TLS port `primary_tls_port` and speak TLS to
    /// it, its replicas and each other (`tls-replication yes`, with the certificate `cert`
    /// that `ca` signed), and take TLS clients on their `tls_ports`, asking each for a
    /// certificate `ca` signed. Their plain ports stay open for redis-cli.
    pub fn start_tls(
        primary_tls_port: u16,
        count: usize,
        ca: &std::path::Path,
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> Self {
        Self::launch(primary_tls_port, count, Some((ca, cert, key)))
    }

    fn launch(
        primary_port: u16,
        count: usize,
        tls: Option<(&std::path::Path, &std::path::Path, &std::path::Path)>,
    ) -> Self {
        let mut tls_ports = Vec::new();
        let nodes: Vec<Redis> = (0..count)
            .map(|_| {
                let port = free_port();
                let mut sentinel = Redis::unstarted(port, Vec::new());
                let config = sentinel.dir.join("sentinel.conf");
                let mut text = format!(
                    "port {port}\nbind 127.0.0.1\n\
                     sentinel monitor {PRIMARY_NAME} 127.0.0.1 {primary_port} {}\n\
                     sentinel down-after-milliseconds {PRIMARY_NAME} 1000\n\
                     sentinel failover-timeout {PRIMARY_NAME} 4000\n\
                     sentinel parallel-syncs {PRIMARY_NAME} 2\n",
                    count / 2 + 1
                );
                if let Some((ca, cert, key)) = tls {
                    let tls_port = free_port();
                    tls_ports.push(tls_port);
                    // The same settings as a server's, written as its configuration file.
                    for pair in tls_args(tls_port, ca, cert, key).chunks(2) {
                        text += &format!("{} {}\n", pair[0].trim_start_matches("--"), pair[1]);
                    }
                    text += "tls-replication yes\n";
                }
                std::fs::write(&config, text).unwrap();
                let child = Command::new(binary("redis-server"))
                    .arg(&config)
                    .arg("--sentinel")
                    .current_dir(&sentinel.dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-server --sentinel starts");
                sentinel.child = Some(child);
                wait_for_port(port);
                sentinel
            })
            .collect();
        let sentinels = Self { nodes, tls_ports };
        // Every sentinel knows the replicas and the other sentinels before a test kills anything.
        let deadline = Instant::now() + Duration::from_secs(20);
        for node in &sentinels.nodes {
            loop {
                let master = node.cli(&["sentinel", "master", PRIMARY_NAME]);
                let field = |name: &str| {
                    let lines: Vec<&str> = master.lines().collect();
                    lines
                        .iter()
                        .position(|l| *l == name)
                        .and_then(|i| lines.get(i + 1))
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0)
                };
                if field("num-slaves") >= 1 && field("num-other-sentinels") + 1 >= count {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the sentinels did not discover each other: {master}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        sentinels
    }

    /// Waits (up to 20 s) until every sentinel knows `replicas` replicas of the primary.
    pub fn wait_for_replicas(&self, replicas: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        for node in &self.nodes {
            loop {
                let known = node.cli(&["sentinel", "replicas", PRIMARY_NAME]);
                if known.lines().filter(|line| *line == "name").count() >= replicas {
                    break;
                }
                assert!(Instant::now() < deadline, "the sentinels know: {known}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// `redis-sentinel://` with every sentinel.
    pub fn url(&self) -> String {
        format!("redis-sentinel://{}/{PRIMARY_NAME}", hosts(&self.nodes))
    }

    /// The port of the primary the sentinels name now.
    pub fn primary_port(&self) -> u16 {
        named_primary(self.nodes[0].port).expect("the sentinels name a primary")
    }
}

/// The port of the primary the sentinel on `port` names now (`None`: no answer).
pub fn named_primary(port: u16) -> Option<u16> {
    cli(port, &["sentinel", "get-master-addr-by-name", PRIMARY_NAME])
        .lines()
        .nth(1)
        .and_then(|p| p.trim().parse().ok())
}

/// `127.0.0.1:port,…` for every one of `nodes`.
fn hosts(nodes: &[Redis]) -> String {
    nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect::<Vec<_>>()
        .join(",")
}

/// A Redis Cluster of three primaries (and a replica each, when asked), every slot assigned.
pub struct Cluster {
    pub nodes: Vec<Redis>,
    /// Each node's TLS port (a cluster started with [`Cluster::start_tls`]), in `nodes`' order.
    pub tls_ports: Vec<u16>,
}

impl Cluster {
    pub fn start() -> Self {
        Self::start_with_replicas(0)
    }

    /// Three primaries with `replicas` replicas each (the first three nodes are the
    /// primaries); a replica takes over a primary that stops answering for a second.
    pub fn start_with_replicas(replicas: usize) -> Self {
        Self::launch(replicas, None)
    }

    /// Three primaries that also listen for TLS (each on its `tls_ports` entry) with the
    /// certificate `cert` (and `key`) that `ca` signed, speak TLS to each other (the cluster
    /// bus), and ask every TLS client for a certificate `ca` signed. A TLS client is told the
    /// TLS ports (`CLUSTER SLOTS` answers with the ports of the client's kind).
    pub fn start_tls(ca: &std::path::Path, cert: &std::path::Path, key: &std::path::Path) -> Self {
        Self::launch(0, Some((ca, cert, key)))
    }

    fn launch(
        replicas: usize,
        tls: Option<(&std::path::Path, &std::path::Path, &std::path::Path)>,
    ) -> Self {
        let mut tls_ports = Vec::new();
        let nodes: Vec<Redis> = (0..3 * (1 + replicas))
            .map(|_| {
                for _ in 0..10 {
                    let port = cluster_port();
                    let mut args = vec![
                        "--cluster-enabled".into(),
                        "yes".into(),
                        "--cluster-config-file".into(),
                        format!("nodes-{port}.conf"),
                        "--cluster-node-timeout".into(),
                        if replicas > 0 { "1000" } else { "2000" }.into(),
                    ];
                    // Over TLS the cluster bus is 10,000 above the TLS port.
                    let bus = match tls {
                        Some((ca, cert, key)) => {
                            let tls_port = cluster_port();
                            args.extend(tls_args(tls_port, ca, cert, key));
                            args.extend(["--tls-cluster".into(), "yes".into()]);
                            tls_port + CLUSTER_BUS_OFFSET
                        }
                        None => port + CLUSTER_BUS_OFFSET,
                    };
                    if let Some(node) = Redis::launch_cluster_node(port, bus, args) {
                        if tls.is_some() {
                            tls_ports.push(bus - CLUSTER_BUS_OFFSET);
                        }
                        return node;
                    }
                }
                panic!("no cluster node started in 10 tries (each exited at start)");
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addresses.iter().map(String::as_str));
        let replicas = replicas.to_string();
        args.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
        let out = Command::new(binary("redis-cli"))
            .args(&args)
            .output()
            .expect("redis-cli --cluster create runs");
        assert!(
            out.status.success(),
            "creating the cluster failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        for node in &nodes {
            while !node.cli(&["cluster", "info"]).contains("cluster_state:ok") {
                assert!(Instant::now() < deadline, "the cluster did not become ok");
                std::thread::sleep(Duration::from_millis(50));
            }
            // A replica has what its primary had before a test counts on it.
            while !node.is_primary()
                && !node
                    .cli(&["info", "replication"])
                    .contains("master_link_status:up")
            {
                assert!(Instant::now() < deadline, "a replica did not sync");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Self { nodes, tls_ports }
    }

    /// `redis-cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        format!("redis-cluster://{}", hosts(&self.nodes))
    }
}

/// A TCP proxy in front of a Redis, a broker or any TCP server: [`Proxy::cut`] closes every
/// connection through it and refuses new ones (a network cut that loses what was in flight),
/// [`Proxy::vanish`] makes the server's host vanish (its connections closed, and a new one
/// hangs in its handshake, as with a killed container's address), [`Proxy::restore`] lets
/// connections through again.
pub struct Proxy {
    pub port: u16,
    link: std::sync::Arc<Link>,
}

#[derive(Default)]
struct Link {
    cut: std::sync::atomic::AtomicBool,
    vanished: std::sync::atomic::AtomicBool,
    open: std::sync::Mutex<Vec<TcpStream>>,
    /// Connections made to fill the listener's queue while vanished.
    fillers: std::sync::Mutex<Vec<TcpStream>>,
    listener: std::sync::OnceLock<TcpListener>,
}

impl Link {
    fn is(&self, flag: &std::sync::atomic::AtomicBool) -> bool {
        flag.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Proxy {
    pub fn to(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().unwrap().port();
        // Polled, so that a vanished proxy accepts nothing (its queue stays full).
        listener.set_nonblocking(true).unwrap();
        let link = std::sync::Arc::new(Link::default());
        let _ = link.listener.set(listener);
        let proxy = Self {
            port,
            link: link.clone(),
        };
        std::thread::spawn(move || {
            let listener = link.listener.get().unwrap();
            loop {
                if link.is(&link.vanished) {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                let client = match listener.accept() {
                    Ok((client, _)) => client,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                    Err(_) => continue,
                };
                if link.is(&link.cut) {
                    drop(client);
                    continue;
                }
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                // Nagle's algorithm would hold each small write for the peer's delayed ACK
                // (40 ms a round trip); a link only forwards.
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let mut open = link.open.lock().unwrap();
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
                        continue;
                    };
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
                open.extend([client, server]);
            }
        });
        proxy
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.link
            .cut
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.close_all();
    }

    fn close_all(&self) {
        for stream in self.link.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    /// The server's host vanishes, as a killed container does: its connections close (its
    /// process died with them), and a new one hangs in its handshake (no host answers at its
    /// address: the listener's queue, shortened to one, is kept full, so the kernel drops
    /// further SYNs).
    pub fn vanish(&self) {
        use std::os::fd::AsRawFd as _;
        self.link
            .vanished
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.close_all();
        let listener = self.link.listener.get().unwrap();
        // SAFETY: listen(2) on a socket this proxy owns, already listening: it only changes
        // the length of its queue.
        assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
        let address = listener.local_addr().unwrap();
        let mut fillers = self.link.fillers.lock().unwrap();
        while let Ok(filler) = TcpStream::connect_timeout(&address, Duration::from_millis(200)) {
            fillers.push(filler);
            assert!(fillers.len() < 64, "the listener's queue does not fill");
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        use std::os::fd::AsRawFd as _;
        let listener = self.link.listener.get().unwrap();
        // SAFETY: as in `vanish`; back to the usual queue length.
        unsafe { libc::listen(listener.as_raw_fd(), 128) };
        self.link.fillers.lock().unwrap().clear();
        self.link
            .vanished
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.link
            .cut
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}
