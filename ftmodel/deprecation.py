"""Keyword arguments that were renamed: the old spelling keeps working, with a warning.

``gpu=`` became ``device=`` (it also names CPU profiles and profile files), and
``CostOracle.latencies(batches=)`` became ``batch=`` (as everywhere else).
"""

from __future__ import annotations

import warnings
from typing import TypeVar

from ftmodel.errors import InvalidArgumentError

__all__ = ["renamed"]

T = TypeVar("T")


def renamed(new: str, new_value: T, default: T, old: str, old_value: T | None) -> T:
    """``new_value``, or ``old_value`` (with a DeprecationWarning) when the caller used the
    old keyword ``old`` instead of ``new``; both at once is an error."""
    if old_value is None:
        return new_value
    if new_value != default:
        raise InvalidArgumentError(
            f"got both {new}={new_value!r} and its deprecated spelling {old}={old_value!r}; "
            f"pass {new}= only")
    warnings.warn(f"{old}= is deprecated; use {new}= (same meaning)", DeprecationWarning,
                  stacklevel=3)
    return old_value
