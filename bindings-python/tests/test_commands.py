"""Commands to devices through mqstore serve's command service, answered by simulated MQTT 5
devices (paho-mqtt, request/response with correlation data: the `mqtt5` profile)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import mqstore
import paho.mqtt.client as paho
import pytest
from harness import Server
from mqstore import errors
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


class Device:
    """Answers commands on `devices/{name}/commands`: `fail` with an application error, `bad`
    with status 400, `ignore` not at all, anything else with `done: {payload}`."""

    def __init__(self, port: int, name: str) -> None:
        self.topic = f"devices/{name}/commands"
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=f"device-{name}", protocol=paho.MQTTv5
        )
        self.client.on_message = self.answer
        subscribed = threading.Event()
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        self.client.subscribe(self.topic, qos=1)
        assert subscribed.wait(10), "no SUBACK"
        self.received: list[bytes] = []

    def answer(self, _client: object, _userdata: object, message: paho.MQTTMessage) -> None:
        self.received.append(message.payload)
        request = message.properties
        if message.payload == b"ignore" or request is None:
            return
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.CorrelationData = request.CorrelationData  # type: ignore[attr-defined]
        if message.payload == b"fail":
            props.UserProperty = [("AppErrCode", "overheated")]
        elif message.payload == b"bad":
            props.UserProperty = [("__stat", "400"), ("__stMsg", "no such command")]
        answer = b"done: " + message.payload
        response_topic = request.ResponseTopic  # type: ignore[attr-defined]
        self.client.publish(response_topic, answer, qos=1, properties=props)

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
        # paho-mqtt 2.1 leaves the socket pair that wakes its loop open after loop_stop().
        self.client._reset_sockets(sockpair_only=True)


@pytest.fixture
def devices(server: Server) -> Iterator[list[Device]]:
    started = [Device(server.broker.port, f"py-dev-{i}") for i in range(3)]
    yield started
    for device in started:
        device.stop()


def test_an_awaited_command_returns_the_devices_answer(
    client: mqstore.Client, devices: list[Device]
) -> None:
    reply = client.command(devices[0].topic, "reboot", timeout=10)
    assert reply.status == "SUCCEEDED"
    assert reply.payload == b"done: reboot"
    assert reply.device_status == 200
    assert devices[0].received == [b"reboot"]
    record = client.command_status(reply.id)
    assert record["status"] == "SUCCEEDED" and record["topic"] == devices[0].topic


def test_device_errors_and_timeouts_are_typed(
    client: mqstore.Client, devices: list[Device]
) -> None:
    with pytest.raises(errors.CommandFailedError) as failed:
        client.command(devices[0].topic, "fail")
    assert "overheated" in str(failed.value) and failed.value.command_id
    with pytest.raises(errors.CommandRejectedError) as rejected:
        client.command(devices[0].topic, "bad")
    assert "no such command" in str(rejected.value)
    with pytest.raises(errors.CommandTimeoutError) as timed_out:
        client.command(devices[0].topic, "ignore", timeout=0.5)
    assert isinstance(timed_out.value, TimeoutError)


def test_one_way_and_detached_commands(client: mqstore.Client, devices: list[Device]) -> None:
    watch = client.watch_commands()
    one_way = client.command(devices[1].topic, "blink", mode="oneway")
    assert one_way.status == "DELIVERED" and one_way.payload == b""
    detached = client.command(devices[1].topic, "update", mode="detached")
    assert detached.status == "SENT"
    # The detached command's answer lands in its status record; the watch sees it.
    while True:
        record = watch.next_record(timeout=10)
        assert record is not None, "no status change within 10 s"
        if record["id"] == detached.id and record["status"] == "SUCCEEDED":
            break
    assert client.command_status(detached.id)["status"] == "SUCCEEDED"


def test_one_command_to_many_devices(client: mqstore.Client, devices: list[Device]) -> None:
    topics = [d.topic for d in devices] + ["devices/py-nobody/commands"]
    fan_out = client.command_many(topics, "ping", timeout=1, headers={"trace": "t1"})
    results = dict(fan_out)
    assert set(results) == set(topics)
    for device in devices:
        reply = results[device.topic]
        assert isinstance(reply, mqstore.CommandReply) and reply.payload == b"done: ping"
    assert isinstance(results["devices/py-nobody/commands"], errors.CommandTimeoutError)
    assert fan_out.summary == {
        "succeeded": 3,
        "failed": 0,
        "rejected": 0,
        "timed_out": 1,
        "errors": 0,
    }


def test_commands_from_asyncio(server: Server, devices: list[Device]) -> None:
    async def main() -> None:
        async with mqstore.AsyncClient("127.0.0.1", server.broker.port) as c:
            replies = await asyncio.gather(*(c.command(d.topic, "hello") for d in devices))
            assert [r.payload for r in replies] == [b"done: hello"] * 3
            assert (await c.command_status(replies[0].id))["status"] == "SUCCEEDED"
            results = [r async for r in c.command_many([d.topic for d in devices], "x")]
            assert len(results) == 3
            with pytest.raises(errors.CommandRejectedError):
                await c.command(devices[0].topic, "bad")
            # A watch, and a fan-out with a device that never answers, on the loop.
            watch = await c.watch_commands()
            detached = await c.command(devices[1].topic, "update", mode="detached")
            while True:
                record = await watch.next_record(timeout=10)
                assert record is not None, "no status change within 10 s"
                if record["id"] == detached.id and record["status"] == "SUCCEEDED":
                    break
            nobody = "devices/py-nobody/commands"
            fan_out = c.command_many([devices[0].topic, nobody], "ping", timeout=1)
            got = {topic: outcome async for topic, outcome in fan_out}
            assert isinstance(got[devices[0].topic], mqstore.CommandReply)
            assert isinstance(got[nobody], errors.CommandTimeoutError)
            assert fan_out.summary == {
                "succeeded": 1,
                "failed": 0,
                "rejected": 0,
                "timed_out": 1,
                "errors": 0,
            }

    asyncio.run(main())


def test_bad_command_arguments_send_nothing(client: mqstore.Client) -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        client.command("devices/x", "p", mode="fire-and-forget")
    with pytest.raises(TypeError, match="topic must be a str"):
        client.command(b"devices/x", "p")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout must be a positive"):
        client.command("devices/x", "p", timeout=0)
    with pytest.raises(TypeError, match="headers must map str to str"):
        client.command("devices/x", "p", headers={"n": 1})  # type: ignore[dict-item]
    with pytest.raises(errors.MqstoreError, match="profile"):
        client.command("devices/x", "p", profile="no-such-profile")


class AwsDevice:
    """A device written for AWS IoT commands: thing `name` takes its executions' requests on
    `$aws/commands/things/{name}/executions/+/request/json`, reports IN_PROGRESS, then
    SUCCEEDED with the request's `to` as its result; it records the acknowledgements."""

    def __init__(self, port: int, name: str) -> None:
        self.base = f"$aws/commands/things/{name}/executions"
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=f"aws-{name}", protocol=paho.MQTTv5
        )
        self.client.on_message = self.on_message
        self.acks: list[tuple[str, dict[str, object]]] = []
        subscribed = threading.Semaphore(0)
        self.client.on_subscribe = lambda *_: subscribed.release()
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        for suffix in ("request/json", "response/accepted/json", "response/rejected/json"):
            self.client.subscribe(f"{self.base}/+/{suffix}", qos=1)
        for _ in range(3):
            assert subscribed.acquire(timeout=10), "no SUBACK"

    def on_message(self, _client: object, _userdata: object, message: paho.MQTTMessage) -> None:
        body = json.loads(message.payload)
        kind = message.topic.rsplit("/", 2)[-2]
        if kind in ("accepted", "rejected"):
            self.acks.append((kind, body))
            return
        execution = message.topic.split("/")[5]
        topic = f"{self.base}/{execution}/response/json"
        self.client.publish(topic, json.dumps({"status": "IN_PROGRESS"}), qos=1)
        done = {"status": "SUCCEEDED", "result": {"to": {"s": str(body["to"])}}}
        self.client.publish(topic, json.dumps(done), qos=1)

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
        self.client._reset_sockets(sockpair_only=True)


HEAT = {
    "commandId": "heat",
    "payloadTemplate": '{"to": ${aws:iot:commandexecution::parameter:temp}}',
    "mandatoryParameters": [{"name": "temp", "defaultValue": {"I": 20}}],
}


def test_stored_commands_start_by_id_on_aws_devices(server: Server, client: mqstore.Client) -> None:
    device = AwsDevice(server.broker.port, "py-robot")
    try:
        stored = client.define_command(HEAT)
        assert stored["commandId"] == "heat" and stored["createdMs"] > 0
        assert [c["commandId"] for c in client.command_definitions()] == ["heat"]
        assert client.command_definition("heat")["mandatoryParameters"][0]["name"] == "temp"
        with pytest.raises(errors.StatusError, match="exists"):
            client.define_command(HEAT)
        with pytest.raises(errors.StatusError, match="commandId"):
            client.define_command({**HEAT, "commandId": "bad id"})
        watch = client.watch_commands()
        reply = client.start_command("heat", "py-robot", parameters={"temp": 80})
        assert reply.status == "SUCCEEDED"
        assert json.loads(reply.payload)["result"] == {"to": {"s": "80"}}
        seen: list[str] = []
        while not seen or seen[-1] != "SUCCEEDED":
            record = watch.next_record(timeout=10)
            assert record is not None, f"no SUCCEEDED record: {seen}"
            if record["id"] == reply.id:
                seen.append(record["status"])
        assert seen == ["SENT", "IN_PROGRESS", "SUCCEEDED"]
        assert client.command_status(reply.id)["command"] == "heat"
        default = client.start_command("heat", "thing/py-robot")
        assert json.loads(default.payload)["result"] == {"to": {"s": "20"}}
        with pytest.raises(errors.StatusError, match="cool"):
            client.start_command("cool", "py-robot")
        with pytest.raises(errors.StatusError, match="fan"):
            client.start_command("heat", "py-robot", parameters={"fan": 1})
        with pytest.raises(TypeError, match="parameters must be a dict"):
            client.start_command("heat", "py-robot", parameters=[1])  # type: ignore[arg-type]
        assert client.delete_command_definition("heat")
        assert not client.delete_command_definition("heat")
        with pytest.raises(errors.StatusError, match="no stored command"):
            client.command_definition("heat")
        assert [kind for kind, _ in device.acks] == ["accepted"] * 4
    finally:
        device.stop()


def test_stored_commands_from_asyncio(server: Server) -> None:
    async def main() -> None:
        device = AwsDevice(server.broker.port, "py-robot-2")
        try:
            async with mqstore.AsyncClient("127.0.0.1", server.broker.port) as c:
                await c.define_command({**HEAT, "commandId": "heat2"})
                assert [d["commandId"] for d in await c.command_definitions()] == ["heat2"]
                assert (await c.command_definition("heat2"))["commandId"] == "heat2"
                reply = await c.start_command("heat2", "py-robot-2", parameters={"temp": {"I": 5}})
                assert json.loads(reply.payload)["result"] == {"to": {"s": "5"}}
                assert await c.delete_command_definition("heat2")
        finally:
            device.stop()

    asyncio.run(main())
