//! Responses (spec §3) and notifications (spec §4).

use bytes::{BufMut, Bytes};

use super::resp::{self, Reader};
use super::{Bulk, DecodeError};
use crate::ServiceError;

/// A state store response payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// `+OK`: SET applied, KEYNOTIFY registered or stopped.
    Ok,
    /// `:-1`: SET not applied (NX/NEX), or VDEL value did not match.
    NotApplied,
    /// `:N` (N ≥ 0): keys deleted by DEL/VDEL; `:0` also answers KEYNOTIFY STOP of a key
    /// not watched.
    Deleted(u64),
    /// GET found.
    Value(Bulk),
    /// `$-1`: GET of an absent key.
    Absent,
    /// A SCAN page; `token` is present when more pages follow.
    Keys {
        /// This page's keys.
        keys: Vec<Bytes>,
        /// The next page's token; None on the last.
        token: Option<Bytes>,
    },
    /// `-ERR {text}`.
    Error(ServiceError),
}

const OK: &[u8] = b"+OK\r\n";
const ERR_PREFIX: &[u8] = b"-ERR ";

impl Response {
    /// Exact size of the encoding.
    pub fn encoded_len(&self) -> usize {
        match self {
            Response::Ok => OK.len(),
            Response::NotApplied => 5,
            Response::Deleted(n) => 3 + resp::digits(*n),
            Response::Value(value) => value.wire_len(),
            Response::Absent => 5,
            Response::Keys { keys, token } => {
                resp::header_len(1 + usize::from(token.is_some()))
                    + resp::header_len(keys.len())
                    + keys.iter().map(|k| resp::bulk_len(k.len())).sum::<usize>()
                    + token.as_ref().map_or(0, |t| resp::bulk_len(t.len()))
            }
            Response::Error(e) => ERR_PREFIX.len() + e.text().len() + 2,
        }
    }

    /// Writes the response.
    pub fn encode(&self, out: &mut impl BufMut) {
        match self {
            Response::Ok => out.put_slice(OK),
            Response::NotApplied => resp::put_integer(out, -1),
            Response::Deleted(n) => {
                out.put_u8(b':');
                out.put_slice(resp::Decimal::new(*n).as_bytes());
                out.put_slice(b"\r\n");
            }
            Response::Value(value) => value.encode(out),
            Response::Absent => out.put_slice(b"$-1\r\n"),
            Response::Keys { keys, token } => {
                resp::put_header(out, b'*', 1 + usize::from(token.is_some()));
                resp::put_header(out, b'*', keys.len());
                for key in keys {
                    resp::put_bulk(out, key);
                }
                if let Some(token) = token {
                    resp::put_bulk(out, token);
                }
            }
            Response::Error(e) => {
                out.put_slice(ERR_PREFIX);
                out.put_slice(e.text().as_bytes());
                out.put_slice(b"\r\n");
            }
        }
    }

    /// The encoding as one buffer; a decoded value is answered without copying it.
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Response::Ok => Bytes::from_static(OK),
            Response::Value(value) => value.to_wire(),
            _ => {
                let mut out = Vec::with_capacity(self.encoded_len());
                self.encode(&mut out);
                out.into()
            }
        }
    }
}

/// Decodes a response payload (the client side).
pub fn decode_response(payload: &Bytes) -> Result<Response, DecodeError> {
    let mut reader = Reader::new(payload);
    let at = |reason| DecodeError { reason, offset: 0 };
    let response = match reader.peek() {
        Some(b'+') => match reader.simple()? {
            b"OK" => Response::Ok,
            _ => return Err(at("a simple string other than OK")),
        },
        Some(b':') => match reader.integer()? {
            -1 => Response::NotApplied,
            n if n >= 0 => Response::Deleted(n as u64),
            _ => return Err(at("an integer below -1")),
        },
        Some(b'$') => match reader.nullable_bulk()? {
            Some(value) => Response::Value(value),
            None => Response::Absent,
        },
        Some(b'-') => {
            let line = reader.error()?;
            // Engines send `-ERR {text}`; keep anything else whole rather than guess.
            let text = line.strip_prefix(&ERR_PREFIX[1..]).unwrap_or(line);
            Response::Error(ServiceError::from_text(text))
        }
        Some(b'*') => {
            let parts = reader.array()?;
            if !(1..=2).contains(&parts) {
                return Err(at("a SCAN page has one or two parts"));
            }
            let count = reader.array()?;
            let mut keys = Vec::with_capacity(count);
            for _ in 0..count {
                keys.push(reader.bulk()?.value());
            }
            let token = if parts == 2 {
                Some(reader.bulk()?.value())
            } else {
                None
            };
            Response::Keys { keys, token }
        }
        _ => return Err(at("not a state store response")),
    };
    reader.finish()?;
    Ok(response)
}

/// A change notification (KEYNOTIFY), spec §4.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notification {
    /// The key was set to this value.
    Set(Bulk),
    /// The key was deleted (by DEL, VDEL or expiry).
    Delete,
}

impl Notification {
    /// The key's new value; `None` when it was deleted.
    pub fn into_value(self) -> Option<Bytes> {
        match self {
            Notification::Set(value) => Some(value.value()),
            Notification::Delete => None,
        }
    }
}

const NOTIFY_SET_PREFIX: &[u8] = b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n";
const NOTIFY_DELETE: &[u8] = b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n";

impl Notification {
    /// Exact size of the encoding.
    pub fn encoded_len(&self) -> usize {
        match self {
            Notification::Set(value) => NOTIFY_SET_PREFIX.len() + value.wire_len(),
            Notification::Delete => NOTIFY_DELETE.len(),
        }
    }

    /// Writes the notification (the delete operation as `DELETE`).
    pub fn encode(&self, out: &mut impl BufMut) {
        match self {
            Notification::Set(value) => {
                out.put_slice(NOTIFY_SET_PREFIX);
                value.encode(out);
            }
            Notification::Delete => out.put_slice(NOTIFY_DELETE),
        }
    }

    /// The encoding as one buffer.
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Notification::Delete => Bytes::from_static(NOTIFY_DELETE),
            Notification::Set(_) => {
                let mut out = Vec::with_capacity(self.encoded_len());
                self.encode(&mut out);
                out.into()
            }
        }
    }
}

/// Decodes a notification payload; accepts `DELETE` and the documentation's `DEL`.
pub fn decode_notification(payload: &Bytes) -> Result<Notification, DecodeError> {
    let mut reader = Reader::new(payload);
    let at = |reason| DecodeError { reason, offset: 0 };
    let count = reader.array()?;
    let mut word = |expected: &[&[u8]]| -> Result<usize, DecodeError> {
        let item = reader.bulk()?;
        expected
            .iter()
            .position(|e| e.eq_ignore_ascii_case(item.as_slice()))
            .ok_or(at("unexpected word in a notification"))
    };
    if count < 2 {
        return Err(at("a notification has at least two items"));
    }
    word(&[b"NOTIFY"])?;
    let notification = match word(&[b"SET", b"DELETE", b"DEL"])? {
        0 if count == 4 => {
            word(&[b"VALUE"])?;
            Notification::Set(reader.bulk()?)
        }
        1 | 2 if count == 2 => Notification::Delete,
        _ => return Err(at("wrong item count for the notification")),
    };
    reader.finish()?;
    Ok(notification)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_reject_what_engines_never_send() {
        for bad in [
            &b"+PONG\r\n"[..],
            b":-2\r\n",
            b"*3\r\n*0\r\n$1\r\na\r\n$1\r\nb\r\n",
            b"*1\r\n*1\r\n:1\r\n",
            b"$3\r\nab\r\n",
            b"+OK\r\n+OK\r\n",
            b"",
            b"!",
        ] {
            assert!(
                decode_response(&Bytes::from_static(bad)).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn other_error_lines_are_kept_whole() {
        assert_eq!(
            decode_response(&Bytes::from_static(b"-WRONGTYPE nope\r\n")).unwrap(),
            Response::Error(ServiceError::Other("WRONGTYPE nope".into()))
        );
        assert_eq!(
            decode_response(&Bytes::from_static(b"-ERR not authorized\r\n")).unwrap(),
            Response::Error(ServiceError::NotAuthorized)
        );
    }

    #[test]
    fn encoded_len_is_exact() {
        let responses = [
            Response::Ok,
            Response::NotApplied,
            Response::Deleted(0),
            Response::Deleted(12345),
            Response::Value(Bulk::new(&b"abc"[..])),
            Response::Absent,
            Response::Keys {
                keys: vec![Bytes::from_static(b"a"), Bytes::new()],
                token: Some(Bytes::from_static(b"tok")),
            },
            Response::Error(ServiceError::QuotaExceeded),
        ];
        for r in responses {
            assert_eq!(r.to_bytes().len(), r.encoded_len(), "{r:?}");
            assert_eq!(decode_response(&r.to_bytes()).unwrap(), r);
        }
    }

    #[test]
    fn notifications_reject_wrong_shapes() {
        for bad in [
            &b"*2\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n"[..],
            b"*4\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n$5\r\nVALUE\r\n$1\r\nx\r\n",
            b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUX\r\n$1\r\nx\r\n",
            b"*2\r\n$6\r\nNOTIFX\r\n$3\r\nDEL\r\n",
            b"*1\r\n$6\r\nNOTIFY\r\n",
        ] {
            assert!(
                decode_notification(&Bytes::from_static(bad)).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
