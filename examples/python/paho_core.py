"""Bring your own MQTT client: mqstore's client session (``mqstore.ClientCore``) driven by
paho-mqtt. The session decides what to publish and what each message means; paho moves the
bytes. Run it against the broker and server that ``bash scripts/run`` starts::

    pip install ./bindings-python paho-mqtt==2.1.0
    python3 examples/python/paho_core.py            # --port 1883 by default
"""

from __future__ import annotations

import argparse
import queue
import threading
import time
from typing import Any

import mqstore
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


def publish(client: mqtt.Client, message: dict[str, Any]) -> None:
    """Publishes a message of ``ClientCore.take_publishes`` at QoS 1, with its properties."""
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    if message["response_topic"] is not None:
        properties.ResponseTopic = message["response_topic"]
    if message["correlation_data"] is not None:
        properties.CorrelationData = message["correlation_data"]
    if message["content_type"] is not None:
        properties.ContentType = message["content_type"]
    if message["message_expiry_interval"] is not None:
        properties.MessageExpiryInterval = message["message_expiry_interval"]
    if message["user_properties"]:
        properties.UserProperty = message["user_properties"]
    client.publish(message["topic"], message["payload"], qos=1, properties=properties)


def received(message: mqtt.MQTTMessage) -> dict[str, Any]:
    """A message paho received, as ``ClientCore.handle`` takes it."""
    properties = message.properties
    return {
        "topic": message.topic,
        "payload": message.payload,
        "correlation_data": getattr(properties, "CorrelationData", None),
        "response_topic": getattr(properties, "ResponseTopic", None),
        "content_type": getattr(properties, "ContentType", None),
        "user_properties": getattr(properties, "UserProperty", []),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=1883)
    args = parser.parse_args()

    core = mqstore.ClientCore("paho-example")
    inbox: queue.Queue[dict[str, Any]] = queue.Queue()
    subscribed = threading.Event()
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2, client_id="paho-example", protocol=mqtt.MQTTv5
    )
    # The session's presence: the server forgets this client's registrations when it vanishes.
    client.will_set(core.presence_topic, b"gone", qos=1)
    client.on_connect = lambda c, *_: c.subscribe([(f, 1) for f in core.subscriptions()])
    client.on_subscribe = lambda *_: subscribed.set()
    # paho calls back on its own thread; the session is driven from this one only.
    client.on_message = lambda _c, _u, message: inbox.put(received(message))
    client.connect("127.0.0.1", args.port)
    client.loop_start()
    if not subscribed.wait(10):
        raise SystemExit(f"no broker on 127.0.0.1:{args.port} (start one: bash scripts/run)")

    def finish(call: int) -> dict[str, Any]:
        """Sends what the session queued and feeds it what arrives, until `call` is done."""
        while True:
            for message in core.take_publishes():
                publish(client, message)
            for event in core.take_events():
                if event["kind"] == "completed" and event["call"] == call:
                    if "error" in event:
                        raise event["error"]
                    return event
            deadline = core.next_deadline()
            wait = 1.0 if deadline is None else max(0.0, deadline / 1000 - time.time())
            try:
                core.handle(inbox.get(timeout=min(wait, 1.0)))
            except queue.Empty:
                core.expire()

    written = finish(core.call({"op": "SET", "key": b"greeting", "value": b"hello from paho"}))
    print(f"SET applied={written['applied']} version={written['version']}")
    read = finish(core.call({"op": "GET", "key": b"greeting"}))
    print(f"GET {read['response']['value'].decode()!r} version={read['version']}")
    lease = finish(core.lease(b"paho-example/lock", 5000, 0))
    print(f"lease fencing token: {lease['result']}")
    released = finish(core.release_lease(lease["call"]))
    print(f"released: {released['result']}")
    client.publish(core.presence_topic, b"gone", qos=1).wait_for_publish(5)
    client.disconnect()
    client.loop_stop()


if __name__ == "__main__":
    main()
