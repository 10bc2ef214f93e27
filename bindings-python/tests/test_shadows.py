"""Device shadows (AWS IoT's Device Shadow API) through mqstore serve, from both clients."""

from __future__ import annotations

import asyncio
from typing import Any

import mqstore
import pytest
from harness import Server
from mqstore import errors


def refused(error: pytest.ExceptionInfo[errors.StatusError]) -> tuple[object, str]:
    """A shadow refusal's status and AWS's message (the text after the status)."""
    return error.value.status, error.value.message.split(": ", 1)[1]


def test_a_shadow_from_desired_to_reported(
    server: Server, client: mqstore.Client, key: str
) -> None:
    thing = "py-lamp-" + key.rsplit("_", 1)[-1]
    with mqstore.Client("127.0.0.1", server.broker.port) as device_client:
        device = device_client.shadow(thing)
        app = client.shadow(thing)
        assert (device.thing, device.name) == (thing, None)
        with pytest.raises(errors.StatusError) as missing:
            device.get()
        assert refused(missing) == (404, f"No shadow exists with name: '{thing}'")

        accepted = app.update({"desired": {"on": True, "level": 3}})
        assert accepted["version"] == 1
        assert accepted["state"] == {"desired": {"on": True, "level": 3}}
        delta = device.next_notification(timeout=10)
        assert delta is not None and delta["stream"] == "delta"
        assert delta["body"]["state"] == {"on": True, "level": 3}
        documents = device.next_notification(timeout=10)
        assert documents is not None and documents["stream"] == "documents"
        assert documents["body"]["current"]["version"] == 1

        device.update({"reported": {"on": True, "level": 1}}, version=1)
        got = device.get()
        assert got["state"]["delta"] == {"level": 3} and got["version"] == 2
        with pytest.raises(errors.StatusError) as stale:
            app.update({"desired": {"level": 1}}, version=1)
        assert refused(stale) == (409, "Version conflict")
        app.update({"desired": {"level": None}})
        assert "level" not in device.get()["state"]["desired"], "None removes a field"

        config = device_client.shadow(thing, "config")
        assert config.name == "config"
        with pytest.raises(errors.StatusError) as no_config:
            config.get()
        assert no_config.value.status == 404
        assert config.update({"reported": {"fw": "1.0"}})["version"] == 1
        assert app.delete()["version"] == 3
        with pytest.raises(errors.StatusError):
            device.get()
        assert config.get()["state"]["reported"] == {"fw": "1.0"}
        again = device.update({"reported": {"on": False}})
        assert again["version"] == 4, "the next shadow follows the deleted one's version"


def test_shadow_refusals_change_nothing(client: mqstore.Client, key: str) -> None:
    shadow = client.shadow("py-refused-" + key.rsplit("_", 1)[-1])
    shadow.update({"reported": {"ok": True}})
    refusals: list[tuple[dict[str, Any], int, str]] = [
        ({"desired": [1]}, 400, "Desired node must be an object"),
        ({"color": "red"}, 400, "State contains an invalid node"),
        ({"desired": {"big": "x" * 9000}}, 413, "The payload exceeds the maximum size allowed"),
    ]
    for state, status, message in refusals:
        with pytest.raises(errors.StatusError) as e:
            shadow.update(state)
        assert refused(e) == (status, message)
    assert shadow.get()["version"] == 1, "the refusals changed nothing"
    assert shadow.get()["state"] == {"reported": {"ok": True}}


def test_shadow_bad_arguments(client: mqstore.Client) -> None:
    shadow = client.shadow("py-args")
    with pytest.raises(TypeError, match="the state must be a dict"):
        shadow.update([1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="the state must be JSON-serializable"):
        shadow.update({"desired": {"when": object()}})
    with pytest.raises(ValueError, match="version must not be negative"):
        shadow.update({"desired": {}}, version=-1)
    with pytest.raises(TypeError, match="thing must be"):
        client.shadow(7)  # type: ignore[arg-type]
    # A thing or shadow name the service would refuse is refused before anything is sent.
    with pytest.raises(errors.StatusError) as bad_thing:
        client.shadow("lamp/1")
    assert bad_thing.value.status == 400
    with pytest.raises(errors.StatusError):
        client.shadow("lamp", "a name with spaces")


def test_shadows_from_asyncio(server: Server, key: str) -> None:
    thing = "py-async-lamp-" + key.rsplit("_", 1)[-1]

    async def main() -> None:
        async with mqstore.AsyncClient("127.0.0.1", server.broker.port) as c:
            shadow = await c.shadow(thing, "settings")
            assert (shadow.thing, shadow.name) == (thing, "settings")
            with pytest.raises(errors.StatusError) as missing:
                await shadow.get()
            assert missing.value.status == 404
            updates = await asyncio.gather(
                *(shadow.update({"desired": {f"f{i}": i}}) for i in range(5))
            )
            assert sorted(u["version"] for u in updates) == [1, 2, 3, 4, 5]
            got = await shadow.get()
            assert got["state"]["desired"] == {f"f{i}": i for i in range(5)}
            streams = []
            async for notification in shadow:
                streams.append(notification["stream"])
                if streams.count("documents") == 5:
                    break
            assert streams.count("delta") == 5, streams
            assert await shadow.next_notification(timeout=0.2) is None
            with pytest.raises(errors.StatusError) as stale:
                await shadow.update({"reported": {"x": 1}}, version=1)
            assert stale.value.status == 409
            assert (await shadow.delete())["version"] == 5

    asyncio.run(main())
