"""Checks and converts arguments before anything is sent (shared by both clients)."""

from __future__ import annotations

import math
import os
from datetime import timedelta
from typing import Optional, Union

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


def seconds(value: object, what: str) -> float:
    """A positive duration in seconds, from a number of seconds or a ``timedelta``."""
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        result = float(value)
    else:
        raise TypeError(
            f"{what} must be a number of seconds or a datetime.timedelta, "
            f"not {type(value).__name__}"
        )
    if not result > 0 or math.isinf(result):
        raise ValueError(f"{what} must be a positive, finite number of seconds, not {value!r}")
    return result


def millis(value: object, what: str) -> int:
    """A positive duration in whole milliseconds (at least 1)."""
    return max(1, round(seconds(value, what) * 1000))


def optional_millis(value: object, what: str) -> Optional[int]:
    return None if value is None else millis(value, what)


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
    """Connection settings, checked once; ``native()`` gives the native call's arguments."""

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
        ):
            if text is not None and not isinstance(text, str):
                raise TypeError(f"{name} must be a str, not {type(text).__name__}")
        if client_id == "":
            raise ValueError("client_id must not be empty (leave it out for a generated one)")
        if (username is None) != (password is None):
            raise ValueError("username and password go together: give both or neither")
        self.ca_file = path(ca_file, "ca_file")
        self.cert_file = path(cert_file, "cert_file")
        self.key_file = path(key_file, "key_file")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together: give both or neither")
        if tls and self.ca_file is None:
            raise ValueError(
                "tls=True needs ca_file: the PEM file of the authority that signed "
                "the broker's certificate"
            )
        if not tls and (self.ca_file or self.cert_file):
            raise ValueError("ca_file, cert_file and key_file are for TLS: pass tls=True too")
        self.host = host
        self.port = port
        self.client_id = client_id
        self.username = username
        self.password = password
        self.timeout_ms = millis(timeout, "timeout")
