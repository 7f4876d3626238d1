"""The price of a page that malloc maps afresh: fault, zero-fill and unmap, per 4 KiB page.

In a plain process glibc's malloc hands large freed blocks back to the operating system and maps
them again on the next allocation (:mod:`ftmodel.estimate.allocator` says when). The kernel that
first writes such a block page-faults every page of it in; the free unmaps it. This probe times
exactly that life cycle on this machine, with torch's own kernel: an
elementwise op writing into a buffer that is ``mmap``'ed just before and unmapped just after,
against the same op writing into a buffer that stays mapped. The difference per page, fitted by
least squares over several sizes, is ``HostProfile.page_fault_s``.

It uses Python's :mod:`mmap` rather than malloc, so it does not depend on the calibrating
process's own malloc settings (calibration keeps the heap mapped). The mapping must be private
and anonymous, as malloc's are: Python's ``mmap.mmap(-1, n)`` defaults to ``MAP_SHARED``, whose
pages are shared memory (tmpfs) and cost about twice as much to fault in (AMD EPYC, 2 threads:
1.6-1.7 µs per page shared, 0.85 µs private, 0.84 µs for a 32 MiB tensor that glibc's malloc
maps afresh every call).

The op runs on one thread. Inside a model a fault is not shared out between threads as the
probe's two halves of one buffer are: on the 2-vCPU AMD EPYC Zen 4 guest, the extra time per
extra fault of a plain process over one that keeps its heap was 1.77-1.94 µs for five corpus
models at batch 16 run on two threads, against 0.96-1.67 µs from the probe on two threads and
1.57-2.12 µs on one, taken around them (``benchmarks/results/cpu-epyc/README.md``, "What a
page fault costs inside a model"); on the Zen 4 and Zen 5 guests the two-thread probe had priced
such faults at about 1/1.4 of what they cost, and the one-thread probe prices about 1.4x the
two-thread one.

The probe is timed as host work: under the calibration's speed meter its rounds are scaled
by the host reference, as the finished profile's price is re-expressed by it. Scaled by the
reference GEMM instead, the price of the Zen 5 guest's calibration 114 (probes of 1.22-1.31 µs)
was written at 0.87 µs, the host reference at the typical speed over the one at the start (80 and
116 µs), while the GEMM had barely moved.
The price is not steady on every machine: on the 2-vCPU AMD EPYC VM one calibration's probe
found 5.9 µs per page (for the whole two seconds it ran) where the probes before and after it
found 1.0-1.5 µs, and the plain processes measured afterwards paid the usual price. A full CPU
calibration therefore probes once at the start and again after every sweep pass, and keeps the
median (:func:`median_probe`).

Where glibc's heap simulation starts is measured here too (:func:`probe_mmap_threshold`): the
mmap threshold a fresh Python process has after ``import torch``, which is not glibc's initial
128 KiB (``import torch`` frees a mapped chunk of about 1 MiB; torch 2.14, Intel Xeon VM).
A child process imports torch, then asks ``malloc`` for blocks of a bisected size without ever
freeing one (a free would move the threshold it measures) and reads each block's chunk header:
the smallest block glibc mapped on its own gives the threshold.

:func:`replay_in_glibc` is the simulation's check against glibc itself: an allocation stream
replayed through the real ``posix_memalign``, ``malloc`` and ``free`` in a fresh interpreter,
each buffer written in full, its minor faults counted per pass.
"""

from __future__ import annotations

import json
import mmap
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ftmodel.hardware.profile import HostProfile
from ftmodel.heap import is_glibc
from ftmodel.measure import measure_interleaved

__all__ = ["MAPPING", "PAGE_BYTES", "PROBE_THREADS", "fresh_mapping", "median_probe",
           "mmap_threshold_stale", "page_fault_probe_stale", "probe_mmap_threshold",
           "probe_page_fault_s", "replay_in_glibc"]

PAGE_BYTES = 4096
SIZES_MIB = (2, 8, 32)
MAPPING = "private-anonymous"  # recorded with the probe: how its fresh pages were mapped
PROBE_THREADS = 1  # recorded with the probe: the threads its op ran on


def fresh_mapping(nbytes: int) -> mmap.mmap:
    """``nbytes`` of new private anonymous memory, as glibc's malloc maps it: every page faults
    (and is zero-filled) on first write."""
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _fresh(src: torch.Tensor) -> Callable[[], object]:
    nbytes = src.numel() * src.element_size()

    def run() -> object:
        m = fresh_mapping(nbytes)
        out = torch.frombuffer(m, dtype=src.dtype)
        torch.mul(src, 2.0, out=out)
        del out
        m.close()  # munmap
        return None
    return run


def _kept(src: torch.Tensor) -> Callable[[], object]:
    out = torch.empty_like(src)
    out.fill_(0.0)  # touched once: resident from now on
    return lambda: torch.mul(src, 2.0, out=out)


def probe_page_fault_s(rounds: int = 5, round_s: float = 0.05) -> dict[str, Any]:
    """Seconds per freshly mapped 4 KiB page (fit) and the raw samples it was fitted from, the
    op on :data:`PROBE_THREADS` thread(s) (torch's thread count is put back after)."""
    fns: dict[tuple[str, int], Callable[[], object]] = {}
    for mib in SIZES_MIB:
        src = torch.ones(mib * (1 << 20) // 4)
        fns[("fresh", mib)] = _fresh(src)
        fns[("kept", mib)] = _kept(src)
    threads = torch.get_num_threads()
    torch.set_num_threads(PROBE_THREADS)
    try:
        # host work: under a calibration's speed meter its rounds follow the host reference,
        # which the price is re-expressed by (ftmodel.hardware.rescale.at_speed)
        res = measure_interleaved(fns, device="cpu", rounds=rounds, round_s=round_s, warmup=2,
                                  max_reps=50, host_share={k: 1.0 for k in fns})
    finally:
        torch.set_num_threads(threads)
    pages = np.array([mib * (1 << 20) / PAGE_BYTES for mib in SIZES_MIB])
    extra = np.array([res[("fresh", m)].time_s - res[("kept", m)].time_s for m in SIZES_MIB])
    a = np.stack([np.ones_like(pages), pages], axis=1)
    (intercept, slope), *_ = np.linalg.lstsq(a, extra, rcond=None)
    return {
        "page_fault_s": float(max(slope, 0.0)),
        "mapping": MAPPING,
        "threads": PROBE_THREADS,
        "samples": [{"mib": m, "pages": int(p), "fresh_s": res[("fresh", m)].time_s,
                     "kept_s": res[("kept", m)].time_s,
                     "spread": max(res[("fresh", m)].spread, res[("kept", m)].spread)}
                    for m, p in zip(SIZES_MIB, pages)],
        "intercept_s": float(intercept),
    }


def median_probe(probes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The probe of ``probes`` (:func:`probe_page_fault_s` results taken at different times of
    one calibration) whose per-page price is the median, the lower one of an even count, with
    every probe's price in order under ``"per_probe_s"``. One probe that caught the machine
    paging slowly (or quickly) for a moment then decides nothing."""
    if not probes:
        raise ValueError("median_probe needs at least one page-fault probe, got none")
    ranked = sorted(probes, key=lambda p: float(p["page_fault_s"]))
    return {**ranked[(len(ranked) - 1) // 2],
            "per_probe_s": [float(p["page_fault_s"]) for p in probes]}


# the child of probe_mmap_threshold: import torch, then bisect the smallest malloc request glibc
# maps on its own (IS_MMAPPED, bit 1 of the chunk's size field), never freeing a block
_THRESHOLD_CHILD = r"""
import ctypes, sys
import torch  # noqa: F401  (what a user's process has done before its model runs)
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
def mapped(n):
    p = libc.malloc(n)
    return p is not None and bool(ctypes.c_size_t.from_address(p - 8).value & 2)
lo, hi = 1 << 16, 64 << 20  # lo is served from the heap, hi mapped (above the 32 MiB ceiling)
if mapped(lo) or not mapped(hi):
    sys.exit(3)
while hi - lo > 16:
    mid = (lo + hi) // 2
    lo, hi = (lo, mid) if mapped(mid) else (mid, hi)
print(hi)
"""
_CHUNK_HEADER_BYTES = 8  # malloc's chunk size: the request plus this, rounded up to 16


def probe_mmap_threshold(timeout_s: float = 120.0) -> dict[str, Any] | None:
    """glibc's mmap threshold in a fresh Python process after ``import torch`` (this
    interpreter): ``{"mmap_threshold_bytes": chunk bytes, "smallest_mapped_request_bytes": n}``,
    or None where malloc is not glibc's or the child could not tell (it then leaves the
    simulation at glibc's initial threshold)."""
    if not is_glibc():
        return None
    try:
        out = subprocess.run([sys.executable, "-c", _THRESHOLD_CHILD], capture_output=True,
                             text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or not out.stdout.strip().isdigit():
        return None
    request = int(out.stdout.strip())
    chunk = -(-(request + _CHUNK_HEADER_BYTES) // 16) * 16
    return {"mmap_threshold_bytes": chunk, "smallest_mapped_request_bytes": request,
            "after": "import torch"}


def mmap_threshold_stale(host: HostProfile | None) -> bool:
    """Whether a CPU profile lacks the mmap threshold after ``import torch`` (calibrated before
    ftmodel measured it, or where it could not be measured) and a glibc machine can add it."""
    return (host is None or host.mmap_threshold_bytes == 0) and is_glibc()


def page_fault_probe_stale(host: HostProfile | None, provenance: Mapping[str, Any]) -> bool:
    """Whether a CPU profile's page-fault price must be (re-)measured: it has none, or it came
    from a probe that mapped shared memory (profiles before the probe recorded its
    ``mapping``), which prices a fault about twice what malloc's private pages cost, or from one
    whose op ran on the calibration's threads (before it recorded ``threads``), which prices a
    fault inside a model about 1.4x low."""
    probe = provenance.get("page_fault_probe")
    return (host is None or host.page_fault_s == 0.0 or not isinstance(probe, dict)
            or probe.get("mapping") != MAPPING or probe.get("threads") != PROBE_THREADS)


# the child of replay_in_glibc: [events, passes, import torch?] on stdin; each "memalign" is a
# posix_memalign(64, n), as c10 allocates a CPU tensor's data, each "malloc" a plain malloc, and
# every block is written in full (its pages fault in as a tensor's do); prints the minor page
# faults of each pass
_REPLAY_CHILD = r"""
import ctypes, json, resource, sys
events, passes, after_torch = json.loads(sys.stdin.read())
if after_torch:
    import torch  # noqa: F401
libc = ctypes.CDLL("libc.so.6")
malloc, memalign, free, memset = libc.malloc, libc.posix_memalign, libc.free, libc.memset
malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
free.argtypes, memset.argtypes = [ctypes.c_void_p], [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
# everything the loop touches exists before it: a dict or list growing inside the loop would
# malloc between the replayed calls and move where glibc places them
keys = {k: i for i, k in enumerate(dict.fromkeys(e[2] for e in events))}
stream = [(("free", "malloc", "memalign").index(op), int(size), keys[k]) for op, size, k in events]
live, held, faults = [None] * len(keys), [False] * len(keys), [0] * passes
out = ctypes.c_void_p()
ref = ctypes.byref(out)
for p in range(passes):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for kind, size, i in stream:
        if kind:
            if kind == 2:
                if memalign(ref, 64, size) != 0:
                    sys.exit(4)
                live[i] = out.value
            else:
                live[i] = malloc(size)
            memset(live[i], 1, size)
            held[i] = True
        elif held[i]:
            free(live[i])
            held[i] = False
    faults[p] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps(faults))
"""


def replay_in_glibc(events: Sequence[tuple[str, int, int]], passes: int = 3,
                    after_import_torch: bool = False,
                    timeout_s: float = 300.0) -> list[int] | None:
    """Minor page faults of each of ``passes`` passes over ``events`` (``("memalign", bytes,
    key)``, ``("malloc", bytes, key)`` and ``("free", 0, key)``, as
    :func:`ftmodel.estimate.allocator.stream_page_faults` takes them) through glibc's own
    allocator in a fresh interpreter, from glibc's initial state or from the one ``import
    torch`` leaves; None where malloc is not glibc's or the child failed.
    The interpreter's own allocations before the replay share that heap and can leave it in
    another state: the same 1 MiB chain settles at 3,360 faults per pass after opening libc by
    name and at none after ``ctypes.CDLL(None)`` (AMD EPYC, glibc 2.36), as a model's faults
    differ between two fresh processes."""
    if not is_glibc():
        return None
    payload = json.dumps([[list(e) for e in events], int(passes), bool(after_import_torch)])
    try:
        out = subprocess.run([sys.executable, "-I", "-c", _REPLAY_CHILD], input=payload,
                             capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return [int(n) for n in json.loads(out.stdout)]
