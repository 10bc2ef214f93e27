"""The smoke run of an installed mqstore wheel (scripts/test-dist): every kind of call once,
against a broker and `mqstore serve`.

    python smoke.py HOST PORT

(bindings-c/tests/run.py starts them, and says in MQSTORE_TEST_CLOSED_PORT where nothing listens.)

Runs on any CPython the wheels are for (3.9 and newer), with nothing installed but the wheel:
under the x86_64 interpreter, a musl one and Debian's arm64 one under qemu-user. Prints one
line per step and "smoke: ok" at the end; any failure raises.
"""

from __future__ import annotations

import os
import sys
import uuid

import mqstore
from mqstore import errors


def main(host: str, port: int) -> None:
    closed_port = int(os.environ["MQSTORE_TEST_CLOSED_PORT"])
    run = uuid.uuid4().hex[:8]
    key, thing, job = f"smoke/{run}", f"smoke-thing-{run}", f"smoke-job-{run}"
    print(f"mqstore {mqstore.__version__} on Python {sys.version.split()[0]}")
    with mqstore.Client(host, port) as client:
        stored = client.set(key, b"one")
        found = client.get(key)
        assert found is not None and found.value == b"one", found
        assert found.version == stored.version
        print("set and get: ok")

        with client.observe(key) as observation:
            client.set(key, b"two")
            change = observation.next_change(timeout=10)
            assert change is not None and change.value == b"two", change
        print("observe: ok")

        lease = client.lease(f"{key}/lock", ttl=10)
        assert lease is not None
        with lease:
            assert lease.held
            token = lease.fencing_token
        assert not lease.held
        print(f"lease: ok (fencing token {token})")

        device = client.jobs(thing)
        client.create_job(job, [thing], {"operation": "smoke"})
        started = device.start_next()
        assert started is not None and started["jobId"] == job, started
        device.update(job, status="SUCCEEDED")
        assert client.describe_job_execution(job, thing)["status"] == "SUCCEEDED"
        print("job: ok")

        # No device listens: the command is accepted, then times out, and its record says so.
        try:
            client.command(f"smoke/devices/{run}/commands", b"reboot", timeout=1)
        except errors.CommandTimeoutError as timed_out:
            assert timed_out.command_id is not None
            record = client.command_status(timed_out.command_id)
            assert record["status"] == "TIMED_OUT", record
        else:
            raise AssertionError("a command nobody answers must time out")
        print("command: ok (timed out, as nobody answers)")

        try:
            client.set(key, b"x", expires=-1)
        except ValueError as bad:
            print(f"error: ok ({bad})")
        else:
            raise AssertionError("a negative expiry must be refused")
        assert client.get(key).value == b"two"  # type: ignore[union-attr]

    try:
        mqstore.Client(host, closed_port, timeout=2)
    except errors.MqstoreError as unreachable:
        print(f"unreachable broker: ok ({type(unreachable).__name__})")
    else:
        raise AssertionError("connecting to a closed port must fail")
    print("smoke: ok")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
