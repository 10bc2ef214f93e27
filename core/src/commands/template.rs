//! Topic templates: a topic with variables (`thing/product/{gateway}/services`), filled in to
//! publish a command and bound against an answer's topic to read its variables back.

/// A topic with variables: `thing/product/{gateway}/services`. Each level is literal or holds
/// one `{name}` (with literal text around it: `?$rid={id}`). `{id}` is the command id;
/// `{status}` (answers only) the device's status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub(crate) text: String,
    levels: Vec<Level>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Level {
    Literal(String),
    Var {
        prefix: String,
        name: String,
        suffix: String,
    },
}

/// Variables bound by a template.
/// A template's variables and their values, in order.
pub(crate) type Vars = Vec<(String, String)>;

pub(crate) fn var<'a>(vars: &'a Vars, name: &str) -> Option<&'a str> {
    vars.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

impl Template {
    /// Reads a topic template (`{name}` levels); an error says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() || text.contains(['#', '+']) {
            return Err(format!(
                "{text:?} is not a topic template (no wildcards, not empty)"
            ));
        }
        let levels = text
            .split('/')
            .map(|level| {
                let Some(open) = level.find('{') else {
                    return match level.contains('}') {
                        true => Err(format!("{text:?}: '}}' without '{{'")),
                        false => Ok(Level::Literal(level.to_owned())),
                    };
                };
                let close = level[open..]
                    .find('}')
                    .map(|c| open + c)
                    .ok_or_else(|| format!("{text:?}: '{{' without '}}'"))?;
                let name = &level[open + 1..close];
                let suffix = &level[close + 1..];
                if name.is_empty()
                    || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    || suffix.contains(['{', '}'])
                {
                    return Err(format!(
                        "{text:?}: a level holds at most one {{name}} (letters, digits, '_')"
                    ));
                }
                Ok(Level::Var {
                    prefix: level[..open].to_owned(),
                    name: name.to_owned(),
                    suffix: suffix.to_owned(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            text: text.to_owned(),
            levels,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.levels.iter().filter_map(|level| match level {
            Level::Var { name, .. } => Some(name.as_str()),
            Level::Literal(_) => None,
        })
    }

    /// Whether it has a `{name}` level.
    pub fn has(&self, name: &str) -> bool {
        self.names().any(|n| n == name)
    }

    /// The variables `topic` binds, if it fits.
    pub(crate) fn bind(&self, topic: &str) -> Option<Vars> {
        let mut vars = Vars::new();
        let mut parts = topic.split('/');
        for level in &self.levels {
            let part = parts.next()?;
            match level {
                Level::Literal(text) if text == part => {}
                Level::Literal(_) => return None,
                Level::Var {
                    prefix,
                    name,
                    suffix,
                } => {
                    let value = part
                        .strip_prefix(prefix.as_str())?
                        .strip_suffix(suffix.as_str())?;
                    if value.is_empty() || var(&vars, name).is_some_and(|v| v != value) {
                        return None;
                    }
                    vars.push((name.clone(), value.to_owned()));
                }
            }
        }
        parts.next().is_none().then_some(vars)
    }

    /// The topic with `vars` filled in; a level whose variable is not bound becomes `+`.
    pub(crate) fn fill(&self, vars: &Vars) -> String {
        let mut topic = String::with_capacity(self.text.len() + 40);
        for (i, level) in self.levels.iter().enumerate() {
            if i > 0 {
                topic.push('/');
            }
            match level {
                Level::Literal(text) => topic.push_str(text),
                Level::Var {
                    prefix,
                    name,
                    suffix,
                } => match var(vars, name) {
                    Some(value) => {
                        topic.push_str(prefix);
                        topic.push_str(value);
                        topic.push_str(suffix);
                    }
                    None => topic.push('+'),
                },
            }
        }
        topic
    }

    /// The MQTT filter that every topic of this template matches.
    pub fn filter(&self) -> String {
        self.fill(&Vars::new())
    }
}
