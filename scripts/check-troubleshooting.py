#!/usr/bin/env python3
"""The troubleshooting page lists every error line the CLI can print.

    python3 scripts/check-troubleshooting.py

Walks the CLI's error strings where they are written: the `error:` lines and usage errors of
the CLI itself (`cli/src`: `eprintln!("error: …")`, `Err("…")`, `usage("…")`, value parsers),
the client errors every client command reports (`#[error("…")]` of `ClientError`,
`core/src/client/mod.rs`), and what stops `mqstore serve` at start (`#[error("…")]` of
`ServerError`, `server/src/config.rs`). Each string's longest fixed part (the text between
its `{…}` placeholders) must appear in `docs/guide/troubleshooting.md` (whitespace, backticks
and emphasis aside). Exits 1 and lists each string the page lacks, with where it is written.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "guide" / "troubleshooting.md"

# A Rust string literal (no raw strings among error texts).
LITERAL = r'"((?:[^"\\]|\\.)*)"'
# Where a CLI source line makes an error of a literal.
CLI_ERROR = re.compile(
    r'eprintln!\(\s*"(?:error|warning): ((?:[^"\\]|\\.)*)"|'
    r"(?:Err\(\s*(?:format!\(\s*)?|usage\(\s*(?:&format!\(\s*)?|Usage\(\s*format!\(\s*|"
    r"(?:map_err|ok_or_else)\(\s*\|[^|]*\|\s*\{?\s*(?:format!\(\s*)?|let usage = \|\| format!\(\s*)"
    + LITERAL
)
# `#[error("…")]`, possibly over several lines, or `#[error(transparent)]`.
DERIVED_ERROR = re.compile(r"#\[error\(\s*" + LITERAL, re.S)


def strings() -> list[tuple[str, str]]:
    """(where, format string) of every error text."""
    found = []
    for path in sorted((ROOT / "cli" / "src").glob("*.rs")):
        text = path.read_text(encoding="utf-8")
        for match in CLI_ERROR.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{path.relative_to(ROOT)}:{line}", match.group(1) or match.group(2)))
    for relative in ["core/src/client/mod.rs", "server/src/config.rs"]:
        text = (ROOT / relative).read_text(encoding="utf-8")
        for match in DERIVED_ERROR.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{relative}:{line}", match.group(1)))
    return found


def normalize(text: str) -> str:
    text = text.replace("`", "").replace("**", "").replace("\\_", "_")
    return re.sub(r"\s+", " ", text)


def key(format_string: str) -> str:
    """The longest fixed part of a format string (an escaped quote as a quote)."""
    text = re.sub(r"\\\n\s*", "", format_string)  # a string continued on the next line
    text = text.replace('\\"', '"').replace("\\n", " ")
    text = text.replace("{{", "\0").replace("}}", "\1")
    parts = re.split(r"\{[^{}]*\}", text)
    parts = [p.replace("\0", "{").replace("\1", "}").strip(" :;,.()") for p in parts]
    return normalize(max(parts, key=len))


def main() -> int:
    page = normalize(PAGE.read_text(encoding="utf-8"))
    found = strings()
    missing = []
    for where, format_string in found:
        fixed = key(format_string)
        if len(fixed) < 8:
            continue  # all placeholders ("{0}", "{e}"): the inner error is listed itself
        if fixed not in page:
            missing.append(f"{where}: {format_string!r} (looked for {fixed!r})")
    for line in missing:
        print(line)
    print(
        f"troubleshooting: {len(found)} error strings of the CLI and the server, "
        f"{len(missing)} missing from {PAGE.relative_to(ROOT)}"
    )
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
