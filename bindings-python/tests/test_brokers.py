"""What the broker and the server refuse arrives as the matching exception."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import mqstore
import pytest
from harness import Broker, Server, free_port
from mqstore import errors


def test_nothing_listening_is_broker_unreachable() -> None:
    with pytest.raises(errors.BrokerUnreachableError) as raised:
        mqstore.Client("127.0.0.1", free_port(), timeout=5)
    assert isinstance(raised.value, ConnectionError)
    assert "cannot reach the MQTT broker" in str(raised.value)


def test_no_server_is_a_timeout(fresh_broker: Broker) -> None:
    with mqstore.Client("127.0.0.1", fresh_broker.port, timeout=0.3) as c:
        with pytest.raises(errors.RequestTimeoutError) as raised:
            c.set("k", "v")
        assert isinstance(raised.value, TimeoutError)


@pytest.fixture
def password_broker() -> Iterator[Broker]:
    directory = Path(tempfile.mkdtemp(prefix="mqstore-py-passwords-"))
    file = directory / "passwords"
    subprocess.run(["mosquitto_passwd", "-b", "-c", str(file), "fleet", "s3cret"], check=True)
    broker = Broker(f"allow_anonymous false\npassword_file {file}\n")
    yield broker
    broker.stop()
    shutil.rmtree(directory)


def test_a_refused_login_is_broker_refused(password_broker: Broker) -> None:
    with pytest.raises(errors.BrokerRefusedError) as raised:
        mqstore.Client("127.0.0.1", password_broker.port, username="fleet", password="wrong")
    assert raised.value.code == 208
    assert "refused the connection" in str(raised.value)
    with pytest.raises(errors.BrokerRefusedError):
        mqstore.Client("127.0.0.1", password_broker.port)
    # The right password gets in (and with no server, a call times out).
    with mqstore.Client(
        "127.0.0.1", password_broker.port, username="fleet", password="s3cret", timeout=0.3
    ) as c:
        with pytest.raises(errors.RequestTimeoutError):
            c.get("k")


@contextmanager
def serving(config: str) -> Iterator[int]:
    """A broker with these configuration lines and a server beside it: the broker's port."""
    broker = Broker(config)
    server = Server(broker)
    try:
        yield broker.port
    finally:
        server.stop()
        broker.stop()


def test_a_request_over_the_brokers_packet_limit_is_not_sent() -> None:
    with serving("max_packet_size 10000\n") as port, mqstore.Client("127.0.0.1", port) as c:
        with pytest.raises(errors.RequestTooLargeError) as raised:
            c.set("big", b"x" * 20_000)
        assert "maximum packet size of 10000 bytes" in str(raised.value)
        assert c.get("big") is None
        assert c.set("small", b"x" * 1000).applied


def test_a_request_the_broker_refuses_is_publish_refused_and_not_applied() -> None:
    # mosquitto refuses a publish over its message_size_limit with PUBACK reason code 0x95.
    with serving("message_size_limit 50000\n") as port:
        with mqstore.Client("127.0.0.1", port) as c:
            with pytest.raises(errors.PublishRefusedError) as raised:
                c.set("big", b"x" * 60_000)
            assert raised.value.code == 216
            assert str(raised.value) == (
                "the MQTT broker refused the request: Packet too large (reason code 0x95); "
                "it was not applied"
            )
        # rumqttc cannot read that reason code and dropped that connection: a new one.
        with mqstore.Client("127.0.0.1", port) as c:
            assert c.get("big") is None
            assert c.set("small", b"x" * 1000).applied


def test_quota_and_access_rules(fresh_broker: Broker) -> None:
    server = Server(
        fresh_broker,
        "--max-keys",
        "3",
        "--access-rule",
        "* readonly/* r",
        "--access-rule",
        "* * rw",
    )
    try:
        with mqstore.Client("127.0.0.1", fresh_broker.port) as c:
            for i in range(3):
                c.set(f"k{i}", "v")
            with pytest.raises(errors.QuotaExceededError) as quota:
                c.set("k3", "v")
            assert quota.value.text == "the quota has been exceeded"
            assert c.get("k3") is None
            with pytest.raises(errors.NotAuthorizedError) as denied:
                c.set("readonly/x", "v")
            assert denied.value.text == "not authorized"
            assert c.get("readonly/x") is None
    finally:
        server.stop()
