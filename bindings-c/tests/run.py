"""Runs the C test binaries against real brokers and servers on free ports.

    python3 run.py [--valgrind] BINARY...

Starts, with the harness the Python tests use (bindings-python/tests/harness.py, one broker
setup for every binding): mosquitto + `mqstore serve`; a second pair whose server has
`--max-keys 3` and access rules; a broker with `max_packet_size 2000` and no server; and
picks a port where nothing listens. Their ports go to the binaries in the environment
(MQSTORE_TEST_PORT, ..._LIMITED_PORT, ..._BARE_PORT, ..._CLOSED_PORT). With --valgrind each
binary runs under valgrind's memcheck (children too), and any error or leak (definite,
indirect or possible) fails it. A failing binary prints the servers' and brokers' logs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bindings-python" / "tests"))

from harness import Broker, Server, free_port  # noqa: E402

VALGRIND = [
    "valgrind",
    "--quiet",
    "--error-exitcode=99",
    "--leak-check=full",
    "--errors-for-leak-kinds=definite,indirect,possible",
    "--show-leak-kinds=definite,indirect,possible",
    "--trace-children=yes",
    "--child-silent-after-fork=yes",
]


def main(args: list[str]) -> int:
    valgrind = "--valgrind" in args
    binaries = [a for a in args if a != "--valgrind"]
    started: list[Broker | Server] = []
    try:
        main_broker = Broker()
        started.append(main_broker)
        started.append(Server(main_broker))
        limited_broker = Broker()
        started.append(limited_broker)
        limited = Server(
            limited_broker,
            "--max-keys",
            "3",
            "--access-rule",
            "* readonly/* r",
            "--access-rule",
            "* * rw",
        )
        started.append(limited)
        bare = Broker("max_packet_size 2000\n")
        started.append(bare)
        env = {
            **os.environ,
            "MQSTORE_TEST_PORT": str(main_broker.port),
            "MQSTORE_TEST_LIMITED_PORT": str(limited_broker.port),
            "MQSTORE_TEST_BARE_PORT": str(bare.port),
            "MQSTORE_TEST_CLOSED_PORT": str(free_port()),
        }
        failed = 0
        for binary in binaries:
            command = [*VALGRIND, binary] if valgrind else [binary]
            print(f"--- {' '.join(command)}", flush=True)
            result = subprocess.run(command, env=env, check=False)
            if result.returncode != 0:
                failed += 1
                why = "valgrind found errors or leaks" if result.returncode == 99 else f"exit status {result.returncode}"
                print(f"test result: FAILED. 0 passed; 1 failed; 0 ignored ({binary}: {why})")
                for part in started:
                    if isinstance(part, Server):
                        print(part.log())
        return 1 if failed else 0
    finally:
        for part in reversed(started):
            part.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
