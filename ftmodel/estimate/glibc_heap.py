"""glibc malloc's main arena, as :mod:`ftmodel.estimate.allocator` simulates it: its tunables
(:class:`GlibcMalloc`), the state a process leaves them in before its model runs
(:func:`process_start`) and the heap itself (:class:`GlibcHeap`: free chunks by address, the
top chunk, the break, the resident high-water mark; ``malloc``, ``memalign`` and ``free`` with
glibc 2.26+'s placement, thresholds and trimming, as ``malloc.c``'s ``_int_malloc``,
``_int_memalign``, ``_int_free``, ``systrim`` and ``sysmalloc`` do). What a program allocates,
and when, is the allocator's business; see its docstring for what is and is not counted.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

__all__ = ["GlibcHeap", "GlibcMalloc", "process_start"]

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
    # would be, as predictions do (see ftmodel.estimate.allocator's docstring), and only the
    # choice between the heap and a fresh mapping sees the padding
    memalign_padding: bool = False
    tcache_max_chunk_bytes: int = 1040  # chunks up to this size go to the thread cache ...
    tcache_count: int = 7  # ... at most this many per size (never coalesced: they pin the heap)



class GlibcHeap:
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
