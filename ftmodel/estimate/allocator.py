"""Page faults that glibc's malloc makes a forward pass pay, kernel by kernel.

PyTorch's CPU tensors come from ``posix_memalign``, that is from glibc's malloc in a plain
process. glibc gives memory back to the operating system in two ways, and each time memory comes
back the next forward pass page-faults it in again (the kernel zero-fills every 4 KiB page on
first touch):

* **mmap'd chunks.** A request that neither a free chunk nor the heap's top chunk can hold, and
  that is at least the *mmap threshold*, gets its own ``mmap`` and is ``munmap``'ed when freed.
  The threshold starts at 128 KiB and rises to the size of each mmap'd chunk freed, up to 32 MiB
  (glibc's dynamic threshold): after the first pass, only chunks above 32 MiB, or above what the
  heap can hold at that moment, are mapped afresh.
* **Heap trimming.** Memory freed next to the heap's top merges into the top chunk; when a free
  of at least 64 KiB leaves the top chunk larger than the *trim threshold* (twice the mmap
  threshold once that has moved), ``free`` shrinks the heap to the top pad (128 KiB). A forward
  pass grows the heap to its peak live memory and frees it at the end, so it is trimmed and
  faulted in again every pass.

:func:`page_faults` simulates this along a program's allocations (mallopt(3), glibc's
``malloc.c``: ``_int_free``, ``systrim``, ``sysmalloc``; defaults of glibc 2.26 onwards). Each
page is charged ``HostProfile.page_fault_s``, which calibration measures on private anonymous
pages as malloc maps them, written by an op on one thread
(:mod:`ftmodel.calibration.allocator`; 0.81 µs on a 2-vCPU AMD EPYC, where a probe on shared
memory had priced 1.67 µs and the corpus's held-out eager median APE in a plain process was
14.4% with that price, 10.2% with the right one).
Predictions use it for a plain process (``heap="plain"``, the default). On the validation
corpus's tuning half (AMD EPYC, eager, plain process), adding its faults at the calibrated price
takes the median APE from 24.2% to 18.6% and the P90 from 53.9% to 46.9% (median predicted /
measured 0.78 -> 0.91), although per model its fault counts differ from the measured ones by
0.1-10x in both directions
(``ru_minflt`` per call; e.g. a TCN at batch 4: 3,551 simulated, 10,700-16,200 measured; GPT-2
at batch 16: 61,091 simulated, 4,300-15,000 measured). Two causes, found by logging the real
``malloc``/``posix_memalign``/``free`` stream of a forward pass (an ``LD_PRELOAD`` shim) and
replaying it through this simulation: (1) the trace misses allocations made inside ops — a
TCN's oneDNN convolutions allocate a weight-sized reorder buffer and an output-sized blocked
buffer per call (50 buffers of 2 MiB per pass against 31 traced); replaying the real stream gives
8,100 faults against 10,700 measured; (2) for GPT-2 the real and traced large allocations are the
same, yet the replay still trims about five times per pass where ``strace`` shows glibc trimming
once (48 MiB), so the simulated heap layout is still wrong (the heap's long-lived chunks from
before the pass, which pin its top, are unknown to it). ``benchmarks/malloc_replay.py`` logs the
program break beside each call (Intel Xeon, ``malloc-replay.md``): in one forward pass at batch
16 the real heap grew 27 times and was trimmed 8 times for a TCN (55,658 faults), once and never
for GPT-2 (14,170), while the replay of the same calls settles at 14 / 3 (26,607 faults) and
39 / 8 (57,697). A replay from an empty heap's first pass gives 62,228 and 63,484: the TCN's
real heap behaves as if fresh every pass, GPT-2's as if a large free region below a pinned chunk
served every buffer. Which one a process is in depends on chunks its earlier life left in the
heap, which neither the trace nor the replay sees. Those replays mixed the worker threads' calls
into the main heap, where glibc serves them from arenas of their own; replaying the main
thread's calls alone (AMD EPYC, batch 16, ``benchmarks/results/cpu-epyc/malloc-replay.md``)
reproduces the real heap's grows and trims for FastViT-T8 (12 / 2 each; 19,146 faults against
25,415 measured, 9,190 with every thread's calls, 12,228 traced: the trace misses 58 of its 374
allocations of 128 KiB or more. oneDNN's verbose log shows they are the inputs of its depthwise
and 1x1 convolutions re-ordered into the blocked layout (padded to 16 channels), 58 per call;
none for the grouped ones run as GEMMs or a 3-channel 3x3 stem. They are not counted here:
counted, they took the simulated faults further from the measured ones on a Zen 3 guest's
tuning half, ``benchmarks/results/cpu-epyc-milan/README.md``.) It
does not reproduce the TCN's heap (12 / 3 against 31 / 9) or GPT-2's. Counting the measured
faults instead of the simulated ones would move the corpus's median APE little (run x12,
held-out at calibration speed: 10.2% either way; tuning 13.1% to 11.6%).

Counting semantics
------------------
* A storage is allocated just before the first kernel that writes it, if no kernel read it
  earlier (storages read first are parameters, buffers or inputs: they live across calls), and
  freed just after the last kernel that reads or writes it. Its size is the largest write seen.
* A oneDNN convolution (variant ``mkldnn`` or ``mkldnn_unaligned``) also allocates, for its own
  duration, a buffer the size of its weights (reordered to oneDNN's blocked layout on every eager call) and one the
  size of its output (computed in the blocked layout, then reordered into the output tensor),
  as logging the ``malloc`` calls of a forward pass shows. On the corpus's tuning half this
  takes Wide-ResNet-50 at batch 4 from 1,640 simulated faults per call to 27,651, what four
  runs measured every time (its last stage's 37.7 MB weight copies exceed glibc's 32 MiB
  ceiling on the mmap threshold, so each is mapped afresh), and ResNet-34 and ResNeXt-50 at
  batch 4 from 1,119 and 3,800 to 0 (measured: 0); it leaves FastViT and ConvNeXt-T under.
* Free chunks are reused best-fit and coalesce with free neighbours; chunks of at most 1040
  bytes go to the thread cache first (7 per size, never coalesced, so they pin the heap); the
  heap is one address range whose touched part is resident. A chunk faults in the pages it covers above the resident
  high-water mark; an mmap'd chunk faults in all its pages, every time.
* Steady state: the program is simulated ``passes`` times from the state a process is in when its
  model first runs (an empty heap; :func:`process_start`'s thresholds) and the last pass is
  reported, as a benchmark that warms up. The thresholds are not glibc's initial 128 KiB:
  ``import torch`` frees a mapped chunk of about 1 MiB (torch 2.14 on the Intel Xeon VM: the
  smallest request mapped afresh after it is 1,052,651 bytes, a chunk of 1 MiB + 4 KiB), which raises the mmap
  threshold to about 1 MiB and the trim threshold to 2 MiB before any model runs. Calibration
  measures it in a fresh process (``HostProfile.mmap_threshold_bytes``). From glibc's initial
  values the simulation trimmed and faulted at batch 1 where the plain processes measured no
  faults (Intel Xeon, eager, the corpus's tuning half: of the 14 models measured without faults
  at batch 1 in two runs, 10 were simulated with 49-1,685 per call; with the threshold after
  ``import torch``, one, Swin-T).
* Not counted: Python objects and other library scratch buffers (MKL, oneDNN's recurrent
  workspaces) that share the heap, the
  per-thread arenas of other threads, fastbins (consolidated like other free chunks here),
  transparent huge pages.
* Kernels without operand identities (``Kernel.writes`` empty: ONNX Runtime) allocate
  nothing here. TorchScript's come from its graph walk (each node's output storage). Inductor's
  kernels carry their wrapper's buffers, but predictions do not simulate the heap for them
  (``Framework.allocations_known`` is false): on the corpus's tuning half that gave thousands
  of faults per call where inductor's plain processes measured none (AMD EPYC). On the Intel
  Xeon VM (calibration x22) they did fault, at batch 16 above all (1,500-41,000 pages per call
  for 10 of 19 models), but simulated they faulted at batches 1 and 4 too, where the processes
  measured none, and the tuning half went from 10.3% to 13.4% median APE (P90 34.0% to 39.9%;
  the TCN at batch 1 1.01x to 1.46x); started from the threshold ``import torch`` leaves, 13.4%
  again (P90 34.0%; per model, against the predictions without it: the TCN 2.2% to 19.7%,
  T5 12.6% to 20.2%, FastViT 13.5% to 20.9%). What does not depend on
  the heap's layout is counted for them (:func:`mapped_page_faults`): a request above the mmap
  threshold's ceiling (32 MiB) is mapped afresh on every call and faults in all its pages. A
  GPT-2 decode step under inductor at context 1024 and batch 32 makes its KV cache anew each
  step (12 buffers of 67 MB): 197,000 faults, 160 ms at 0.81 µs, of 366 ms measured, where the
  prediction without them gave 57 ms.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ftmodel.program import Kernel
from ftmodel.tracing.variants import ONEDNN_VARIANTS

__all__ = ["GlibcMalloc", "Allocation", "ONEDNN_SCRATCH_CLASSES", "StreamPass", "allocations",
           "mapped_page_faults", "page_faults", "process_start", "stream_page_faults"]

# op classes whose oneDNN kernels (variants ONEDNN_VARIANTS) allocate scratch buffers per call
ONEDNN_SCRATCH_CLASSES = frozenset({"conv", "conv_grouped"})

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class GlibcMalloc:
    """glibc malloc's tunables for the main arena (their defaults on 64-bit Linux)."""

    mmap_threshold_bytes: int = 128 * KIB  # initial; raised by frees of mmap'd chunks
    mmap_threshold_max_bytes: int = 32 * MIB  # DEFAULT_MMAP_THRESHOLD_MAX
    trim_threshold_bytes: int = 128 * KIB  # initial; 2 x the mmap threshold once it moved
    top_pad_bytes: int = 128 * KIB  # DEFAULT_TOP_PAD
    consolidation_bytes: int = 64 * KIB  # FASTBIN_CONSOLIDATION_THRESHOLD: frees that may trim
    page_bytes: int = 4096
    header_bytes: int = 16  # chunk header; chunks are multiples of 16 bytes
    alignment_bytes: int = 64  # c10's posix_memalign alignment
    tcache_max_chunk_bytes: int = 1040  # chunks up to this size go to the thread cache ...
    tcache_count: int = 7  # ... at most this many per size (never coalesced: they pin the heap)


@dataclass(frozen=True)
class Allocation:
    """One tensor storage's lifetime inside the program: allocated before kernel ``start``,
    freed after kernel ``end``."""

    sid: int
    size_bytes: int
    start: int
    end: int


def allocations(kernels: Sequence[Kernel]) -> list[Allocation]:
    """The storages ``kernels`` allocate, from their operand identities (see the module's
    counting semantics)."""
    first_write: dict[int, int] = {}
    read_before: set[int] = set()
    last: dict[int, int] = {}
    size: dict[int, int] = {}
    for i, k in enumerate(kernels):
        for sid, nbytes in k.reads:
            if sid not in first_write:
                read_before.add(sid)
            last[sid] = i
        for sid, nbytes in k.writes:
            if sid not in first_write and sid not in read_before:
                first_write[sid] = i
            last[sid] = i
            size[sid] = max(size.get(sid, 0), int(nbytes))
    out = [Allocation(sid, size[sid], i, last[sid]) for sid, i in first_write.items()
           if size[sid] > 0]
    scratch_sid = -1  # storages never have negative ids
    for i, k in enumerate(kernels):
        if k.op_class in ONEDNN_SCRATCH_CLASSES and k.variant in ONEDNN_VARIANTS and k.writes:
            for nbytes in (k.bytes_weights, k.bytes_written):  # reordered weights, blocked output
                if nbytes > 0:
                    out.append(Allocation(scratch_sid, int(nbytes), i, i))
                    scratch_sid -= 1
    return out


class _Heap:
    """The main arena: free chunks by address, the top chunk, the break and the resident mark."""

    def __init__(self, cfg: GlibcMalloc) -> None:
        self.cfg = cfg
        self.mmap_threshold = cfg.mmap_threshold_bytes
        self.trim_threshold = cfg.trim_threshold_bytes
        self.free_addrs: list[int] = []  # sorted start addresses of free chunks
        self.free_size: dict[int, int] = {}
        self.top = 0  # start of the top chunk
        self.brk = 0  # end of the heap (break)
        self.resident = 0  # pages below this address have been touched and not given back
        self.tcache: dict[int, list[int]] = {}  # chunk size -> cached chunk addresses (LIFO)

    def _pages(self, lo: int, hi: int) -> int:
        p = self.cfg.page_bytes
        return max(0, -(-hi // p) - lo // p) if hi > lo else 0

    def malloc(self, request: int) -> tuple[int, int, bool, int]:
        """(address, chunk bytes, mmap'd, pages faulted in) for a request of ``request``
        bytes."""
        cfg = self.cfg
        nb = max(32, -(-(request + cfg.header_bytes) // 16) * 16)
        cached = self.tcache.get(nb)
        if cached:  # the thread cache: exact size, last in first out
            return cached.pop(), nb, False, 0
        # best fit among free chunks
        best, best_size = -1, 0
        for a in self.free_addrs:
            s = self.free_size[a]
            if s >= nb and (best < 0 or s < best_size):
                best, best_size = a, s
                if s == nb:
                    break
        if best >= 0:
            self._take_free(best)
            if best_size - nb >= 32:  # split: the remainder stays free
                self._put_free(best + nb, best_size - nb)
            else:
                nb = best_size
            return best, nb, False, self._touch(best, best + nb)
        if self.brk - self.top >= nb + 32:  # the top chunk holds it
            addr = self.top
            self.top += nb
            return addr, nb, False, self._touch(addr, addr + nb)
        # memalign asks for alignment + MINSIZE more; sysmalloc decides on that size
        if nb + cfg.alignment_bytes + 32 >= self.mmap_threshold:
            size = -(-(nb + cfg.alignment_bytes) // cfg.page_bytes) * cfg.page_bytes
            return -1, size, True, size // cfg.page_bytes
        need = nb + 32 - (self.brk - self.top)
        self.brk += -(-(need + cfg.top_pad_bytes) // cfg.page_bytes) * cfg.page_bytes
        addr = self.top
        self.top += nb
        return addr, nb, False, self._touch(addr, addr + nb)

    def free(self, addr: int, size: int, mmapped: bool) -> None:
        cfg = self.cfg
        if mmapped:
            if self.mmap_threshold < size <= cfg.mmap_threshold_max_bytes:
                self.mmap_threshold = size
                self.trim_threshold = 2 * size
            return
        if size <= cfg.tcache_max_chunk_bytes:
            cached = self.tcache.setdefault(size, [])
            if len(cached) < cfg.tcache_count:
                cached.append(addr)  # still in use as far as the heap is concerned
                return
        lo, hi = addr, addr + size
        i = bisect.bisect_left(self.free_addrs, lo)
        if i > 0:  # coalesce with the free chunk below
            prev = self.free_addrs[i - 1]
            if prev + self.free_size[prev] == lo:
                lo = prev
                self._take_free(prev)
        if hi in self.free_size:  # and the one above
            above = hi
            hi += self.free_size[above]
            self._take_free(above)
        if hi == self.top:
            self.top = lo
            if hi - lo >= cfg.consolidation_bytes and self.brk - self.top >= self.trim_threshold:
                self._trim()
        else:
            self._put_free(lo, hi - lo)

    def _trim(self) -> None:
        cfg = self.cfg
        extra = (self.brk - self.top - cfg.top_pad_bytes - 32 - 1) // cfg.page_bytes \
            * cfg.page_bytes
        if extra > 0:
            self.brk -= extra
            self.resident = min(self.resident, self.brk)

    def _touch(self, lo: int, hi: int) -> int:
        faults = self._pages(max(lo, self.resident), hi)
        self.resident = max(self.resident, hi)
        return faults

    def _take_free(self, addr: int) -> None:
        self.free_addrs.pop(bisect.bisect_left(self.free_addrs, addr))
        del self.free_size[addr]

    def _put_free(self, addr: int, size: int) -> None:
        bisect.insort(self.free_addrs, addr)
        self.free_size[addr] = size


def process_start(mmap_threshold_bytes: int = 0) -> GlibcMalloc:
    """glibc's tunables as a process leaves them before its model runs: the mmap threshold
    measured after ``import torch`` (``HostProfile.mmap_threshold_bytes``; 0 = not measured:
    glibc's initial 128 KiB), the trim threshold twice it once it moved, as ``free`` sets it."""
    cfg = GlibcMalloc()
    if mmap_threshold_bytes <= cfg.mmap_threshold_bytes:
        return cfg
    threshold = min(int(mmap_threshold_bytes), cfg.mmap_threshold_max_bytes)
    return replace(cfg, mmap_threshold_bytes=threshold, trim_threshold_bytes=2 * threshold)


def page_faults(kernels: Sequence[Kernel], cfg: GlibcMalloc | None = None,
                passes: int = 3) -> np.ndarray:
    """Minor page faults each kernel of one steady-state forward pass makes under glibc's
    malloc (the faults of the storages it allocates), as an array of ``len(kernels)``, from
    ``cfg``'s thresholds (glibc's initial ones by default; :func:`process_start`)."""
    cfg = cfg or GlibcMalloc()
    allocs = allocations(kernels)
    starts: dict[int, list[Allocation]] = {}
    ends: dict[int, list[Allocation]] = {}
    for a in allocs:
        starts.setdefault(a.start, []).append(a)
        ends.setdefault(a.end, []).append(a)
    heap = _Heap(cfg)
    faults = np.zeros(len(kernels), dtype=np.float64)
    for p in range(max(1, passes)):
        faults[:] = 0.0
        live: dict[int, tuple[int, int, bool]] = {}
        for i in range(len(kernels)):
            for a in starts.get(i, ()):
                addr, size, mm, n = heap.malloc(a.size_bytes)
                live[a.sid] = (addr, size, mm)
                faults[i] += n
            for a in ends.get(i, ()):
                heap.free(*live.pop(a.sid))
    return faults


@dataclass(frozen=True)
class StreamPass:
    """One pass of :func:`stream_page_faults`: pages faulted in, and how often the break moved
    up (the heap grew) and down (``free`` trimmed it)."""

    faults: int
    grows: int
    trims: int


def stream_page_faults(events: Sequence[tuple[str, int, int]], cfg: GlibcMalloc | None = None,
                       passes: int = 3) -> list[StreamPass]:
    """This simulation replaying a logged allocation stream ``passes`` times from an empty
    heap: ``events`` are ``("malloc", size, key)`` and ``("free", 0, key)`` in program order
    (``key``: the pointer); a free of a key the stream did not allocate (allocated before the
    log began) is skipped. A check of the heap model against a real process's ``malloc`` calls
    (``benchmarks/malloc_replay.py``), apart from what the trace counts."""
    heap = _Heap(cfg or GlibcMalloc())
    out: list[StreamPass] = []
    for _ in range(max(1, passes)):
        live: dict[int, tuple[int, int, bool]] = {}
        faults = grows = trims = 0
        for op, size, key in events:
            brk = heap.brk
            if op == "malloc":
                addr, chunk, mm, n = heap.malloc(size)
                live[key] = (addr, chunk, mm)
                faults += n
            elif key in live:
                heap.free(*live.pop(key))
            grows += heap.brk > brk
            trims += heap.brk < brk
        out.append(StreamPass(faults, grows, trims))
    return out


def mapped_page_faults(kernels: Sequence[Kernel], cfg: GlibcMalloc | None = None) -> np.ndarray:
    """Page faults per kernel from the storages above the mmap threshold's ceiling alone: glibc
    maps each such request afresh and unmaps it when freed, so every call faults in all its
    pages whatever the rest of the heap looks like. Smaller storages count nothing here."""
    cfg = cfg or GlibcMalloc()
    faults = np.zeros(len(kernels), dtype=np.float64)
    for a in allocations(kernels):
        if a.size_bytes >= cfg.mmap_threshold_max_bytes:
            faults[a.start] += -(-a.size_bytes // cfg.page_bytes)
    return faults
