#!/usr/bin/env python3
"""Measures the release artifacts against their size budgets (run by scripts/dist).

    python3 scripts/dist-sizes.py DIST WORK

DIST is scripts/dist's output, WORK its unpacked archives. Prints one line per budget and
exits 1 when an artifact is over its limit. The limit is the budget, except where
docs/performance.md explains why a budget is not met yet: there the limit is today's size with
a little room, so that the test still fails on growth.

What a C library adds to a program is measured as a firmware build would link it: the program
compiled for aarch64 with Debian's cross compiler (aarch64-linux-gnu-gcc), `-O2
-Wl,--gc-sections`, stripped, against the static library, minus a stripped hello world.
"""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MB, KB, KIB = 1_000_000, 1_000, 1024

# name: (budget, limit, why the limit is above the budget, or "")
BUDGETS = {
    "wheel": (1.2 * MB, 1.2 * MB, ""),
    "c-connected": (1.5 * MB, 1.5 * MB, ""),
    "c-byo": (250 * KB, 250 * KB, ""),
    "image": (1 * MB, 1 * MB, ""),
    "wasm": (150 * KIB, 150 * KIB, ""),
    "binary": (8 * MB, 8 * MB, ""),
}


def cross_cc(*args: str | Path) -> None:
    subprocess.run(["aarch64-linux-gnu-gcc", *map(str, args)], check=True, cwd=ROOT)


def added_to_program(lib: Path, source: Path, flags: list[str], tmp: Path) -> int:
    """Bytes that linking `lib` adds to the program built from `source` (aarch64)."""
    hello = tmp / "hello.c"
    hello.write_text('#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n')
    cross_cc("-O2", "-s", hello, "-o", tmp / "hello")
    program = tmp / source.stem
    cross_cc(
        "-O2",
        "-s",
        "-Wl,--gc-sections",
        *flags,
        source,
        lib,
        "-lpthread",
        "-ldl",
        "-lm",
        "-o",
        program,
    )
    return program.stat().st_size - (tmp / "hello").stat().st_size


def image_bytes(archive: Path) -> int:
    """Bytes of the files in an OCI archive's image, unpacked (the one image it holds)."""
    with tarfile.open(archive) as oci:

        def blob(digest: str) -> bytes:
            member = oci.extractfile("blobs/" + digest.replace(":", "/"))
            assert member is not None, digest
            return member.read()

        index = json.loads(oci.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        total = 0
        for layer in manifest["layers"]:
            data = blob(layer["digest"])
            if layer["mediaType"].endswith("+gzip"):
                data = gzip.decompress(data)
            with tarfile.open(fileobj=io.BytesIO(data)) as files:
                total += sum(member.size for member in files if member.isfile())
        return total


def main() -> int:
    dist, work = Path(sys.argv[1]), Path(sys.argv[2])
    version = next(
        line.split('"')[1]
        for line in (ROOT / "Cargo.toml").read_text().splitlines()
        if line.startswith("version = ")
    )
    c_dir = work / f"mqstore-c-{version}-aarch64-unknown-linux-gnu"
    wasm = ROOT / "bindings-wasm/pkg/mqstore_wasm_bg.wasm"
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        subprocess.run(
            [
                sys.executable,
                "bindings-c/tests/gen_vectors.py",
                "testdata/state-store.json",
                tmp / "vectors.h",
            ],
            check=True,
            cwd=ROOT,
        )
        include = [
            "-std=c11",
            f"-I{c_dir / 'include'}",
            f"-I{tmp}",
            f'-DMQSTORE_EXPECTED_VERSION="{version}"',
        ]
        sizes = {
            "wheel": (
                next(dist.glob(f"mqstore-{version}-cp39-abi3-*manylinux_2_17_x86_64*.whl"))
                .stat()
                .st_size,
                "Python wheel, manylinux x86_64",
            ),
            "c-connected": (
                added_to_program(
                    c_dir / "lib/libmqstore.a", ROOT / "examples/c/gateway.c", include, tmp
                ),
                "C connected layer: added to examples/c/gateway.c (aarch64)",
            ),
            "c-byo": (
                added_to_program(
                    c_dir / "lib/libmqstore_byo.a",
                    ROOT / "bindings-c/tests/test_codec.c",
                    include,
                    tmp,
                ),
                "C bring-your-own-MQTT layer: added to the vector test (aarch64)",
            ),
            "wasm": (len(gzip.compress(wasm.read_bytes(), 9)), "npm package's .wasm, gzipped (-9)"),
            "binary": (
                (work / f"mqstore-{version}-x86_64-unknown-linux-musl/mqstore").stat().st_size,
                "static mqstore, x86_64 musl, stripped",
            ),
            "image": (
                image_bytes(dist / f"mqstore-{version}-image-amd64.oci.tar")
                - (work / f"mqstore-{version}-x86_64-unknown-linux-musl/mqstore").stat().st_size,
                "server container image (amd64): files beyond the binary",
            ),
        }
    over = False
    print(f"{'artifact':<66} {'bytes':>10} {'budget':>10} {'limit':>10}")
    for name, (size, label) in sizes.items():
        budget, limit, why = BUDGETS[name]
        verdict = "within budget" if size <= budget else f"OVER BUDGET ({why})"
        if size > limit:
            verdict = "OVER THE LIMIT: it grew"
            over = True
        print(f"{label:<66} {size:>10,} {int(budget):>10,} {int(limit):>10,}  {verdict}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
