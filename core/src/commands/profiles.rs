//! The profiles a server knows: the built-in ones and those of a profile file (its JSON format,
//! read and checked here).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::CommandError;
use super::profile::{
    AWS_ANSWER, AWS_COMMAND, Code, Correlation, Profile, ProfileError, StatusRule, TopicProfile,
};
use super::template::Template;

/// Profiles every server knows, by name, in the profile file's format.
pub const BUILT_IN_PROFILES: &str = r#"{
  "mqtt5": {"kind": "mqtt5"},
  "dji": {
    "command": "thing/product/{gateway}/services",
    "answer": "thing/product/{gateway}/services_reply",
    "correlation": {"json": "tid"},
    "status": {"json": "data.result", "ok": [0]}
  },
  "iothub": {
    "command": "$iothub/methods/POST/{method}/?$rid={id}",
    "answer": "$iothub/methods/res/{status}/?$rid={id}",
    "correlation": "topic"
  },
  "aws": {"kind": "aws"}
}"#;

/// The profiles a server knows: the built-in ones and those of a profile file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profiles {
    profiles: BTreeMap<String, Profile>,
}

impl Default for Profiles {
    fn default() -> Self {
        Self::built_in()
    }
}

impl Profiles {
    /// `mqtt5`, `dji` and `iothub` (see [`BUILT_IN_PROFILES`]).
    pub fn built_in() -> Self {
        let mut profiles = Self {
            profiles: BTreeMap::new(),
        };
        // Checked by a unit test: the built-in text always parses.
        let _ = profiles.add_json(BUILT_IN_PROFILES);
        profiles
    }

    /// Adds (or replaces) the profiles of a profile file: a JSON object from name to
    /// `{"command": TEMPLATE, "answer": TEMPLATE, "correlation": {"json": "path"} | "topic" |
    /// "none", "status": {"json": "path", "ok": [codes]}}`, or `{"kind": "mqtt5"}`.
    pub fn add_json(&mut self, json: &str) -> Result<(), ProfileError> {
        let specs: BTreeMap<String, ProfileSpec> = serde_json::from_slice(json.as_bytes())
            .map_err(|e| ProfileError {
                profile: "(file)".into(),
                reason: format!("not a JSON object of profiles: {e}"),
            })?;
        for (name, spec) in specs {
            let profile = spec.into_profile().map_err(|reason| ProfileError {
                profile: name.clone(),
                reason,
            })?;
            self.profiles.insert(name, profile);
        }
        Ok(())
    }

    /// The profile of this name, or `UnknownProfile`.
    pub fn get(&self, name: &str) -> Result<&Profile, CommandError> {
        self.profiles.get(name).ok_or_else(|| {
            CommandError::UnknownProfile(
                name.to_owned(),
                self.names().collect::<Vec<_>>().join(", "),
            )
        })
    }

    /// Keeps only the profiles whose name `keep` accepts: a node then subscribes only to the
    /// answer topics of those it keeps (a service that sends `mqtt5` commands alone does not
    /// read, and look up, every DJI or IoT Hub answer on its broker).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.profiles.retain(|name, _| keep(name));
    }

    /// Every profile's name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.profiles.keys().map(String::as_str)
    }

    /// What a node subscribes to for the answers of topic profiles.
    pub fn answer_filters(&self) -> Vec<String> {
        let mut filters: Vec<String> = self
            .profiles
            .values()
            .filter_map(|profile| match profile {
                Profile::Topic(topic) | Profile::Aws(topic) => Some(topic.answer.filter()),
                Profile::Mqtt5 => None,
            })
            .collect();
        filters.sort();
        filters.dedup();
        filters
    }

    /// The topic profile whose answer topic `topic` fits (the first by name).
    pub fn for_answer(&self, topic: &str) -> Option<(&str, &Profile)> {
        self.profiles
            .iter()
            .find_map(|(name, profile)| match profile {
                Profile::Topic(p) | Profile::Aws(p) if p.answer.bind(topic).is_some() => {
                    Some((name.as_str(), profile))
                }
                _ => None,
            })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileSpec {
    #[serde(default)]
    kind: Option<String>,
    command: Option<String>,
    answer: Option<String>,
    correlation: Option<CorrelationSpec>,
    status: Option<StatusSpec>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum CorrelationSpec {
    Field { json: String },
    Word(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusSpec {
    json: Option<String>,
    #[serde(default)]
    ok: Vec<Code>,
    #[serde(default)]
    progress: Vec<Code>,
}

impl ProfileSpec {
    fn into_profile(self) -> Result<Profile, String> {
        match self.kind.as_deref() {
            Some("mqtt5") => return Ok(Profile::Mqtt5),
            Some("aws") => {
                return Ok(Profile::Aws(TopicProfile {
                    command: Template::parse(AWS_COMMAND)?,
                    answer: Template::parse(AWS_ANSWER)?,
                    correlation: Correlation::Topic,
                    status: None,
                }));
            }
            Some("topic") | None => {}
            Some(other) => return Err(format!("unknown kind {other:?}: mqtt5, topic or aws")),
        }
        let command = Template::parse(&self.command.ok_or("no \"command\" topic")?)?;
        let answer = Template::parse(&self.answer.ok_or("no \"answer\" topic")?)?;
        if command.has("status") {
            return Err("{status} belongs in the answer topic".into());
        }
        if let Some(name) = answer
            .names()
            .find(|n| !matches!(*n, "id" | "status") && !command.has(n))
        {
            return Err(format!(
                "the answer topic's {{{name}}} is not in the command topic"
            ));
        }
        let correlation = match self.correlation {
            None if answer.has("id") => Correlation::Topic,
            None => return Err(
                "no \"correlation\": say where the command id travels ({\"json\": \"field\"} or \"topic\"), or \"none\" to match answers by topic only".into(),
            ),
            Some(CorrelationSpec::Field { json }) if !json.is_empty() => Correlation::Json(json),
            Some(CorrelationSpec::Word(word)) if word == "topic" => Correlation::Topic,
            Some(CorrelationSpec::Word(word)) if word == "none" => Correlation::None,
            Some(_) => return Err("correlation: {\"json\": \"field\"}, \"topic\" or \"none\"".into()),
        };
        if (correlation == Correlation::Topic) != answer.has("id") {
            return Err(
                "correlation \"topic\" needs {id} in the answer topic, and only it may have one"
                    .into(),
            );
        }
        let status = match self.status {
            Some(StatusSpec {
                json: Some(field),
                ok,
                progress,
            }) => Some(StatusRule {
                json: Some(field),
                ok: if ok.is_empty() {
                    vec![Code::Number(0)]
                } else {
                    ok
                },
                progress,
            }),
            Some(StatusSpec {
                json: None,
                ok,
                progress,
            }) if answer.has("status") => Some(StatusRule {
                json: None,
                ok,
                progress,
            }),
            None if answer.has("status") => Some(StatusRule {
                json: None,
                ok: Vec::new(),
                progress: Vec::new(),
            }),
            None => None,
            Some(_) => {
                return Err(
                    "status: {\"json\": \"field\"}, or {status} in the answer topic".into(),
                );
            }
        };
        Ok(Profile::Topic(TopicProfile {
            command,
            answer,
            correlation,
            status,
        }))
    }
}
