"""The exceptions ftmodel raises, and the one helper that phrases them.

Every error names the offending value, says what was expected and how to fix it
(scikit-learn style). User input is checked with these, never with ``assert``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "FtmodelError",
    "InvalidArgumentError",
    "UnknownNameError",
    "ProfileError",
    "FrameworkUnsupported",
    "BackendUnavailable",
    "MissingExtraError",
    "TraceError",
    "closest_match",
]


class FtmodelError(Exception):
    """Base class of every error ftmodel raises on purpose."""


class InvalidArgumentError(FtmodelError, ValueError):
    """A value passed by the user is out of range or of the wrong kind."""


class UnknownNameError(FtmodelError, ValueError):
    """A framework, profile or op-class name that ftmodel does not know."""

    def __init__(self, kind: str, name: str, valid: Iterable[str], hint: str = "") -> None:
        options = sorted(set(valid))
        self.kind, self.name, self.valid = kind, name, options
        match = closest_match(name, options)
        text = f"unknown {kind} {name!r}; expected one of: {', '.join(options)}."
        if match:
            text += f" Did you mean {match!r}?"
        if hint:
            text += f" {hint}"
        super().__init__(text)


class ProfileError(FtmodelError, ValueError):
    """A hardware profile is corrupt, of the wrong schema version or of the wrong kind."""


class FrameworkUnsupported(FtmodelError):
    """A framework cannot run this model (an op it lacks, control flow it cannot capture)."""

    def __init__(self, framework: str, op: str, module: str, reason: str = "") -> None:
        self.framework, self.op, self.module = framework, op, module
        where = module or "<root>"
        text = f"framework {framework!r} cannot run op {op!r} in module {where!r}"
        super().__init__(text + (f": {reason}" if reason else ""))


class BackendUnavailable(FtmodelError, RuntimeError):
    """A framework's runtime piece is missing on this machine (an ONNX Runtime execution
    provider, a compiler toolchain); the message names it and how to install it."""


class MissingExtraError(FtmodelError, ImportError):
    """A Python package that an optional part of ftmodel needs is not installed; the message
    names the ``pip install 'ftmodel[<extra>]'`` that installs it."""

    def __init__(self, module: str, extra: str, purpose: str) -> None:
        self.module, self.extra = module, extra
        super().__init__(
            f"{purpose} needs the Python package {module!r}, which is not installed; install "
            f"it with: pip install 'ftmodel[{extra}]'")


class TraceError(FtmodelError, RuntimeError):
    """The model could not be traced, neither on fake tensors nor for real."""


def closest_match(name: str, options: Iterable[str]) -> str | None:
    """Return the option closest to ``name`` (case-insensitive), or None if none is close."""
    lowered = {o.lower(): o for o in options}
    found = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.5)
    return lowered[found[0]] if found else None
