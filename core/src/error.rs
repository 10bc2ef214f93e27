//! The state store's error replies, with stable numeric codes.
//!
//! Every `-ERR {text}` the protocol defines (spec §3) is one variant here. Clients match on the
//! exact text, so the text lives in one table ([`ServiceError::text`]) used for both encoding
//! and decoding. Bindings map the numeric [`ServiceError::code`] to their own error classes.

/// An error the state store answers with (`-ERR {text}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{}", self.text())]
#[non_exhaustive]
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
        self.kind().code()
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::TimestampSkew => ErrorKind::TimestampSkew,
            Self::FencingTokenRequired => ErrorKind::FencingTokenRequired,
            Self::FencingTokenSkew => ErrorKind::FencingTokenSkew,
            Self::FencingTokenLowerVersion => ErrorKind::FencingTokenLowerVersion,
            Self::QuotaExceeded => ErrorKind::QuotaExceeded,
            Self::SyntaxError => ErrorKind::RequestSyntax,
            Self::NotAuthorized => ErrorKind::NotAuthorized,
            Self::UnknownCommand => ErrorKind::UnknownCommand,
            Self::WrongNumberOfArguments => ErrorKind::WrongNumberOfArguments,
            Self::MissingTimestamp => ErrorKind::MissingTimestamp,
            Self::MalformedTimestamp => ErrorKind::MalformedTimestamp,
            Self::KeyLengthZero => ErrorKind::KeyLengthZero,
            Self::NotificationTopicTooLong => ErrorKind::NotificationTopicTooLong,
            Self::ResponseTooLarge => ErrorKind::ResponseTooLarge,
            Self::Other(_) => ErrorKind::UnknownService,
        }
    }
}

/// Every kind of error an mqstore client reports, with its stable number and its name: the
/// contract every binding keeps. Python's `mqstore.errors.{name}Error` and JavaScript's
/// `{name}Error` have `code` = [`ErrorKind::code`] (their tests walk [`ErrorKind::ALL`]), and
/// the C header's `mqstore_err` is generated from this enum by cbindgen (the two lines below
/// say how it names the variants: `RequestTimeout` is `MQSTORE_ERR_REQUEST_TIMEOUT`).
/// 101..=199 are the state store's refusals ([`ServiceError`]), 201..=299 the client's own.
///
/// cbindgen:prefix-with-name
/// cbindgen:rename-all=ScreamingSnakeCase
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request's timestamp is too far ahead.
    TimestampSkew = 101,
    /// The key needs a fencing token.
    FencingTokenRequired = 102,
    /// The fencing token's timestamp is too far ahead.
    FencingTokenSkew = 103,
    /// The fencing token is older than the one protecting the key.
    FencingTokenLowerVersion = 104,
    /// A quota is reached.
    QuotaExceeded = 105,
    /// The request is malformed (`syntax error`).
    RequestSyntax = 106,
    /// An access rule forbids it.
    NotAuthorized = 107,
    /// The command is not one the state store knows.
    UnknownCommand = 108,
    /// The command has too many or too few arguments.
    WrongNumberOfArguments = 109,
    /// The request has no timestamp.
    MissingTimestamp = 110,
    /// The request's timestamp cannot be read.
    MalformedTimestamp = 111,
    /// The key is empty.
    KeyLengthZero = 112,
    /// The notification topic would be longer than MQTT allows.
    NotificationTopicTooLong = 113,
    /// The answer is larger than the broker accepts.
    ResponseTooLarge = 114,
    /// An `-ERR` text this version does not know (a newer server).
    UnknownService = 199,
    /// The answer's RPC status was not 200 (503: overloaded).
    Status = 201,
    /// No answer within the call's timeout; a write may still be applied.
    RequestTimeout = 202,
    /// The connection dropped with the call in flight; it may or may not have been applied.
    ConnectionLost = 203,
    /// The answer could not be read.
    MalformedAnswer = 204,
    /// The answer does not fit the request.
    UnexpectedAnswer = 205,
    /// The client's clock could not make a timestamp.
    Clock = 206,
    /// The broker cannot be reached.
    BrokerUnreachable = 207,
    /// The broker refused the connection (CONNACK).
    BrokerRefused = 208,
    /// The broker broke the MQTT 5 protocol.
    BrokerProtocol = 209,
    /// The request is larger than the broker's maximum packet size: not sent.
    RequestTooLarge = 210,
    /// The broker closed the connection (DISCONNECT).
    BrokerDisconnected = 211,
    /// The jobs service refused the call.
    Jobs = 212,
    /// The device answered the command with an error.
    CommandFailed = 213,
    /// The device refused the command.
    CommandRejected = 214,
    /// No answer to the command within its timeout.
    CommandTimeout = 215,
    /// The broker refused the request's publish (PUBACK): not applied.
    PublishRefused = 216,
}

impl ErrorKind {
    /// Every kind, in code order.
    pub const ALL: [ErrorKind; 31] = [
        Self::TimestampSkew,
        Self::FencingTokenRequired,
        Self::FencingTokenSkew,
        Self::FencingTokenLowerVersion,
        Self::QuotaExceeded,
        Self::RequestSyntax,
        Self::NotAuthorized,
        Self::UnknownCommand,
        Self::WrongNumberOfArguments,
        Self::MissingTimestamp,
        Self::MalformedTimestamp,
        Self::KeyLengthZero,
        Self::NotificationTopicTooLong,
        Self::ResponseTooLarge,
        Self::UnknownService,
        Self::Status,
        Self::RequestTimeout,
        Self::ConnectionLost,
        Self::MalformedAnswer,
        Self::UnexpectedAnswer,
        Self::Clock,
        Self::BrokerUnreachable,
        Self::BrokerRefused,
        Self::BrokerProtocol,
        Self::RequestTooLarge,
        Self::BrokerDisconnected,
        Self::Jobs,
        Self::CommandFailed,
        Self::CommandRejected,
        Self::CommandTimeout,
        Self::PublishRefused,
    ];

    /// The stable number.
    pub const fn code(self) -> u16 {
        self as u16
    }

    /// The kind with number `code`, if there is one.
    pub fn from_code(code: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.code() == code)
    }

    /// The name the bindings' error classes carry, without `Error` (`PublishRefused`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::TimestampSkew => "TimestampSkew",
            Self::FencingTokenRequired => "FencingTokenRequired",
            Self::FencingTokenSkew => "FencingTokenSkew",
            Self::FencingTokenLowerVersion => "FencingTokenLowerVersion",
            Self::QuotaExceeded => "QuotaExceeded",
            Self::RequestSyntax => "RequestSyntax",
            Self::NotAuthorized => "NotAuthorized",
            Self::UnknownCommand => "UnknownCommand",
            Self::WrongNumberOfArguments => "WrongNumberOfArguments",
            Self::MissingTimestamp => "MissingTimestamp",
            Self::MalformedTimestamp => "MalformedTimestamp",
            Self::KeyLengthZero => "KeyLengthZero",
            Self::NotificationTopicTooLong => "NotificationTopicTooLong",
            Self::ResponseTooLarge => "ResponseTooLarge",
            Self::UnknownService => "UnknownService",
            Self::Status => "Status",
            Self::RequestTimeout => "RequestTimeout",
            Self::ConnectionLost => "ConnectionLost",
            Self::MalformedAnswer => "MalformedAnswer",
            Self::UnexpectedAnswer => "UnexpectedAnswer",
            Self::Clock => "Clock",
            Self::BrokerUnreachable => "BrokerUnreachable",
            Self::BrokerRefused => "BrokerRefused",
            Self::BrokerProtocol => "BrokerProtocol",
            Self::RequestTooLarge => "RequestTooLarge",
            Self::BrokerDisconnected => "BrokerDisconnected",
            Self::Jobs => "Jobs",
            Self::CommandFailed => "CommandFailed",
            Self::CommandRejected => "CommandRejected",
            Self::CommandTimeout => "CommandTimeout",
            Self::PublishRefused => "PublishRefused",
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
    fn error_kinds_are_in_code_order_with_distinct_names() {
        let codes: Vec<u16> = ErrorKind::ALL.iter().map(|k| k.code()).collect();
        assert!(codes.windows(2).all(|w| w[0] < w[1]), "{codes:?}");
        let names: std::collections::HashSet<_> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), ErrorKind::ALL.len());
        for kind in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_code(kind.code()), Some(kind));
            assert_eq!(format!("{kind:?}"), kind.name());
        }
        assert_eq!(ErrorKind::from_code(200), None);
    }

    #[test]
    fn unknown_text_is_kept() {
        let e = ServiceError::from_text(b"the moon is full");
        assert_eq!(e, ServiceError::Other("the moon is full".into()));
        assert_eq!(e.code(), 199);
        assert_eq!(e.to_string(), "the moon is full");
    }
}
