//! Request decoding: never panics, and what decodes re-encodes to bytes that decode the same.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use mqstore_core::codec::decode_request;

fuzz_target!(|data: &[u8]| {
    let payload = Bytes::copy_from_slice(data);
    if let Ok(request) = decode_request(&payload) {
        let wire = request.to_bytes();
        assert_eq!(wire.len(), request.encoded_len());
        assert_eq!(decode_request(&wire).as_ref(), Ok(&request));
    }
});
