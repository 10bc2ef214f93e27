//! A shadow's document and AWS's rules for it: how an update merges into `desired` and
//! `reported`, the per-leaf metadata timestamps, the delta, and what a request may hold.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Levels of nesting AWS allows inside `desired` or `reported` ("maximum is 6").
pub const MAX_DEPTH: usize = 6;
/// The largest state a shadow may hold (`desired` and `reported`, compact JSON; metadata
/// does not count): AWS's 8 KB.
pub const MAX_STATE_BYTES: usize = 8 * 1024;
/// The largest request payload: AWS's MQTT message limit.
pub const MAX_REQUEST_BYTES: usize = 128 * 1024;
/// The longest `clientToken`, in bytes.
pub const MAX_CLIENT_TOKEN: usize = 64;

type Object = Map<String, Value>;

/// Why a request was refused: AWS's code and message, sent on the request's `/rejected`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The HTTP-style code: 400, 404, 409, 413, 415.
    pub code: u16,
    /// AWS's message for it.
    pub message: String,
}

impl Rejection {
    fn new(code: u16, message: &str) -> Rejection {
        Rejection {
            code,
            message: message.to_owned(),
        }
    }

    pub(crate) fn invalid_json() -> Rejection {
        Rejection::new(400, "Invalid JSON")
    }

    pub(crate) fn not_found(name: &str) -> Rejection {
        Rejection::new(404, &format!("No shadow exists with name: '{name}'"))
    }

    pub(crate) fn version_conflict() -> Rejection {
        Rejection::new(409, "Version conflict")
    }

    pub(crate) fn too_large() -> Rejection {
        Rejection::new(413, "The payload exceeds the maximum size allowed")
    }

    pub(crate) fn too_many_requests() -> Rejection {
        Rejection::new(429, "Too many requests")
    }

    pub(crate) fn internal() -> Rejection {
        Rejection::new(500, "Internal service failure")
    }

    pub(crate) fn bad_name(what: &str) -> Rejection {
        Rejection::new(400, what)
    }
}

/// One section of a shadow: `desired` or `reported`, and the same shape for its metadata.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sections {
    /// `desired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<Object>,
    /// `reported`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<Object>,
}

impl Sections {
    fn is_empty(&self) -> bool {
        self.desired.is_none() && self.reported.is_none()
    }
}

/// A shadow as the store keeps it. A deleted shadow keeps only its version, so that the next
/// one follows it (AWS: "deleting a shadow does not reset its version number").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Shadow {
    /// `desired` and `reported`.
    #[serde(default, skip_serializing_if = "Sections::is_empty")]
    pub state: Sections,
    /// When each leaf was last written (epoch seconds), in the state's shape.
    #[serde(default, skip_serializing_if = "Sections::is_empty")]
    pub metadata: Sections,
    /// The document's version: 1 at the first update, one more at each.
    pub version: u64,
    /// Deleted: only the version is kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

/// A request's `clientToken` and `version`, read before anything else so that a rejection
/// echoes the token.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Envelope {
    /// `clientToken`, when the request had a valid one.
    pub(crate) client_token: Option<String>,
    /// `version`: the request applies only to this version.
    pub(crate) version: Option<u64>,
}

/// A section of an update request.
#[derive(Debug, Clone, PartialEq)]
enum Patch {
    Absent,
    /// `null`: the section is removed.
    Clear,
    Merge(Object),
}

/// A parsed update request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Update {
    desired: Patch,
    reported: Patch,
    /// The request's `state`, as sent: `/update/accepted` echoes it.
    state: Value,
}

/// What an accepted update did, for the replies.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Applied {
    /// The shadow before (none if it did not exist).
    pub(crate) previous: Option<Shadow>,
    /// The shadow after.
    pub(crate) current: Shadow,
    /// `/update/accepted`'s body without `timestamp` and `clientToken`.
    pub(crate) accepted: Object,
    /// `/update/delta`'s `state` and `metadata`, when the update wrote `desired` and it
    /// differs from `reported`.
    pub(crate) delta: Option<(Object, Object)>,
}

/// Reads a request's JSON object (an empty payload is an empty object, as AWS takes a `get`
/// or `delete` with no body), its `clientToken` and `version`.
pub(crate) fn parse(payload: &[u8]) -> Result<(Object, Envelope), (Rejection, Envelope)> {
    let none = Envelope::default();
    if payload.len() > MAX_REQUEST_BYTES {
        return Err((Rejection::too_large(), none));
    }
    if payload.is_empty() {
        return Ok((Object::new(), none));
    }
    if std::str::from_utf8(payload).is_err() {
        let message = "Unsupported documented encoding; supported encoding is UTF-8";
        return Err((Rejection::new(415, message), none));
    }
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(payload) else {
        return Err((Rejection::invalid_json(), none));
    };
    let mut envelope = Envelope::default();
    match body.get("clientToken") {
        None => {}
        Some(Value::String(token)) if token.len() <= MAX_CLIENT_TOKEN => {
            envelope.client_token = Some(token.clone());
        }
        Some(_) => return Err((Rejection::new(400, "Invalid clientToken"), envelope)),
    }
    match body.get("version") {
        None => {}
        Some(version) => match version.as_u64() {
            Some(version) => envelope.version = Some(version),
            None => return Err((Rejection::new(400, "Invalid version"), envelope)),
        },
    }
    Ok((body, envelope))
}

impl Update {
    /// Checks an update request's body as AWS does.
    pub(crate) fn from_body(mut body: Object) -> Result<Update, Rejection> {
        let state = match body.remove("state") {
            None => return Err(Rejection::new(400, "Missing required node: state")),
            Some(state @ Value::Object(_)) => state,
            Some(_) => return Err(Rejection::new(400, "State node must be an object")),
        };
        let Value::Object(sections) = &state else {
            unreachable!("checked above")
        };
        if sections.keys().any(|k| k != "desired" && k != "reported") {
            return Err(Rejection::new(400, "State contains an invalid node"));
        }
        let desired = patch(sections.get("desired"), "Desired node must be an object")?;
        let reported = patch(sections.get("reported"), "Reported node must be an object")?;
        Ok(Update {
            desired,
            reported,
            state,
        })
    }

    /// Applies the update to `previous` (none, or deleted: a new shadow) at `now_s`.
    pub(crate) fn apply(&self, previous: Option<Shadow>, now_s: u64) -> Result<Applied, Rejection> {
        let version = previous.as_ref().map_or(0, |p| p.version);
        let previous = previous.filter(|p| !p.deleted);
        let mut current = previous.clone().unwrap_or_default();
        current.version = version + 1;
        merge_section(
            &mut current.state.desired,
            &mut current.metadata.desired,
            &self.desired,
            now_s,
        );
        merge_section(
            &mut current.state.reported,
            &mut current.metadata.reported,
            &self.reported,
            now_s,
        );
        let size = serde_json::to_vec(&current.state).map_or(usize::MAX, |v| v.len());
        if size > MAX_STATE_BYTES {
            return Err(Rejection::too_large());
        }
        let mut accepted = Object::new();
        accepted.insert("state".into(), self.state.clone());
        accepted.insert("metadata".into(), stamp(&self.state, now_s));
        accepted.insert("version".into(), json!(current.version));
        let delta = match &self.desired {
            Patch::Merge(_) => current.delta(),
            Patch::Absent | Patch::Clear => None,
        };
        Ok(Applied {
            previous,
            current,
            accepted,
            delta,
        })
    }
}

fn patch(section: Option<&Value>, not_an_object: &str) -> Result<Patch, Rejection> {
    match section {
        None => Ok(Patch::Absent),
        Some(Value::Null) => Ok(Patch::Clear),
        Some(Value::Object(fields)) => {
            check(fields, 1)?;
            Ok(Patch::Merge(fields.clone()))
        }
        Some(_) => Err(Rejection::new(400, not_an_object)),
    }
}

/// Nesting and array rules for the fields of a section at `level` (its own keys are at 1).
fn check(fields: &Object, level: usize) -> Result<(), Rejection> {
    if level > MAX_DEPTH {
        let message = "JSON contains too many levels of nesting; maximum is 6";
        return Err(Rejection::new(400, message));
    }
    fields.values().try_for_each(|v| check_value(v, level))
}

fn check_value(value: &Value, level: usize) -> Result<(), Rejection> {
    match value {
        Value::Object(fields) => check(fields, level + 1),
        Value::Array(items) => items.iter().try_for_each(|item| match item {
            // AWS: "Arrays can't have null values."
            Value::Null => Err(Rejection::new(400, "State contains an invalid node")),
            item => check_value(item, level + 1),
        }),
        _ => Ok(()),
    }
}

fn merge_section(
    section: &mut Option<Object>,
    metadata: &mut Option<Object>,
    patch: &Patch,
    now_s: u64,
) {
    match patch {
        Patch::Absent => {}
        Patch::Clear => {
            *section = None;
            *metadata = None;
        }
        Patch::Merge(fields) => {
            let target = section.get_or_insert_with(Object::new);
            let meta = metadata.get_or_insert_with(Object::new);
            merge(target, meta, fields, now_s);
            // A section left empty is removed (AWS's "empty sections").
            if target.is_empty() {
                *section = None;
                *metadata = None;
            }
        }
    }
}

/// Merges `patch` into `target`: a `null` removes a field, an object merges into an object,
/// anything else (arrays too) replaces; `meta` follows with the time of each leaf written.
/// An object left with no fields is removed.
fn merge(target: &mut Object, meta: &mut Object, patch: &Object, now_s: u64) {
    for (key, value) in patch {
        match value {
            Value::Null => {
                target.remove(key);
                meta.remove(key);
            }
            Value::Object(fields) => {
                let was_object = target.get(key).is_some_and(Value::is_object);
                if !was_object {
                    target.insert(key.clone(), Value::Object(Object::new()));
                    meta.insert(key.clone(), Value::Object(Object::new()));
                }
                let (Some(Value::Object(inner)), Some(Value::Object(inner_meta))) =
                    (target.get_mut(key), meta.get_mut(key))
                else {
                    unreachable!("both made objects above")
                };
                merge(inner, inner_meta, fields, now_s);
                if inner.is_empty() {
                    target.remove(key);
                    meta.remove(key);
                }
            }
            value => {
                target.insert(key.clone(), value.clone());
                meta.insert(key.clone(), leaf(now_s));
            }
        }
    }
}

fn leaf(now_s: u64) -> Value {
    json!({ "timestamp": now_s })
}

/// The metadata of a request's state: each leaf (a `null` too) stamped with `now_s`.
fn stamp(value: &Value, now_s: u64) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), stamp(v, now_s)))
                .collect(),
        ),
        _ => leaf(now_s),
    }
}

impl Shadow {
    /// The fields of `desired` that `reported` lacks or holds otherwise (nested objects
    /// field by field; arrays and other values whole), with their metadata; none if equal.
    pub fn delta(&self) -> Option<(Object, Object)> {
        let desired = self.state.desired.as_ref()?;
        let delta = difference(desired, self.state.reported.as_ref());
        if delta.is_empty() {
            return None;
        }
        let empty = Object::new();
        let metadata = metadata_of(&delta, self.metadata.desired.as_ref().unwrap_or(&empty));
        Some((delta, metadata))
    }

    /// The whole document as `/get/accepted` sends it (without `timestamp` and
    /// `clientToken`): state with its delta, metadata, version.
    pub fn document(&self) -> Object {
        let mut state = sections_json(&self.state);
        if let Some((delta, _)) = self.delta() {
            state.insert("delta".into(), Value::Object(delta));
        }
        let mut out = Object::new();
        out.insert("state".into(), Value::Object(state));
        out.insert(
            "metadata".into(),
            Value::Object(sections_json(&self.metadata)),
        );
        out.insert("version".into(), json!(self.version));
        out
    }

    /// The document as `/update/documents` gives it for `previous` and `current` (no delta).
    pub fn snapshot(&self) -> Value {
        json!({
            "state": sections_json(&self.state),
            "metadata": sections_json(&self.metadata),
            "version": self.version,
        })
    }
}

fn sections_json(sections: &Sections) -> Object {
    let mut out = Object::new();
    if let Some(desired) = &sections.desired {
        out.insert("desired".into(), Value::Object(desired.clone()));
    }
    if let Some(reported) = &sections.reported {
        out.insert("reported".into(), Value::Object(reported.clone()));
    }
    out
}

fn difference(desired: &Object, reported: Option<&Object>) -> Object {
    let mut delta = Object::new();
    for (key, want) in desired {
        match (want, reported.and_then(|r| r.get(key))) {
            (Value::Object(want), Some(Value::Object(have))) => {
                let inner = difference(want, Some(have));
                if !inner.is_empty() {
                    delta.insert(key.clone(), Value::Object(inner));
                }
            }
            (want, Some(have)) if want == have => {}
            (want, _) => {
                delta.insert(key.clone(), want.clone());
            }
        }
    }
    delta
}

/// The metadata of the fields in `delta`, taken from `meta` (the `desired` metadata).
fn metadata_of(delta: &Object, meta: &Object) -> Object {
    delta
        .iter()
        .filter_map(|(key, value)| {
            let m = meta.get(key)?;
            Some(match (value, m) {
                (Value::Object(inner), Value::Object(inner_meta)) => {
                    (key.clone(), Value::Object(metadata_of(inner, inner_meta)))
                }
                _ => (key.clone(), m.clone()),
            })
        })
        .collect()
}
