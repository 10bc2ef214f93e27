//! The engine over arbitrary payloads, timestamps and fencing tokens: never panics, and every
//! accepted request gets exactly one response, published last.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use mqstore_core::engine::{Engine, Outcome};
use mqstore_core::envelope::{Properties, Publish};
use mqstore_core::topics;

/// One request: its payload, `__ts`, `__ft`, and how many ms the clock moves first.
type Step = (Vec<u8>, Option<String>, Option<String>, u16);

fuzz_target!(|steps: Vec<Step>| {
    let mut engine = Engine::in_memory("fuzz").expect("valid node id");
    let mut now = 1_700_000_000_000u64;
    let mut out = Vec::new();
    for (payload, ts, ft, advance) in steps {
        now += u64::from(advance);
        let mut user_properties = vec![("__srcId".to_owned(), "c".to_owned())];
        user_properties.extend(ts.map(|ts| ("__ts".to_owned(), ts)));
        user_properties.extend(ft.map(|ft| ("__ft".to_owned(), ft)));
        let message = Publish {
            topic: topics::INVOKE.to_owned(),
            payload: Bytes::from(payload),
            qos: 1,
            properties: Properties {
                response_topic: Some(topics::response_topic("c")),
                correlation_data: Some(Bytes::from_static(b"0123456789abcdef")),
                user_properties,
                ..Properties::default()
            },
        };
        out.clear();
        let outcome = engine.handle(message, now, &mut out);
        assert!(matches!(outcome, Outcome::Answered { .. }));
        let response = out.pop().expect("a response");
        assert_eq!(response.topic, topics::response_topic("c"));
        assert!(
            out.iter()
                .all(|n| n.topic.starts_with(topics::CLIENTS_PREFIX))
        );
    }
});
