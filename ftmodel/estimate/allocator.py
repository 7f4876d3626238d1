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
  :func:`ftmodel.tracing.variants.prepacked_reorders_weights`, and the one oneDNN makes of an
  inductor convolution's channels-last weights,
  :func:`ftmodel.tracing.variants.channels_last_reorders_weights`) is allocated for its duration
  too, before an eager oneDNN convolution's two, unless a frozen graph's copy is above glibc's
  mmap ceiling: such a copy would be mapped afresh on every call from the empty heap this
  simulation starts from, but freezing grows the main heap by the graph's weights and frees
  intermediate copies inside it, and Wide-ResNet-50-2's 36 MiB copies came from that free
  space in 7 of 10 plain processes (malloc-logged and corpus runs, AMD EPYC), mapped afresh in
  the others; they are left out (no faults, no effect on the heap). Inductor's are mapped
  afresh on every call (the same network at batch 4: three 36 MiB copies per call beside its
  wrapper's 36 MiB buffer, 41,444 faults measured).
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
  kernels carry their wrapper's buffers and their convolutions' weight copies (a ResNet-34's
  call at batch 4 makes the same 75 allocations of 128 KiB or more as a malloc log of the real
  call shows), but predictions do not simulate the heap for them
  (``Framework.allocations_known`` is false). The buffers are right, where the heap starts is
  not: ``torch.compile`` itself frees mapped chunks in the user's process (its own, not the
  model's: 1.9 MB in an MLP's or a TCN's compile at batch 1, 3.9 MB in DistilBERT's or
  GPT-2's, 4.2 MB in an LSTM language model's; ``benchmarks/mmap_threshold_history.py``, AMD
  EPYC), which raises the mmap and trim thresholds above those after ``import torch``; from
  there, glibc keeps in the heap what the simulation trims: transformers, recurrent nets and
  a TCN at batch 4 fault 1,100-9,300 pages per call simulated where their processes measured
  0-2,000. On the corpus's tuning half the simulation
  took inductor from 11.4% to 12.2% median APE (P90 28.2% to 34.9%; calibration 110), though
  the convolutional nets' simulated faults came within 2x of those measured at 24 of their 30
  points (19 without the weight copies). On the Intel
  Xeon VM (calibration x22) they did fault, at batch 16 above all (1,500-41,000 pages per call
  for 10 of 19 models), but simulated they faulted at batches 1 and 4 too, where the processes
  measured none, and the tuning half went from 10.3% to 13.4% median APE (P90 34.0% to
  39.9%), from either starting threshold. What does not depend on
  the heap's layout is counted for them (:func:`mapped_page_faults`): a request above the mmap
  threshold's ceiling (32 MiB) is mapped afresh on every call and faults in all its pages (a
  GPT-2 decode step's new 67 MB KV caches, context 1024, batch 32: 160 of 366 ms measured).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ftmodel.estimate.glibc_heap import GlibcHeap, GlibcMalloc, process_start
from ftmodel.program import Kernel
from ftmodel.tracing.prepacked_variants import PREPACKED_VARIANTS
from ftmodel.tracing.variants import ONEDNN_VARIANTS

__all__ = ["GlibcMalloc", "Allocation", "ONEDNN_SCRATCH_CLASSES", "StreamPass",
           "allocation_faults", "allocations",
           "mapped_page_faults", "page_faults", "process_start", "stream_page_faults"]

# op classes whose oneDNN kernels (variants ONEDNN_VARIANTS) allocate scratch buffers per call
ONEDNN_SCRATCH_CLASSES = frozenset({"conv", "conv_grouped"})

@dataclass(frozen=True)
class Allocation:
    """One tensor storage's lifetime inside the program: allocated before kernel ``start``,
    freed after kernel ``end``."""

    sid: int
    size_bytes: int
    start: int
    end: int


def allocations(kernels: Sequence[Kernel],
                scratch_ceiling_bytes: int | None = None) -> list[Allocation]:
    """The storages ``kernels`` allocate, from their operand identities (see the module's
    counting semantics); a frozen graph's prepacked convolution's scratch buffer above
    ``scratch_ceiling_bytes`` (glibc's mmap ceiling, where the simulation passes it) is left
    out."""
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
        own = k.bytes_scratch
        fits = (scratch_ceiling_bytes is None or own <= scratch_ceiling_bytes
                or k.variant not in PREPACKED_VARIANTS)
        scratch = [own] if k.writes and fits else []
        if k.op_class in ONEDNN_SCRATCH_CLASSES and k.variant in ONEDNN_VARIANTS and k.writes:
            scratch += [k.bytes_weights, k.bytes_written]  # reordered weights, blocked output
        for nbytes in scratch:
            if nbytes > 0:
                out.append(Allocation(scratch_sid, int(nbytes), i, i))
                scratch_sid -= 1
    return out


def allocation_faults(kernels: Sequence[Kernel], cfg: GlibcMalloc | None = None,
                      passes: int = 3) -> list[tuple[Allocation, int]]:
    """Each of :func:`allocations`' storages and scratch buffers (a negative ``sid``) with the
    minor page faults it makes in the last of ``passes`` simulated forward passes under glibc's
    malloc, from ``cfg``'s thresholds (glibc's initial ones by default; :func:`process_start`),
    in the order they are allocated."""
    cfg = cfg or GlibcMalloc()
    allocs = allocations(kernels, cfg.mmap_threshold_max_bytes)
    starts: dict[int, list[Allocation]] = {}
    ends: dict[int, list[Allocation]] = {}
    for a in allocs:
        starts.setdefault(a.start, []).append(a)
        ends.setdefault(a.end, []).append(a)
    heap = GlibcHeap(cfg)
    out: list[tuple[Allocation, int]] = []
    for _ in range(max(1, passes)):
        out = []
        live: dict[int, tuple[int, int, bool]] = {}
        for i in range(len(kernels)):
            for a in starts.get(i, ()):
                addr, size, mm, n = heap.memalign(a.size_bytes)
                live[a.sid] = (addr, size, mm)
                out.append((a, n))
            for a in ends.get(i, ()):
                heap.free(*live.pop(a.sid))
    return out


def page_faults(kernels: Sequence[Kernel], cfg: GlibcMalloc | None = None,
                passes: int = 3) -> np.ndarray:
    """Minor page faults each kernel of one steady-state forward pass makes under glibc's
    malloc (the faults of the storages it allocates), as an array of ``len(kernels)``, from
    ``cfg``'s thresholds (glibc's initial ones by default; :func:`process_start`)."""
    faults = np.zeros(len(kernels), dtype=np.float64)
    for a, n in allocation_faults(kernels, cfg, passes):
        faults[a.start] += n
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
    heap = GlibcHeap(cfg or GlibcMalloc())
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
    for a in allocations(kernels, cfg.mmap_threshold_max_bytes):
        if a.size_bytes >= cfg.mmap_threshold_max_bytes:
            faults[a.start] += -(-a.size_bytes // cfg.page_bytes)
    return faults
