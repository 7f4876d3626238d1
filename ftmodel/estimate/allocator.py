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

Tensor storages come from ``posix_memalign(64, n)``, which glibc serves through
``_int_memalign``: it takes a chunk 64 + 32 bytes larger than the request's own and frees the
spare room, so a freed chunk of exactly a request's size cannot serve it again until it
coalesces with a neighbour. :class:`GlibcMalloc` ``(memalign_padding=True)`` places chunks so,
and reproduces glibc 2.36 itself within 2% on real processes' logged calls (AMD EPYC, four
models at batch 16; ``benchmarks/malloc_replay.py``). Predictions place tensors as plain
mallocs of their size (the default): real processes do not start from the empty heap a replay
starts from (a TCN at batch 16 faulted 12,192 and 56,886 pages per call in two fresh
processes), and on the corpus's tuning halves glibc's placement took the simulated faults
further from the measured ones (``docs/accuracy.md``, "Page faults of a plain process").
:func:`page_faults` simulates the heap along a program's allocations (mallopt(3), glibc's
``malloc.c``: ``_int_memalign``, ``_int_free``, ``systrim``, ``sysmalloc``; defaults of glibc
2.26 onwards). Each page is charged ``HostProfile.page_fault_s``, which calibration measures
on private anonymous pages as malloc maps them, written by an op on one thread
(:mod:`ftmodel.calibration.allocator`), for a plain process (``heap="plain"``, the default).

Counting semantics
------------------
* A storage is allocated just before the first kernel that writes it, if no kernel read it
  earlier (storages read first are parameters, buffers or inputs: they live across calls), and
  freed just after the last kernel that reads or writes it. Its size is the largest write seen.
* A oneDNN convolution (variant ``mkldnn`` or ``mkldnn_unaligned``) also allocates, for its own
  duration, a buffer the size of its weights (reordered to oneDNN's blocked layout on every
  eager call) and one the size of its output (computed blocked, then reordered into the output
  tensor), as logging a forward pass's ``malloc`` calls shows (Wide-ResNet-50 at batch 4:
  27,651 faults per call simulated, as measured, from 1,640 without them). Not counted: the
  input reorder of a channel-aligned one (``docs/accuracy.md``).
* A kernel's own scratch buffer (``Kernel.bytes_scratch``: the weight-sized copy a frozen
  TorchScript graph's prepacked convolution makes on every call,
  :func:`ftmodel.tracing.variants.prepacked_reorders_weights`) is allocated for its duration
  too, before an eager oneDNN convolution's two.
* Free chunks are reused best-fit and coalesce with free neighbours; a free of 64 KiB or more
  (after coalescing) trims a top chunk above the trim threshold. Chunks of at most 1040 bytes
  go to the thread cache first (7 per size, never coalesced, so they pin the heap; padded
  aligned requests do not take from it). The heap is one address range whose touched part is
  resident. A chunk faults in the pages it covers above the resident
  high-water mark; an mmap'd chunk faults in all its pages, every time.
* Steady state: the program is simulated ``passes`` times from the state a process is in when its
  model first runs (an empty heap; :func:`process_start`'s thresholds) and the last pass is
  reported, as a benchmark that warms up. The thresholds are not glibc's initial 128 KiB:
  ``import torch`` frees a mapped chunk of about 1 MiB (torch 2.14: the smallest request
  mapped afresh after it is 1,052,651 bytes), which raises the mmap threshold to about 1 MiB
  and the trim threshold to 2 MiB before any model runs; calibration measures it in a fresh
  process (``HostProfile.mmap_threshold_bytes``). From glibc's initial values the simulation
  faulted at batch 1 where the plain processes did not (Intel Xeon, eager, tuning half: 10 of
  the 14 models measured without faults at batch 1; from the threshold after ``import
  torch``, one).
* Not counted: Python and C++ objects (a tensor's ``StorageImpl`` and ``TensorImpl``: plain
  mallocs of 96 and 176 bytes around its data) and other library scratch buffers that share
  the heap, the per-thread arenas of other threads, fastbins (consolidated like other free
  chunks here), transparent huge pages.
* Kernels without operand identities (``Kernel.writes`` empty: ONNX Runtime) allocate
  nothing here. TorchScript's come from its graph walk (each node's output storage). Inductor's
  kernels carry their wrapper's buffers, but predictions do not simulate the heap for them
  (``Framework.allocations_known`` is false): on the corpus's tuning half that gave thousands
  of faults per call where inductor's plain processes measured none (AMD EPYC). On the Intel
  Xeon VM (calibration x22) they did fault, at batch 16 above all (1,500-41,000 pages per call
  for 10 of 19 models), but simulated they faulted at batches 1 and 4 too, where the processes
  measured none, and the tuning half went from 10.3% to 13.4% median APE (P90 34.0% to
  39.9%), from either starting threshold. What does not depend on
  the heap's layout is counted for them (:func:`mapped_page_faults`): a request above the mmap
  threshold's ceiling (32 MiB) is mapped afresh on every call and faults in all its pages (a
  GPT-2 decode step's new 67 MB KV caches, context 1024, batch 32: 160 of 366 ms measured).
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
SIZE_SZ = 8  # glibc's size field on 64-bit
MIN_CHUNK_BYTES = 32  # MINSIZE


@dataclass(frozen=True)
class GlibcMalloc:
    """glibc malloc's tunables for the main arena (their defaults on 64-bit Linux)."""

    mmap_threshold_bytes: int = 128 * KIB  # initial; raised by frees of mmap'd chunks
    mmap_threshold_max_bytes: int = 32 * MIB  # DEFAULT_MMAP_THRESHOLD_MAX
    trim_threshold_bytes: int = 128 * KIB  # initial; 2 x the mmap threshold once it moved
    top_pad_bytes: int = 128 * KIB  # DEFAULT_TOP_PAD
    consolidation_bytes: int = 64 * KIB  # FASTBIN_CONSOLIDATION_THRESHOLD: frees that may trim
    page_bytes: int = 4096
    alignment_bytes: int = 64  # c10's posix_memalign alignment
    # whether a tensor's chunk is placed as glibc's _int_memalign places it (a chunk 96 bytes
    # larger taken, its spare room freed); off, it is placed as a plain malloc of its size
    # would be, as predictions do (see the module's docstring), and only the choice between the
    # heap and a fresh mapping sees the padding
    memalign_padding: bool = False
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
        scratch = [k.bytes_scratch] if k.writes else []
        if k.op_class in ONEDNN_SCRATCH_CLASSES and k.variant in ONEDNN_VARIANTS and k.writes:
            scratch += [k.bytes_weights, k.bytes_written]  # reordered weights, blocked output
        for nbytes in scratch:
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

    def malloc(self, request: int, mmap_extra: int = 0) -> tuple[int, int, bool, int]:
        """(address, chunk bytes, mmap'd, pages faulted in) for a plain ``malloc(request)`` (a
        C++ object's): an exact-size chunk from the thread cache first, else
        :meth:`_int_malloc`'s, which maps it afresh if ``mmap_extra`` more bytes would reach the
        mmap threshold."""
        nb = self._request2size(request)
        cached = self.tcache.get(nb)
        if cached:
            return cached.pop(), nb, False, 0
        return self._int_malloc(nb, nb + mmap_extra)

    def memalign(self, request: int) -> tuple[int, int, bool, int]:
        """(address, chunk bytes, mmap'd, pages faulted in) for ``posix_memalign(alignment,
        request)``, as c10 allocates a CPU tensor's data. With ``memalign_padding``, as glibc's
        ``_int_memalign`` serves it: a chunk ``alignment + MINSIZE`` larger than the request's
        own is taken, and its leading and trailing spare room are freed again (so a freed chunk
        of exactly the request's size cannot serve the same request: it must coalesce with a
        neighbour first). Without, as predictions place it: as a plain malloc of its size,
        only the choice of a fresh mapping made on the padded size."""
        cfg = self.cfg
        nb = self._request2size(request)
        if cfg.alignment_bytes <= 2 * SIZE_SZ:
            return self.malloc(request)
        if not cfg.memalign_padding:  # as a plain malloc of the request would be placed
            return self.malloc(request, cfg.alignment_bytes + MIN_CHUNK_BYTES)
        addr, size, mmapped, pages = self._int_malloc(
            self._request2size(nb + cfg.alignment_bytes + MIN_CHUNK_BYTES))
        if mmapped:
            return addr, size, True, pages
        mem = addr + 2 * SIZE_SZ
        if mem % cfg.alignment_bytes:  # give back the leader
            new = -(-mem // cfg.alignment_bytes) * cfg.alignment_bytes - 2 * SIZE_SZ
            if new - addr < MIN_CHUNK_BYTES:
                new += cfg.alignment_bytes
            self.free(addr, new - addr, False)
            size -= new - addr
            addr = new
        if size > nb + MIN_CHUNK_BYTES:  # and the spare room at the end
            self.free(addr + nb, size - nb, False)
            size = nb
        return addr, size, False, pages

    def _request2size(self, request: int) -> int:
        """glibc's ``request2size``: the chunk bytes a request needs (its size field's word
        overlaps the next chunk; 16-byte multiples, at least MINSIZE)."""
        return max(MIN_CHUNK_BYTES, (request + SIZE_SZ + 15) // 16 * 16)

    def _int_malloc(self, nb: int, mmap_nb: int = 0) -> tuple[int, int, bool, int]:
        """(address, chunk bytes, mmap'd, pages faulted in) for a chunk of ``nb`` bytes: the
        best-fitting free chunk, else the top chunk, else the heap grows or, when ``mmap_nb``
        (default ``nb``) is at or above the mmap threshold, the chunk is mapped on its own."""
        cfg = self.cfg
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
            if best_size - nb >= MIN_CHUNK_BYTES:  # split: the remainder stays free
                self._put_free(best + nb, best_size - nb)
            else:
                nb = best_size
            return best, nb, False, self._touch(best, best + nb)
        if self.brk - self.top >= nb + MIN_CHUNK_BYTES:  # the top chunk holds it
            addr = self.top
            self.top += nb
            return addr, nb, False, self._touch(addr, addr + nb)
        if max(nb, mmap_nb) >= self.mmap_threshold:
            size = -(-(max(nb, mmap_nb) + SIZE_SZ) // cfg.page_bytes) * cfg.page_bytes
            return -1, size, True, size // cfg.page_bytes
        need = nb + MIN_CHUNK_BYTES - (self.brk - self.top)
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
        else:
            self._put_free(lo, hi - lo)
        # _int_free: a large enough free (after coalescing) trims a top chunk above the trim
        # threshold, wherever the freed chunk lies
        if hi - lo >= cfg.consolidation_bytes and self.brk - self.top >= self.trim_threshold:
            self._trim()

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
                addr, size, mm, n = heap.memalign(a.size_bytes)
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
    heap: ``events`` are ``("memalign", size, key)`` (``posix_memalign``, as c10 allocates a
    tensor's data), ``("malloc", size, key)`` (a plain ``malloc``, as C++ objects are) and
    ``("free", 0, key)`` in program order (``key``: the pointer); a free of a key the stream did
    not allocate (allocated before the log began) is skipped. A check of the heap model against
    a real process's ``malloc`` calls (``benchmarks/malloc_replay.py``), apart from what the
    trace counts."""
    heap = _Heap(cfg or GlibcMalloc())
    out: list[StreamPass] = []
    for _ in range(max(1, passes)):
        live: dict[int, tuple[int, int, bool]] = {}
        faults = grows = trims = 0
        for op, size, key in events:
            brk = heap.brk
            if op in ("malloc", "memalign"):
                addr, chunk, mm, n = (heap.memalign if op == "memalign" else heap.malloc)(size)
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
