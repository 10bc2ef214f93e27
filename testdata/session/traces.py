"""What the Python-hosted runners of the session traces share (bindings-c/tests/conformance.py
drives the C library with ctypes, bindings-python/tests/test_conformance.py the Python
package): where the traces are and the matching rule every runner uses. The traces' jobs
calls are the wire's JSON already, as the C and Python APIs take it.
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
