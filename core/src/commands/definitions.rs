//! Stored commands (AWS IoT's command resources): a command id with a payload, or a payload
//! template and its parameters, that operators start by id for a target, as AWS's
//! `StartCommandExecution` does. The service keeps them (in memory, or in Redis for many
//! nodes); this module holds what they are and how a start becomes a [`CommandRequest`] for
//! the `aws` profile, without I/O.
//!
//! The service's API for them is JSON on [`DEFINITIONS_TOPIC`] (MQTT 5 request/response):
//! `{"op": "create", "command": {…}}`, `{"op": "get", "commandId": …}`, `{"op": "list"}`,
//! `{"op": "delete", "commandId": …}`. The answer (`__stat` 200) is `{"command": {…}}`,
//! `{"commands": […]}` or `{"deleted": true|false}`; a refusal is `__stat` 400 (a bad request
//! or command), 404 (no such command), 409 (the id is taken) or 503, with `__stMsg`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{CommandError, CommandRequest};

/// Where callers manage stored commands.
pub const DEFINITIONS_TOPIC: &str = "mqstore/commands/v1/definitions";

/// The longest payload template (AWS's limit).
pub const MAX_TEMPLATE: usize = 32_768;

/// How a template names a parameter: `${aws:iot:commandexecution::parameter:NAME}`.
const PARAMETER_PREFIX: &str = "${aws:iot:commandexecution::parameter:";

/// A stored command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[cfg_attr(test, schemars(rename = "CommandDefinition"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Definition {
    /// `[a-zA-Z0-9_-]{1,64}`.
    pub command_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// What the command is for, for people.
    pub description: Option<String>,
    /// A fixed payload (exclusive with `payload_template`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<DefinitionPayload>,
    /// A JSON text with `${aws:iot:commandexecution::parameter:NAME}` where parameters go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_template: Option<String>,
    /// The template's parameters; one without a default must be given at start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mandatory_parameters: Vec<Parameter>,
    /// When it was stored (ms since the epoch; set by the service).
    #[serde(default)]
    pub created_ms: u64,
}

/// A fixed payload: `content` as text, or base64 with `contentType` not JSON or text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[cfg_attr(test, schemars(rename = "CommandPayload"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefinitionPayload {
    /// The payload, as text (base64 for binary content types).
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its content type.
    pub content_type: Option<String>,
}

/// A template parameter and its default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[cfg_attr(test, schemars(rename = "CommandParameter"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Parameter {
    /// The parameter's name, as the template names it.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its value when a start gives none (`{"S": ...}`, `{"I": ...}`, ...).
    pub default_value: Option<Value>,
}

/// A typed parameter value as AWS writes it (`{"S": "…"}`, `{"B": true}`, `{"I": 1}`,
/// `{"L": 1}`, `{"D": 1.5}`, `{"UL": "18446744073709551615"}`, `{"BIN": base64}`), or a plain
/// JSON string, number or boolean: its text in the template.
fn parameter_text(name: &str, value: &Value) -> Result<String, String> {
    let bad = || {
        format!(
            "parameter {name:?}: a string, number or boolean, or one of {{\"S\"}}, {{\"B\"}}, \
             {{\"I\"}}, {{\"L\"}}, {{\"D\"}}, {{\"UL\"}}, {{\"BIN\"}}"
        )
    };
    let value = match value.as_object() {
        Some(typed) if typed.len() == 1 => {
            let (kind, value) = typed.iter().next().ok_or_else(bad)?;
            let fits = match kind.as_str() {
                "S" | "BIN" => value.is_string(),
                "B" => value.is_boolean(),
                "I" | "L" => value.is_i64(),
                "D" => value.is_number(),
                "UL" => value.as_str().is_some_and(|t| t.parse::<u64>().is_ok()) || value.is_u64(),
                _ => false,
            };
            if !fits {
                return Err(bad());
            }
            if kind == "BIN" && STANDARD.decode(value.as_str().unwrap_or_default()).is_err() {
                return Err(format!("parameter {name:?}: BIN is not base64"));
            }
            value
        }
        Some(_) => return Err(bad()),
        None => value,
    };
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Number(_) | Value::Bool(_) => Ok(value.to_string()),
        _ => Err(bad()),
    }
}

fn is_id(text: &str, max: usize) -> bool {
    (1..=max).contains(&text.len())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl Definition {
    /// Checks it as AWS's `CreateCommand` does.
    pub fn check(&self) -> Result<(), String> {
        if !is_id(&self.command_id, 64) {
            return Err(format!(
                "commandId {:?}: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'",
                self.command_id
            ));
        }
        match (&self.payload, &self.payload_template) {
            (Some(_), Some(_)) => {
                return Err("give payload or payloadTemplate, not both".into());
            }
            (None, None) => return Err("give payload or payloadTemplate".into()),
            (Some(payload), None) => {
                if !self.mandatory_parameters.is_empty() {
                    return Err("mandatoryParameters belong to a payloadTemplate".into());
                }
                payload_bytes(payload)?;
            }
            (None, Some(template)) => {
                if template.len() > MAX_TEMPLATE {
                    return Err(format!("payloadTemplate: at most {MAX_TEMPLATE} bytes"));
                }
                for name in template_names(template)? {
                    if !self.mandatory_parameters.iter().any(|p| p.name == name) {
                        return Err(format!(
                            "payloadTemplate uses parameter {name:?}, which mandatoryParameters does not list"
                        ));
                    }
                }
            }
        }
        for parameter in &self.mandatory_parameters {
            if !is_id(&parameter.name, 192) {
                return Err(format!(
                    "parameter name {:?}: 1 to 192 of a-z, A-Z, 0-9, '_' and '-'",
                    parameter.name
                ));
            }
            if let Some(default) = &parameter.default_value {
                parameter_text(&parameter.name, default)?;
            }
        }
        Ok(())
    }

    /// The command for starting this definition on `target` with `parameters`: the `aws`
    /// profile's request topic for the thing (`NAME`, `thing/NAME`, its ARN) or client
    /// (`clients/ID`), and the payload (the template filled in).
    pub fn start(
        &self,
        target: &str,
        parameters: &Map<String, Value>,
        mut request: CommandRequest,
    ) -> Result<CommandRequest, CommandError> {
        let bad = |reason: String| CommandError::Start {
            command: self.command_id.clone(),
            reason,
        };
        let (kind, device) = aws_target(target).map_err(bad)?;
        if let Some(unknown) = parameters
            .keys()
            .find(|name| !self.mandatory_parameters.iter().any(|p| &p.name == *name))
        {
            return Err(bad(format!("no parameter {unknown:?} in this command")));
        }
        let (payload, content_type) = match (&self.payload, &self.payload_template) {
            (Some(payload), _) => (
                payload_bytes(payload).map_err(bad)?,
                payload.content_type.clone(),
            ),
            (None, Some(template)) => {
                let mut filled = template.clone();
                for parameter in &self.mandatory_parameters {
                    let value = parameters
                        .get(&parameter.name)
                        .or(parameter.default_value.as_ref())
                        .ok_or_else(|| {
                            bad(format!(
                                "parameter {:?} has no default: give it",
                                parameter.name
                            ))
                        })?;
                    let text = parameter_text(&parameter.name, value).map_err(bad)?;
                    filled =
                        filled.replace(&format!("{PARAMETER_PREFIX}{}}}", parameter.name), &text);
                }
                (Bytes::from(filled), Some("application/json".to_owned()))
            }
            (None, None) => (Bytes::new(), None),
        };
        request.topic = format!("$aws/commands/{kind}/{device}/executions/{{id}}/request/json");
        request.payload = payload;
        request.content_type = content_type;
        request.profile = "aws".into();
        request.command = Some(self.command_id.clone());
        Ok(request)
    }
}

/// The bytes of a fixed payload: the text itself for JSON and text, else base64.
fn payload_bytes(payload: &DefinitionPayload) -> Result<Bytes, String> {
    let text_like = payload
        .content_type
        .as_deref()
        .is_none_or(|t| t.starts_with("text/") || t.starts_with("application/json"));
    match text_like {
        true => Ok(Bytes::from(payload.content.clone())),
        false => STANDARD
            .decode(&payload.content)
            .map(Bytes::from)
            .map_err(|_| {
                "payload content: base64 for a content type other than JSON or text".into()
            }),
    }
}

/// The parameter names a template uses.
fn template_names(template: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(at) = rest.find(PARAMETER_PREFIX) {
        let after = &rest[at + PARAMETER_PREFIX.len()..];
        let end = after
            .find('}')
            .ok_or("payloadTemplate: a parameter reference without '}'")?;
        names.push(after[..end].to_owned());
        rest = &after[end + 1..];
    }
    Ok(names)
}

/// `(things|clients, name)` of a start's target.
fn aws_target(target: &str) -> Result<(&'static str, &str), String> {
    let path = match target.strip_prefix("arn:") {
        Some(arn) => arn.splitn(5, ':').nth(4).unwrap_or_default(),
        None => target,
    };
    let (kind, name) = if let Some(name) = path.strip_prefix("thing/") {
        ("things", name)
    } else if let Some(name) = path
        .strip_prefix("clients/")
        .or_else(|| path.strip_prefix("client/"))
    {
        ("clients", name)
    } else {
        ("things", path)
    };
    if name.is_empty() || name.contains(['/', '+', '#']) {
        return Err(format!(
            "target {target:?}: a thing name, thing/NAME, clients/CLIENT_ID, or a thing's ARN"
        ));
    }
    Ok((kind, name))
}

/// A request on [`DEFINITIONS_TOPIC`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[cfg_attr(test, schemars(rename = "CommandDefinitionsRequest"))]
#[serde(tag = "op", rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub enum DefinitionsRequest {
    /// Store a command.
    Create {
        /// The command to store.
        command: Definition,
    },
    #[serde(rename_all = "camelCase")]
    /// One stored command.
    Get {
        /// The stored command's id.
        command_id: String,
    },
    /// Every stored command.
    List,
    #[serde(rename_all = "camelCase")]
    /// Delete a stored command.
    Delete {
        /// The stored command's id.
        command_id: String,
    },
}

/// The service's answer to a [`DefinitionsRequest`] (`__stat` 200).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[cfg_attr(test, schemars(rename = "CommandDefinitionsAnswer"))]
#[serde(untagged)]
#[non_exhaustive]
pub enum DefinitionsAnswer {
    /// To `create` and `get`: the stored command.
    Command {
        /// The stored command (with its `createdMs`).
        command: Definition,
    },
    /// To `list`: every stored command, by id.
    Commands {
        /// The stored commands.
        commands: Vec<Definition>,
    },
    /// To `delete`: whether there was one.
    Deleted {
        /// False when no command had the id.
        deleted: bool,
    },
}

/// A stored-commands call as the bindings' methods take it: `op` (`create`, `get`, `list`,
/// `delete`) and its arguments (`{"command": …}`, `{"commandId": …}`, or `null`) as the
/// wire's request, the fields left for the service to check (so that a bad definition is its
/// 400, as for every client).
pub fn definitions_call(op: &str, args: Value) -> Result<Value, String> {
    let mut request = match args {
        Value::Null => Map::new(),
        Value::Object(args) => args,
        _ => return Err(format!("the arguments of {op} must be an object")),
    };
    if !matches!(op, "create" | "get" | "list" | "delete") {
        return Err(format!(
            "{op} is no stored-commands call: create, get, list or delete"
        ));
    }
    request.insert("op".into(), Value::String(op.into()));
    Ok(Value::Object(request))
}

impl DefinitionsRequest {
    /// Reads a request; `Err`: why it is not one (answered with `InvalidRequest`).
    pub fn read(payload: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(payload).map_err(not_a_request)
    }
}

fn not_a_request(e: serde_json::Error) -> String {
    format!(
        "not a stored-commands request ({e}): {{\"op\": \"create\", \"command\": {{…}}}}, \
         {{\"op\": \"get\" | \"delete\", \"commandId\": …}} or {{\"op\": \"list\"}}"
    )
}

impl CommandRequest {
    /// The request to send: itself, or for a stored command (`command` set) what `definition`
    /// (the stored command of that id, if there is one) makes of its target and parameters.
    pub fn start_stored(self, definition: Option<&Definition>) -> Result<Self, CommandError> {
        let Some(id) = &self.command else {
            return Ok(self);
        };
        let definition = definition.ok_or_else(|| CommandError::NoDefinition(id.clone()))?;
        let (target, parameters) = (self.topic.clone(), self.parameters.clone());
        definition.start(&target, &parameters, self)
    }
}

/// The ARN mqstore gives a command execution's parts (AWS's form, like the jobs'):
/// `arn:aws:iot:mqstore:000000000000:{kind}/{name}`.
pub fn arn(kind: &str, name: &str) -> String {
    crate::jobs::arn(kind, name)
}
