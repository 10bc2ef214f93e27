//! The AWS IoT Device SDK for Java v2 (Maven `software.amazon.awssdk.iotdevicesdk:
//! aws-iot-device-sdk`, pinned in `java/pom.xml`), unchanged, as a device against
//! `mqstore serve` through mosquitto, over MQTT 5 and MQTT 3.1.1: its `IotCommandsV2Client`
//! (progress twice, a result, a late update refused with TerminalStateReached, the device's own
//! TIMED_OUT), its `IotJobsV2Client` and its `IotShadowV2Client` (the steps the Python and
//! JavaScript SDK tests run).
//! The device is `java/Device.java`, run by Java's single-file source launcher on the jars
//! Maven copies into `target/` on the first run (again when the pom changes).

#[path = "../../../cli/tests/broker/mod.rs"]
#[allow(unused_macros)]
#[macro_use]
mod broker;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use broker::Broker;
use mqstore_core::client::ClientError;
use mqstore_core::commands::{CommandRequest, Status};
use mqstore_net::BrokerConfig;
use mqstore_net::client::{Client, ClientOptions};
use mqstore_server::{ServerConfig, ServerHandle, spawn};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

const POM: &str = include_str!("../java/pom.xml");
const WAIT: Duration = Duration::from_secs(60);

/// The SDK's jars (the SDK, aws-crt, gson), copied by Maven once per pom.
fn jars() -> PathBuf {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _once = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop-aws-java");
    let lib = dir.join("lib");
    let stamp = dir.join("pom.xml");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(POM) {
        return lib;
    }
    let _ = std::fs::remove_dir_all(&lib);
    // Its output only when it fails (Debian's Maven prints colour resets even when quiet).
    let output = Command::new("mvn")
        .args(["--batch-mode", "--quiet", "dependency:copy-dependencies"])
        .arg(format!("-DoutputDirectory={}", lib.display()))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("java"))
        .output()
        .unwrap_or_else(|e| {
            panic!("mvn (needs a JDK 17+ and Maven: scripts/test installs them): {e}")
        });
    assert!(
        output.status.success(),
        "mvn dependency:copy-dependencies in interop/aws/java failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(&stamp, POM).unwrap();
    lib
}

/// A running `Device.java` and its output, line by line.
struct Device {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    seen: Vec<String>,
}

impl Device {
    async fn start(mode: &str, broker: &Broker, thing: &str, mqtt: &str) -> Device {
        let lib = tokio::task::spawn_blocking(jars).await.unwrap();
        let mut child = tokio::process::Command::new("java")
            .arg("-cp")
            .arg(lib.join("*"))
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("java/Device.java"))
            .args([
                mode,
                "--host",
                "127.0.0.1",
                "--thing",
                thing,
                "--mqtt",
                mqtt,
            ])
            .args(["--port", &broker.port.to_string()])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("java runs (a JDK 17+: scripts/test installs it)");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Device {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads lines until one is `line`; panics with everything it printed if the program
    /// ends first.
    async fn until(&mut self, line: &str) {
        loop {
            let next = tokio::time::timeout(WAIT, self.lines.next_line()).await;
            match next {
                Ok(Ok(Some(read))) => {
                    let found = read == line;
                    self.seen.push(read);
                    if found {
                        return;
                    }
                }
                _ => panic!(
                    "the Java device ended or fell silent before {line:?}:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Waits for the closing OK and the exit; returns what it printed.
    async fn finish(mut self) -> String {
        self.until("OK").await;
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the Java device exits")
            .unwrap();
        assert!(status.success(), "{status}:\n{}", self.seen.join("\n"));
        self.seen.join("\n")
    }
}

async fn server(broker: &Broker) -> ServerHandle {
    let config = ServerConfig::new(
        BrokerConfig {
            port: broker.port,
            ..BrokerConfig::default()
        },
        "mqstore",
    );
    spawn(config).await.expect("the server starts")
}

/// A command for the Java device `thing` over the `aws` profile.
fn command(thing: &str) -> CommandRequest {
    CommandRequest {
        profile: "aws".into(),
        timeout_ms: 20_000,
        content_type: Some("application/json".into()),
        ..CommandRequest::new(
            format!("$aws/commands/things/{thing}/executions/{{id}}/request/json"),
            r#"{"calibrate": true}"#,
        )
    }
}

/// mosquitto, and `mqstore serve` beside it; or (`inside`) mosquitto with mqstore inside it.
async fn host(inside: bool) -> (Broker, Option<ServerHandle>) {
    match inside {
        false => {
            let broker = Broker::start();
            let server = server(&broker).await;
            (broker, Some(server))
        }
        true => {
            let plugin = broker::plugin_path();
            let config = format!("plugin {}\nplugin_opt_node_id inside\n", plugin.display());
            (Broker::start_config(&config), None)
        }
    }
}

/// The Java SDK's commands steps over MQTT `mqtt`, served beside mosquitto or `inside` it.
async fn commands_through_the_java_sdk(mqtt: &str, inside: bool) {
    let (broker, server) = host(inside).await;
    let thing = format!("java-robot-{mqtt}-{}", broker.port);
    let mut device = Device::start("commands", &broker, &thing, mqtt).await;
    device.until("ready").await;
    let caller = Client::connect(ClientOptions::new("caller", "127.0.0.1", broker.port))
        .await
        .expect("the caller connects");
    let mut watch = caller.watch_commands().await.unwrap();

    // Progress twice, then the result; each update as the SDK sends it (with deviceType,
    // deviceId and executionId), each acknowledged (the SDK's call returns).
    let reply = caller
        .command(command(&thing))
        .await
        .expect("the command succeeds");
    assert_eq!(reply.status, Status::Succeeded);
    let mut progress = Vec::new();
    loop {
        let record = tokio::time::timeout(WAIT, watch.next())
            .await
            .expect("a status change")
            .unwrap();
        if record.id != reply.id {
            continue;
        }
        let reason = record.answer.and_then(|a| a.reason_code);
        match record.status {
            Status::InProgress => progress.push(reason.unwrap_or_default()),
            Status::Succeeded => {
                assert_eq!(reason.as_deref(), Some("OK"));
                break;
            }
            _ => {}
        }
    }
    assert_eq!(progress, ["HEATING", "MEASURING"]);
    let record = caller.command_status(&reply.id).await.unwrap();
    assert_eq!(
        record.status,
        Status::Succeeded,
        "the late FAILED changed nothing"
    );

    // The device's own TIMED_OUT is its answer: the caller learns it at once.
    match caller.command(command(&thing)).await {
        Err(ClientError::CommandFailed { answer, .. }) => {
            assert_eq!(answer.status, Status::TimedOut);
            assert_eq!(answer.reason_code.as_deref(), Some("TOO_SLOW"));
        }
        other => panic!("the device's TIMED_OUT: {other:?}"),
    }
    let said = device.finish().await;
    assert!(
        said.contains("late update: rejected with TerminalStateReached"),
        "{said}"
    );
    if let Some(server) = server {
        server.stop().await.unwrap();
    }
}

/// The Java SDK's jobs steps over MQTT `mqtt`, with jobs served by `mqstore serve` beside
/// mosquitto or, `inside`, by the plugin in it.
async fn jobs_through_the_java_sdk(mqtt: &str, inside: bool) {
    let (broker, server) = host(inside).await;
    let thing = format!("java-thing-{mqtt}-{}", broker.port);
    let said = Device::start("jobs", &broker, &thing, mqtt)
        .await
        .finish()
        .await;
    for step in [
        "a second update: rejected with InvalidStateTransition",
        "abort: the job CANCELED",
        "forced cancel: the device's update rejected",
    ] {
        assert!(said.contains(step), "the SDK saw no {step:?}:\n{said}");
    }
    if let Some(server) = server {
        server.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_java_sdk_commands_client_completes_commands_over_mqtt5() {
    commands_through_the_java_sdk("5", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_java_sdk_commands_client_completes_commands_inside_mosquitto() {
    commands_through_the_java_sdk("5", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_java_sdk_commands_client_completes_commands_over_mqtt311() {
    commands_through_the_java_sdk("311", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_java_sdk_jobs_client_runs_a_job_over_mqtt5() {
    jobs_through_the_java_sdk("5", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_java_sdk_jobs_client_runs_a_job_inside_mosquitto() {
    jobs_through_the_java_sdk("5", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_java_sdk_jobs_client_runs_a_job_over_mqtt311() {
    jobs_through_the_java_sdk("311", false).await;
}

/// Issue 52: the Java SDK's shadow steps (the Python and JavaScript SDKs' steps, on the
/// classic shadow and a named one) over MQTT `mqtt`, served beside mosquitto or `inside` it.
async fn shadows_through_the_java_sdk(mqtt: &str, inside: bool) {
    let (broker, server) = host(inside).await;
    let thing = format!("java-lamp-{mqtt}-{}", broker.port);
    let said = Device::start("shadow", &broker, &thing, mqtt)
        .await
        .finish()
        .await;
    for step in [
        "classic: the device reported; get shows the delta {power=on}",
        "classic: a stale version rejected, 409; desired cleared with null; no delta left",
        "named: deleted at version 3; the next shadow is version 4",
    ] {
        assert!(said.contains(step), "the SDK saw no {step:?}:\n{said}");
    }
    if let Some(server) = server {
        server.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_java_sdk_shadow_client_works_over_mqtt5() {
    shadows_through_the_java_sdk("5", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_java_sdk_shadow_client_works_inside_mosquitto() {
    shadows_through_the_java_sdk("5", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_java_sdk_shadow_client_works_over_mqtt311() {
    shadows_through_the_java_sdk("311", false).await;
}
