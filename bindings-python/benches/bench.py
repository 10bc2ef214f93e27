"""The Python client against a pure-Python client on paho-mqtt, and against the Rust client,
through the same broker and the same server, in one run.

    cargo build --release -p mqstore
    pip install ./bindings-python paho-mqtt==2.1.0
    MQSTORE_BIN=target/release/mqstore python bindings-python/benches/bench.py

Every target does the same requests (SET and GET alternately over 1,000 keys, 64-byte values)
at 1 and 16 in flight, in turns (``--rounds``), so the machine's noise spreads over all of them.
The Rust client is measured by ``mqstore bench`` (one connection, the same mix, tasks for the
threads), in the same turns. Figures:
docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import mqstore
from harness import Broker, Server, print_medians, rust_client_ops

KEYS = [f"bench/{i}" for i in range(1000)]
VALUE = b"v" * 64
INVOKE = mqstore.codec.INVOKE_TOPIC


def op(i: int) -> tuple[str, bool]:
    """The i-th request: its key, and whether it is a SET (else a GET)."""
    return KEYS[i % len(KEYS)], i % 2 == 0


# --- mqstore, blocking: one client shared by `in_flight` threads ---------------------------


def mqstore_sync(port: int, in_flight: int, seconds: float) -> int:
    done = [0] * in_flight
    with mqstore.Client("127.0.0.1", port) as client:
        deadline = time.perf_counter() + seconds

        def worker(w: int) -> None:
            i = w
            while time.perf_counter() < deadline:
                key, is_set = op(i)
                if is_set:
                    client.set(key, VALUE)
                else:
                    client.get(key)
                i += in_flight
                done[w] += 1

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(in_flight)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return sum(done)


# --- mqstore, asyncio: `in_flight` tasks on one client -------------------------------------


def mqstore_asyncio(port: int, in_flight: int, seconds: float) -> int:
    async def main() -> int:
        async with mqstore.AsyncClient("127.0.0.1", port) as client:
            deadline = time.perf_counter() + seconds

            async def worker(w: int) -> int:
                n, i = 0, w
                while time.perf_counter() < deadline:
                    key, is_set = op(i)
                    if is_set:
                        await client.set(key, VALUE)
                    else:
                        await client.get(key)
                    i += in_flight
                    n += 1
                return n

            return sum(await asyncio.gather(*(worker(w) for w in range(in_flight))))

    return asyncio.run(main())


# --- the baseline: the same requests from pure Python on paho-mqtt -------------------------


def resp_request(key: str, is_set: bool) -> bytes:
    """The state store request in RESP3, written in Python."""
    k = key.encode()
    if is_set:
        return b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(VALUE), VALUE)
    return b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k)


class PahoStateStore:
    """A minimal state store client on paho-mqtt: requests on the invoke topic, answers matched
    by correlation data on this client's response topic; `done(correlation, payload)` runs on
    paho's network thread."""

    def __init__(self, port: int, done: Callable[[bytes, bytes], None]) -> None:
        self.id = f"paho-bench-{os.getpid()}-{id(self)}"
        self.response_topic = f"paho-bench/{self.id}/response"
        self.counter = itertools.count()
        self.lock = threading.Lock()
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=self.id, protocol=paho.MQTTv5
        )

        def on_message(_client: object, _userdata: object, message: paho.MQTTMessage) -> None:
            assert message.properties is not None
            done(message.properties.CorrelationData, message.payload)  # type: ignore[attr-defined]

        self.client.on_message = on_message
        subscribed = threading.Event()
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.connect("127.0.0.1", port)
        # Nagle off, as mqstore's connections have it: with it on, every call waits ~40 ms.
        connection = self.client.socket()
        assert isinstance(connection, socket.socket)
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client.loop_start()
        self.client.subscribe(self.response_topic, qos=1)
        if not subscribed.wait(10):
            raise RuntimeError("paho: no SUBACK")

    def send(self, key: str, is_set: bool, expect: Callable[[bytes], None]) -> None:
        """Publishes a request; `expect` hears its correlation data before it goes out."""
        with self.lock:
            correlation = next(self.counter).to_bytes(8, "big")
        expect(correlation)
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.ResponseTopic = self.response_topic
        props.CorrelationData = correlation
        props.UserProperty = [
            ("__ts", f"{int(time.time() * 1000)}:0:{self.id}"),
            ("__srcId", self.id),
            ("__protVer", "1.0"),
        ]
        self.client.publish(INVOKE, resp_request(key, is_set), qos=1, properties=props)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
        # paho-mqtt 2.1 leaves the socket pair that wakes its loop open after loop_stop().
        self.client._reset_sockets(sockpair_only=True)


def check(payload: bytes) -> None:
    if not payload.startswith((b"+OK", b"$")):
        raise RuntimeError(f"the state store answered {payload!r}")


def paho_sync(port: int, in_flight: int, seconds: float) -> int:
    waiting: dict[bytes, threading.Event] = {}
    answers: dict[bytes, bytes] = {}

    def done(correlation: bytes, payload: bytes) -> None:
        answers[correlation] = payload
        waiting.pop(correlation).set()

    store = PahoStateStore(port, done)
    counts = [0] * in_flight
    deadline = time.perf_counter() + seconds

    def worker(w: int) -> None:
        i = w
        while time.perf_counter() < deadline:
            event = threading.Event()
            sent: list[bytes] = []

            def expect(
                correlation: bytes, event: threading.Event = event, sent: list[bytes] = sent
            ) -> None:
                waiting[correlation] = event
                sent.append(correlation)

            store.send(*op(i), expect)
            if not event.wait(10):
                raise RuntimeError("paho: no answer within 10 s")
            check(answers.pop(sent[0]))
            i += in_flight
            counts[w] += 1

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(in_flight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    return sum(counts)


def paho_asyncio(port: int, in_flight: int, seconds: float) -> int:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        waiting: dict[bytes, asyncio.Future[bytes]] = {}

        def resolve(correlation: bytes, payload: bytes) -> None:
            future = waiting.pop(correlation, None)
            if future is not None and not future.done():
                future.set_result(payload)

        def done(correlation: bytes, payload: bytes) -> None:
            loop.call_soon_threadsafe(resolve, bytes(correlation), bytes(payload))

        store = PahoStateStore(port, done)
        deadline = time.perf_counter() + seconds

        async def worker(w: int) -> int:
            n, i = 0, w
            while time.perf_counter() < deadline:
                future: asyncio.Future[bytes] = loop.create_future()

                def expect(correlation: bytes, future: asyncio.Future[bytes] = future) -> None:
                    waiting[correlation] = future

                store.send(*op(i), expect)
                check(await asyncio.wait_for(future, 10))
                i += in_flight
                n += 1
            return n

        try:
            return sum(await asyncio.gather(*(worker(w) for w in range(in_flight))))
        finally:
            store.close()

    return asyncio.run(main())


def rust_client(port: int, in_flight: int, seconds: float) -> int:
    """The Rust client's calls in `seconds` at `in_flight` tasks on one connection, from
    `mqstore bench` (it also measures an echo responder, not counted here)."""
    return round(rust_client_ops(port, in_flight, seconds) * seconds)


TARGETS: dict[str, Callable[[int, int, float], int]] = {
    "mqstore (sync)": mqstore_sync,
    "paho-mqtt (sync)": paho_sync,
    "mqstore (asyncio)": mqstore_asyncio,
    "paho-mqtt (asyncio)": paho_asyncio,
    "Rust client": rust_client,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="each turn's length")
    parser.add_argument("--rounds", type=int, default=3, help="turns per target and level")
    args = parser.parse_args()

    broker = Broker()
    server = Server(broker)
    try:
        rates: dict[tuple[str, int], list[float]] = {}
        for in_flight in (1, 16):
            for _ in range(args.rounds):
                for name, run in TARGETS.items():
                    n = run(broker.port, in_flight, args.seconds)
                    rates.setdefault((name, in_flight), []).append(n / args.seconds)
                    print(f"  {name:22} {in_flight:3} in flight: {n / args.seconds:9.0f} ops/s")
    finally:
        server.stop()
        broker.stop()

    median = print_medians(rates)
    rust_us = 1e6 / median[("Rust client", 1)]
    for kind in ("sync", "asyncio"):
        for in_flight in (1, 16):
            ratio = (
                median[(f"mqstore ({kind})", in_flight)]
                / median[(f"paho-mqtt ({kind})", in_flight)]
            )
            print(f"mqstore / paho-mqtt, {kind}, {in_flight:2} in flight: {ratio:.2f}x the ops/s")
    for kind in ("sync", "asyncio"):
        python_us = 1e6 / median[(f"mqstore ({kind})", 1)]
        ratio = python_us / rust_us
        print(f"Python ({kind}) / Rust client, 1 in flight: {ratio:.2f}x the time per call")
    for kind in ("sync", "asyncio"):
        ratio = median[(f"mqstore ({kind})", 16)] / median[("Rust client", 16)]
        print(f"Python ({kind}) / Rust client, 16 in flight: {ratio:.2f}x the ops/s")


if __name__ == "__main__":
    main()
