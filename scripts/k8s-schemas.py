#!/usr/bin/env python3
"""Standalone Kubernetes schemas for kubeconform, offline (run by scripts/test-deploy).

    python3 scripts/k8s-schemas.py SOURCE OUT VERSIONS KINDS

SOURCE is the `kubernetes-json-schema` directory of the PyPI package `kubernetes-validate`
(strict schemas for each Kubernetes release, whose `$ref`s point at a `_definitions.json` by
web address); OUT gets `vVERSION-standalone-strict/KIND.json` for each of VERSIONS (comma
separated, e.g. 1.25.0,1.37.0) and KINDS (comma separated file names such as
deployment-apps-v1), each with the definitions it refers to inlined: the layout of
kubeconform's `-schema-location '{OUT}/{{ .NormalizedKubernetesVersion }}-standalone{{
.StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json'`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DEFINITIONS = "/api/_definitions.json#/$defs/"


def references(node: object) -> set[str]:
    """The names of the definitions `node` refers to, directly."""
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and "#/$defs/" in ref:
            found.add(ref.split("#/$defs/", 1)[1])
        for value in node.values():
            found |= references(value)
    elif isinstance(node, list):
        for value in node:
            found |= references(value)
    return found


def local(node: object) -> object:
    """`node` with every reference to the definitions file made local (`#/$defs/NAME`)."""
    if isinstance(node, dict):
        return {
            key: (
                value.replace(DEFINITIONS, "#/$defs/")
                if key == "$ref" and isinstance(value, str)
                else local(value)
            )
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [local(value) for value in node]
    return node


def standalone(schema: dict, definitions: dict) -> dict:
    """`schema` with the definitions it reaches, transitively, in its own `$defs`."""
    needed: set[str] = set()
    todo = references(schema)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo |= references(definitions[name]) - needed
    schema = dict(local(schema))  # type: ignore[arg-type]
    schema.pop("$id", None)
    schema["$defs"] = {name: local(definitions[name]) for name in sorted(needed)}
    return schema


def main() -> int:
    source, out = Path(sys.argv[1]), Path(sys.argv[2])
    versions, kinds = sys.argv[3].split(","), sys.argv[4].split(",")
    for version in versions:
        strict = source / f"v{version}-local-strict"
        definitions = json.loads((strict / "_definitions.json").read_text())["$defs"]
        target = out / f"v{version}-standalone-strict"
        target.mkdir(parents=True, exist_ok=True)
        for kind in kinds:
            schema = json.loads((strict / f"{kind}.json").read_text())
            (target / f"{kind}.json").write_text(json.dumps(standalone(schema, definitions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
