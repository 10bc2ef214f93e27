"""The C client against the Rust client: the same requests through the same broker and server,
in one run.

    cargo build --release -p mqstore -p mqstore-c
    cc -O2 -Ibindings-c/include bindings-c/benches/bench.c target/release/libmqstore.a \\
        -lpthread -ldl -lm -o target/release/bench-c
    python3 bindings-c/benches/bench.py

Both make SET and GET alternately over 1,000 keys with 64-byte values, on one connection, at
1 and 16 calls in flight (the C client: threads sharing one mqstore_client with blocking
calls; the Rust client: `mqstore bench`, tasks on one client). They take turns (``--rounds``)
so the machine's noise spreads over both. Figures: docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bindings-python" / "tests"))

from harness import Broker, Server, print_medians, rust_client_ops

C_BENCH = os.environ.get("C_BENCH", str(REPO / "target" / "release" / "bench-c"))


def c_client(port: int, in_flight: int, seconds: float) -> float:
    out = subprocess.run(
        [C_BENCH, str(port), str(in_flight), str(seconds)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3, help="each turn's length")
    parser.add_argument(
        "--rounds", type=int, default=5, help="turns per client and level"
    )
    args = parser.parse_args()
    broker = Broker()
    server = Server(broker)
    rates: dict[tuple[str, int], list[float]] = {}
    try:
        for in_flight in (1, 16):
            for _ in range(args.rounds):
                for name, run in (
                    ("C client", c_client),
                    ("Rust client", rust_client_ops),
                ):
                    ops = run(broker.port, in_flight, args.seconds)
                    rates.setdefault((name, in_flight), []).append(ops)
                    print(
                        f"  {name:12} {in_flight:3} in flight: {ops:9.0f} ops/s",
                        flush=True,
                    )
    finally:
        server.stop()
        broker.stop()
    median = print_medians(rates)
    for in_flight in (1, 16):
        ratio = median[("Rust client", in_flight)] / median[("C client", in_flight)]
        print(
            f"C / Rust client, {in_flight:2} in flight: {ratio:.2f}x the time per call"
        )


if __name__ == "__main__":
    main()
