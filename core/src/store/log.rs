//! The durable store's log format, without I/O: records appended to one file, each framed
//! with its length and a CRC-32 of its body, after a fixed header.
//!
//! ```text
//! file   := MAGIC record*
//! record := body_len: u32 LE, crc32(body): u32 LE, body
//! body   := 1 key_len: u32 LE, key, value_len: u32 LE, value, expires_at: u64 LE (0: never),
//!             version, has_token: u8, token if has_token = 1           (PUT: the key's state)
//!         | 2 key_len: u32 LE, key                                        (DEL)
//!         | 3 clock                                                       (CLOCK: the node's clock)
//!         | 4 json_len: u32 LE, json                                      (JOB: a job, as JSON)
//!         | 5 thing_len: u32 LE, thing, json_len: u32 LE, json           (THING: its executions)
//!         | 6 job_len: u32 LE, job id, next: u64 LE (u64::MAX: done)      (ROLLOUT: its progress)
//!         | 7 job_len: u32 LE, job id                                     (JOB_DELETED)
//!         | 8 job_len: u32 LE, job id, n: u32 LE, (len: u32 LE, thing){n}  (JOB_THINGS: appended)
//!         | 9 table, name (each len: u32 LE, bytes), has_value: u8, value if 1 (ENTRY)
//!         | 10 table_len: u32 LE, table                                   (TABLE_DROPPED)
//! hlc    := wall_ms: u64 LE, counter: u32 LE, node_len: u16 LE, node
//! ```
//!
//! A PUT holds a key's whole state
//! after a write, so replaying keeps only the last record of each key. Why a log of our own and
//! not an embedded database: see `docs/guide/durability.md`.

use bytes::Bytes;

use crate::hlc::Hlc;

/// The first bytes of every log file (a format change gets a new one).
pub const MAGIC: &[u8; 16] = b"mqstore-log-v1\n\0";

const PUT: u8 = 1;
const DEL: u8 = 2;
const CLOCK: u8 = 3;
const JOB: u8 = 4;
const THING: u8 = 5;
const ROLLOUT: u8 = 6;
const JOB_DELETED: u8 = 7;
const JOB_THINGS: u8 = 8;
const ENTRY: u8 = 9;
const TABLE_DROPPED: u8 = 10;

/// One record, as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A key's state after a write.
    Put {
        /// The key.
        key: Bytes,
        /// Its value.
        value: Bytes,
        /// Its version.
        version: Hlc,
        /// The fencing token protecting it, if any.
        fencing_token: Option<Hlc>,
        /// Milliseconds since the epoch at and after which the key is gone.
        expires_at: Option<u64>,
    },
    /// The key was deleted.
    Del {
        /// The key.
        key: Bytes,
    },
    /// The node's clock when the log was written whole (versions after a restart follow it).
    Clock(Hlc),
    /// A job of the jobs service (its JSON).
    Job(Bytes),
    /// A thing's executions (their JSON) after a write.
    Thing {
        /// The thing.
        thing: String,
        /// Its executions' record, as JSON.
        json: Bytes,
    },
    /// How far a job's rollout has got: the index of its next target, `None` once done.
    Rollout {
        /// The job.
        job_id: String,
        /// The index of the next target to notify; None when the rollout is done.
        next: Option<u64>,
    },
    /// A job was deleted (with its rollout and its counts).
    JobDeleted(String),
    /// Things appended to a job's things (a continuous job's group grew).
    JobThings {
        /// The job.
        job_id: String,
        /// The things it targets, in order.
        things: Vec<String>,
    },
    /// An entry of the jobs' tables (groups, templates) written, or removed (`None`).
    Entry {
        /// The operator table (`groups`, `templates`, ...).
        table: String,
        /// The entry's name.
        name: String,
        /// Its value.
        value: Option<Bytes>,
    },
    /// A whole table of the jobs' tables removed.
    TableDropped(String),
}

/// Appends a PUT record to `out`.
pub fn put(
    out: &mut Vec<u8>,
    key: &[u8],
    value: &[u8],
    version: &Hlc,
    fencing_token: Option<&Hlc>,
    expires_at: Option<u64>,
) {
    frame(out, |body| {
        body.push(PUT);
        long(body, key);
        long(body, value);
        body.extend_from_slice(&expires_at.unwrap_or(0).to_le_bytes());
        hlc(body, version);
        body.push(u8::from(fencing_token.is_some()));
        fencing_token.iter().for_each(|token| hlc(body, token));
    });
}

/// Appends a DEL record to `out`.
pub fn del(out: &mut Vec<u8>, key: &[u8]) {
    frame(out, |body| {
        body.push(DEL);
        long(body, key);
    });
}

/// Appends a CLOCK record to `out`.
pub fn clock(out: &mut Vec<u8>, clock: &Hlc) {
    frame(out, |body| {
        body.push(CLOCK);
        hlc(body, clock);
    });
}

/// Appends a JOB record to `out`.
pub fn job(out: &mut Vec<u8>, json: &[u8]) {
    frame(out, |body| {
        body.push(JOB);
        long(body, json);
    });
}

/// Appends a THING record to `out`.
pub fn thing(out: &mut Vec<u8>, thing: &str, json: &[u8]) {
    frame(out, |body| {
        body.push(THING);
        long(body, thing.as_bytes());
        long(body, json);
    });
}

/// Appends a ROLLOUT record to `out`.
pub fn rollout(out: &mut Vec<u8>, job_id: &str, next: Option<u64>) {
    frame(out, |body| {
        body.push(ROLLOUT);
        long(body, job_id.as_bytes());
        body.extend_from_slice(&next.unwrap_or(u64::MAX).to_le_bytes());
    });
}

/// Appends a JOB_DELETED record to `out`.
pub fn job_deleted(out: &mut Vec<u8>, job_id: &str) {
    frame(out, |body| {
        body.push(JOB_DELETED);
        long(body, job_id.as_bytes());
    });
}

/// Appends a JOB_THINGS record to `out`.
pub fn job_things(out: &mut Vec<u8>, job_id: &str, things: &[String]) {
    frame(out, |body| {
        body.push(JOB_THINGS);
        long(body, job_id.as_bytes());
        body.extend_from_slice(&(things.len() as u32).to_le_bytes());
        things.iter().for_each(|thing| long(body, thing.as_bytes()));
    });
}

/// Appends an ENTRY record to `out`.
pub fn entry(out: &mut Vec<u8>, table: &str, name: &str, value: Option<&[u8]>) {
    frame(out, |body| {
        body.push(ENTRY);
        long(body, table.as_bytes());
        long(body, name.as_bytes());
        body.push(u8::from(value.is_some()));
        value.iter().for_each(|value| long(body, value));
    });
}

/// Appends a TABLE_DROPPED record to `out`.
pub fn table_dropped(out: &mut Vec<u8>, table: &str) {
    frame(out, |body| {
        body.push(TABLE_DROPPED);
        long(body, table.as_bytes());
    });
}

/// Writes a record's frame around what `body` writes, in place (no second buffer).
fn frame(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    body(out);
    let len = (out.len() - start - 8) as u32;
    let crc = crc32fast::hash(&out[start + 8..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fn long(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn hlc(out: &mut Vec<u8>, hlc: &Hlc) {
    out.extend_from_slice(&hlc.wall_ms.to_le_bytes());
    out.extend_from_slice(&hlc.counter.to_le_bytes());
    // A node id is short (an MQTT client id's worth at most).
    out.extend_from_slice(&(hlc.node.len() as u16).to_le_bytes());
    out.extend_from_slice(hlc.node.as_bytes());
}

/// Why a log cannot be read. Nothing after `offset` was replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at byte offset {offset}: {reason}")]
pub struct LogError {
    /// Where, in bytes from the start of the file.
    pub offset: usize,
    /// What is wrong there.
    pub reason: String,
}

/// What reading a log found besides its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replayed {
    /// How many records were read.
    pub records: usize,
    /// Where the last complete record ends; the bytes after it (if any) are a record whose
    /// write was cut off (a crash mid-append): never acknowledged, so safe to drop.
    pub valid_len: usize,
}

/// Reads every record of a log, in order. A torn last record ends the log (see
/// [`Replayed::valid_len`]); a damaged record before the last is an error: acknowledged data
/// may be behind it, and dropping it silently would lose it.
pub fn replay(file: &[u8], mut each: impl FnMut(Record)) -> Result<Replayed, LogError> {
    let error = |offset, reason: &str| LogError {
        offset,
        reason: reason.to_owned(),
    };
    if file.len() < MAGIC.len() {
        // A file cut off while its header was written holds no record.
        return match MAGIC.starts_with(file) {
            true => Ok(Replayed {
                records: 0,
                valid_len: 0,
            }),
            false => Err(error(0, "not an mqstore log (no header)")),
        };
    }
    if &file[..MAGIC.len()] != MAGIC {
        return Err(error(
            0,
            "not an mqstore log of this version (wrong header)",
        ));
    }
    let mut at = MAGIC.len();
    let mut records = 0;
    // Most versions of a log come from one node: its id is shared, not allocated per record.
    let mut node: Option<std::sync::Arc<str>> = None;
    while at < file.len() {
        let torn = Ok(Replayed {
            records,
            valid_len: at,
        });
        let Some(header) = file.get(at..at + 8) else {
            return torn;
        };
        let len = u32::from_le_bytes(header[..4].try_into().unwrap_or_default()) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().unwrap_or_default());
        let Some(body) = file.get(at + 8..at + 8 + len) else {
            return torn;
        };
        let last = at + 8 + len == file.len();
        if crc32fast::hash(body) != crc {
            return match last {
                true => torn,
                false => Err(error(
                    at,
                    "a record's checksum does not match (the file is damaged)",
                )),
            };
        }
        let record = decode(body, &mut node).map_err(|reason| error(at, reason))?;
        each(record);
        records += 1;
        at += 8 + len;
    }
    Ok(Replayed {
        records,
        valid_len: at,
    })
}

/// A record's body; `node` is the node id read last.
fn decode(body: &[u8], node: &mut Option<std::sync::Arc<str>>) -> Result<Record, &'static str> {
    let mut reader = Reader { rest: body, node };
    let record = match reader.take(1)?[0] {
        PUT => {
            let key = Bytes::copy_from_slice(reader.long()?);
            let value = Bytes::copy_from_slice(reader.long()?);
            let expires_at = u64::from_le_bytes(reader.take(8)?.try_into().unwrap_or_default());
            let version = reader.hlc()?;
            let fencing_token = match reader.take(1)?[0] {
                0 => None,
                _ => Some(reader.hlc()?),
            };
            Record::Put {
                key,
                value,
                version,
                fencing_token,
                expires_at: (expires_at != 0).then_some(expires_at),
            }
        }
        DEL => Record::Del {
            key: Bytes::copy_from_slice(reader.long()?),
        },
        CLOCK => Record::Clock(reader.hlc()?),
        JOB => Record::Job(Bytes::copy_from_slice(reader.long()?)),
        THING => Record::Thing {
            thing: reader.text()?,
            json: Bytes::copy_from_slice(reader.long()?),
        },
        ROLLOUT => {
            let job_id = reader.text()?;
            let next = u64::from_le_bytes(reader.take(8)?.try_into().unwrap_or_default());
            Record::Rollout {
                job_id,
                next: (next != u64::MAX).then_some(next),
            }
        }
        JOB_DELETED => Record::JobDeleted(reader.text()?),
        JOB_THINGS => {
            let job_id = reader.text()?;
            let n = u32::from_le_bytes(reader.take(4)?.try_into().unwrap_or_default());
            // Each thing takes at least its length's 4 bytes: a count past that is damage.
            if n as usize > reader.rest.len() / 4 {
                return Err("a list of things longer than its record");
            }
            let things = (0..n).map(|_| reader.text()).collect::<Result<_, _>>()?;
            Record::JobThings { job_id, things }
        }
        ENTRY => {
            let table = reader.text()?;
            let name = reader.text()?;
            let value = match reader.take(1)?[0] {
                0 => None,
                _ => Some(Bytes::copy_from_slice(reader.long()?)),
            };
            Record::Entry { table, name, value }
        }
        TABLE_DROPPED => Record::TableDropped(reader.text()?),
        _ => return Err("a record of an unknown kind"),
    };
    match reader.rest.is_empty() {
        true => Ok(record),
        false => Err("a record longer than its fields"),
    }
}

struct Reader<'a, 'n> {
    rest: &'a [u8],
    node: &'n mut Option<std::sync::Arc<str>>,
}

impl<'a> Reader<'a, '_> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.rest.len() < n {
            return Err("a record shorter than its fields");
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    fn long(&mut self) -> Result<&'a [u8], &'static str> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default());
        self.take(len as usize)
    }

    fn text(&mut self) -> Result<String, &'static str> {
        let bytes = self.long()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| "a name that is not UTF-8")
    }

    fn hlc(&mut self) -> Result<Hlc, &'static str> {
        let wall_ms = u64::from_le_bytes(self.take(8)?.try_into().unwrap_or_default());
        let counter = u32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default());
        let len = u16::from_le_bytes(self.take(2)?.try_into().unwrap_or_default());
        let text = std::str::from_utf8(self.take(len as usize)?)
            .map_err(|_| "a node id that is not UTF-8")?;
        let node = match self.node.as_ref().filter(|n| &***n == text) {
            Some(node) => node.clone(),
            None => self.node.insert(text.into()).clone(),
        };
        Hlc::new(wall_ms, counter, node).map_err(|_| "a version that is not an HLC")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hlc(text: &str) -> Hlc {
        Hlc::parse(text).unwrap()
    }

    /// A log of nine records, the records, and where some start.
    fn sample() -> (Vec<u8>, Vec<Record>, Vec<usize>) {
        let mut file = MAGIC.to_vec();
        let mut starts = vec![file.len()];
        put(&mut file, b"k1", b"v1", &hlc("10:0:n"), None, None);
        starts.push(file.len());
        put(
            &mut file,
            b"lock",
            b"me",
            &hlc("11:2:n"),
            Some(&hlc("9:1:n")),
            Some(5000),
        );
        starts.push(file.len());
        del(&mut file, b"k1");
        starts.push(file.len());
        job(&mut file, br#"{"id":"j"}"#);
        thing(&mut file, "t", br#"{"executions":{}}"#);
        rollout(&mut file, "j", Some(3));
        rollout(&mut file, "j", None);
        job_deleted(&mut file, "j");
        job_things(&mut file, "j", &["a".into(), "b".into()]);
        entry(&mut file, "groups", "g", Some(b"{}"));
        entry(&mut file, "groups", "g", None);
        table_dropped(&mut file, "members/g");
        starts.push(file.len());
        clock(&mut file, &hlc("12:0:n"));
        let records = vec![
            Record::Put {
                key: Bytes::from_static(b"k1"),
                value: Bytes::from_static(b"v1"),
                version: hlc("10:0:n"),
                fencing_token: None,
                expires_at: None,
            },
            Record::Put {
                key: Bytes::from_static(b"lock"),
                value: Bytes::from_static(b"me"),
                version: hlc("11:2:n"),
                fencing_token: Some(hlc("9:1:n")),
                expires_at: Some(5000),
            },
            Record::Del {
                key: Bytes::from_static(b"k1"),
            },
            Record::Job(Bytes::from_static(br#"{"id":"j"}"#)),
            Record::Thing {
                thing: "t".into(),
                json: Bytes::from_static(br#"{"executions":{}}"#),
            },
            Record::Rollout {
                job_id: "j".into(),
                next: Some(3),
            },
            Record::Rollout {
                job_id: "j".into(),
                next: None,
            },
            Record::JobDeleted("j".into()),
            Record::JobThings {
                job_id: "j".into(),
                things: vec!["a".into(), "b".into()],
            },
            Record::Entry {
                table: "groups".into(),
                name: "g".into(),
                value: Some(Bytes::from_static(b"{}")),
            },
            Record::Entry {
                table: "groups".into(),
                name: "g".into(),
                value: None,
            },
            Record::TableDropped("members/g".into()),
            Record::Clock(hlc("12:0:n")),
        ];
        (file, records, starts)
    }

    fn read(file: &[u8]) -> Result<(Vec<Record>, Replayed), LogError> {
        let mut records = Vec::new();
        let replayed = replay(file, |r| records.push(r))?;
        Ok((records, replayed))
    }

    #[test]
    fn records_read_back_as_written() {
        let (file, written, _) = sample();
        let (records, replayed) = read(&file).unwrap();
        assert_eq!(records, written);
        assert_eq!(replayed.records, 13);
        assert_eq!(replayed.valid_len, file.len());
    }

    #[test]
    fn a_torn_last_record_ends_the_log_at_the_last_complete_one() {
        let (file, written, starts) = sample();
        let last_start = starts[4];
        for cut in last_start + 1..file.len() {
            let (records, replayed) = read(&file[..cut]).unwrap();
            assert_eq!(records, written[..12], "cut at {cut}");
            assert_eq!(replayed.valid_len, last_start);
        }
        // A damaged checksum on the last record: the same.
        let mut damaged = file.clone();
        let end = damaged.len() - 1;
        damaged[end] ^= 0xff;
        assert_eq!(read(&damaged).unwrap().1.valid_len, last_start);
    }

    #[test]
    fn a_damaged_record_before_the_last_is_an_error_with_its_offset() {
        let (mut file, _, starts) = sample();
        let second = starts[1];
        file[second + 12] ^= 0x01; // inside the second record's body
        let error = read(&file).unwrap_err();
        assert_eq!(error.offset, second);
        assert!(error.reason.contains("checksum"), "{error}");
    }

    #[test]
    fn a_file_that_is_no_log_is_refused() {
        assert_eq!(read(b"hello, this is not a log").unwrap_err().offset, 0);
        assert_eq!(read(&MAGIC[..5]).unwrap().1.records, 0);
        assert_eq!(read(b"").unwrap().1.valid_len, 0);
    }
}
