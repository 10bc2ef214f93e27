"""Every public module, class, function, method and property of the package has a docstring:
the API reference (pdoc) is made from them."""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

import mqstore
import mqstore.codec
import mqstore.errors

MODULES = (mqstore, mqstore.errors, mqstore.codec)


def public_names(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    return list(names) if names is not None else [n for n in dir(module) if not n.startswith("_")]


def documented(item: Any) -> bool:
    return bool((inspect.getdoc(item) or "").strip())


def members(cls: type) -> list[tuple[str, Any]]:
    """The class's own public attributes that a reference documents: methods, properties,
    native getters."""
    found = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if callable(value) or inspect.isdatadescriptor(value):
            found.append((name, value))
    return found


def undocumented() -> list[str]:
    missing = []
    for module in MODULES:
        if not documented(module):
            missing.append(module.__name__)
        for name in public_names(module):
            item = getattr(module, name)
            where = f"{module.__name__}.{name}"
            if inspect.ismodule(item) or not (inspect.isclass(item) or callable(item)):
                continue
            if not documented(item):
                missing.append(where)
            if inspect.isclass(item):
                missing += [f"{where}.{m}" for m, value in members(item) if not documented(value)]
    return missing


def test_every_public_item_has_a_docstring() -> None:
    assert undocumented() == []


def test_the_check_sees_a_missing_docstring() -> None:
    class Bare:
        def method(self) -> None:
            pass

    assert [name for name, value in members(Bare) if not documented(value)] == ["method"]
