# The native module (Rust, PyO3). Private: the public API is the package around it. Every call
# taking `aio` waits and returns its result when `aio` is False (the GIL released, Ctrl-C
# honoured), and returns an asyncio future of that result when it is True.
from collections.abc import Awaitable, Mapping
from typing import Any, Literal, Optional, final, overload

__all__ = [
    "INVOKE_TOPIC",
    "Change",
    "Client",
    "DeleteResult",
    "Hlc",
    "Lease",
    "Observation",
    "Scan",
    "SetResult",
    "Versioned",
    "__version__",
    "decode_notification",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "error_examples",
    "notify_topic",
]

__version__: str
INVOKE_TOPIC: str

@final
class Hlc:
    """A hybrid-logical-clock value: `{wall ms}:{counter}:{node}`, ordered by wall clock,
    then counter, then node."""

    def __new__(cls, wall_ms: int, counter: int, node: str) -> Hlc: ...
    @staticmethod
    def parse(text: str) -> Hlc:
        """Parses `wall:counter:node` (any number of digits); `ValueError` when malformed."""
    @property
    def wall_ms(self) -> int: ...
    @property
    def counter(self) -> int: ...
    @property
    def node(self) -> str: ...
    def __lt__(self, other: Hlc, /) -> bool: ...
    def __le__(self, other: Hlc, /) -> bool: ...
    def __gt__(self, other: Hlc, /) -> bool: ...
    def __ge__(self, other: Hlc, /) -> bool: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __ne__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class SetResult:
    """What a SET did."""

    @property
    def applied(self) -> bool:
        """False when NX/NEX did not hold."""
    @property
    def version(self) -> Optional[Hlc]:
        """The key's version: the new one, or the current one when not applied."""

@final
class Versioned:
    """A value and the version of the SET that wrote it."""

    @property
    def value(self) -> bytes: ...
    @property
    def version(self) -> Optional[Hlc]: ...

@final
class DeleteResult:
    """What a DEL or VDEL did."""

    @property
    def deleted(self) -> bool: ...
    @property
    def outcome(self) -> str:
        """ "deleted", "absent" or "value_mismatch" (VDEL)."""
    @property
    def version(self) -> Optional[Hlc]: ...

@final
class Change:
    """A change of an observed key."""

    @property
    def key(self) -> bytes: ...
    @property
    def value(self) -> Optional[bytes]:
        """The new value; None when the key was deleted or expired."""
    @property
    def version(self) -> Optional[Hlc]: ...
    @property
    def synthetic(self) -> bool:
        """Found by reading the key back after a reconnect (the notification was missed)."""

@final
class Client:
    @overload
    @staticmethod
    def connect(
        host: str,
        port: int,
        client_id: Optional[str],
        username: Optional[str],
        password: Optional[str],
        ca_file: Optional[str],
        cert_file: Optional[str],
        key_file: Optional[str],
        timeout_ms: int,
        aio: Literal[False],
    ) -> Client: ...
    @overload
    @staticmethod
    def connect(
        host: str,
        port: int,
        client_id: Optional[str],
        username: Optional[str],
        password: Optional[str],
        ca_file: Optional[str],
        cert_file: Optional[str],
        key_file: Optional[str],
        timeout_ms: int,
        aio: Literal[True],
    ) -> Awaitable[Client]: ...
    @property
    def client_id(self) -> str: ...
    @overload
    def set(
        self,
        key: bytes,
        value: bytes,
        condition: str,
        expires_ms: Optional[int],
        persist: bool,
        fencing_token: Optional[Hlc],
        aio: Literal[False],
    ) -> SetResult: ...
    @overload
    def set(
        self,
        key: bytes,
        value: bytes,
        condition: str,
        expires_ms: Optional[int],
        persist: bool,
        fencing_token: Optional[Hlc],
        aio: Literal[True],
    ) -> Awaitable[SetResult]: ...
    @overload
    def get(self, key: bytes, aio: Literal[False]) -> Optional[Versioned]: ...
    @overload
    def get(self, key: bytes, aio: Literal[True]) -> Awaitable[Optional[Versioned]]: ...
    @overload
    def delete(
        self, key: bytes, fencing_token: Optional[Hlc], aio: Literal[False]
    ) -> DeleteResult: ...
    @overload
    def delete(
        self, key: bytes, fencing_token: Optional[Hlc], aio: Literal[True]
    ) -> Awaitable[DeleteResult]: ...
    @overload
    def vdel(
        self, key: bytes, value: bytes, fencing_token: Optional[Hlc], aio: Literal[False]
    ) -> DeleteResult: ...
    @overload
    def vdel(
        self, key: bytes, value: bytes, fencing_token: Optional[Hlc], aio: Literal[True]
    ) -> Awaitable[DeleteResult]: ...
    def scan(self, pattern: bytes) -> Scan: ...
    @overload
    def observe(self, key: bytes, aio: Literal[False]) -> Observation: ...
    @overload
    def observe(self, key: bytes, aio: Literal[True]) -> Awaitable[Observation]: ...
    @overload
    def unobserve(self, key: bytes, aio: Literal[False]) -> None: ...
    @overload
    def unobserve(self, key: bytes, aio: Literal[True]) -> Awaitable[None]: ...
    @overload
    def lease(
        self, key: bytes, ttl_ms: int, wait_ms: Optional[int], aio: Literal[False]
    ) -> Optional[Lease]: ...
    @overload
    def lease(
        self, key: bytes, ttl_ms: int, wait_ms: Optional[int], aio: Literal[True]
    ) -> Awaitable[Optional[Lease]]: ...
    @overload
    def lead(self, key: bytes, ttl_ms: int, aio: Literal[False]) -> Lease: ...
    @overload
    def lead(self, key: bytes, ttl_ms: int, aio: Literal[True]) -> Awaitable[Lease]: ...
    @overload
    def close(self, aio: Literal[False]) -> None: ...
    @overload
    def close(self, aio: Literal[True]) -> Awaitable[None]: ...

@final
class Scan:
    @overload
    def next_page(self, aio: Literal[False]) -> Optional[list[bytes]]: ...
    @overload
    def next_page(self, aio: Literal[True]) -> Awaitable[Optional[list[bytes]]]: ...

@final
class Observation:
    @property
    def key(self) -> bytes: ...
    @property
    def ended(self) -> bool: ...
    @overload
    def next(self, timeout_ms: Optional[int], aio: Literal[False]) -> Optional[Change]: ...
    @overload
    def next(
        self, timeout_ms: Optional[int], aio: Literal[True]
    ) -> Awaitable[Optional[Change]]: ...

@final
class Lease:
    @property
    def key(self) -> bytes: ...
    @property
    def fencing_token(self) -> Hlc: ...
    @property
    def held(self) -> bool: ...
    @overload
    def release(self, aio: Literal[False]) -> bool: ...
    @overload
    def release(self, aio: Literal[True]) -> Awaitable[bool]: ...

def error_examples() -> list[tuple[int, str]]:
    """One example of every error the client reports, with its code (for tests)."""

def encode_request(command: Mapping[str, object]) -> bytes: ...
def decode_request(data: bytes) -> dict[str, Any]: ...
def encode_response(response: Mapping[str, object]) -> bytes: ...
def decode_response(data: bytes) -> dict[str, Any]: ...
def decode_notification(data: bytes) -> dict[str, Any]: ...
def notify_topic(client_id: str, key: bytes) -> str: ...
