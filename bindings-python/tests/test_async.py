"""The asyncio client against a real mosquitto and ``mqstore serve``."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import mqstore
import pytest
from harness import Server
from mqstore import errors

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def test_the_two_clients_take_the_same_arguments() -> None:
    """Every call of the blocking client is on the asyncio one with the same parameters (names,
    kinds, defaults), and the other way round: what is not shared is named here."""
    only_async = {"connect"}

    def calls(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(value)
            for name, value in vars(cls).items()
            if not name.startswith("_") and callable(value)
        }

    blocking, asynchronous = calls(mqstore.Client), calls(mqstore.AsyncClient)
    assert set(asynchronous) - set(blocking) == only_async
    assert set(blocking) <= set(asynchronous)
    for name, signature in blocking.items():
        expected = [(p.name, p.kind, p.default) for p in signature.parameters.values()]
        actual = [(p.name, p.kind, p.default) for p in asynchronous[name].parameters.values()]
        assert actual == expected, name


def test_the_same_calls_as_coroutines(server: Server, key: str) -> None:
    async def main() -> None:
        async with mqstore.AsyncClient("127.0.0.1", server.broker.port) as c:
            assert (await c.set(key, "v1")).applied
            assert not (await c.set(key, "v2", nx=True)).applied
            assert (await c.set(key, "v1", nex=True)).applied
            got = await c.get(key)
            assert got is not None and got.value == b"v1"
            assert (await c.vdel(key, "nope")).outcome == "value_mismatch"
            assert (await c.vdel(key, "v1")).deleted
            assert (await c.delete(key)).outcome == "absent"
            assert await c.get(key) is None
            for i in range(120):
                await c.set(f"{key}/{i}", "x", expires=60)
            keys = [k async for k in c.scan(f"{key}/*")]
            assert sorted(keys) == sorted(f"{key}/{i}".encode() for i in range(120))

    run(main())


def test_gather_of_a_thousand_calls(server: Server, key: str) -> None:
    async def main() -> None:
        async with mqstore.AsyncClient("127.0.0.1", server.broker.port, timeout=30) as c:
            sets = await asyncio.gather(*(c.set(f"{key}/{i}", str(i)) for i in range(1000)))
            assert all(s.applied for s in sets)
            assert len({s.version for s in sets}) == 1000
            gets = await asyncio.gather(*(c.get(f"{key}/{i}") for i in range(1000)))
            assert [g.value if g else None for g in gets] == [str(i).encode() for i in range(1000)]

    run(main())


def test_observe_as_async_iterator_and_awaitable(server: Server, key: str) -> None:
    async def main() -> None:
        async with mqstore.AsyncClient("127.0.0.1", server.broker.port) as c:
            async with c.observe(key) as changes:
                await c.set(key, "a")
                await c.delete(key)
                seen = []
                async for change in changes:
                    seen.append(change.value)
                    if len(seen) == 2:
                        break
                assert seen == [b"a", None]
            assert await changes.next_change(timeout=10) is None
            assert changes.ended

            other = await c.observe(key + "/2")
            assert await other.next_change(timeout=0.1) is None
            await c.set(key + "/2", "b")
            later = await other.next_change(timeout=10)
            assert later is not None and later.value == b"b"
            await c.unobserve(key + "/2")
            assert [x async for x in other] == []

    run(main())


def test_leases_contend_and_fence(server: Server, key: str) -> None:
    async def main() -> None:
        async with (
            mqstore.AsyncClient("127.0.0.1", server.broker.port) as a,
            mqstore.AsyncClient("127.0.0.1", server.broker.port) as b,
        ):
            won = await asyncio.gather(a.lease(key, 30), b.lease(key, 30))
            held = [lease for lease in won if lease is not None]
            assert len(held) == 1, "exactly one client takes the lease"
            lease = held[0]
            async with lease:
                assert (await a.set(key + "/data", "x", fencing_token=lease.fencing_token)).applied
                with pytest.raises(errors.FencingTokenRequiredError):
                    await b.set(key + "/data", "y")
            assert not lease.held
            led = await b.lead(key, 30)
            assert led.fencing_token > lease.fencing_token
            assert await led.release()

    run(main())


def test_cancelling_a_call_stops_waiting(fresh_broker: Any, key: str) -> None:
    # No server: the call would wait for its 30 s timeout.
    async def main() -> None:
        async with mqstore.AsyncClient("127.0.0.1", fresh_broker.port, timeout=30) as c:
            call = asyncio.ensure_future(c.get(key))
            await asyncio.sleep(0.1)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(c.get(key), 0.2)

    run(main())


def test_timeouts_raise_request_timeout_error(fresh_broker: Any, key: str) -> None:
    async def main() -> None:
        async with mqstore.AsyncClient("127.0.0.1", fresh_broker.port, timeout=0.3) as c:
            with pytest.raises(errors.RequestTimeoutError) as raised:
                await c.get(key)
            assert isinstance(raised.value, TimeoutError)
            assert raised.value.code == 202
            assert "is `mqstore serve` running" in str(raised.value)

    run(main())


def test_an_unconnected_client_says_how_to_connect() -> None:
    c = mqstore.AsyncClient()
    assert repr(c) == "<mqstore.AsyncClient not connected>"
    with pytest.raises(RuntimeError, match="async with"):
        c.client_id  # noqa: B018


def test_connect_errors_are_typed(fresh_broker: Any) -> None:
    port = fresh_broker.port
    fresh_broker.kill()

    async def main() -> None:
        with pytest.raises(errors.BrokerUnreachableError) as raised:
            await mqstore.AsyncClient("127.0.0.1", port, timeout=5).connect()
        assert raised.value.code == 207

    run(main())


def test_the_loop_follows_a_reconnect_and_observations_go_on(fresh_broker: Any, key: str) -> None:
    # The event loop reads the connection itself: after a broker restart the client's helper
    # thread reconnects and the loop must watch the new socket, or nothing arrives again.
    server = Server(fresh_broker)

    async def main() -> None:
        async with mqstore.AsyncClient("127.0.0.1", fresh_broker.port, timeout=2) as c:
            await c.set(key, "before")
            changes = await c.observe(key)
            fresh_broker.restart()
            server.wait_connected(2)
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                try:
                    await c.set(key, "after")
                    break
                except (errors.ConnectionLostError, errors.RequestTimeoutError):
                    assert asyncio.get_running_loop().time() < deadline, "never reconnected"
                    await asyncio.sleep(0.05)
            seen = []
            while b"after" not in seen:
                change = await asyncio.wait_for(changes.__anext__(), 10)
                seen.append(change.value)
            got = await c.get(key)
            assert got is not None and got.value == b"after"

    try:
        run(main())
    finally:
        server.stop()


def test_a_stream_wait_ends_at_its_timeout_and_the_stream_goes_on(server: Server, key: str) -> None:
    async def main() -> None:
        async with mqstore.AsyncClient("127.0.0.1", server.broker.port) as c:
            changes = await c.observe(key)
            # Nothing changes: the wait gives up, and a change after it is not lost.
            assert await changes.next_change(timeout=0.2) is None
            await c.set(key, "later")
            change = await changes.next_change(timeout=10)
            assert change is not None and change.value == b"later"

    run(main())


def thread_names() -> list[str]:
    tasks = Path("/proc/self/task")
    return [(task / "comm").read_text().strip() for task in tasks.iterdir()]


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads Linux's /proc")
def test_the_event_loop_makes_the_calls_with_no_runtime_threads(server: Server, key: str) -> None:
    # Each client has one helper thread (it reconnects); no pool of workers makes the calls.
    async def main() -> list[str]:
        async with mqstore.AsyncClient("127.0.0.1", server.broker.port) as c:
            await asyncio.gather(*(c.set(f"{key}/{i}", "v") for i in range(50)))
            return [name for name in thread_names() if name.startswith("mqstore")]

    names = run(main())
    assert "mqstore-io" in names
    # Connecting runs on a thread of its own ("mqstore-connect", 15 characters kept), gone
    # once connected; nothing else of mqstore's runs.
    assert set(names) <= {"mqstore-io", "mqstore-connec"}, names
