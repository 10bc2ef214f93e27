"""The blocking client. Every call releases the GIL while it waits and can be interrupted with
Ctrl-C (``KeyboardInterrupt``; a request already sent may still be applied)."""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import Optional

from . import _args, _native
from ._args import BytesLike, FencingToken, PathLike, Seconds
from ._native import Change, DeleteResult, Hlc, SetResult, Versioned


class Client:
    """A connection to an MQTT 5 broker with ``mqstore serve`` beside it.

    Connects at once (raising :class:`~mqstore.errors.BrokerUnreachableError` or
    :class:`~mqstore.errors.BrokerRefusedError` when it cannot). Use it as a context manager, or
    call :meth:`close`. One client may be shared by many threads; a child made by ``fork()``
    must connect its own.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 1883,
        *,
        client_id: Optional[str] = None,
        username: Optional[str] = None,
        password: Optional[str] = None,
        tls: bool = False,
        ca_file: Optional[PathLike] = None,
        cert_file: Optional[PathLike] = None,
        key_file: Optional[PathLike] = None,
        timeout: Seconds = 10.0,
    ) -> None:
        args = _args.ConnectArgs(
            host, port, client_id, username, password, tls, ca_file, cert_file, key_file, timeout
        )
        self._native: _native.Client = _native.Client.connect(
            args.host,
            args.port,
            args.client_id,
            args.username,
            args.password,
            args.ca_file,
            args.cert_file,
            args.key_file,
            args.timeout_ms,
            False,
        )

    @property
    def client_id(self) -> str:
        """The MQTT client id (generated when none was given)."""
        return self._native.client_id

    def set(
        self,
        key: BytesLike,
        value: BytesLike,
        *,
        nx: bool = False,
        nex: bool = False,
        expires: Optional[Seconds] = None,
        persist: bool = False,
        fencing_token: Optional[FencingToken] = None,
    ) -> SetResult:
        """Sets ``key`` to ``value``.

        ``nx``: only if the key does not exist; ``nex``: only if it does not exist or already
        holds ``value`` (a lease's renewal). ``expires``: the key expires this many seconds (or
        this ``timedelta``) later. ``persist``: ask that the key be kept durably.
        ``fencing_token``: the token of the lease guarding the key. ``.applied`` is false when
        ``nx``/``nex`` did not hold.
        """
        return self._native.set(
            _args.key(key),
            _args.to_bytes(value, "value"),
            _args.condition(nx, nex),
            _args.optional_millis(expires, "expires"),
            bool(persist),
            _args.fencing_token(fencing_token),
            False,
        )

    def get(self, key: BytesLike) -> Optional[Versioned]:
        """The value and version of ``key``, or ``None`` when it does not exist."""
        return self._native.get(_args.key(key), False)

    def delete(
        self, key: BytesLike, *, fencing_token: Optional[FencingToken] = None
    ) -> DeleteResult:
        """Deletes ``key``; ``.deleted`` is false when it did not exist."""
        return self._native.delete(_args.key(key), _args.fencing_token(fencing_token), False)

    def vdel(
        self, key: BytesLike, value: BytesLike, *, fencing_token: Optional[FencingToken] = None
    ) -> DeleteResult:
        """Deletes ``key`` only if it holds ``value`` (``.outcome`` is ``"value_mismatch"``
        when it holds another)."""
        return self._native.vdel(
            _args.key(key),
            _args.to_bytes(value, "value"),
            _args.fencing_token(fencing_token),
            False,
        )

    def scan(self, pattern: BytesLike = "*") -> Iterator[bytes]:
        """The keys matching ``pattern`` (``*``, ``?`` and ``[...]``), fetched page by page
        as the iterator is consumed."""
        pages = self._native.scan(_args.key(pattern, "pattern"))

        def keys() -> Iterator[bytes]:
            while True:
                page = pages.next_page(False)
                if page is None:
                    return
                yield from page

        return keys()

    def observe(self, key: BytesLike) -> Observation:
        """Observes ``key``: every change (SET, DEL, VDEL, expiry) from now on, across
        reconnects. Iterate over the result; leaving its ``with`` block stops observing."""
        native = self._native.observe(_args.key(key), False)
        return Observation(self, native)

    def unobserve(self, key: BytesLike) -> None:
        """Stops observing ``key``: every observation of it by this client ends."""
        self._native.unobserve(_args.key(key), False)

    def lease(
        self, key: BytesLike, ttl: Seconds, *, wait: Optional[Seconds] = None
    ) -> Optional[Lease]:
        """Takes the lease on ``key`` for ``ttl`` seconds, renewed in the background until
        released. Tries once, or with ``wait`` waits up to that long for the key to be free.
        ``None`` when someone else holds it."""
        native = self._native.lease(
            _args.key(key), _args.millis(ttl, "ttl"), _args.optional_millis(wait, "wait"), False
        )
        return None if native is None else Lease(native)

    def lead(self, key: BytesLike, ttl: Seconds) -> Lease:
        """Leader election: waits until this client holds the lease on ``key``."""
        return Lease(self._native.lead(_args.key(key), _args.millis(ttl, "ttl"), False))

    def close(self) -> None:
        """Disconnects; calls still in flight fail with
        :class:`~mqstore.errors.ConnectionLostError`."""
        self._native.close(False)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<mqstore.Client client_id={self.client_id!r}>"


class Observation:
    """The changes of one observed key, in order: an iterator of :class:`Change` that ends
    when the key is unobserved or the client closed."""

    def __init__(self, client: Client, native: _native.Observation) -> None:
        self._client = client
        self._native = native

    @property
    def key(self) -> bytes:
        return self._native.key

    @property
    def ended(self) -> bool:
        """True once the observation was found to have ended (the key was unobserved or the
        client closed, and every change before that was taken)."""
        return self._native.ended

    def next_change(self, timeout: Optional[Seconds] = None) -> Optional[Change]:
        """The next change, waiting at most ``timeout`` seconds (``None``: until one comes).
        ``None`` when the time ran out or the observation ended (see :attr:`ended`)."""
        return self._native.next(_args.optional_millis(timeout, "timeout"), False)

    def __iter__(self) -> Observation:
        return self

    def __next__(self) -> Change:
        change = self._native.next(None, False)
        if change is None:
            raise StopIteration
        return change

    def close(self) -> None:
        """Stops observing the key (see :meth:`Client.unobserve`)."""
        if not self._native.ended:
            self._client.unobserve(self._native.key)

    def __enter__(self) -> Observation:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.close()


class Lease:
    """A held lease. Pass :attr:`fencing_token` with the writes it guards; leaving its ``with``
    block releases it."""

    def __init__(self, native: _native.Lease) -> None:
        self._native = native

    @property
    def key(self) -> bytes:
        return self._native.key

    @property
    def fencing_token(self) -> Hlc:
        """The version of the SET that took the lease."""
        return self._native.fencing_token

    @property
    def held(self) -> bool:
        """False once released, or once a renewal found someone else holding the key."""
        return self._native.held

    def release(self) -> bool:
        """Releases the lease; true when it was still held (false when released already)."""
        return self._native.release(False)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return (
            f"<mqstore.Lease key={self.key!r} fencing_token={self.fencing_token} held={self.held}>"
        )
