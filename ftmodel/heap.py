"""The allocator half of the measurement protocol: keep glibc's heap mapped.

Every process that measures (calibration, validation, the benchmarks) calls :func:`keep_heap`
before measuring, so that a forward pass that frees and re-allocates a large activation reuses
mapped memory instead of page-faulting it in afresh, as PyTorch's caching allocator does on a
GPU; profiles record the setting (:func:`allocator_setting`). :mod:`ftmodel.measure`
re-exports these names.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from typing import Any

__all__ = ["DEFAULT_MALLOC_HELP", "allocator_setting", "heap_in_use_bytes", "heap_kept",
           "is_glibc", "keep_heap"]


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_INT_MAX = 2**31 - 1
_TOP_PAD_BYTES = 64 << 20
_heap_kept = False


def is_glibc() -> bool:
    """Whether this process runs on Linux with glibc (whose malloc ftmodel models and tunes)."""
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def _glibc_function(name: str) -> Any:
    """glibc's function ``name`` through ctypes, or None elsewhere or where it lacks it."""
    if not is_glibc():
        return None
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def keep_heap() -> bool:
    """Keep glibc's heap mapped for the rest of this process; True if done (glibc), else False.

    With its defaults, glibc's malloc serves blocks of 32 MiB and more (and, once its dynamic
    threshold has moved, smaller ones) with fresh ``mmap`` calls, unmaps them on ``free`` and
    trims the heap's top, so a model that frees and re-allocates a large activation on every
    forward touches new pages each time: on this project's Xeon, torchvision's MobileNet-V2 at
    batch 32 and 224 px took 730 ms with ~540,000 minor page faults per forward, and 308 ms with
    none once the heap was kept (``benchmarks/page_faults.py``). This sets ``M_MMAP_THRESHOLD``
    to INT_MAX (no block is mapped on its own; this also fixes the dynamic threshold),
    ``M_TRIM_THRESHOLD`` to INT_MAX (the heap's top is never given back) and ``M_TOP_PAD`` to
    64 MiB (the heap grows in large steps), as ``mallopt(3)`` documents. Memory the process
    frees stays mapped and is reused, as it is with PyTorch's CUDA caching allocator, jemalloc
    or tcmalloc (which PyTorch's CPU performance guide recommends for inference).

    It is process-wide and cannot be undone; calibration, validation and the benchmarks call it
    before measuring (their profiles' provenance records it). Elsewhere than glibc it does
    nothing and returns False.
    """
    global _heap_kept
    if _heap_kept:
        return True
    mallopt = _glibc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    ok = all(mallopt(param, value) == 1 for param, value in (
        (_M_MMAP_THRESHOLD, _INT_MAX), (_M_TRIM_THRESHOLD, _INT_MAX),
        (_M_TOP_PAD, _TOP_PAD_BYTES)))
    _heap_kept = ok
    return ok


DEFAULT_MALLOC_HELP = (
    "measure with glibc malloc's defaults, which give large freed blocks back to the OS, "
    "instead of keeping the heap mapped (ftmodel.measure.keep_heap; with the defaults a model "
    "re-allocating large activations page-faults them in every forward)")


class _Mallinfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h, glibc 2.33 and later): every field a size_t."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def heap_in_use_bytes() -> int | None:
    """Bytes this process has allocated with malloc and not freed (glibc's ``mallinfo2``:
    blocks in use in its arenas plus blocks mapped on their own), or None elsewhere than glibc
    2.33+. Unlike the resident set, it falls when memory is freed while the heap is kept
    mapped (:func:`keep_heap`), so it tells what live objects (sessions, frozen graphs,
    tensors) hold now. Memory mapped other than through malloc is not counted."""
    mallinfo2 = _glibc_function("mallinfo2")
    if mallinfo2 is None:
        return None
    mallinfo2.argtypes, mallinfo2.restype = (), _Mallinfo2
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd)


def heap_kept() -> bool:
    """Whether :func:`keep_heap` has taken effect in this process."""
    return _heap_kept


def allocator_setting() -> str:
    """How this process's allocator treats freed memory, as profiles' provenance records it:
    ``"heap kept"`` after :func:`keep_heap`, else ``"default"``."""
    return "heap kept" if _heap_kept else "default"
