"""A device inventory kept in the mqstore state store.

Devices report their state under ``inventory/devices/{id}``. This service, run as one instance
or many, elects a leader with a lease; the leader observes every known device key and keeps
``inventory/summary`` up to date, writing it with its fencing token, so that a leader which
stalled and lost its lease can never overwrite a newer leader's summary.

    bash scripts/run                                  # a broker and mqstore serve
    python examples/python/inventory.py --simulate 3  # three simulated devices report too

Ctrl-C stops it (the lease is released, and another instance takes over).
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import threading
import time

import mqstore

PREFIX = "inventory/devices/"
SUMMARY = "inventory/summary"


def simulate(client: mqstore.Client, devices: int, stop: threading.Event) -> None:
    """Devices that each report a battery level every half second."""
    while not stop.is_set():
        for device in range(devices):
            report = json.dumps({"battery": random.randrange(100)})
            client.set(f"{PREFIX}sim-{device}", report, expires=60)
        stop.wait(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=1883)
    parser.add_argument("--simulate", type=int, default=0, metavar="N", help="simulate N devices")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long")
    args = parser.parse_args()

    stop = threading.Event()
    with mqstore.Client(args.host, args.port) as client:
        if args.simulate:
            threading.Thread(target=simulate, args=(client, args.simulate, stop)).start()
        try:
            run(client, args.simulate, args.seconds)
        except KeyboardInterrupt:
            print("stopping")
        finally:
            stop.set()


def run(client: mqstore.Client, simulated: int, seconds: float | None) -> None:
    deadline = None if seconds is None else time.monotonic() + seconds
    print(f"{client.client_id}: waiting to lead the inventory")
    with client.lead("inventory/leader", ttl=5) as lease:
        print(f"leading with fencing token {lease.fencing_token}")
        # Devices known now, and those the simulation will report.
        keys = set(client.scan(PREFIX + "*"))
        keys |= {f"{PREFIX}sim-{i}".encode() for i in range(simulated)}
        # One thread per observed key feeds one queue (threads share the client).
        changes: queue.Queue[mqstore.Change] = queue.Queue()
        observations = [client.observe(key) for key in sorted(keys)]

        def forward(observation: mqstore.Observation) -> None:
            for change in observation:  # until the observation is closed
                changes.put(change)

        for observation in observations:
            threading.Thread(target=forward, args=(observation,)).start()
        inventory: dict[str, str] = {}
        for key in keys:
            found = client.get(key)
            if found is not None:
                inventory[key.decode()[len(PREFIX) :]] = found.value.decode()
        while deadline is None or time.monotonic() < deadline:
            try:
                change = changes.get(timeout=0.2)
            except queue.Empty:
                continue
            device = change.key.decode()[len(PREFIX) :]
            if change.value is None:
                inventory.pop(device, None)
                print(f"{device}: gone")
            else:
                inventory[device] = change.value.decode()
                print(f"{device}: {inventory[device]}")
            if not lease.held:
                print("lost the lease: another instance leads now")
                break
            summary = json.dumps({"devices": len(inventory), "inventory": inventory})
            client.set(SUMMARY, summary, fencing_token=lease.fencing_token)
        for observation in observations:
            observation.close()  # ends its thread's iteration
    summary_now = client.get(SUMMARY)
    if summary_now is not None:
        print(f"summary: {summary_now.value.decode()}")


if __name__ == "__main__":
    main()
