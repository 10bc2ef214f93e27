"""Checks and converts arguments before anything is sent (shared by both clients)."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Optional, Union

from . import _native
from ._native import Hlc

BytesLike = Union[str, bytes, bytearray, memoryview]
Seconds = Union[float, int, timedelta]
FencingToken = Union[Hlc, str]
PathLike = Union[str, "os.PathLike[str]"]


def to_bytes(value: object, what: str) -> bytes:
    """``str`` as UTF-8, any bytes-like object as its bytes."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(
        f"{what} must be str or bytes-like (bytes, bytearray, memoryview), "
        f"not {type(value).__name__}"
    )


def key(value: object, what: str = "key") -> bytes:
    data = to_bytes(value, what)
    if not data:
        raise ValueError(f"{what} must not be empty: the state store refuses empty keys")
    return data


def seconds(value: object, what: str, zero: bool = False) -> float:
    """A positive duration in seconds (or 0, with ``zero``), from a number of seconds or a
    ``timedelta``."""
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        result = float(value)
    else:
        raise TypeError(
            f"{what} must be a number of seconds or a datetime.timedelta, "
            f"not {type(value).__name__}"
        )
    if zero and result == 0:
        return result
    if not result > 0 or math.isinf(result):
        allowed = "0 or a positive" if zero else "a positive"
        raise ValueError(f"{what} must be {allowed}, finite number of seconds, not {value!r}")
    return result


def millis(value: object, what: str) -> int:
    """A positive duration in whole milliseconds (at least 1)."""
    return max(1, round(seconds(value, what) * 1000))


def optional_millis(value: object, what: str) -> Optional[int]:
    return None if value is None else millis(value, what)


def wait_millis(value: object, what: str) -> Optional[int]:
    """How long to wait, in whole milliseconds: 0 tries (or looks) once, as
    ``queue.Queue.get(timeout=0)`` does; ``None`` stays ``None``."""
    if value is None:
        return None
    if seconds(value, what, zero=True) == 0:
        return 0
    return millis(value, what)


def condition(nx: bool, nex: bool) -> str:
    if nx and nex:
        raise ValueError(
            "nx and nex cannot both be set: nx writes only a missing key, "
            "nex also a key that already holds this value (choose one)"
        )
    return "nx" if nx else "nex" if nex else ""


def fencing_token(value: object) -> Optional[Hlc]:
    if value is None or isinstance(value, Hlc):
        return value
    if isinstance(value, str):
        return Hlc.parse(value)
    raise TypeError(
        "fencing_token must be an mqstore.Hlc (a lease's fencing_token) or its text, "
        f"not {type(value).__name__}"
    )


def path(value: object, what: str) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    raise TypeError(f"{what} must be a path (str or os.PathLike), not {type(value).__name__}")


class ConnectArgs:
    """Connection settings, checked once, and the native connect that uses them."""

    def __init__(
        self,
        host: str,
        port: int,
        client_id: Optional[str],
        username: Optional[str],
        password: Optional[str],
        tls: bool,
        ca_file: object,
        cert_file: object,
        key_file: object,
        key_password: Optional[str],
        timeout: Seconds,
    ) -> None:
        if not isinstance(host, str) or not host:
            raise TypeError(f"host must be a non-empty str, not {host!r}")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise ValueError(f"port must be an int from 1 to 65535, not {port!r}")
        for name, text in (
            ("client_id", client_id),
            ("username", username),
            ("password", password),
            ("key_password", key_password),
        ):
            if text is not None and not isinstance(text, str):
                raise TypeError(f"{name} must be a str, not {type(text).__name__}")
        if not isinstance(tls, bool):
            raise TypeError(f"tls must be a bool, not {type(tls).__name__}")
        if client_id == "":
            raise ValueError("client_id must not be empty (leave it out for a generated one)")
        if (username is None) != (password is None):
            raise ValueError("username and password go together: give both or neither")
        self.ca_file = path(ca_file, "ca_file")
        self.cert_file = path(cert_file, "cert_file")
        self.key_file = path(key_file, "key_file")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together: give both or neither")
        if key_password is not None and self.key_file is None:
            raise ValueError("key_password is the password of key_file: give key_file too")
        if not tls and (self.ca_file or self.cert_file):
            raise ValueError("ca_file, cert_file and key_file are for TLS: pass tls=True too")
        self.host = host
        self.port = port
        self.client_id = client_id
        self.username = username
        self.password = password
        self.tls = tls
        self.key_password = key_password
        self.timeout_ms = millis(timeout, "timeout")

    def _native_args(
        self,
    ) -> tuple[
        str,
        int,
        Optional[str],
        Optional[str],
        Optional[str],
        bool,
        Optional[str],
        Optional[str],
        Optional[str],
        Optional[str],
        int,
    ]:
        return (
            self.host,
            self.port,
            self.client_id,
            self.username,
            self.password,
            self.tls,
            self.ca_file,
            self.cert_file,
            self.key_file,
            self.key_password,
            self.timeout_ms,
        )

    def connect(self) -> _native.Client:
        """Connects, waiting (the GIL released)."""
        return _native.Client.connect(*self._native_args(), False)

    def connect_async(self) -> Awaitable[_native.Client]:
        """Connects, as an awaitable."""
        return _native.Client.connect(*self._native_args(), True)


def text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    return value


def optional_text(value: object, what: str) -> Optional[str]:
    return None if value is None else text(value, what)


def texts(values: object, what: str) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{what} must be a list of str, not {type(values).__name__}")
    return [text(v, f"each of {what}") for v in values]


def string_map(values: object, what: str) -> dict[str, str]:
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise TypeError(f"{what} must be a dict of str to str, not {type(values).__name__}")
    out: dict[str, str] = {}
    for name, value in values.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"{what} must map str to str: {name!r}: {value!r}")
        out[name] = value
    return out


def count(value: object, what: str, optional: bool = False) -> Optional[int]:
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{what} must not be negative, not {value}")
    return value


def json_object(value: object, what: str) -> str:
    """A dict (a shadow's ``state``) as JSON text."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a dict, not {type(value).__name__}")
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what} must be JSON-serializable: {e}") from None


COMMAND_MODES = ("await", "oneway", "detached")


def mode(value: object) -> str:
    if value not in COMMAND_MODES:
        raise ValueError(f"mode must be one of {', '.join(COMMAND_MODES)}, not {value!r}")
    return str(value)


def command(
    payload: object,
    content_type: object,
    profile: object,
    timeout: object,
    command_mode: object,
    headers: object,
) -> tuple[bytes, Optional[str], str, int, str, list[tuple[str, str]]]:
    """The arguments every command call shares, checked, in the native call's order."""
    return (
        to_bytes(payload, "payload"),
        optional_text(content_type, "content_type"),
        text(profile, "profile"),
        millis(timeout, "timeout"),
        mode(command_mode),
        list(string_map(headers, "headers").items()),
    )


def start_command(
    command_id: object,
    target: object,
    parameters: object,
    timeout: object,
    command_mode: object,
) -> tuple[str, str, str, int, str]:
    """The arguments of a stored command's start, checked, in the native call's order."""
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, Mapping):
        raise TypeError(f"parameters must be a dict, not {type(parameters).__name__}")
    try:
        parameters_json = json.dumps(dict(parameters))
    except (TypeError, ValueError) as e:
        raise TypeError(f"parameters must be JSON-serializable: {e}") from None
    return (
        text(command_id, "command_id"),
        text(target, "target"),
        parameters_json,
        millis(timeout, "timeout"),
        mode(command_mode),
    )


def operator_call(op: str, **args: Any) -> str:
    """Operator call ``op`` as its request's JSON text: the method's arguments (None: absent)
    under their camelCase names, AWS's fields and the shorthands every client shares
    (``maxRetries``, ``maxPerMinute``, ``thing``, ...), which the core writes out
    (``mqstore_core::jobs::operator_call``: one definition for every binding)."""
    try:
        return _native.operator_call(op, arguments(op, args))
    except ValueError as e:
        # The core names the arguments as the wire does; say them as the caller wrote them.
        python = {camel(name): name for name in args}
        message = re.sub(r"\w+", lambda word: python.get(word[0], word[0]), str(e))
        raise ValueError(message) from None


def arguments(op: str, args: Mapping[str, Any]) -> str:
    """The arguments of call ``op`` (an operator call, or a stored-commands call of
    ``_native.command_definitions``, whose answer's type the literal ``op`` picks) as the JSON
    object the core takes: camelCase names, None absent. The core makes the request of them
    (``mqstore_core::jobs::operator_call``, ``mqstore_core::commands::definitions::
    definitions_call``)."""
    fields = {camel(name): value for name, value in args.items() if value is not None}
    try:
        return json.dumps(fields)
    except (TypeError, ValueError) as e:
        raise TypeError(f"the arguments of {op} must be JSON-serializable: {e}") from None


def camel(name: str) -> str:
    """``in_progress_timeout_minutes`` as ``inProgressTimeoutMinutes``."""
    first, *rest = name.split("_")
    return first + "".join(word.capitalize() for word in rest)


def create_job(
    job_id: str,
    targets: Sequence[str],
    document: Optional[Mapping[str, Any]],
    in_progress_timeout_minutes: Optional[int],
    max_retries: int,
    description: Optional[str] = None,
    max_per_minute: Optional[int] = None,
    rollout: Optional[Mapping[str, Any]] = None,
    abort: Optional[Sequence[Mapping[str, Any]]] = None,
    retry: Optional[Sequence[Mapping[str, Any]]] = None,
    continuous: bool = False,
    scheduling: Optional[Mapping[str, Any]] = None,
    template: Optional[str] = None,
    parameters: Optional[Mapping[str, str]] = None,
) -> str:
    """A ``createJob`` request as JSON text, its arguments checked."""
    if document is None and template is None:
        raise ValueError("give a document, or a template to take it from")
    if document is not None and not isinstance(document, Mapping):
        raise TypeError(f"the job document must be a dict, not {type(document).__name__}")
    return operator_call(
        "createJob",
        job_id=text(job_id, "job_id"),
        targets=texts(targets, "targets"),
        document=None if document is None else dict(document),
        max_retries=count(max_retries, "max_retries"),
        continuous=continuous,
        scheduling=None if scheduling is None else dict(mapping(scheduling, "scheduling")),
        template=optional_text(template, "template"),
        parameters=None if parameters is None else string_map(parameters, "parameters"),
        **job_settings(
            description, in_progress_timeout_minutes, max_per_minute, rollout, abort, retry
        ),
    )


def create_template(
    template_id: str,
    document: Mapping[str, Any],
    description: Optional[str],
    in_progress_timeout_minutes: Optional[int],
    max_per_minute: Optional[int],
    rollout: Optional[Mapping[str, Any]],
    abort: Optional[Sequence[Mapping[str, Any]]],
    retry: Optional[Sequence[Mapping[str, Any]]],
    maintenance_windows: Optional[Sequence[Mapping[str, Any]]],
) -> str:
    """A ``createJobTemplate`` request: the settings of :func:`job_settings`."""
    if not isinstance(document, Mapping):
        raise TypeError(f"the template's document must be a dict, not {type(document).__name__}")
    return operator_call(
        "createJobTemplate",
        job_template_id=text(template_id, "template_id"),
        document=dict(document),
        maintenance_windows=None
        if maintenance_windows is None
        else [dict(mapping(w, "maintenance_windows")) for w in maintenance_windows],
        **job_settings(
            description, in_progress_timeout_minutes, max_per_minute, rollout, abort, retry
        ),
    )


def job_settings(
    description: Optional[str],
    in_progress_timeout_minutes: Optional[int],
    max_per_minute: Optional[int],
    rollout: Optional[Mapping[str, Any]],
    abort: Optional[Sequence[Mapping[str, Any]]],
    retry: Optional[Sequence[Mapping[str, Any]]],
) -> dict[str, Any]:
    """The settings ``createJob``, ``updateJob`` and ``createJobTemplate`` share, checked, as
    :func:`operator_call`'s arguments (None: unset)."""
    return {
        "description": optional_text(description, "description"),
        "in_progress_timeout_minutes": count(
            in_progress_timeout_minutes, "in_progress_timeout_minutes", True
        ),
        "max_per_minute": count(max_per_minute, "max_per_minute", True),
        "rollout": None if rollout is None else dict(mapping(rollout, "rollout")),
        "abort": None if abort is None else [dict(mapping(c, "abort")) for c in abort],
        "retry": None if retry is None else [dict(mapping(c, "retry")) for c in retry],
    }


def mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a dict (AWS's fields), not {type(value).__name__}")
    return value


def operator_request(request: Mapping[str, Any]) -> str:
    """Any operator call (a dict with ``op``, AWS's fields and the shorthands) as JSON text."""
    request = mapping(request, "the request")
    op = request.get("op")
    if not isinstance(op, str):
        raise ValueError('the request needs "op": the call\'s name, as "updateJob"')
    try:
        text = json.dumps(request)
    except (TypeError, ValueError) as e:
        raise TypeError(f"the request must be JSON-serializable: {e}") from None
    return _native.operator_call(op, text)


def page(max_results: Optional[int], next_token: Optional[str]) -> dict[str, Any]:
    """A list call's page, checked, as :func:`operator_call`'s arguments."""
    return {
        "max_results": count(max_results, "max_results", True),
        "next_token": optional_text(next_token, "next_token"),
    }
