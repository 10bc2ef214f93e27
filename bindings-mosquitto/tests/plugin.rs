//! The plugin loaded into a real mosquitto 2.0 (no `mqstore serve` anywhere): the state store
//! answers from inside the broker, notifications reach clients that never subscribed, keys
//! expire on the broker's tick, jobs roll out on it, the data directory keeps them (and the
//! stored commands), and hostile requests leave the broker serving.

#[path = "../../cli/tests/broker/mod.rs"]
mod broker;

use std::time::Duration;

use broker::Broker;
use bytes::Bytes;
use mqstore_core::codec::{
    Bulk, Request, Response, SetRequest, decode_notification, decode_response,
};
use mqstore_core::jobs::JobSpec;
use mqstore_net::client::{Client, ClientOptions, SetOptions};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::mqttbytes::v5::PublishProperties;
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

fn broker_with_plugin() -> Broker {
    Broker::start_config(&format!(
        "plugin {}\nplugin_opt_node_id inside\n",
        broker::plugin_path().display()
    ))
}

async fn client(broker: &Broker, id: &str) -> Client {
    let mut options = ClientOptions::new(id, "127.0.0.1", broker.port);
    options.timeout = Duration::from_secs(3);
    Client::connect(options).await.expect("the client connects")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_store_answers_from_inside_mosquitto() {
    let broker = broker_with_plugin();
    let c = client(&broker, "plain").await;
    let set = c.set("k", "v1", SetOptions::default()).await.unwrap();
    assert_eq!(set.version.as_ref().unwrap().node.as_ref(), "inside");
    let got = c.get("k").await.unwrap().unwrap();
    assert_eq!((got.value, got.version), (Bytes::from("v1"), set.version));
    let nx = SetOptions {
        condition: mqstore_core::codec::Condition::NotExists,
        ..SetOptions::default()
    };
    assert!(c.set("k", "v2", nx).await.unwrap().version.is_some());
    assert_eq!(c.get("k").await.unwrap().unwrap().value, "v1");
    for i in 0..5 {
        c.set(format!("scan/{i}"), "x", SetOptions::default())
            .await
            .unwrap();
    }
    assert_eq!(c.scan("scan/*").await.unwrap().len(), 5);
    let deleted = c.del("k", None).await.unwrap();
    assert_eq!(deleted.outcome, mqstore_core::client::Deleted::Deleted);
    assert_eq!(c.get("k").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_and_expiry_reach_an_observer() {
    let broker = broker_with_plugin();
    let writer = client(&broker, "writer").await;
    let observer = client(&broker, "observer").await;
    let mut changes = observer.observe("watched").await.unwrap();
    let brief = SetOptions {
        expires: Some(Duration::from_millis(300)),
        ..SetOptions::default()
    };
    writer.set("watched", "soon gone", brief).await.unwrap();
    let set = tokio::time::timeout(WAIT, changes.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(set.value.as_deref(), Some(&b"soon gone"[..]));
    // Expired by the plugin on the broker's tick.
    let gone = tokio::time::timeout(WAIT, changes.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((gone.value, gone.synthetic), (None, false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyspace_events_reach_their_subscribers_from_inside_mosquitto() {
    let broker = broker_with_plugin();
    let writer = client(&broker, "ks-writer").await;
    let browser = client(&broker, "ks-browser").await;
    let mut events = browser.watch_keyspace().await.unwrap();
    let brief = SetOptions {
        expires: Some(Duration::from_millis(300)),
        ..SetOptions::default()
    };
    writer
        .set("made", "v", SetOptions::default())
        .await
        .unwrap();
    writer.del("made", None).await.unwrap();
    writer.set("brief", "v", brief).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let event = tokio::time::timeout(WAIT, events.next())
            .await
            .unwrap()
            .unwrap();
        seen.push((event.key, event.created));
    }
    let key = |k: &'static str| Bytes::from_static(k.as_bytes());
    assert_eq!(
        seen,
        [
            (key("made"), true),
            (key("made"), false),
            (key("brief"), true),
            (key("brief"), false), // expired by the plugin
        ]
    );
}

/// A raw MQTT 5 connection that subscribes to its response topic only.
async fn raw(port: u16, id: &str) -> (AsyncClient, EventLoop) {
    let mut options = MqttOptions::new(id, "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(30));
    let (client, mut events) = AsyncClient::new(options, 64);
    client
        .subscribe(format!("{id}/response"), QoS::AtLeastOnce)
        .await
        .unwrap();
    loop {
        if let Event::Incoming(Packet::SubAck(_)) = events.poll().await.unwrap() {
            return (client, events);
        }
    }
}

/// Sends a request on the standard topic as `id` (claiming to be `id` in `__srcId`) and
/// waits for the next publish.
async fn call(
    raw: &mut (AsyncClient, EventLoop),
    id: &str,
    request: &Request,
) -> rumqttc::v5::mqttbytes::v5::Publish {
    call_claiming(raw, id, id, request).await
}

/// Sends a request as `id` that claims to be from `claimed`.
async fn call_claiming(
    raw: &mut (AsyncClient, EventLoop),
    id: &str,
    claimed: &str,
    request: &Request,
) -> rumqttc::v5::mqttbytes::v5::Publish {
    let properties = PublishProperties {
        response_topic: Some(format!("{id}/response")),
        correlation_data: Some(Bytes::from_static(b"0123456789abcdef")),
        user_properties: vec![
            ("__srcId".into(), claimed.into()),
            ("__ts".into(), format!("{:015}:00000:{id}", now_ms())),
        ],
        ..PublishProperties::default()
    };
    send(&raw.0, request.to_bytes(), properties).await;
    next_publish(&mut raw.1).await
}

/// Publishes a request on the standard request topic.
async fn send(client: &AsyncClient, payload: Bytes, properties: PublishProperties) {
    let topic = mqstore_core::topics::INVOKE;
    client
        .publish_with_properties(topic, QoS::AtLeastOnce, false, payload, properties)
        .await
        .unwrap();
}

/// Publishes `payload` on `topic` (QoS 1, no properties).
async fn send_to(client: &AsyncClient, topic: &str, payload: &[u8]) {
    client
        .publish(topic, QoS::AtLeastOnce, false, payload.to_vec())
        .await
        .unwrap();
}

async fn next_publish(events: &mut EventLoop) -> rumqttc::v5::mqttbytes::v5::Publish {
    tokio::time::timeout(WAIT, async {
        loop {
            if let Event::Incoming(Packet::Publish(p)) = events.poll().await.unwrap() {
                return p;
            }
        }
    })
    .await
    .expect("a publish within 10 s")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_subscribes_to_its_notifications_gets_them() {
    let broker = broker_with_plugin();
    // Like the Azure SDK for Go: KEYNOTIFY, but no subscription to the notification topic.
    let mut raw = raw(broker.port, "unsubscribed").await;
    let notify = Request::KeyNotify {
        key: Bytes::from_static(b"door"),
        stop: false,
    };
    let answer = call(&mut raw, "unsubscribed", &notify).await;
    assert_eq!(decode_response(&answer.payload).unwrap(), Response::Ok);
    let writer = client(&broker, "writer").await;
    writer
        .set("door", "open", SetOptions::default())
        .await
        .unwrap();
    let notification = next_publish(&mut raw.1).await;
    let topic = String::from_utf8_lossy(&notification.topic).into_owned();
    assert!(topic.contains("/command/notify/"), "{topic}");
    let decoded = decode_notification(&notification.payload).unwrap();
    assert!(
        matches!(decoded, mqstore_core::codec::Notification::Set(ref v) if v.value() == "open"),
        "{decoded:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_leave_the_broker_serving() {
    let broker = broker_with_plugin();
    let raw = raw(broker.port, "hostile").await;
    let set = Request::Set(SetRequest::new(
        Bytes::from_static(b"h"),
        Bulk::new(Bytes::from_static(b"x")),
    ));
    // A wildcard response topic: not answered (2.0.11 would publish to a topic named `r/#`).
    let properties = PublishProperties {
        response_topic: Some("r/#".into()),
        correlation_data: Some(Bytes::from_static(b"c")),
        ..PublishProperties::default()
    };
    send(&raw.0, set.to_bytes(), properties).await;
    // A retained request is not kept (a later subscriber to the request topic gets nothing),
    // and garbage is answered with an error or not at all.
    let requests: [(bool, &'static [u8]); 2] = [
        (true, b"*1\r\n$3\r\nGET\r\n"),
        (false, b"\xff\x00 not RESP"),
    ];
    for (retain, payload) in requests {
        let topic = mqstore_core::topics::INVOKE;
        let payload = Bytes::from_static(payload);
        raw.0
            .publish(topic, QoS::AtLeastOnce, retain, payload)
            .await
            .unwrap();
    }
    // The broker still serves, and the plugin still answers.
    let c = client(&broker, "after").await;
    c.set("after", "fine", SetOptions::default()).await.unwrap();
    assert_eq!(c.get("after").await.unwrap().unwrap().value, "fine");
    let (late, mut late_events) = {
        let mut options = MqttOptions::new("late", "127.0.0.1", broker.port);
        options.set_keep_alive(Duration::from_secs(30));
        AsyncClient::new(options, 16)
    };
    late.subscribe(mqstore_core::topics::INVOKE, QoS::AtLeastOnce)
        .await
        .unwrap();
    let retained = tokio::time::timeout(Duration::from_millis(1500), async {
        loop {
            if let Event::Incoming(Packet::Publish(p)) = late_events.poll().await.unwrap() {
                return p;
            }
        }
    })
    .await;
    assert!(retained.is_err(), "a request was retained: {retained:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_rules_hold_against_a_client_that_lies_in_its_src_id() {
    let broker = Broker::start_config(&format!(
        "plugin {}\nplugin_opt_access_rule admin * rw\nplugin_opt_access_rule sensor-* sensors/* rw\n",
        broker::plugin_path().display()
    ));
    let set = |key: &'static [u8]| {
        Request::Set(SetRequest::new(
            Bytes::from_static(key),
            Bulk::new(Bytes::from_static(b"x")),
        ))
    };
    let refused = |answer: &rumqttc::v5::mqttbytes::v5::Publish| {
        let response = decode_response(&answer.payload).unwrap();
        matches!(
            response,
            Response::Error(mqstore_core::ServiceError::NotAuthorized)
        )
    };
    let mut sensor = raw(broker.port, "sensor-1").await;
    // Its own keys: allowed.
    let own = call(&mut sensor, "sensor-1", &set(b"sensors/1")).await;
    assert_eq!(decode_response(&own.payload).unwrap(), Response::Ok);
    // Another's keys as itself: the rules refuse.
    assert!(refused(
        &call(&mut sensor, "sensor-1", &set(b"config/x")).await
    ));
    // Claiming to be the admin: the broker says who it is; refused.
    assert!(refused(
        &call_claiming(&mut sensor, "sensor-1", "admin", &set(b"config/x")).await
    ));
    let mut admin = raw(broker.port, "admin").await;
    let allowed = call(&mut admin, "admin", &set(b"config/x")).await;
    assert_eq!(decode_response(&allowed.payload).unwrap(), Response::Ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_data_directory_mosquitto_killed_and_started_again_has_the_data_back() {
    let dir = std::env::temp_dir().join(format!("mqstore-plugin-data-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut broker = Broker::start_config(&format!(
        "plugin {}\nplugin_opt_node_id inside\nplugin_opt_data_dir {}\nplugin_opt_fsync always\n",
        broker::plugin_path().display(),
        dir.display()
    ));
    let writer = client(&broker, "writer").await;
    let observer = client(&broker, "observer").await;
    let mut versions = Vec::new();
    for i in 0..50 {
        let set = writer
            .set(
                format!("durable/{i}"),
                format!("v{i}"),
                SetOptions::default(),
            )
            .await
            .unwrap();
        versions.push(set.version.unwrap());
    }
    let mut changes = observer.observe("watched").await.unwrap();
    let job = JobSpec::new(
        "durable-job",
        vec!["T1".into(), "T2".into()],
        json!({"v": 2}),
    );
    writer.create_job(job).await.unwrap();
    let heat = json!({"commandId": "heat", "payload": {"content": "{\"to\": 80}"}});
    let heat: mqstore_core::commands::definitions::Definition =
        serde_json::from_value(heat).unwrap();
    writer.define_command(&heat).await.unwrap();

    broker.restart(); // SIGKILL, then the same configuration on the same port
    for (i, version) in versions.iter().enumerate() {
        let got = tokio::time::timeout(WAIT, async {
            loop {
                if let Ok(Some(got)) = writer.get(format!("durable/{i}")).await {
                    return got;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("the key is back");
        assert_eq!(
            (got.value, got.version.as_ref()),
            (Bytes::from(format!("v{i}")), Some(version))
        );
    }
    let after = writer
        .set("durable/0", "after", SetOptions::default())
        .await
        .unwrap();
    assert!(after.version.unwrap() > *versions.iter().max().unwrap());
    // The job is back, its executions queued.
    let job = writer.describe_job("durable-job").await.unwrap();
    assert_eq!(job.targets, ["T1", "T2"]);
    assert_eq!(job.job_process_details.number_of_queued_things, 2);
    // The stored command is back.
    let heat = writer.command_definition("heat").await.unwrap();
    assert_eq!(heat.command_id, "heat");
    // The observer saw the new epoch in the presence and registered again by itself.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        writer
            .set("watched", "live", SetOptions::default())
            .await
            .unwrap();
        match tokio::time::timeout(Duration::from_millis(500), changes.next()).await {
            Ok(Some(change)) if change.value.as_deref() == Some(&b"live"[..]) => break,
            _ => assert!(
                tokio::time::Instant::now() < deadline,
                "no notification after the restart"
            ),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_valgrind_the_plugin_makes_no_memory_errors_and_leaks_nothing() {
    let port = broker::free_port();
    let dir = std::env::temp_dir().join(format!("mqstore-plugin-valgrind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("mosquitto.conf");
    std::fs::write(
        &config,
        format!(
            "{}listener {port} 127.0.0.1\nallow_anonymous true\nplugin {}\nplugin_opt_node_id vg\n",
            broker::mosquitto_user(),
            broker::plugin_path().display()
        ),
    )
    .unwrap();
    let broker = std::process::Command::new("valgrind")
        .args(["--error-exitcode=99", "--leak-check=full"])
        .args(["--errors-for-leak-kinds=definite,indirect,possible"])
        .args(["--show-leak-kinds=definite,indirect,possible"])
        .arg("/usr/sbin/mosquitto")
        .arg("-c")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("valgrind runs (apt-get install valgrind)");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "mosquitto under valgrind did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    {
        // Every path of the plugin: requests, notifications, expiry, hostile input, goodbyes.
        let mut options = ClientOptions::new("vg-client", "127.0.0.1", port);
        options.timeout = Duration::from_secs(10);
        let c = Client::connect(options).await.unwrap();
        let mut changes = c.observe("vg/watched").await.unwrap();
        let brief = SetOptions {
            expires: Some(Duration::from_millis(200)),
            ..SetOptions::default()
        };
        c.set("vg/watched", "x", brief).await.unwrap();
        for _ in 0..2 {
            tokio::time::timeout(Duration::from_secs(30), changes.next())
                .await
                .unwrap();
        }
        assert_eq!(c.scan("vg/*").await.unwrap().len(), 0);
        let mut raw = raw(port, "vg-raw").await;
        let notify = Request::KeyNotify {
            key: Bytes::from_static(b"vg/door"),
            stop: false,
        };
        call(&mut raw, "vg-raw", &notify).await;
        let wildcard = PublishProperties {
            response_topic: Some("r/#".into()),
            correlation_data: Some(Bytes::from_static(b"c")),
            ..PublishProperties::default()
        };
        send(&raw.0, Bytes::from_static(b"\xff garbage"), wildcard).await;
        // Refused requests: another client's id, a notification topic too long to publish.
        let get = Request::Get {
            key: Bytes::from_static(b"vg/door"),
        };
        call_claiming(&mut raw, "vg-raw", "someone-else", &get).await;
        let long = Request::KeyNotify {
            key: Bytes::from(vec![b'k'; 33_000]),
            stop: false,
        };
        call(&mut raw, "vg-raw", &long).await;
        // A QoS 2 request (remembered against copies).
        let properties = PublishProperties {
            response_topic: Some("vg-raw/response".into()),
            correlation_data: Some(Bytes::from_static(b"qos2-0123456789a")),
            user_properties: vec![("__srcId".into(), "vg-raw".into())],
            ..PublishProperties::default()
        };
        raw.0
            .publish_with_properties(
                mqstore_core::topics::INVOKE,
                QoS::ExactlyOnce,
                false,
                get.to_bytes(),
                properties,
            )
            .await
            .unwrap();
        next_publish(&mut raw.1).await;
        c.set("vg/door", "open", SetOptions::default())
            .await
            .unwrap();
        next_publish(&mut raw.1).await;
        // Jobs: the operator API, a device's requests, a refusal, garbage.
        let job = JobSpec::new("vg-job", vec!["vg-thing".into()], json!({"v": 1}));
        c.create_job(job).await.unwrap();
        let jobs = c.jobs("vg-thing").await.unwrap();
        jobs.start_next(Default::default()).await.unwrap();
        assert!(c.describe_job("vg-none").await.is_err());
        send_to(&raw.0, "$aws/things/vg-thing/jobs/get", b"not json").await;
        c.close().await;
    }
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(broker.id().to_string())
        .status();
    let output = tokio::task::spawn_blocking(move || broker.wait_with_output().unwrap())
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(said.contains("ERROR SUMMARY: 0 errors"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `mqstore serve` with its state store beside the plugin would answer every request a second
/// time: the plugin sees the server's presence and says what to do, and the server sees the
/// plugin's (which takes every request: even a node in a share group clashes with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_store_server_beside_the_plugin_is_told_to_leave_it_alone() {
    use mqstore_net::BrokerConfig;
    use mqstore_server::{ServerConfig, spawn};
    let broker = broker_with_plugin();
    let config = ServerConfig {
        share_group: Some("g".into()),
        ..ServerConfig::new(
            BrokerConfig {
                port: broker.port,
                ..BrokerConfig::default()
            },
            "beside",
        )
    };
    let server = spawn(config).await.unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while !server
        .metrics
        .render()
        .lines()
        .any(|l| l == "mqstore_clashing_nodes 1")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the server does not count the plugin:\n{}",
            server.metrics.render()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deadline = std::time::Instant::now() + WAIT;
    // It serves everything the plugin serves: every flag that leaves a service to one of them.
    let warning = "mqstore: `mqstore serve` (node beside) serves the state store, jobs and \
                   commands beside this plugin, as the plugin does, so each such request gets \
                   two answers: run it with --no-state-store --no-jobs --no-commands (or set \
                   plugin_opt_jobs false, plugin_opt_commands false here)";
    while !broker.log().contains(warning) {
        assert!(
            std::time::Instant::now() < deadline,
            "no warning:\n{}",
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop().await.unwrap();
}

/// A job for 2,000 things rolls out on the broker's tick: every thing gets its execution,
/// and a device among them starts and ends its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_rolls_out_to_every_thing_from_inside_mosquitto() {
    let broker = broker_with_plugin();
    let operator = client(&broker, "operator").await;
    let device = client(&broker, "device-1999").await;
    let things: Vec<String> = (0..2_000).map(|i| format!("thing-{i}")).collect();
    operator
        .create_job(JobSpec::new("fleet", things, json!({"firmware": "2.0"})))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let job = operator.describe_job("fleet").await.unwrap();
        if job.job_process_details.number_of_queued_things == 2_000 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rolled out to {} things",
            job.job_process_details.number_of_queued_things
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let jobs = device.jobs("thing-1999").await.unwrap();
    let started = jobs
        .start_next(Default::default())
        .await
        .unwrap()
        .expect("its execution");
    assert_eq!(started.job_document, Some(json!({"firmware": "2.0"})));
    let done = mqstore_core::client::jobs::Update {
        job_id: "fleet".into(),
        status: Some(mqstore_core::jobs::Status::Succeeded),
        ..Default::default()
    };
    jobs.update(done).await.unwrap();
    let job = operator.describe_job("fleet").await.unwrap();
    assert_eq!(job.job_process_details.number_of_succeeded_things, 1);
}

/// With `plugin_opt_jobs false` the plugin leaves jobs alone (a `mqstore serve` beside it may
/// serve them): nobody answers the operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_jobs_off_the_plugin_answers_no_jobs_request() {
    let broker = Broker::start_config(&format!(
        "plugin {}\nplugin_opt_node_id inside\nplugin_opt_jobs false\n",
        broker::plugin_path().display()
    ));
    let operator = client(&broker, "operator").await;
    operator.set("k", "v", SetOptions::default()).await.unwrap();
    let e = operator.list_jobs().await.unwrap_err();
    assert!(
        matches!(e, mqstore_core::client::ClientError::Timeout(_)),
        "{e}"
    );
    // Its log says what it serves.
    let log = broker.log();
    assert!(
        log.contains("mqstore: the state store and commands run inside this broker"),
        "{log}"
    );
}

/// `plugin_opt_command_profiles FILE` adds the file's device profiles, as `mqstore serve
/// --command-profiles` does: a command with a profile from the file reaches its device and
/// the answer on the profile's answer topic comes back to the caller; a profile the plugin was
/// not given is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_profiles_from_a_file_are_served_inside_mosquitto() {
    let dir = std::env::temp_dir().join(format!("mqstore-plugin-profiles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("profiles.json");
    std::fs::write(
        &file,
        r#"{"old": {"command": "old/{dev}/in", "answer": "old/{dev}/out", "correlation": "none"}}"#,
    )
    .unwrap();
    let broker = Broker::start_config(&format!(
        "plugin {}\nplugin_opt_node_id inside\nplugin_opt_command_profiles {}\n",
        broker::plugin_path().display(),
        file.display()
    ));
    // A device that echoes each command on its answer topic (no correlation to echo).
    let mut options = MqttOptions::new("old-device", "127.0.0.1", broker.port);
    options.set_keep_alive(Duration::from_secs(30));
    let (device, mut events) = AsyncClient::new(options, 64);
    device
        .subscribe("old/+/in", QoS::AtLeastOnce)
        .await
        .unwrap();
    loop {
        if let Event::Incoming(Packet::SubAck(_)) = events.poll().await.unwrap() {
            break;
        }
    }
    let answering = device.clone();
    tokio::spawn(async move {
        while let Ok(event) = events.poll().await {
            if let Event::Incoming(Packet::Publish(p)) = event {
                let topic = String::from_utf8_lossy(&p.topic).replace("/in", "/out");
                let _ = answering
                    .publish(topic, QoS::AtLeastOnce, false, p.payload.to_vec())
                    .await;
            }
        }
    });
    let caller = client(&broker, "caller").await;
    let old = |profile: &str| mqstore_core::commands::CommandRequest {
        profile: profile.into(),
        timeout_ms: 5_000,
        ..mqstore_core::commands::CommandRequest::new("old/7/in", r#"{"reboot": true}"#)
    };
    let reply = caller
        .command(old("old"))
        .await
        .expect("the device answers");
    assert_eq!(reply.status, mqstore_core::commands::Status::Succeeded);
    assert_eq!(&reply.payload[..], br#"{"reboot": true}"#);
    let unknown = caller.command(old("not-given")).await.unwrap_err();
    assert!(unknown.to_string().contains("not-given"), "{unknown}");
    let _ = std::fs::remove_dir_all(dir);
}
