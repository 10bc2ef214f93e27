"""What the Python-hosted runners of the session traces share (bindings-c/tests/conformance.py
drives the C library with ctypes, bindings-python/tests/test_conformance.py the Python
package): where the traces are, the matching rule every runner uses, and the trace's jobs
arguments as the wire takes them (the C and Python APIs take AWS's JSON).
"""

import json
from pathlib import Path

T0 = 1_700_000_000_000
HERE = Path(__file__).resolve().parent
KINDS = {
    k["code"]: k["name"]
    for k in json.loads((HERE.parent / "error-kinds.json").read_text())
}


def traces():
    """Every trace: (file name, trace)."""
    return [
        (path.name, json.loads(path.read_text()))
        for path in sorted(HERE.glob("*.json"))
    ]


def matches(expected, actual):
    """The Rust runner's rule: objects field by field, lists item by item, else exactly."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and matches(v, actual[k]) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(matches(e, a) for e, a in zip(expected, actual))
        )
    return expected == actual and type(expected) is type(actual)


def device_call(arg):
    """The trace's device call as AWS's wire: the topic's end and its JSON payload."""
    api = arg["api"]
    body = {}
    if arg.get("statusDetails"):
        body["statusDetails"] = arg["statusDetails"]
    if "stepTimeoutMinutes" in arg:
        body["stepTimeoutInMinutes"] = arg["stepTimeoutMinutes"]
    if "executionNumber" in arg:
        body["executionNumber"] = arg["executionNumber"]
    if api == "getPending":
        return "get", {}
    if api == "startNext":
        return "start-next", body
    if api == "describe":
        body["includeJobDocument"] = arg.get("includeDocument", True)
        return f"{arg.get('jobId', '$next')}/get", body
    if api == "update":
        for field in ("status", "expectedVersion"):
            if field in arg:
                body[field] = arg[field]
        if arg.get("includeState"):
            body["includeJobExecutionState"] = True
        if arg.get("includeDocument"):
            body["includeJobDocument"] = True
        return f"{arg['jobId']}/update", body
    raise ValueError(f"unknown device call {api}")


def operator_call(arg):
    """The trace's operator call as mqstore's operator API takes it (AWS's field names)."""
    body = {
        k: v
        for k, v in arg.items()
        if k not in ("thing", "inProgressTimeoutMinutes", "maxRetries")
    }
    if "thing" in arg:
        body["thingName"] = arg["thing"]
    if "inProgressTimeoutMinutes" in arg:
        body["timeoutConfig"] = {
            "inProgressTimeoutInMinutes": arg["inProgressTimeoutMinutes"]
        }
    if "maxRetries" in arg:
        body["jobExecutionsRetryConfig"] = {
            "criteriaList": [
                {"failureType": "ALL", "numberOfRetries": arg["maxRetries"]}
            ]
        }
    return body


def named(bindings, name, value):
    """How a trace names `value` (correlation data, a clientToken): `name` is bound to it the
    first time; after that, `name` if it is the same value, "(another)" if not, and
    "(unnamed)" when the trace gave no name."""
    if name is None:
        return "(unnamed)"
    bindings.setdefault(name, value)
    return name if bindings[name] == value else "(another)"


def with_json(out, payload, expected, tokens):
    """Adds a JSON object payload to `out` as `json`, its clientToken as `clientToken` (by
    the name the expected publish gives it)."""
    try:
        body = json.loads(payload)
    except ValueError:
        return
    if isinstance(body, dict):
        if isinstance(body.get("clientToken"), str):
            token = body.pop("clientToken")
            out["clientToken"] = named(tokens, expected.get("clientToken"), token)
        out["json"] = body
