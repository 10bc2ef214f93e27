#!/usr/bin/env python3
"""Runs the command blocks of the READMEs and the guide, as a reader would paste them.

    python3 scripts/docs_blocks.py [FILE.md ...]

For each Markdown file, a fresh mosquitto and `mqstore serve` start on the defaults of
`bash scripts/run` — MQTT on 127.0.0.1:1883, MQTT over WebSocket on 9001, metrics on 9464 — so
that every block runs exactly as written (a port in use is an error that says so). Blocks run
in order, in one scratch directory per file:

* `sh`/`bash`: with `bash -e -o pipefail`; `mqstore` on `PATH` is `$MQSTORE_BIN`.
* `python`: with `$DOCS_PYTHON` (a Python with the mqstore package installed).
* `js`: as an ES module in `$DOCS_NODE_PROJECT` (a project with the npm package installed).
* `c`: compiled with `pkg-config mqstore` (`$PKG_CONFIG_PATH`) and run.

A block that cannot run (it installs packages, runs until stopped, is a sketch) has
`<!-- docs-test: skip (reason) -->` on the line before it; each is listed with its reason.
Rust blocks are fragments of a program (`client` is a connected `Client`): each is compiled
(`cargo check`), as the body of an async function of its own, in one crate that depends on
`mqstore-core`, `mqstore-net` and `mqstore-server`; they are not run. Blocks of other
languages (JSON, TOML, HTML, text) are counted, not run. Exits 1 if any block fails, and prints
what it printed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bindings-python" / "tests"))

from harness import Broker, Server  # noqa: E402  (the Python tests' harness, found above)

RUNNABLE = {"sh": "sh", "bash": "sh", "python": "python", "js": "js", "javascript": "js", "c": "c"}
SKIP = re.compile(r"^<!--\s*docs-test:\s*skip\s*\((.+)\)\s*-->\s*$")
BLOCK_TIMEOUT = 180


@dataclass
class Block:
    path: Path
    line: int
    language: str
    text: str
    skip: str | None


def blocks(path: Path) -> list[Block]:
    found = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not fence:
            i += 1
            continue
        indent, marker, language = fence.groups()
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(marker):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        skip = SKIP.match(lines[start - 1].strip()) if start > 0 else None
        found.append(
            Block(path, start + 1, language.lower(), "\n".join(body) + "\n", skip and skip.group(1))
        )
    return found


def check_free(port: int) -> int:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise SystemExit(
                f"port {port} is in use ({e}): the blocks run against scripts/run's defaults "
                "(1883, 9001, 9464); stop what listens there"
            ) from None
    return port


class Services:
    """mosquitto and `mqstore serve` on scripts/run's ports, for one file's blocks: the Python
    tests' harness (bindings-python/tests/harness.py), with its ports fixed."""

    def __init__(self) -> None:
        for port in (1883, 9001, 9464):
            check_free(port)
        websocket = "listener 9001 127.0.0.1\nprotocol websockets\n"
        self.broker = Broker(extra_config=websocket, port=1883)
        try:
            self.server = Server(self.broker, metrics_port=9464)
        except BaseException:
            self.broker.stop()
            raise

    def stop(self) -> None:
        self.server.process.terminate()
        try:
            self.server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.server.process.kill()
        self.broker.stop()


def needed(name: str, what: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"{name} is not set: it names {what} (scripts/test-docs sets it)")
    return value


def command_for(block: Block, scratch: Path, number: int) -> list[str]:
    kind = RUNNABLE[block.language]
    if kind == "sh":
        return ["bash", "-e", "-o", "pipefail", "-c", block.text]
    if kind == "python":
        script = scratch / f"block_{number}.py"
        script.write_text(block.text)
        return [needed("DOCS_PYTHON", "a Python with mqstore installed"), str(script)]
    if kind == "js":
        project = needed("DOCS_NODE_PROJECT", "a directory with the npm package installed")
        script = Path(project) / f"block_{number}.mjs"
        script.write_text(block.text)
        return ["node", str(script)]
    source = scratch / f"block_{number}.c"
    source.write_text(block.text)
    binary = scratch / f"block_{number}"
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "mqstore"], check=True, capture_output=True, text=True
    ).stdout.split()
    libdir = subprocess.run(
        ["pkg-config", "--variable=libdir", "mqstore"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return [
        "bash",
        "-e",
        "-c",
        f"cc -Wall -Werror {source} {' '.join(flags)} -Wl,-rpath,{libdir} -o {binary} && {binary}",
    ]


RUST_PRELUDE = """#![allow(unused, unreachable_code, clippy::all)]
use std::time::Duration;

use mqstore_net::client::Client;

type BlockResult = Result<(), Box<dyn std::error::Error>>;

fn main() {}
"""


def check_rust(found: list[Block]) -> list[str]:
    """Compiles every Rust block as the body of an async function (`client` in scope);
    returns the failures."""
    crate = ROOT / "target" / "docs-blocks"
    (crate / "src").mkdir(parents=True, exist_ok=True)
    (crate / "Cargo.toml").write_text(
        f"""[package]
name = "docs-blocks"
version = "0.0.0"
edition = "2024"
publish = false

# Not a member of mqstore's workspace: a crate of its own, with the workspace's lock file.
[workspace]

[dependencies]
mqstore-core = {{ path = "{ROOT / "core"}" }}
mqstore-net = {{ path = "{ROOT / "net"}" }}
mqstore-server = {{ path = "{ROOT / "server"}" }}
bytes = "1"
serde_json = "1"
tokio = {{ version = "1", features = ["macros", "rt-multi-thread"] }}
"""
    )
    shutil.copy(ROOT / "Cargo.lock", crate / "Cargo.lock")
    source = [RUST_PRELUDE]
    spans = []  # (first line, last line, block)
    for number, block in enumerate(found):
        first = sum(part.count("\n") for part in source) + 2
        body = "".join(f"    {line}\n" for line in block.text.splitlines())
        source.append(
            f"async fn block_{number}(client: Client) -> BlockResult {{\n{body}    Ok(())\n}}\n"
        )
        spans.append((first, first + block.text.count("\n"), block))
    (crate / "src" / "main.rs").write_text("".join(source))
    result = subprocess.run(
        ["cargo", "check", "--quiet", "--message-format", "short"],
        cwd=crate,
        env={**os.environ, "CARGO_TARGET_DIR": str(ROOT / "target")},
        capture_output=True,
        text=True,
    )
    if result.returncode == 0:
        return []
    failures = []
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    for first, last, block in spans:
        mine = [
            line
            for line in errors
            if (m := re.match(r"src/main\.rs:(\d+):", line)) and first <= int(m.group(1)) <= last
        ]
        if mine:
            where = f"{block.path.relative_to(ROOT)}:{block.line} (rust)"
            failures.append(
                f"{where}: does not compile\n--- block ---\n{block.text}--- errors ---\n"
                + "\n".join(mine)
            )
    if not failures:
        failures.append(f"the Rust blocks' crate does not build:\n{result.stderr}")
    return failures


def run_file(path: Path, shim: Path) -> tuple[int, int, list[str], list[str]]:
    """Runs one file's blocks: (run, not runnable here, skipped with reasons, failures)."""
    found = blocks(path)
    runnable = [b for b in found if b.language in RUNNABLE]
    other = len([b for b in found if b.language not in RUNNABLE and b.language != "rust"])
    skipped = [f"{path.relative_to(ROOT)}:{b.line}: {b.skip}" for b in runnable if b.skip]
    to_run = [b for b in runnable if not b.skip]
    failures: list[str] = []
    if not to_run:
        return 0, other, skipped, failures
    scratch = Path(tempfile.mkdtemp(prefix="docs-test-"))
    services = Services()
    env = dict(os.environ)
    env["PATH"] = f"{shim}:{env['PATH']}"
    try:
        for number, block in enumerate(to_run):
            where = f"{path.relative_to(ROOT)}:{block.line} ({block.language})"
            started = time.monotonic()
            # A session of its own, so that what the block left running in the background
            # is stopped with it.
            process = subprocess.Popen(
                command_for(block, scratch, number),
                cwd=scratch,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            try:
                output, _ = process.communicate(timeout=BLOCK_TIMEOUT)
                ok = process.returncode == 0
                status = f"exit {process.returncode}"
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                output, _ = process.communicate()
                ok = False
                status = f"still running after {BLOCK_TIMEOUT} s"
            finally:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            print(f"  {where}: {'ok' if ok else 'FAILED'} in {time.monotonic() - started:.1f} s")
            if os.environ.get("DOCS_VERBOSE"):
                print(output)
            if not ok:
                failures.append(
                    f"{where}: {status}\n--- block ---\n{block.text}--- output ---\n{output}"
                )
    finally:
        services.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return len(to_run), other, skipped, failures


def main() -> int:
    started = time.monotonic()
    mqstore = os.environ.get("MQSTORE_BIN", str(ROOT / "target/debug/mqstore"))
    if not Path(mqstore).exists():
        raise SystemExit(
            f"{mqstore} does not exist: build it (cargo build -p mqstore) or set MQSTORE_BIN"
        )
    files = [Path(f).resolve() for f in sys.argv[1:]] or sorted(
        [
            ROOT / "README.md",
            ROOT / "CONTRIBUTING.md",
            *(ROOT / "docs/guide").glob("*.md"),
            *ROOT.glob("bindings-*/README.md"),
        ]
    )
    os.environ["MQSTORE_BIN"] = mqstore  # the harness's server, and `mqstore` on PATH
    shim = Path(tempfile.mkdtemp(prefix="docs-test-bin-"))
    (shim / "mqstore").symlink_to(Path(mqstore).resolve())
    python = os.environ.get("DOCS_PYTHON")
    if python:
        (shim / "python").symlink_to(python)
    total_run = total_other = 0
    all_skipped: list[str] = []
    all_failures: list[str] = []
    rust = [b for path in files for b in blocks(path) if b.language == "rust" and not b.skip]
    print(f"Rust blocks: compiling {len(rust)} (cargo check)")
    all_failures += check_rust(rust)
    total_run += len(rust)
    for path in files:
        print(f"{path.relative_to(ROOT)}")
        ran, other, skipped, failures = run_file(path, shim)
        total_run += ran
        total_other += other
        all_skipped += skipped
        all_failures += failures
    shutil.rmtree(shim, ignore_errors=True)
    print("\nnot run, each with its reason:")
    for line in all_skipped:
        print(f"  {line}")
    for failure in all_failures:
        print(f"\nFAILED {failure}")
    print(
        f"\ncommand blocks: {total_run} run ({len(rust)} of them Rust, compiled), "
        f"{len(all_failures)} failed, "
        f"{len(all_skipped)} skipped with a reason, "
        f"{total_other} not commands (JSON, TOML, HTML, text)"
    )
    # In pytest's words, for the test command's closing count.
    print(
        f"{total_run - len(all_failures)} passed, {len(all_failures)} failed, "
        f"{len(all_skipped)} skipped in {time.monotonic() - started:.1f}s (command blocks)"
    )
    return 1 if all_failures else 0


if __name__ == "__main__":
    sys.exit(main())
