//! A device built on the published Azure IoT Operations protocol crate's command executor
//! (`azure_iot_operations_protocol` 1.1.0), unchanged, answering commands sent through
//! `mqstore serve` in direct mode (MQTT 5 response topic + correlation data), over a real
//! mosquitto.

#[path = "../../../cli/tests/broker/mod.rs"]
#[macro_use]
mod broker;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use azure_iot_operations_mqtt::aio::connection_settings::MqttConnectionSettingsBuilder;
use azure_iot_operations_mqtt::session::{Session, SessionOptionsBuilder};
use azure_iot_operations_protocol::application::ApplicationContextBuilder;
use azure_iot_operations_protocol::common::payload_serialize::{
    DeserializationError, FormatIndicator, PayloadSerialize, SerializedPayload,
};
use azure_iot_operations_protocol::rpc_command;
use broker::Broker;
use mqstore_core::client::ClientError;
use mqstore_core::commands::{CommandRequest, Status};
use mqstore_net::BrokerConfig;
use mqstore_net::client::{Client, ClientOptions};
use mqstore_server::{ServerConfig, spawn};

/// A JSON payload; anything else fails to deserialize (the executor answers 400).
#[derive(Clone, Debug, Default)]
struct Json(Vec<u8>);

impl PayloadSerialize for Json {
    type Error = String;

    fn serialize(self) -> Result<SerializedPayload, String> {
        Ok(SerializedPayload {
            payload: self.0,
            content_type: "application/json".into(),
            format_indicator: FormatIndicator::Utf8EncodedCharacterData,
        })
    }

    fn deserialize(
        payload: &[u8],
        _content_type: Option<&String>,
        _format_indicator: &FormatIndicator,
    ) -> Result<Self, DeserializationError<String>> {
        match payload.first() {
            Some(b'{') => Ok(Json(payload.to_vec())),
            _ => Err(DeserializationError::InvalidPayload(
                "not a JSON object".into(),
            )),
        }
    }
}

/// Drone SN9527: `dji/SN9527/command/TAKE_OFF`, not idempotent. `{"motor":"fail"}` gets an
/// application error; anything else takes off. Counts its executions.
async fn drone(port: u16, runs: Arc<AtomicU32>) {
    let connection_settings = MqttConnectionSettingsBuilder::default()
        .client_id("SN9527")
        .hostname("127.0.0.1")
        .tcp_port(port)
        .use_tls(false)
        .clean_start(true)
        .build()
        .unwrap();
    let session = Session::new(
        SessionOptionsBuilder::default()
            .connection_settings(connection_settings)
            .build()
            .unwrap(),
    )
    .unwrap();
    let options = rpc_command::executor::OptionsBuilder::default()
        .request_topic_pattern("dji/{executorId}/command/{commandName}")
        .command_name("TAKE_OFF")
        .topic_token_map(HashMap::from([(
            "executorId".to_owned(),
            "SN9527".to_owned(),
        )]))
        .build()
        .unwrap();
    let mut executor: rpc_command::Executor<Json, Json> = rpc_command::Executor::new(
        ApplicationContextBuilder::default().build().unwrap(),
        session.create_managed_client(),
        options,
    )
    .unwrap();
    let serve = async move {
        while let Some(Ok(request)) = executor.recv().await {
            runs.fetch_add(1, Ordering::SeqCst);
            let mut builder = rpc_command::executor::ResponseBuilder::default();
            if request.payload.0 == br#"{"motor":"fail"}"# {
                let mut headers = Vec::new();
                rpc_command::executor::application_error_headers(
                    &mut headers,
                    "MOTOR_FAULT".into(),
                    r#"{"motor":2}"#.into(),
                )
                .unwrap();
                builder.custom_user_data(headers);
            }
            let answer = format!(
                r#"{{"took_off":true,"asked":{}}}"#,
                String::from_utf8_lossy(&request.payload.0)
            );
            let response = builder
                .payload(Json(answer.into_bytes()))
                .unwrap()
                .build()
                .unwrap();
            let _ = request.complete(response).await;
        }
    };
    tokio::select! {
        () = serve => {}
        _ = session.run() => {}
    }
}

fn take_off(payload: &str) -> CommandRequest {
    CommandRequest {
        content_type: Some("application/json".into()),
        timeout_ms: 5_000,
        ..CommandRequest::new("dji/SN9527/command/TAKE_OFF", payload.to_owned())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_azure_iot_operations_executor_answers_commands_sent_through_mqstore() {
    let broker = Broker::start();
    let config = ServerConfig::new(
        BrokerConfig {
            port: broker.port,
            ..BrokerConfig::default()
        },
        "mqstore",
    );
    let server = spawn(config).await.unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let device = tokio::spawn(drone(broker.port, runs.clone()));
    let caller = Client::connect(ClientOptions::new("backend", "127.0.0.1", broker.port))
        .await
        .unwrap();

    // The executor subscribes once its session is up: retry the first command until then.
    let mut first = None;
    for _ in 0..20 {
        let mut probe = take_off(r#"{"alt":10}"#);
        probe.timeout_ms = 1_000;
        match caller.command(probe).await {
            Ok(reply) => {
                first = Some(reply);
                break;
            }
            Err(ClientError::CommandTimedOut { .. }) => continue,
            Err(e) => panic!("{e}"),
        }
    }
    let reply = first.expect("the executor answered");
    assert_eq!(reply.status, Status::Succeeded);
    assert_eq!(reply.device_status, Some(200));
    assert_eq!(reply.content_type.as_deref(), Some("application/json"));
    assert_eq!(
        &reply.payload[..],
        br#"{"took_off":true,"asked":{"alt":10}}"#
    );
    let before = runs.load(Ordering::SeqCst);

    // Its application error surfaces as a typed FAILED with the code and payload.
    match caller.command(take_off(r#"{"motor":"fail"}"#)).await {
        Err(ClientError::CommandFailed { answer, .. }) => {
            assert_eq!(answer.code, Some(200));
            assert_eq!(answer.app_error_code.as_deref(), Some("MOTOR_FAULT"));
            assert_eq!(answer.app_error_payload.as_deref(), Some(r#"{"motor":2}"#));
        }
        other => panic!("{other:?}"),
    }
    // A payload it cannot read: the SDK answers 400 itself, a typed REJECTED; it did not run.
    match caller.command(take_off("TAKE_OFF")).await {
        Err(ClientError::CommandRejected { answer, .. }) => {
            assert_eq!(answer.code, Some(400), "{answer:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        before + 1,
        "the refused command did not run"
    );
    // A protocol version it does not speak: its 505, a typed REJECTED; it did not run.
    let mut future = take_off(r#"{"alt":30}"#);
    future.headers = vec![("__protVer".into(), "2.0".into())];
    match caller.command(future).await {
        Err(ClientError::CommandRejected { answer, .. }) => {
            assert_eq!(answer.code, Some(505), "{answer:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        before + 1,
        "the 2.0 command did not run"
    );
    // Each command ran once: mqstore never retries.
    let reply = caller.command(take_off(r#"{"alt":20}"#)).await.unwrap();
    assert_eq!(
        &reply.payload[..],
        br#"{"took_off":true,"asked":{"alt":20}}"#
    );
    assert_eq!(runs.load(Ordering::SeqCst), before + 2);

    caller.close().await;
    device.abort();
    let _ = tokio::time::timeout(Duration::from_secs(5), server.stop()).await;
}
