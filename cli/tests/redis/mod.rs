//! Real Redis servers for the tests (Debian's redis-server), on free loopback ports, stopped
//! when dropped: one primary, or a Redis Cluster of three primaries created with
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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
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

    /// A primary that asks for this password.
    pub fn start_with_password(password: &str) -> Self {
        Self::launch(free_port(), vec!["--requirepass".into(), password.into()])
    }

    /// A primary with the append-only file on and fsync at every write: what it acknowledged
    /// survives a restart.
    pub fn start_durable() -> Self {
        Self::launch(
            free_port(),
            vec![
                "--appendonly".into(),
                "yes".into(),
                "--appendfsync".into(),
                "always".into(),
            ],
        )
    }

    fn launch(port: u16, extra: Vec<String>) -> Self {
        let dir =
            std::env::temp_dir().join(format!("mqstore-test-redis-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = Self {
            port,
            child: None,
            dir,
            extra,
        };
        redis.spawn();
        redis
    }

    fn spawn(&mut self) {
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
        wait_for_port(self.port);
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

/// A Redis Cluster of three primaries (no replicas), every slot assigned.
pub struct Cluster {
    pub nodes: Vec<Redis>,
}

impl Cluster {
    pub fn start() -> Self {
        let nodes: Vec<Redis> = (0..3)
            .map(|_| {
                let port = free_port();
                Redis::launch(
                    port,
                    vec![
                        "--cluster-enabled".into(),
                        "yes".into(),
                        "--cluster-config-file".into(),
                        format!("nodes-{port}.conf"),
                        "--cluster-node-timeout".into(),
                        "2000".into(),
                    ],
                )
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addresses.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        let out = Command::new(binary("redis-cli"))
            .args(&args)
            .output()
            .expect("redis-cli --cluster create runs");
        assert!(
            out.status.success(),
            "creating the cluster failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        for node in &nodes {
            while !node.cli(&["cluster", "info"]).contains("cluster_state:ok") {
                assert!(Instant::now() < deadline, "the cluster did not become ok");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Self { nodes }
    }

    /// `redis-cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis-cluster://{}", hosts.join(","))
    }
}
