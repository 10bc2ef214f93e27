"""mosquitto and ``mqstore serve`` on free ports, for the tests (conftest.py) and the benchmark.

The server binary is ``$MQSTORE_BIN``, else the workspace's ``target/debug/mqstore`` (``cargo
build -p mqstore`` makes it); mosquitto is ``$MOSQUITTO``, else found on PATH or in /usr/sbin.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import ClassVar, Optional


def rust_client_ops(port: int, in_flight: int, seconds: float) -> float:
    """The Rust client's calls per second at `in_flight`, measured by `mqstore bench` on one
    connection (it also measures an echo responder, not counted here): the baseline the
    bindings' benchmarks compare with."""
    out = subprocess.run(
        [
            mqstore_binary(),
            "--port",
            str(port),
            "bench",
            "--in-flight",
            str(in_flight),
            "--connections",
            "1",
            "--duration",
            str(max(1, round(seconds))),
            "--rounds",
            "1",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # The table's row: "        1 |          6763 |   0.15 | ..." (in flight | mqstore ops/s | ...)
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 2 and cells[0] == str(in_flight):
            return float(cells[1])
    raise RuntimeError(f"cannot read `mqstore bench`'s output:\n{out}")


def print_medians(rates: dict[tuple[str, int], list[float]]) -> dict[tuple[str, int], float]:
    """Prints each (client, in flight)'s median ops/s and time per call; returns the medians."""
    width = max(len(name) for name, _ in rates)
    print(f"\n{'':{width}} {'in flight':>9} {'ops/s (median)':>15} {'µs per call':>12}")
    median = {key: statistics.median(values) for key, values in rates.items()}
    for (name, in_flight), ops in median.items():
        print(f"{name:{width}} {in_flight:9} {ops:15.0f} {1e6 / ops * in_flight:12.1f}")
    print()
    return median


class HarnessError(RuntimeError):
    """A part of the test setup is missing or did not start."""


REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "testdata" / "state-store.json"
STARTUP = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def mqstore_binary() -> str:
    path = os.environ.get("MQSTORE_BIN") or str(REPO / "target" / "debug" / "mqstore")
    if not os.access(path, os.X_OK):
        raise HarnessError(
            f"the server binary {path} is missing: run `cargo build -p mqstore` "
            "(or set MQSTORE_BIN)"
        )
    return path


def mosquitto_binary() -> str:
    found = os.environ.get("MOSQUITTO") or shutil.which("mosquitto")
    if found is None and os.access("/usr/sbin/mosquitto", os.X_OK):
        found = "/usr/sbin/mosquitto"
    if found is None:
        raise HarnessError("mosquitto is missing: `apt-get install mosquitto` (scripts/test does)")
    return found


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + STARTUP
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise HarnessError(f"{what} exited with {process.returncode} while starting")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise HarnessError(f"{what} did not listen on port {port} within {STARTUP} s")


class Broker:
    """mosquitto (MQTT 5) on a free port (or ``port``); ``restart`` keeps the port."""

    def __init__(self, extra_config: str = "", port: Optional[int] = None) -> None:
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="mqstore-py-broker-"))
        anonymous = "" if "allow_anonymous" in extra_config else "allow_anonymous true\n"
        self.config = self.dir / "mosquitto.conf"
        self.config.write_text(
            # Started by root, mosquitto would switch to the user `mosquitto`, who cannot
            # read files in a private folder (the tests' own, a checkout's): it stays this one.
            f"user {pwd.getpwuid(os.getuid()).pw_name}\n"
            f"listener {self.port} 127.0.0.1\n{extra_config}{anonymous}"
            # A whole asyncio.gather of answers queued for one client is not dropped.
            "max_queued_messages 100000\n"
            "set_tcp_nodelay true\npersistence false\nlog_dest stderr\n"
        )
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.start()

    def start(self) -> None:
        log = open(self.dir / "stderr.txt", "ab")
        self.process = subprocess.Popen(
            [mosquitto_binary(), "-c", str(self.config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        wait_for_port(self.port, self.process, "mosquitto")

    def kill(self) -> None:
        """Stops the broker at once (SIGKILL): nothing is said to its clients."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Server:
    """``mqstore serve`` next to a broker, with its Prometheus metrics on a free port (or
    ``metrics_port``)."""

    # Every server started, so that a failing test can show their logs (conftest.py).
    started: ClassVar[list[Server]] = []

    def __init__(self, broker: Broker, *args: str, metrics_port: Optional[int] = None) -> None:
        Server.started.append(self)
        self.broker = broker
        self.metrics_port = metrics_port or free_port()
        self.lines: list[str] = []
        self._connections = 0
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            [
                mqstore_binary(),
                "--port",
                str(broker.port),
                "serve",
                "--node-id",
                "py-node",
                "--metrics",
                f"127.0.0.1:{self.metrics_port}",
                *args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "NO_COLOR": "1"},
        )
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        self.wait_connected(1)

    def _read_log(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            line = raw.decode("utf-8", "replace")
            with self._changed:
                self.lines.append(line)
                if "connected to the broker; subscribed" in line:
                    self._connections += 1
                self._changed.notify_all()

    def wait_connected(self, times: int) -> None:
        """Waits until the server has (re)connected to the broker ``times`` times in all."""
        with self._changed:
            if not self._changed.wait_for(
                lambda: self._connections >= times or self.process.poll() is not None,
                timeout=STARTUP,
            ):
                raise HarnessError("mqstore serve did not connect:\n" + "".join(self.lines))
        if self.process.poll() is not None:
            raise HarnessError("mqstore serve exited:\n" + "".join(self.lines))

    def log(self) -> str:
        """The server's log so far, and its broker's."""
        with self._changed:
            server = "".join(self.lines[-80:])
        try:
            broker = (self.broker.dir / "stderr.txt").read_text()[-4000:]
        except OSError:
            broker = "(gone)"
        return f"--- mqstore serve\n{server}--- mosquitto\n{broker}"

    @property
    def connections(self) -> int:
        with self._changed:
            return self._connections

    def requests_handled(self) -> int:
        """How many state store requests the server has answered (its metrics)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        return sum(
            int(float(line.rsplit(" ", 1)[1]))
            for line in text.splitlines()
            if line.startswith("mqstore_requests_total{")
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=5)
        if self.process.stderr is not None:
            self.process.stderr.close()
