"""The session traces (testdata/session/*.json) through ``mqstore.ClientCore``: the same
inputs must give the same publishes and events as the Rust core, the npm package and the C
library give (each runs the same files). The format is in testdata/session/README.md."""

from __future__ import annotations

import json
import sys
from typing import Any

import mqstore
import pytest
from harness import REPO
from mqstore import errors

sys.path.insert(0, str(REPO / "testdata" / "session"))
from traces import (  # type: ignore[import-not-found]
    KINDS,
    T0,
    matches,
    named,
    traces,
    with_json,
)

TRACES = traces()


def text(data: bytes) -> Any:
    """Bytes as a trace writes them: text when they are UTF-8, else ``{"hex": ...}``."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return {"hex": data.hex()}


class Run:
    def __init__(self, trace: dict[str, Any]) -> None:
        self.core = mqstore.ClientCore(
            trace["clientId"], seed=7, timeout_ms=trace.get("timeoutMs", 0)
        )
        self.now = T0
        self.calls: dict[str, int] = {}
        self.correlations: dict[str, bytes] = {}
        self.tokens: dict[str, str] = {}

    def call_name(self, call: int) -> Any:
        return next((name for name, id_ in self.calls.items() if id_ == call), call)

    def plain(self, value: Any) -> Any:
        """A value from the package as plain JSON: bytes as text, versions as their text."""
        if isinstance(value, bytes):
            return text(value)
        if isinstance(value, mqstore.Hlc):
            return str(value)
        if isinstance(value, errors.MqstoreError):
            return self.error(value)
        if isinstance(value, list):
            return [self.plain(v) for v in value]
        if isinstance(value, dict):
            return {k: self.plain(v) for k, v in value.items() if v is not None}
        return value

    def error(self, e: errors.MqstoreError) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": KINDS.get(e.code, f"(no kind for {e.code})"), "code": e.code}
        for attribute, field in (
            ("text", "text"),
            ("jobs_code", "jobsCode"),
            ("command_id", "commandId"),
            ("reason_code", "reasonCode"),
        ):
            if getattr(e, attribute, None) is not None:
                out[field] = getattr(e, attribute)
        return out

    def event(self, event: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self.plain(event)
        for field in ("call", "lease"):
            if field in event:
                out[field] = self.call_name(event[field])
        # None is the lease's "not held" and a deletion's value: keep it where it means that.
        if event.get("kind") == "changed":
            out["value"] = self.plain(event["value"])
        if event.get("kind") == "shadow-notification":
            out["name"] = event["name"]  # None: the classic shadow
        if event.get("kind") == "completed" and "result" in event and event["result"] is None:
            out["result"] = None
        if event.get("kind") == "completed" and "version" in event:
            out["version"] = self.plain(event["version"])
        if isinstance(out.get("result"), dict):
            for snake, camel in (
                ("content_type", "contentType"),
                ("device_status", "deviceStatus"),
            ):
                if snake in out["result"]:
                    out["result"][camel] = out["result"].pop(snake)
        return out

    def outgoing(self, publish: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "topic": publish["topic"],
            "payload": text(publish["payload"]),
            "userProperties": [list(p) for p in publish["user_properties"]],
        }
        if publish["call"] is not None:
            out["call"] = self.call_name(publish["call"])
        for snake, camel in (
            ("response_topic", "responseTopic"),
            ("content_type", "contentType"),
            ("message_expiry_interval", "messageExpiryInterval"),
        ):
            if publish[snake] is not None:
                out[camel] = publish[snake]
        with_json(out, publish["payload"], expected, self.tokens)
        if publish["correlation_data"] is not None:
            name = expected.get("correlation")
            out["correlation"] = named(self.correlations, name, publish["correlation_data"])
        return out

    def incoming(self, value: dict[str, Any]) -> dict[str, Any]:
        if "json" in value:
            body = dict(value["json"])
            if "clientToken" in value:
                body["clientToken"] = self.tokens[value["clientToken"]]
            payload = json.dumps(body).encode()
        else:
            payload = value.get("payload", "").encode()
        message: dict[str, Any] = {
            "topic": value["topic"],
            "payload": payload,
            "user_properties": [tuple(p) for p in value.get("userProperties", [])],
            "content_type": value.get("contentType"),
            "response_topic": value.get("responseTopic"),
            "message_expiry_interval": value.get("messageExpiryInterval"),
        }
        if "correlation" in value:
            message["correlation_data"] = self.correlations[value["correlation"]]
        return message

    def act(self, action: dict[str, Any]) -> dict[str, Any]:
        ((verb, arg),) = action.items()
        core, now = self.core, self.now
        if verb == "call":
            request: dict[str, Any] = {"op": arg["op"]}
            for field in ("key", "value", "pattern", "token"):
                if field in arg:
                    request[field] = arg[field].encode()
            for field, name in (("condition", "condition"), ("pxMs", "px_ms"), ("stop", "stop")):
                if field in arg:
                    request[name] = arg[field]
            token = mqstore.Hlc.parse(arg["fencingToken"]) if "fencingToken" in arg else None
            call = core.call(
                request,
                timeout_ms=arg.get("timeoutMs"),
                persist=arg.get("persist", False),
                fencing_token=token,
                now_ms=now,
            )
            return {"call": call}
        if verb == "observe":
            return {"call": core.observe(arg.encode(), now_ms=now)}
        if verb == "unobserve":
            return {"call": core.unobserve(arg.encode(), now_ms=now)}
        if verb == "lease":
            return {
                "call": core.lease(arg["key"].encode(), arg["ttlMs"], arg.get("waitMs"), now_ms=now)
            }
        if verb == "releaseLease":
            return {"call": core.release_lease(self.calls[arg], now_ms=now)}
        if verb == "jobsOperate":
            return {"call": core.jobs_operate(arg, now_ms=now)}
        if verb == "jobsDevice":
            call = core.jobs_device(arg["thing"], arg["api"], arg.get("payload"), now_ms=now)
            return {"call": call}
        if verb == "command":
            call = core.command(
                arg["topic"],
                arg["payload"].encode(),
                profile=arg.get("profile"),
                timeout_ms=arg.get("timeoutMs"),
                mode=arg.get("mode", "await"),
                content_type=arg.get("contentType"),
                headers=list(arg.get("headers", {}).items()),
                now_ms=now,
            )
            return {"call": call}
        if verb == "commandStatus":
            return {"call": core.command_status(arg, now_ms=now)}
        if verb == "shadow":
            call = core.shadow(
                arg["thing"], arg.get("name"), arg["op"], arg.get("body"), now_ms=now
            )
            return {"call": call}
        if verb == "useShadow":
            return {"filters": core.use_shadow(arg["thing"], arg.get("name"))}
        if verb == "leaveShadow":
            return {"filters": core.leave_shadow(arg["thing"], arg.get("name"))}
        if verb == "actAs":
            return {"filters": core.act_as(arg)}
        if verb == "leave":
            return {"filters": core.leave(arg)}
        if verb == "watchCommands":
            return {"filters": core.watch_commands()}
        if verb == "unwatchCommands":
            return {"filters": core.unwatch_commands()}
        if verb == "subscriptions":
            return {"filters": core.subscriptions()}
        if verb == "receive":
            core.handle(self.incoming(arg), now_ms=now)
        elif verb == "clock":
            self.now = T0 + arg
            core.expire(now_ms=self.now)
        elif verb == "connectionLost":
            core.connection_lost()
        elif verb == "resume":
            core.resume(now_ms=now)
        elif verb == "publishRefused":
            core.publish_refused(self.calls[arg["call"]], arg["code"])
        elif verb == "setMaxPacketSize":
            core.set_max_packet_size(arg)
        else:
            raise AssertionError(f"unknown action {verb}")
        return {}


def run_trace(name: str, trace: dict[str, Any]) -> None:
    run = Run(trace)
    for number, step in enumerate(trace["steps"], 1):
        where = f"{name}, step {number}"
        try:
            outcome = run.act(step["do"])
        except errors.MqstoreError as e:
            assert "error" in step, f"{where}: {e!r}"
            raised = run.error(e)
            assert matches(step["error"], raised), f"{where}: error {raised}"
        else:
            assert "error" not in step, f"{where}: no error, expected {step['error']}"
            if "call" in outcome and "name" in step:
                run.calls[step["name"]] = outcome["call"]
            if "filters" in step:
                assert outcome["filters"] == step["filters"], f"{where}: filters"
        expected_publishes = step.get("publishes", [])
        publishes = [
            run.outgoing(p, expected_publishes[i] if i < len(expected_publishes) else {})
            for i, p in enumerate(run.core.take_publishes())
        ]
        events = [run.event(e) for e in run.core.take_events()]
        checks: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]] = [
            ("publishes", expected_publishes, publishes),
            ("events", step.get("events", []), events),
        ]
        for what, expected, actual in checks:
            assert len(expected) == len(actual) and all(
                matches(e, a) for e, a in zip(expected, actual)
            ), f"{where}: {what}\n  expected {expected}\n  actual   {actual}"
        if "deadline" in step:
            deadline = run.core.next_deadline()
            assert (None if deadline is None else deadline - T0) == step["deadline"], (
                f"{where}: next deadline"
            )


def test_the_session_traces_are_there() -> None:
    assert len(TRACES) >= 8


@pytest.mark.parametrize("name,trace", TRACES, ids=[name for name, _ in TRACES])
def test_session_trace(name: str, trace: dict[str, Any]) -> None:
    run_trace(name, trace)


def test_a_trace_that_expects_other_publishes_fails() -> None:
    wrong = {
        "clientId": "wrong",
        "steps": [
            {"do": {"call": {"op": "GET", "key": "k"}}, "publishes": [{"topic": "not/the/topic"}]}
        ],
    }
    with pytest.raises(AssertionError, match="publishes"):
        run_trace("wrong.json", wrong)


def test_bad_input_raises_and_queues_nothing() -> None:
    core = mqstore.ClientCore("bad")
    with pytest.raises(ValueError):
        core.call({"op": "PING"})
    with pytest.raises(ValueError):
        core.jobs_operate({"op": "noSuchCall"})
    with pytest.raises(ValueError):
        core.command("", b"x")
    with pytest.raises(errors.JobsError):
        core.jobs_device("pump-1", "get")  # not acting as it
    with pytest.raises(ValueError):
        core.lease(b"k", 0, None)
    assert core.take_publishes() == []
    assert core.take_events() == []
