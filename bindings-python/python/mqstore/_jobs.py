"""The device side of AWS IoT Jobs for one thing, blocking and asyncio, and the command
service's watch and fan-out handles. Records are dicts in the AWS shape (camelCase keys)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, Optional, Union

from . import _args, _native
from ._args import Seconds
from ._native import CommandReply
from .errors import MqstoreError
from .wire import CommandRecord, JobExecution, PendingJobs, UpdateAccepted

Record = dict[str, Any]
DeviceResult = tuple[str, Union[CommandReply, MqstoreError]]


def _update_args(
    job_id: str,
    status: Optional[str],
    status_details: Optional[Mapping[str, str]],
    expected_version: Optional[int],
    execution_number: Optional[int],
    step_timeout: Optional[Seconds],
    include_state: bool,
    include_document: bool,
) -> tuple[
    str, Optional[str], dict[str, str], Optional[int], Optional[int], Optional[int], bool, bool
]:
    return (
        _args.text(job_id, "job_id"),
        _args.optional_text(status, "status"),
        _args.string_map(status_details, "status_details"),
        _args.count(expected_version, "expected_version", optional=True),
        _args.count(execution_number, "execution_number", optional=True),
        _args.optional_millis(step_timeout, "step_timeout"),
        bool(include_state),
        bool(include_document),
    )


class Jobs:
    """Acting as one thing on the jobs device API (see :meth:`mqstore.Client.jobs`).
    Iterating gives its notifications (``{"kind": "notify" | "notify-next", ...}``)."""

    def __init__(self, native: _native.Jobs) -> None:
        self._native = native

    @property
    def thing(self) -> str:
        """The thing this handle acts as."""
        return self._native.thing

    def pending(self) -> PendingJobs:
        """The pending list: ``{"inProgressJobs": [...], "queuedJobs": [...]}``."""
        return self._native.pending(False)

    def start_next(
        self,
        *,
        status_details: Optional[Mapping[str, str]] = None,
        step_timeout: Optional[Seconds] = None,
    ) -> Optional[JobExecution]:
        """Starts the next queued execution (or returns the one in progress); ``None`` when
        nothing is pending. ``step_timeout`` (rounded up to whole minutes) times it out
        unless updated."""
        return self._native.start_next(
            _args.string_map(status_details, "status_details"),
            _args.optional_millis(step_timeout, "step_timeout"),
            False,
        )

    def describe(self, job_id: str) -> JobExecution:
        """The latest execution of ``job_id`` on this thing, with its document."""
        return self._native.describe(_args.text(job_id, "job_id"), False)

    def describe_next(self) -> Optional[JobExecution]:
        """The first pending execution with its document; ``None`` when nothing is pending."""
        return self._native.describe_next(False)

    def update(
        self,
        job_id: str,
        *,
        status: Optional[str] = None,
        status_details: Optional[Mapping[str, str]] = None,
        expected_version: Optional[int] = None,
        execution_number: Optional[int] = None,
        step_timeout: Optional[Seconds] = None,
        include_state: bool = False,
        include_document: bool = False,
    ) -> UpdateAccepted:
        """Updates an execution: ``status`` ``"IN_PROGRESS"``, ``"SUCCEEDED"``, ``"FAILED"``
        or ``"REJECTED"``; refused (:class:`~mqstore.errors.JobsError`, ``VersionMismatch``)
        when ``expected_version`` is given and differs."""
        return self._native.update(
            *_update_args(
                job_id,
                status,
                status_details,
                expected_version,
                execution_number,
                step_timeout,
                include_state,
                include_document,
            ),
            False,
        )

    def next_notification(self, timeout: Optional[Seconds] = None) -> Optional[Record]:
        """The next notification, waiting at most ``timeout`` seconds (``None``: until one
        comes); ``None`` when the time ran out or the client closed."""
        return self._native.next_notification(_args.optional_millis(timeout, "timeout"), False)

    def __iter__(self) -> Iterator[Record]:
        while True:
            notification = self._native.next_notification(None, False)
            if notification is None:
                return
            yield notification


class AsyncJobs:
    """The asyncio twin of :class:`Jobs`; ``async for`` gives its notifications."""

    def __init__(self, native: _native.Jobs) -> None:
        self._native = native

    @property
    def thing(self) -> str:
        """The thing this handle acts as."""
        return self._native.thing

    async def pending(self) -> PendingJobs:
        """The pending list: ``{"inProgressJobs": [...], "queuedJobs": [...]}``."""
        return await self._native.pending(True)

    async def start_next(
        self,
        *,
        status_details: Optional[Mapping[str, str]] = None,
        step_timeout: Optional[Seconds] = None,
    ) -> Optional[JobExecution]:
        """Starts the next queued execution (IN_PROGRESS) and returns it with its document;
        ``None`` when nothing is queued."""
        return await self._native.start_next(
            _args.string_map(status_details, "status_details"),
            _args.optional_millis(step_timeout, "step_timeout"),
            True,
        )

    async def describe(self, job_id: str) -> JobExecution:
        """The latest execution of ``job_id`` on this thing, with its document."""
        return await self._native.describe(_args.text(job_id, "job_id"), True)

    async def describe_next(self) -> Optional[JobExecution]:
        """The first pending execution with its document; ``None`` when nothing is pending."""
        return await self._native.describe_next(True)

    async def update(
        self,
        job_id: str,
        *,
        status: Optional[str] = None,
        status_details: Optional[Mapping[str, str]] = None,
        expected_version: Optional[int] = None,
        execution_number: Optional[int] = None,
        step_timeout: Optional[Seconds] = None,
        include_state: bool = False,
        include_document: bool = False,
    ) -> UpdateAccepted:
        """Reports progress or the end of an execution (see :meth:`Jobs.update`)."""
        return await self._native.update(
            *_update_args(
                job_id,
                status,
                status_details,
                expected_version,
                execution_number,
                step_timeout,
                include_state,
                include_document,
            ),
            True,
        )

    async def next_notification(self, timeout: Optional[Seconds] = None) -> Optional[Record]:
        """The next notification, waiting at most ``timeout`` seconds; ``None`` when the time
        ran out or the client closed."""
        return await self._native.next_notification(_args.optional_millis(timeout, "timeout"), True)

    async def __aiter__(self) -> AsyncIterator[Record]:
        while True:
            notification = await self._native.next_notification(None, True)
            if notification is None:
                return
            yield notification


class CommandWatch:
    """Every command's status record as it changes: an iterator of dicts."""

    def __init__(self, native: _native.CommandWatch) -> None:
        self._native = native

    def next_record(self, timeout: Optional[Seconds] = None) -> Optional[CommandRecord]:
        """The next record, waiting at most ``timeout`` seconds; ``None`` when the time ran
        out or the client closed."""
        return self._native.next(_args.optional_millis(timeout, "timeout"), False)

    def __iter__(self) -> Iterator[CommandRecord]:
        while True:
            record = self._native.next(None, False)
            if record is None:
                return
            yield record


class AsyncCommandWatch:
    """The asyncio twin of :class:`CommandWatch`."""

    def __init__(self, native: _native.CommandWatch) -> None:
        self._native = native

    async def next_record(self, timeout: Optional[Seconds] = None) -> Optional[CommandRecord]:
        """The next record, waiting at most ``timeout`` seconds; ``None`` when the time ran out
        or the client closed."""
        return await self._native.next(_args.optional_millis(timeout, "timeout"), True)

    async def __aiter__(self) -> AsyncIterator[CommandRecord]:
        while True:
            record = await self._native.next(None, True)
            if record is None:
                return
            yield record


class KeyspaceWatch:
    """Every key made or deleted from now on (the server's keyspace events): an iterator of
    ``(key, created)``. Events are best effort (QoS 0): scan again after a reconnect."""

    def __init__(self, native: _native.KeyspaceWatch) -> None:
        self._native = native

    def next_event(self, timeout: Optional[Seconds] = None) -> Optional[tuple[bytes, bool]]:
        """The next ``(key, created)``, waiting at most ``timeout`` seconds; ``None`` when the
        time ran out or the client closed."""
        return self._native.next(_args.optional_millis(timeout, "timeout"), False)

    def __iter__(self) -> Iterator[tuple[bytes, bool]]:
        while True:
            event = self._native.next(None, False)
            if event is None:
                return
            yield event


class AsyncKeyspaceWatch:
    """The asyncio twin of :class:`KeyspaceWatch`."""

    def __init__(self, native: _native.KeyspaceWatch) -> None:
        self._native = native

    async def next_event(self, timeout: Optional[Seconds] = None) -> Optional[tuple[bytes, bool]]:
        """The next ``(key, created)``, waiting at most ``timeout`` seconds; ``None`` when the
        time ran out or the client closed."""
        return await self._native.next(_args.optional_millis(timeout, "timeout"), True)

    async def __aiter__(self) -> AsyncIterator[tuple[bytes, bool]]:
        while True:
            event = await self._native.next(None, True)
            if event is None:
                return
            yield event


class FanOut:
    """One command sent to many devices: iterate for ``(topic, CommandReply or the
    MqstoreError)`` as results come; :attr:`summary` counts them."""

    def __init__(self, native: _native.FanOut) -> None:
        self._native = native

    @property
    def summary(self) -> dict[str, int]:
        """``succeeded``, ``failed``, ``rejected``, ``timed_out`` and ``errors`` so far."""
        return self._native.summary

    def __iter__(self) -> Iterator[DeviceResult]:
        while True:
            result = self._native.next(False)
            if result is None:
                return
            yield result


class AsyncFanOut:
    """The asyncio twin of :class:`FanOut`."""

    def __init__(self, native: _native.FanOut) -> None:
        self._native = native

    @property
    def summary(self) -> dict[str, int]:
        """``succeeded``, ``failed``, ``rejected``, ``timed_out`` and ``errors`` so far."""
        return self._native.summary

    async def __aiter__(self) -> AsyncIterator[DeviceResult]:
        while True:
            result = await self._native.next(True)
            if result is None:
                return
            yield result
