//! HLC parsing and the clock's rules: never panics; parse(format(x)) = x; a received value
//! always yields a logically newer one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mqstore_core::hlc::{Hlc, HlcClock};

fuzz_target!(|input: (&str, u64)| {
    let (text, wall_ms) = input;
    if let Ok(hlc) = Hlc::parse(text) {
        assert_eq!(Hlc::parse(&hlc.to_string()).as_ref(), Ok(&hlc));
        let mut clock = HlcClock::new("fuzz").expect("valid node id");
        if let Ok(next) = clock.receive(&hlc, wall_ms) {
            assert!((next.wall_ms, next.counter) > (hlc.wall_ms, hlc.counter));
        }
    }
});
