//! The blocking client (`mqstore_net::blocking`) against `mqstore serve` over a real mosquitto:
//! calls made from plain threads, many threads on one client, observations while no call is
//! made, a broker restart, TLS, and closing.

mod broker;
mod tls;

use std::sync::Arc;
use std::time::{Duration, Instant};

use broker::Mosquitto;
use bytes::Bytes;
use mqstore_core::client::jobs::{JobNotification, Update};
use mqstore_core::client::{CallOptions, ClientError};
use mqstore_core::codec::{Condition, Request};
use mqstore_core::commands::definitions::{DefinitionsAnswer, DefinitionsRequest};
use mqstore_core::commands::{CommandRequest, Mode, Status as CommandStatus};
use mqstore_core::jobs::Status;
use mqstore_net::BrokerConfig;
use mqstore_net::blocking::{self, Client};
use mqstore_net::client::{ClientOptions, Deleted, SetOptions};
use mqstore_net::jobs::{ExecutionFilter, StartNext};
use mqstore_server::{ServerConfig, ServerHandle, spawn};

/// How long a test waits for what must happen.
const WAIT: Duration = Duration::from_secs(10);

/// `mqstore serve` on the broker, on a runtime of its own (the clients under test have none).
struct Server {
    runtime: tokio::runtime::Runtime,
    handle: Option<ServerHandle>,
}

impl Server {
    fn start(broker: BrokerConfig, node_id: &str) -> Server {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let handle = runtime
            .block_on(spawn(ServerConfig::new(broker, node_id)))
            .expect("the server starts");
        Server {
            runtime,
            handle: Some(handle),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            let _ = self.runtime.block_on(handle.stop());
        }
    }
}

fn broker_at(port: u16) -> BrokerConfig {
    BrokerConfig {
        port,
        ..BrokerConfig::default()
    }
}

fn options(broker: BrokerConfig, id: &str) -> ClientOptions {
    let mut options = ClientOptions::new(id, "127.0.0.1", broker.port);
    options.broker = broker;
    options.timeout = Duration::from_secs(2);
    options
}

/// A blocking client once the server answers it (it may still be subscribing).
fn ready(broker: BrokerConfig, id: &str) -> Client {
    let client = Client::connect(options(broker, id)).expect("the client connects");
    let deadline = Instant::now() + WAIT;
    while let Err(ClientError::Timeout(_) | ClientError::Disconnected) = client.get("ready?") {
        assert!(Instant::now() < deadline, "the server never answered");
    }
    client
}

#[test]
fn blocking_calls_give_the_state_stores_answers() {
    let broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let client = ready(broker_at(broker.port), "blocking-calls");

    let set = client.set("k", "one", SetOptions::default()).unwrap();
    assert!(set.applied);
    let read = client.get("k").unwrap().expect("k is there");
    assert_eq!(&read.value[..], b"one");
    assert_eq!(read.version, set.version, "GET gives the SET's version");

    // NX on a key that exists is not applied, and changes nothing.
    let nx = SetOptions {
        condition: Condition::NotExists,
        ..SetOptions::default()
    };
    assert!(!client.set("k", "two", nx).unwrap().applied);
    assert_eq!(&client.get("k").unwrap().unwrap().value[..], b"one");

    client.set("k2", "x", SetOptions::default()).unwrap();
    let mut keys = client.scan("k*").unwrap();
    keys.sort();
    assert_eq!(keys, [Bytes::from_static(b"k"), Bytes::from_static(b"k2")]);

    assert_eq!(
        client.vdel("k", "not it", None).unwrap().outcome,
        Deleted::ValueMismatch
    );
    assert_eq!(
        client.vdel("k", "one", None).unwrap().outcome,
        Deleted::Deleted
    );
    assert_eq!(client.del("k2", None).unwrap().outcome, Deleted::Deleted);
    assert_eq!(client.del("k2", None).unwrap().outcome, Deleted::Absent);
    assert_eq!(client.get("k").unwrap(), None);
    client.close();
}

#[test]
fn many_threads_share_one_blocking_client() {
    let broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let client = ready(broker_at(broker.port), "blocking-threads");
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                for i in 0..100 {
                    let key = format!("t{t}");
                    let value = format!("{t}-{i}");
                    client
                        .set(key.clone(), value.clone(), SetOptions::default())
                        .unwrap();
                    // Each thread gets its own answer, never another's.
                    let read = client.get(key).unwrap().expect("the key is there");
                    assert_eq!(read.value, Bytes::from(value));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("every thread's calls succeed");
    }
    assert_eq!(client.scan("t*").unwrap().len(), 16);
}

#[test]
fn observations_arrive_while_no_call_is_made() {
    let broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let watcher = ready(broker_at(broker.port), "blocking-watcher");
    let writer = ready(broker_at(broker.port), "blocking-writer");
    let observation = watcher.observe("watched").unwrap();
    // The watcher makes no call from here on: its helper thread reads the changes.
    for value in ["a", "b", "c"] {
        writer.set("watched", value, SetOptions::default()).unwrap();
    }
    writer.del("watched", None).unwrap();
    let values: Vec<Option<Bytes>> = (0..4)
        .map(|_| {
            observation
                .next_timeout(WAIT)
                .expect("a change within 10 s")
                .value
        })
        .collect();
    assert_eq!(
        values,
        [
            Some(Bytes::from_static(b"a")),
            Some(Bytes::from_static(b"b")),
            Some(Bytes::from_static(b"c")),
            None
        ]
    );
    watcher.unobserve("watched").unwrap();
    writer.set("watched", "d", SetOptions::default()).unwrap();
    assert_eq!(
        observation.next_timeout(Duration::from_millis(300)),
        None,
        "no change after unobserve"
    );
}

#[test]
fn a_blocking_client_reconnects_and_keeps_observing_after_a_broker_restart() {
    let mut broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let watcher = ready(broker_at(broker.port), "blocking-restart");
    let observation = watcher.observe("kept").unwrap();

    broker.restart();
    // Calls fail while the broker is away, then succeed again without a new client.
    let deadline = Instant::now() + WAIT;
    while watcher.set("probe", "x", SetOptions::default()).is_err() {
        assert!(Instant::now() < deadline, "no answer after the restart");
        std::thread::sleep(Duration::from_millis(50));
    }
    let writer = ready(broker_at(broker.port), "blocking-restart-writer");
    writer.set("kept", "after", SetOptions::default()).unwrap();
    // The observation survived: the change arrives (as the notification, or found by the
    // read-back after the reconnect when it came first).
    let change = std::iter::from_fn(|| observation.next_timeout(WAIT))
        .find(|change| change.value.as_deref() == Some(&b"after"[..]));
    assert!(change.is_some(), "the change after the restart arrives");
}

#[test]
fn connecting_where_no_broker_listens_fails_at_once() {
    let port = broker::free_port();
    let started = Instant::now();
    let mut options = options(broker_at(port), "nobody-there");
    options.timeout = Duration::from_secs(5);
    match Client::connect(options) {
        Err(ClientError::Unreachable(reason)) => {
            assert!(reason.contains(&port.to_string()), "{reason}")
        }
        Err(other) => panic!("expected Unreachable, got {other}"),
        Ok(_) => panic!("connected to nothing"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a refused connection is reported, not waited out"
    );
}

#[test]
fn calls_after_close_fail_and_closing_twice_is_harmless() {
    let broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let client = Arc::new(ready(broker_at(broker.port), "blocking-close"));
    client.set("k", "v", SetOptions::default()).unwrap();
    client.close();
    assert!(matches!(client.get("k"), Err(ClientError::Disconnected)));
    // Closing twice, and dropping after closing, are harmless.
    client.close();
    drop(client);
}

#[test]
fn a_blocking_client_connects_over_tls_and_refuses_an_untrusted_broker() {
    use mqstore_net::TlsConfig;

    let files = tls::TlsFiles::new("blocking-tls");
    let broker = Mosquitto::start_tls(&files.ca, &files.cert, &files.key);
    let tls_broker = BrokerConfig {
        tls: Some(TlsConfig::from_files(Some(&files.ca), None, None).unwrap()),
        ..broker_at(broker.port)
    };
    let _server = Server::start(tls_broker.clone(), "node-blocking-tls");

    let client = ready(tls_broker.clone(), "blocking-tls");
    client.set("k", "over tls", SetOptions::default()).unwrap();
    let big = vec![b'x'; 100_000];
    client
        .set("big", big.clone(), SetOptions::default())
        .unwrap();
    assert_eq!(&client.get("k").unwrap().unwrap().value[..], b"over tls");
    assert_eq!(client.get("big").unwrap().unwrap().value, Bytes::from(big));
    client.close();

    let untrusted = BrokerConfig {
        tls: Some(TlsConfig {
            ca_pem: tls::untrusted_ca_pem(),
            client_auth: None,
        }),
        ..broker_at(broker.port)
    };
    match Client::connect(options(untrusted, "untrusted")) {
        Err(ClientError::Unreachable(reason)) => assert!(reason.contains("TLS"), "{reason}"),
        Err(other) => panic!("expected a TLS failure, got {other}"),
        Ok(_) => panic!("trusted a broker signed by an unknown authority"),
    }
}

#[test]
fn blocking_leases_are_exclusive_renewed_and_released() {
    let broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let first = ready(broker_at(broker.port), "blocking-lease-1");
    let second = ready(broker_at(broker.port), "blocking-lease-2");
    // A ttl of 600 ms: held for 2 s, the lease lives only by its renewals (made by whichever
    // thread reads the connection; here the helper, as no call is made).
    let ttl = Duration::from_millis(600);
    let lease = first
        .try_lease("lock", ttl)
        .unwrap()
        .expect("a free key is taken");
    std::thread::sleep(Duration::from_secs(2));
    assert!(lease.is_held(), "renewed while no call was made");
    assert!(
        second.try_lease("lock", ttl).unwrap().is_none(),
        "someone else holds it"
    );
    // A write guarded by the lease's fencing token is taken; once guarded, one without a
    // token is refused.
    let guarded = SetOptions {
        fencing_token: Some(lease.fencing_token().clone()),
        ..SetOptions::default()
    };
    assert!(first.set("orders", "mine", guarded).unwrap().applied);
    assert!(matches!(
        second.set("orders", "theirs", SetOptions::default()),
        Err(ClientError::Service(_))
    ));
    assert!(lease.release().unwrap(), "still held when released");
    let taken = second
        .lease("lock", ttl, Some(WAIT))
        .unwrap()
        .expect("free again after the release");
    assert!(taken.is_held());
}

#[test]
fn blocking_jobs_run_through_the_device_api_with_notifications() {
    let broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let operator = ready(broker_at(broker.port), "blocking-operator");
    let device = ready(broker_at(broker.port), "blocking-device");
    let jobs = device.jobs("pump-1").unwrap();

    operator
        .operate_json(&serde_json::json!({
            "op": "createJob", "jobId": "update-fw", "targets": ["pump-1"],
            "document": {"firmware": "2.1.0"},
        }))
        .unwrap();
    // The notification arrives while the device makes no call.
    let notification = jobs
        .next_notification(WAIT)
        .expect("a notification within 10 s");
    assert!(
        matches!(&notification, JobNotification::NotifyNext { thing, execution: Some(e) } if thing == "pump-1" && e.job_id == "update-fw")
            || matches!(&notification, JobNotification::Notify { thing, queued, .. } if thing == "pump-1" && queued.len() == 1),
        "{notification:?}"
    );
    let pending = jobs.pending().unwrap();
    assert_eq!(pending.queued_jobs.len(), 1);
    let started = jobs
        .start_next(StartNext::default())
        .unwrap()
        .expect("an execution starts");
    assert_eq!(started.job_id, "update-fw");
    assert_eq!(
        started.job_document,
        Some(serde_json::json!({"firmware": "2.1.0"}))
    );
    jobs.update(Update {
        job_id: "update-fw".into(),
        status: Some(Status::Succeeded),
        ..Update::default()
    })
    .unwrap();
    assert_eq!(
        jobs.describe("update-fw").unwrap().status,
        Status::Succeeded
    );
    assert_eq!(jobs.describe_next().unwrap(), None, "nothing pending");

    // A refusal is the service's, and changes nothing.
    let refused = jobs.update(Update {
        job_id: "no-such-job".into(),
        status: Some(Status::Succeeded),
        ..Update::default()
    });
    assert!(
        matches!(&refused, Err(ClientError::Jobs { code, .. }) if code == "ResourceNotFound"),
        "{refused:?}"
    );
    let described = operator
        .operate_json(&serde_json::json!({"op": "describeJob", "jobId": "update-fw"}))
        .unwrap()
        .into_json();
    assert_eq!(described["status"], "COMPLETED", "{described}");

    // The operator's typed calls: the job and its execution listed and described, then the
    // execution deleted (a finished one needs no force) and gone.
    let listed = operator.list_jobs().unwrap();
    assert_eq!(
        listed.iter().map(|j| j.job_id.as_str()).collect::<Vec<_>>(),
        ["update-fw"]
    );
    let executions = operator
        .list_job_executions(ExecutionFilter {
            thing: Some("pump-1".into()),
            ..ExecutionFilter::default()
        })
        .unwrap();
    assert_eq!(executions.len(), 1, "{executions:?}");
    assert_eq!(
        (executions[0].job_id.as_str(), executions[0].status),
        ("update-fw", Status::Succeeded)
    );
    let execution = operator
        .describe_job_execution("update-fw", "pump-1")
        .unwrap();
    assert_eq!(execution.status, Status::Succeeded);
    operator
        .delete_job_execution("update-fw", "pump-1", false)
        .unwrap();
    let gone = operator.describe_job_execution("update-fw", "pump-1");
    assert!(
        matches!(&gone, Err(ClientError::Jobs { code, .. }) if code == "ResourceNotFound"),
        "{gone:?}"
    );
}

#[test]
fn a_blocking_shadow_gets_updates_deletes_and_hears_its_notifications() {
    use mqstore_core::shadow::Stream;
    let broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let app = ready(broker_at(broker.port), "blocking-app");
    let device = ready(broker_at(broker.port), "blocking-lamp");
    let lamp = device.shadow("lamp-1", None).unwrap();
    assert_eq!((lamp.thing(), lamp.name()), ("lamp-1", None));
    let missing = lamp.get();
    assert!(
        matches!(&missing, Err(ClientError::Status { status: 404, .. })),
        "{missing:?}"
    );
    let theirs = app.shadow("lamp-1", None).unwrap();
    let accepted = theirs
        .update(serde_json::json!({"desired": {"on": true}}), None)
        .unwrap();
    assert_eq!(accepted["version"], 1);
    let delta = lamp.next_notification(Duration::from_secs(10)).unwrap();
    assert_eq!(
        (delta.stream, &delta.body["state"]),
        (Stream::Delta, &serde_json::json!({"on": true}))
    );
    let documents = lamp.next_notification(Duration::from_secs(10)).unwrap();
    assert_eq!(documents.stream, Stream::Documents);
    let stale = lamp.update(serde_json::json!({"reported": {"on": true}}), Some(7));
    assert!(
        matches!(&stale, Err(ClientError::Status { status: 409, .. })),
        "{stale:?}"
    );
    lamp.update(serde_json::json!({"reported": {"on": true}}), Some(1))
        .unwrap();
    assert_eq!(lamp.get().unwrap()["version"], 2);
    assert_eq!(theirs.delete().unwrap()["version"], 2);
    assert!(lamp.get().is_err());
}

#[test]
fn blocking_commands_are_sent_followed_and_time_out() {
    let broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let caller = ready(broker_at(broker.port), "blocking-caller");
    let records = caller.watch_commands().unwrap();

    // No device listens on this topic: an awaited command times out…
    let awaited = CommandRequest {
        timeout_ms: 300,
        ..CommandRequest::new("nobody/1/cmd", "{}")
    };
    let failed = caller.command(&awaited);
    assert!(
        matches!(failed, Err(ClientError::CommandTimedOut { .. })),
        "{failed:?}"
    );
    // …and a detached one returns its id at once; its record ends timed out.
    let detached = CommandRequest {
        timeout_ms: 300,
        mode: Mode::Detached,
        ..CommandRequest::new("nobody/2/cmd", "{}")
    };
    let sent = caller.command(&detached).unwrap();
    assert_eq!(sent.status, CommandStatus::Sent);
    let deadline = Instant::now() + WAIT;
    while caller.command_status(&sent.id).unwrap().status != CommandStatus::TimedOut {
        assert!(
            Instant::now() < deadline,
            "the detached command never timed out"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The watch saw the detached command's record change (while no call was made for it).
    let seen = std::iter::from_fn(|| records.recv_timeout(WAIT).ok())
        .find(|record| record.id == sent.id && record.status == CommandStatus::TimedOut);
    assert!(seen.is_some(), "the watch saw the time-out");
    let unknown = caller.command_status("00000000-0000-4000-8000-000000000000");
    assert!(unknown.is_err(), "{unknown:?}");
    let listed = caller
        .command_definitions(&DefinitionsRequest::List)
        .unwrap();
    assert!(
        matches!(listed, DefinitionsAnswer::Commands { .. }),
        "{listed:?}"
    );
}

#[test]
fn a_short_call_times_out_while_another_thread_waits_on_a_longer_one() {
    // No server: nothing answers. The first call (10 s) makes its thread the reader; the
    // second (300 ms) must time out on its own deadline, not when the reader next wakes.
    let broker = Mosquitto::start();
    let mut long = options(broker_at(broker.port), "blocking-deadlines");
    long.timeout = Duration::from_secs(10);
    let client = Client::connect(long).unwrap();
    let waiting = {
        let client = client.clone();
        std::thread::spawn(move || client.get("slow"))
    };
    std::thread::sleep(Duration::from_millis(200));
    let short = CallOptions {
        timeout_ms: Some(300),
        ..CallOptions::default()
    };
    let result = client.call(&Request::Get { key: "fast".into() }, &short);
    assert!(
        matches!(result, Err(ClientError::Timeout(300))),
        "{result:?}"
    );
    assert!(
        !waiting.is_finished(),
        "the short call ended before the long one"
    );
    client.close();
    assert!(
        waiting.join().unwrap().is_err(),
        "closing ends the long call"
    );
}

#[test]
fn a_publish_the_broker_refuses_fails_that_call_only() {
    // mosquitto refuses a publish over its message_size_limit with PUBACK reason code 0x95,
    // which the blocking link reads by hand.
    let broker = Mosquitto::start_config("message_size_limit 50000\n");
    let _server = Server::start(broker_at(broker.port), "node-refused");
    let client = ready(broker_at(broker.port), "blocking-refused");
    let refused = client.set("big", vec![b'x'; 60_000], SetOptions::default());
    assert!(
        matches!(refused, Err(ClientError::PublishRefused { code: 0x95 })),
        "{refused:?}"
    );
    assert_eq!(client.get("big").unwrap(), None, "nothing was applied");
    assert!(
        client
            .set("small", "x", SetOptions::default())
            .unwrap()
            .applied
    );
    client.close();
}

#[test]
fn scan_pages_fan_outs_and_operator_listings_on_the_blocking_client() {
    let broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-pages");
    let client = ready(broker_at(broker.port), "blocking-pages");
    for i in 0..3 {
        client
            .set(format!("p{i}"), "v", SetOptions::default())
            .unwrap();
    }
    let (mut keys, mut token) = (Vec::new(), None);
    loop {
        let (page, next) = client.scan_page(Bytes::from_static(b"p*"), token).unwrap();
        keys.extend(page);
        match next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    keys.sort();
    assert_eq!(keys, ["p0", "p1", "p2"].map(|k| Bytes::from(k.as_bytes())));

    // No device listens: the one-way commands are delivered, the awaited one times out;
    // each result comes once.
    let requests: Vec<CommandRequest> = [
        ("dev/a/cmd", Mode::OneWay),
        ("dev/b/cmd", Mode::OneWay),
        ("dev/c/cmd", Mode::Await),
    ]
    .into_iter()
    .map(|(topic, mode)| CommandRequest {
        timeout_ms: 300,
        mode,
        ..CommandRequest::new(topic, "{}")
    })
    .collect();
    let mut fan_out = client.command_many(requests);
    let mut results = Vec::new();
    for (topic, result) in fan_out.by_ref() {
        results.push((topic, result.is_ok()));
    }
    results.sort();
    assert_eq!(
        results,
        [
            ("dev/a/cmd".to_owned(), true),
            ("dev/b/cmd".to_owned(), true),
            ("dev/c/cmd".to_owned(), false)
        ]
    );
    assert_eq!(fan_out.summary().succeeded, 2);
    assert_eq!(fan_out.summary().timed_out, 1);
    assert!(fan_out.next().is_none(), "all results were given");

    assert!(client.list_jobs().unwrap().is_empty());
    client.close();
}

#[test]
fn an_interrupted_call_gives_up_and_the_client_goes_on() {
    // No server: the call would wait its whole timeout; the check gives it up.
    let broker = Mosquitto::start();
    let mut slow = options(broker_at(broker.port), "blocking-interrupted");
    slow.timeout = Duration::from_secs(30);
    let client = Client::connect(slow).unwrap();
    let started = Instant::now();
    fn give_up() -> bool {
        true
    }
    let (result, interrupted) = blocking::interruptible(give_up, || client.get("k"));
    assert!(interrupted);
    assert!(matches!(result, Err(ClientError::Timeout(_))), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "given up early"
    );
    // Not interrupted: the flag says so, and the client still works (a server comes).
    fn go_on() -> bool {
        false
    }
    let _server = Server::start(broker_at(broker.port), "node-interrupted");
    let (result, interrupted) = blocking::interruptible(go_on, || {
        let deadline = Instant::now() + WAIT;
        loop {
            match client.get("k") {
                Err(ClientError::Timeout(_)) if Instant::now() < deadline => continue,
                other => return other,
            }
        }
    });
    assert!(!interrupted);
    assert_eq!(result.unwrap(), None);
    client.close();
}

/// A loop of the test's own for a driven client: poll(2) on what the driver asks, then drive,
/// until `done` says so (or the test's patience ends).
fn drive_until(driver: &blocking::Driver, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    let mut interest = driver.drive();
    while !done() {
        assert!(Instant::now() < deadline, "the driven calls never finished");
        let mut fds = vec![libc::pollfd {
            fd: driver.wake_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some((fd, _)) = interest.socket {
            let write = if interest.write { libc::POLLOUT } else { 0 };
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN | write,
                revents: 0,
            });
        }
        let timeout = interest.deadline.map_or(100, |at| {
            (at.saturating_duration_since(Instant::now()).as_millis() as i32).clamp(0, 100)
        });
        // SAFETY: `fds` is a live array of pollfd for the call's duration.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        interest = driver.drive();
    }
}

#[test]
fn a_driven_client_finishes_its_calls_on_the_loop_that_drives_it() {
    let mut broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let (client, driver) =
        Client::connect_driven(options(broker_at(broker.port), "driven")).unwrap();
    let results = Arc::new(std::sync::Mutex::new(Vec::new()));
    let loop_thread = std::thread::current().id();
    let start = |key: &'static str, request: Request| {
        let results = results.clone();
        client.start(
            move |session, now| session.call(&request, &CallOptions::default(), now),
            Box::new(move |finished| {
                let on_loop = std::thread::current().id() == loop_thread;
                results.lock().unwrap().push((key, finished, on_loop));
            }),
        );
    };
    let set = |value: &'static str| {
        Request::Set(mqstore_core::codec::SetRequest {
            key: Bytes::from_static(b"driven"),
            value: mqstore_core::codec::Bulk::new(Bytes::from_static(value.as_bytes())),
            condition: Condition::Always,
            expires_in_ms: None,
        })
    };
    // The server may still be subscribing: ask until it answers.
    loop {
        start(
            "probe",
            Request::Get {
                key: Bytes::from_static(b"driven"),
            },
        );
        drive_until(&driver, || !results.lock().unwrap().is_empty());
        if results.lock().unwrap().pop().unwrap().1.is_ok() {
            break;
        }
    }
    // Several calls in flight at once, all answered on this thread.
    start("set", set("one"));
    start(
        "get",
        Request::Get {
            key: Bytes::from_static(b"driven"),
        },
    );
    drive_until(&driver, || results.lock().unwrap().len() == 2);
    let finished = std::mem::take(&mut *results.lock().unwrap());
    for (key, result, on_loop) in &finished {
        assert!(on_loop, "{key}'s result was delivered on another thread");
        assert!(result.is_ok(), "{key} failed: {result:?}");
    }
    let get = &finished.iter().find(|(key, ..)| *key == "get").unwrap().1;
    let Ok(Some(mqstore_core::session::Completion::Store(answer))) = get else {
        panic!("GET's completion: {get:?}");
    };
    let value = answer.clone().into_versioned().map(|v| v.value);
    assert_eq!(value.as_deref(), Some(&b"one"[..]));

    // After a broker restart the helper reconnects and wakes the loop, which drives the new
    // socket (another connection number).
    let before = driver.interest().socket.unwrap().1;
    broker.restart();
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "no answer after the restart");
        start(
            "again",
            Request::Get {
                key: Bytes::from_static(b"driven"),
            },
        );
        drive_until(&driver, || !results.lock().unwrap().is_empty());
        if results.lock().unwrap().pop().unwrap().1.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(driver.interest().socket.unwrap().1 > before);

    // Closed: a call started now fails at once, on the starting thread.
    client.close();
    start(
        "closed",
        Request::Get {
            key: Bytes::from_static(b"driven"),
        },
    );
    let (_, result, _) = results.lock().unwrap().pop().unwrap();
    assert!(
        matches!(result, Err(ClientError::Disconnected)),
        "{result:?}"
    );
}

#[test]
fn a_driven_call_times_out_at_the_deadline_its_driver_reports() {
    // No server: nothing answers, so only the deadline the driver reports ends the call.
    let broker = Mosquitto::start();
    let mut options = options(broker_at(broker.port), "driven-timeout");
    options.timeout = Duration::from_millis(300);
    let (client, driver) = Client::connect_driven(options).unwrap();
    let result = Arc::new(std::sync::Mutex::new(None));
    let started = Instant::now();
    let delivered = result.clone();
    client.start_call(
        blocking::calls::get(Bytes::from_static(b"nobody")),
        move |got| {
            *delivered.lock().unwrap() = Some(got);
        },
    );
    let deadline = driver
        .interest()
        .deadline
        .expect("a call in flight has a deadline");
    assert!(
        deadline <= started + Duration::from_millis(400),
        "{deadline:?}"
    );
    drive_until(&driver, || result.lock().unwrap().is_some());
    let got = result.lock().unwrap().take().unwrap();
    assert!(matches!(got, Err(ClientError::Timeout(_))), "{got:?}");
}
