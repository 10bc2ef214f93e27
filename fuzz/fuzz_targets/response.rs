//! Response and notification decoding (the client side): never panics; what decodes
//! re-encodes to bytes that decode the same.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use mqstore_core::codec::{decode_notification, decode_response};

fuzz_target!(|data: &[u8]| {
    let payload = Bytes::copy_from_slice(data);
    if let Ok(response) = decode_response(&payload) {
        assert_eq!(
            decode_response(&response.to_bytes()).as_ref(),
            Ok(&response)
        );
    }
    if let Ok(notification) = decode_notification(&payload) {
        assert_eq!(
            decode_notification(&notification.to_bytes()).as_ref(),
            Ok(&notification)
        );
    }
});
