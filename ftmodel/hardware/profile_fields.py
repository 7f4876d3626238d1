"""Checks of a profile's JSON fields, shared by every part of its schema
(:mod:`ftmodel.hardware.profile`): a typed field, an object of seconds, rows of numbers. Each
error is a :class:`~ftmodel.errors.ProfileError` naming the field's path."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ftmodel.errors import ProfileError

__all__ = ["field_value", "number_rows", "seconds_map"]


def field_value(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], path: str,
                default: Any = ...) -> Any:
    """``d[key]`` checked to be a ``kind`` (a float also finite and >= 0; an int accepted as a
    float), or ``default`` when absent; errors name the field's ``path``."""
    if not isinstance(d, Mapping):
        raise ProfileError(f"profile field {path!r} must be an object, got {type(d).__name__}")
    if key not in d:
        if default is not ...:
            return default
        raise ProfileError(f"profile field {path + '.' + key if path else key!r} is missing")
    value = d[key]
    full = f"{path}.{key}" if path else key
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        want = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ProfileError(f"profile field {full!r} must be {want}, got {value!r:.80}")
    if isinstance(value, float) and (not math.isfinite(value) or value < 0):
        raise ProfileError(f"profile field {full!r} must be a finite number >= 0, got {value!r}")
    return value


def seconds_map(d: Any, path: str) -> dict[str, float]:
    """An object of names to seconds (each finite and >= 0)."""
    if not isinstance(d, Mapping):
        raise ProfileError(f"profile field {path!r} must be an object of seconds")
    return {str(k): field_value(d, k, float, path) for k in d}


def number_rows(rows: list[Any], width: int, path: str, what: str) -> list[tuple[float, ...]]:
    """``rows``, each a list of ``width`` finite numbers >= 0 (``what`` names them)."""
    out = []
    for i, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == width and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                and v >= 0 for v in row)):
            raise ProfileError(f"profile field '{path}[{i}]' must be [{what}] >= 0, got "
                               f"{row!r:.80}; re-run `ftmodel calibrate` to measure it again")
        out.append(tuple(float(v) for v in row))
    return out
