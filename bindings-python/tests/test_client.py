"""The blocking client against a real mosquitto and ``mqstore serve``."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import mqstore
import pytest
from harness import Server
from mqstore import errors


def test_set_get_delete(client: mqstore.Client, key: str) -> None:
    result = client.set(key, "hello")
    assert result.applied
    assert result.version is not None and result.version.node == "py-node"
    got = client.get(key)
    assert got is not None
    assert got.value == b"hello"
    assert got.version == result.version
    deleted = client.delete(key)
    assert deleted.deleted and deleted.outcome == "deleted"
    assert deleted.version is not None and deleted.version > result.version
    assert client.get(key) is None
    again = client.delete(key)
    assert not again.deleted and again.outcome == "absent"


def test_keys_and_values_are_bytes_like_and_binary_safe(client: mqstore.Client, key: str) -> None:
    value = bytes(range(256)) + b"\r\n$-1\r\n"
    client.set(bytearray(key.encode()), memoryview(value))
    got = client.get(key.encode())
    assert got is not None and got.value == value
    client.set(key, "")
    empty = client.get(key)
    assert empty is not None and empty.value == b""
    client.set("py/ключ", "значение")
    utf8 = client.get("py/ключ".encode())
    assert utf8 is not None and utf8.value == "значение".encode()


def test_versions_increase_with_every_write(client: mqstore.Client, key: str) -> None:
    versions = [client.set(key, str(i)).version for i in range(5)]
    assert all(v is not None for v in versions)
    assert versions == sorted(versions)  # type: ignore[type-var]
    assert len(set(versions)) == 5


def test_nx_sets_only_a_missing_key(client: mqstore.Client, key: str) -> None:
    first = client.set(key, "a", nx=True)
    assert first.applied
    second = client.set(key, "b", nx=True)
    assert not second.applied
    assert second.version == first.version
    got = client.get(key)
    assert got is not None and got.value == b"a"


def test_nex_also_sets_a_key_holding_the_same_value(client: mqstore.Client, key: str) -> None:
    assert client.set(key, "me", nex=True).applied
    assert client.set(key, "me", nex=True).applied
    assert not client.set(key, "you", nex=True).applied
    got = client.get(key)
    assert got is not None and got.value == b"me"


def test_vdel_deletes_only_a_matching_value(client: mqstore.Client, key: str) -> None:
    client.set(key, "v1")
    mismatch = client.vdel(key, "other")
    assert not mismatch.deleted and mismatch.outcome == "value_mismatch"
    assert client.get(key) is not None
    match = client.vdel(key, "v1")
    assert match.deleted
    assert client.get(key) is None
    assert client.vdel(key, "v1").outcome == "absent"


def test_expires_takes_seconds_or_a_timedelta(client: mqstore.Client, key: str) -> None:
    client.set(key + "/s", "v", expires=0.2)
    client.set(key + "/td", "v", expires=timedelta(milliseconds=200))
    client.set(key + "/long", "v", expires=600)
    with client.observe(key + "/s") as changes:
        change = changes.next_change(timeout=10)
        assert change is not None and change.value is None, "the key expired"
    assert client.get(key + "/s") is None
    assert client.get(key + "/long") is not None


def test_persist_is_accepted(client: mqstore.Client, key: str) -> None:
    assert client.set(key, "durable", persist=True).applied
    got = client.get(key)
    assert got is not None and got.value == b"durable"


def test_scan_iterates_over_every_page(client: mqstore.Client, key: str) -> None:
    # The server answers 100 keys a page: three pages.
    wanted = {f"{key}/{i:03}".encode() for i in range(250)}
    for k in wanted:
        client.set(k, "x")
    client.set("py/elsewhere", "x")
    keys = client.scan(f"{key}/*")
    assert iter(keys) is keys
    found = list(keys)
    assert len(found) == len(wanted)
    assert set(found) == wanted
    assert list(client.scan(f"{key}/00?")) and set(client.scan(f"{key}/00?")) == {
        f"{key}/00{i}".encode() for i in range(10)
    }
    assert list(client.scan("py/no-such-prefix/*")) == []


def test_observe_sees_sets_deletes_and_vdels_in_order(
    server: Server, client: mqstore.Client, key: str
) -> None:
    with mqstore.Client("127.0.0.1", server.broker.port) as writer:
        with client.observe(key) as changes:
            assert changes.key == key.encode()
            v1 = writer.set(key, "v1").version
            writer.set(key, "v2")
            writer.delete(key)
            writer.set(key, "v3")
            writer.vdel(key, "v3")
            seen = [changes.next_change(timeout=10) for _ in range(5)]
    assert [c.value if c else "missing" for c in seen] == [b"v1", b"v2", None, b"v3", None]
    assert all(c is not None and c.key == key.encode() and not c.synthetic for c in seen)
    # Each change replaced the one seen before it: none was missed.
    assert all(c is not None and not c.gap for c in seen)
    assert seen[0] is not None and seen[0].version == v1
    # Leaving the with block unobserved the key: the observation ends.
    assert changes.next_change(timeout=10) is None
    assert changes.ended


def test_an_observation_is_an_iterator_that_ends_when_unobserved(
    client: mqstore.Client, key: str
) -> None:
    changes = client.observe(key)
    client.set(key, "one")
    first = next(changes)
    assert first.value == b"one"
    assert changes.next_change(timeout=0.1) is None  # nothing more yet
    assert not changes.ended
    client.unobserve(key)
    assert list(changes) == []
    assert changes.ended


def test_fencing_tokens_guard_writes(client: mqstore.Client, key: str) -> None:
    lease = client.lease(key + "/lock", 30)
    assert lease is not None
    with lease:
        token = lease.fencing_token
        assert client.set(key, "guarded", fencing_token=token).applied
        with pytest.raises(errors.FencingTokenRequiredError) as required:
            client.set(key, "unguarded")
        assert required.value.text == "a fencing token is required for this request"
        assert required.value.code == 102
        older = mqstore.Hlc(token.wall_ms - 1, 0, token.node)
        with pytest.raises(errors.FencingTokenLowerVersionError) as lower:
            client.set(key, "stale", fencing_token=older)
        assert lower.value.text == (
            "the request fencing token is a lower version than the fencing token "
            "protecting the resource"
        )
        with pytest.raises(errors.FencingTokenLowerVersionError):
            client.delete(key, fencing_token=str(older))
        with pytest.raises(errors.FencingTokenLowerVersionError):
            client.vdel(key, "guarded", fencing_token=older)
        got = client.get(key)
        assert got is not None and got.value == b"guarded"
        assert client.delete(key, fencing_token=str(token)).deleted
        assert lease.held
    assert not lease.held
    assert not lease.release(), "released once already, by the with block"


def test_a_held_lease_is_refused_to_another_client(
    server: Server, client: mqstore.Client, key: str
) -> None:
    with mqstore.Client("127.0.0.1", server.broker.port) as other:
        lease = client.lease(key, 30)
        assert lease is not None and lease.key == key.encode()
        assert other.lease(key, 30) is None
        assert lease.release()
        taken = other.lease(key, 30)
        assert taken is not None
        assert taken.fencing_token > lease.fencing_token
        taken.release()


def test_lease_waits_for_release(server: Server, client: mqstore.Client, key: str) -> None:
    with mqstore.Client("127.0.0.1", server.broker.port) as other:
        lease = client.lease(key, 30)
        assert lease is not None
        releaser = threading.Timer(0.3, lease.release)
        releaser.start()
        waited = other.lease(key, 30, wait=20)
        releaser.join()
        assert waited is not None and waited.held
        waited.release()
        # wait gives up: None
        held = client.lead(key, 30)
        assert other.lease(key, 30, wait=0.2) is None
        # wait=0 tries once, as queue.Queue.get(timeout=0) looks once
        assert other.lease(key, 30, wait=0) is None
        held.release()
        free = other.lease(key, 30, wait=0)
        assert free is not None and free.held
        free.release()


def test_leases_are_renewed_in_the_background(client: mqstore.Client, key: str) -> None:
    lease = client.lease(key, 0.6)
    assert lease is not None
    # Over three ttls the key is renewed (SET again, every third of the ttl) and never expires.
    renewals = []
    deadline = time.monotonic() + 1.8
    with client.observe(key) as changes:
        while (left := deadline - time.monotonic()) > 0:
            change = changes.next_change(timeout=left)
            if change is not None:
                renewals.append(change)
    assert all(c.value == client.client_id.encode() for c in renewals), "it expired"
    assert len(renewals) >= 2
    assert lease.held
    lease.release()


def test_threads_share_one_client(client: mqstore.Client, key: str) -> None:
    failures: list[BaseException] = []

    def work(thread: int) -> None:
        try:
            for i in range(50):
                k = f"{key}/{thread}/{i}"
                assert client.set(k, f"{thread}:{i}").applied
                got = client.get(k)
                assert got is not None and got.value == f"{thread}:{i}".encode()
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert len(list(client.scan(f"{key}/*"))) == 400


def test_a_closed_client_fails_calls_with_connection_lost(server: Server, key: str) -> None:
    c = mqstore.Client("127.0.0.1", server.broker.port)
    assert c.client_id.startswith("mqstore-py-")
    c.close()
    with pytest.raises(errors.ConnectionLostError):
        c.get(key)


def test_client_ids_and_reprs(server: Server) -> None:
    with mqstore.Client("127.0.0.1", server.broker.port, client_id="py-named") as c:
        assert c.client_id == "py-named"
        assert repr(c) == "<mqstore.Client client_id='py-named'>"
        result = c.set("py/repr", "v")
        assert repr(result).startswith("SetResult(applied=True, version=Hlc('")
        got = c.get("py/repr")
        assert repr(got).startswith("Versioned(value=b'v', version=Hlc(")
        assert repr(c.delete("py/repr")).startswith("DeleteResult(outcome='deleted'")


def test_a_fencing_token_from_the_future_is_refused(client: mqstore.Client, key: str) -> None:
    lease = client.lease(key + "/lock", 30)
    assert lease is not None
    with lease:
        client.set(key, "guarded", fencing_token=lease.fencing_token)
        token = lease.fencing_token
        ahead = mqstore.Hlc(token.wall_ms + 3_600_000, 0, token.node)
        with pytest.raises(errors.FencingTokenSkewError) as skew:
            client.set(key, "from the future", fencing_token=ahead)
        assert skew.value.text.startswith("the request fencing token timestamp is too far")
        got = client.get(key)
        assert got is not None and got.value == b"guarded"


def test_a_key_too_long_to_notify_is_refused_on_observe(client: mqstore.Client) -> None:
    # Its notification topic (the key in hex, in this client's tree) would pass 65,535 bytes.
    with pytest.raises(errors.NotificationTopicTooLongError) as raised:
        client.observe("k" * 33_000)
    assert "use a shorter key or client id" in raised.value.text


def test_keyspace_events_name_keys_made_and_deleted(client: mqstore.Client, key: str) -> None:
    watch = client.watch_keyspace()
    client.set(key, "1")
    client.set(key, "2")  # an overwrite: no event
    client.delete(key)
    events = [watch.next_event(timeout=10), watch.next_event(timeout=10)]
    assert events == [(key.encode(), True), (key.encode(), False)]
    assert watch.next_event(timeout=0.2) is None


def test_keyspace_events_from_asyncio(server: Server, key: str) -> None:
    async def main() -> None:
        async with mqstore.AsyncClient("127.0.0.1", server.broker.port) as c:
            watch = await c.watch_keyspace()
            await c.set(key, "v")
            assert await watch.next_event(timeout=10) == (key.encode(), True)

    asyncio.run(main())
