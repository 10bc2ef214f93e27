#!/usr/bin/env python3
"""Checks the licences and bans of every crate that mqstore's shipped artifacts contain.

    python3 scripts/licenses.py [--notices DIR]

The policy is licenses.toml. Each artifact's crates are its crate's normal and build
dependencies (not dev-dependencies: tests are not shipped) for the target it ships for, with
the features it is built with, from `cargo tree` (Cargo.lock and the crates' manifests; no
online service). With --notices, writes
DIR/THIRD-PARTY-<artifact>.txt: each crate, its version, its licence and where it comes from.
The npm package's JavaScript dependencies are checked too, from bindings-wasm/package-lock.json.
Exits 1 naming every crate or package that breaks the policy.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("x86_64-unknown-linux-gnu", "wasm32-unknown-unknown")


def tokens(expression: str) -> list[str]:
    # Old Cargo manifests write "MIT/Apache-2.0" for "MIT OR Apache-2.0".
    return re.findall(r"\(|\)|[^\s()]+", expression.replace("/", " OR "))


def satisfied(expression: str, allowed: set[str]) -> bool:
    """Whether the SPDX expression can be met with the allowed licences alone.

    >>> allowed = {"MIT", "Apache-2.0", "ISC"}
    >>> satisfied("MIT OR Apache-2.0", allowed), satisfied("MIT/Apache-2.0", allowed)
    (True, True)
    >>> satisfied("Apache-2.0 AND ISC", allowed), satisfied("GPL-3.0-only", allowed)
    (True, False)
    >>> satisfied("(MIT OR Apache-2.0) AND GPL-2.0-only", allowed)
    False
    >>> satisfied("Apache-2.0 WITH LLVM-exception OR GPL-2.0-only", allowed)
    True
    """
    items = tokens(expression)
    position = 0

    def peek() -> str | None:
        return items[position] if position < len(items) else None

    def take() -> str:
        nonlocal position
        if position >= len(items):
            raise ValueError(f"incomplete licence expression {expression!r}")
        position += 1
        return items[position - 1]

    def primary() -> bool:
        token = take()
        if token == "(":
            value = disjunction()
            if take() != ")":
                raise ValueError(f"unbalanced licence expression {expression!r}")
            return value
        if peek() == "WITH":
            take()
            take()  # an exception only adds permissions to the licence it follows
        return token.rstrip("+") in allowed

    def conjunction() -> bool:
        value = primary()
        while peek() == "AND":
            take()
            value = primary() and value
        return value

    def disjunction() -> bool:
        value = conjunction()
        while peek() == "OR":
            take()
            value = conjunction() or value
        return value

    result = disjunction()
    if position != len(items):
        raise ValueError(f"unexpected {items[position]!r} in licence expression {expression!r}")
    return result


def shipped(crate: str, target: str) -> list[dict[str, str]]:
    """The crates `crate` is built from for `target`: its normal and build dependencies, with
    the features that building it alone turns on (what `cargo tree -p` resolves)."""
    out = subprocess.run(
        [
            "cargo",
            "tree",
            "--locked",
            "-p",
            crate,
            "--target",
            target,
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "--format",
            "{p}|{l}|{r}",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    crates = {}
    for line in out.splitlines():
        package, licence, repository = line.removesuffix(" (*)").split("|")
        name, version, *path = package.split(" ")
        crates[(name, version)] = {
            "name": name,
            "version": version.removeprefix("v"),
            "license": licence,
            "repository": repository,
            # A path dependency ("(/…/core)", not "(proc-macro)"): one of mqstore's crates.
            "own": any(part.startswith("(/") for part in path),
        }
    return sorted(crates.values(), key=lambda c: (c["name"], c["version"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notices", type=Path, help="write THIRD-PARTY-<artifact>.txt here")
    args = parser.parse_args()
    policy = tomllib.loads((ROOT / "licenses.toml").read_text())
    allowed = set(policy["allowed"])
    bans = policy["bans"]
    problems: list[str] = []
    for name, artifact in policy["artifacts"].items():
        target = "wasm32-unknown-unknown" if name == "mqstore-wasm" else TARGETS[0]
        crates = shipped(artifact["crate"], target)
        banned = set(bans["everywhere"])
        if name in bans["client_artifacts"]:
            banned |= set(bans["clients"])
        for package in crates:
            label = f"{package['name']} {package['version']}"
            licence = package["license"]
            if package["name"] in banned:
                problems.append(f"{name} ({artifact['description']}) contains {label}: banned")
            if package["own"]:
                continue  # mqstore's own crates: MIT OR Apache-2.0, checked below
            if not licence:
                problems.append(f"{name}: {label} declares no licence (SPDX) in its manifest")
            elif not satisfied(licence, allowed):
                problems.append(f"{name}: {label} is {licence}, not allowed by licenses.toml")
        own = [p for p in crates if p["own"]]
        for package in own:
            if package["license"] != "MIT OR Apache-2.0":
                problems.append(f"{name}: our crate {package['name']} is not MIT OR Apache-2.0")
        print(
            f"{name} ({artifact['description']}): {len(crates) - len(own)} crates, licences allowed"
        )
        if args.notices:
            args.notices.mkdir(parents=True, exist_ok=True)
            lines = [
                f"Third-party crates in mqstore's {artifact['description']} ({name}), with",
                "their licences as their manifests declare them. Their licence texts are in each",
                "crate's source (crates.io). mqstore itself is MIT OR Apache-2.0 (LICENSE-MIT,",
                "LICENSE-APACHE).",
                "",
            ]
            lines += [
                f"{p['name']} {p['version']}: {p['license']}"
                + (f" ({p['repository']})" if p.get("repository") else "")
                for p in crates
                if not p["own"]
            ]
            (args.notices / f"THIRD-PARTY-{name}.txt").write_text("\n".join(lines) + "\n")
    # The npm package's JavaScript dependencies (what `npm install` of it brings), from its
    # lockfile, which records each package's declared licence.
    lock = json.loads((ROOT / "bindings-wasm/package-lock.json").read_text())
    npm = {
        path.rsplit("node_modules/", 1)[-1]: entry
        for path, entry in lock["packages"].items()
        if path and not entry.get("dev")
    }
    for name, entry in sorted(npm.items()):
        label = f"{name} {entry.get('version')}"
        if name in bans["everywhere"]:
            problems.append(f"the npm package depends on {label}: banned")
        if not entry.get("license"):
            problems.append(f"npm: {label} declares no licence")
        elif not satisfied(entry["license"], allowed):
            problems.append(f"npm: {label} is {entry['license']}, not allowed by licenses.toml")
    print(f"npm package's dependencies: {len(npm)} packages, licences allowed")
    if args.notices:
        lines = [
            "JavaScript packages the mqstore npm package depends on, with their licences as",
            "their package.json declares them.",
            "",
        ]
        lines += [f"{n} {e.get('version')}: {e.get('license')}" for n, e in sorted(npm.items())]
        (args.notices / "THIRD-PARTY-npm.txt").write_text("\n".join(lines) + "\n")
    for problem in problems:
        print(f"licence policy: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
