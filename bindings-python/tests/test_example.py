"""examples/python/inventory.py runs as its README says, against a real broker and server."""

from __future__ import annotations

import json
import subprocess
import sys

import mqstore
from harness import REPO, Server


def test_the_inventory_example_leads_observes_and_summarizes(server: Server) -> None:
    example = REPO / "examples" / "python" / "inventory.py"
    port = str(server.broker.port)
    run = subprocess.run(
        [sys.executable, str(example), "--port", port, "--simulate", "2", "--seconds", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "leading with fencing token" in run.stdout
    with mqstore.Client("127.0.0.1", server.broker.port) as client:
        summary = client.get("inventory/summary")
        assert summary is not None
        written = json.loads(summary.value)
        assert written["devices"] == 2
        assert set(written["inventory"]) == {"sim-0", "sim-1"}
        # The leader released its lease on the way out.
        assert client.get("inventory/leader") is None


def test_the_paho_example_drives_the_client_session(server: Server) -> None:
    example = REPO / "examples" / "python" / "paho_core.py"
    run = subprocess.run(
        [sys.executable, str(example), "--port", str(server.broker.port)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("SET applied=True version="), run.stdout
    assert lines[1].startswith("GET 'hello from paho' version="), run.stdout
    assert lines[2].startswith("lease fencing token: "), run.stdout
    assert lines[3] == "released: True", run.stdout
    with mqstore.Client("127.0.0.1", server.broker.port) as client:
        greeting = client.get("greeting")
        assert greeting is not None and greeting.value == b"hello from paho"
