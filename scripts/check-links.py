#!/usr/bin/env python3
"""Every relative link in every Markdown file of the repository resolves.

    python3 scripts/check-links.py

A link to a file must name one that is committed (or a directory that holds one); a link with
an anchor (`page.md#section`, `#section`) must name a heading of that page, spelled as GitHub
spells its anchors. Links to other sites are not fetched (the test command runs offline), but
none may point to a placeholder address (example.invalid). The package READMEs, shown on PyPI
and npm where a relative link or image breaks, may have none.
Exits 1 and lists each broken link with its file and line.
"""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Shown on PyPI and npm, away from the repository: no relative link or image works there.
PACKAGE_READMES = {ROOT / "bindings-python/README.md", ROOT / "bindings-wasm/README.md"}

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target "title") and ![alt](target); the text may hold one level of brackets.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML_TARGET = re.compile(r"""<(?:a|img)\s[^>]*(?:href|src)=["']([^"']+)["']""")
INLINE_CODE = re.compile(r"`+[^`]*`+")


def committed_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name]


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags go
    text = text.replace("`", "").lower()
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char in " -_" or category[0] in "LN" or category == "Mn":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def anchors(path: Path, cache: dict[Path, set[str]]) -> set[str]:
    if path not in cache:
        seen: dict[str, int] = {}
        found = set()
        for _, line in prose_lines(path.read_text(encoding="utf-8")):
            match = HEADING.match(line)
            if not match:
                continue
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        for explicit in re.findall(r'<a\s+(?:name|id)="([^"]+)"', path.read_text(encoding="utf-8")):
            found.add(explicit)
        cache[path] = found
    return cache[path]


def targets(line: str):
    without_code = INLINE_CODE.sub("", line)
    yield from INLINE_LINK.findall(without_code)
    yield from HTML_TARGET.findall(without_code)
    definition = REFERENCE_DEFINITION.match(without_code)
    if definition:
        yield definition.group(1)


def main() -> int:
    files = committed_files()
    existing = {path for path in files if path.exists()}
    directories = {parent for path in existing for parent in path.parents}
    cache: dict[Path, set[str]] = {}
    broken = []
    checked = 0
    pages = sorted(path for path in existing if path.suffix == ".md")
    for page in pages:
        for number, line in prose_lines(page.read_text(encoding="utf-8")):
            for target in targets(line):
                where = f"{page.relative_to(ROOT)}:{number}: {target}"
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                    if "example.invalid" in target:
                        broken.append(f"{where}: a placeholder address")
                    continue  # another site (https:, mailto:): not fetched
                checked += 1
                if page in PACKAGE_READMES:
                    broken.append(f"{where}: relative, in a README shown on PyPI or npm")
                    continue
                name, _, anchor = target.partition("#")
                destination = (page.parent / name).resolve() if name else page
                if destination not in existing and destination not in directories:
                    broken.append(f"{where}: no such file")
                elif anchor and destination.suffix == ".md":
                    if anchor not in anchors(destination, cache):
                        broken.append(f"{where}: no heading with that anchor")
    for problem in broken:
        print(problem)
    print(f"links: {checked} relative links in {len(pages)} Markdown files, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
