"""A device and an app using the AWS IoT Device SDK for Python v2 (IotShadowClientV2,
unchanged) against mqstore's device shadows through a plain MQTT 5 broker (no TLS).

    python shadow_device.py --host 127.0.0.1 --port 1883 --thing my-thing

Steps, on the classic shadow and on a named one: a get before any update is rejected (404);
the app sets `desired` and the device's delta and documents streams see it; the device
reports, and a get shows what still differs; an update with a stale version is rejected
(409); `null` removes a field; delete, then a get is 404 again and the next update's version
follows the deleted one. Prints one line per step; exits 1 on the first failure.
"""

import queue

from awscrt import mqtt_request_response
from awsiot import ServiceStreamOptions, V2ServiceException, iotshadow

from jobs_device import TIMEOUT, connect, device_args, run


def shadow_client(client) -> iotshadow.IotShadowClientV2:
    return iotshadow.IotShadowClientV2(
        client,
        mqtt_request_response.ClientOptions(
            max_request_response_subscriptions=4,
            max_streaming_subscriptions=4,
            operation_timeout_in_seconds=TIMEOUT,
        ),
    )


def rejected(future, code: int) -> str:
    """The message of the rejection `future` must end with."""
    try:
        answer = future.result(TIMEOUT)
    except V2ServiceException as e:
        assert e.modeled_error is not None and e.modeled_error.code == code, e
        return e.modeled_error.message
    raise AssertionError(f"accepted, not rejected with {code}: {answer}")


class Shadow:
    """One shadow (classic, or named) through the SDK's calls for it."""

    def __init__(self, client: iotshadow.IotShadowClientV2, thing: str, name: str | None):
        self.client, self.thing, self.name = client, thing, name

    def request(self, kind: str, **fields):
        if self.name is None:
            cls = {"get": "GetShadowRequest", "update": "UpdateShadowRequest"}.get(
                kind, "DeleteShadowRequest"
            )
            call = getattr(self.client, f"{kind}_shadow")
            return call(getattr(iotshadow, cls)(thing_name=self.thing, **fields))
        cls = {"get": "GetNamedShadowRequest", "update": "UpdateNamedShadowRequest"}.get(
            kind, "DeleteNamedShadowRequest"
        )
        call = getattr(self.client, f"{kind}_named_shadow")
        request = getattr(iotshadow, cls)(thing_name=self.thing, shadow_name=self.name, **fields)
        return call(request)

    def streams(self, deltas: queue.Queue, documents: queue.Queue, established: queue.Queue):
        def status(event):
            kind = mqtt_request_response.SubscriptionStatusEventType.SUBSCRIPTION_ESTABLISHED
            if event.type == kind:
                established.put(True)

        if self.name is None:
            opened = [
                self.client.create_shadow_delta_updated_stream(
                    iotshadow.ShadowDeltaUpdatedSubscriptionRequest(thing_name=self.thing),
                    ServiceStreamOptions(deltas.put, status),
                ),
                self.client.create_shadow_updated_stream(
                    iotshadow.ShadowUpdatedSubscriptionRequest(thing_name=self.thing),
                    ServiceStreamOptions(documents.put, status),
                ),
            ]
        else:
            named = {"thing_name": self.thing, "shadow_name": self.name}
            opened = [
                self.client.create_named_shadow_delta_updated_stream(
                    iotshadow.NamedShadowDeltaUpdatedSubscriptionRequest(**named),
                    ServiceStreamOptions(deltas.put, status),
                ),
                self.client.create_named_shadow_updated_stream(
                    iotshadow.NamedShadowUpdatedSubscriptionRequest(**named),
                    ServiceStreamOptions(documents.put, status),
                ),
            ]
        for stream in opened:
            stream.open()
        for _ in opened:
            established.get(timeout=TIMEOUT)
        return opened


def flow(device: Shadow, app: Shadow, label: str) -> list:
    deltas: queue.Queue = queue.Queue()
    documents: queue.Queue = queue.Queue()
    streams = device.streams(deltas, documents, queue.Queue())
    print(f"{label}: delta and documents streams open")

    message = rejected(device.request("get"), 404)
    assert message.startswith("No shadow exists with name"), message
    print(f"{label}: get before any update rejected, 404")

    desired = {"color": "red", "power": "on", "led": {"r": 10, "g": 0}}
    accepted = app.request("update", state=iotshadow.ShadowState(desired=desired)).result(TIMEOUT)
    assert accepted.version == 1 and accepted.state.desired == desired, accepted
    delta = deltas.get(timeout=TIMEOUT)
    assert delta.state == desired and delta.version == 1, delta.state
    document = documents.get(timeout=TIMEOUT)
    assert document.previous is None and document.current.version == 1, document
    assert document.current.state.desired == desired, document.current.state
    print(f"{label}: the app set desired; the device saw its delta and documents")

    reported = {"color": "red", "power": "off", "led": {"r": 10, "g": 0}}
    accepted = device.request("update", state=iotshadow.ShadowState(reported=reported)).result(
        TIMEOUT
    )
    assert accepted.version == 2, accepted
    document = documents.get(timeout=TIMEOUT)
    assert document.previous.version == 1 and document.current.version == 2, document
    got = device.request("get").result(TIMEOUT)
    assert got.version == 2 and got.state.delta == {"power": "on"}, got.state
    assert got.state.reported == reported and got.state.desired == desired, got.state
    print(f"{label}: the device reported; get shows the delta {got.state.delta}")

    stale = app.request("update", state=iotshadow.ShadowState(desired={"power": "off"}), version=1)
    assert rejected(stale, 409) == "Version conflict"
    accepted = app.request(
        "update", state=iotshadow.ShadowState(desired={"power": "off", "led": None}), version=2
    ).result(TIMEOUT)
    assert accepted.version == 3, accepted
    got = device.request("get").result(TIMEOUT)
    assert got.state.desired == {"color": "red", "power": "off"}, got.state
    assert got.state.delta is None, got.state
    print(f"{label}: a stale version rejected, 409; null removed a field; no delta left")

    deleted = app.request("delete").result(TIMEOUT)
    assert deleted.version == 3, deleted
    rejected(device.request("get"), 404)
    accepted = device.request(
        "update", state=iotshadow.ShadowState(reported={"power": "off"})
    ).result(TIMEOUT)
    assert accepted.version == 4, accepted
    print(f"{label}: deleted at version 3; the next shadow is version 4")
    return streams


def main() -> int:
    args = device_args(__doc__)
    thing = args.thing

    device_mqtt = connect(args.host, args.port, thing)
    app_mqtt = connect(args.host, args.port, f"{thing}-app")
    device, app = shadow_client(device_mqtt), shadow_client(app_mqtt)
    streams = flow(Shadow(device, thing, None), Shadow(app, thing, None), "classic")
    streams += flow(Shadow(device, thing, "config"), Shadow(app, thing, "config"), "named")

    # The streams and the request-response clients go before the MQTT clients they use.
    del streams, device, app
    device_mqtt.stop()
    app_mqtt.stop()
    print("OK")
    return 0


if __name__ == "__main__":
    run(main)
