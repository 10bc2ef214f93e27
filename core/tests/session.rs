//! The client session against the services it talks to, wired back to back with no broker in
//! between: the state store engine, the jobs service, and the command service's refusals.

use bytes::Bytes;
use mqstore_core::client::jobs::{DeviceRequest, JobNotification};
use mqstore_core::client::{CallId, CallOptions, ClientConfig, ClientError};
use mqstore_core::codec::{Notification, Request, Response, SetRequest};
use mqstore_core::commands::CommandRequest;
use mqstore_core::commands::wire::{Refusal, reply_refusal};
use mqstore_core::engine::Engine;
use mqstore_core::envelope::{Properties, Publish};
use mqstore_core::jobs::{JobSpec, Jobs, OPERATOR_TOPIC, OperatorRequest};
use mqstore_core::session::{Completion, Session, SessionEvent};
use serde_json::json;

const T0: u64 = 1_700_000_000_000;

/// The services, as a broker would route the session's publishes to them.
struct Services {
    engine: Engine,
    jobs: Jobs,
}

impl Services {
    fn new() -> Self {
        Self {
            engine: Engine::in_memory("engine").unwrap(),
            jobs: Jobs::new(),
        }
    }

    /// What the services publish in answer to `publish` (everything, as if the session were
    /// subscribed to all of it: the session must ignore what is not its own).
    fn answer(&mut self, publish: Publish) -> Vec<Publish> {
        let mut out = Vec::new();
        if publish.topic == OPERATOR_TOPIC {
            let answer = self.jobs.operate(&publish.payload, T0, &mut out);
            out.push(Publish {
                topic: publish.properties.response_topic.clone().unwrap(),
                payload: Bytes::from(serde_json::to_vec(&answer).unwrap()),
                qos: 1,
                properties: Properties {
                    correlation_data: publish.properties.correlation_data.clone(),
                    ..Properties::default()
                },
            });
        } else if publish.topic.starts_with("$aws/things/") {
            self.jobs
                .handle(&publish.topic, &publish.payload, T0, &mut out);
        } else if publish.topic.starts_with("mqstore/commands/") {
            out.push(reply_refusal(
                &publish,
                &Refusal::bad_request("no such device here"),
            ));
        } else {
            self.engine.handle(publish, T0, &mut out);
        }
        out
    }

    /// Sends everything the session has to send and feeds back every answer, until quiet.
    fn run(&mut self, session: &mut Session) {
        while let Some(outgoing) = session.poll_publish() {
            for answer in self.answer(outgoing.publish) {
                session.handle(&answer, T0);
            }
        }
    }
}

fn session(id: &str) -> Session {
    Session::new(ClientConfig::new(id, 7)).unwrap()
}

fn events(session: &mut Session) -> Vec<SessionEvent> {
    std::iter::from_fn(|| session.poll_event()).collect()
}

fn set(key: &'static str, value: &'static str) -> Request {
    Request::Set(SetRequest::new(key, value))
}

fn spec(job_id: &str, thing: &str) -> JobSpec {
    JobSpec::new(job_id, vec![thing.into()], json!({ "op": "reboot" }))
}

#[test]
fn calls_of_every_client_share_one_id_space_and_complete_under_it() {
    let mut services = Services::new();
    let mut session = session("s1");
    let stored = session
        .call(&set("k", "v"), &CallOptions::default(), T0)
        .unwrap();
    let created = session.jobs_operate(
        &OperatorRequest::CreateJob(spec("j1", "t1").into()),
        None,
        T0,
    );
    let commanded = session.command(&CommandRequest::new("devices/d1/cmd", "go"), T0);
    assert_eq!(
        [stored, created, commanded],
        [CallId(1), CallId(2), CallId(3)],
        "one id space, in order"
    );
    assert_eq!(session.in_flight(), 3);
    services.run(&mut session);
    let events = events(&mut session);
    assert_eq!(events.len(), 3, "{events:?}");
    for event in events {
        let SessionEvent::Completed { call, op, result } = event else {
            panic!("not a completion: {event:?}");
        };
        match (call, op, result) {
            (c, "SET", Ok(Completion::Store(answer))) if c == stored => {
                assert_eq!(answer.response, Response::Ok);
            }
            (c, "jobs", Ok(Completion::Jobs(answer))) if c == created => {
                let created: mqstore_core::jobs::wire::JobCreated = answer.read().unwrap();
                assert_eq!((created.job_id.as_str(), created.targets), ("j1", 1));
            }
            (c, "command", Err(ClientError::Status { status, message })) if c == commanded => {
                assert_eq!((status, message.as_str()), (400, "no such device here"));
            }
            other => panic!("unexpected completion: {other:?}"),
        }
    }
    assert_eq!(session.in_flight(), 0);
}

#[test]
fn a_thing_gets_its_subscriptions_notifications_and_device_calls() {
    let mut services = Services::new();
    let mut session = session("s2");
    let before = session.subscriptions();
    let filters = session.act_as("pump-1").unwrap();
    assert!(!filters.is_empty());
    assert!(
        session.act_as("pump-1").unwrap().is_empty(),
        "subscribed once"
    );
    assert!(session.act_as("no spaces").is_err());
    let after = session.subscriptions();
    assert_eq!(
        after.len(),
        before.len() + filters.len(),
        "kept for reconnects"
    );
    assert!(filters.iter().all(|f| after.contains(f)));
    assert_eq!(session.leave("pump-1"), filters);
    assert_eq!(session.subscriptions(), before);
    assert!(session.leave("pump-1").is_empty());
    assert_eq!(session.act_as("pump-1").unwrap(), filters);

    session.jobs_operate(
        &OperatorRequest::CreateJob(spec("j1", "pump-1").into()),
        None,
        T0,
    );
    services.run(&mut session);
    let notified = events(&mut session).into_iter().any(|e| {
        matches!(e, SessionEvent::Jobs(JobNotification::NotifyNext { ref thing, execution: Some(ref x) })
            if thing == "pump-1" && x.job_id == "j1")
    });
    assert!(notified, "the new job's notify-next reaches the thing");

    let call = session
        .jobs_device(
            "pump-1",
            &DeviceRequest::StartNext {
                status_details: Default::default(),
                step_timeout_minutes: None,
            },
            None,
            T0,
        )
        .unwrap();
    services.run(&mut session);
    let started = events(&mut session).into_iter().find_map(|e| match e {
        SessionEvent::Completed {
            call: c, result, ..
        } if c == call => Some(result),
        _ => None,
    });
    match started {
        Some(Ok(Completion::Jobs(answer))) => {
            let execution = answer.execution().unwrap().expect("an execution");
            assert_eq!(execution.job_id, "j1");
            assert_eq!(execution.status, mqstore_core::jobs::Status::InProgress);
        }
        other => panic!("start-next: {other:?}"),
    }
}

#[test]
fn losing_the_connection_fails_every_call_of_every_client() {
    let mut session = session("s3");
    let calls = [
        session
            .call(&set("k", "v"), &CallOptions::default(), T0)
            .unwrap(),
        session.jobs_operate(&OperatorRequest::list_jobs(), None, T0),
        session.command_status("c1", 10_000, T0),
    ];
    session.connection_lost();
    let mut failed: Vec<CallId> = events(&mut session)
        .into_iter()
        .map(|e| match e {
            SessionEvent::Completed {
                call,
                result: Err(ClientError::Disconnected),
                ..
            } => call,
            other => panic!("not a disconnection: {other:?}"),
        })
        .collect();
    failed.sort();
    assert_eq!(failed, calls);
    assert_eq!(session.in_flight(), 0);
    assert_eq!(session.next_deadline(), None);
}

#[test]
fn a_refused_publish_fails_its_own_call_only() {
    let mut session = session("s4");
    let stored = session
        .call(&set("k", "v"), &CallOptions::default(), T0)
        .unwrap();
    let listed = session.jobs_operate(&OperatorRequest::list_jobs(), None, T0);
    let outgoing: Vec<_> = std::iter::from_fn(|| session.poll_publish()).collect();
    assert_eq!(
        outgoing.iter().map(|o| o.call).collect::<Vec<_>>(),
        [Some(stored), Some(listed)],
        "each publish names its call"
    );
    session.publish_refused(listed, 0x87);
    session.publish_refused(CallId(99), 0x87); // no such call: nothing
    let events = events(&mut session);
    assert!(
        matches!(
            events.as_slice(),
            [SessionEvent::Completed { call, op: "jobs", result: Err(ClientError::PublishRefused { code: 0x87 }) }]
                if *call == listed
        ),
        "{events:?}"
    );
    assert_eq!(session.in_flight(), 1, "the SET still waits");
}

#[test]
fn calls_time_out_at_the_earliest_deadline() {
    let mut session = session("s5");
    let options = CallOptions {
        timeout_ms: Some(1_000),
        ..CallOptions::default()
    };
    let quick = session.call(&set("k", "v"), &options, T0).unwrap();
    let slow = session.jobs_operate(&OperatorRequest::list_jobs(), Some(5_000), T0);
    assert_eq!(session.next_deadline(), Some(T0 + 1_000));
    session.expire(T0 + 1_000);
    let timed_out: Vec<CallId> = events(&mut session)
        .into_iter()
        .map(|e| match e {
            SessionEvent::Completed {
                call,
                result: Err(ClientError::Timeout(_)),
                ..
            } => call,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(timed_out, [quick]);
    assert_eq!(session.next_deadline(), Some(T0 + 5_000));
    session.expire(T0 + 5_000);
    assert!(matches!(
        events(&mut session).as_slice(),
        [SessionEvent::Completed { call, result: Err(ClientError::Timeout(_)), .. }] if *call == slow
    ));
}

#[test]
fn observed_changes_and_watched_commands_become_events() {
    let mut services = Services::new();
    let mut session = session("s6");
    assert_eq!(
        session.watch_commands(),
        Some("mqstore/commands/v1/events/+")
    );
    assert_eq!(session.watch_commands(), None, "once");
    assert_eq!(
        session.unwatch_commands(),
        Some("mqstore/commands/v1/events/+")
    );
    assert_eq!(session.unwatch_commands(), None);
    assert!(session.watch_commands().is_some());
    assert!(
        session
            .subscriptions()
            .contains(&"mqstore/commands/v1/events/+".to_owned())
    );
    let observed = session.observe(Bytes::from_static(b"k"), T0).unwrap();
    services.run(&mut session);
    assert!(matches!(
        events(&mut session).as_slice(),
        [SessionEvent::Completed { call, op: "KEYNOTIFY", result: Ok(_) }] if *call == observed
    ));
    session
        .call(&set("k", "v2"), &CallOptions::default(), T0)
        .unwrap();
    services.run(&mut session);
    let changed = events(&mut session).into_iter().any(|e| {
        matches!(e, SessionEvent::Changed { ref key, change: Notification::Set(_), synthetic: false, .. } if key.as_ref() == b"k")
    });
    assert!(changed, "the SET's notification reaches the observer");
    session.connection_lost();
    session.resume(T0).unwrap();
    let resumed: Vec<_> = std::iter::from_fn(|| session.poll_publish()).collect();
    assert!(!resumed.is_empty() && resumed.iter().all(|o| o.call.is_none()));
}

// ---- leases ----

/// Sessions and the engine on one clock: what one session publishes reaches the engine, and
/// what the engine publishes reaches every session (each takes only its own).
struct Fleet {
    engine: Engine,
    now: u64,
    /// Publishes dropped on their way to the engine (a broker that lost them).
    drop_from: Option<usize>,
}

impl Fleet {
    fn new() -> Self {
        Self {
            engine: Engine::in_memory("engine").unwrap(),
            now: T0,
            drop_from: None,
        }
    }

    /// Runs everything until quiet.
    fn run(&mut self, sessions: &mut [&mut Session]) {
        loop {
            let mut answers = Vec::new();
            for (i, session) in sessions.iter_mut().enumerate() {
                while let Some(outgoing) = session.poll_publish() {
                    if self.drop_from != Some(i) {
                        self.engine.handle(outgoing.publish, self.now, &mut answers);
                    }
                }
            }
            if answers.is_empty() {
                return;
            }
            for answer in &answers {
                for session in sessions.iter_mut() {
                    session.handle(answer, self.now);
                }
            }
        }
    }

    /// Moves the clock to `at`, expiring what is due on the way (each deadline in turn).
    fn advance(&mut self, at: u64, sessions: &mut [&mut Session]) {
        loop {
            let next = sessions
                .iter()
                .filter_map(|s| s.next_deadline())
                .chain(self.engine.next_deadline())
                .filter(|d| *d <= at)
                .min();
            self.now = next.unwrap_or(at).max(self.now);
            let mut out = Vec::new();
            self.engine.expire(self.now, &mut out);
            for publish in &out {
                for session in sessions.iter_mut() {
                    session.handle(publish, self.now);
                }
            }
            for session in sessions.iter_mut() {
                session.expire(self.now);
            }
            self.run(sessions);
            if next.is_none() {
                return;
            }
        }
    }
}

/// The lease events of `session`, in order (other events dropped).
fn lease_events(session: &mut Session) -> Vec<SessionEvent> {
    events(session)
        .into_iter()
        .filter(|e| {
            matches!(
                e,
                SessionEvent::Completed {
                    op: "lease" | "releaseLease",
                    ..
                } | SessionEvent::LeaseRenewed { .. }
                    | SessionEvent::LeaseLost { .. }
            )
        })
        .collect()
}

fn granted(events: &[SessionEvent], lease: CallId) -> bool {
    events.iter().any(|e| {
        matches!(e, SessionEvent::Completed { call, result: Ok(Completion::Lease(Some(_))), .. } if *call == lease)
    })
}

fn refused(events: &[SessionEvent], lease: CallId) -> bool {
    events.iter().any(|e| {
        matches!(e, SessionEvent::Completed { call, result: Ok(Completion::Lease(None)), .. } if *call == lease)
    })
}

fn lost(events: &[SessionEvent], lease: CallId) -> bool {
    events
        .iter()
        .any(|e| matches!(e, SessionEvent::LeaseLost { lease: l, .. } if *l == lease))
}

const KEY: &[u8] = b"locks/pump";

#[test]
fn a_lease_is_held_once_and_a_waiting_claimant_takes_it_on_release() {
    let mut fleet = Fleet::new();
    let (mut a, mut b) = (session("la"), session("lb"));
    let held = a
        .lease(Bytes::from_static(KEY), 3_000, Some(0), T0)
        .unwrap();
    fleet.run(&mut [&mut a, &mut b]);
    assert!(granted(&lease_events(&mut a), held));
    let token = a.lease_token(held).cloned().expect("held");

    let once = b
        .lease(Bytes::from_static(KEY), 3_000, Some(0), T0)
        .unwrap();
    fleet.run(&mut [&mut a, &mut b]);
    assert!(refused(&lease_events(&mut b), once), "wait 0 tries once");
    assert_eq!(b.in_flight(), 0);

    let waiting = b
        .lease(Bytes::from_static(KEY), 3_000, Some(60_000), T0)
        .unwrap();
    fleet.run(&mut [&mut a, &mut b]);
    assert!(lease_events(&mut b).is_empty(), "still held by a: b waits");
    assert_eq!(b.in_flight(), 1);

    fleet.now += 100;
    let release = a.release_lease(held, fleet.now).unwrap();
    fleet.run(&mut [&mut a, &mut b]);
    assert!(lease_events(&mut a).iter().any(|e| matches!(
        e,
        SessionEvent::Completed { call, result: Ok(Completion::Released(true)), .. } if *call == release
    )));
    // Taken at once on the deletion's notification, not at the retry period.
    let taken_events = lease_events(&mut b);
    assert!(granted(&taken_events, waiting), "{taken_events:?}");
    let taken = b.lease_token(waiting).unwrap();
    assert!(taken > &token, "a newer fencing token");
    assert!(
        !events(&mut b)
            .iter()
            .any(|e| matches!(e, SessionEvent::Changed { .. })),
        "no change of the lease's key reaches b's caller"
    );

    // Releasing what is no longer held says so.
    let again = a.release_lease(held, fleet.now).unwrap();
    assert!(lease_events(&mut a).iter().any(|e| matches!(
        e,
        SessionEvent::Completed { call, result: Ok(Completion::Released(false)), .. } if *call == again
    )));
}

#[test]
fn a_held_lease_is_renewed_a_third_of_its_ttl_after_each_claim() {
    let mut fleet = Fleet::new();
    let (mut a, mut b) = (session("ra"), session("rb"));
    let held = a
        .lease(Bytes::from_static(KEY), 3_000, Some(0), T0)
        .unwrap();
    fleet.run(&mut [&mut a, &mut b]);
    assert!(granted(&lease_events(&mut a), held));
    assert_eq!(a.next_deadline(), Some(T0 + 1_000), "renewal at ttl/3");
    fleet.advance(T0 + 10_000, &mut [&mut a, &mut b]);
    let renewals = lease_events(&mut a)
        .iter()
        .filter(|e| matches!(e, SessionEvent::LeaseRenewed { lease, .. } if *lease == held))
        .count();
    assert_eq!(renewals, 10, "every 1 s for 10 s");
    assert!(a.lease_token(held).is_some(), "still held past its ttl");
    let other = b
        .lease(Bytes::from_static(KEY), 3_000, Some(0), fleet.now)
        .unwrap();
    fleet.run(&mut [&mut a, &mut b]);
    assert!(refused(&lease_events(&mut b), other));
}

#[test]
fn a_lease_whose_renewal_is_not_confirmed_is_lost_before_it_lapses() {
    let mut fleet = Fleet::new();
    let mut a = session("na");
    let held = a
        .lease(Bytes::from_static(KEY), 3_000, Some(0), T0)
        .unwrap();
    fleet.run(&mut [&mut a]);
    assert!(granted(&lease_events(&mut a), held));
    fleet.drop_from = Some(0); // the broker loses a's publishes from now on
    fleet.advance(T0 + 2_999, &mut [&mut a]);
    assert!(
        !lost(&lease_events(&mut a), held),
        "not before it would lapse"
    );
    fleet.advance(T0 + 3_000, &mut [&mut a]);
    assert!(
        lost(&lease_events(&mut a), held),
        "lost when its claim's ttl ends"
    );
    assert!(a.lease_token(held).is_none());
}

#[test]
fn a_lease_taken_by_someone_else_is_lost_at_the_next_renewal() {
    let mut fleet = Fleet::new();
    let (mut a, mut b) = (session("ta"), session("tb"));
    let held = a
        .lease(Bytes::from_static(KEY), 3_000, Some(0), T0)
        .unwrap();
    fleet.run(&mut [&mut a, &mut b]);
    assert!(granted(&lease_events(&mut a), held));
    // b removes a's lease by force and takes it.
    let del = Request::Del {
        key: Bytes::from_static(KEY),
    };
    b.call(&del, &CallOptions::default(), T0).unwrap();
    let taken = b
        .lease(Bytes::from_static(KEY), 3_000, Some(0), T0)
        .unwrap();
    fleet.run(&mut [&mut a, &mut b]);
    assert!(granted(&lease_events(&mut b), taken));
    fleet.advance(T0 + 1_000, &mut [&mut a, &mut b]);
    assert!(lost(&lease_events(&mut a), held));
}

#[test]
fn a_campaign_waits_until_the_holder_vanishes() {
    let mut fleet = Fleet::new();
    let (mut a, mut b) = (session("ca"), session("cb"));
    let held = a
        .lease(Bytes::from_static(KEY), 3_000, Some(0), T0)
        .unwrap();
    fleet.run(&mut [&mut a, &mut b]);
    assert!(granted(&lease_events(&mut a), held));
    let campaign = b.lease(Bytes::from_static(KEY), 3_000, None, T0).unwrap();
    fleet.run(&mut [&mut a, &mut b]);
    fleet.advance(T0 + 20_000, &mut [&mut a, &mut b]);
    assert!(
        !granted(&lease_events(&mut b), campaign),
        "a keeps renewing"
    );
    // a vanishes: its lease lapses, and b, retrying every ttl, takes it.
    let at = fleet.now;
    fleet.advance(at + 7_000, &mut [&mut b]);
    assert!(granted(&lease_events(&mut b), campaign));
}

#[test]
fn a_lost_connection_fails_an_acquisition_but_not_a_held_lease() {
    let mut fleet = Fleet::new();
    let (mut a, mut b) = (session("da"), session("db"));
    let held = a
        .lease(Bytes::from_static(KEY), 3_000, Some(0), T0)
        .unwrap();
    fleet.run(&mut [&mut a, &mut b]);
    assert!(granted(&lease_events(&mut a), held));
    let acquiring = b
        .lease(Bytes::from_static(b"other"), 3_000, Some(0), T0)
        .unwrap();
    b.connection_lost();
    assert!(lease_events(&mut b).iter().any(|e| matches!(
        e,
        SessionEvent::Completed { call, result: Err(ClientError::Disconnected), .. } if *call == acquiring
    )));
    fleet.advance(T0 + 500, &mut [&mut a]);
    a.connection_lost();
    assert!(lease_events(&mut a).is_empty());
    assert!(
        a.lease_token(held).is_some(),
        "held until a renewal says otherwise"
    );
}

// ---- any order across topics ----

/// What the engine publishes for `publish`, not yet delivered: a test then delivers it in the
/// order a reordering broker (or several server nodes) might.
fn answers(engine: &mut Engine, session: &mut Session, now: u64) -> Vec<Publish> {
    let mut out = Vec::new();
    while let Some(outgoing) = session.poll_publish() {
        engine.handle(outgoing.publish, now, &mut out);
    }
    out
}

fn changes(session: &mut Session) -> Vec<(Vec<u8>, Option<String>)> {
    events(session)
        .into_iter()
        .filter_map(|e| match e {
            SessionEvent::Changed { key, change, .. } => Some((
                key.to_vec(),
                change
                    .into_value()
                    .map(|v| String::from_utf8_lossy(&v).into_owned()),
            )),
            _ => None,
        })
        .collect()
}

/// The notification among `published` (the observer's notify topic), and the rest.
fn split_notification(published: Vec<Publish>) -> (Vec<Publish>, Vec<Publish>) {
    published
        .into_iter()
        .partition(|p| p.topic.contains("/notify/"))
}

#[test]
fn a_notification_that_overtakes_the_observations_first_read_is_reported_once() {
    let mut engine = Engine::in_memory("engine").unwrap();
    let (mut observer, mut writer) = (session("oo"), session("ow"));
    writer
        .call(&set("k", "v1"), &CallOptions::default(), T0)
        .unwrap();
    for p in answers(&mut engine, &mut writer, T0) {
        writer.handle(&p, T0);
    }
    // The observation's registration and first read reach the engine (reading v1)...
    observer.observe(Bytes::from_static(b"k"), T0).unwrap();
    let first_read = answers(&mut engine, &mut observer, T0);
    // ...then a SET of v2, whose notification reaches the observer before its first read.
    writer
        .call(&set("k", "v2"), &CallOptions::default(), T0 + 1)
        .unwrap();
    let (notification, _) = split_notification(answers(&mut engine, &mut writer, T0 + 1));
    assert_eq!(notification.len(), 1);
    observer.handle(&notification[0], T0 + 1);
    for p in &first_read {
        observer.handle(p, T0 + 1);
    }
    assert_eq!(changes(&mut observer), [(b"k".to_vec(), Some("v2".into()))]);
}

#[test]
fn a_notification_behind_the_first_read_that_saw_it_is_not_a_change() {
    let mut engine = Engine::in_memory("engine").unwrap();
    let (mut observer, mut writer) = (session("bo"), session("bw"));
    // The registration reaches the engine, then the SET, then the first read (seeing v2);
    // the notification of the SET arrives last.
    observer.observe(Bytes::from_static(b"k"), T0).unwrap();
    let register = observer.poll_publish().unwrap().publish;
    let read = observer.poll_publish().unwrap().publish;
    let mut registered = Vec::new();
    engine.handle(register, T0, &mut registered);
    writer
        .call(&set("k", "v2"), &CallOptions::default(), T0)
        .unwrap();
    let (notification, _) = split_notification(answers(&mut engine, &mut writer, T0));
    let mut first_read = Vec::new();
    engine.handle(read, T0, &mut first_read);
    for p in registered.iter().chain(&first_read).chain(&notification) {
        observer.handle(p, T0);
    }
    assert!(
        changes(&mut observer).is_empty(),
        "v2 is where the observation began"
    );
}

#[test]
fn notifications_in_reverse_order_never_take_a_version_back() {
    let mut engine = Engine::in_memory("engine").unwrap();
    let (mut observer, mut writer) = (session("ro"), session("rw"));
    observer.observe(Bytes::from_static(b"k"), T0).unwrap();
    for p in answers(&mut engine, &mut observer, T0) {
        observer.handle(&p, T0);
    }
    let mut notifications = Vec::new();
    for (i, value) in ["v1", "v2", "v3"].into_iter().enumerate() {
        let now = T0 + 1 + i as u64;
        writer
            .call(&set("k", value), &CallOptions::default(), now)
            .unwrap();
        let (notified, answered) = split_notification(answers(&mut engine, &mut writer, now));
        notifications.extend(notified);
        // The SET's answer reaches the writer before the notification reaches anyone.
        for p in &answered {
            writer.handle(p, now);
        }
    }
    events(&mut observer);
    // v3 first, then v1 and v2 late (another node's, or another topic's path).
    for i in [2, 0, 1] {
        observer.handle(&notifications[i], T0 + 10);
    }
    assert_eq!(changes(&mut observer), [(b"k".to_vec(), Some("v3".into()))]);
}

#[test]
fn a_forgotten_lease_is_no_longer_renewed_and_lapses() {
    let mut fleet = Fleet::new();
    let (mut a, mut b) = (session("fa"), session("fb"));
    let held = a
        .lease(Bytes::from_static(KEY), 3_000, Some(0), T0)
        .unwrap();
    fleet.run(&mut [&mut a, &mut b]);
    assert!(granted(&lease_events(&mut a), held));
    a.forget_lease(held);
    assert!(a.lease_token(held).is_none());
    assert_eq!(a.next_deadline(), None, "nothing to renew");
    let campaign = b.lease(Bytes::from_static(KEY), 3_000, None, T0).unwrap();
    fleet.advance(T0 + 7_000, &mut [&mut a, &mut b]);
    assert!(
        lease_events(&mut a).is_empty(),
        "no renewal, no loss reported"
    );
    assert!(granted(&lease_events(&mut b), campaign), "it lapsed");
}

/// Issue 52: a session answers the calls of the shadows it uses and reports their deltas and
/// documents; a call on a shadow it does not use is refused before anything is sent, and
/// another shadow's notifications are not its own.
#[test]
fn a_shadow_in_use_answers_its_calls_and_reports_its_notifications() {
    use mqstore_core::shadow::{Op, Stream};
    let mut jobs = Jobs::new();
    let (mut app, mut device) = (session("app"), session("lamp"));
    let refused = app.shadow("lamp", None, Op::Get, &json!(null), None, T0);
    assert!(
        matches!(refused, Err(ClientError::Status { status: 400, .. })),
        "{refused:?}"
    );
    assert!(app.poll_publish().is_none(), "nothing sent");
    let filters = app.use_shadow("lamp", None).unwrap();
    assert_eq!(
        filters,
        ["get/+", "update/+", "delete/+"].map(|s| format!("$aws/things/lamp/shadow/{s}"))
    );
    assert!(app.use_shadow("lamp", None).unwrap().is_empty(), "once");
    assert!(app.subscriptions().contains(&filters[1]));
    device.use_shadow("lamp", None).unwrap();
    assert!(matches!(
        app.use_shadow("l/amp", None),
        Err(ClientError::Status { status: 400, .. })
    ));

    // Everything the service publishes reaches both sessions, as on a broker.
    let mut exchange = |from: &mut Session, others: &mut [&mut Session]| {
        while let Some(outgoing) = from.poll_publish() {
            let mut out = Vec::new();
            let mut store = jobs.as_dyn();
            mqstore_core::server::jobs::run_request(
                &mut store,
                &outgoing.publish,
                "n",
                T0,
                &mut out,
            )
            .unwrap();
            for publish in out {
                from.handle(&publish, T0);
                for other in others.iter_mut() {
                    other.handle(&publish, T0);
                }
            }
        }
    };
    let update = json!({"state": {"desired": {"on": true}}});
    let call = app
        .shadow("lamp", None, Op::Update, &update, None, T0)
        .unwrap();
    exchange(&mut app, &mut [&mut device]);
    let answered = events(&mut app);
    let SessionEvent::Completed {
        call: done,
        op,
        result: Ok(Completion::Jobs(answer)),
    } = &answered[0]
    else {
        panic!("{answered:?}")
    };
    assert_eq!((*done, *op), (call, "shadow"));
    assert_eq!(answer.clone().into_json()["version"], 1);
    // The app uses the shadow too: it hears the delta and documents as well.
    assert_eq!(answered.len(), 3, "{answered:?}");
    let heard = events(&mut device);
    let streams: Vec<Stream> = heard
        .iter()
        .map(|e| match e {
            SessionEvent::Shadow(n) => n.stream,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(streams, [Stream::Delta, Stream::Documents]);

    // A rejection fails the call with AWS's code and message.
    let stale = json!({"state": {"reported": {"on": true}}, "version": 9});
    device
        .shadow("lamp", None, Op::Update, &stale, None, T0)
        .unwrap();
    exchange(&mut device, &mut [&mut app]);
    let failed = events(&mut device);
    assert!(
        matches!(&failed[0], SessionEvent::Completed { result: Err(ClientError::Status { status: 409, message }), .. } if message == "Version conflict"),
        "{failed:?}"
    );
    // Another shadow's notifications are not reported to a session that does not use it.
    app.use_shadow("lamp", Some("config")).unwrap();
    let named = json!({"state": {"desired": {"fw": "2"}}});
    app.shadow("lamp", Some("config"), Op::Update, &named, None, T0)
        .unwrap();
    exchange(&mut app, &mut [&mut device]);
    assert!(
        events(&mut device).is_empty(),
        "the device does not use lamp/config"
    );
    assert_eq!(app.leave_shadow("lamp", Some("config")).len(), 3);
    assert!(app.leave_shadow("lamp", Some("config")).is_empty());
}
