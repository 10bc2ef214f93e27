"""Bad arguments raise TypeError or ValueError saying what to do, and send nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, Callable

import mqstore
import pytest
from harness import Server


@pytest.fixture
def nothing_sent(server: Server) -> Iterator[None]:
    """Fails the test if the server answered any request during it."""
    before = server.requests_handled()
    yield
    assert server.requests_handled() == before, "a request reached the server"


BAD_CALLS = [
    (lambda c: c.set(1, "v"), TypeError, "key must be str or bytes-like"),
    (lambda c: c.set("k", 1.5), TypeError, "value must be str or bytes-like"),
    (lambda c: c.set("k", None), TypeError, "not NoneType"),
    (lambda c: c.set("", "v"), ValueError, "key must not be empty"),
    (lambda c: c.set(b"", "v"), ValueError, "key must not be empty"),
    (lambda c: c.set("k", "v", nx=True, nex=True), ValueError, "nx and nex cannot both"),
    (lambda c: c.set("k", "v", expires=-1), ValueError, "expires must be a positive"),
    (lambda c: c.set("k", "v", expires=0), ValueError, "expires must be a positive"),
    (lambda c: c.set("k", "v", expires=timedelta(seconds=-5)), ValueError, "positive"),
    (lambda c: c.set("k", "v", expires=float("nan")), ValueError, "positive, finite"),
    (lambda c: c.set("k", "v", expires="10"), TypeError, "number of seconds or a datetime"),
    (lambda c: c.set("k", "v", fencing_token=5), TypeError, "fencing_token must be"),
    (lambda c: c.set("k", "v", fencing_token="not-an-hlc"), ValueError, "HLC"),
    (lambda c: c.get(""), ValueError, "key must not be empty"),
    (lambda c: c.get(["k"]), TypeError, "not list"),
    (lambda c: c.delete(None), TypeError, "key must be"),
    (lambda c: c.vdel("k", 3), TypeError, "value must be"),
    (lambda c: c.scan(""), ValueError, "pattern must not be empty"),
    (lambda c: c.observe(""), ValueError, "key must not be empty"),
    (lambda c: c.lease("k", 0), ValueError, "ttl must be a positive"),
    (lambda c: c.lease("k", 10, wait=-1), ValueError, "wait must be 0 or a positive"),
    (lambda c: c.lead("k", "10"), TypeError, "ttl must be a number"),
]


@pytest.mark.parametrize(("call", "kind", "message"), BAD_CALLS)
def test_bad_arguments_to_the_client(
    client: mqstore.Client,
    nothing_sent: None,
    call: Callable[[Any], Any],
    kind: type,
    message: str,
) -> None:
    with pytest.raises(kind, match=message):
        call(client)


@pytest.mark.parametrize(("call", "kind", "message"), BAD_CALLS)
def test_bad_arguments_to_the_async_client(
    server: Server,
    nothing_sent: None,
    call: Callable[[Any], Any],
    kind: type,
    message: str,
) -> None:
    async def main() -> None:
        async with mqstore.AsyncClient("127.0.0.1", server.broker.port) as c:
            with pytest.raises(kind, match=message):
                result = call(c)
                if asyncio.iscoroutine(result):
                    await result

    asyncio.run(main())


@pytest.mark.parametrize(
    ("kwargs", "kind", "message"),
    [
        ({"port": 0}, ValueError, "port must be an int from 1 to 65535"),
        ({"port": "1883"}, ValueError, "port must be an int"),
        ({"host": ""}, TypeError, "host must be a non-empty str"),
        ({"client_id": ""}, ValueError, "client_id must not be empty"),
        ({"client_id": 7}, TypeError, "client_id must be a str"),
        ({"username": "u"}, ValueError, "username and password go together"),
        ({"tls": 1}, TypeError, "tls must be a bool"),
        ({"key_password": "x"}, ValueError, "give key_file too"),
        ({"ca_file": "ca.pem"}, ValueError, "pass tls=True"),
        ({"tls": True, "ca_file": "ca.pem", "cert_file": "c.pem"}, ValueError, "go together"),
        ({"timeout": -1}, ValueError, "timeout must be a positive"),
        ({"timeout": None}, TypeError, "timeout must be a number"),
    ],
)
def test_bad_connection_settings(kwargs: Any, kind: type, message: str) -> None:
    with pytest.raises(kind, match=message):
        mqstore.Client(**kwargs)
    with pytest.raises(kind, match=message):
        mqstore.AsyncClient(**kwargs)


def test_a_missing_ca_file_is_named(tmp_path: Any) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(OSError, match=r"nope\.pem"):
        mqstore.Client(tls=True, ca_file=missing)
