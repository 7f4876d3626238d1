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

__all__ = ["DEFAULT_MALLOC_HELP", "allocator_setting", "heap_kept", "keep_heap"]


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_INT_MAX = 2**31 - 1
_TOP_PAD_BYTES = 64 << 20
_heap_kept = False


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
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
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


def heap_kept() -> bool:
    """Whether :func:`keep_heap` has taken effect in this process."""
    return _heap_kept


def allocator_setting() -> str:
    """How this process's allocator treats freed memory, as profiles' provenance records it:
    ``"heap kept"`` after :func:`keep_heap`, else ``"default"``."""
    return "heap kept" if _heap_kept else "default"
