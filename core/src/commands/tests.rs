use bytes::Bytes;

use super::wire;
use super::*;
use crate::client::ClientError;
use crate::client::commands::{CALLER_MARGIN_MS, CommandsClient, CommandsEvent};
use crate::envelope::{Properties, Publish};

const NOW: u64 = 1_700_000_000_000;
const SENDER: Sender<'static> = Sender {
    node: "node-a",
    client_id: "cmd-a",
};

fn id(n: u8) -> [u8; 16] {
    [n; 16]
}

fn request(topic: &str, payload: &str, profile: &str) -> CommandRequest {
    CommandRequest {
        profile: profile.into(),
        ..CommandRequest::new(topic, Bytes::from(payload.to_owned()))
    }
}

fn publish(topic: &str, payload: &str) -> Publish {
    Publish {
        topic: topic.into(),
        payload: Bytes::from(payload.to_owned()),
        qos: 1,
        properties: Properties::default(),
    }
}

fn profiles() -> Profiles {
    Profiles::built_in()
}

#[test]
fn the_built_in_profiles_parse() {
    let profiles = profiles();
    let names: Vec<&str> = profiles.names().collect();
    assert_eq!(names, ["aws", "dji", "iothub", "mqtt5"]);
    assert_eq!(
        profiles.answer_filters(),
        [
            "$aws/commands/+/+/executions/+/response/+",
            "$iothub/methods/res/+/+",
            "thing/product/+/services_reply"
        ]
    );
}

#[test]
fn profiles_kept_by_name_are_the_only_ones_known_and_read() {
    let mut profiles = profiles();
    profiles.retain(|name| name == "dji" || name == MQTT5);
    assert_eq!(profiles.names().collect::<Vec<_>>(), ["dji", MQTT5]);
    assert_eq!(
        profiles.answer_filters(),
        ["thing/product/+/services_reply"]
    );
    assert!(
        profiles.get("iothub").is_err(),
        "a dropped profile is unknown"
    );
    profiles.retain(|name| name == MQTT5);
    assert!(
        profiles.answer_filters().is_empty(),
        "mqtt5 answers come to the node's own topic"
    );
}

#[test]
fn a_command_id_is_its_bytes_as_a_uuid_and_reads_back() {
    let bytes = [
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0x4c, 0xde, 0x8f, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
        0xcd,
    ];
    let text = command_id(bytes);
    assert_eq!(text, "01234567-89ab-4cde-8f01-23456789abcd");
    assert_eq!(command_id_bytes(&text), Some(bytes));
    assert_eq!(command_id_bytes(&text.to_uppercase()), Some(bytes));
    for random in [[0u8; 16], [0xff; 16], id(7)] {
        let v4 = uuid_v4(random);
        assert_eq!(command_id_bytes(&command_id(v4)), Some(v4));
    }
    for not_an_id in [
        "",
        "01234567-89ab-4cde-8f01-23456789abc", // a digit short
        "01234567-89ab-4cde-8f01-23456789abcde", // a digit over
        "0123456789ab-4cde-8f01-23456789abcd-", // its dashes elsewhere
        "01234567-89ab-4cde-8f01-23456789abcg", // not hex
        "01234567-89ab-4cde-8f01-23456789abé", // not ASCII
        "01234567+89ab-4cde-8f01-23456789abcd", // no dash
    ] {
        assert_eq!(command_id_bytes(not_an_id), None, "{not_an_id:?}");
    }
}

#[test]
fn mqtt5_commands_carry_what_azure_executors_require() {
    let profiles = profiles();
    let prepared = profiles
        .get(MQTT5)
        .unwrap()
        .prepare(
            &request("dji/SN9527/command/TAKE_OFF", "{}", MQTT5),
            SENDER,
            id(7),
            NOW,
        )
        .unwrap();
    let p = &prepared.publish;
    assert_eq!(p.qos, 1);
    assert_eq!(p.properties.message_expiry_interval, Some(10));
    // The id is a version 4 UUID (RFC 9562): version nibble 4, variant bits 10; the rest are
    // the random bytes, and the correlation data is the id's 16 bytes.
    let v4 = [7, 7, 7, 7, 7, 7, 0x47, 7, 0x87, 7, 7, 7, 7, 7, 7, 7];
    assert_eq!(p.properties.correlation_data.as_deref(), Some(&v4[..]));
    assert_eq!(
        p.properties.response_topic.as_deref(),
        Some("clients/cmd-a/dji/SN9527/command/TAKE_OFF")
    );
    assert_eq!(p.properties.user_property("__protVer"), Some("1.0"));
    assert_eq!(prepared.record.id, "07070707-0707-4707-8707-070707070707");
    assert_eq!(command_id_bytes(&prepared.record.id), Some(v4));
    for random in [[0u8; 16], [0xff; 16]] {
        let id = command_id(crate::commands::uuid_v4(random));
        assert_eq!(&id[14..15], "4", "{id}");
        assert!("89ab".contains(&id[19..20]), "{id}");
    }
    assert_eq!(
        prepared.record.answer_filter,
        "clients/cmd-a/dji/SN9527/command/TAKE_OFF"
    );
    assert_eq!(prepared.record.deadline_ms, NOW + 10_000);
}

#[test]
fn sub_second_timeouts_round_up_and_bad_ones_are_refused() {
    let mqtt5 = Profile::Mqtt5;
    let mut r = request("a/b", "", MQTT5);
    r.timeout_ms = 1;
    let p = mqtt5.prepare(&r, SENDER, id(1), NOW).unwrap();
    assert_eq!(p.publish.properties.message_expiry_interval, Some(1));
    for bad in [0, MAX_TIMEOUT_MS + 1] {
        r.timeout_ms = bad;
        assert_eq!(
            mqtt5.prepare(&r, SENDER, id(1), NOW),
            Err(CommandError::BadTimeout(bad))
        );
    }
    r.timeout_ms = 1000;
    r.topic = "a/+/b".into();
    assert!(matches!(
        mqtt5.prepare(&r, SENDER, id(1), NOW),
        Err(CommandError::BadTopic(_))
    ));
}

#[test]
fn mqtt5_answers_are_classified_by_their_status_properties() {
    let mut answer = publish("clients/cmd-a/x", "{\"ok\":1}");
    answer.properties.correlation_data = Some(Bytes::from_static(&[7; 16]));
    let user = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect::<Vec<_>>()
    };
    let cases: [(&[(&str, &str)], Status); 6] = [
        (&[("__stat", "200")], Status::Succeeded),
        (&[], Status::Succeeded),
        (
            &[("__stat", "200"), ("AppErrCode", "MOTOR_FAULT")],
            Status::Failed,
        ),
        (&[("__stat", "500"), ("__apErr", "true")], Status::Failed),
        (
            &[
                ("__stat", "400"),
                ("__stMsg", "bad"),
                ("__propName", "Message Expiry"),
            ],
            Status::Rejected,
        ),
        (&[("__stat", "505")], Status::Rejected),
    ];
    for (props, status) in cases {
        answer.properties.user_properties = user(props);
        let (key, read) = Profile::Mqtt5.read_answer(&answer).unwrap();
        assert_eq!(read.status, status, "{props:?}");
        assert_eq!(
            key.id.as_deref(),
            Some("07070707-0707-0707-0707-070707070707")
        );
    }
    answer.properties.user_properties = user(&[
        ("__stat", "400"),
        ("__stMsg", "bad"),
        ("__propName", "Message Expiry"),
    ]);
    let (_, read) = Profile::Mqtt5.read_answer(&answer).unwrap();
    assert_eq!(
        read.message.as_deref(),
        Some("bad; property Message Expiry")
    );
    answer.properties.correlation_data = Some(Bytes::from_static(b"short"));
    assert!(Profile::Mqtt5.read_answer(&answer).is_err());
}

#[test]
fn dji_commands_carry_the_id_in_tid_and_answers_are_read_by_it() {
    let profiles = profiles();
    let dji = profiles.get("dji").unwrap();
    let r = request(
        "thing/product/SN9527/services",
        r#"{"method":"takeoff","data":{}}"#,
        "dji",
    );
    let prepared = dji.prepare(&r, SENDER, id(9), NOW).unwrap();
    let sent: serde_json::Value = serde_json::from_slice(&prepared.publish.payload).unwrap();
    assert_eq!(sent["tid"], prepared.record.id.as_str());
    assert_eq!(sent["method"], "takeoff");
    assert_eq!(
        prepared.record.answer_filter,
        "thing/product/SN9527/services_reply"
    );

    let reply = format!(
        r#"{{"tid":"{}","data":{{"result":0}}}}"#,
        prepared.record.id
    );
    let (key, answer) = dji
        .read_answer(&publish("thing/product/SN9527/services_reply", &reply))
        .unwrap();
    assert_eq!(key.filter, prepared.record.answer_filter);
    assert_eq!(key.id.as_deref(), Some(prepared.record.id.as_str()));
    assert_eq!((answer.status, answer.code), (Status::Succeeded, Some(0)));
    let failed = format!(
        r#"{{"tid":"{}","data":{{"result":314}}}}"#,
        prepared.record.id
    );
    let (_, answer) = dji
        .read_answer(&publish("thing/product/SN9527/services_reply", &failed))
        .unwrap();
    assert_eq!((answer.status, answer.code), (Status::Failed, Some(314)));

    // What the profile cannot read is an error, not a guess.
    for bad in [
        "not json",
        r#"{"data":{"result":0}}"#,
        r#"{"tid":"x","data":{}}"#,
    ] {
        assert!(
            dji.read_answer(&publish("thing/product/SN9527/services_reply", bad))
                .is_err(),
            "{bad}"
        );
    }
    // A payload that is not a JSON object cannot carry the id.
    for bad in ["[1]", "nope"] {
        let r = request("thing/product/SN9527/services", bad, "dji");
        assert!(matches!(
            dji.prepare(&r, SENDER, id(1), NOW),
            Err(CommandError::Payload { .. })
        ));
    }
    let r = request("other/SN9527/services", "{}", "dji");
    assert!(matches!(
        dji.prepare(&r, SENDER, id(1), NOW),
        Err(CommandError::TopicMismatch { .. })
    ));
}

#[test]
fn iothub_commands_carry_the_id_in_the_topic_and_the_status_comes_from_it() {
    let profiles = profiles();
    let hub = profiles.get("iothub").unwrap();
    let r = request("$iothub/methods/POST/reboot/?$rid={id}", "{}", "iothub");
    let prepared = hub.prepare(&r, SENDER, id(3), NOW).unwrap();
    let rid = &prepared.record.id;
    assert_eq!(
        prepared.publish.topic,
        format!("$iothub/methods/POST/reboot/?$rid={rid}")
    );
    assert_eq!(
        prepared.record.answer_filter,
        format!("$iothub/methods/res/+/?$rid={rid}")
    );
    let (key, answer) = hub
        .read_answer(&publish(
            &format!("$iothub/methods/res/201/?$rid={rid}"),
            "{}",
        ))
        .unwrap();
    assert_eq!(key.filter, prepared.record.answer_filter);
    assert_eq!((answer.status, answer.code), (Status::Succeeded, Some(201)));
    let (_, answer) = hub
        .read_answer(&publish(
            &format!("$iothub/methods/res/404/?$rid={rid}"),
            "{}",
        ))
        .unwrap();
    assert_eq!(answer.status, Status::Failed);
}

#[test]
fn profile_files_are_checked() {
    let mut profiles = Profiles::built_in();
    profiles
        .add_json(r#"{"tb": {"command": "v1/devices/{dev}/rpc/request/{id}", "answer": "v1/devices/{dev}/rpc/response/{id}"},
                      "legacy": {"command": "d/{dev}/cmd", "answer": "d/{dev}/reply", "correlation": "none"}}"#)
        .unwrap();
    assert!(profiles.get("tb").is_ok() && profiles.get("legacy").is_ok());
    for (bad, why) in [
        (
            r#"{"x": {"command": "a/{dev}", "answer": "b/{other}", "correlation": "none"}}"#,
            "not in the command",
        ),
        (
            r#"{"x": {"command": "a/{dev}", "answer": "b/{dev}"}}"#,
            "no \"correlation\"",
        ),
        (
            r#"{"x": {"command": "a/#", "answer": "b", "correlation": "none"}}"#,
            "wildcards",
        ),
        (
            r#"{"x": {"command": "a", "answer": "b", "correlation": "topic"}}"#,
            "needs {id}",
        ),
        (r#"{"x": {"kind": "carrier pigeon"}}"#, "unknown kind"),
        (r#"[1]"#, "not a JSON object"),
    ] {
        let error = Profiles::built_in().add_json(bad).unwrap_err().to_string();
        assert!(error.contains(why), "{bad}: {error}");
    }
    assert!(matches!(
        profiles.get("nope"),
        Err(CommandError::UnknownProfile(..))
    ));
}

fn answer(status: Status) -> Answer {
    Answer {
        status,
        payload: Bytes::from_static(b"{}"),
        content_type: None,
        code: None,
        message: None,
        app_error_code: None,
        app_error_payload: None,
        reason_code: None,
        result: None,
    }
}

#[test]
fn the_registry_settles_each_command_once_and_records_late_and_duplicate_answers() {
    let dji = Profiles::built_in().get("dji").unwrap().clone();
    let mut registry = Registry::new();
    let one = dji
        .prepare(
            &request("thing/product/SN1/services", "{}", "dji"),
            SENDER,
            id(1),
            NOW,
        )
        .unwrap()
        .record;
    let two = dji
        .prepare(
            &request("thing/product/SN1/services", "{}", "dji"),
            SENDER,
            id(2),
            NOW,
        )
        .unwrap()
        .record;
    registry.register(one.clone(), NOW).unwrap();
    registry.register(two.clone(), NOW).unwrap();
    assert_eq!(
        registry.register(one.clone(), NOW),
        Err(CommandError::Duplicate(one.id.clone()))
    );
    let key = |r: &Record| AnswerKey {
        filter: r.answer_filter.clone(),
        id: Some(r.id.clone()),
    };
    // Two in flight to one device: each answer settles its own command.
    let matched = registry.answer(&key(&two), answer(Status::Succeeded), NOW + 5);
    assert_eq!(matched.len(), 1);
    assert_eq!(
        (matched[0].0, matched[0].1.id.as_str()),
        (Matched::Live, two.id.as_str())
    );
    assert_eq!(registry.get(&one.id).unwrap().status, Status::Sent);
    // A second answer is a duplicate.
    let again = registry.answer(&key(&two), answer(Status::Failed), NOW + 6);
    assert_eq!(again[0].0, Matched::Duplicate);
    assert_eq!(registry.get(&two.id).unwrap().status, Status::Succeeded);
    assert_eq!(registry.get(&two.id).unwrap().duplicates, 1);
    // An answer from another device with this id, or an unknown id: nothing.
    let elsewhere = AnswerKey {
        filter: "thing/product/SN2/services_reply".into(),
        id: Some(one.id.clone()),
    };
    assert!(
        registry
            .answer(&elsewhere, answer(Status::Succeeded), NOW)
            .is_empty()
    );
    let unknown = AnswerKey {
        filter: one.answer_filter.clone(),
        id: Some("nope".into()),
    };
    assert!(
        registry
            .answer(&unknown, answer(Status::Succeeded), NOW)
            .is_empty()
    );
    // The first times out; its late answer replaces TIMED_OUT, marked late.
    assert_eq!(
        registry.time_out(&one.id, NOW + 1).unwrap().status,
        Status::Sent
    );
    assert_eq!(
        registry.time_out(&one.id, one.deadline_ms).unwrap().status,
        Status::TimedOut
    );
    assert_eq!(registry.waiting(), 0);
    let late = registry.answer(&key(&one), answer(Status::Succeeded), one.deadline_ms + 1);
    assert_eq!(late[0].0, Matched::Late);
    assert!(late[0].1.late && late[0].1.status == Status::Succeeded);
    // Everything is forgotten three timeouts after it was sent.
    registry.forget(one.forget_at() - 1);
    assert_eq!(registry.len(), 2);
    registry.forget(one.forget_at());
    assert!(registry.is_empty());
    assert_eq!(registry.next_forget(), None);
}

#[test]
fn uncorrelated_commands_each_take_the_next_answer_on_their_topic() {
    let mut profiles = Profiles::built_in();
    profiles
        .add_json(r#"{"legacy": {"command": "d/{dev}/cmd", "answer": "d/{dev}/reply", "correlation": "none"}}"#)
        .unwrap();
    let legacy = profiles.get("legacy").unwrap();
    let mut registry = Registry::new();
    let r = request("d/7/cmd", "go", "legacy");
    let a = legacy.prepare(&r, SENDER, id(1), NOW).unwrap().record;
    let b = legacy.prepare(&r, SENDER, id(2), NOW).unwrap().record;
    assert!(!a.correlated);
    registry.register(a.clone(), NOW).unwrap();
    registry.register(b.clone(), NOW).unwrap();
    let (key, read) = legacy.read_answer(&publish("d/7/reply", "done")).unwrap();
    assert_eq!(key.id, None);
    let matched = registry.answer(&key, read.clone(), NOW + 1);
    assert_eq!(matched.len(), 2);
    assert!(matched.iter().all(|(m, _)| *m == Matched::Live));
    // Nobody waits any more: the next answer matches nothing.
    assert!(registry.answer(&key, read, NOW + 2).is_empty());
}

#[test]
fn records_round_trip_through_json_with_any_payload_bytes() {
    let mut record = Profile::Mqtt5
        .prepare(&request("a/b", "", MQTT5), SENDER, id(4), NOW)
        .unwrap()
        .record;
    let mut a = answer(Status::Succeeded);
    a.payload = Bytes::from_static(&[0, 255, 10, 13]);
    record.answer(a, NOW + 1);
    let back = Record::from_json(&record.to_json()).unwrap();
    assert_eq!(back, record);
}

#[test]
fn the_caller_reads_the_service_replies_as_typed_results() {
    let mut client = CommandsClient::new("caller", 42);
    let (call, invoke) = client.invoke(&request("thing/product/SN1/services", "{}", "dji"), NOW);
    assert_eq!(invoke.topic, wire::INVOKE_TOPIC);
    let read = wire::read_invoke(&invoke).unwrap().unwrap();
    assert_eq!(
        (read.topic.as_str(), read.profile.as_str(), read.timeout_ms),
        ("thing/product/SN1/services", "dji", 10_000)
    );

    let mut record = Profiles::built_in()
        .get("dji")
        .unwrap()
        .prepare(&read, SENDER, id(5), NOW)
        .unwrap()
        .record;
    let mut failed = answer(Status::Failed);
    failed.code = Some(314);
    record.answer(failed, NOW + 1);
    let reply = wire::reply_record(&invoke, &record, false);
    match client.handle(&reply) {
        Some(CommandsEvent::Invoked {
            call: c,
            result: Err(ClientError::CommandFailed { id, answer }),
        }) => {
            assert_eq!(
                (c, id.as_str(), answer.code),
                (call, record.id.as_str(), Some(314))
            );
        }
        other => panic!("{other:?}"),
    }
    // The same reply again concerns no call.
    assert_eq!(client.handle(&reply), None);

    // A refusal is a status error; a call nobody answers times out after the command's
    // timeout and the margin.
    let (call, invoke) = client.invoke(&request("a/b", "", "nope"), NOW);
    let refusal = wire::reply_refusal(&invoke, &wire::Refusal::bad_request("no such profile"));
    assert!(matches!(
        client.handle(&refusal),
        Some(CommandsEvent::Invoked { call: c, result: Err(ClientError::Status { status: 400, .. }) }) if c == call
    ));
    let (call, _) = client.invoke(&request("a/b", "", MQTT5), NOW);
    assert_eq!(
        client.next_deadline(),
        Some(NOW + 10_000 + CALLER_MARGIN_MS)
    );
    let expired = client.expire(NOW + 10_000 + CALLER_MARGIN_MS);
    assert!(
        matches!(&expired[..], [CommandsEvent::Invoked { call: c, result: Err(ClientError::Timeout(_)) }] if *c == call)
    );
    assert_eq!(client.in_flight(), 0);
}

#[test]
fn requests_the_service_cannot_take_are_refused_or_dropped() {
    let mut client = CommandsClient::new("caller", 1);
    let (_, mut invoke) = client.invoke(&request("a/b", "", MQTT5), NOW);
    let good = invoke.clone();
    invoke
        .properties
        .user_properties
        .retain(|(n, _)| n != "topic");
    assert_eq!(wire::read_invoke(&invoke).unwrap().unwrap_err().status, 400);
    let mut bad = good.clone();
    for (n, v) in bad.properties.user_properties.iter_mut() {
        if n == "timeoutMs" {
            *v = "soon".into();
        }
    }
    assert_eq!(wire::read_invoke(&bad).unwrap().unwrap_err().status, 400);
    let mut anonymous = good;
    anonymous.properties.response_topic = None;
    assert!(wire::read_invoke(&anonymous).is_none());
}

#[test]
fn headers_reach_the_device_and_may_replace_the_protocol_version() {
    let mut command = request("dji/SN1/command/TAKE_OFF", "{}", MQTT5);
    command.headers = vec![
        ("__protVer".into(), "2.0".into()),
        ("trace".into(), "t-1".into()),
    ];
    let mut client = CommandsClient::new("caller", 3);
    let (_, invoke) = client.invoke(&command, NOW);
    let read = wire::read_invoke(&invoke).unwrap().unwrap();
    assert_eq!(read.headers, command.headers);
    let sent = Profile::Mqtt5
        .prepare(&read, SENDER, id(6), NOW)
        .unwrap()
        .publish;
    let props = &sent.properties;
    assert_eq!(props.user_property("__protVer"), Some("2.0"));
    assert_eq!(props.user_property("trace"), Some("t-1"));
    assert_eq!(props.user_property("__srcId"), Some("cmd-a"));
    assert_eq!(
        props
            .user_properties
            .iter()
            .filter(|(n, _)| n == "__protVer")
            .count(),
        1
    );
}

#[test]
fn a_command_whose_publish_the_broker_refuses_fails_with_the_reason_code() {
    let mut client = CommandsClient::new("caller", 4);
    let (call, _) = client.invoke(&request("dev/1/cmd", "{}", MQTT5), NOW);
    let (other, _) = client.status("c-1", 1_000, NOW);
    let refused = client.publish_refused(call, 0x87);
    assert!(
        matches!(
            refused,
            Some(CommandsEvent::Invoked { call: c, result: Err(ClientError::PublishRefused { code: 0x87 }) }) if c == call
        ),
        "{refused:?}"
    );
    assert!(client.publish_refused(call, 0x87).is_none(), "only once");
    assert_eq!(client.in_flight(), 1);
    let lost = client.connection_failed(ClientError::Disconnected);
    assert!(matches!(&lost[..], [CommandsEvent::Status { call: c, .. }] if *c == other));
}

/// A command to `robot1` over the `aws` profile, registered in `registry`.
fn aws_command(registry: &mut Registry, n: u8, timeout_ms: u64) -> (Profile, Record) {
    let aws = Profiles::built_in().get("aws").unwrap().clone();
    let r = CommandRequest {
        timeout_ms,
        content_type: Some("application/json".into()),
        ..request(
            "$aws/commands/things/robot1/executions/{id}/request/json",
            r#"{"calibrate":true}"#,
            "aws",
        )
    };
    let prepared = aws.prepare(&r, SENDER, id(n), NOW).unwrap();
    registry.register(prepared.record.clone(), NOW).unwrap();
    (aws, prepared.record)
}

fn aws_update(record: &Record, body: &str) -> Publish {
    publish(
        &format!(
            "$aws/commands/things/robot1/executions/{}/response/json",
            record.id
        ),
        body,
    )
}

#[test]
fn aws_commands_go_where_aws_devices_listen_and_report_progress_before_their_result() {
    let mut registry = Registry::new();
    let (aws, record) = aws_command(&mut registry, 1, 60_000);
    assert_eq!(
        record.topic,
        format!(
            "$aws/commands/things/robot1/executions/{}/request/json",
            record.id
        )
    );
    assert_eq!(
        record.answer_filter,
        format!(
            "$aws/commands/things/robot1/executions/{}/response/+",
            record.id
        )
    );
    // Two progress reports, then the result: the command stays open until the last.
    for (n, description) in [(1, "heating"), (2, "measuring")] {
        let body = format!(
            r#"{{"status":"IN_PROGRESS","statusReason":{{"reasonCode":"STEP_{n}","reasonDescription":"{description}"}}}}"#
        );
        let (key, answer) = aws.read_answer(&aws_update(&record, &body)).unwrap();
        let [(how, now)] = &registry.answer(&key, answer, NOW + n)[..] else {
            panic!("one record matched");
        };
        assert_eq!(*how, Matched::Progress);
        assert_eq!(now.status, Status::InProgress);
        let reported = now.answer.as_ref().unwrap();
        assert_eq!(
            reported.reason_code.as_deref(),
            Some(format!("STEP_{n}").as_str())
        );
        assert_eq!(reported.message.as_deref(), Some(description));
        assert!(now.status.is_waiting() && !now.is_final());
    }
    let done = r#"{"status":"SUCCEEDED","statusReason":{"reasonCode":"DONE"},"result":{"offset":{"s":"0.25"},"ok":{"b":true},"raw":{"bin":"AAE="}}}"#;
    let (key, answer) = aws.read_answer(&aws_update(&record, done)).unwrap();
    let [(how, settled)] = &registry.answer(&key, answer, NOW + 3)[..] else {
        panic!("one record matched");
    };
    assert_eq!((*how, settled.status), (Matched::Live, Status::Succeeded));
    let result = settled.answer.as_ref().unwrap().result.clone().unwrap();
    assert_eq!(result["offset"]["s"], "0.25");
    assert_eq!(result["raw"]["bin"], "AAE=");
    // The record keeps the reason and the result through JSON (Redis, status queries).
    let again = Record::from_json(&settled.to_json()).unwrap();
    assert_eq!(&again, settled);
    // After a final status, any update is refused (the commander answers TerminalStateReached).
    let (key, answer) = aws
        .read_answer(&aws_update(&record, r#"{"status":"IN_PROGRESS"}"#))
        .unwrap();
    let [(how, after)] = &registry.answer(&key, answer, NOW + 4)[..] else {
        panic!("one record matched");
    };
    assert_eq!(
        (*how, after.status),
        (Matched::Duplicate, Status::Succeeded)
    );
}

#[test]
fn an_aws_command_silent_after_progress_times_out_and_a_late_final_status_replaces_it() {
    let mut registry = Registry::new();
    let (aws, record) = aws_command(&mut registry, 2, 1_000);
    let (key, answer) = aws
        .read_answer(&aws_update(&record, r#"{"status":"IN_PROGRESS"}"#))
        .unwrap();
    assert_eq!(
        registry.answer(&key, answer, NOW + 10)[0].0,
        Matched::Progress
    );
    let timed_out = registry.time_out(&record.id, NOW + 1_000).unwrap();
    assert_eq!(timed_out.status, Status::TimedOut);
    assert!(!timed_out.is_final(), "the service's timeout is not final");
    let (key, answer) = aws
        .read_answer(&aws_update(
            &record,
            r#"{"status":"FAILED","statusReason":{"reasonCode":"JAMMED"}}"#,
        ))
        .unwrap();
    let [(how, late)] = &registry.answer(&key, answer, NOW + 1_500)[..] else {
        panic!("one record matched");
    };
    assert_eq!(
        (*how, late.status, late.late),
        (Matched::Late, Status::Failed, true)
    );
    // The device's own TIMED_OUT is final.
    let (_, record) = aws_command(&mut registry, 3, 1_000);
    let (key, answer) = aws
        .read_answer(&aws_update(&record, r#"{"status":"TIMED_OUT"}"#))
        .unwrap();
    registry.answer(&key, answer, NOW + 10);
    let (key, answer) = aws
        .read_answer(&aws_update(&record, r#"{"status":"SUCCEEDED"}"#))
        .unwrap();
    assert_eq!(
        registry.answer(&key, answer, NOW + 20)[0].0,
        Matched::Duplicate
    );
}

#[test]
fn a_malformed_aws_update_is_refused_with_a_reason_and_changes_nothing() {
    let mut registry = Registry::new();
    let (aws, record) = aws_command(&mut registry, 4, 60_000);
    for (body, code, why) in [
        ("{not json", "InvalidJson", "not an execution update"),
        (r#"{"status":"DONE"}"#, "InvalidRequest", "status \"DONE\""),
        (
            r#"{"status":"CREATED"}"#,
            "InvalidRequest",
            "status \"CREATED\"",
        ),
        (
            r#"{"reason":"x"}"#,
            "InvalidRequest",
            "not an execution update",
        ),
        (
            r#"{"status":"FAILED","statusReason":{"reasonCode":"bad code"}}"#,
            "InvalidRequest",
            "reasonCode",
        ),
        (
            r#"{"status":"FAILED","statusReason":{"reasonCode":""}}"#,
            "InvalidRequest",
            "reasonCode",
        ),
        (
            &format!(
                r#"{{"status":"FAILED","statusReason":{{"reasonCode":"{}"}}}}"#,
                "A".repeat(65)
            ),
            "InvalidRequest",
            "reasonCode",
        ),
        (
            r#"{"status":"SUCCEEDED","result":{}}"#,
            "InvalidRequest",
            "At least 1",
        ),
        (
            r#"{"status":"SUCCEEDED","result":{"x":{"n":1}}}"#,
            "InvalidRequest",
            "result \"x\"",
        ),
        (
            r#"{"status":"SUCCEEDED","result":{"x":{"bin":"%%"}}}"#,
            "InvalidRequest",
            "result \"x\"",
        ),
        (
            r#"{"status":"SUCCEEDED","result":{"bad name":{"s":"1"}}}"#,
            "InvalidRequest",
            "result name",
        ),
    ] {
        let error = aws.read_answer(&aws_update(&record, body)).unwrap_err();
        assert_eq!(error.code, code, "{body}");
        assert!(error.reason.contains(why), "{body}: {}", error.reason);
    }
    assert_eq!(
        registry.get(&record.id).unwrap(),
        &record,
        "nothing changed"
    );
    // A topic that is not a response topic is not an update.
    assert!(
        aws.read_answer(&publish("$aws/commands/things/robot1/executions", "{}"))
            .is_err()
    );
}

#[test]
fn aws_updates_with_the_java_sdks_extra_fields_are_read_as_aws_reads_them() {
    // The AWS IoT Device SDK for Java v2 (IotCommandsV2Client) names the device and the
    // execution in every update; AWS accepts them, and so must we.
    let mut registry = Registry::new();
    let (aws, record) = aws_command(&mut registry, 5, 60_000);
    let body = format!(
        r#"{{"deviceType":"thing","deviceId":"robot1","executionId":"{}","status":"IN_PROGRESS","statusReason":{{"reasonCode":"HEATING","reasonDescription":"to 80 C","extra":1}}}}"#,
        record.id
    );
    let (key, answer) = aws.read_answer(&aws_update(&record, &body)).unwrap();
    assert_eq!(answer.status, Status::InProgress);
    assert_eq!(answer.reason_code.as_deref(), Some("HEATING"));
    assert_eq!(
        registry.answer(&key, answer, NOW + 1)[0].0,
        Matched::Progress
    );
    // What AWS refuses is still refused, extra fields or not.
    let bad = r#"{"deviceType":"thing","deviceId":"robot1","status":"DONE"}"#;
    let error = aws.read_answer(&aws_update(&record, bad)).unwrap_err();
    assert_eq!(error.code, "InvalidRequest");
    assert!(error.reason.contains("DONE"), "{}", error.reason);
}

#[test]
fn a_devices_own_timed_out_reaches_the_caller_as_its_answer_not_as_no_answer() {
    let mut registry = Registry::new();
    let mut client = CommandsClient::new("caller", 42);
    // The device reports TIMED_OUT itself: it answered, so the caller gets a failure with
    // the device's reason, not "no answer within the timeout".
    let (aws, record) = aws_command(&mut registry, 6, 60_000);
    let (call, invoke) = client.invoke(&request("a/b", "{}", "aws"), NOW);
    let (key, answer) = aws
        .read_answer(&aws_update(
            &record,
            r#"{"status":"TIMED_OUT","statusReason":{"reasonCode":"TOO_SLOW"}}"#,
        ))
        .unwrap();
    let [(_, settled)] = &registry.answer(&key, answer, NOW + 1)[..] else {
        panic!("one record matched");
    };
    let reply = wire::reply_record(&invoke, settled, false);
    match client.handle(&reply) {
        Some(CommandsEvent::Invoked {
            call: c,
            result: Err(error @ ClientError::CommandFailed { .. }),
        }) => {
            assert_eq!(c, call);
            let text = error.to_string();
            assert!(
                text.contains("TIMED_OUT") && text.contains("TOO_SLOW"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The service's own timeout is no answer.
    let (_, mut silent) = aws_command(&mut registry, 7, 1_000);
    assert!(silent.time_out(NOW + 1_000));
    let (call, invoke) = client.invoke(&request("a/b", "{}", "aws"), NOW);
    assert!(matches!(
        client.handle(&wire::reply_record(&invoke, &silent, false)),
        Some(CommandsEvent::Invoked { call: c, result: Err(ClientError::CommandTimedOut { .. }) }) if c == call
    ));
}

#[test]
fn aws_updates_are_acknowledged_on_the_topics_aws_devices_subscribe_to() {
    let mut registry = Registry::new();
    let (aws, record) = aws_command(&mut registry, 5, 60_000);
    let update = aws_update(&record, r#"{"status":"IN_PROGRESS"}"#);
    let accepted = aws
        .acknowledge(&update, &Acknowledgement::Accepted)
        .unwrap();
    let base = format!(
        "$aws/commands/things/robot1/executions/{}/response",
        record.id
    );
    assert_eq!(accepted.topic, format!("{base}/accepted/json"));
    let body: serde_json::Value = serde_json::from_slice(&accepted.payload).unwrap();
    assert_eq!(body, serde_json::json!({"executionId": record.id}));
    let rejected = aws
        .acknowledge(
            &update,
            &Acknowledgement::Rejected {
                code: "TerminalStateReached",
                message: "SUCCEEDED already".into(),
            },
        )
        .unwrap();
    assert_eq!(rejected.topic, format!("{base}/rejected/json"));
    let body: serde_json::Value = serde_json::from_slice(&rejected.payload).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"error": "TerminalStateReached", "errorMessage": "SUCCEEDED already", "executionId": record.id})
    );
    // Other profiles acknowledge nothing.
    assert!(
        Profile::Mqtt5
            .acknowledge(&update, &Acknowledgement::Accepted)
            .is_none()
    );
}

#[test]
fn a_profile_reads_string_statuses_and_names_progress() {
    let mut profiles = Profiles::built_in();
    profiles
        .add_json(
            r#"{"flasher": {
                "command": "flash/{dev}/cmd",
                "answer": "flash/{dev}/reply",
                "correlation": {"json": "rid"},
                "status": {"json": "state", "ok": ["DONE", 0], "progress": ["FLASHING", 102]}
            }}"#,
        )
        .unwrap();
    let flasher = profiles.get("flasher").unwrap();
    let prepared = flasher
        .prepare(
            &request("flash/d1/cmd", "{}", "flasher"),
            SENDER,
            id(6),
            NOW,
        )
        .unwrap();
    let rid = &prepared.record.id;
    for (state, status) in [
        ("\"FLASHING\"", Status::InProgress),
        ("102", Status::InProgress),
        ("\"DONE\"", Status::Succeeded),
        ("0", Status::Succeeded),
        ("\"BRICKED\"", Status::Failed),
        ("7", Status::Failed),
    ] {
        let body = format!(r#"{{"rid":"{rid}","state":{state}}}"#);
        let (_, answer) = flasher
            .read_answer(&publish("flash/d1/reply", &body))
            .unwrap();
        assert_eq!(answer.status, status, "{state}");
    }
    let (_, answer) = flasher
        .read_answer(&publish(
            "flash/d1/reply",
            &format!(r#"{{"rid":"{rid}","state":"DONE"}}"#),
        ))
        .unwrap();
    assert_eq!(answer.reason_code.as_deref(), Some("DONE"));
    assert!(
        flasher
            .read_answer(&publish(
                "flash/d1/reply",
                &format!(r#"{{"rid":"{rid}","state":[1]}}"#)
            ))
            .is_err()
    );
}

fn definition(json: serde_json::Value) -> definitions::Definition {
    serde_json::from_value(json).unwrap()
}

#[test]
fn stored_commands_are_checked_as_aws_create_command_checks_them() {
    let template = "{\"t\": \"${aws:iot:commandexecution::parameter:temp}\"}";
    let good = [
        serde_json::json!({"commandId": "reboot", "payload": {"content": "{}", "contentType": "application/json"}}),
        serde_json::json!({"commandId": "blob_1", "payload": {"content": "AAE=", "contentType": "application/octet-stream"}}),
        serde_json::json!({"commandId": "heat", "payloadTemplate": template,
            "mandatoryParameters": [{"name": "temp", "defaultValue": {"S": "20"}}]}),
    ];
    for json in good {
        assert_eq!(definition(json.clone()).check(), Ok(()), "{json}");
    }
    for (json, why) in [
        (
            serde_json::json!({"commandId": "bad id", "payload": {"content": "{}"}}),
            "commandId",
        ),
        (
            serde_json::json!({"commandId": "x".repeat(65), "payload": {"content": "{}"}}),
            "commandId",
        ),
        (
            serde_json::json!({"commandId": "none"}),
            "give payload or payloadTemplate",
        ),
        (
            serde_json::json!({"commandId": "both", "payload": {"content": "{}"}, "payloadTemplate": "{}"}),
            "not both",
        ),
        (
            serde_json::json!({"commandId": "blob", "payload": {"content": "%%", "contentType": "application/octet-stream"}}),
            "base64",
        ),
        (
            serde_json::json!({"commandId": "heat", "payloadTemplate": template}),
            "does not list",
        ),
        (
            serde_json::json!({"commandId": "heat", "payloadTemplate": "{", "mandatoryParameters": [{"name": "bad name"}]}),
            "parameter name",
        ),
        (
            serde_json::json!({"commandId": "heat", "payloadTemplate": template,
            "mandatoryParameters": [{"name": "temp", "defaultValue": {"X": 1}}]}),
            "parameter \"temp\"",
        ),
        (
            serde_json::json!({"commandId": "big", "payloadTemplate": "x".repeat(32_769)}),
            "at most 32768",
        ),
    ] {
        let error = definition(json.clone()).check().unwrap_err();
        assert!(error.contains(why), "{json}: {error}");
    }
    // Unknown fields are refused when read.
    assert!(
        definitions::DefinitionsRequest::read(
            br#"{"op": "create", "command": {"commandId": "x", "colour": 1}}"#
        )
        .is_err()
    );
    assert!(definitions::DefinitionsRequest::read(br#"{"op": "explode"}"#).is_err());
    assert_eq!(
        definitions::DefinitionsRequest::read(br#"{"op": "get", "commandId": "x"}"#),
        Ok(definitions::DefinitionsRequest::Get {
            command_id: "x".into()
        })
    );
}

#[test]
fn a_definitions_call_is_its_request_on_the_wire() {
    use serde_json::json;
    let request = definitions::definitions_call("get", json!({"commandId": "x"})).unwrap();
    assert_eq!(
        definitions::DefinitionsRequest::read(request.to_string().as_bytes()),
        Ok(definitions::DefinitionsRequest::Get {
            command_id: "x".into()
        })
    );
    let list = definitions::definitions_call("list", serde_json::Value::Null).unwrap();
    assert_eq!(list, json!({"op": "list"}));
    assert!(
        definitions::definitions_call("explode", json!({}))
            .unwrap_err()
            .contains("create, get, list or delete")
    );
    assert!(definitions::definitions_call("get", json!("x")).is_err());
}

#[test]
fn a_stored_command_starts_as_an_aws_command_with_its_template_filled_in() {
    let heat = definition(serde_json::json!({
        "commandId": "heat",
        "payloadTemplate": "{\"to\": ${aws:iot:commandexecution::parameter:temp}, \"unit\": \"${aws:iot:commandexecution::parameter:unit}\"}",
        "mandatoryParameters": [{"name": "temp"}, {"name": "unit", "defaultValue": {"S": "C"}}]
    }));
    let mut parameters = serde_json::Map::new();
    parameters.insert("temp".into(), serde_json::json!({"I": 80}));
    for (target, topic) in [
        (
            "robot1",
            "$aws/commands/things/robot1/executions/{id}/request/json",
        ),
        (
            "thing/robot1",
            "$aws/commands/things/robot1/executions/{id}/request/json",
        ),
        (
            "arn:aws:iot:eu-west-1:123456789012:thing/robot1",
            "$aws/commands/things/robot1/executions/{id}/request/json",
        ),
        (
            "clients/cam-7",
            "$aws/commands/clients/cam-7/executions/{id}/request/json",
        ),
    ] {
        let request = heat
            .start(target, &parameters, CommandRequest::start("heat", target))
            .unwrap();
        assert_eq!(request.topic, topic);
        assert_eq!(
            (request.profile.as_str(), request.command.as_deref()),
            ("aws", Some("heat"))
        );
        assert_eq!(&request.payload[..], br#"{"to": 80, "unit": "C"}"#);
    }
    // The record remembers the stored command, and its events are AWS's.
    let request = heat
        .start(
            "robot1",
            &parameters,
            CommandRequest::start("heat", "robot1"),
        )
        .unwrap();
    let aws = Profiles::built_in().get("aws").unwrap().clone();
    let mut record = aws.prepare(&request, SENDER, id(7), NOW).unwrap().record;
    assert_eq!(record.command.as_deref(), Some("heat"));
    let created = aws_event(&record).unwrap();
    assert_eq!(created.topic, "$aws/events/commandExecution/heat/CREATED");
    let body: serde_json::Value = serde_json::from_slice(&created.payload).unwrap();
    assert_eq!(body["executionId"], record.id.as_str());
    assert_eq!(body["eventType"], "COMMAND_EXECUTION");
    assert_eq!(
        body["commandArn"],
        "arn:aws:iot:mqstore:000000000000:command/heat"
    );
    assert_eq!(
        body["targetArn"],
        "arn:aws:iot:mqstore:000000000000:thing/robot1"
    );
    record.time_out(NOW + 20_000);
    let timed_out: serde_json::Value =
        serde_json::from_slice(&aws_event(&record).unwrap().payload).unwrap();
    assert_eq!(
        timed_out["statusReason"]["reasonCode"],
        "$NO_RESPONSE_FROM_DEVICE"
    );
    // A command sent without a stored one has no AWS event.
    record.command = None;
    assert!(aws_event(&record).is_none());
    // What cannot start: a missing parameter, an unknown one, a bad value, a bad target.
    let start = |target: &str, parameters: serde_json::Value| {
        let parameters = parameters.as_object().cloned().unwrap_or_default();
        heat.start(target, &parameters, CommandRequest::start("heat", target))
    };
    for (target, parameters, why) in [
        (
            "robot1",
            serde_json::json!({}),
            "parameter \"temp\" has no default",
        ),
        (
            "robot1",
            serde_json::json!({"temp": 1, "fan": 2}),
            "no parameter \"fan\"",
        ),
        (
            "robot1",
            serde_json::json!({"temp": [1]}),
            "parameter \"temp\"",
        ),
        (
            "robot1",
            serde_json::json!({"temp": {"I": "x"}}),
            "parameter \"temp\"",
        ),
        ("a/b", serde_json::json!({"temp": 1}), "target"),
        ("", serde_json::json!({"temp": 1}), "target"),
    ] {
        let error = start(target, parameters.clone()).unwrap_err().to_string();
        assert!(error.contains(why), "{target} {parameters}: {error}");
    }
}

#[test]
fn aws_updates_in_cbor_are_read_and_acknowledged_in_cbor() {
    let mut registry = Registry::new();
    let (aws, record) = aws_command(&mut registry, 8, 60_000);
    let topic = format!(
        "$aws/commands/things/robot1/executions/{}/response/cbor",
        record.id
    );
    // {"status": "SUCCEEDED", "result": {"raw": {"bin": h'0001'}}}
    let mut update = vec![0xa2, 0x66];
    update.extend_from_slice(b"status");
    update.push(0x69);
    update.extend_from_slice(b"SUCCEEDED");
    update.push(0x66);
    update.extend_from_slice(b"result");
    update.extend_from_slice(&[0xa1, 0x63]);
    update.extend_from_slice(b"raw");
    update.extend_from_slice(&[0xa1, 0x63]);
    update.extend_from_slice(b"bin");
    update.extend_from_slice(&[0x42, 0x00, 0x01]);
    let cbor = Publish {
        payload: Bytes::from(update),
        ..publish(&topic, "")
    };
    let (key, answer) = aws.read_answer(&cbor).unwrap();
    assert_eq!(key.filter, record.answer_filter);
    assert_eq!(answer.status, Status::Succeeded);
    assert_eq!(answer.content_type.as_deref(), Some("application/cbor"));
    assert_eq!(answer.result.unwrap()["raw"]["bin"], "AAE=");
    let accepted = aws.acknowledge(&cbor, &Acknowledgement::Accepted).unwrap();
    assert!(
        accepted.topic.ends_with("/response/accepted/cbor"),
        "{}",
        accepted.topic
    );
    let mut expected = vec![0xa1, 0x6b];
    expected.extend_from_slice(b"executionId");
    expected.extend_from_slice(&[0x78, 0x24]);
    expected.extend_from_slice(record.id.as_bytes());
    assert_eq!(&accepted.payload[..], &expected[..]);
    // Not CBOR, or another format: refused with a reason.
    let bad = Publish {
        payload: Bytes::from_static(&[0x62, b'a']),
        ..publish(&topic, "")
    };
    assert_eq!(aws.read_answer(&bad).unwrap_err().code, "InvalidRequest");
    let xml = publish(&topic.replace("/cbor", "/xml"), "<x/>");
    assert_eq!(aws.read_answer(&xml).unwrap_err().code, "InvalidTopic");
}
