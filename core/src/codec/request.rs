//! Requests (spec §2): `*{n}\r\n` followed by n bulk strings.

use std::num::NonZeroU64;

use bytes::{BufMut, Bytes};

use super::Bulk;
use super::resp::{self, Reader, Span};
use crate::ServiceError;

/// The verbs of the state store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// SET.
    Set,
    /// GET.
    Get,
    /// DEL.
    Del,
    /// VDEL: delete if the value matches.
    VDel,
    /// KEYNOTIFY: register for a key's changes, or stop.
    KeyNotify,
    /// SCAN: a page of keys matching a pattern.
    Scan,
}

impl Command {
    /// Every command, for metrics tables and the like.
    pub const ALL: [Command; 6] = [
        Command::Set,
        Command::Get,
        Command::Del,
        Command::VDel,
        Command::KeyNotify,
        Command::Scan,
    ];

    /// The verb as encoded (upper case).
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Set => "SET",
            Command::Get => "GET",
            Command::Del => "DEL",
            Command::VDel => "VDEL",
            Command::KeyNotify => "KEYNOTIFY",
            Command::Scan => "SCAN",
        }
    }

    fn from_verb(verb: &[u8]) -> Option<Self> {
        // The length and first letter pick the one candidate; then compare once.
        let candidate = match (verb.len(), verb.first()?.to_ascii_uppercase()) {
            (3, b'S') => Command::Set,
            (3, b'G') => Command::Get,
            (3, b'D') => Command::Del,
            (4, b'V') => Command::VDel,
            (9, b'K') => Command::KeyNotify,
            (4, b'S') => Command::Scan,
            _ => return None,
        };
        candidate
            .as_str()
            .as_bytes()
            .eq_ignore_ascii_case(verb)
            .then_some(candidate)
    }
}

/// When a SET applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Condition {
    /// Always (no option).
    #[default]
    Always,
    /// `NX`: only if the key does not exist.
    NotExists,
    /// `NEX`: only if the key does not exist or already holds this SET's value.
    NotExistsOrEqual,
}

/// `SET key value [NX | NEX] [PX ms]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetRequest {
    /// The key.
    pub key: Bytes,
    /// The value.
    pub value: Bulk,
    /// When to apply: always, NX or NEX.
    pub condition: Condition,
    /// `PX`: the key expires this many milliseconds after the SET. `None`: it never expires.
    pub expires_in_ms: Option<NonZeroU64>,
}

impl SetRequest {
    /// A plain SET (no condition, no expiry).
    pub fn new(key: impl Into<Bytes>, value: impl Into<Bulk>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            condition: Condition::Always,
            expires_in_ms: None,
        }
    }
}

/// A state store request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// SET.
    Set(SetRequest),
    /// GET a key's value.
    Get {
        /// The key.
        key: Bytes,
    },
    /// DEL a key.
    Del {
        /// The key.
        key: Bytes,
    },
    /// Delete only if the current value equals `value`.
    VDel {
        /// The key.
        key: Bytes,
        /// The value it must hold.
        value: Bytes,
    },
    /// Register (or with `stop`, remove) the sender for change notifications of `key`.
    KeyNotify {
        /// The key.
        key: Bytes,
        /// Stop the registration instead of making it.
        stop: bool,
    },
    /// A page of keys matching `pattern`, continuing after `token` when given.
    Scan {
        /// The pattern keys must match (`*`, `?`, `[...]`).
        pattern: Bytes,
        /// Where the previous page ended; None for the first.
        token: Option<Bytes>,
    },
}

impl Request {
    /// The verb.
    pub fn command(&self) -> Command {
        match self {
            Request::Set(_) => Command::Set,
            Request::Get { .. } => Command::Get,
            Request::Del { .. } => Command::Del,
            Request::VDel { .. } => Command::VDel,
            Request::KeyNotify { .. } => Command::KeyNotify,
            Request::Scan { .. } => Command::Scan,
        }
    }

    /// Calls `f` with every item after the verb, in wire order.
    fn for_each_argument(&self, mut f: impl FnMut(&[u8])) {
        match self {
            Request::Set(set) => {
                f(&set.key);
                f(set.value.as_slice());
                match set.condition {
                    Condition::Always => {}
                    Condition::NotExists => f(b"NX"),
                    Condition::NotExistsOrEqual => f(b"NEX"),
                }
                if let Some(ms) = set.expires_in_ms {
                    f(b"PX");
                    f(resp::Decimal::new(ms.get()).as_bytes());
                }
            }
            Request::Get { key } | Request::Del { key } => f(key),
            Request::VDel { key, value } => {
                f(key);
                f(value);
            }
            Request::KeyNotify { key, stop } => {
                f(key);
                if *stop {
                    f(b"STOP");
                }
            }
            Request::Scan { pattern, token } => {
                f(pattern);
                if let Some(token) = token {
                    f(token);
                }
            }
        }
    }

    /// Items on the wire, the verb included.
    fn item_count(&self) -> usize {
        match self {
            Request::Set(set) => {
                3 + usize::from(set.condition != Condition::Always)
                    + 2 * usize::from(set.expires_in_ms.is_some())
            }
            Request::Get { .. } | Request::Del { .. } => 2,
            Request::VDel { .. } => 3,
            Request::KeyNotify { stop, .. } => 2 + usize::from(*stop),
            Request::Scan { token, .. } => 2 + usize::from(token.is_some()),
        }
    }

    /// Exact size of the encoding.
    pub fn encoded_len(&self) -> usize {
        let mut len =
            resp::header_len(self.item_count()) + resp::bulk_len(self.command().as_str().len());
        self.for_each_argument(|item| len += resp::bulk_len(item.len()));
        len
    }

    /// Writes the request (verbs and options in upper case).
    pub fn encode(&self, out: &mut impl BufMut) {
        resp::put_header(out, b'*', self.item_count());
        resp::put_bulk(out, self.command().as_str().as_bytes());
        self.for_each_argument(|item| resp::put_bulk(out, item));
    }

    /// The encoding as one buffer.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode(&mut out);
        out.into()
    }
}

/// Most items a valid request has (`SET k v NEX PX ms`); longer requests are read for
/// well-formedness but only counted.
const MAX_ITEMS: usize = 6;

/// Decodes a request payload. Errors are the texts the engine answers with: `syntax error`
/// for anything that is not a well-formed array of bulk strings, then `unknown command`,
/// `wrong number of arguments`, `the key length is zero`, and `syntax error` for bad options.
pub fn decode_request(payload: &Bytes) -> Result<Request, ServiceError> {
    let mut reader = Reader::new(payload);
    let count = reader.array().map_err(|_| ServiceError::SyntaxError)?;
    // Read every item first, so a truncated or malformed payload is a syntax error whatever
    // its verb or length. Keep where the first MAX_ITEMS stand: only the key and value become
    // `Bytes`, so decoding touches no reference count it does not keep.
    let mut spans = [Span::default(); MAX_ITEMS];
    for i in 0..count {
        let span = reader.bulk_range().map_err(|_| ServiceError::SyntaxError)?;
        if let Some(slot) = spans.get_mut(i) {
            *slot = span;
        }
    }
    reader.finish().map_err(|_| ServiceError::SyntaxError)?;
    if count == 0 {
        return Err(ServiceError::SyntaxError);
    }
    let items = &spans[..count.min(MAX_ITEMS)];
    let item = |i: usize| items[i].value(payload);
    let command = Command::from_verb(item(0)).ok_or(ServiceError::UnknownCommand)?;
    let (min, max) = match command {
        Command::Set => (3, usize::MAX),
        Command::Get | Command::Del => (2, 2),
        Command::VDel | Command::Scan => (2 + usize::from(command == Command::VDel), 3),
        Command::KeyNotify => (2, usize::MAX),
    };
    if count < min || count > max {
        return Err(ServiceError::WrongNumberOfArguments);
    }
    if command != Command::Scan && item(1).is_empty() {
        return Err(ServiceError::KeyLengthZero);
    }
    let key = || items[1].value_bytes(payload);
    Ok(match command {
        // Even the longest valid option list repeats or invents an option past MAX_ITEMS.
        Command::Set if count > MAX_ITEMS => return Err(ServiceError::SyntaxError),
        Command::Set => {
            let options: [&[u8]; 3] =
                [2, 3, 4].map(|i| items.get(i + 1).map_or(&[][..], |s| s.value(payload)));
            let (condition, expires_in_ms) = decode_set_options(&options[..count - 3])?;
            Request::Set(SetRequest {
                key: key(),
                value: items[2].bulk(payload),
                condition,
                expires_in_ms,
            })
        }
        Command::Get => Request::Get { key: key() },
        Command::Del => Request::Del { key: key() },
        Command::VDel => Request::VDel {
            key: key(),
            value: items[2].value_bytes(payload),
        },
        Command::KeyNotify => Request::KeyNotify {
            stop: decode_keynotify_options(items[2..].iter().map(|s| s.value(payload)), count)?,
            key: key(),
        },
        Command::Scan => Request::Scan {
            pattern: key(),
            token: items.get(2).map(|s| s.value_bytes(payload)),
        },
    })
}

/// `[NX | NEX] [PX ms]`, in any order and case.
fn decode_set_options(options: &[&[u8]]) -> Result<(Condition, Option<NonZeroU64>), ServiceError> {
    let mut condition = None;
    let mut expires_in_ms = None;
    let mut options = options.iter();
    while let Some(option) = options.next() {
        if option.eq_ignore_ascii_case(b"NX") || option.eq_ignore_ascii_case(b"NEX") {
            let parsed = if option.len() == 2 {
                Condition::NotExists
            } else {
                Condition::NotExistsOrEqual
            };
            if condition.replace(parsed).is_some() {
                return Err(ServiceError::SyntaxError);
            }
        } else if option.eq_ignore_ascii_case(b"PX") {
            let ms = options
                .next()
                .and_then(|ms| resp::parse_u64(ms))
                .and_then(NonZeroU64::new)
                .ok_or(ServiceError::SyntaxError)?;
            if expires_in_ms.replace(ms).is_some() {
                return Err(ServiceError::SyntaxError);
            }
        } else {
            return Err(ServiceError::SyntaxError);
        }
    }
    Ok((condition.unwrap_or_default(), expires_in_ms))
}

/// `KEYNOTIFY key [GET] [STOP]`: returns whether STOP was given.
fn decode_keynotify_options<'a>(
    options: impl Iterator<Item = &'a [u8]>,
    count: usize,
) -> Result<bool, ServiceError> {
    if count > 4 {
        return Err(ServiceError::SyntaxError);
    }
    let (mut stop, mut get) = (false, false);
    for option in options {
        let flag = if option.eq_ignore_ascii_case(b"STOP") {
            &mut stop
        } else if option.eq_ignore_ascii_case(b"GET") {
            // Accepted for compatibility; it has no effect.
            &mut get
        } else {
            return Err(ServiceError::SyntaxError);
        };
        if std::mem::replace(flag, true) {
            return Err(ServiceError::SyntaxError);
        }
    }
    Ok(stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &'static [u8]) -> Result<Request, ServiceError> {
        decode_request(&Bytes::from_static(bytes))
    }

    #[test]
    fn options_in_any_order_and_case() {
        let Request::Set(set) = decode(
            b"*6\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\npx\r\n$2\r\n10\r\n$3\r\nnex\r\n",
        )
        .unwrap() else {
            panic!("not a SET")
        };
        assert_eq!(set.condition, Condition::NotExistsOrEqual);
        assert_eq!(set.expires_in_ms, NonZeroU64::new(10));
    }

    #[test]
    fn bad_set_options() {
        for bad in [
            &b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nPX\r\n$1\r\n0\r\n"[..], // zero
            b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nPX\r\n$2\r\n-5\r\n",     // negative
            b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nPX\r\n$20\r\n18446744073709551616\r\n", // > u64
            b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nPX\r\n",                 // PX alone
            b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nNX\r\n",     // twice
            b"*7\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nPX\r\n$1\r\n1\r\n$2\r\nPX\r\n$1\r\n2\r\n",
        ] {
            assert_eq!(decode(bad), Err(ServiceError::SyntaxError), "{bad:?}");
        }
    }

    #[test]
    fn set_without_value_is_wrong_arity() {
        assert_eq!(
            decode(b"*2\r\n$3\r\nSET\r\n$1\r\nk\r\n"),
            Err(ServiceError::WrongNumberOfArguments)
        );
    }

    #[test]
    fn keynotify_options() {
        assert_eq!(
            decode(b"*3\r\n$9\r\nkeynotify\r\n$1\r\nk\r\n$3\r\nGET\r\n"),
            Ok(Request::KeyNotify {
                key: Bytes::from_static(b"k"),
                stop: false
            })
        );
        assert_eq!(
            decode(b"*4\r\n$9\r\nKEYNOTIFY\r\n$1\r\nk\r\n$3\r\nGET\r\n$4\r\nstop\r\n"),
            Ok(Request::KeyNotify {
                key: Bytes::from_static(b"k"),
                stop: true
            })
        );
        assert_eq!(
            decode(b"*3\r\n$9\r\nKEYNOTIFY\r\n$1\r\nk\r\n$4\r\nSTAP\r\n"),
            Err(ServiceError::SyntaxError)
        );
    }

    #[test]
    fn structure_errors_come_before_arity() {
        // Claims three items, holds two: malformed, whatever the verb wants.
        assert_eq!(
            decode(b"*3\r\n$3\r\nGET\r\n$1\r\na\r\n"),
            Err(ServiceError::SyntaxError)
        );
        assert_eq!(decode(b"*0\r\n"), Err(ServiceError::SyntaxError));
        assert_eq!(
            decode(b"*1\r\n:1\r\n"),
            Err(ServiceError::SyntaxError),
            "items must be bulk strings"
        );
        assert_eq!(
            decode(b"*1\r\n$-1\r\n"),
            Err(ServiceError::SyntaxError),
            "no null items"
        );
    }

    #[test]
    fn scan_pattern_may_be_empty_but_keys_may_not() {
        assert!(decode(b"*2\r\n$4\r\nSCAN\r\n$0\r\n\r\n").is_ok());
        assert_eq!(
            decode(b"*3\r\n$4\r\nVDEL\r\n$0\r\n\r\n$1\r\nv\r\n"),
            Err(ServiceError::KeyLengthZero)
        );
        assert_eq!(
            decode(b"*4\r\n$4\r\nSCAN\r\n$1\r\n*\r\n$1\r\nt\r\n$1\r\nx\r\n"),
            Err(ServiceError::WrongNumberOfArguments)
        );
    }

    #[test]
    fn decoded_values_are_slices_of_the_payload() {
        let payload = Bytes::from_static(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n");
        let Ok(Request::Set(set)) = decode_request(&payload) else {
            panic!("not a SET")
        };
        let range = payload.as_ptr_range();
        assert!(range.contains(&set.key.as_ptr()));
        assert!(range.contains(&set.value.as_slice().as_ptr()));
        assert_eq!(&set.value.to_wire()[..], b"$5\r\nvalue\r\n");
    }
}
