//! The state store's error replies, with stable numeric codes.
//!
//! Every `-ERR {text}` the protocol defines (spec §3) is one variant here. Clients match on the
//! exact text, so the text lives in one table ([`ServiceError::text`]) used for both encoding
//! and decoding. Bindings map the numeric [`ServiceError::code`] to their own error classes.

/// An error the state store answers with (`-ERR {text}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{}", self.text())]
pub enum ServiceError {
    /// `__ts` is more than 60 s ahead of the engine's clock.
    TimestampSkew,
    /// The key is fenced and the request carries no `__ft`.
    FencingTokenRequired,
    /// `__ft` is more than 60 s ahead of the engine's clock.
    FencingTokenSkew,
    /// `__ft` is older than the token protecting the key.
    FencingTokenLowerVersion,
    /// The engine's key-count or byte quota is full.
    QuotaExceeded,
    /// The payload is not a well-formed request, or an option or number is bad.
    SyntaxError,
    /// The engine's access rules deny this client this key.
    NotAuthorized,
    /// The verb is not a state store command.
    UnknownCommand,
    /// The item count is wrong for the verb.
    WrongNumberOfArguments,
    /// A SET without `__ts`.
    MissingTimestamp,
    /// `__ts` or `__ft` is not a valid HLC.
    MalformedTimestamp,
    /// The key is empty.
    KeyLengthZero,
    /// KEYNOTIFY: the notification topic of this client and key would be longer than MQTT
    /// allows, so no notification could ever be delivered (mqstore's own).
    NotificationTopicTooLong,
    /// The answer would be larger than the broker's maximum packet size (mqstore's own).
    ResponseTooLarge,
    /// A text this version does not know (a newer engine). Clients treat it as an error.
    Other(String),
}

impl ServiceError {
    /// Every variant with a fixed text, in code order.
    pub const KNOWN: [ServiceError; 14] = [
        ServiceError::TimestampSkew,
        ServiceError::FencingTokenRequired,
        ServiceError::FencingTokenSkew,
        ServiceError::FencingTokenLowerVersion,
        ServiceError::QuotaExceeded,
        ServiceError::SyntaxError,
        ServiceError::NotAuthorized,
        ServiceError::UnknownCommand,
        ServiceError::WrongNumberOfArguments,
        ServiceError::MissingTimestamp,
        ServiceError::MalformedTimestamp,
        ServiceError::KeyLengthZero,
        ServiceError::NotificationTopicTooLong,
        ServiceError::ResponseTooLarge,
    ];

    /// The exact text on the wire (after `-ERR `).
    pub fn text(&self) -> &str {
        match self {
            Self::TimestampSkew => {
                "the request timestamp is too far in the future; ensure that the client and broker system clocks are synchronized"
            }
            Self::FencingTokenRequired => "a fencing token is required for this request",
            Self::FencingTokenSkew => {
                "the request fencing token timestamp is too far in the future; ensure that the client and broker system clocks are synchronized"
            }
            Self::FencingTokenLowerVersion => {
                "the request fencing token is a lower version than the fencing token protecting the resource"
            }
            Self::QuotaExceeded => "the quota has been exceeded",
            Self::SyntaxError => "syntax error",
            Self::NotAuthorized => "not authorized",
            Self::UnknownCommand => "unknown command",
            Self::WrongNumberOfArguments => "wrong number of arguments",
            Self::MissingTimestamp => "missing timestamp",
            Self::MalformedTimestamp => "malformed timestamp",
            Self::KeyLengthZero => "the key length is zero",
            Self::NotificationTopicTooLong => {
                "the notification topic for this client and key would be longer than MQTT allows (65535 bytes); use a shorter key or client id"
            }
            Self::ResponseTooLarge => {
                "the answer is larger than the broker's maximum packet size; raise the broker's limit or use a shorter response topic"
            }
            Self::Other(text) => text,
        }
    }

    /// The error for a text received on the wire; unknown texts are kept as [`Self::Other`].
    pub fn from_text(text: &[u8]) -> Self {
        Self::KNOWN
            .iter()
            .find(|known| known.text().as_bytes() == text)
            .cloned()
            .unwrap_or_else(|| Self::Other(String::from_utf8_lossy(text).into_owned()))
    }

    /// A stable number for this error, the same in every binding (101..=114; 199 for texts
    /// this version does not know).
    pub fn code(&self) -> u16 {
        match self {
            Self::Other(_) => 199,
            known => {
                let index = Self::KNOWN.iter().position(|k| k == known).unwrap_or(98);
                101 + index as u16
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_round_trip_and_codes_are_distinct() {
        let mut codes = std::collections::HashSet::new();
        for known in ServiceError::KNOWN {
            assert_eq!(ServiceError::from_text(known.text().as_bytes()), known);
            assert!(codes.insert(known.code()), "duplicate code for {known:?}");
            assert!((101..=114).contains(&known.code()));
        }
    }

    #[test]
    fn unknown_text_is_kept() {
        let e = ServiceError::from_text(b"the moon is full");
        assert_eq!(e, ServiceError::Other("the moon is full".into()));
        assert_eq!(e.code(), 199);
        assert_eq!(e.to_string(), "the moon is full");
    }
}
