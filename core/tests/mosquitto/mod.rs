//! A real mosquitto (MQTT 5) for the tests, on a free loopback port, stopped when dropped.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Mosquitto {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Mosquitto {
    /// Starts a broker on a free port.
    pub fn start() -> Self {
        Self::start_on(free_port())
    }

    /// Starts a broker on `port` (to restart one where clients expect it).
    pub fn start_on(port: u16) -> Self {
        Self::start_with(port, "")
    }

    /// Starts a broker whose listener takes TLS, with these PEM files.
    pub fn start_tls(ca: &std::path::Path, cert: &std::path::Path, key: &std::path::Path) -> Self {
        Self::start_with(
            free_port(),
            &format!(
                "cafile {}\ncertfile {}\nkeyfile {}\n",
                ca.display(),
                cert.display(),
                key.display()
            ),
        )
    }

    /// Starts a broker with these configuration lines (anonymous clients are allowed unless
    /// they say otherwise).
    pub fn start_config(lines: &str) -> Self {
        Self::start_with(free_port(), lines)
    }

    fn start_with(port: u16, listener_options: &str) -> Self {
        let anonymous = if listener_options.contains("allow_anonymous") {
            ""
        } else {
            "allow_anonymous true\n"
        };
        let dir = std::env::temp_dir().join(format!(
            "mqstore-test-mosquitto-{port}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("mosquitto.conf");
        std::fs::write(
            &config,
            format!(
                // The log goes to stderr (kept in stderr.txt): mosquitto started as root runs as
                // the user `mosquitto`, who could not open a log file in this directory.
                "listener {port} 127.0.0.1\n{listener_options}{anonymous}set_tcp_nodelay true\npersistence false\nlog_dest stderr\n",
            ),
        )
        .unwrap();
        let child = Command::new(mosquitto_binary())
            .arg("-c")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("stderr.txt")).unwrap(),
            ))
            .spawn()
            .expect("mosquitto starts");
        let mut broker = Mosquitto {
            port,
            child: Some(child),
            dir,
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = broker
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "mosquitto exited ({status}): {}",
                    std::fs::read_to_string(broker.dir.join("stderr.txt")).unwrap_or_default()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "mosquitto did not listen on {port} within 10 s; see {}",
                broker.dir.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        broker
    }

    /// What the broker has logged so far (connections, disconnections, errors).
    #[allow(dead_code)] // not every test binary reads it
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.txt")).unwrap_or_default()
    }

    /// Stops the broker (like a crash: clients see the connection drop).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
