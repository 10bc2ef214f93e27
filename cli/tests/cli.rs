//! The `mqstore` command as a person meets it: exit codes, messages, values from files and
//! standard input, help, progress output, against a real mosquitto and server.

#[macro_use]
mod broker;
mod calls;
mod tls;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use broker::{Broker, Kind, Mosquitto, Process};
use mqstore_net::BrokerConfig;
use mqstore_server::{ServerConfig, ServerHandle, spawn};

/// A broker with a server next to it, and a way to run the CLI against them.
struct Setup {
    broker: Mosquitto,
    server: Option<ServerHandle>,
    runtime: tokio::runtime::Runtime,
}

impl Setup {
    fn start(kind: Kind, node_id: &str) -> Self {
        Self::start_beside(Broker::start_kind(kind), node_id)
    }

    /// A server beside `broker`.
    fn start_beside(broker: Mosquitto, node_id: &str) -> Self {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let config = ServerConfig::new(
            BrokerConfig {
                port: broker.port,
                ..BrokerConfig::default()
            },
            node_id,
        );
        let server = runtime.block_on(spawn(config)).expect("the server starts");
        let setup = Self {
            broker,
            server: Some(server),
            runtime,
        };
        // The server may still be subscribing: wait until it answers (or the broker refuses
        // the request, as it does where an ACL denies every request).
        let started = Instant::now();
        while !matches!(
            setup.cli(&["get", "ready?", "--timeout", "1"]).code,
            Some(1 | 3)
        ) {
            assert!(started.elapsed() < Duration::from_secs(10), "no answer");
        }
        setup
    }

    fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mqstore"));
        command
            .args(["--port", &self.broker.port.to_string()])
            .env_remove("MQSTORE_LOG");
        command
    }

    fn cli(&self, args: &[&str]) -> Run {
        run(self.command().args(args).output().unwrap())
    }

    /// Runs the CLI with `input` on its standard input.
    fn cli_with_input(&self, args: &[&str], input: &[u8]) -> Run {
        let mut child = self
            .command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let output = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        run(output)
    }
}

impl Setup {
    /// Waits until the server's metrics have `line`.
    fn wait_metric(&self, line: &str) {
        let metrics = &self.server.as_ref().expect("a server").metrics;
        let reached = calls::wait_for_metric(metrics, line, |l| l == line);
        self.runtime.block_on(reached);
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            let _ = self.runtime.block_on(server.stop());
        }
    }
}

struct Run {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

impl Run {
    fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_owned()
    }
}

fn run(output: Output) -> Run {
    Run {
        code: output.status.code(),
        stdout: output.stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn mqstore(args: &[&str]) -> Run {
    mqstore_with(args, &[])
}

/// `mqstore ARGS` with these environment variables (and none of the runner's logs, key
/// password or CA bundle).
fn mqstore_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    run(Command::new(env!("CARGO_BIN_EXE_mqstore"))
        .args(args)
        .env_remove("MQSTORE_LOG")
        .env_remove("MQSTORE_KEY_PASSWORD")
        .env_remove("SSL_CERT_FILE")
        .envs(env.iter().copied())
        .output()
        .unwrap())
}

on_both_brokers! {
    fn exit_codes_and_output_of_every_command(kind: Kind) {
        let s = Setup::start(kind, "node-cli");
        assert_eq!(s.cli(&["set", "greeting", "hello"]).code, Some(0));
        assert_eq!(s.cli(&["get", "greeting"]).out(), "hello");
        let get = s.cli(&["get", "greeting", "--json"]);
        assert_eq!(get.code, Some(0));
        let json = get.out();
        assert!(
            json.starts_with("{\"value\":\"hello\",\"version\":\""),
            "{json}"
        );
        assert!(json.contains(":node-cli\"}"), "{json}");
        let absent = s.cli(&["get", "absent"]);
        assert_eq!(
            (absent.code, absent.out(), absent.stderr),
            (Some(1), "(nil)".into(), String::new())
        );
        assert_eq!(s.cli(&["set", "greeting", "other", "--nx"]).code, Some(1));
        assert_eq!(s.cli(&["scan", "gr*"]).out(), "greeting");
        let bad_token = s.cli(&["set", "k", "v", "--fencing-token", "nonsense"]);
        assert_eq!(bad_token.code, Some(2), "{}", bad_token.stderr);
        assert!(
            bad_token.stderr.contains("--fencing-token"),
            "{}",
            bad_token.stderr
        );
        let del = s.cli(&["del", "greeting"]);
        assert_eq!(
            (del.code, del.out(), del.stderr),
            (Some(0), "(deleted)".into(), String::new())
        );
        let bad_id = s.cli(&["--client-id", "bad:id", "get", "x"]);
        assert_eq!(bad_id.code, Some(2));
        assert!(bad_id.stderr.contains("--client-id"), "{}", bad_id.stderr);
    }
}

on_both_brokers! {
    fn options_are_accepted_before_or_after_the_command(kind: Kind) {
        let s = Setup::start(kind, "node-order");
        assert_eq!(
            s.cli(&["--timeout", "3", "--json", "set", "k", "v"]).code,
            Some(0)
        );
        let before = s.cli(&["--timeout", "3", "--json", "get", "k"]);
        let after = s.cli(&["get", "k", "--timeout", "3", "--json"]);
        assert_eq!(before.code, Some(0), "{}", before.stderr);
        assert!(
            before.out().starts_with("{\"value\":\"v\""),
            "{}",
            before.out()
        );
        assert_eq!(before.out(), after.out());
        // A timeout of zero would fail every call: refused up front.
        let zero = s.cli(&["get", "k", "--timeout", "0"]);
        assert_eq!(zero.code, Some(2), "{}", zero.stderr);
    }
}

/// A port nothing listens on (bound, then released).
fn unused_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port().to_string()
}

#[test]
fn a_broker_that_is_down_fails_at_once_with_one_clear_line() {
    let port = unused_port();
    let started = Instant::now();
    // With a 30 s timeout, only an immediate failure returns well within it.
    let down = mqstore(&["--port", &port, "get", "a", "--timeout", "30"]);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(down.code, Some(4));
    let lines: Vec<&str> = down.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line, no log noise: {}", down.stderr);
    assert!(
        lines[0].starts_with("error: cannot reach the MQTT broker at 127.0.0.1:"),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains("is it running?"), "{}", lines[0]);
}

#[test]
fn mqstore_log_turns_logs_on_and_a_value_that_does_not_read_is_said() {
    let port = unused_port();
    let with_log = |filter: &str| {
        run(Command::new(env!("CARGO_BIN_EXE_mqstore"))
            .args(["--port", &port, "get", "a"])
            .env("MQSTORE_LOG", filter)
            .output()
            .unwrap())
    };
    let debug = with_log("warn,mqstore_net=debug");
    assert_eq!(debug.code, Some(4), "{}", debug.stderr);
    assert!(
        debug
            .stderr
            .contains("DEBUG mqstore_net::client: could not connect"),
        "a directive turns a module's logs on: {}",
        debug.stderr
    );
    let wrong = with_log("mqstore=loud");
    assert_eq!(wrong.code, Some(4), "{}", wrong.stderr);
    let lines: Vec<&str> = wrong.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "the warning, then the error: {}",
        wrong.stderr
    );
    assert!(
        lines[0].starts_with("warning: MQSTORE_LOG=\"mqstore=loud\" is not a log filter"),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains("target=level"),
        "says what to give: {}",
        lines[0]
    );
    assert!(lines[1].starts_with("error: cannot reach"), "{}", lines[1]);
}

#[test]
fn a_broker_that_refuses_the_connection_is_named_with_its_reason_code() {
    // Anonymous clients are not allowed and no user exists: mosquitto refuses every CONNECT.
    let broker = Mosquitto::start_config("allow_anonymous false\n");
    let refused = mqstore(&["--port", &broker.port.to_string(), "get", "a"]);
    assert_eq!(refused.code, Some(5), "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("the MQTT broker refused the connection: Not authorized (reason code 0x87)"),
        "{}",
        refused.stderr
    );
    assert!(
        !refused.stderr.contains("is it running"),
        "{}",
        refused.stderr
    );

    // The server says the same, and backs off rather than hammering the broker.
    let log = std::env::temp_dir().join(format!("mqstore-cli-refused-{}.txt", std::process::id()));
    let mut serve = Command::new(env!("CARGO_BIN_EXE_mqstore"))
        .args(["--port", &broker.port.to_string(), "serve"])
        .env_remove("MQSTORE_LOG")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .map(Process)
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let _ = serve.kill();
    let _ = serve.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let attempts = text
        .matches("the MQTT broker refused the connection: Not authorized (reason code 0x87)")
        .count();
    // 100 ms, 200 ms, 400 ms, ... between attempts: a handful in 2 s, not hundreds.
    assert!((1..=8).contains(&attempts), "{attempts} attempts:\n{text}");
}

on_both_brokers! {
    fn px_must_be_positive_and_nothing_is_sent_otherwise(kind: Kind) {
        let s = Setup::start(kind, "node-px");
        let zero = s.cli(&["set", "short-lived", "v", "--px", "0"]);
        assert_eq!(zero.code, Some(2));
        assert!(zero.stderr.contains("--px"), "{}", zero.stderr);
        assert_eq!(
            s.cli(&["get", "short-lived"]).code,
            Some(1),
            "nothing was set"
        );
        assert_eq!(
            s.cli(&["set", "short-lived", "v", "--px", "60000"]).code,
            Some(0)
        );
        assert_eq!(s.cli(&["get", "short-lived"]).out(), "v");
    }
}

on_both_brokers! {
    fn binary_and_large_values_round_trip_through_stdin_files_and_raw_output(kind: Kind) {
        let s = Setup::start(kind, "node-bin");
        // 200 KB (more than an argument may be) with every byte value, NUL and CR LF included.
        let value: Vec<u8> = (0..200_000u32).map(|i| (i % 256) as u8).collect();
        let set = s.cli_with_input(&["set", "blob", "-"], &value);
        assert_eq!(
            (set.code, set.out()),
            (Some(0), "OK".into()),
            "{}",
            set.stderr
        );
        let raw = s.cli(&["get", "blob", "--raw"]);
        assert_eq!(raw.code, Some(0));
        assert!(raw.stdout == value, "--raw writes the exact bytes");

        let dir = std::env::temp_dir().join(format!("mqstore-cli-{kind:?}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (input, output) = (dir.join("in.bin"), dir.join("out.bin"));
        let other: Vec<u8> = value.iter().rev().copied().collect();
        std::fs::write(&input, &other).unwrap();
        let from_file = s.cli(&["set", "blob2", "--value-file", input.to_str().unwrap()]);
        assert_eq!(from_file.code, Some(0), "{}", from_file.stderr);
        let to_file = s.cli(&["get", "blob2", "--output", output.to_str().unwrap()]);
        assert_eq!((to_file.code, to_file.stdout.len()), (Some(0), 0));
        assert!(
            std::fs::read(&output).unwrap() == other,
            "--output writes the exact bytes"
        );
        // VDEL compares against a value from a file too.
        let vdel = s.cli(&["vdel", "blob2", "--value-file", input.to_str().unwrap()]);
        assert_eq!((vdel.code, vdel.out()), (Some(0), "(deleted)".into()));

        let missing = s.cli(&[
            "set",
            "k",
            "--value-file",
            dir.join("absent").to_str().unwrap(),
        ]);
        assert_eq!(missing.code, Some(2));
        assert!(
            missing.stderr.contains("--value-file"),
            "{}",
            missing.stderr
        );
        let both = s.cli(&["set", "k", "v", "--value-file", input.to_str().unwrap()]);
        assert_eq!(both.code, Some(2), "a value and a file are one too many");
        let neither = s.cli(&["set", "k"]);
        assert_eq!(neither.code, Some(2));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn every_option_has_help_and_serve_keeps_its_own_apart() {
    for command in ["del", "vdel", "set"] {
        let help = mqstore(&[command, "--help"]);
        let line = help
            .out()
            .lines()
            .find(|l| l.contains("--fencing-token"))
            .map(str::to_owned)
            .unwrap_or_default();
        assert!(line.contains("Fencing token"), "{command}: {line:?}");
    }
    let help = mqstore(&["serve", "--help"]).out();
    let own = help.find("--node-id").expect("serve's options");
    let broker = help
        .find("Broker connection:")
        .expect("a heading for the broker options");
    assert!(
        own < broker,
        "serve's own options come first, apart:\n{help}"
    );
    assert!(help[broker..].contains("--host"), "{help}");
    assert!(!help[..broker].contains("--host"), "{help}");
    // Every option of every command says what it is for.
    for command in [
        "serve",
        "get",
        "set",
        "del",
        "vdel",
        "scan",
        "lock",
        "bench",
        "watch",
        "jobs create",
        "jobs cancel",
        "jobs delete",
        "jobs list",
        "jobs describe",
        "jobs watch",
    ] {
        let args: Vec<&str> = command.split(' ').chain(["--help"]).collect();
        let help = mqstore(&args).out();
        for line in help.lines().map(str::trim).filter(|l| l.starts_with("--")) {
            let described = line
                .split("  ")
                .filter(|part| !part.trim().is_empty())
                .count()
                > 1;
            // Long descriptions wrap to the next line.
            let next = help
                .lines()
                .skip_while(|l| l.trim() != line)
                .nth(1)
                .unwrap_or("");
            assert!(
                described || next.starts_with("          "),
                "{command}: {line} has no help text"
            );
        }
    }
}

on_both_brokers! {
    fn the_benchmark_prints_one_line_per_round_when_not_on_a_terminal(kind: Kind) {
        let s = Setup::start(kind, "node-bench");
        let bench = s.cli(&[
            "bench",
            "--in-flight",
            "1",
            "--duration",
            "1",
            "--rounds",
            "2",
            "--connections",
            "1",
        ]);
        assert_eq!(bench.code, Some(0), "{}", bench.stderr);
        assert!(
            !bench.stderr.contains('\r'),
            "no bar frames in a log: {:?}",
            bench.stderr
        );
        let rounds: Vec<&str> = bench
            .stderr
            .lines()
            .filter(|l| l.starts_with("bench: 1 in flight, round "))
            .collect();
        assert_eq!(rounds.len(), 2, "{}", bench.stderr);
        assert!(
            rounds[1].starts_with("bench: 1 in flight, round 2/2: mqstore "),
            "{}",
            rounds[1]
        );
        assert!(
            bench.out().starts_with("in flight | mqstore ops/s"),
            "{}",
            bench.out()
        );
    }
}

#[test]
fn a_request_the_broker_refuses_as_too_large_is_reported_as_refused_and_not_applied() {
    // mosquitto 2.0 refuses a publish over its message_size_limit with PUBACK reason code
    // 0x95, which MQTT 5 does not list for PUBACK (rumqttc cannot read it and drops the
    // connection): still the broker's refusal, not a broken protocol.
    let setup = Setup::start_beside(
        Broker::start_config("message_size_limit 50000\n"),
        "limited",
    );
    let set = setup.cli(&["set", "big60k", &"x".repeat(60_000)]);
    assert_eq!(set.code, Some(3), "{}", set.stderr);
    assert_eq!(
        set.stderr.trim(),
        "error: the MQTT broker refused the request: Packet too large (reason code 0x95); it was not applied"
    );
    assert_eq!(setup.cli(&["get", "big60k"]).code, Some(1), "not applied");
    // A request within the limit goes through.
    assert_eq!(
        setup.cli(&["set", "small", &"x".repeat(1_000)]).code,
        Some(0)
    );
}

#[test]
fn a_request_the_broker_does_not_authorize_is_reported_as_refused_and_not_applied() {
    // mosquitto 2.0 answers a publish its ACL denies with PUBACK reason code 0x87. Requests
    // go to clients/{id}/statestore/...; answers come back on clients/{id}/services/....
    let dir = std::env::temp_dir().join(format!("mqstore-cli-acl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let acl = dir.join("acl.conf");
    std::fs::write(
        &acl,
        "topic readwrite #\ntopic deny clients/+/statestore/#\n",
    )
    .unwrap();
    let setup = Setup::start_beside(
        Broker::start_config(&format!("acl_file {}\n", acl.display())),
        "acl",
    );
    let set = setup.cli(&["set", "k", "v"]);
    assert_eq!(set.code, Some(3), "{}", set.stderr);
    assert_eq!(
        set.stderr.trim(),
        "error: the MQTT broker refused the request: Not authorized (reason code 0x87); it was not applied"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nodes_says_so_when_the_broker_will_not_let_it_read_the_presences() {
    let broker = Broker::start_mochi_denying("statestore/#");
    let nodes = mqstore(&["--port", &broker.port.to_string(), "nodes"]);
    assert_eq!(nodes.code, Some(5), "{}", nodes.stderr);
    assert!(
        nodes.stderr.contains(
            "refused the subscription to statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/server/+: NotAuthorized (its access rules"
        ),
        "{}",
        nodes.stderr
    );
}

#[test]
fn a_broker_that_breaks_the_protocol_is_named_and_the_server_says_how_to_fix_it() {
    // Mochi as shipped answers a publish with user properties with PUBACK reason code 0x01.
    let broker = Broker::start_kind(Kind::MochiAsShipped);
    let port = broker.port.to_string();
    let log = std::env::temp_dir().join(format!("mqstore-cli-serve-{}.txt", std::process::id()));
    let mut serve = Command::new(env!("CARGO_BIN_EXE_mqstore"))
        .args(["--port", &port, "serve", "--node-id", "strict"])
        .env_remove("MQSTORE_LOG")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .map(Process)
        .unwrap();
    // Each request reaches the server through the broker; each answer is refused the same way.
    for _ in 0..2 {
        assert_eq!(mqstore(&["--port", &port, "set", "k", "v"]).code, Some(4));
    }
    let set = mqstore(&["--port", &port, "set", "k", "v", "--timeout", "5"]);
    assert_eq!(set.code, Some(4), "{}", set.stderr);
    assert!(
        set.stderr.contains("the MQTT broker broke the MQTT 5 protocol: it sent an acknowledgement with reason code 0x01"),
        "{}",
        set.stderr
    );
    assert!(
        set.stderr.contains("NoInheritedPropertiesOnAck"),
        "{}",
        set.stderr
    );
    // The server's answer meets the same fate, again at every reconnect: it says what is
    // wrong and, as it repeats, how to fix it. A request sent while the server reconnects
    // reaches nobody (clean start), so requests keep coming until it has said so.
    let started = Instant::now();
    let server_log = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("the broker keeps breaking the protocol")
            || started.elapsed() > Duration::from_secs(30)
        {
            break text;
        }
        assert_eq!(mqstore(&["--port", &port, "set", "k", "v"]).code, Some(4));
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = serve.kill();
    let _ = serve.wait();
    let _ = std::fs::remove_file(&log);
    assert!(server_log.contains("reason code 0x01"), "{server_log}");
    assert!(
        server_log.contains("the broker keeps breaking the protocol")
            && server_log.contains("NoInheritedPropertiesOnAck"),
        "{server_log}"
    );
}

on_both_brokers! {
    /// `mqstore watch` prints changes, and on Ctrl-C leaves without leaving its
    /// registrations behind.
    fn watch_prints_changes_and_leaves_nothing_behind_on_ctrl_c(kind: Kind) {
        let s = Setup::start(kind, "node-watch");
        let mut watch = s
            .command()
            .args(["watch", "k"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        s.wait_metric("mqstore_watches 1");
        assert_eq!(s.cli(&["set", "k", "hello"]).code, Some(0));
        let mut stdout = std::io::BufReader::new(watch.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        assert_eq!(line.trim(), "k SET hello");
        let status = Command::new("kill")
            .args(["-INT", &watch.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(watch.wait().unwrap().code(), Some(0));
        s.wait_metric("mqstore_watches 0");
    }
}

on_both_brokers! {
    /// Issue 10: `mqstore jobs ...` as scripts and people use it: output, `--json`, exit
    /// codes, bad documents refused before anything is sent, and `jobs watch`.
    fn jobs_commands_create_list_describe_cancel_delete_and_watch(kind: Kind) {
        use std::io::BufRead;
        let s = Setup::start(kind, "node-jobs-cli");
        let create = s.cli(&[
            "jobs", "create", "job1", "--targets", "T1,T2", "--document", r#"{"op":"reboot"}"#,
            "--in-progress-timeout-minutes", "30", "--max-retries", "1",
        ]);
        assert_eq!((create.code, create.out()), (Some(0), "created job1 on 2 thing(s)".into()), "{}", create.stderr);
        let again = s.cli(&["jobs", "create", "job1", "--targets", "T1", "--document", "{}"]);
        assert_eq!(again.code, Some(3), "{}", again.stderr);
        assert!(again.stderr.contains("Conflict"), "{}", again.stderr);
        for (document, says) in [("not json", "not JSON"), ("[1]", "a JSON object")] {
            let bad = s.cli(&["jobs", "create", "job9", "--targets", "T1", "--document", document]);
            assert_eq!(bad.code, Some(2), "{}", bad.stderr);
            assert!(bad.stderr.contains("--document") && bad.stderr.contains(says), "{}", bad.stderr);
        }
        let missing = s.cli(&["jobs", "create", "job9", "--targets", "T1", "--document-file", "/nonexistent.json"]);
        assert_eq!(missing.code, Some(2), "{}", missing.stderr);
        assert!(missing.stderr.contains("/nonexistent.json"), "{}", missing.stderr);

        // `jobs watch` sees what happens to T1 from now on.
        let mut watch = s
            .command()
            .args(["jobs", "watch", "--thing", "T1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        std::io::BufReader::new(watch.stderr.take().unwrap()).read_line(&mut ready).unwrap();
        assert!(ready.starts_with("watching the jobs of T1"), "{ready}");

        let file = std::env::temp_dir().join(format!("mqstore-job-{kind:?}-{}.json", std::process::id()));
        std::fs::write(&file, br#"{"op":"update"}"#).unwrap();
        let create = s.cli(&["jobs", "create", "job2", "--targets", "T1", "--document-file", file.to_str().unwrap(), "--json"]);
        std::fs::remove_file(&file).unwrap();
        assert_eq!(create.code, Some(0), "{}", create.stderr);
        let created: serde_json::Value = serde_json::from_str(&create.out()).unwrap();
        assert_eq!(created, serde_json::json!({ "jobId": "job2", "targets": 1 }));

        assert_eq!(s.cli(&["jobs", "list"]).out(), "job1\tIN_PROGRESS\t2 thing(s)\njob2\tIN_PROGRESS\t1 thing(s)");
        let listed: serde_json::Value = serde_json::from_str(&s.cli(&["jobs", "list", "--json"]).out()).unwrap();
        assert_eq!(listed[1]["jobId"], "job2");
        assert_eq!(
            s.cli(&["jobs", "list", "--thing", "T1"]).out(),
            "T1\tjob1\tQUEUED\texecution 1\nT1\tjob2\tQUEUED\texecution 1"
        );
        let queued: serde_json::Value =
            serde_json::from_str(&s.cli(&["jobs", "list", "--status", "queued", "--json"]).out()).unwrap();
        assert_eq!(queued.as_array().unwrap().len(), 3);
        assert_eq!(s.cli(&["jobs", "list", "--status", "bogus"]).code, Some(2));

        let described = s.cli(&["jobs", "describe", "job1"]).out();
        assert!(described.contains("targets: T1,T2") && described.contains("QUEUED 2"), "{described}");
        let job: serde_json::Value = serde_json::from_str(&s.cli(&["jobs", "describe", "job1", "--json"]).out()).unwrap();
        assert_eq!(job["document"], serde_json::json!({ "op": "reboot" }));
        assert_eq!(job["timeoutConfig"]["inProgressTimeoutInMinutes"], 30);
        let execution: serde_json::Value =
            serde_json::from_str(&s.cli(&["jobs", "describe", "job1", "--thing", "T1", "--json"]).out()).unwrap();
        assert_eq!((execution["status"].as_str(), execution["thingName"].as_str()), (Some("QUEUED"), Some("T1")));
        let unknown = s.cli(&["jobs", "describe", "nope"]);
        assert_eq!(unknown.code, Some(1), "{}", unknown.stderr);
        assert!(unknown.stderr.contains("ResourceNotFound"), "{}", unknown.stderr);

        assert_eq!(s.cli(&["jobs", "cancel", "job1"]).out(), "canceled job1");
        assert_eq!(
            s.cli(&["jobs", "describe", "job1", "--thing", "T2"]).out(),
            "job1 on T2: CANCELED (execution 1, version 2)"
        );
        assert_eq!(s.cli(&["jobs", "delete", "job2", "--thing", "T1"]).code, Some(0));
        assert_eq!(s.cli(&["jobs", "delete", "job2", "--thing", "T1"]).code, Some(1));

        // A rollout's settings, their changes, and the job's end (on T3, T4: the watcher's T1
        // sees none of it).
        let create = s.cli(&[
            "jobs", "create", "job3", "--targets", "T3,T4", "--document", "{}", "--max-per-minute", "100",
            "--abort", "FAILED:10:5", "--description", "canary",
        ]);
        assert_eq!(create.code, Some(0), "{}", create.stderr);
        let bad = s.cli(&["jobs", "create", "job4", "--targets", "T3", "--document", "{}", "--abort", "FAILED:10"]);
        assert_eq!(bad.code, Some(2), "{}", bad.stderr);
        assert!(bad.stderr.contains("TYPE:PERCENT:MIN"), "{}", bad.stderr);
        let bad = s.cli(&["jobs", "create", "job4", "--targets", "T3", "--document", "{}", "--max-per-minute", "5000"]);
        assert_eq!(bad.code, Some(3), "{}", bad.stderr);
        assert!(bad.stderr.contains("maximumPerMinute"), "{}", bad.stderr);
        assert_eq!(s.cli(&["jobs", "update", "job3", "--max-per-minute", "200", "--description", "wider"]).out(), "updated job3");
        let job: serde_json::Value = serde_json::from_str(&s.cli(&["jobs", "describe", "job3", "--json"]).out()).unwrap();
        assert_eq!(job["description"], "wider");
        assert_eq!(job["jobExecutionsRolloutConfig"]["maximumPerMinute"], 200);
        assert_eq!(job["abortConfig"]["criteriaList"][0]["thresholdPercentage"], 10.0);
        let plain = s.cli(&["jobs", "describe", "job3"]).out();
        assert!(plain.contains("job job3 (IN_PROGRESS)") && plain.contains("rollout: 2 of 2 things notified"), "{plain}");
        let cancel = s.cli(&["jobs", "cancel-execution", "job3", "--thing", "T3", "--expected-version", "9"]);
        assert_eq!(cancel.code, Some(3), "{}", cancel.stderr);
        assert!(cancel.stderr.contains("VersionConflict"), "{}", cancel.stderr);
        assert_eq!(
            s.cli(&["jobs", "cancel-execution", "job3", "--thing", "T3"]).out(),
            "canceled the execution of job3 on T3"
        );
        assert_eq!(s.cli(&["jobs", "cancel", "job3", "--reason-code", "BAD_BATCH", "--comment", "halt"]).out(), "canceled job3");
        let answer = s.cli(&["jobs", "call", r#"{"op": "describeJob", "jobId": "job3"}"#, "--json"]);
        let answer: serde_json::Value = serde_json::from_str(&answer.out()).unwrap();
        assert_eq!((answer["status"].as_str(), answer["reasonCode"].as_str()), (Some("CANCELED"), Some("BAD_BATCH")));
        let page = s.cli(&["jobs", "list", "--max-results", "1"]).out();
        assert_eq!(page, "job1\tCANCELED\t2 thing(s)\nnext token: job1", "{page}");
        let page = s.cli(&["jobs", "list", "--max-results", "5", "--next-token", "job1", "--json"]).out();
        let page: serde_json::Value = serde_json::from_str(&page).unwrap();
        assert_eq!(page["jobs"].as_array().unwrap().len(), 2, "{page}");
        assert_eq!(page["nextToken"], serde_json::Value::Null);
        assert_eq!(s.cli(&["jobs", "delete-job", "job3"]).out(), "deleted job3");
        assert_eq!(s.cli(&["jobs", "describe", "job3"]).code, Some(1));
        let bad = s.cli(&["jobs", "call", r#"{"op": "dropTables"}"#]);
        assert_eq!(bad.code, Some(3), "{}", bad.stderr);

        // What the watcher printed: job2 joined (notify only: job1 stays first); job1's
        // cancel left job2 alone and first; job2's deletion emptied the list.
        let mut stdout = std::io::BufReader::new(watch.stdout.take().unwrap());
        let mut lines = Vec::new();
        while lines.len() < 5 {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            lines.push(line.trim().to_owned());
        }
        assert_eq!(
            lines,
            [
                "notify in-progress=[] queued=[job1,job2]",
                "notify in-progress=[] queued=[job2]",
                "notify-next job2 QUEUED (execution 1)",
                "notify in-progress=[] queued=[]",
                "notify-next (none)",
            ]
        );
        let status = Command::new("kill").args(["-INT", &watch.id().to_string()]).status().unwrap();
        assert!(status.success());
        assert_eq!(watch.wait().unwrap().code(), Some(0));
    }
}

/// Issue 33: `mqstore groups`, `mqstore templates` and the create options that use them, as
/// scripts and people use them.
#[test]
fn groups_templates_and_scheduled_jobs_from_the_cli() {
    let s = Setup::start(Kind::Mosquitto, "node-groups-cli");
    let created = s.cli(&["groups", "create", "fleet", "--description", "the lab"]);
    assert_eq!(created.code, Some(0), "{}", created.stderr);
    assert!(
        created.out().starts_with("created fleet (arn:aws:iot:"),
        "{}",
        created.out()
    );
    let again = s.cli(&["groups", "create", "fleet"]);
    assert_eq!(again.code, Some(3), "{}", again.stderr);
    assert!(
        again.stderr.contains("ResourceAlreadyExists"),
        "{}",
        again.stderr
    );
    assert_eq!(
        s.cli(&["groups", "add", "fleet", "G1", "G2", "G3"]).out(),
        "added 3 thing(s) to fleet"
    );
    assert_eq!(
        s.cli(&["groups", "things", "fleet", "--max-results", "2"])
            .out(),
        "G1\nG2\nnext token: G2"
    );
    assert_eq!(
        s.cli(&["groups", "things", "fleet", "--next-token", "G2"])
            .out(),
        "G3"
    );
    assert_eq!(s.cli(&["groups", "list"]).out(), "fleet");
    let group: serde_json::Value =
        serde_json::from_str(&s.cli(&["groups", "describe", "fleet", "--json"]).out()).unwrap();
    assert_eq!(
        group["thingGroupProperties"]["thingGroupDescription"],
        "the lab"
    );
    assert_eq!(s.cli(&["groups", "describe", "nowhere"]).code, Some(1));

    let template = s.cli(&[
        "templates",
        "create",
        "fw",
        "--document",
        r#"{"url": "https://fw/${aws:iot:parameter:v}.bin"}"#,
        "--description",
        "firmware",
        "--max-per-minute",
        "50",
    ]);
    assert_eq!(template.code, Some(0), "{}", template.stderr);
    assert_eq!(s.cli(&["templates", "list"]).out(), "fw");
    let no_document = s.cli(&["templates", "create", "empty"]);
    assert_eq!(no_document.code, Some(2), "{}", no_document.stderr);
    // A continuous job from the template on the group, in a weekly window.
    let create = s.cli(&[
        "jobs",
        "create",
        "upgrade",
        "--targets",
        "thinggroup/fleet",
        "--template",
        "fw",
        "--param",
        "v=2.0",
        "--continuous",
        "--window",
        "cron(0 2 ? * SAT *)=120",
    ]);
    assert_eq!(
        create.out(),
        "created upgrade on 3 thing(s)",
        "{}",
        create.stderr
    );
    let unfilled = s.cli(&[
        "jobs",
        "create",
        "up2",
        "--targets",
        "G1",
        "--template",
        "fw",
    ]);
    assert_eq!(unfilled.code, Some(3), "{}", unfilled.stderr);
    assert!(unfilled.stderr.contains("\"v\""), "{}", unfilled.stderr);
    let job: serde_json::Value =
        serde_json::from_str(&s.cli(&["jobs", "describe", "upgrade", "--json"]).out()).unwrap();
    assert_eq!(job["document"]["url"], "https://fw/2.0.bin");
    assert_eq!(job["targetSelection"], "CONTINUOUS");
    assert_eq!(job["jobExecutionsRolloutConfig"]["maximumPerMinute"], 50);
    assert_eq!(
        job["schedulingConfig"]["maintenanceWindows"][0]["durationInMinutes"],
        120
    );
    let bad = s.cli(&[
        "jobs",
        "create",
        "up3",
        "--targets",
        "G1",
        "--document",
        "{}",
        "--window",
        "cron(0 0 30 2 ? *)=30",
    ]);
    assert_eq!(bad.code, Some(3), "{}", bad.stderr);
    assert!(bad.stderr.contains("never fires"), "{}", bad.stderr);
    // Scheduled for later: SCHEDULED, nobody notified.
    let later = s.cli(&[
        "jobs",
        "create",
        "later",
        "--targets",
        "G1",
        "--document",
        "{}",
        "--start-time",
        "2099-01-01T00:00",
        "--end-time",
        "2099-01-02T00:00",
        "--end-behavior",
        "cancel",
    ]);
    assert_eq!(later.code, Some(0), "{}", later.stderr);
    assert!(
        s.cli(&["jobs", "describe", "later"])
            .out()
            .contains("job later (SCHEDULED)")
    );
    assert_eq!(
        s.cli(&["jobs", "describe", "later", "--thing", "G1"]).code,
        Some(1)
    );
    // A thing that leaves the group: REMOVED (outside the window it was never notified).
    assert_eq!(
        s.cli(&["groups", "remove", "fleet", "G2"]).out(),
        "removed 1 thing(s) from fleet"
    );
    let removed = s
        .cli(&["jobs", "describe", "upgrade", "--thing", "G2"])
        .out();
    assert!(removed.contains("REMOVED"), "{removed}");
    assert_eq!(s.cli(&["templates", "delete", "fw"]).out(), "deleted fw");
    assert_eq!(s.cli(&["groups", "delete", "fleet"]).out(), "deleted fleet");
}

#[test]
fn command_send_status_and_their_exit_codes() {
    let s = Setup::start(Kind::Mosquitto, "node-commands");
    // Nobody answers: exit 6, and the error says what may have happened.
    let timed_out = s.cli(&[
        "command",
        "send",
        "drones/SN1/cmd",
        "{}",
        "--timeout",
        "300ms",
    ]);
    assert_eq!(timed_out.code, Some(6), "{}", timed_out.stderr);
    assert!(
        timed_out.stderr.contains("may still have run"),
        "{}",
        timed_out.stderr
    );
    // A profile the server does not know: refused, exit 3, the known ones named.
    let unknown = s.cli(&["command", "send", "a/b", "x", "--profile", "pigeon"]);
    assert_eq!(unknown.code, Some(3), "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains("dji, iothub, mqtt5"),
        "{}",
        unknown.stderr
    );
    // One-way: done once the broker took it.
    let oneway = s.cli(&["command", "send", "drones/SN1/cmd", "{}", "--oneway"]);
    assert_eq!(oneway.code, Some(0), "{}", oneway.stderr);
    assert!(oneway.out().ends_with(" DELIVERED"), "{}", oneway.out());
    // Detached: the id at once; its status record by id.
    let detached = s.cli(&[
        "command",
        "send",
        "drones/SN1/cmd",
        "{}",
        "--detach",
        "--json",
    ]);
    assert_eq!(detached.code, Some(0), "{}", detached.stderr);
    let sent: serde_json::Value = serde_json::from_str(&detached.out()).unwrap();
    assert_eq!(sent["status"], "SENT");
    let id = sent["id"].as_str().unwrap();
    let status = s.cli(&["command", "status", id]);
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    let record: serde_json::Value = serde_json::from_str(&status.out()).unwrap();
    assert_eq!(
        (record["id"].as_str(), record["topic"].as_str()),
        (Some(id), Some("drones/SN1/cmd"))
    );
    let missing = s.cli(&["command", "status", "no-such-id"]);
    assert_eq!(missing.code, Some(3), "{}", missing.stderr);
    // A profile file that does not parse stops the server before it starts.
    let dir = std::env::temp_dir().join(format!("mqstore-profiles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("profiles.json");
    std::fs::write(
        &file,
        r#"{"x": {"command": "a/{dev}", "answer": "b/{dev}"}}"#,
    )
    .unwrap();
    let serve = s.cli(&["serve", "--command-profiles", file.to_str().unwrap()]);
    assert_eq!(serve.code, Some(2));
    assert!(
        serve.stderr.contains("device profile \"x\""),
        "{}",
        serve.stderr
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn stored_commands_from_the_cli() {
    let s = Setup::start(Kind::Mosquitto, "node-stored");
    let heat = r#"{"commandId": "heat", "payloadTemplate": "{\"to\": ${aws:iot:commandexecution::parameter:temp}}", "mandatoryParameters": [{"name": "temp", "defaultValue": {"I": 20}}]}"#;
    let defined = s.cli(&["command", "define", heat]);
    assert_eq!(defined.code, Some(0), "{}", defined.stderr);
    let stored: serde_json::Value = serde_json::from_str(&defined.out()).unwrap();
    assert_eq!(stored["commandId"], "heat");
    // The id is taken now; a bad definition says what is wrong. Both exit 3, nothing stored.
    let again = s.cli(&["command", "define", heat]);
    assert_eq!(again.code, Some(3), "{}", again.stderr);
    assert!(again.stderr.contains("exists"), "{}", again.stderr);
    let bad = s.cli(&[
        "command",
        "define",
        r#"{"commandId": "x y", "payload": {"content": "{}"}}"#,
    ]);
    assert_eq!(bad.code, Some(3), "{}", bad.stderr);
    assert!(bad.stderr.contains("commandId"), "{}", bad.stderr);
    let list = s.cli(&["command", "definitions"]);
    let list: serde_json::Value = serde_json::from_str(&list.out()).unwrap();
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    let one = s.cli(&["command", "definitions", "heat"]);
    let one: serde_json::Value = serde_json::from_str(&one.out()).unwrap();
    assert_eq!(one["mandatoryParameters"][0]["name"], "temp");
    // Started detached (no device here): its record names the stored command and the
    // AWS IoT commands topic of the target.
    let started = s.cli(&[
        "command",
        "start",
        "heat",
        "thing/robot1",
        "--param",
        "temp=80",
        "--detach",
        "--json",
    ]);
    assert_eq!(started.code, Some(0), "{}", started.stderr);
    let sent: serde_json::Value = serde_json::from_str(&started.out()).unwrap();
    let id = sent["id"].as_str().unwrap();
    let record = s.cli(&["command", "status", id]);
    let record: serde_json::Value = serde_json::from_str(&record.out()).unwrap();
    assert_eq!(record["command"], "heat");
    assert_eq!(
        record["topic"].as_str(),
        Some(format!("$aws/commands/things/robot1/executions/{id}/request/json").as_str())
    );
    // What cannot start: exit 3, with the reason.
    let unknown = s.cli(&["command", "start", "cool", "robot1"]);
    assert_eq!(unknown.code, Some(3), "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains("no stored command \"cool\""),
        "{}",
        unknown.stderr
    );
    let parameter = s.cli(&["command", "start", "heat", "robot1", "--param", "fan=1"]);
    assert_eq!(parameter.code, Some(3), "{}", parameter.stderr);
    assert!(parameter.stderr.contains("fan"), "{}", parameter.stderr);
    assert_eq!(s.cli(&["command", "undefine", "heat"]).code, Some(0));
    let gone = s.cli(&["command", "undefine", "heat"]);
    assert_eq!(gone.code, Some(3), "{}", gone.stderr);
}

#[test]
fn serve_with_nothing_to_serve_says_so_before_connecting() {
    // No broker anywhere: the configuration is refused first.
    let run = mqstore(&[
        "--port",
        "1",
        "serve",
        "--no-state-store",
        "--no-jobs",
        "--no-commands",
    ]);
    assert_ne!(run.code, Some(0));
    assert!(
        run.stderr
            .contains("--no-state-store with --no-jobs and --no-commands leaves nothing to serve"),
        "{}",
        run.stderr
    );
}

#[test]
fn nodes_lists_the_broker_s_nodes_and_the_pairs_that_would_answer_twice() {
    // Node A without a share group, node B in group "g": they clash.
    let s = Setup::start(Kind::Mosquitto, "node-a");
    let b = s
        .runtime
        .block_on(spawn(ServerConfig {
            share_group: Some("g".into()),
            ..ServerConfig::new(
                BrokerConfig {
                    port: s.broker.port,
                    ..BrokerConfig::default()
                },
                "node-b",
            )
        }))
        .expect("node B starts");
    s.runtime.block_on(calls::wait_for_metric(
        &b.metrics,
        "node B sees node A",
        |l| l == "mqstore_clashing_nodes 1",
    ));
    let listed = s.cli(&["nodes"]);
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    let out = listed.out();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("node "), "{out}");
    assert!(
        lines[1].starts_with("node-a  online  (none)       "),
        "{out}"
    );
    assert!(
        lines[2].starts_with("node-b  online  g            "),
        "{out}"
    );
    assert_eq!(
        lines[3],
        "clash: node-a and node-b both take requests of the state store, jobs and commands \
         (outside one share group): each is answered twice"
    );
    let json = |run: &Run| -> serde_json::Value { serde_json::from_str(&run.out()).unwrap() };
    let listed = json(&s.cli(&["nodes", "--json"]));
    assert_eq!(listed["nodes"][1]["node"], "node-b");
    assert_eq!(listed["nodes"][1]["share_group"], "g");
    assert_eq!(
        listed["nodes"][1]["serves"],
        serde_json::json!(["state", "jobs", "commands"])
    );
    assert_eq!(listed["nodes"][0]["takes_every_request"], true);
    assert_eq!(listed["clashes"], serde_json::json!([["node-a", "node-b"]]));
    // B stops: offline (listed with --all), and no clash left.
    s.runtime.block_on(b.stop()).unwrap();
    let listed = json(&s.cli(&["nodes", "--json", "--all"]));
    assert_eq!(listed["nodes"][1]["node"], "node-b");
    assert_eq!(listed["nodes"][1]["online"], false);
    assert_eq!(listed["clashes"], serde_json::json!([]));
    let listed = s.cli(&["nodes"]).out();
    assert_eq!(listed.lines().count(), 3, "{listed}");
    assert!(
        listed.lines().nth(1).unwrap().starts_with("node-a  "),
        "{listed}"
    );
    assert_eq!(listed.lines().nth(2), Some("(1 offline, not shown: --all)"));
    // A broker no node serves: exit 1, and why.
    let empty = Broker::start_kind(Kind::Mosquitto);
    let none = run(Command::new(env!("CARGO_BIN_EXE_mqstore"))
        .args(["--port", &empty.port.to_string(), "nodes"])
        .output()
        .unwrap());
    assert_eq!(none.code, Some(1), "{}", none.stderr);
    assert!(
        none.stderr
            .contains("no mqstore node is online on the broker at 127.0.0.1:"),
        "{}",
        none.stderr
    );
}

#[test]
fn serve_refuses_a_share_group_mqtt_or_its_presence_could_not_carry() {
    // No broker anywhere: the configuration is refused first.
    for group in ["a/b", "a+", "a b", ""] {
        let run = mqstore(&["--port", "1", "serve", "--share-group", group]);
        assert_ne!(run.code, Some(0), "{group:?}");
        assert!(
            run.stderr.contains(&format!(
                "invalid share group {group:?}: it must not be empty"
            )),
            "{group:?}: {}",
            run.stderr
        );
    }
}

#[test]
fn shadow_get_update_delete_and_watch_from_the_cli() {
    let s = Setup::start(Kind::Mosquitto, "node-shadows");
    // No shadow yet: exit 1, AWS's message.
    let missing = s.cli(&["shadow", "get", "lamp"]);
    assert_eq!(missing.code, Some(1), "{}", missing.stderr);
    assert!(
        missing
            .stderr
            .contains("No shadow exists with name: 'lamp'"),
        "{}",
        missing.stderr
    );
    // A watcher prints the deltas and documents as JSON lines.
    let mut watch = s
        .command()
        .args(["shadow", "watch", "lamp"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watch_err = std::io::BufReader::new(watch.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut watch_err, &mut line).unwrap();
    assert!(line.contains("watching"), "{line}");
    let updated = s.cli(&[
        "shadow",
        "update",
        "lamp",
        r#"{"desired": {"color": "red"}}"#,
    ]);
    assert_eq!(updated.code, Some(0), "{}", updated.stderr);
    let accepted: serde_json::Value = serde_json::from_str(&updated.out()).unwrap();
    assert_eq!(accepted["version"], 1);
    // The state from standard input, at a version: the wrong one is refused (exit 3).
    let stale = s.cli_with_input(
        &["shadow", "update", "lamp", "-", "--version", "7"],
        br#"{"reported": {"color": "red"}}"#,
    );
    assert_eq!(stale.code, Some(3), "{}", stale.stderr);
    assert!(
        stale.stderr.contains("409: Version conflict"),
        "{}",
        stale.stderr
    );
    let reported = s.cli_with_input(
        &["shadow", "update", "lamp", "-", "--version", "1"],
        br#"{"reported": {"color": "red"}}"#,
    );
    assert_eq!(reported.code, Some(0), "{}", reported.stderr);
    let got: serde_json::Value =
        serde_json::from_str(&s.cli(&["shadow", "get", "lamp"]).out()).unwrap();
    assert_eq!(got["state"]["reported"]["color"], "red");
    assert_eq!(got["state"].get("delta"), None);
    // Not JSON: a usage error that shows what to give.
    let bad = s.cli(&["shadow", "update", "lamp", "color=red"]);
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    assert!(bad.stderr.contains("not JSON"), "{}", bad.stderr);
    // A named shadow is apart; delete prints the deleted version.
    assert_eq!(
        s.cli(&["shadow", "get", "lamp", "--name", "cfg"]).code,
        Some(1)
    );
    let deleted = s.cli(&["shadow", "delete", "lamp"]);
    let deleted: serde_json::Value = serde_json::from_str(&deleted.out()).unwrap();
    assert_eq!(deleted["version"], 2);
    // The thing's named shadows, a page at a time; a deleted one is left out.
    for name in ["cfg", "fw", "net", "old"] {
        let made = s.cli(&[
            "shadow",
            "update",
            "lamp",
            "--name",
            name,
            r#"{"reported": {"on": 1}}"#,
        ]);
        assert_eq!(made.code, Some(0), "{}", made.stderr);
    }
    assert_eq!(
        s.cli(&["shadow", "delete", "lamp", "--name", "old"]).code,
        Some(0)
    );
    let list = |args: &[&str]| -> serde_json::Value {
        let listed = s.cli(&[&["shadow", "list", "lamp"], args].concat());
        assert_eq!(listed.code, Some(0), "{}", listed.stderr);
        serde_json::from_str(&listed.out()).unwrap()
    };
    let first = list(&["--max-results", "2"]);
    assert_eq!(first["results"], serde_json::json!(["cfg", "fw"]));
    assert_eq!(first["nextToken"], "fw");
    let rest = list(&["--max-results", "2", "--next-token", "fw"]);
    assert_eq!(rest["results"], serde_json::json!(["net"]));
    assert!(rest.get("nextToken").is_none(), "{rest}");
    assert!(rest["timestamp"].as_u64().unwrap() > 1_700_000_000);
    let refused = s.cli(&["shadow", "list", "lamp/1"]);
    assert_eq!(refused.code, Some(3), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("Invalid thing name"),
        "{}",
        refused.stderr
    );
    // Its three lines, read as they come (a watcher that stopped printing fails here).
    let stdout = std::io::BufReader::new(watch.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(stdout).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let lines: Vec<serde_json::Value> = (0..3)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(10))
                .expect("a line of the watcher")
        })
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    watch.kill().unwrap();
    let _ = watch.wait();
    let streams: Vec<&str> = lines
        .iter()
        .map(|l| l["stream"].as_str().unwrap())
        .collect();
    assert_eq!(streams, ["delta", "documents", "documents"], "{lines:?}");
    assert_eq!(lines[0]["body"]["state"]["color"], "red");
}

#[test]
fn serve_and_the_cli_log_in_with_a_client_certificate_whose_key_is_encrypted() {
    let files = tls::TlsFiles::new("cli-client-cert");
    let key = files.encrypted_client_key("fleet-key-1");
    let broker = Broker::start_config(&format!(
        "cafile {}\ncertfile {}\nkeyfile {}\nrequire_certificate true\n",
        files.ca.display(),
        files.cert.display(),
        files.key.display()
    ));
    let port = broker.port.to_string();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let (ca, cert, key) = (path(&files.ca), path(&files.client_cert), path(&key));
    let tls: Vec<&str> = vec![
        "--port",
        &port,
        "--tls",
        "--ca-file",
        &ca,
        "--cert-file",
        &cert,
        "--key-file",
        &key,
    ];
    let cli = |password: Option<&str>, args: &[&str]| {
        let env: Vec<(&str, &str)> = password
            .map(|p| ("MQSTORE_KEY_PASSWORD", p))
            .into_iter()
            .collect();
        mqstore_with(&[&tls[..], args].concat(), &env)
    };

    // Without the password, or with a wrong one: a usage error that says which, and nothing
    // is sent.
    let missing = cli(None, &["get", "k"]);
    assert_eq!(missing.code, Some(2), "{}", missing.stderr);
    assert!(
        missing.stderr.contains("is encrypted: give its password"),
        "{}",
        missing.stderr
    );
    // A file TLS could not use is named, with why, before anything connects: here the
    // broker's certificate given as the client's, with the client's key.
    let broker_cert = path(&files.cert);
    let mismatched = mqstore_with(
        &[
            "--port",
            &port,
            "--tls",
            "--ca-file",
            &ca,
            "--cert-file",
            &broker_cert,
            "--key-file",
            &key,
            "get",
            "k",
        ],
        &[("MQSTORE_KEY_PASSWORD", "fleet-key-1")],
    );
    assert_eq!(mismatched.code, Some(2), "{}", mismatched.stderr);
    assert!(
        mismatched
            .stderr
            .contains("is not the key of the certificate in"),
        "{}",
        mismatched.stderr
    );
    let wrong = cli(Some("fleet-key-2"), &["get", "k"]);
    assert_eq!(wrong.code, Some(2), "{}", wrong.stderr);
    assert!(
        wrong.stderr.contains("the key password is wrong"),
        "{}",
        wrong.stderr
    );

    // With it, `serve` and the CLI both log in with the certificate.
    let mut serve = Command::new(env!("CARGO_BIN_EXE_mqstore"));
    serve
        .args(&tls)
        .args(["serve", "--node-id", "node-client-cert"])
        .env("MQSTORE_KEY_PASSWORD", "fleet-key-1")
        .env_remove("MQSTORE_LOG")
        .stderr(Stdio::null());
    let _serve = serve.spawn().map(Process).unwrap();
    let started = Instant::now();
    loop {
        let set = cli(
            Some("fleet-key-1"),
            &["set", "k", "over mutual TLS", "--timeout", "1"],
        );
        if set.code == Some(0) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            set.stderr
        );
    }
    assert_eq!(
        cli(Some("fleet-key-1"), &["get", "k"]).out(),
        "over mutual TLS"
    );

    // --tls without --ca-file trusts the system's CAs: here SSL_CERT_FILE names the test CA
    // (and then the broker's own certificate, which signed nothing).
    let system = |bundle: &str| {
        mqstore_with(
            &[
                "--port",
                &port,
                "--tls",
                "--cert-file",
                &cert,
                "--key-file",
                &key,
                "--timeout",
                "2",
                "get",
                "k",
            ],
            &[
                ("SSL_CERT_FILE", bundle),
                ("MQSTORE_KEY_PASSWORD", "fleet-key-1"),
            ],
        )
    };
    assert_eq!(system(&ca).out(), "over mutual TLS");
    let untrusted = system(&path(&files.cert));
    assert_eq!(untrusted.code, Some(4), "{}", untrusted.stderr);
    assert!(
        untrusted.stderr.contains("invalid peer certificate"),
        "{}",
        untrusted.stderr
    );

    // The broker requires a certificate: without one the connection is refused.
    let no_cert = mqstore(&[
        "--port",
        &port,
        "--tls",
        "--ca-file",
        &ca,
        "--timeout",
        "2",
        "get",
        "k",
    ]);
    assert_ne!(no_cert.code, Some(0), "{}", no_cert.stderr);
    assert!(
        no_cert.stderr.contains("cannot reach the MQTT broker"),
        "{}",
        no_cert.stderr
    );
}
