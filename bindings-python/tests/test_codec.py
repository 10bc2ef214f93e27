"""The shared wire vectors (testdata/state-store.json) through ``mqstore.codec``."""

from __future__ import annotations

import json
from typing import Any

import mqstore
import pytest
from conftest import VECTORS
from mqstore import codec
from mqstore.errors import ServiceError

V: dict[str, Any] = json.loads(VECTORS.read_text())


def as_bytes(command: dict[str, Any]) -> dict[str, Any]:
    """A vector's command or decoded object with its strings of bytes as ``bytes``."""
    out: dict[str, Any] = {}
    for name, value in command.items():
        if name in ("key", "value", "pattern", "token"):
            out[name] = value.encode()
        elif name == "keys":
            out[name] = [k.encode() for k in value]
        else:
            out[name] = value
    return out


def names(section: str) -> list[str]:
    return [v.get("name", v["bytes"][:30]) for v in V[section]]


@pytest.mark.parametrize("vector", V["requests"], ids=names("requests"))
def test_requests_encode_to_the_vector_bytes_and_decode_back(vector: dict[str, Any]) -> None:
    command = as_bytes(vector["command"])
    wire = vector["bytes"].encode()
    assert codec.encode_request(command) == wire
    assert codec.decode_request(wire) == command


@pytest.mark.parametrize(
    "vector", V["requests_accepted_by_engine_only"], ids=names("requests_accepted_by_engine_only")
)
def test_lower_case_verbs_decode_like_their_upper_case_twins(vector: dict[str, Any]) -> None:
    twin = next(r for r in V["requests"] if r["name"] == vector["same_as"])
    assert codec.decode_request(vector["bytes"].encode()) == as_bytes(twin["command"])


@pytest.mark.parametrize("vector", V["bad_requests"], ids=names("bad_requests"))
def test_bad_requests_raise_the_state_stores_error(vector: dict[str, Any]) -> None:
    with pytest.raises(ServiceError) as raised:
        codec.decode_request(vector["bytes"].encode())
    assert raised.value.text == vector["error"]
    assert vector["error"] in str(raised.value)


@pytest.mark.parametrize("vector", V["responses"], ids=names("responses"))
def test_responses_encode_and_decode(vector: dict[str, Any]) -> None:
    decoded = as_bytes(vector["decoded"])
    wire = vector["bytes"].encode()
    assert codec.encode_response(decoded) == wire
    assert codec.decode_response(wire) == decoded


@pytest.mark.parametrize("vector", V["notifications"], ids=names("notifications"))
def test_notifications_decode(vector: dict[str, Any]) -> None:
    assert codec.decode_notification(vector["bytes"].encode()) == as_bytes(vector["decoded"])


def test_malformed_responses_and_notifications_raise_value_error() -> None:
    with pytest.raises(ValueError, match="malformed"):
        codec.decode_response(b"$5\r\nabc\r\n")
    with pytest.raises(ValueError, match="malformed"):
        codec.decode_notification(b"*2\r\n$6\r\nNOTIFY\r\n")


def test_encoding_a_bad_request_dict_says_what_is_missing() -> None:
    with pytest.raises(ValueError, match='"value"'):
        codec.encode_request({"op": "SET", "key": b"k"})
    with pytest.raises(ValueError, match="unknown op"):
        codec.encode_request({"op": "PING"})
    with pytest.raises(ValueError, match="condition"):
        codec.encode_request({"op": "SET", "key": b"k", "value": b"v", "condition": "XX"})


def test_topics() -> None:
    topics = V["topics"]
    assert topics["invoke"] == codec.INVOKE_TOPIC
    example = topics["notify_example"]
    assert codec.notify_topic(example["client_id"], example["key"].encode()) == example["topic"]


@pytest.mark.parametrize("vector", V["hlc"]["format"])
def test_hlc_formats_padded(vector: dict[str, Any]) -> None:
    hlc = mqstore.Hlc(vector["wall_ms"], vector["counter"], vector["node"])
    assert str(hlc) == vector["text"]
    assert mqstore.Hlc.parse(vector["text"]) == hlc


@pytest.mark.parametrize("vector", V["hlc"]["parse_ok"])
def test_hlc_parses(vector: dict[str, Any]) -> None:
    hlc = codec.Hlc.parse(vector["text"])
    assert (hlc.wall_ms, hlc.counter, hlc.node) == (
        vector["wall_ms"],
        vector["counter"],
        vector["node"],
    )


@pytest.mark.parametrize("text", V["hlc"]["parse_err"])
def test_hlc_refuses_malformed_text(text: str) -> None:
    with pytest.raises(ValueError, match="HLC"):
        mqstore.Hlc.parse(text)


@pytest.mark.parametrize("pair", V["hlc"]["order"])
def test_hlc_orders(pair: list[str]) -> None:
    low, high = (mqstore.Hlc.parse(t) for t in pair)
    assert low < high and high > low and low <= high and low != high
    assert sorted([high, low]) == [low, high]
    assert len({low, high, mqstore.Hlc.parse(pair[0])}) == 2


def test_hlc_repr_and_invalid_node() -> None:
    assert repr(mqstore.Hlc(1, 2, "n")) == "Hlc('000000000000001:00002:n')"
    with pytest.raises(ValueError, match="':'"):
        mqstore.Hlc(1, 2, "a:b")
