"""The session traces (testdata/session/*.json) through the C library's bring-your-own-MQTT
layer: each step becomes the `mqstore_core_*` call a gateway's firmware would make, and what
comes out of `mqstore_core_next_publish` / `mqstore_core_next_event` must be what the trace
says (the same files the Rust core and the npm package run).

Usage: python3 conformance.py path/to/libmqstore.so

The C API speaks in typed events (`applied`, `found`, `deleted`, a `version` struct, a status
and a message); they are turned into the traces' neutral form here. What a C event does not
carry is not compared, and the list is fixed: an error's detail fields (`text`, `jobsCode`,
`commandId`, `reasonCode`; C has its status and a message) and a store answer's raw
response for DEL/VDEL (C has `deleted`). Jobs calls take AWS's wire JSON in C, so the trace's
arguments are turned into it first.
"""

import ctypes as C
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "testdata" / "session"))
from traces import (
    KINDS,
    T0,
    matches,
    named,
    traces,
    with_json,
)

NO_CALL = NO_DEADLINE = WAIT_FOREVER = 2**64 - 1

u8p = C.POINTER(C.c_uint8)


class Hlc(C.Structure):
    _fields_ = [
        ("wall_ms", C.c_uint64),
        ("counter", C.c_uint32),
        ("node", C.c_char * 256),
    ]


class UserProperty(C.Structure):
    _fields_ = [("name", C.c_char_p), ("value", C.c_char_p)]


class Publish(C.Structure):
    _fields_ = [
        ("topic", C.c_char_p),
        ("payload", u8p),
        ("payload_len", C.c_size_t),
        ("qos", C.c_uint8),
        ("payload_format_indicator", C.c_uint8),
        ("message_expiry_interval", C.c_uint32),
        ("content_type", C.c_char_p),
        ("response_topic", C.c_char_p),
        ("correlation_data", u8p),
        ("correlation_data_len", C.c_size_t),
        ("user_properties", C.POINTER(UserProperty)),
        ("user_property_count", C.c_size_t),
        ("call", C.c_uint64),
    ]


class Bytes(C.Structure):
    _fields_ = [("data", u8p), ("len", C.c_size_t)]


class Event(C.Structure):
    _fields_ = [
        ("kind", C.c_int),
        ("call", C.c_uint64),
        ("op", C.c_int),
        ("status", C.c_int),
        ("error", C.c_char_p),
        ("applied", C.c_bool),
        ("found", C.c_bool),
        ("deleted", C.c_int),
        ("key", u8p),
        ("key_len", C.c_size_t),
        ("value", u8p),
        ("value_len", C.c_size_t),
        ("synthetic", C.c_bool),
        ("gap", C.c_bool),
        ("has_version", C.c_bool),
        ("version", Hlc),
        ("keys", C.POINTER(Bytes)),
        ("key_count", C.c_size_t),
        ("scan_token", u8p),
        ("scan_token_len", C.c_size_t),
        ("json", C.c_char_p),
        ("thing", C.c_char_p),
        ("shadow_name", C.c_char_p),
    ]


class SetOptions(C.Structure):
    _fields_ = [
        ("condition", C.c_int),
        ("expires_ms", C.c_uint64),
        ("persist", C.c_bool),
        ("fencing_token", C.POINTER(Hlc)),
        ("timeout_ms", C.c_uint32),
    ]


class CommandOptions(C.Structure):
    _fields_ = [
        ("content_type", C.c_char_p),
        ("profile", C.c_char_p),
        ("timeout_ms", C.c_uint32),
        ("mode", C.c_int),
        ("headers", C.POINTER(UserProperty)),
        ("header_count", C.c_size_t),
    ]


OPS = {
    1: "SET",
    2: "GET",
    3: "DEL",
    4: "VDEL",
    5: "KEYNOTIFY",
    6: "SCAN",
    7: "jobs",
    8: "command",
    9: "commandStatus",
    10: "lease",
    11: "releaseLease",
    12: "commandDefinitions",
    13: "shadow",
}
DELETED = {0: "deleted", 1: "absent", 2: "value_mismatch"}
MODES = {"await": 0, "oneway": 1, "detached": 2}


class Failure(Exception):
    pass


def text(data, length):
    raw = C.string_at(data, length) if length else b""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": raw.hex()}


def without_details(error):
    """An expected error as C can state it: its kind (and code)."""
    return {k: v for k, v in error.items() if k in ("kind", "code")}


class Run:
    def __init__(self, lib, trace):
        self.lib = lib
        self.core = C.c_void_p()
        self.check(
            lib.mqstore_core_new(
                trace["clientId"].encode(),
                7,
                trace.get("timeoutMs", 0),
                C.byref(self.core),
            )
        )
        self.now = T0
        self.calls = {}
        self.correlations = {}
        self.tokens = {}
        self.keep = []  # buffers the library borrows during a call

    def check(self, status):
        if status != 0:
            message = self.lib.mqstore_last_error().decode()
            raise StatusError(status, message)

    def subscriptions(self):
        count = self.lib.mqstore_core_subscription_count(self.core)
        return [
            self.lib.mqstore_core_subscription(self.core, i).decode()
            for i in range(count)
        ]

    def call_name(self, call):
        for name, id_ in self.calls.items():
            if id_ == call:
                return name
        return call

    def hlc(self, version):
        buf = C.create_string_buffer(400)
        length = C.c_size_t()
        self.check(
            self.lib.mqstore_hlc_format(
                C.byref(version), buf, len(buf), C.byref(length)
            )
        )
        return buf.value.decode()

    def buf(self, data):
        raw = data.encode() if isinstance(data, str) else data
        array = (C.c_uint8 * max(len(raw), 1)).from_buffer_copy(raw or b"\0")
        self.keep.append(array)
        return array, len(raw)

    def act(self, action):
        ((verb, arg),) = action.items()
        lib, core, now, call = self.lib, self.core, self.now, C.c_uint64()
        out = C.byref(call)
        if verb == "call":
            op = arg["op"]
            key, key_len = self.buf(arg.get("key", arg.get("pattern", "")))
            if op == "SET":
                value, value_len = self.buf(arg["value"])
                options = SetOptions()
                options.condition = {"NX": 1, "NEX": 2}.get(arg.get("condition"), 0)
                options.expires_ms = arg.get("pxMs", 0)
                options.persist = arg.get("persist", False)
                options.timeout_ms = arg.get("timeoutMs", 0)
                if "fencingToken" in arg:
                    token = Hlc()
                    self.check(
                        lib.mqstore_hlc_parse(
                            arg["fencingToken"].encode(), C.byref(token)
                        )
                    )
                    self.keep.append(token)
                    options.fencing_token = C.pointer(token)
                self.check(
                    lib.mqstore_core_set(
                        core, key, key_len, value, value_len, C.byref(options), now, out
                    )
                )
            elif op == "GET":
                if "timeoutMs" in arg:
                    raise Failure(
                        "C's GET takes no per-call timeout: write the trace with a SET"
                    )
                self.check(lib.mqstore_core_get(core, key, key_len, now, out))
            elif op == "DEL":
                self.check(lib.mqstore_core_del(core, key, key_len, None, now, out))
            elif op == "VDEL":
                value, value_len = self.buf(arg["value"])
                self.check(
                    lib.mqstore_core_vdel(
                        core, key, key_len, value, value_len, None, now, out
                    )
                )
            elif op == "SCAN":
                token, token_len = (
                    self.buf(arg["token"]) if "token" in arg else (None, 0)
                )
                self.check(
                    lib.mqstore_core_scan(
                        core, key, key_len, token, token_len, now, out
                    )
                )
            else:
                raise Failure(f"no C call for {op}")
            return {"call": call.value}
        if verb in ("observe", "unobserve"):
            key, key_len = self.buf(arg)
            self.check(
                getattr(lib, f"mqstore_core_{verb}")(core, key, key_len, now, out)
            )
            return {"call": call.value}
        if verb == "lease":
            key, key_len = self.buf(arg["key"])
            wait = arg.get("waitMs")
            self.check(
                lib.mqstore_core_lease(
                    core,
                    key,
                    key_len,
                    arg["ttlMs"],
                    WAIT_FOREVER if wait is None else wait,
                    now,
                    out,
                )
            )
            return {"call": call.value}
        if verb == "releaseLease":
            self.check(lib.mqstore_core_lease_release(core, self.calls[arg], now, out))
            return {"call": call.value}
        if verb == "jobsOperate":
            self.check(
                lib.mqstore_core_jobs_operate(core, json.dumps(arg).encode(), now, out)
            )
            return {"call": call.value}
        if verb == "jobsDevice":
            self.check(
                lib.mqstore_core_jobs_device(
                    core,
                    arg["thing"].encode(),
                    arg["api"].encode(),
                    json.dumps(arg.get("payload", {})).encode(),
                    now,
                    out,
                )
            )
            return {"call": call.value}
        if verb == "command":
            payload, payload_len = self.buf(arg["payload"])
            options = CommandOptions()
            options.content_type = (
                arg["contentType"].encode() if "contentType" in arg else None
            )
            options.profile = arg["profile"].encode() if "profile" in arg else None
            options.timeout_ms = arg.get("timeoutMs", 0)
            options.mode = MODES[arg.get("mode", "await")]
            headers = [
                (k.encode(), v.encode()) for k, v in arg.get("headers", {}).items()
            ]
            array = (UserProperty * max(len(headers), 1))(
                *[UserProperty(k, v) for k, v in headers]
            )
            self.keep.append(array)
            options.headers, options.header_count = array, len(headers)
            self.check(
                lib.mqstore_core_command(
                    core,
                    arg["topic"].encode(),
                    payload,
                    payload_len,
                    C.byref(options),
                    now,
                    out,
                )
            )
            return {"call": call.value}
        if verb == "commandStatus":
            self.check(lib.mqstore_core_command_status(core, arg.encode(), now, out))
            return {"call": call.value}
        if verb in ("actAs", "watchCommands", "subscriptions"):
            before = self.subscriptions()
            if verb == "actAs":
                self.check(lib.mqstore_core_act_as(core, arg.encode()))
            elif verb == "watchCommands":
                self.check(lib.mqstore_core_watch_commands(core))
            added = (
                self.subscriptions()[len(before) :]
                if verb != "subscriptions"
                else before
            )
            if verb == "watchCommands":
                return {"filters": added[0] if added else None}
            return {"filters": added}
        if verb == "shadow":
            body = arg.get("body") or {}
            state = json.dumps(body["state"]).encode() if "state" in body else None
            self.check(
                lib.mqstore_core_shadow(
                    core,
                    arg["thing"].encode(),
                    optional(arg.get("name")),
                    arg["op"].encode(),
                    state,
                    body.get("version", -1),
                    now,
                    out,
                )
            )
            return {"call": call.value}
        if verb == "useShadow":
            before = self.subscriptions()
            self.check(
                lib.mqstore_core_use_shadow(
                    core, arg["thing"].encode(), optional(arg.get("name"))
                )
            )
            return {"filters": self.subscriptions()[len(before) :]}
        if verb == "leaveShadow":
            filters, count = (C.c_char_p * 8)(), C.c_size_t()
            self.check(
                lib.mqstore_core_leave_shadow(
                    core,
                    arg["thing"].encode(),
                    optional(arg.get("name")),
                    filters,
                    8,
                    C.byref(count),
                )
            )
            return {"filters": [filters[i].decode() for i in range(count.value)]}
        if verb == "leave":
            filters, count = (C.c_char_p * 8)(), C.c_size_t()
            self.check(
                lib.mqstore_core_leave(core, arg.encode(), filters, 8, C.byref(count))
            )
            return {"filters": [filters[i].decode() for i in range(count.value)]}
        if verb == "unwatchCommands":
            filter_ = C.c_char_p()
            self.check(lib.mqstore_core_unwatch_commands(core, C.byref(filter_)))
            return {"filters": filter_.value.decode() if filter_.value else None}
        if verb == "receive":
            self.check(lib.mqstore_core_handle(core, C.byref(self.incoming(arg)), now))
            return {}
        if verb == "clock":
            self.now = T0 + arg
            self.check(lib.mqstore_core_expire(core, self.now))
            return {}
        if verb == "connectionLost":
            self.check(lib.mqstore_core_connection_lost(core))
            return {}
        if verb == "resume":
            self.check(lib.mqstore_core_resume(core, now))
            return {}
        if verb == "publishRefused":
            self.check(
                lib.mqstore_core_publish_refused(
                    core, self.calls[arg["call"]], arg["code"]
                )
            )
            return {}
        if verb == "setMaxPacketSize":
            self.check(lib.mqstore_core_set_max_packet_size(core, arg))
            return {}
        raise Failure(f"unknown action {verb}")

    def incoming(self, value):
        if "json" in value:
            body = dict(value["json"])
            if "clientToken" in value:
                body["clientToken"] = self.tokens[value["clientToken"]]
            payload = json.dumps(body).encode()
        else:
            payload = value.get("payload", "").encode()
        p = Publish()
        p.topic = value["topic"].encode()
        p.payload, p.payload_len = self.buf(payload)
        p.qos = 1
        p.content_type = (
            value["contentType"].encode() if "contentType" in value else None
        )
        p.response_topic = (
            value["responseTopic"].encode() if "responseTopic" in value else None
        )
        p.message_expiry_interval = value.get("messageExpiryInterval", 0)
        if "correlation" in value:
            p.correlation_data, p.correlation_data_len = self.buf(
                self.correlations[value["correlation"]]
            )
        props = [
            UserProperty(k.encode(), v.encode())
            for k, v in value.get("userProperties", [])
        ]
        array = (UserProperty * max(len(props), 1))(*props)
        self.keep.append(array)
        p.user_properties, p.user_property_count = array, len(props)
        p.call = NO_CALL
        return p

    def outgoing(self, p, expected):
        expected = expected or {}
        out = {
            "topic": p.topic.decode(),
            "payload": text(p.payload, p.payload_len),
            "userProperties": [
                [
                    p.user_properties[i].name.decode(),
                    p.user_properties[i].value.decode(),
                ]
                for i in range(p.user_property_count)
            ],
        }
        if p.call != NO_CALL:
            out["call"] = self.call_name(p.call)
        if p.response_topic:
            out["responseTopic"] = p.response_topic.decode()
        if p.content_type:
            out["contentType"] = p.content_type.decode()
        if p.message_expiry_interval:
            out["messageExpiryInterval"] = p.message_expiry_interval
        with_json(out, C.string_at(p.payload, p.payload_len), expected, self.tokens)
        if p.correlation_data_len:
            data = C.string_at(p.correlation_data, p.correlation_data_len)
            out["correlation"] = named(
                self.correlations, expected.get("correlation"), data
            )
        return out

    def event(self, e):
        version = self.hlc(e.version) if e.has_version else None
        if e.kind == 2:
            return {
                "kind": "changed",
                "key": text(e.key, e.key_len),
                "value": text(e.value, e.value_len) if e.value else None,
                "version": version,
                "synthetic": e.synthetic,
                "gap": e.gap,
            }
        if e.kind == 3:
            return {"kind": "jobs-notification", "notification": json.loads(e.json)}
        if e.kind == 4:
            return {"kind": "command-record", "record": json.loads(e.json)}
        if e.kind == 8:
            return {
                "kind": "shadow-notification",
                "thing": e.thing.decode(),
                "name": e.shadow_name.decode() if e.shadow_name else None,
                "notification": json.loads(e.json),
            }
        if e.kind == 5:
            return {
                "kind": "lease-renewed",
                "lease": self.call_name(e.call),
                "version": version,
            }
        if e.kind == 6:
            return {
                "kind": "lease-lost",
                "lease": self.call_name(e.call),
                "key": text(e.key, e.key_len),
            }
        op = OPS[e.op]
        out = {"kind": "completed", "call": self.call_name(e.call), "op": op}
        if e.status != 0:
            out["error"] = {
                "kind": KINDS.get(e.status, f"(status {e.status})"),
                "code": e.status,
            }
            return out
        if op == "SET":
            out.update(
                response={"kind": "ok" if e.applied else "not_applied"},
                version=version,
                applied=e.applied,
            )
        elif op == "GET":
            found = (
                {"kind": "value", "value": text(e.value, e.value_len)}
                if e.found
                else {"kind": "absent"}
            )
            out.update(response=found, version=version)
        elif op in ("DEL", "VDEL"):
            out.update(version=version, deleted=DELETED[e.deleted])
        elif op == "SCAN":
            page = {
                "kind": "keys",
                "keys": [
                    text(e.keys[i].data, e.keys[i].len) for i in range(e.key_count)
                ],
            }
            if e.scan_token:
                page["token"] = text(e.scan_token, e.scan_token_len)
            out.update(response=page, version=version)
        elif op == "KEYNOTIFY":
            out.update(response={"kind": "ok"}, version=version)
        elif op in ("jobs", "commandStatus", "shadow"):
            out["result"] = json.loads(e.json)
        elif op == "command":
            reply = json.loads(e.json)
            reply["payload"] = text(e.value, e.value_len)
            out["result"] = reply
        elif op == "lease":
            out["result"] = version if e.applied else None
        elif op == "releaseLease":
            out["result"] = e.applied
        return out

    def drain(self, expected_publishes):
        publishes, events = [], []
        while True:
            p = C.POINTER(Publish)()
            self.check(self.lib.mqstore_core_next_publish(self.core, C.byref(p)))
            if not p:
                break
            expected = (
                expected_publishes[len(publishes)]
                if len(publishes) < len(expected_publishes)
                else None
            )
            publishes.append(self.outgoing(p.contents, expected))
            self.lib.mqstore_publish_free(p)
        while True:
            e = C.POINTER(Event)()
            self.check(self.lib.mqstore_core_next_event(self.core, C.byref(e)))
            if not e:
                break
            events.append(self.event(e.contents))
            self.lib.mqstore_event_free(e)
        return publishes, events

    def deadline(self):
        at = C.c_uint64()
        self.check(self.lib.mqstore_core_next_deadline(self.core, C.byref(at)))
        return None if at.value == NO_DEADLINE else at.value - T0


class StatusError(Exception):
    def __init__(self, status, message):
        super().__init__(f"status {status}: {message}")
        self.status = status


def expected_event(event):
    """An expected event as C can state it (see the module's docstring)."""
    event = dict(event)
    if "error" in event:
        event["error"] = without_details(event["error"])
    if event.get("kind") == "completed" and event.get("op") in ("DEL", "VDEL"):
        event.pop("response", None)
    return event


def run_trace(lib, name, trace):
    run = Run(lib, trace)
    try:
        for number, step in enumerate(trace["steps"], 1):
            where = f"{name}, step {number}"
            try:
                outcome = run.act(step["do"])
            except StatusError as e:
                if "error" not in step:
                    raise Failure(f"{where}: {e}") from e
                actual = {
                    "kind": KINDS.get(e.status, f"(status {e.status})"),
                    "code": e.status,
                }
                if not matches(without_details(step["error"]), actual):
                    raise Failure(
                        f"{where}: error {actual}, expected {step['error']}"
                    ) from e
                outcome = None
            if outcome is not None:
                if "error" in step:
                    raise Failure(f"{where}: no error, expected {step['error']}")
                if "call" in outcome and "name" in step:
                    run.calls[step["name"]] = outcome["call"]
                if "filters" in step and outcome.get("filters") != step["filters"]:
                    raise Failure(
                        f"{where}: filters {outcome.get('filters')}, expected {step['filters']}"
                    )
            expected_publishes = step.get("publishes", [])
            publishes, events = run.drain(expected_publishes)
            for what, expected, actual in (
                ("publishes", expected_publishes, publishes),
                ("events", [expected_event(e) for e in step.get("events", [])], events),
            ):
                if len(expected) != len(actual) or not all(
                    matches(e, a) for e, a in zip(expected, actual)
                ):
                    raise Failure(
                        f"{where}: {what}\n  expected {json.dumps(expected)}\n  actual   {json.dumps(actual)}"
                    )
            if "deadline" in step and run.deadline() != step["deadline"]:
                raise Failure(
                    f"{where}: next deadline {run.deadline()}, expected {step['deadline']}"
                )
    finally:
        lib.mqstore_core_free(run.core)


def optional(text):
    """An optional string argument: NULL for None."""
    return None if text is None else text.encode()


def declare(lib):
    lib.mqstore_last_error.restype = C.c_char_p
    lib.mqstore_core_subscription.restype = C.c_char_p
    lib.mqstore_core_subscription.argtypes = [C.c_void_p, C.c_size_t]
    lib.mqstore_core_subscription_count.restype = C.c_size_t
    lib.mqstore_core_subscription_count.argtypes = [C.c_void_p]
    for name in ("mqstore_core_free", "mqstore_publish_free", "mqstore_event_free"):
        getattr(lib, name).restype = None
    u64 = C.c_uint64
    signatures = {
        "mqstore_core_new": [C.c_char_p, u64, C.c_uint32, C.c_void_p],
        "mqstore_core_set": [
            C.c_void_p,
            C.c_void_p,
            C.c_size_t,
            C.c_void_p,
            C.c_size_t,
            C.c_void_p,
            u64,
            C.c_void_p,
        ],
        "mqstore_core_get": [C.c_void_p, C.c_void_p, C.c_size_t, u64, C.c_void_p],
        "mqstore_core_del": [
            C.c_void_p,
            C.c_void_p,
            C.c_size_t,
            C.c_void_p,
            u64,
            C.c_void_p,
        ],
        "mqstore_core_vdel": [
            C.c_void_p,
            C.c_void_p,
            C.c_size_t,
            C.c_void_p,
            C.c_size_t,
            C.c_void_p,
            u64,
            C.c_void_p,
        ],
        "mqstore_core_scan": [
            C.c_void_p,
            C.c_void_p,
            C.c_size_t,
            C.c_void_p,
            C.c_size_t,
            u64,
            C.c_void_p,
        ],
        "mqstore_core_observe": [C.c_void_p, C.c_void_p, C.c_size_t, u64, C.c_void_p],
        "mqstore_core_unobserve": [C.c_void_p, C.c_void_p, C.c_size_t, u64, C.c_void_p],
        "mqstore_core_lease": [
            C.c_void_p,
            C.c_void_p,
            C.c_size_t,
            u64,
            u64,
            u64,
            C.c_void_p,
        ],
        "mqstore_core_lease_release": [C.c_void_p, u64, u64, C.c_void_p],
        "mqstore_core_jobs_operate": [C.c_void_p, C.c_char_p, u64, C.c_void_p],
        "mqstore_core_jobs_device": [
            C.c_void_p,
            C.c_char_p,
            C.c_char_p,
            C.c_char_p,
            u64,
            C.c_void_p,
        ],
        "mqstore_core_command": [
            C.c_void_p,
            C.c_char_p,
            C.c_void_p,
            C.c_size_t,
            C.c_void_p,
            u64,
            C.c_void_p,
        ],
        "mqstore_core_command_status": [C.c_void_p, C.c_char_p, u64, C.c_void_p],
        "mqstore_core_act_as": [C.c_void_p, C.c_char_p],
        "mqstore_core_leave": [
            C.c_void_p,
            C.c_char_p,
            C.c_void_p,
            C.c_size_t,
            C.c_void_p,
        ],
        "mqstore_core_use_shadow": [C.c_void_p, C.c_char_p, C.c_char_p],
        "mqstore_core_leave_shadow": [
            C.c_void_p,
            C.c_char_p,
            C.c_char_p,
            C.c_void_p,
            C.c_size_t,
            C.c_void_p,
        ],
        "mqstore_core_shadow": [
            C.c_void_p,
            C.c_char_p,
            C.c_char_p,
            C.c_char_p,
            C.c_char_p,
            C.c_int64,
            u64,
            C.c_void_p,
        ],
        "mqstore_core_watch_commands": [C.c_void_p],
        "mqstore_core_unwatch_commands": [C.c_void_p, C.c_void_p],
        "mqstore_core_handle": [C.c_void_p, C.c_void_p, u64],
        "mqstore_core_expire": [C.c_void_p, u64],
        "mqstore_core_next_deadline": [C.c_void_p, C.c_void_p],
        "mqstore_core_connection_lost": [C.c_void_p],
        "mqstore_core_resume": [C.c_void_p, u64],
        "mqstore_core_publish_refused": [C.c_void_p, u64, C.c_uint8],
        "mqstore_core_set_max_packet_size": [C.c_void_p, C.c_uint32],
        "mqstore_core_next_publish": [C.c_void_p, C.c_void_p],
        "mqstore_core_next_event": [C.c_void_p, C.c_void_p],
        "mqstore_core_free": [C.c_void_p],
        "mqstore_publish_free": [C.c_void_p],
        "mqstore_event_free": [C.c_void_p],
        "mqstore_hlc_parse": [C.c_char_p, C.c_void_p],
        "mqstore_hlc_format": [C.c_void_p, C.c_char_p, C.c_size_t, C.c_void_p],
    }
    for name, args in signatures.items():
        getattr(lib, name).argtypes = args


def main():
    lib = C.CDLL(sys.argv[1])
    declare(lib)
    found = traces()
    passed = failed = 0
    for file, trace in found:
        name = f"session trace {file}"
        try:
            run_trace(lib, file, trace)
        except Failure as e:
            failed += 1
            print(f"test {name} ... FAILED\n{e}")
        else:
            passed += 1
            print(f"test {name} ... ok")
    # The runner itself: a wrong expectation must fail.
    wrong = {
        "clientId": "wrong",
        "steps": [
            {
                "do": {"call": {"op": "GET", "key": "k"}},
                "publishes": [{"topic": "not/the/topic"}],
            }
        ],
    }
    try:
        run_trace(lib, "wrong.json", wrong)
        failed += 1
        print("test a trace that expects other publishes fails ... FAILED (it passed)")
    except Failure:
        passed += 1
        print("test a trace that expects other publishes fails ... ok")
    if len(found) < 8:
        failed += 1
        print(f"test the session traces are there ... FAILED: only {len(found)}")
    print(
        f"test result: {'ok' if failed == 0 else 'FAILED'}. {passed} passed; {failed} failed; 0 ignored"
    )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
