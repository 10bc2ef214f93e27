//! The RPC envelope over arbitrary properties: never panics; an accepted request always has
//! a response topic it may answer on and correlation data.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use mqstore_core::envelope::{Checked, Properties, check_request};
use mqstore_core::topics;

/// QoS, response topic, correlation data, user properties, message expiry.
type Input = (
    u8,
    Option<String>,
    Option<Vec<u8>>,
    Vec<(String, String)>,
    Option<u32>,
);

fuzz_target!(|input: Input| {
    let (qos, response_topic, correlation, user_properties, expiry) = input;
    let properties = Properties {
        response_topic,
        correlation_data: correlation.map(Bytes::from),
        user_properties,
        message_expiry_interval: expiry,
        ..Properties::default()
    };
    match check_request(qos % 3, properties, "fuzz") {
        Checked::Accept(invocation) => {
            assert!(!topics::is_forbidden_response_topic(
                &invocation.response_topic
            ));
            assert!(!invocation.correlation_data.is_empty());
        }
        Checked::Reject(reply, _) => {
            assert!(!topics::is_forbidden_response_topic(&reply.topic));
        }
        Checked::Drop(_) => {}
    }
});
