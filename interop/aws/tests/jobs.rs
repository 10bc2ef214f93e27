//! The AWS IoT Device SDK for Python v2 (`awsiotsdk`, its `IotJobsClientV2` over a plain awscrt
//! MQTT 5 client, no TLS), unchanged, against `mqstore serve` through a real broker: the steps
//! are in `jobs_device.py`. The SDK is installed, pinned (`requirements.txt`), into a virtual
//! environment under `target/` on the first run.

#[path = "../../../core/tests/broker/mod.rs"]
#[macro_use]
mod broker;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use broker::Broker;
use mqstore::net::BrokerConfig;
use mqstore::net::server::{ServerConfig, spawn};

const REQUIREMENTS: &str = include_str!("../requirements.txt");

/// The virtual environment's python, with the SDK installed (once per requirements).
fn python() -> PathBuf {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _once = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop-aws-venv");
    let python = venv.join("bin/python");
    let stamp = venv.join("requirements.txt");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(REQUIREMENTS) {
        return python;
    }
    let run = |command: &mut Command, what: &str| {
        let status = command.status().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(status.success(), "{what} failed ({status})");
    };
    run(
        Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(&venv),
        "python3 -m venv (Debian: apt install python3-venv)",
    );
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("requirements.txt")),
        "pip install -r interop/aws/requirements.txt",
    );
    std::fs::write(&stamp, REQUIREMENTS).unwrap();
    python
}

on_both_brokers! {
    /// Issue 10: get pending, a job created through the operator API, start-next, describe,
    /// update to SUCCEEDED, the notifications on the SDK's streams, and a rejection, all
    /// through the SDK's own client.
    async fn the_aws_iot_device_sdk_runs_a_job_against_mqstore(kind: Kind) {
        let broker = Broker::start_kind(kind);
        let config = ServerConfig::new(
            BrokerConfig {
                port: broker.port,
                ..BrokerConfig::default()
            },
            "mqstore",
        );
        let server = spawn(config).await.expect("the server starts");
        let python = tokio::task::spawn_blocking(python).await.unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs_device.py");
        let thing = format!("sdk-thing-{}", broker.port);
        let output = tokio::process::Command::new(python)
            .arg(script)
            .args(["--host", "127.0.0.1", "--port", &broker.port.to_string(), "--thing", &thing])
            .output()
            .await
            .expect("the SDK script runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stdout.trim_end().ends_with("OK"),
            "the SDK script failed ({}):\n{stdout}\n{stderr}",
            output.status
        );
        server.stop().await.unwrap();
    }
}
