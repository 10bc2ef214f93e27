"""The Python package's public API, one line per item (what ``api/python.txt`` holds).

Lists every name ``mqstore`` and its public modules export: classes with their public methods,
properties and signatures, functions, TypedDicts with their keys (required or not), and
aliases. ``bash scripts/public-api python PY`` runs it with the package installed for ``PY``
and compares the listing with the committed one.
"""

from __future__ import annotations

import inspect
import sys
import types
import typing

import mqstore

MODULES = ["mqstore", "mqstore.codec", "mqstore.errors", "mqstore.wire"]
# The dunder methods that are part of a class's API (context managers, iterators).
PROTOCOL = {"__init__", "__enter__", "__exit__", "__iter__", "__next__"}
PROTOCOL |= {"__aenter__", "__aexit__", "__aiter__", "__anext__"}


def signature(item: object) -> str:
    try:
        return str(inspect.signature(item))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        text = getattr(item, "__text_signature__", None)
        return text.replace("$self, ", "").replace("$self", "") if text else "(...)"


def typed_dict(name: str, item: type) -> list[str]:
    required = getattr(item, "__required_keys__", frozenset())
    annotations = {}
    for base in reversed(item.__mro__):
        annotations.update(getattr(base, "__annotations__", {}))
    lines = [f"{name}: TypedDict"]
    for key in sorted(annotations):
        mark = "" if key in required else "?"
        hint = annotations[key]
        text = hint.__forward_arg__ if isinstance(hint, typing.ForwardRef) else repr(hint)
        lines.append(f"{name}.{key}{mark}: {text}")
    return lines


def members(name: str, item: type) -> list[str]:
    lines = [f"{name}: class{signature(item) if not item.__module__.endswith('_native') else ''}"]
    for attr, value in sorted(vars(item).items()):
        if attr.startswith("_") and attr not in PROTOCOL:
            continue
        if isinstance(value, property) or type(value).__name__ == "getset_descriptor":
            lines.append(f"{name}.{attr}: property")
        elif isinstance(value, (staticmethod, classmethod)):
            lines.append(f"{name}.{attr}{signature(value.__func__)}")
        elif callable(value):
            prefix = "async " if inspect.iscoroutinefunction(value) else ""
            lines.append(f"{prefix}{name}.{attr}{signature(value)}")
    return lines


def listing() -> list[str]:
    lines = [f"mqstore {len(mqstore.__all__)} names"]
    for module_name in MODULES:
        module = sys.modules.get(module_name) or __import__(module_name, fromlist=["_"])
        for export in sorted(getattr(module, "__all__", [])):
            item = getattr(module, export)
            name = f"{module_name}.{export}"
            if isinstance(item, types.ModuleType):
                lines.append(f"{name}: module")
            elif isinstance(item, type) and hasattr(item, "__required_keys__"):
                lines.extend(typed_dict(name, item))
            elif isinstance(item, type):
                lines.extend(members(name, item))
            elif callable(item) and not typing.get_origin(item):
                lines.append(f"{name}{signature(item)}")
            else:
                lines.append(f"{name} = {item!r}")
    return lines


def main() -> int:
    print("\n".join(listing()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
