//! The AWS IoT Device SDKs, unchanged, against mqstore's jobs and device shadows through a
//! real broker (`mqstore serve` beside it, or the plugin inside mosquitto): for Python v2
//! (`awsiotsdk` over a plain awscrt MQTT 5 client, no TLS: its `IotJobsClientV2`, steps in
//! `jobs_device.py`, and `IotShadowClientV2`, steps in `shadow_device.py`) and for JavaScript
//! v2 (`aws-iot-device-sdk-v2` on Node: `IotJobsClientv2` and `IotShadowClientv2`, the same
//! steps in `js/jobs_device.mjs` and `js/shadow_device.mjs`). Each SDK is installed, pinned, on
//! the first run: Python's into a virtual environment under `target/` (`requirements.txt`),
//! JavaScript's with `npm ci` into `js/node_modules` (`js/package-lock.json`).

#[path = "../../../cli/tests/broker/mod.rs"]
#[macro_use]
mod broker;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use broker::Broker;
use mqstore_net::BrokerConfig;
use mqstore_server::{ServerConfig, spawn};

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

/// `node_modules` of `js/`, installed from its lockfile (again when the lockfile changes).
fn node_modules() -> PathBuf {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _once = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let js = Path::new(env!("CARGO_MANIFEST_DIR")).join("js");
    let lock = std::fs::read_to_string(js.join("package-lock.json")).unwrap();
    let stamp = js.join("node_modules/.mqstore-installed-from");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(lock.as_str()) {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&js)
            .status()
            .unwrap_or_else(|e| panic!("npm ci (needs Node 20+ and npm): {e}"));
        assert!(
            status.success(),
            "npm ci in interop/aws/js failed ({status})"
        );
        std::fs::write(&stamp, &lock).unwrap();
    }
    js
}

/// Where the jobs service runs.
#[derive(Clone, Copy)]
enum Host {
    /// `mqstore serve` beside the broker.
    Serve,
    /// Inside mosquitto (the broker was started with the plugin).
    Plugin,
}

/// mosquitto with mqstore inside it (the plugin built in this workspace).
fn broker_with_plugin() -> Broker {
    Broker::start_config(&format!(
        "plugin {}\nplugin_opt_node_id inside\n",
        broker::plugin_path().display()
    ))
}

/// The steps a jobs script must print besides OK.
const JOB_STEPS: [&str; 2] = [
    "abort: the job CANCELED",
    "forced cancel: the device's update rejected",
];

/// Runs one SDK's device script against jobs and shadows served on `broker` (a fresh server
/// beside it, or the plugin in it); panics with its output unless it ends with OK and printed
/// each of `steps`.
async fn run_device(
    broker: &Broker,
    host: Host,
    program: PathBuf,
    script: PathBuf,
    steps: &[&str],
) {
    let server = match host {
        Host::Serve => {
            let config = ServerConfig::new(
                BrokerConfig {
                    port: broker.port,
                    ..BrokerConfig::default()
                },
                "mqstore",
            );
            Some(spawn(config).await.expect("the server starts"))
        }
        Host::Plugin => None,
    };
    let thing = format!("sdk-thing-{}", broker.port);
    let output = tokio::process::Command::new(program)
        .arg(script)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &broker.port.to_string(),
            "--thing",
            &thing,
        ])
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
    for step in steps {
        assert!(
            stdout.contains(step),
            "the SDK script saw no {step:?}:\n{stdout}"
        );
    }
    if let Some(server) = server {
        server.stop().await.unwrap();
    }
}

on_both_brokers! {
    /// Issue 10: get pending, a job created through the operator API, start-next, describe,
    /// update to SUCCEEDED, the notifications on the SDK's streams, and a rejection, all
    /// through the SDK's own client; issue 33: an abort and a forced cancellation of its
    /// executions as the SDK sees them.
    async fn the_aws_iot_device_sdk_runs_a_job_against_mqstore(kind: Kind) {
        let broker = Broker::start_kind(kind);
        let python = tokio::task::spawn_blocking(python).await.unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs_device.py");
        run_device(&broker, Host::Serve, python, script, &JOB_STEPS).await;
    }
}

/// The same steps through the Python SDK with jobs served inside mosquitto (no `mqstore serve`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_iot_device_sdk_runs_a_job_inside_mosquitto() {
    let broker = broker_with_plugin();
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs_device.py");
    run_device(&broker, Host::Plugin, python, script, &JOB_STEPS).await;
}

on_both_brokers! {
    /// The same steps through the AWS IoT Device SDK for JavaScript v2 on Node.
    async fn the_aws_iot_device_sdk_for_javascript_runs_a_job_against_mqstore(kind: Kind) {
        let broker = Broker::start_kind(kind);
        let js = tokio::task::spawn_blocking(node_modules).await.unwrap();
        let script = js.join("jobs_device.mjs");
        run_device(&broker, Host::Serve, PathBuf::from("node"), script, &JOB_STEPS).await;
    }
}

/// The JavaScript SDK's steps with jobs served inside mosquitto.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_iot_device_sdk_for_javascript_runs_a_job_inside_mosquitto() {
    let broker = broker_with_plugin();
    let js = tokio::task::spawn_blocking(node_modules).await.unwrap();
    run_device(
        &broker,
        Host::Plugin,
        PathBuf::from("node"),
        js.join("jobs_device.mjs"),
        &JOB_STEPS,
    )
    .await;
}

/// The steps the shadow script must print besides OK: each flow on the classic shadow and on
/// a named one.
const SHADOW_STEPS: [&str; 4] = [
    "classic: the device reported; get shows the delta",
    "classic: deleted at version 3; the next shadow is version 4",
    "named: a stale version rejected, 409",
    "named: deleted at version 3; the next shadow is version 4",
];

on_both_brokers! {
    /// Issue 52: the Python SDK's shadow client (IotShadowClientV2), unchanged: get, update,
    /// delta and documents streams, a version conflict, `null`, delete, on the classic shadow
    /// and a named one.
    async fn the_aws_iot_device_sdk_shadow_client_works_against_mqstore(kind: Kind) {
        let broker = Broker::start_kind(kind);
        let python = tokio::task::spawn_blocking(python).await.unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("shadow_device.py");
        run_device(&broker, Host::Serve, python, script, &SHADOW_STEPS).await;
    }
}

/// The same shadow steps with shadows served inside mosquitto.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_iot_device_sdk_shadow_client_works_inside_mosquitto() {
    let broker = broker_with_plugin();
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("shadow_device.py");
    run_device(&broker, Host::Plugin, python, script, &SHADOW_STEPS).await;
}

on_both_brokers! {
    /// The same shadow steps through the JavaScript SDK's IotShadowClientv2 on Node.
    async fn the_aws_iot_device_sdk_for_javascript_shadow_client_works_against_mqstore(kind: Kind) {
        let broker = Broker::start_kind(kind);
        let js = tokio::task::spawn_blocking(node_modules).await.unwrap();
        let script = js.join("shadow_device.mjs");
        run_device(&broker, Host::Serve, PathBuf::from("node"), script, &SHADOW_STEPS).await;
    }
}

/// The JavaScript SDK's shadow steps with shadows served inside mosquitto.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_iot_device_sdk_for_javascript_shadow_client_works_inside_mosquitto() {
    let broker = broker_with_plugin();
    let js = tokio::task::spawn_blocking(node_modules).await.unwrap();
    let script = js.join("shadow_device.mjs");
    run_device(
        &broker,
        Host::Plugin,
        PathBuf::from("node"),
        script,
        &SHADOW_STEPS,
    )
    .await;
}
