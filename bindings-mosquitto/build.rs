//! Generates the mosquitto plugin API's declarations from the installed headers (Debian's
//! `mosquitto-dev`, mosquitto 2.0.x) with bindgen, which needs libclang.
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("mosquitto_(broker_publish_copy|callback_register|callback_unregister|client_id|property_.*|pub_topic_check|log_printf)")
        .allowlist_type("mosquitto_evt_(message|tick|disconnect)|mosquitto_opt|mosquitto_plugin_id_t|mosq_err_t|mosquitto_plugin_event|mqtt5_property")
        // MOSQ_ERR_SUCCESS, MOSQ_EVT_MESSAGE, MQTT_PROP_USER_PROPERTY: the C names.
        .prepend_enum_name(false)
        .allowlist_var("MOSQ_EVT_.*|MOSQ_ERR_.*|MOSQ_LOG_.*|MQTT_PROP_.*")
        .generate()
        .expect(
            "cannot generate the mosquitto plugin declarations: install Debian's mosquitto-dev \
             (the headers) and libclang (libclang1-14 libclang-common-14-dev); scripts/test does",
        );
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("mosquitto.rs");
    bindings.write_to_file(out).expect("write the declarations");
}
