//! Real MQTT 5 brokers for the tests, on free loopback ports, stopped when dropped: mosquitto
//! (Debian's package) and Mochi MQTT (built from `tests/mochi`, its version pinned in go.mod).
//!
//! Tests that need a live broker and nothing broker-specific run on both: wrap them in
//! [`on_both_brokers!`](crate::on_both_brokers).

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Which broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Mosquitto,
    /// Mochi MQTT v2 with `Compatibilities.NoInheritedPropertiesOnAck` on (the setting the
    /// README asks for).
    Mochi,
    /// Mochi MQTT as shipped: its PUBACKs carry reason code 0x01 and the PUBLISH's user
    /// properties (mochi-mqtt/server#474).
    MochiAsShipped,
}

/// A child process (a `mqstore serve` node) killed and reaped when dropped, so a test that
/// fails leaves none running (std's `Child` is not killed on drop).
pub struct Process(pub Child);

impl std::ops::Deref for Process {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Process {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running broker.
pub struct Broker {
    pub kind: Kind,
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    /// Extra mosquitto configuration lines, kept for restarts.
    config: String,
    /// Extra environment of the broker's process, kept for restarts.
    env: Vec<(String, String)>,
}

/// Runs `[async] fn $name(kind: Kind)` as two tests, `$name::mosquitto` and `$name::mochi`.
#[macro_export]
macro_rules! on_both_brokers {
    ($(#[$meta:meta])* async fn $name:ident($kind:ident: Kind) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mosquitto() {
                run($crate::broker::Kind::Mosquitto).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mochi() {
                run($crate::broker::Kind::Mochi).await
            }

            $(#[$meta])*
            async fn run($kind: $crate::broker::Kind) $body
        }
    };
    ($(#[$meta:meta])* fn $name:ident($kind:ident: Kind) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[test]
            fn mosquitto() {
                run($crate::broker::Kind::Mosquitto)
            }

            #[test]
            fn mochi() {
                run($crate::broker::Kind::Mochi)
            }

            $(#[$meta])*
            fn run($kind: $crate::broker::Kind) $body
        }
    };
}

/// Where the state store runs in a test of its protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deployment {
    /// `mqstore serve` beside a broker of this kind.
    Serve(Kind),
    /// Inside mosquitto, as its plugin (`libmqstore_mosquitto.so`).
    Plugin,
}

impl Deployment {
    /// The broker the clients connect to.
    pub fn broker_kind(self) -> Kind {
        match self {
            Deployment::Serve(kind) => kind,
            Deployment::Plugin => Kind::Mosquitto,
        }
    }
}

/// Runs `async fn $name(deployment: Deployment)` as three tests: `$name::mosquitto` and
/// `$name::mochi` (`mqstore serve` beside either broker) and `$name::plugin` (the state store
/// inside mosquitto). The one protocol suite for both deployments.
#[macro_export]
macro_rules! on_every_deployment {
    ($(#[$meta:meta])* async fn $name:ident($deployment:ident: Deployment) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mosquitto() {
                run($crate::broker::Deployment::Serve($crate::broker::Kind::Mosquitto)).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mochi() {
                run($crate::broker::Deployment::Serve($crate::broker::Kind::Mochi)).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn plugin() {
                run($crate::broker::Deployment::Plugin).await
            }

            $(#[$meta])*
            async fn run($deployment: $crate::broker::Deployment) $body
        }
    };
}

/// The mosquitto plugin built in this test's profile (`target/{profile}/libmqstore_mosquitto.so`;
/// `cargo test` does not build a cdylib-only crate: the test command builds it first).
pub fn plugin_path() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from target/{profile}/deps");
    let path = profile_dir.join("libmqstore_mosquitto.so");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p mqstore-mosquitto` (bash scripts/test does)",
        path.display()
    );
    path
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The configuration line that keeps mosquitto running as the user who runs the tests:
/// started by root it would otherwise switch to the user `mosquitto`, who cannot read a
/// checkout (the plugin, ACL files) in a private folder. Run by anyone else, it has no effect.
pub fn mosquitto_user() -> String {
    static USER: OnceLock<String> = OnceLock::new();
    let user = USER.get_or_init(|| {
        let output = Command::new("id")
            .arg("-un")
            .output()
            .expect("`id -un` runs");
        String::from_utf8(output.stdout)
            .expect("a user name in UTF-8")
            .trim()
            .to_owned()
    });
    format!("user {user}\n")
}

fn mosquitto_binary() -> PathBuf {
    for candidate in [
        "/usr/sbin/mosquitto",
        "/usr/bin/mosquitto",
        "/usr/local/sbin/mosquitto",
    ] {
        let path = PathBuf::from(candidate);
        if path.exists() {
            return path;
        }
    }
    panic!(
        "mosquitto is not installed: `bash scripts/test` installs it (apt-get install mosquitto)"
    )
}

pub fn go_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("go"))
        .find(|go| go.exists());
    on_path
        .or_else(|| Some(PathBuf::from("/usr/local/go/bin/go")).filter(|go| go.exists()))
        .expect(
            "Go is not installed: `bash scripts/test` installs it (Mochi MQTT is built with it)",
        )
}

/// The Mochi MQTT test broker, built once per test binary (Go's build cache makes later
/// builds a link step).
fn mochi_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        // From this crate's folder (cli/, or another crate that includes this module) up to
        // the workspace's cli/tests/mochi.
        let source = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .map(|dir| dir.join("cli/tests/mochi"))
            .find(|dir| dir.join("go.mod").exists())
            .expect("cli/tests/mochi is in the workspace");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mochi");
        let partial = out.with_extension(format!("{}.partial", std::process::id()));
        let status = Command::new(go_binary())
            .args(["build", "-o"])
            .arg(&partial)
            .arg(".")
            .current_dir(&source)
            .status()
            .expect("go build runs");
        assert!(status.success(), "building Mochi MQTT (tests/mochi) failed");
        // Another test binary may build at the same time: the rename is atomic.
        std::fs::rename(&partial, &out).expect("the Mochi binary moves into place");
        out
    })
}

impl Broker {
    /// Starts mosquitto on a free port.
    pub fn start() -> Self {
        Self::start_kind(Kind::Mosquitto)
    }

    /// Starts a broker of this kind on a free port.
    pub fn start_kind(kind: Kind) -> Self {
        Self::launch(kind, free_port(), String::new())
    }

    /// Starts a broker of this kind that takes no packet larger than `max` bytes (and says
    /// so in its CONNACK).
    pub fn start_with_max_packet_size(kind: Kind, max: u32) -> Self {
        Self::launch(kind, free_port(), format!("max_packet_size {max}\n"))
    }

    /// Starts Mochi MQTT with an ACL that lets nobody read or subscribe to `filter` (it
    /// answers such a SUBSCRIBE 0x87; mosquitto grants it and delivers nothing).
    pub fn start_mochi_denying(filter: &str) -> Self {
        Self::launch(Kind::Mochi, free_port(), format!("deny {filter}\n"))
    }

    /// Starts mosquitto on `port` (to restart one where clients expect it).
    pub fn start_on(port: u16) -> Self {
        Self::launch(Kind::Mosquitto, port, String::new())
    }

    /// Starts mosquitto whose listener takes TLS, with these PEM files.
    pub fn start_tls(ca: &Path, cert: &Path, key: &Path) -> Self {
        Self::start_config(&format!(
            "cafile {}\ncertfile {}\nkeyfile {}\n",
            ca.display(),
            cert.display(),
            key.display()
        ))
    }

    /// Starts mosquitto with these configuration lines (anonymous clients are allowed unless
    /// they say otherwise).
    pub fn start_config(lines: &str) -> Self {
        Self::start_config_env(lines, Vec::new())
    }

    /// Starts mosquitto with these configuration lines and this environment besides its own
    /// (`LD_PRELOAD` of a library, say), which its restarts keep.
    pub fn start_config_env(lines: &str, env: Vec<(String, String)>) -> Self {
        Self::launch_env(Kind::Mosquitto, free_port(), lines.to_owned(), env)
    }

    /// Starts the same kind of broker again on the same port (after [`Broker::stop`]).
    pub fn restart(&mut self) {
        self.stop();
        let (config, env) = (
            std::mem::take(&mut self.config),
            std::mem::take(&mut self.env),
        );
        *self = Self::launch_env(self.kind, self.port, config, env);
    }

    fn launch(kind: Kind, port: u16, config: String) -> Self {
        Self::launch_env(kind, port, config, Vec::new())
    }

    fn launch_env(kind: Kind, port: u16, config: String, env: Vec<(String, String)>) -> Self {
        let dir =
            std::env::temp_dir().join(format!("mqstore-test-broker-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut command = match kind {
            Kind::Mosquitto => {
                let anonymous = if config.contains("allow_anonymous") {
                    ""
                } else {
                    "allow_anonymous true\n"
                };
                let file = dir.join("mosquitto.conf");
                std::fs::write(
                    &file,
                    // The log goes to stderr (kept in stderr.txt).
                    format!(
                        "{}listener {port} 127.0.0.1\n{config}{anonymous}set_tcp_nodelay true\npersistence false\nlog_dest stderr\n",
                        mosquitto_user()
                    ),
                )
                .unwrap();
                let mut command = Command::new(mosquitto_binary());
                command.arg("-c").arg(file);
                command
            }
            Kind::Mochi | Kind::MochiAsShipped => {
                let mut command = Command::new(mochi_binary());
                command.arg("-tcp").arg(format!("127.0.0.1:{port}"));
                if let Some(max) = config.strip_prefix("max_packet_size ") {
                    command.args(["-max-packet-size", max.trim()]);
                }
                if let Some(filter) = config.strip_prefix("deny ") {
                    command.args(["-deny", filter.trim()]);
                }
                if kind == Kind::MochiAsShipped {
                    command.arg("-inherit-properties-on-ack");
                }
                command
            }
        };
        let child = command
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("stderr.txt")).unwrap(),
            ))
            .spawn()
            .expect("the broker starts");
        let mut broker = Broker {
            kind,
            port,
            child: Some(child),
            dir,
            config,
            env,
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = broker
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("{kind:?} exited ({status}): {}", broker.log());
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{kind:?} did not listen on {port} within 10 s; see {}",
                broker.dir.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        broker
    }

    /// What the broker has logged so far (connections, disconnections, errors).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.txt")).unwrap_or_default()
    }

    /// The broker's process id while it runs (to pause it with SIGSTOP, say).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the broker (like a crash: clients see the connection drop).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the broker the way an operator does (SIGTERM): mosquitto publishes the Will of
    /// every client still connected.
    pub fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Mosquitto, for tests that need its configuration (TLS, ACLs, its log).
pub type Mosquitto = Broker;

/// Which way a [`cut_at`] proxy watches the packets it forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// What the broker sends to the client.
    FromBroker,
    /// What the client sends to the broker.
    ToBroker,
}

/// A TCP proxy to a broker that, once `armed`, cuts the connection at the first packet
/// [`cut_at`]'s test matches, before it is forwarded: it never arrives, and both ends see the
/// connection end. Counts the connections it cut.
pub struct CutAt {
    pub port: u16,
    pub armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub cut: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// A PUBACK (the broker took a QoS 1 publish).
pub fn is_puback(packet: &[u8]) -> bool {
    packet[0] >> 4 == 4
}

/// The topic of a PUBLISH packet, if `packet` is one.
pub fn publish_topic(packet: &[u8]) -> Option<&str> {
    if packet[0] >> 4 != 3 {
        return None;
    }
    // The fixed header's remaining length takes 1–4 bytes, each but the last with bit 7 set.
    let at = 1 + packet[1..].iter().position(|b| b & 0x80 == 0)? + 1;
    let len = usize::from(u16::from_be_bytes([*packet.get(at)?, *packet.get(at + 1)?]));
    std::str::from_utf8(packet.get(at + 2..at + 2 + len)?).ok()
}

/// The length of the first whole MQTT packet in `buf` (fixed header, remaining length), if
/// it is all there.
fn mqtt_packet_len(buf: &[u8]) -> Option<usize> {
    let (mut length, mut shift) = (0usize, 0);
    for (i, byte) in buf.iter().enumerate().skip(1).take(4) {
        length |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            let whole = i + 1 + length;
            return (buf.len() >= whole).then_some(whole);
        }
        shift += 7;
    }
    None
}

/// A [`CutAt`] proxy to the broker on `broker_port`, watching `watch` for a packet `matches`.
pub async fn cut_at(broker_port: u16, watch: Watch, matches: fn(&[u8]) -> bool) -> CutAt {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (armed, cut) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let (armed_, cut_) = (armed.clone(), cut.clone());
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(broker) = tokio::net::TcpStream::connect(("127.0.0.1", broker_port)).await
            else {
                continue;
            };
            let _ = (client.set_nodelay(true), broker.set_nodelay(true));
            let (from_client, to_client) = client.into_split();
            let (from_broker, to_broker) = broker.into_split();
            let ((mut from, mut to), (mut watched_from, mut watched_to)) = match watch {
                Watch::FromBroker => ((from_client, to_broker), (from_broker, to_client)),
                Watch::ToBroker => ((from_broker, to_client), (from_client, to_broker)),
            };
            let other = tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from, &mut to).await;
            });
            let (armed, cut) = (armed_.clone(), cut_.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 16 * 1024];
                loop {
                    while let Some(len) = mqtt_packet_len(&buf) {
                        if matches(&buf[..len]) && armed.swap(false, Ordering::SeqCst) {
                            cut.fetch_add(1, Ordering::SeqCst);
                            other.abort();
                            return; // every half dropped: both ends see the end.
                        }
                        let packet: Vec<u8> = buf.drain(..len).collect();
                        if watched_to.write_all(&packet).await.is_err() {
                            return;
                        }
                    }
                    match watched_from.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    CutAt { port, armed, cut }
}
