//! Device shadow requests, arbitrary payloads in arbitrary order on one shadow: never panics;
//! every request is answered first on its `/accepted` or `/rejected`; only an accepted update
//! or delete writes, an update one version more and a delete keeping the version; the state
//! stored stays within AWS's 8 KB.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mqstore_core::shadow::{MAX_STATE_BYTES, Op, Shadow, Target, Write, handle};

fuzz_target!(|requests: Vec<(u8, bool, Vec<u8>)>| {
    let mut stored: Option<Vec<u8>> = None;
    for (i, (op, named, payload)) in requests.into_iter().enumerate() {
        let op = [Op::Get, Op::Update, Op::Delete][usize::from(op % 3)];
        let target = Target {
            thing: "fuzz-thing",
            name: named.then_some("fuzz-shadow"),
        };
        let version = stored
            .as_deref()
            .map_or(0, |b| serde_json::from_slice::<Shadow>(b).unwrap().version);
        let now_ms = 1_700_000_000_000 + i as u64 * 1000;
        let handled = handle(target, op, &payload, stored.as_deref(), now_ms);
        let first = &handled.publishes[0].topic;
        let accepted = first.ends_with(&format!("{}/accepted", op.suffix()));
        assert!(accepted || first.ends_with(&format!("{}/rejected", op.suffix())));
        match handled.write {
            Write::None => assert!(!accepted || op == Op::Get),
            Write::Put { document } => {
                assert!(accepted);
                let after: Shadow = serde_json::from_slice(&document).unwrap();
                match op {
                    Op::Update => assert_eq!(after.version, version + 1),
                    Op::Delete => assert!(after.deleted && after.version == version),
                    Op::Get => unreachable!("a get writes nothing"),
                }
                assert!(serde_json::to_vec(&after.state).unwrap().len() <= MAX_STATE_BYTES);
                stored = Some(document);
            }
        }
    }
});
