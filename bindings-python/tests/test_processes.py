"""Across processes: two processes contending for a lease, an observer that misses a change
while the broker restarts, ``fork()``, and Ctrl-C in a blocked call."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import warnings

import mqstore
import pytest
from conftest import python_child, read_line
from harness import Broker, Server
from mqstore import errors

# A child that takes the lease on KEY (ttl 1 s), writes KEY/data with its fencing token, then
# on "write" writes it again with the same token, reporting each step.
HOLDER = """
import sys, time, mqstore
client = mqstore.Client("127.0.0.1", int(sys.argv[1]))
lease = client.lease(sys.argv[2], 1.0)
print("held" if lease else "refused")
if lease:
    client.set(sys.argv[2] + "/data", "from " + client.client_id, fencing_token=lease.fencing_token)
    print("wrote", lease.fencing_token)
    sys.stdin.readline()
    try:
        client.set(sys.argv[2] + "/data", "stale", fencing_token=lease.fencing_token)
        print("stale write applied")
    except mqstore.errors.FencingTokenLowerVersionError as e:
        print("fenced", e.code)
    # Its next renewal finds the key taken.
    deadline = time.monotonic() + 10
    while lease.held and time.monotonic() < deadline:
        time.sleep(0.05)
    print("held after" if lease.held else "lost")
client.close()
"""


def test_two_processes_contend_for_a_lease_and_fencing_stops_the_stale_one(
    server: Server, key: str
) -> None:
    port = str(server.broker.port)
    children = [python_child(HOLDER, port, key), python_child(HOLDER, port, key)]
    try:
        contend(server, key, children)
    finally:
        for child in children:
            child.kill()
            child.communicate()


def contend(server: Server, key: str, children: list[subprocess.Popen[str]]) -> None:
    answers = [read_line(child) for child in children]
    assert sorted(answers) == ["held", "refused"], "exactly one process holds the lease"
    holder, other = children if answers[0] == "held" else reversed(children)
    assert other.wait(30) == 0
    assert read_line(holder).startswith("wrote ")

    # The holder stops (as a process stalled by the OS would): its renewals stop, the lease
    # expires, and this process takes it with a newer fencing token.
    holder.send_signal(signal.SIGSTOP)
    with mqstore.Client("127.0.0.1", server.broker.port) as c:
        lease = c.lease(key, 30, wait=30)
        assert lease is not None
        assert c.set(
            key + "/data", "from the new holder", fencing_token=lease.fencing_token
        ).applied
        holder.send_signal(signal.SIGCONT)
        assert holder.stdin is not None
        holder.stdin.write("write\n")
        holder.stdin.flush()
        assert read_line(holder) == "fenced 104"
        assert read_line(holder) == "lost"
        assert holder.wait(30) == 0
        got = c.get(key + "/data")
        assert got is not None and got.value == b"from the new holder"
        lease.release()


# A child that observes `key` and prints every change as `value synthetic`.
OBSERVER = """
import sys, mqstore
client = mqstore.Client("127.0.0.1", int(sys.argv[1]))
with client.observe(sys.argv[2]) as changes:
    print("observing")
    for change in changes:
        print(change.value.decode() if change.value is not None else "<deleted>", change.synthetic)
"""


def test_observe_across_a_broker_restart_reports_what_was_missed(
    fresh_broker: Broker, key: str
) -> None:
    server = Server(fresh_broker)
    observer = python_child(OBSERVER, str(fresh_broker.port), key)
    try:
        assert read_line(observer) == "observing"
        with mqstore.Client("127.0.0.1", fresh_broker.port) as writer:
            writer.set(key, "v1")
            assert read_line(observer) == "v1 False"
            # The observer is stalled while the broker restarts and the key changes: the
            # notification finds nobody. When it runs again it reconnects, registers again
            # and reads the key back.
            observer.send_signal(signal.SIGSTOP)
            fresh_broker.restart()
            server.wait_connected(2)
            deadline = time.monotonic() + 30
            while True:
                try:
                    writer.set(key, "changed while away")
                    break
                except (errors.ConnectionLostError, errors.RequestTimeoutError):
                    assert time.monotonic() < deadline, "the writer never reconnected"
            observer.send_signal(signal.SIGCONT)
            assert read_line(observer) == "changed while away True"
            # And notifications flow again.
            writer.set(key, "v3")
            assert read_line(observer) == "v3 False"
    finally:
        observer.kill()
        observer.communicate()
        server.stop()


def test_a_client_used_after_fork_raises_and_the_child_can_connect_its_own(
    client: mqstore.Client, server: Server, key: str
) -> None:
    client.set(key, "parent")
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a process with threads may deadlock: the point here.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: exit codes tell the parent what happened
        code = 1
        try:
            client.get(key)
        except errors.ClientForkedError as e:
            code = 2 if "connect a new Client in the child" in str(e) else 3
        if code == 2:
            try:
                with mqstore.Client("127.0.0.1", server.broker.port) as own:
                    own.set(key, "child")
                code = 0
            except BaseException:
                code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    got = client.get(key)
    assert got is not None and got.value == b"child"


BLOCKED = """
import signal, sys, mqstore
# Ctrl-C raises KeyboardInterrupt even when the test run was started with SIGINT ignored (as a
# background job of a shell without job control is, and everything it starts).
signal.signal(signal.SIGINT, signal.default_int_handler)
client = mqstore.Client("127.0.0.1", int(sys.argv[1]))
changes = client.observe(sys.argv[2])
print("waiting")
try:
    next(changes)
    print("a change arrived")
except KeyboardInterrupt:
    print("interrupted")
client.close()
"""


# Only the main thread's calls look for signals; a call made first on another thread must not
# keep the main thread's from doing so.
OTHER_THREAD_FIRST = """
import threading
worker = threading.Thread(target=client.get, args=(sys.argv[2],))
worker.start()
worker.join()
changes = client.observe(sys.argv[2])
"""


@pytest.mark.parametrize("call", ["observe", "lead", "observe after another thread's call"])
def test_ctrl_c_interrupts_a_blocked_call(server: Server, key: str, call: str) -> None:
    code = BLOCKED
    if call == "lead":
        code = BLOCKED.replace("next(changes)", "client.lead(sys.argv[2] + '/held', 30)")
    elif call.startswith("observe after"):
        code = BLOCKED.replace("changes = client.observe(sys.argv[2])\n", OTHER_THREAD_FIRST)
        assert "threading.Thread" in code
    with mqstore.Client("127.0.0.1", server.broker.port) as c:
        held = c.lease(key + "/held", 30)
        assert held is not None
        child = python_child(code, str(server.broker.port), key)
        assert read_line(child) == "waiting"
        time.sleep(0.2)  # into the blocking call
        child.send_signal(signal.SIGINT)
        assert read_line(child, timeout=10) == "interrupted"
        assert child.wait(10) == 0
        child.communicate()
        held.release()
