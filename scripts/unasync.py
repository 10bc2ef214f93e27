"""Writes the blocking Python client's calls from the asyncio client's, so that each call is
defined once.

The calls of ``mqstore.AsyncClient`` (``bindings-python/python/mqstore/_aio.py``, between the
two "the calls" marker lines) are the source; this writes them, without ``async`` and
``await``, with the ``Async`` prefix dropped from the names they use (``AsyncLease`` is
``Lease``), into the same place in ``_client.py``. Each file says by its ``_AIO`` constant which
form of the native calls it makes. The rest of each file (connecting, closing, observations,
leases) is written by hand: there the two clients differ.

    python3 scripts/unasync.py           # rewrites _client.py's calls
    python3 scripts/unasync.py --check   # fails when _client.py is not what it would write

The output is formatted with ruff (the one that scripts/test-python installs, or ``RUFF``), as
the lint formats the package. scripts/test-python runs the check.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "bindings-python" / "python" / "mqstore"
SOURCE = PACKAGE / "_aio.py"
TARGET = PACKAGE / "_client.py"
BEGIN = "    # --- the calls: scripts/unasync.py writes the blocking client's from these"
END = "    # --- end of the calls"

# In this order: coroutines are functions, awaits go, async loops and blocks are plain ones,
# the asyncio names are the blocking ones (AsyncIterator, AsyncLease, AsyncJobs, ...), and a
# loop of yields is a `yield from`.
RULES = [
    (re.compile(r"\basync def\b"), "def"),
    (re.compile(r"\bawait "), ""),
    (re.compile(r"\basync (for|with)\b"), r"\1"),
    (re.compile(r"\bAsync(?=[A-Z])"), ""),
    # An async generator cannot `yield from`; a plain one says it so.
    (re.compile(r"for (\w+) in (\w+):\n\s+yield \1\n"), r"yield from \2\n"),
]


def region(text: str, path: Path) -> tuple[int, int]:
    """Where the calls are in ``text``: from the start of the BEGIN line to the start of END's."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        sys.exit(f"{path}: the marker lines ('{BEGIN.strip()}', '{END.strip()}') are missing")
    return start, end


def blocking(calls: str) -> str:
    for pattern, replacement in RULES:
        calls = pattern.sub(replacement, calls)
    return calls


def formatted(text: str) -> str:
    ruff = os.environ.get("RUFF") or str(
        Path(__file__).resolve().parent.parent / "target" / "python" / "dev" / "bin" / "ruff"
    )
    if not Path(ruff).exists():
        ruff = "ruff"
    try:
        done = subprocess.run(
            [ruff, "format", "--stdin-filename", str(TARGET), "-"],
            input=text,
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        sys.exit("ruff is not installed: run bash scripts/test-python once, or set RUFF")
    if done.returncode != 0:
        sys.exit(f"ruff format failed on the written client:\n{done.stderr}")
    return done.stdout


def written() -> str:
    """_client.py as this script writes it."""
    source = SOURCE.read_text()
    start, end = region(source, SOURCE)
    target = TARGET.read_text()
    t_start, t_end = region(target, TARGET)
    return formatted(target[:t_start] + blocking(source[start:end]) + target[t_end:])


def main() -> None:
    new = written()
    if sys.argv[1:] == ["--check"]:
        if new != TARGET.read_text():
            sys.exit(
                f"{TARGET} is not written from {SOURCE.name}'s calls: "
                "run python3 scripts/unasync.py and commit the result"
            )
        print(f"{TARGET.name}'s calls are written from {SOURCE.name}'s")
    elif sys.argv[1:]:
        sys.exit("usage: python3 scripts/unasync.py [--check]")
    else:
        TARGET.write_text(new)
        print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
