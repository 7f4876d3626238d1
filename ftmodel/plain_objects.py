"""Building many small frozen dataclass objects fast (the NAS oracle's hot path).

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; for a class
with neither ``__slots__`` nor ``__post_init__`` the object is fully described by its
``__dict__``, so it can be made by setting that dict directly: same object, same equality and
hash, several times cheaper. :func:`maker` returns that constructor for such classes, and the
class itself (keyword construction) for others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["maker"]

T = TypeVar("T")


def maker(cls: type[T]) -> Callable[[dict[str, Any]], T]:
    """A function making a ``cls`` from a dict of all its fields (the dict is used as is)."""
    if hasattr(cls, "__slots__") or hasattr(cls, "__post_init__"):
        return lambda fields: cls(**fields)
    new, set_dict = object.__new__, object.__setattr__

    def make(fields: dict[str, Any]) -> T:
        obj = new(cls)
        set_dict(obj, "__dict__", fields)
        return obj
    return make
