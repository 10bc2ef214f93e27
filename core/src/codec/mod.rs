//! The state store's payloads (spec §2–4): requests, responses and notifications.
//!
//! Bytes in, values out. Decoding is zero-copy: keys and values are [`Bytes`] slices of the
//! input. It is strict: lengths are authoritative, nothing may follow a message, numbers must
//! fit. Verbs and options match case-insensitively; encoding always writes upper case. No input
//! can make a decoder panic (each has a fuzz target in `fuzz/`).

mod request;
pub(crate) mod resp;
mod response;

use std::fmt;

use bytes::Bytes;

pub use request::{Command, Condition, Request, SetRequest, decode_request};
pub use response::{Notification, Response, decode_notification, decode_response};

/// Why bytes are not a well-formed message. Requests report this as
/// [`ServiceError::SyntaxError`](crate::ServiceError::SyntaxError); the client side reports it
/// as a malformed response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed RESP3 at byte {offset}: {reason}")]
pub struct DecodeError {
    /// What was wrong.
    pub reason: &'static str,
    /// Where in the input.
    pub offset: usize,
}

/// A value as it may stand on the wire: a RESP3 bulk string `$n\r\n{value}\r\n`.
///
/// Decoded values keep their framing (a slice of the received payload), so the engine can
/// store a SET's value and later answer GET with the very same bytes, copying nothing. Values
/// made by [`Bulk::new`] are framed when encoded. Equality compares values only.
#[derive(Clone, Default)]
pub struct Bulk {
    bytes: Bytes,
    /// Length of the `$n\r\n` header when `bytes` is framed; 0 when `bytes` is the bare value.
    header_len: usize,
}

impl Bulk {
    /// A bare value (no copy).
    pub fn new(value: impl Into<Bytes>) -> Self {
        Self {
            bytes: value.into(),
            header_len: 0,
        }
    }

    pub(crate) fn framed(wire: Bytes, header_len: usize) -> Self {
        debug_assert!(header_len >= 4 && wire.len() >= header_len + 2);
        Self {
            bytes: wire,
            header_len,
        }
    }

    fn is_framed(&self) -> bool {
        self.header_len != 0
    }

    /// The value's bytes.
    pub fn as_slice(&self) -> &[u8] {
        if self.is_framed() {
            &self.bytes[self.header_len..self.bytes.len() - 2]
        } else {
            &self.bytes
        }
    }

    /// The value as `Bytes` (a slice, no copy).
    pub fn value(&self) -> Bytes {
        if self.is_framed() {
            self.bytes.slice(self.header_len..self.bytes.len() - 2)
        } else {
            self.bytes.clone()
        }
    }

    /// Length of the value.
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the value takes on the wire, framing included.
    pub fn wire_len(&self) -> usize {
        if self.is_framed() {
            self.bytes.len()
        } else {
            resp::bulk_len(self.bytes.len())
        }
    }

    /// Writes the framed value.
    pub fn encode(&self, out: &mut impl bytes::BufMut) {
        if self.is_framed() {
            out.put_slice(&self.bytes);
        } else {
            resp::put_bulk(out, &self.bytes);
        }
    }

    /// The framed value as `Bytes`: no copy when it was decoded.
    pub fn to_wire(&self) -> Bytes {
        if self.is_framed() {
            self.bytes.clone()
        } else {
            let mut out = Vec::with_capacity(self.wire_len());
            self.encode(&mut out);
            out.into()
        }
    }
}

impl PartialEq for Bulk {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Bulk {}

impl fmt::Debug for Bulk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bulk({:?})", Bytes::copy_from_slice(self.as_slice()))
    }
}

impl From<&'static [u8]> for Bulk {
    fn from(value: &'static [u8]) -> Self {
        Self::new(value)
    }
}

impl From<&'static str> for Bulk {
    fn from(value: &'static str) -> Self {
        Self::new(value.as_bytes())
    }
}

impl From<Vec<u8>> for Bulk {
    fn from(value: Vec<u8>) -> Self {
        Self::new(value)
    }
}

impl From<Bytes> for Bulk {
    fn from(value: Bytes) -> Self {
        Self::new(value)
    }
}

impl AsRef<[u8]> for Bulk {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}
