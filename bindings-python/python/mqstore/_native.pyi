# The native module (Rust, PyO3). Private: the public API is the package around it. Every call
# taking `aio` waits and returns its result when `aio` is False (the GIL released, Ctrl-C
# honoured), and returns an asyncio future of that result when it is True.
from collections.abc import Awaitable, Mapping
from typing import Any, Literal, Optional, final, overload

from .wire import (
    CommandDefinitionsAnswer0,
    CommandDefinitionsAnswer1,
    CommandDefinitionsAnswer2,
    CommandRecord,
    ExecutionListing,
    JobDescription,
    JobExecution,
    JobListing,
    PendingJobs,
    UpdateAccepted,
)

__all__ = [
    "INVOKE_TOPIC",
    "Change",
    "Client",
    "ClientCore",
    "CommandReply",
    "CommandWatch",
    "DeleteResult",
    "FanOut",
    "Hlc",
    "Jobs",
    "KeyspaceWatch",
    "Lease",
    "Observation",
    "Scan",
    "SetResult",
    "Shadow",
    "Versioned",
    "__version__",
    "_panicking_call",
    "_shutdown",
    "decode_notification",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "error_examples",
    "error_kinds",
    "notify_topic",
    "operator_call",
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
    @property
    def gap(self) -> bool:
        """Changes between the last one reported and this one were not reported (overtaken,
        or lost with a server's connection): the changes seen are not the key's whole
        history, and this one is its state now. True on every synthetic change too."""

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
        tls: bool,
        ca_file: Optional[str],
        cert_file: Optional[str],
        key_file: Optional[str],
        key_password: Optional[str],
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
        tls: bool,
        ca_file: Optional[str],
        cert_file: Optional[str],
        key_file: Optional[str],
        key_password: Optional[str],
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
    @overload
    def jobs_operate(self, request: str, aio: Literal[False]) -> Any: ...
    @overload
    def jobs_operate(self, request: str, aio: Literal[True]) -> Awaitable[Any]: ...
    @overload
    def delete_job_execution(
        self, job_id: str, thing: str, force: bool, aio: Literal[False]
    ) -> None: ...
    @overload
    def delete_job_execution(
        self, job_id: str, thing: str, force: bool, aio: Literal[True]
    ) -> Awaitable[None]: ...
    @overload
    def describe_job(self, job_id: str, aio: Literal[False]) -> JobDescription: ...
    @overload
    def describe_job(self, job_id: str, aio: Literal[True]) -> Awaitable[JobDescription]: ...
    @overload
    def describe_job_execution(
        self, job_id: str, thing: str, aio: Literal[False]
    ) -> JobExecution: ...
    @overload
    def describe_job_execution(
        self, job_id: str, thing: str, aio: Literal[True]
    ) -> Awaitable[JobExecution]: ...
    @overload
    def list_jobs(self, aio: Literal[False]) -> list[JobListing]: ...
    @overload
    def list_jobs(self, aio: Literal[True]) -> Awaitable[list[JobListing]]: ...
    @overload
    def list_job_executions(
        self,
        thing: Optional[str],
        job_id: Optional[str],
        status_: Optional[str],
        aio: Literal[False],
    ) -> list[ExecutionListing]: ...
    @overload
    def list_job_executions(
        self,
        thing: Optional[str],
        job_id: Optional[str],
        status_: Optional[str],
        aio: Literal[True],
    ) -> Awaitable[list[ExecutionListing]]: ...
    @overload
    def jobs(self, thing: str, aio: Literal[False]) -> Jobs: ...
    @overload
    def jobs(self, thing: str, aio: Literal[True]) -> Awaitable[Jobs]: ...
    @overload
    def shadow(self, thing: str, name: Optional[str], aio: Literal[False]) -> Shadow: ...
    @overload
    def shadow(self, thing: str, name: Optional[str], aio: Literal[True]) -> Awaitable[Shadow]: ...
    @overload
    def command(
        self,
        topic: str,
        payload: bytes,
        content_type: Optional[str],
        profile: str,
        timeout_ms: int,
        mode: str,
        headers: list[tuple[str, str]],
        aio: Literal[False],
    ) -> CommandReply: ...
    @overload
    def command(
        self,
        topic: str,
        payload: bytes,
        content_type: Optional[str],
        profile: str,
        timeout_ms: int,
        mode: str,
        headers: list[tuple[str, str]],
        aio: Literal[True],
    ) -> Awaitable[CommandReply]: ...
    @overload
    def start_command(
        self,
        command_id: str,
        target: str,
        parameters: str,
        timeout_ms: int,
        mode: str,
        aio: Literal[False],
    ) -> CommandReply: ...
    @overload
    def start_command(
        self,
        command_id: str,
        target: str,
        parameters: str,
        timeout_ms: int,
        mode: str,
        aio: Literal[True],
    ) -> Awaitable[CommandReply]: ...
    @overload
    def command_definitions(
        self, op: Literal["create", "get"], args: str, aio: Literal[False]
    ) -> CommandDefinitionsAnswer0: ...
    @overload
    def command_definitions(
        self, op: Literal["create", "get"], args: str, aio: Literal[True]
    ) -> Awaitable[CommandDefinitionsAnswer0]: ...
    @overload
    def command_definitions(
        self, op: Literal["list"], args: str, aio: Literal[False]
    ) -> CommandDefinitionsAnswer1: ...
    @overload
    def command_definitions(
        self, op: Literal["list"], args: str, aio: Literal[True]
    ) -> Awaitable[CommandDefinitionsAnswer1]: ...
    @overload
    def command_definitions(
        self, op: Literal["delete"], args: str, aio: Literal[False]
    ) -> CommandDefinitionsAnswer2: ...
    @overload
    def command_definitions(
        self, op: Literal["delete"], args: str, aio: Literal[True]
    ) -> Awaitable[CommandDefinitionsAnswer2]: ...
    @overload
    def command_status(self, id: str, aio: Literal[False]) -> CommandRecord: ...
    @overload
    def command_status(self, id: str, aio: Literal[True]) -> Awaitable[CommandRecord]: ...
    @overload
    def watch_commands(self, aio: Literal[False]) -> CommandWatch: ...
    @overload
    def watch_commands(self, aio: Literal[True]) -> Awaitable[CommandWatch]: ...
    @overload
    def watch_keyspace(self, aio: Literal[False]) -> KeyspaceWatch: ...
    @overload
    def watch_keyspace(self, aio: Literal[True]) -> Awaitable[KeyspaceWatch]: ...
    def command_many(
        self,
        topics: list[str],
        payload: bytes,
        content_type: Optional[str],
        profile: str,
        timeout_ms: int,
        mode: str,
        headers: list[tuple[str, str]],
    ) -> FanOut: ...

@final
class ClientCore:
    """The client as a state machine with no I/O, for a program with its own MQTT client.

    Subscribe (QoS 1) to ``subscriptions()`` (again after every reconnect), connect with a Will
    on ``presence_topic`` (payload ``b"gone"``), then: every call returns its call id and
    queues publishes (``take_publishes()``: publish each at QoS 1); give every received
    message to ``handle``, call ``expire`` at ``next_deadline()``, ``connection_lost()`` when
    the connection drops and ``resume()`` once subscribed again; ``take_events()`` gives what
    happened. ``now_ms`` defaults to the system clock.
    """

    def __new__(
        cls, client_id: str, *, seed: Optional[int] = None, timeout_ms: int = 0
    ) -> ClientCore: ...
    def subscriptions(self) -> list[str]: ...
    @property
    def presence_topic(self) -> str: ...
    def act_as(self, thing: str) -> list[str]: ...
    def leave(self, thing: str) -> list[str]: ...
    def use_shadow(self, thing: str, name: Optional[str] = None) -> list[str]: ...
    def leave_shadow(self, thing: str, name: Optional[str] = None) -> list[str]: ...
    def shadow(
        self,
        thing: str,
        name: Optional[str],
        op: str,
        request: Optional[Mapping[str, Any]] = None,
        *,
        now_ms: Optional[int] = None,
    ) -> int: ...
    def watch_commands(self) -> Optional[str]: ...
    def unwatch_commands(self) -> Optional[str]: ...
    def watch_keyspace(self) -> Optional[str]: ...
    def unwatch_keyspace(self) -> Optional[str]: ...
    def set_max_packet_size(self, max: int) -> None: ...
    def call(
        self,
        request: Mapping[str, object],
        *,
        timeout_ms: Optional[int] = None,
        persist: bool = False,
        fencing_token: Optional[Hlc] = None,
        now_ms: Optional[int] = None,
    ) -> int: ...
    def observe(self, key: bytes, *, now_ms: Optional[int] = None) -> int: ...
    def unobserve(self, key: bytes, *, now_ms: Optional[int] = None) -> int: ...
    def lease(
        self, key: bytes, ttl_ms: int, wait_ms: Optional[int], *, now_ms: Optional[int] = None
    ) -> int: ...
    def release_lease(self, lease: int, *, now_ms: Optional[int] = None) -> int: ...
    def jobs_operate(self, request: Mapping[str, Any], *, now_ms: Optional[int] = None) -> int: ...
    def jobs_device(
        self,
        thing: str,
        api: str,
        request: Optional[Mapping[str, Any]] = None,
        *,
        now_ms: Optional[int] = None,
    ) -> int: ...
    def command(
        self,
        topic: str,
        payload: bytes,
        *,
        profile: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        mode: str = "await",
        content_type: Optional[str] = None,
        headers: Optional[list[tuple[str, str]]] = None,
        now_ms: Optional[int] = None,
    ) -> int: ...
    def command_status(self, id: str, *, now_ms: Optional[int] = None) -> int: ...
    def handle(self, message: Mapping[str, Any], *, now_ms: Optional[int] = None) -> None: ...
    def expire(self, *, now_ms: Optional[int] = None) -> None: ...
    def next_deadline(self) -> Optional[int]: ...
    def connection_lost(self) -> None: ...
    def resume(self, *, now_ms: Optional[int] = None) -> None: ...
    def publish_refused(self, call: int, code: int) -> None: ...
    def take_publishes(self) -> list[dict[str, Any]]: ...
    def take_events(self) -> list[dict[str, Any]]: ...

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

@final
class Jobs:
    @property
    def thing(self) -> str: ...
    @overload
    def pending(self, aio: Literal[False]) -> PendingJobs: ...
    @overload
    def pending(self, aio: Literal[True]) -> Awaitable[PendingJobs]: ...
    @overload
    def start_next(
        self, status_details: dict[str, str], step_timeout_ms: Optional[int], aio: Literal[False]
    ) -> Optional[JobExecution]: ...
    @overload
    def start_next(
        self, status_details: dict[str, str], step_timeout_ms: Optional[int], aio: Literal[True]
    ) -> Awaitable[Optional[JobExecution]]: ...
    @overload
    def describe(self, job_id: str, aio: Literal[False]) -> JobExecution: ...
    @overload
    def describe(self, job_id: str, aio: Literal[True]) -> Awaitable[JobExecution]: ...
    @overload
    def describe_next(self, aio: Literal[False]) -> Optional[JobExecution]: ...
    @overload
    def describe_next(self, aio: Literal[True]) -> Awaitable[Optional[JobExecution]]: ...
    @overload
    def update(
        self,
        job_id: str,
        status_: Optional[str],
        status_details: dict[str, str],
        expected_version: Optional[int],
        execution_number: Optional[int],
        step_timeout_ms: Optional[int],
        include_state: bool,
        include_document: bool,
        aio: Literal[False],
    ) -> UpdateAccepted: ...
    @overload
    def update(
        self,
        job_id: str,
        status_: Optional[str],
        status_details: dict[str, str],
        expected_version: Optional[int],
        execution_number: Optional[int],
        step_timeout_ms: Optional[int],
        include_state: bool,
        include_document: bool,
        aio: Literal[True],
    ) -> Awaitable[UpdateAccepted]: ...
    @overload
    def next_notification(
        self, timeout_ms: Optional[int], aio: Literal[False]
    ) -> Optional[dict[str, Any]]: ...
    @overload
    def next_notification(
        self, timeout_ms: Optional[int], aio: Literal[True]
    ) -> Awaitable[Optional[dict[str, Any]]]: ...

@final
class Shadow:
    @overload
    def request(
        self, op: str, state: Optional[str], version: Optional[int], aio: Literal[False]
    ) -> dict[str, Any]: ...
    @overload
    def request(
        self, op: str, state: Optional[str], version: Optional[int], aio: Literal[True]
    ) -> Awaitable[dict[str, Any]]: ...
    @overload
    def next_notification(
        self, timeout_ms: Optional[int], aio: Literal[False]
    ) -> Optional[dict[str, Any]]: ...
    @overload
    def next_notification(
        self, timeout_ms: Optional[int], aio: Literal[True]
    ) -> Awaitable[Optional[dict[str, Any]]]: ...

@final
class CommandReply:
    """What a command call returned."""

    @property
    def id(self) -> str: ...
    @property
    def status(self) -> str:
        """SUCCEEDED (awaited), DELIVERED (one-way) or SENT (detached)."""
    @property
    def payload(self) -> bytes:
        """The device's answer (empty without one)."""
    @property
    def content_type(self) -> Optional[str]: ...
    @property
    def device_status(self) -> Optional[int]:
        """The device's status code, when its profile reads one."""

@final
class CommandWatch:
    @overload
    def next(self, timeout_ms: Optional[int], aio: Literal[False]) -> Optional[CommandRecord]: ...
    @overload
    def next(
        self, timeout_ms: Optional[int], aio: Literal[True]
    ) -> Awaitable[Optional[CommandRecord]]: ...

@final
class KeyspaceWatch:
    @overload
    def next(
        self, timeout_ms: Optional[int], aio: Literal[False]
    ) -> Optional[tuple[bytes, bool]]: ...
    @overload
    def next(
        self, timeout_ms: Optional[int], aio: Literal[True]
    ) -> Awaitable[Optional[tuple[bytes, bool]]]: ...

@final
class FanOut:
    @property
    def summary(self) -> dict[str, int]: ...
    @overload
    def next(self, aio: Literal[False]) -> Optional[tuple[str, Any]]: ...
    @overload
    def next(self, aio: Literal[True]) -> Awaitable[Optional[tuple[str, Any]]]: ...

def operator_call(op: str, args: str) -> str:
    """The operator call ``op`` with ``args`` (JSON text: AWS's request fields and the
    shorthands every client shares) as the request's JSON text; ``ValueError`` names an
    argument that does not fit."""

# The test hooks: error_examples, error_kinds and _panicking_call are in builds from source
# (the crate's default `test-hooks` feature), not in the release wheels.

def error_examples() -> list[tuple[int, str]]:
    """One example of every error the client reports, with its code (for tests)."""

def error_kinds() -> list[tuple[int, str]]:
    """Every kind of error, as core defines it: its stable code and its class's name without
    ``Error`` (for tests)."""

@overload
def _panicking_call(aio: Literal[False]) -> None:
    """Panics inside a call (for the tests): raises RuntimeError."""

@overload
def _panicking_call(aio: Literal[True]) -> Awaitable[None]: ...
def _shutdown() -> None:
    """At interpreter exit: the native threads stop calling into Python."""

def encode_request(command: Mapping[str, object]) -> bytes: ...
def decode_request(data: bytes) -> dict[str, Any]: ...
def encode_response(response: Mapping[str, object]) -> bytes: ...
def decode_response(data: bytes) -> dict[str, Any]: ...
def decode_notification(data: bytes) -> dict[str, Any]: ...
def notify_topic(client_id: str, key: bytes) -> str: ...
