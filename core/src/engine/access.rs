//! Which client may read or write which keys (the `not authorized` error).

use crate::store::Pattern;

/// What a command does to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// GET, KEYNOTIFY, SCAN.
    Read,
    /// SET, DEL, VDEL.
    Write,
}

/// One rule: clients whose id matches `clients` may read and/or write keys matching `keys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRule {
    /// Which client ids the rule applies to.
    pub clients: Pattern,
    /// Which keys.
    pub keys: Pattern,
    /// Whether they may read them.
    pub read: bool,
    /// Whether they may write them.
    pub write: bool,
}

impl AccessRule {
    /// A rule from two SCAN-dialect patterns (see [`Pattern`]).
    pub fn new(clients: &str, keys: &[u8], read: bool, write: bool) -> Self {
        Self {
            clients: Pattern::new(clients.as_bytes()),
            keys: Pattern::new(keys),
            read,
            write,
        }
    }
}

impl std::str::FromStr for AccessRule {
    type Err = String;

    /// `CLIENTS KEYS PERMS` (patterns in the SCAN dialect, PERMS one of `r`, `w`, `rw`, `-`),
    /// e.g. `sensor-* sensors/* rw`: the form of `--access-rule` and `plugin_opt_access_rule`.
    fn from_str(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [clients, keys, perms] = parts[..] else {
            return Err("expected \"CLIENTS KEYS PERMS\", e.g. 'sensor-* sensors/* rw'".into());
        };
        let (read, write) = match perms {
            "r" => (true, false),
            "w" => (false, true),
            "rw" | "wr" => (true, true),
            "-" => (false, false),
            other => return Err(format!("PERMS is r, w, rw or -, not {other:?}")),
        };
        Ok(AccessRule::new(clients, keys.as_bytes(), read, write))
    }
}

/// The engine's access rules. With no rules every client may do everything (the broker's
/// ACLs are then the only gate). With rules, the first rule whose patterns match the client
/// and the key decides, and a request no rule matches is denied. A request whose client id
/// is unknown is matched as the empty id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessRules {
    rules: Vec<AccessRule>,
}

impl AccessRules {
    /// No rules: everything allowed.
    pub fn allow_all() -> Self {
        Self::default()
    }

    /// Rules checked in order.
    pub fn new(rules: Vec<AccessRule>) -> Self {
        Self { rules }
    }

    /// Whether `client` may access `key` so.
    pub fn allows(&self, client: Option<&str>, key: &[u8], access: Access) -> bool {
        if self.rules.is_empty() {
            return true;
        }
        let client = client.unwrap_or("").as_bytes();
        self.rules
            .iter()
            .find(|rule| rule.clients.matches(client) && rule.keys.matches(key))
            .is_some_and(|rule| match access {
                Access::Read => rule.read,
                Access::Write => rule.write,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_matching_rule_decides() {
        let rules = AccessRules::new(vec![
            AccessRule::new("sensor-*", b"sensors/*", true, true),
            AccessRule::new("*", b"sensors/*", true, false),
        ]);
        assert!(rules.allows(Some("sensor-1"), b"sensors/t", Access::Write));
        assert!(rules.allows(Some("dashboard"), b"sensors/t", Access::Read));
        assert!(!rules.allows(Some("dashboard"), b"sensors/t", Access::Write));
        assert!(!rules.allows(Some("dashboard"), b"other", Access::Read));
        assert!(!rules.allows(None, b"other", Access::Read));
        assert!(AccessRules::allow_all().allows(None, b"x", Access::Write));
    }
}
