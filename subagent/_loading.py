"""Objects named on a command line as ``module:name`` or ``path/to/file.py:name``.

The one loader of the command line (``subagent run``'s ``MODULE:AGENT``, ``subagent eval``'s
``--agent`` and ``--judge``). Standard library only, so every room may use it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["ImportRaisedError", "LoadError", "described", "load_object"]

MAX_DESCRIBED_CHARS = 1000
"""The longest one-line description of an exception (:func:`described`)."""


class LoadError(Exception):
    """The reference names nothing: malformed, no such module, file or attribute.

    Bad usage; the message starts with the flag that took the reference.
    """


class ImportRaisedError(Exception):
    """The module raised while it was imported: a bug in it, said in one line."""


def described(exc: BaseException) -> str:
    """``Type: message`` on one line, at most :data:`MAX_DESCRIBED_CHARS` characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    if len(text) <= MAX_DESCRIBED_CHARS:
        return text
    return text[: MAX_DESCRIBED_CHARS - 1] + "…"


def load_object(reference: str, flag: str, expected: type | None = None) -> Any:
    """The object that ``module:name`` or ``path/to/file.py:name`` names.

    A dotted module is imported with the current directory on the path, as ``python -m``
    does; a file is imported with its own folder on the path, so it can import its
    neighbours. The name may be dotted (``module:registry.triage``).

    Args:
        reference: ``module:name`` or ``path/to/file.py:name``.
        flag: The argument that took the reference, first in every message.
        expected: The type the object must be an instance of, if any.

    Raises:
        LoadError: The reference is malformed, the module or file is not found, the name
            is missing, or the object is not an ``expected``.
        ImportRaisedError: The module raised while it was imported.
    """
    module_name, colon, attribute = reference.rpartition(":")
    if not colon or not module_name or not attribute:
        raise LoadError(f"{flag}: expected 'module:name' or 'file.py:name', got {reference!r}")
    found: Any = _import(module_name, flag)
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise LoadError(f"{flag}: {module_name!r} has no attribute {attribute!r}")
        found = getattr(found, part)
    if expected is not None and not isinstance(found, expected):
        kind = type(found).__name__
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        raise LoadError(f"{flag}: {reference!r} is {article} {kind}, not a {expected.__name__}")
    return found


def _import(name: str, flag: str) -> ModuleType:
    if name.endswith(".py"):
        return _import_file(Path(name), flag)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise LoadError(f"{flag}: cannot import {name!r}: {described(exc)}") from exc
        raise ImportRaisedError(f"importing {name!r} raised {described(exc)}") from exc
    except Exception as exc:  # whatever the module raised on import: a bug in it
        raise ImportRaisedError(f"importing {name!r} raised {described(exc)}") from exc


def _import_file(path: Path, flag: str) -> ModuleType:
    if not path.is_file():
        raise LoadError(f"{flag}: no file {str(path)!r}")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise LoadError(f"{flag}: cannot import {str(path)!r}")
    sys.path.insert(0, str(path.resolve().parent))
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # whatever the module raised on import: a bug in it
        del sys.modules[path.stem]
        raise ImportRaisedError(f"importing {str(path)!r} raised {described(exc)}") from exc
    return module
