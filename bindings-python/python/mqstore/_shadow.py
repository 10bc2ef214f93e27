"""Device shadows (AWS IoT's Device Shadow API), blocking and asyncio: one handle per thing's
classic or named shadow. Documents are dicts in AWS's shape; a refusal raises
:class:`~mqstore.errors.StatusError` with AWS's code (404 no shadow, 409 version conflict,
400 a malformed update, 413 too large)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, Optional

from . import _args, _native
from ._args import Seconds

Document = dict[str, Any]


def _update_args(state: Mapping[str, Any], version: Optional[int]) -> tuple[str, Optional[int]]:
    return (
        _args.json_object(state, "the state"),
        _args.count(version, "version", optional=True),
    )


class Shadow:
    """One device shadow (see :meth:`mqstore.Client.shadow`). Iterating gives its
    notifications: ``{"stream": "delta" | "documents", "body": {...}}``."""

    def __init__(self, native: _native.Shadow, thing: str, name: Optional[str]) -> None:
        self._native = native
        self._thing = thing
        self._name = name

    @property
    def thing(self) -> str:
        """The thing."""
        return self._thing

    @property
    def name(self) -> Optional[str]:
        """The shadow's name; ``None`` for the classic shadow."""
        return self._name

    def get(self) -> Document:
        """The whole document: ``state`` (``desired``, ``reported``, ``delta``),
        ``metadata``, ``version``, ``timestamp``. A shadow that does not exist: 404."""
        return self._native.request("get", None, None, False)

    def update(self, state: Mapping[str, Any], *, version: Optional[int] = None) -> Document:
        """Merges ``state`` (``{"desired": {...}}``, ``{"reported": {...}}``; ``None``
        removes a field or a section) into the shadow, made if it does not exist. With
        ``version``, only if the shadow is at that version (else 409). Returns the update with
        its metadata and the new version."""
        return self._native.request("update", *_update_args(state, version), False)

    def delete(self) -> Document:
        """Deletes the shadow (its version is kept: the next one follows it); returns the
        deleted shadow's version. A shadow that does not exist: 404."""
        return self._native.request("delete", None, None, False)

    def next_notification(self, timeout: Optional[Seconds] = None) -> Optional[Document]:
        """The next delta or documents, waiting at most ``timeout`` seconds (``None``: until
        one comes); ``None`` when the time ran out or the client closed."""
        return self._native.next_notification(_args.optional_millis(timeout, "timeout"), False)

    def __iter__(self) -> Iterator[Document]:
        while True:
            notification = self._native.next_notification(None, False)
            if notification is None:
                return
            yield notification


class AsyncShadow:
    """The asyncio twin of :class:`Shadow`; ``async for`` gives its notifications."""

    def __init__(self, native: _native.Shadow, thing: str, name: Optional[str]) -> None:
        self._native = native
        self._thing = thing
        self._name = name

    @property
    def thing(self) -> str:
        """The thing."""
        return self._thing

    @property
    def name(self) -> Optional[str]:
        """The shadow's name; ``None`` for the classic shadow."""
        return self._name

    async def get(self) -> Document:
        """The whole document (see :meth:`Shadow.get`); a shadow that does not exist: 404."""
        return await self._native.request("get", None, None, True)

    async def update(self, state: Mapping[str, Any], *, version: Optional[int] = None) -> Document:
        """Merges ``state`` into the shadow (see :meth:`Shadow.update`); with ``version``,
        only at that version (else 409)."""
        return await self._native.request("update", *_update_args(state, version), True)

    async def delete(self) -> Document:
        """Deletes the shadow, keeping its version; a shadow that does not exist: 404."""
        return await self._native.request("delete", None, None, True)

    async def next_notification(self, timeout: Optional[Seconds] = None) -> Optional[Document]:
        """The next delta or documents, waiting at most ``timeout`` seconds; ``None`` when the
        time ran out or the client closed."""
        return await self._native.next_notification(_args.optional_millis(timeout, "timeout"), True)

    async def __aiter__(self) -> AsyncIterator[Document]:
        while True:
            notification = await self._native.next_notification(None, True)
            if notification is None:
                return
            yield notification
