//! The published Azure IoT Operations state store client (crate `azure_iot_operations_services`,
//! feature `state_store`), unchanged, against `mqstore serve` through a real mosquitto (and
//! Mochi MQTT), and against the state store inside mosquitto (the broker plugin).

#[path = "../../../cli/tests/broker/mod.rs"]
#[macro_use]
mod broker;

use std::time::Duration;

use azure_iot_operations_mqtt::aio::connection_settings::MqttConnectionSettingsBuilder;
use azure_iot_operations_mqtt::session::{Session, SessionExitHandle, SessionOptionsBuilder};
use azure_iot_operations_protocol::application::ApplicationContextBuilder;
use azure_iot_operations_services::state_store::{self, Operation, SetCondition, SetOptions};
use broker::Broker;
use mqstore_net::BrokerConfig;
use mqstore_server::{ServerConfig, ServerHandle, spawn};

const TIMEOUT: Duration = Duration::from_secs(5);

/// Starts `mqstore serve` on the broker.
async fn start_server(port: u16) -> ServerHandle {
    let broker = BrokerConfig {
        port,
        ..BrokerConfig::default()
    };
    spawn(ServerConfig::new(broker, "mqstore")).await.unwrap()
}

/// An Azure SDK session and state store client, as the SDK's own example builds them.
/// Whether a SET through the Azure SDK client applied.
async fn set_applied(
    client: &state_store::Client,
    key: &[u8],
    value: &[u8],
    fencing_token: Option<
        azure_iot_operations_protocol::common::hybrid_logical_clock::HybridLogicalClock,
    >,
    options: SetOptions,
) -> bool {
    client
        .set(
            key.to_vec(),
            value.to_vec(),
            TIMEOUT,
            fencing_token,
            options,
        )
        .await
        .unwrap()
        .response
}

fn azure_client(port: u16, id: &str) -> (state_store::Client, Session, SessionExitHandle) {
    let connection_settings = MqttConnectionSettingsBuilder::default()
        .client_id(id)
        .hostname("127.0.0.1")
        .tcp_port(port)
        .use_tls(false)
        .clean_start(true)
        .build()
        .unwrap();
    let session_options = SessionOptionsBuilder::default()
        .connection_settings(connection_settings)
        .build()
        .unwrap();
    let session = Session::new(session_options).unwrap();
    let exit = session.create_exit_handle();
    let client = state_store::Client::new(
        ApplicationContextBuilder::default().build().unwrap(),
        session.create_managed_client(),
        session.create_session_monitor(),
        state_store::ClientOptionsBuilder::default()
            .build()
            .unwrap(),
    )
    .unwrap();
    (client, session, exit)
}

on_both_brokers! {
    async fn the_azure_sdk_client_works_against_mqstore_serve(kind: Kind) {
        let broker = Broker::start_kind(kind);
        let server = start_server(broker.port).await;
        exercise(broker.port).await;
        server.stop().await.unwrap();
    }
}

/// The plugin built in this workspace (`target/{profile}/libmqstore_mosquitto.so`).
fn plugin_path() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libmqstore_mosquitto.so");
    assert!(
        path.exists(),
        "{} is missing: cargo build -p mqstore-mosquitto",
        path.display()
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_azure_sdk_client_works_against_the_mosquitto_plugin() {
    let broker = Broker::start_config(&format!(
        "plugin {}\nplugin_opt_node_id inside\n",
        plugin_path().display()
    ));
    exercise(broker.port).await;
}

/// Every call of the Azure SDK's state store client, against whatever serves on the broker.
async fn exercise(port: u16) {
    {
        let (client, session, exit) = azure_client(port, "azure-sdk-client");
        let session_task = tokio::spawn(session.run());

        // The server may still be subscribing: retry the first call until it answers.
        let mut ready = false;
        for _ in 0..20 {
            if client
                .get(b"ready?".to_vec(), Duration::from_secs(1))
                .await
                .is_ok()
            {
                ready = true;
                break;
            }
        }
        assert!(ready, "mqstore serve never answered the Azure SDK client");

        // set / get with versions
        let set = client
            .set(
                b"k".to_vec(),
                b"v1".to_vec(),
                TIMEOUT,
                None,
                SetOptions::default(),
            )
            .await
            .unwrap();
        assert!(set.response);
        let version = set.version.expect("a version");
        let get = client.get(b"k".to_vec(), TIMEOUT).await.unwrap();
        assert_eq!(get.response, Some(b"v1".to_vec()));
        assert_eq!(get.version, Some(version.clone()));
        let absent = client.get(b"absent".to_vec(), TIMEOUT).await.unwrap();
        assert_eq!(absent.response, None);
        assert_eq!(absent.version, None);

        // conditions and expiry
        let nx = SetOptions {
            set_condition: SetCondition::OnlyIfDoesNotExist,
            ..SetOptions::default()
        };
        assert!(!set_applied(&client, b"k", b"v2", None, nx).await);
        let lease = SetOptions {
            set_condition: SetCondition::OnlyIfEqualOrDoesNotExist,
            expires: Some(Duration::from_millis(300)),
            ..SetOptions::default()
        };
        let taken = client
            .set(
                b"lock".to_vec(),
                b"me".to_vec(),
                TIMEOUT,
                None,
                lease.clone(),
            )
            .await
            .unwrap();
        assert!(taken.response);
        assert!(set_applied(&client, b"lock", b"me", None, lease.clone()).await);
        assert!(!set_applied(&client, b"lock", b"other", None, lease).await);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            client
                .get(b"lock".to_vec(), TIMEOUT)
                .await
                .unwrap()
                .response,
            None
        );

        // fencing
        let token = taken.version.unwrap();
        assert!(
            set_applied(
                &client,
                b"guarded",
                b"1",
                Some(token.clone()),
                SetOptions::default()
            )
            .await
        );
        let unfenced = client
            .set(
                b"guarded".to_vec(),
                b"2".to_vec(),
                TIMEOUT,
                None,
                SetOptions::default(),
            )
            .await;
        let error = unfenced.expect_err("a fenced key refuses writes without a token");
        assert!(
            format!("{error:?}").contains("FencingTokenRequired")
                || format!("{error}").contains("fencing token"),
            "{error:?}"
        );
        assert_eq!(
            client
                .del(b"guarded".to_vec(), Some(token), TIMEOUT)
                .await
                .unwrap()
                .response,
            1
        );

        // observe / notifications / unobserve
        let mut observation = client
            .observe(b"watched".to_vec(), TIMEOUT)
            .await
            .unwrap()
            .response;
        let set = client
            .set(
                b"watched".to_vec(),
                b"x".to_vec(),
                TIMEOUT,
                None,
                SetOptions::default(),
            )
            .await
            .unwrap();
        let (notification, _) = tokio::time::timeout(TIMEOUT, observation.recv_notification())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(notification.key, b"watched".to_vec());
        assert_eq!(notification.operation, Operation::Set(b"x".to_vec()));
        assert_eq!(Some(notification.version), set.version);
        assert_eq!(
            client
                .vdel(b"watched".to_vec(), b"nope".to_vec(), None, TIMEOUT)
                .await
                .unwrap()
                .response,
            -1
        );
        assert_eq!(
            client
                .vdel(b"watched".to_vec(), b"x".to_vec(), None, TIMEOUT)
                .await
                .unwrap()
                .response,
            1
        );
        let (notification, _) = tokio::time::timeout(TIMEOUT, observation.recv_notification())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(notification.operation, Operation::Del);
        assert!(
            client
                .unobserve(b"watched".to_vec(), TIMEOUT)
                .await
                .unwrap()
                .response
        );
        assert!(
            !client
                .unobserve(b"watched".to_vec(), TIMEOUT)
                .await
                .unwrap()
                .response
        );

        // del
        assert_eq!(
            client
                .del(b"k".to_vec(), None, TIMEOUT)
                .await
                .unwrap()
                .response,
            1
        );
        assert_eq!(
            client
                .del(b"k".to_vec(), None, TIMEOUT)
                .await
                .unwrap()
                .response,
            0
        );

        client.shutdown().await.unwrap();
        let _ = exit.try_exit();
        let _ = tokio::time::timeout(TIMEOUT, session_task).await;
    }
}
