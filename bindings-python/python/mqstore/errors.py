"""mqstore's exceptions: one class per stable error code.

Every exception is a :class:`MqstoreError` with a ``code``: the number the Rust core gives the
error (``ClientError::code``), the same in every binding. 101-199 are the state store's refusals
(:class:`ServiceError`, one subclass per ``-ERR`` text), 2xx the client's own. Code 0 is the
binding's (a client used after ``fork()``).
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "BrokerDisconnectedError",
    "BrokerProtocolError",
    "BrokerRefusedError",
    "BrokerUnreachableError",
    "ClientForkedError",
    "ClockError",
    "CommandFailedError",
    "CommandRejectedError",
    "CommandTimeoutError",
    "ConnectionLostError",
    "FencingTokenLowerVersionError",
    "FencingTokenRequiredError",
    "FencingTokenSkewError",
    "JobsError",
    "KeyLengthZeroError",
    "MalformedAnswerError",
    "MalformedTimestampError",
    "MissingTimestampError",
    "MqstoreError",
    "NotAuthorizedError",
    "NotificationTopicTooLongError",
    "PublishRefusedError",
    "QuotaExceededError",
    "RequestSyntaxError",
    "RequestTimeoutError",
    "RequestTooLargeError",
    "ResponseTooLargeError",
    "ServiceError",
    "StatusError",
    "TimestampSkewError",
    "UnexpectedAnswerError",
    "UnknownCommandError",
    "UnknownServiceError",
    "WrongNumberOfArgumentsError",
]


class MqstoreError(Exception):
    """Base class of every mqstore error. ``code`` is the stable number of the error."""

    code: int = 0

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ServiceError(MqstoreError):
    """The state store refused the request (it answered ``-ERR text``); nothing changed.

    ``text`` is the exact text the state store answered with.
    """

    code = 199

    def __init__(self, message: str, text: Optional[str] = None) -> None:
        super().__init__(message)
        self.text: str = text if text is not None else message


class TimestampSkewError(ServiceError):
    """The client's clock is more than 60 s ahead of the state store's: sync the clocks."""

    code = 101


class FencingTokenRequiredError(ServiceError):
    """The key is guarded by a lease: pass the lease's ``fencing_token``."""

    code = 102


class FencingTokenSkewError(ServiceError):
    """The fencing token is more than 60 s ahead of the state store's clock."""

    code = 103


class FencingTokenLowerVersionError(ServiceError):
    """The fencing token is older than the one guarding the key: the lease was lost."""

    code = 104


class QuotaExceededError(ServiceError):
    """The state store's key, byte or registration quota is full."""

    code = 105


class RequestSyntaxError(ServiceError):
    """The state store could not read the request (``syntax error``)."""

    code = 106


class NotAuthorizedError(ServiceError):
    """The state store's access rules deny this client this key."""

    code = 107


class UnknownCommandError(ServiceError):
    """The request's verb is not a state store command."""

    code = 108


class WrongNumberOfArgumentsError(ServiceError):
    """The request has the wrong number of items for its verb."""

    code = 109


class MissingTimestampError(ServiceError):
    """A SET without the client's timestamp (``__ts``)."""

    code = 110


class MalformedTimestampError(ServiceError):
    """The timestamp or fencing token is not a valid HLC."""

    code = 111


class KeyLengthZeroError(ServiceError):
    """The key is empty."""

    code = 112


class NotificationTopicTooLongError(ServiceError):
    """The notification topic for this client and key would be too long: use a shorter key."""

    code = 113


class ResponseTooLargeError(ServiceError):
    """The answer would be larger than the broker's maximum packet size."""

    code = 114


class UnknownServiceError(ServiceError):
    """A refusal this version does not know (a newer server)."""

    code = 199


class StatusError(MqstoreError):
    """The service (state store, jobs, commands or shadows) answered with an RPC status other
    than 200 (404: no such command, or no such shadow; 409: a stored command's id is taken, or
    a shadow's version conflict; 400 or 413: a shadow update refused; 503: overloaded, or its
    store is unreachable). ``status`` is that status."""

    code = 201

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.status = status


class RequestTimeoutError(MqstoreError, TimeoutError):
    """No answer within the timeout; a write may still be applied later."""

    code = 202


class ConnectionLostError(MqstoreError, ConnectionError):
    """The connection to the broker was lost while the call was in flight; it may or may not
    have been applied."""

    code = 203


class MalformedAnswerError(MqstoreError):
    """The state store's answer could not be read."""

    code = 204


class UnexpectedAnswerError(MqstoreError):
    """The answer does not fit the request."""

    code = 205


class ClockError(MqstoreError):
    """The client's clock could not produce a timestamp."""

    code = 206


class BrokerUnreachableError(MqstoreError, ConnectionError):
    """The broker could not be reached (nothing listens there, TLS failed, no CONNACK)."""

    code = 207


class BrokerRefusedError(MqstoreError, ConnectionError):
    """The broker refused the connection (bad user name or password, not authorized)."""

    code = 208


class BrokerProtocolError(ConnectionLostError):
    """The broker broke the MQTT 5 protocol and the connection was dropped."""

    code = 209


class RequestTooLargeError(MqstoreError):
    """The request is larger than the broker's maximum packet size: not sent."""

    code = 210


class BrokerDisconnectedError(ConnectionLostError):
    """The broker closed the connection with a DISCONNECT (taken over, shutting down, ...)."""

    code = 211


class JobsError(MqstoreError):
    """The jobs service refused the call; ``jobs_code`` is its code (``ResourceNotFound``, ...)."""

    code = 212

    def __init__(self, message: str, jobs_code: Optional[str] = None) -> None:
        super().__init__(message)
        self.jobs_code = jobs_code


class _CommandError(MqstoreError):
    def __init__(self, message: str, command_id: Optional[str] = None) -> None:
        super().__init__(message)
        self.command_id = command_id


class CommandFailedError(_CommandError):
    """The device answered the command with an error of its own."""

    code = 213


class CommandRejectedError(_CommandError):
    """The device refused the command as malformed or unsupported: it did not run."""

    code = 214


class CommandTimeoutError(_CommandError, TimeoutError):
    """No answer to the command within its timeout; it may still have run."""

    code = 215


class PublishRefusedError(MqstoreError):
    """The broker refused the request's publish (a PUBACK reason code of 0x80 or more: packet
    too large, not authorized, quota exceeded): it was not applied. ``reason_code`` is the
    PUBACK's."""

    code = 216

    def __init__(self, message: str, reason_code: Optional[int] = None) -> None:
        super().__init__(message)
        self.reason_code = reason_code


class ClientForkedError(MqstoreError, RuntimeError):
    """A client used in a child process that inherited it through ``fork()``: connect a new
    client in the child."""

    code = 0


_CLASSES: list[type[MqstoreError]] = [
    TimestampSkewError,
    FencingTokenRequiredError,
    FencingTokenSkewError,
    FencingTokenLowerVersionError,
    QuotaExceededError,
    RequestSyntaxError,
    NotAuthorizedError,
    UnknownCommandError,
    WrongNumberOfArgumentsError,
    MissingTimestampError,
    MalformedTimestampError,
    KeyLengthZeroError,
    NotificationTopicTooLongError,
    ResponseTooLargeError,
    UnknownServiceError,
    StatusError,
    RequestTimeoutError,
    ConnectionLostError,
    MalformedAnswerError,
    UnexpectedAnswerError,
    ClockError,
    BrokerUnreachableError,
    BrokerRefusedError,
    BrokerProtocolError,
    RequestTooLargeError,
    BrokerDisconnectedError,
    JobsError,
    CommandFailedError,
    CommandRejectedError,
    CommandTimeoutError,
    PublishRefusedError,
    ClientForkedError,
]
_BY_CODE: dict[int, type[MqstoreError]] = {cls.code: cls for cls in _CLASSES}


def _error_for(code: int, message: str, detail: Optional[str]) -> MqstoreError:
    """The exception for an error of the native module (called from Rust)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        # A code this version of the package does not know (a newer native module).
        error = MqstoreError(message)
        error.code = code
        return error
    if issubclass(cls, ServiceError):
        return cls(message, detail)
    if issubclass(cls, JobsError):
        return cls(message, detail)
    if issubclass(cls, _CommandError):
        return cls(message, detail)
    if issubclass(cls, (PublishRefusedError, StatusError)):
        return cls(message, int(detail) if detail is not None else None)
    return cls(message)
