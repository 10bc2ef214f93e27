//! `mqstore serve --data-dir`: the state store on local disk, over a real mosquitto, with the
//! server as a process of its own (killed with SIGKILL, started again).

mod broker;
mod calls;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use broker::Broker;
use bytes::Bytes;
use mqstore_core::ServiceError;
use mqstore_core::client::ClientError;
use mqstore_core::codec::Condition;
use mqstore_core::hlc::Hlc;
use mqstore_net::client::{Client, SetOptions};

use calls::{WAIT, next_change, ready_client};

/// A directory of its own under the system's temporary one, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("mqstore-durable-{}-{name}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn serve_command(broker: &Broker, data_dir: &Path, fsync: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mqstore"));
    command
        .args([
            "--port",
            &broker.port.to_string(),
            "serve",
            "--node-id",
            "disk",
        ])
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--fsync", fsync])
        .env("MQSTORE_LOG", "warn")
        .env("NO_COLOR", "1");
    command
}

/// `mqstore serve --data-dir` as a process of its own (to kill -9 it).
fn serve(broker: &Broker, data_dir: &Path, fsync: &str) -> Child {
    serve_command(broker, data_dir, fsync)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mqstore serve starts")
}

/// `mqstore serve` that is expected to stop by itself: what it printed and its status.
fn serve_until_it_stops(broker: &Broker, data_dir: &Path) -> Output {
    let mut child = serve_command(broker, data_dir, "always")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mqstore serve starts");
    let deadline = std::time::Instant::now() + WAIT;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("mqstore serve did not stop by itself");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn kill(mut server: Child) {
    server.kill().unwrap(); // SIGKILL
    server.wait().unwrap();
}

/// A client with a short timeout, once the server answers.
/// Writers SET their own key 0, 1, 2, ... until the server is killed; the last value each saw
/// acknowledged, with its version.
type Acknowledged = Arc<std::sync::Mutex<HashMap<String, (u64, Hlc)>>>;

async fn write_until_killed(
    broker: &Broker,
    writers: usize,
) -> (Acknowledged, Vec<tokio::task::JoinHandle<()>>) {
    let acknowledged: Acknowledged = Default::default();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let c = ready_client(broker.port, &format!("writer-{w}")).await;
        let acknowledged = acknowledged.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("load/{w}");
            for i in 0u64.. {
                match c
                    .set(key.clone(), i.to_string(), SetOptions::default())
                    .await
                {
                    Ok(set) => {
                        let version = set.version.expect("a version");
                        acknowledged
                            .lock()
                            .unwrap()
                            .insert(key.clone(), (i, version));
                    }
                    Err(ClientError::Timeout(_) | ClientError::Disconnected) => return,
                    Err(e) => panic!("{e}"),
                }
            }
        }));
    }
    (acknowledged, tasks)
}

/// Every acknowledged write is there after the restart: the key holds that value with that
/// version, or a later one (a write applied and synced whose answer the kill cut off).
async fn check_acknowledged(reader: &Client, acknowledged: Acknowledged) -> usize {
    let acknowledged = acknowledged.lock().unwrap().clone();
    let mut writes = 0;
    for (key, (value, version)) in &acknowledged {
        let got = reader
            .get(key.clone())
            .await
            .unwrap()
            .expect("the key is there");
        let stored: u64 = std::str::from_utf8(&got.value).unwrap().parse().unwrap();
        let stored_version = got.version.unwrap();
        assert!(
            stored >= *value,
            "{key}: {stored} was stored, {value} was acknowledged"
        );
        match stored == *value {
            true => assert_eq!(&stored_version, version, "{key}"),
            false => assert!(&stored_version > version, "{key}"),
        }
        writes += *value as usize + 1;
    }
    writes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_with_fsync_always_loses_no_acknowledged_write() {
    let broker = Broker::start();
    let dir = TempDir::new("always");
    // A data directory that does not exist yet is made.
    let data_dir = dir.0.join("not/there/yet");
    let server = serve(&broker, &data_dir, "always");
    let c = ready_client(broker.port, "locker").await;
    // A lock and a key it guards: their fencing token survives too.
    let lock = c
        .set(
            "lock",
            "locker",
            SetOptions {
                condition: Condition::NotExists,
                expires: Some(Duration::from_secs(600)),
                ..SetOptions::default()
            },
        )
        .await
        .unwrap();
    let token = lock.version.unwrap();
    let guarded = SetOptions {
        fencing_token: Some(token.clone()),
        ..SetOptions::default()
    };
    c.set("guarded", "v1", guarded.clone()).await.unwrap();

    let (acknowledged, writers) = write_until_killed(&broker, 8).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    kill(server);
    for writer in writers {
        writer.await.unwrap();
    }

    let server = serve(&broker, &data_dir, "always");
    let reader = ready_client(broker.port, "reader").await;
    let writes = check_acknowledged(&reader, acknowledged.clone()).await;
    assert!(
        writes > 100,
        "only {writes} writes were acknowledged before the kill"
    );
    // The fencing token: a write without it is refused, with it accepted.
    let unfenced = reader.set("guarded", "v2", SetOptions::default()).await;
    assert!(
        matches!(
            unfenced,
            Err(ClientError::Service(ServiceError::FencingTokenRequired))
        ),
        "{unfenced:?}"
    );
    reader.set("guarded", "v2", guarded).await.unwrap();
    assert_eq!(
        reader.get("lock").await.unwrap().unwrap().version,
        Some(token.clone())
    );
    // Versions go on increasing from the newest one issued before the kill.
    let newest = acknowledged
        .lock()
        .unwrap()
        .values()
        .map(|(_, v)| v.clone())
        .max()
        .unwrap();
    let after = reader
        .set("load/0", "after", SetOptions::default())
        .await
        .unwrap();
    assert!(after.version.unwrap() > newest);
    kill(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_fsync_everysec_loses_no_acknowledged_write_either() {
    // The process dies, the machine does not: what was written is in the page cache. (A power
    // loss would lose at most about the last second: see docs/guide/durability.md.)
    let broker = Broker::start();
    let dir = TempDir::new("everysec");
    let server = serve(&broker, &dir.0, "everysec");
    let (acknowledged, writers) = write_until_killed(&broker, 4).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    kill(server);
    for writer in writers {
        writer.await.unwrap();
    }
    let server = serve(&broker, &dir.0, "everysec");
    let reader = ready_client(broker.port, "reader").await;
    assert!(check_acknowledged(&reader, acknowledged).await > 50);
    kill(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_what_changed_while_the_server_was_down_and_goes_on() {
    let broker = Broker::start();
    let dir = TempDir::new("observer");
    let server = serve(&broker, &dir.0, "always");
    let writer = ready_client(broker.port, "writer").await;
    let observer = ready_client(broker.port, "observer").await;
    let brief = SetOptions {
        expires: Some(Duration::from_millis(1500)),
        ..SetOptions::default()
    };
    writer.set("brief", "soon gone", brief).await.unwrap();
    writer
        .set("kept", "v1", SetOptions::default())
        .await
        .unwrap();
    let mut brief_changes = observer.observe("brief").await.unwrap();
    let mut kept_changes = observer.observe("kept").await.unwrap();

    kill(server);
    // `brief` expires while the server is down.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let server = serve(&broker, &dir.0, "always");

    // The observer learns that the server restarted and reads its keys back by itself.
    let gone = next_change(&mut brief_changes).await;
    assert_eq!((gone.value, gone.synthetic), (None, true));
    // And notifications keep coming.
    let writer = ready_client(broker.port, "writer-2").await;
    assert_eq!(writer.get("kept").await.unwrap().unwrap().value, "v1");
    writer
        .set("kept", "v2", SetOptions::default())
        .await
        .unwrap();
    let mut live = next_change(&mut kept_changes).await;
    // If the observation's first read was lost with the killed server, the read-back after the
    // restart reports the value the key held (the client cannot know it began with it).
    if live.value.as_deref() == Some(&b"v1"[..]) {
        assert!(live.synthetic, "{live:?}");
        live = next_change(&mut kept_changes).await;
    }
    assert_eq!(
        (live.value.as_deref(), live.synthetic),
        (Some(&b"v2"[..]), false)
    );
    kill(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_data_file_stops_the_server_naming_the_file_and_offset() {
    let broker = Broker::start();
    let dir = TempDir::new("damaged");
    let server = serve(&broker, &dir.0, "always");
    let c = ready_client(broker.port, "writer").await;
    for i in 0..20 {
        c.set(format!("k{i}"), "value", SetOptions::default())
            .await
            .unwrap();
    }
    kill(server);
    let path = dir.0.join("state.log");
    let good = std::fs::read(&path).unwrap();

    // A record in the middle damaged: the server does not start, and says where and what to do.
    let mut damaged = good.clone();
    let middle = good.len() / 2;
    damaged[middle] ^= 0x55;
    std::fs::write(&path, &damaged).unwrap();
    let stopped = serve_until_it_stops(&broker, &dir.0);
    let said = String::from_utf8_lossy(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!("{} is damaged at byte offset", path.display())),
        "{said}"
    );
    assert!(said.contains("truncate -s"), "{said}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        damaged,
        "the file is left as it was"
    );

    // A last record cut off (a crash mid-append, never acknowledged): the server starts with
    // everything before it.
    std::fs::write(&path, &good[..good.len() - 3]).unwrap();
    let server = serve(&broker, &dir.0, "always");
    let reader = ready_client(broker.port, "reader").await;
    let found = reader.scan("k*").await.unwrap();
    assert!(found.len() >= 19, "{} keys", found.len());
    kill(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_that_cannot_be_used_is_a_clear_error() {
    let broker = Broker::start();
    let dir = TempDir::new("unusable");
    // Under a regular file: no directory can be made there.
    let file = dir.0.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let stopped = serve_until_it_stops(&broker, &file.join("data"));
    let said = String::from_utf8_lossy(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(2), "{said}");
    assert!(said.contains("cannot create the data directory"), "{said}");
    assert!(
        said.contains(&file.join("data").display().to_string()),
        "{said}"
    );

    // A data directory another server uses.
    let first = serve(&broker, &dir.0.join("shared"), "always");
    ready_client(broker.port, "waiting-for-the-first").await;
    let stopped = serve_until_it_stops(&broker, &dir.0.join("shared"));
    let said = String::from_utf8_lossy(&stopped.stderr);
    assert!(said.contains("one server per data directory"), "{said}");
    kill(first);

    // A data file that is no log at all.
    std::fs::write(dir.0.join("state.log"), "not a log, a shopping list").unwrap();
    let stopped = serve_until_it_stops(&broker, &dir.0);
    let said = String::from_utf8_lossy(&stopped.stderr);
    assert!(said.contains("not an mqstore log"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_the_server_before_it_acknowledges_what_is_not_on_disk() {
    let broker = Broker::start();
    let dir = TempDir::new("full");
    let mount = dir.0.join("small");
    std::fs::create_dir_all(&mount).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&mount)
        .status()
        .expect("mount runs");
    assert!(
        mounted.success(),
        "mounting a small tmpfs (the test needs root)"
    );
    let mut server = serve_command(&broker, &mount, "always")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let c = ready_client(broker.port, "filler").await;
    let value = Bytes::from(vec![b'x'; 16 * 1024]);
    let mut acknowledged = Vec::new();
    for i in 0..64 {
        match c
            .set(format!("big/{i}"), value.clone(), SetOptions::default())
            .await
        {
            Ok(_) => acknowledged.push(i),
            Err(ClientError::Timeout(_) | ClientError::Disconnected) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(acknowledged.len() < 64, "the disk never filled up");
    let status = tokio::task::spawn_blocking(move || {
        let status = server.wait().unwrap();
        let mut said = String::new();
        std::io::Read::read_to_string(server.stderr.as_mut().unwrap(), &mut said).unwrap();
        (status, said)
    });
    let (status, said) = tokio::time::timeout(WAIT, status).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(2), "{said}");
    assert!(said.contains("No space left on device"), "{said}");
    assert!(
        said.contains(&mount.join("state.log").display().to_string()),
        "{said}"
    );

    // What was acknowledged is in the file: a server on a copy of it has every such key.
    let copy = TempDir::new("full-copy");
    std::fs::copy(mount.join("state.log"), copy.0.join("state.log")).unwrap();
    let _ = Command::new("umount").arg(&mount).status();
    let server = serve(&broker, &copy.0, "always");
    let reader = ready_client(broker.port, "reader").await;
    for i in acknowledged {
        let got = reader.get(format!("big/{i}")).await.unwrap();
        assert_eq!(got.map(|g| g.value), Some(value.clone()), "big/{i}");
    }
    kill(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_and_their_executions_survive_kill_9() {
    use mqstore_core::client::jobs::Update;
    use mqstore_core::jobs::{JobSpec, Status};
    use mqstore_net::jobs::StartNext;
    let broker = Broker::start();
    let dir = TempDir::new("jobs");
    let server = serve(&broker, &dir.0, "always");
    let operator = ready_client(broker.port, "operator").await;
    let spec = JobSpec::new(
        "fw-7",
        vec!["pump-1".into(), "pump-2".into()],
        serde_json::json!({ "version": "7" }),
    );
    operator.create_job(spec).await.unwrap();
    let pump = operator.jobs("pump-1").await.unwrap();
    let started = pump
        .start_next(StartNext::default())
        .await
        .unwrap()
        .expect("a job");
    assert_eq!(started.status, Status::InProgress);
    kill(server);

    let server = serve(&broker, &dir.0, "always");
    let operator = ready_client(broker.port, "operator-2").await;
    assert_eq!(
        operator.describe_job("fw-7").await.unwrap().targets.len(),
        2
    );
    let one = operator
        .describe_job_execution("fw-7", "pump-1")
        .await
        .unwrap();
    assert_eq!(
        (one.status, one.version_number),
        (Status::InProgress, started.version_number)
    );
    let two = operator
        .describe_job_execution("fw-7", "pump-2")
        .await
        .unwrap();
    assert_eq!(two.status, Status::Queued);
    // The devices carry on where they were.
    let pump = operator.jobs("pump-1").await.unwrap();
    let update = Update {
        job_id: "fw-7".into(),
        status: Some(Status::Succeeded),
        expected_version: Some(started.version_number),
        ..Update::default()
    };
    pump.update(update).await.unwrap();
    let pump2 = operator.jobs("pump-2").await.unwrap();
    let next = pump2
        .start_next(StartNext::default())
        .await
        .unwrap()
        .expect("a job");
    assert_eq!(next.job_id, "fw-7");
    kill(server);
}
