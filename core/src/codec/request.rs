//! Requests (spec §2): `*{n}\r\n` followed by n bulk strings.

use std::num::NonZeroU64;

use bytes::{BufMut, Bytes};

use super::Bulk;
use super::resp::{self, Reader};
use crate::ServiceError;

/// The verbs of the state store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    Set,
    Get,
    Del,
    VDel,
    KeyNotify,
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
        Self::ALL
            .into_iter()
            .find(|c| c.as_str().as_bytes().eq_ignore_ascii_case(verb))
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
    pub key: Bytes,
    pub value: Bulk,
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
    Set(SetRequest),
    Get {
        key: Bytes,
    },
    Del {
        key: Bytes,
    },
    /// Delete only if the current value equals `value`.
    VDel {
        key: Bytes,
        value: Bytes,
    },
    /// Register (or with `stop`, remove) the sender for change notifications of `key`.
    KeyNotify {
        key: Bytes,
        stop: bool,
    },
    /// A page of keys matching `pattern`, continuing after `token` when given.
    Scan {
        pattern: Bytes,
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

    /// Exact size of the encoding.
    pub fn encoded_len(&self) -> usize {
        let mut items = 1;
        let mut len = resp::bulk_len(self.command().as_str().len());
        self.for_each_argument(|item| {
            items += 1;
            len += resp::bulk_len(item.len());
        });
        resp::header_len(items) + len
    }

    /// Writes the request (verbs and options in upper case).
    pub fn encode(&self, out: &mut impl BufMut) {
        let mut items = 1;
        self.for_each_argument(|_| items += 1);
        resp::put_header(out, b'*', items);
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
    // its verb or length; keep the first MAX_ITEMS without touching the heap.
    let mut items: [Bulk; MAX_ITEMS] = Default::default();
    for i in 0..count {
        let item = reader.bulk().map_err(|_| ServiceError::SyntaxError)?;
        if let Some(slot) = items.get_mut(i) {
            *slot = item;
        }
    }
    reader.finish().map_err(|_| ServiceError::SyntaxError)?;
    if count == 0 {
        return Err(ServiceError::SyntaxError);
    }
    let items = &items[..count.min(MAX_ITEMS)];
    let command = Command::from_verb(items[0].as_slice()).ok_or(ServiceError::UnknownCommand)?;
    let (min, max) = match command {
        Command::Set => (3, usize::MAX),
        Command::Get | Command::Del => (2, 2),
        Command::VDel | Command::Scan => (2 + usize::from(command == Command::VDel), 3),
        Command::KeyNotify => (2, usize::MAX),
    };
    if count < min || count > max {
        return Err(ServiceError::WrongNumberOfArguments);
    }
    let key = items[1].value();
    if command != Command::Scan && key.is_empty() {
        return Err(ServiceError::KeyLengthZero);
    }
    Ok(match command {
        Command::Set => Request::Set(decode_set_options(key, &items[2], &items[3..], count)?),
        Command::Get => Request::Get { key },
        Command::Del => Request::Del { key },
        Command::VDel => Request::VDel {
            key,
            value: items[2].value(),
        },
        Command::KeyNotify => Request::KeyNotify {
            key,
            stop: decode_keynotify_options(&items[2..], count)?,
        },
        Command::Scan => Request::Scan {
            pattern: key,
            token: items.get(2).map(Bulk::value),
        },
    })
}

fn decode_set_options(
    key: Bytes,
    value: &Bulk,
    options: &[Bulk],
    count: usize,
) -> Result<SetRequest, ServiceError> {
    if count > MAX_ITEMS {
        // Even the longest valid option list repeats or invents an option here.
        return Err(ServiceError::SyntaxError);
    }
    let mut set = SetRequest {
        key,
        value: value.clone(),
        condition: Condition::Always,
        expires_in_ms: None,
    };
    let mut options = options.iter();
    let mut seen_condition = false;
    while let Some(option) = options.next() {
        let option = option.as_slice();
        if option.eq_ignore_ascii_case(b"NX") || option.eq_ignore_ascii_case(b"NEX") {
            if seen_condition {
                return Err(ServiceError::SyntaxError);
            }
            seen_condition = true;
            set.condition = if option.len() == 2 {
                Condition::NotExists
            } else {
                Condition::NotExistsOrEqual
            };
        } else if option.eq_ignore_ascii_case(b"PX") {
            let ms = options
                .next()
                .and_then(|ms| resp::parse_u64(ms.as_slice()))
                .and_then(NonZeroU64::new)
                .ok_or(ServiceError::SyntaxError)?;
            if set.expires_in_ms.replace(ms).is_some() {
                return Err(ServiceError::SyntaxError);
            }
        } else {
            return Err(ServiceError::SyntaxError);
        }
    }
    Ok(set)
}

/// `KEYNOTIFY key [GET] [STOP]`: returns whether STOP was given.
fn decode_keynotify_options(options: &[Bulk], count: usize) -> Result<bool, ServiceError> {
    if count > 4 {
        return Err(ServiceError::SyntaxError);
    }
    let (mut stop, mut get) = (false, false);
    for option in options {
        let flag = if option.as_slice().eq_ignore_ascii_case(b"STOP") {
            &mut stop
        } else if option.as_slice().eq_ignore_ascii_case(b"GET") {
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
