"""Fixtures: real parts (see harness.py), started here and stopped afterwards."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Generator, Iterator

import mqstore
import pytest
from harness import REPO, Broker, Server

VECTORS = REPO / "testdata" / "state-store.json"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing test shows the logs of the servers (and brokers) running during it."""
    report = yield
    if report.failed and call.when == "call":
        first = item.stash.get(FIRST_SERVER, len(Server.started))
        for server in Server.started:
            ours = Server.started.index(server) >= first
            if ours or server.process.poll() is None:
                report.sections.append(
                    (f"mqstore serve, broker port {server.broker.port}", server.log())
                )
    return report


FIRST_SERVER = pytest.StashKey[int]()


@pytest.fixture(autouse=True)
def _note_servers_started(request: pytest.FixtureRequest) -> None:
    """Where this test's servers begin in `Server.started` (for the report above)."""
    request.node.stash[FIRST_SERVER] = len(Server.started)


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    b = Broker()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def server(broker: Broker) -> Iterator[Server]:
    s = Server(broker)
    yield s
    s.stop()


@pytest.fixture
def fresh_broker() -> Iterator[Broker]:
    """A broker of the test's own (to restart, or to configure)."""
    b = Broker()
    yield b
    b.stop()


@pytest.fixture
def client(server: Server) -> Iterator[mqstore.Client]:
    with mqstore.Client("127.0.0.1", server.broker.port, timeout=5) as c:
        yield c


@pytest.fixture
def key(request: pytest.FixtureRequest) -> str:
    """A key no other test uses."""
    return f"py/{request.node.name}"


def python_child(code: str, *args: str) -> subprocess.Popen[str]:
    """Another Python process running ``code`` (with this test run's ``mqstore``), talking
    over its standard input and output, one line at a time."""
    return subprocess.Popen(
        [sys.executable, "-u", "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_line(process: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """The child's next line of output (fails the test if none comes in time)."""
    assert process.stdout is not None
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(process.stdout.readline()))  # type: ignore[union-attr]
    reader.daemon = True
    reader.start()
    reader.join(timeout)
    if not result or not result[0]:
        process.kill()
        _, err = process.communicate()
        raise AssertionError(f"the child process said nothing within {timeout} s: {err}")
    return result[0].rstrip("\n")
