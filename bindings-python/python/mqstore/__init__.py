"""mqstore: state, leases and change notifications for MQTT 5 device fleets.

A client of the mqstore state store (and of any Azure IoT Operations-compatible one), of its
jobs service (AWS IoT Jobs), device shadows and command service, built on mqstore's Rust core::

    import mqstore

    with mqstore.Client("127.0.0.1", 1883) as client:
        client.set("greeting", "hello")
        print(client.get("greeting").value)      # b'hello'

:class:`AsyncClient` offers the same calls as coroutines; :class:`ClientCore` is the same
client as a state machine with no I/O, for programs that bring their own MQTT client. Errors
are :class:`MqstoreError` subclasses (``mqstore.errors``); the codec and HLC are in
``mqstore.codec``; the jobs and commands records the calls answer are TypedDicts in
``mqstore.wire``, generated from the Rust types.
"""

import atexit

from . import _native, codec, errors, wire
from ._aio import AsyncClient, AsyncLease, AsyncObservation
from ._client import Client, Lease, Observation
from ._jobs import (
    AsyncCommandWatch,
    AsyncFanOut,
    AsyncJobs,
    AsyncKeyspaceWatch,
    CommandWatch,
    FanOut,
    Jobs,
    KeyspaceWatch,
)
from ._native import (
    Change,
    ClientCore,
    CommandReply,
    DeleteResult,
    Hlc,
    SetResult,
    Versioned,
    __version__,
)
from ._shadow import AsyncShadow, Shadow
from .errors import (
    ConnectionLostError,
    MqstoreError,
    RequestTimeoutError,
    ServiceError,
)

__all__ = [
    "AsyncClient",
    "AsyncCommandWatch",
    "AsyncFanOut",
    "AsyncJobs",
    "AsyncKeyspaceWatch",
    "AsyncLease",
    "AsyncObservation",
    "AsyncShadow",
    "Change",
    "Client",
    "ClientCore",
    "CommandReply",
    "CommandWatch",
    "ConnectionLostError",
    "DeleteResult",
    "FanOut",
    "Hlc",
    "Jobs",
    "KeyspaceWatch",
    "Lease",
    "MqstoreError",
    "Observation",
    "RequestTimeoutError",
    "ServiceError",
    "SetResult",
    "Shadow",
    "Versioned",
    "__version__",
    "codec",
    "errors",
    "wire",
]

# At exit, the native runtime's threads stop calling into Python (a late answer of an
# asyncio call would otherwise meet a finalizing interpreter and abort the process).
atexit.register(_native._shutdown)
