"""glibc malloc's page faults along a program: ftmodel.estimate.allocator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from ftmodel.estimate.allocator import (GlibcMalloc, allocation_faults, allocations,
                                        mapped_page_faults, page_faults, process_start)
from ftmodel.hardware.profile import HardwareProfile
from ftmodel.program import Kernel

MIB = 1 << 20
PAGE = 4096
WEIGHTS = 10**6  # storage id of a parameter: read before anything writes it


def _kernel(reads: tuple[tuple[int, int], ...], writes: tuple[tuple[int, int], ...]) -> Kernel:
    nr = sum(n for _, n in reads)
    nw = sum(n for _, n in writes)
    return Kernel("elementwise", 0, nr, nw, "m", ("aten.add",), reads=reads, writes=writes)


def _chain(n: int, size: int) -> list[Kernel]:
    """Kernel i reads buffer i-1 (kernel 0 reads the weights) and writes buffer i."""
    ks = [_kernel(((WEIGHTS, size),), ((0, size),))]
    ks += [_kernel(((i - 1, size),), ((i, size),)) for i in range(1, n)]
    return ks


def test_allocations_skip_parameters_and_inplace_writes() -> None:
    ks = [_kernel(((WEIGHTS, 100),), ((1, 100),)),   # allocates 1
          _kernel(((1, 100),), ((1, 100),)),         # in place: no allocation
          _kernel(((1, 100), (WEIGHTS, 100)), ((2, 200),))]
    got = {(a.sid, a.size_bytes, a.start, a.end) for a in allocations(ks)}
    assert got == {(1, 100, 0, 2), (2, 200, 2, 2)}


def test_a_freed_chunk_of_the_requests_size_cannot_serve_it_again() -> None:
    # posix_memalign(64, n) takes a chunk 96 bytes larger than n's own and gives the spare room
    # back: the chunk a freed buffer leaves is too small for the next buffer of its size, so a
    # chain of equal buffers (each freed once the next is written) keeps growing the heap
    # until a free neighbour coalesces with it, and is trimmed and faulted in again every pass
    # (glibc 2.36: 14 grows, 7 trims and 3,360 faults per pass). Placed as plain mallocs, as
    # predictions place them, the buffers settle on two chunks: only the last two, freed into
    # the top chunk and trimmed, fault again
    faults = page_faults(_chain(20, MIB), GlibcMalloc(memalign_padding=True))
    assert 0.9 * 3360 <= faults.sum() <= 1.1 * 3360
    plain = page_faults(_chain(20, MIB))
    assert plain[2:].sum() == 0
    assert 1.5 * (MIB // PAGE) < plain[:2].sum() <= 2 * (MIB // PAGE + 1)


def test_the_first_pass_maps_large_buffers_until_the_threshold_rises() -> None:
    first = page_faults(_chain(20, MIB), passes=1)
    # the first two 1 MiB buffers are above the initial 128 KiB threshold: mmap'd, 257 pages
    # each (1 MiB + header and alignment, rounded up to pages)
    assert first[0] == first[1] == MIB // PAGE + 1
    assert first.sum() > 2 * (MIB // PAGE)


def test_buffers_above_32_mib_are_mapped_afresh_every_pass() -> None:
    size = 40 * MIB
    faults = page_faults(_chain(4, size))
    assert faults.tolist() == [size // PAGE + 1] * 4


def test_a_pass_that_grows_then_frees_the_heap_is_trimmed_and_refaulted() -> None:
    # 8 buffers of 1 MiB, all alive until the last kernel: the heap grows to 8 MiB, the frees at
    # the end leave a top chunk above the trim threshold (2 x ~1 MiB), so glibc gives it back
    ks = [_kernel(((WEIGHTS, MIB),), ((i, MIB),)) for i in range(8)]
    ks.append(_kernel(tuple((i, MIB) for i in range(8)), ((100, 4096),)))
    faults = page_faults(ks)
    assert faults[:8].sum() >= 6 * (MIB // PAGE)  # most of the 8 MiB is faulted in again


def test_a_raised_trim_threshold_keeps_the_heap() -> None:
    ks = [_kernel(((WEIGHTS, MIB),), ((i, MIB),)) for i in range(8)]
    ks.append(_kernel(tuple((i, MIB) for i in range(8)), ((100, 4096),)))
    kept = GlibcMalloc(trim_threshold_bytes=2**31 - 1, mmap_threshold_bytes=2**31 - 1)
    assert page_faults(ks, kept).sum() == 0


@pytest.mark.parametrize("passes", [0, -1])
def test_at_least_one_pass_is_simulated(passes: int) -> None:
    assert page_faults(_chain(3, MIB), passes=passes).shape == (3,)


def test_onednn_convolution_maps_its_reordered_weights_afresh_every_call() -> None:
    # a oneDNN convolution with 40 MiB of weights and a 1 MiB output: the weight copy is above
    # glibc's 32 MiB ceiling on the mmap threshold, so every call maps and faults it in again;
    # the same kernel on PyTorch's own slow path allocates only its output
    w = 40 * MIB
    conv = Kernel("conv", 1, w + MIB, MIB, "m", ("aten.convolution",), variant="mkldnn",
                  bytes_weights=w, reads=((WEIGHTS, w), (0, MIB)), writes=((1, MIB),))
    head = _kernel(((WEIGHTS, 4096),), ((0, MIB),))
    tail = _kernel(((1, MIB),), ((2, 4096),))
    sizes = sorted(a.size_bytes for a in allocations([head, conv, tail]))
    assert sizes == [4096, MIB, MIB, MIB, w]  # input, output, blocked output, weights; result
    faults = page_faults([head, conv, tail])
    assert faults[1] >= w // 4096
    slow = replace(conv, variant="slow2d")
    assert page_faults([head, slow, tail])[1] < w // 4096



def test_faults_by_allocation_tell_a_convolutions_scratch_from_its_output() -> None:
    # the 40 MiB weight copy (scratch: a negative id) faults in every page each call; the
    # per-kernel faults are those of the allocations each kernel makes
    w = 40 * MIB
    conv = Kernel("conv", 1, w + MIB, MIB, "m", ("aten.convolution",), variant="mkldnn",
                  bytes_weights=w, reads=((WEIGHTS, w), (0, MIB)), writes=((1, MIB),))
    ks = [_kernel(((WEIGHTS, 4096),), ((0, MIB),)), conv, _kernel(((1, MIB),), ((2, 4096),))]
    by_alloc = allocation_faults(ks)
    weights = [n for a, n in by_alloc if a.sid < 0 and a.size_bytes == w]
    assert len(weights) == 1 and weights[0] >= w // PAGE
    per_kernel = [sum(n for a, n in by_alloc if a.start == i) for i in range(len(ks))]
    assert per_kernel == page_faults(ks).tolist()

def _prepacked_conv(w: int) -> Kernel:
    # a prepacked convolution copying ``w`` bytes of weights each call (Kernel.bytes_scratch);
    # its variant allocates nothing else
    return Kernel("conv", 1, w + MIB, MIB, "m", ("prim::mkldnn_convolution",),
                  variant="mkldnn_prepacked_weights", bytes_weights=w,
                  reads=((WEIGHTS, w), (0, MIB)), writes=((1, MIB),), bytes_scratch=w)


def test_a_kernels_own_scratch_buffer_lives_for_its_call() -> None:
    # the copy is allocated with its output and freed after it: mapped on the first call
    # (above the initial mmap threshold), then served by the heap its free raised the threshold
    # for
    w = 24 * MIB
    conv = _prepacked_conv(w)
    head = _kernel(((WEIGHTS, 4096),), ((0, MIB),))
    tail = _kernel(((1, MIB),), ((2, 4096),))
    got = [(a.size_bytes, a.start, a.end) for a in allocations([head, conv, tail])]
    assert sorted(got) == [(4096, 2, 2), (MIB, 0, 1), (MIB, 1, 2), (w, 1, 1)]
    assert page_faults([head, conv, tail], passes=1)[1] >= w // PAGE
    assert page_faults([head, replace(conv, bytes_scratch=0), tail], passes=1)[1] < w // PAGE
    assert page_faults([head, conv, tail])[1] < w // PAGE


def test_a_scratch_buffer_above_the_mmap_ceiling_is_left_to_the_heap_freezing_leaves() -> None:
    # a 40 MiB copy would be mapped afresh every call from an empty heap; the frozen graph's
    # build leaves free space in the heap that serves it in most processes, so the simulation
    # leaves it out
    w = 40 * MIB
    conv = _prepacked_conv(w)
    head = _kernel(((WEIGHTS, 4096),), ((0, MIB),))
    tail = _kernel(((1, MIB),), ((2, 4096),))
    assert w in [a.size_bytes for a in allocations([head, conv, tail])]
    assert w not in [a.size_bytes for a in allocations([head, conv, tail], 32 * MIB)]
    without = page_faults([head, replace(conv, bytes_scratch=0), tail])
    assert list(page_faults([head, conv, tail])) == list(without)
    assert list(mapped_page_faults([head, conv, tail])) == [0.0, 0.0, 0.0]



def test_an_inductor_convolutions_weight_copy_above_the_ceiling_is_mapped_every_call() -> None:
    # oneDNN's copy of an inductor convolution's channels-last weights comes with no frozen
    # heap to serve it: above glibc's mmap ceiling it is mapped afresh, all its pages faulted
    # on every call, in the full simulation and in what predictions count without it
    w = 40 * MIB
    conv = replace(_prepacked_conv(w), variant="mkldnn_nhwc", members=("extern_kernels.conv",))
    head = _kernel(((WEIGHTS, 4096),), ((0, MIB),))
    tail = _kernel(((1, MIB),), ((2, 4096),))
    assert w in [a.size_bytes for a in allocations([head, conv, tail], 32 * MIB)]
    assert mapped_page_faults([head, conv, tail])[1] == w // PAGE
    without = page_faults([head, replace(conv, bytes_scratch=0), tail])
    assert page_faults([head, conv, tail])[1] - without[1] == pytest.approx(w / PAGE, abs=1)

def test_mapped_faults_count_only_chunks_above_the_mmap_ceiling() -> None:
    # a 64 MiB buffer is mapped afresh each call (all its pages fault), a 16 MiB one may come
    # from the heap: only the first counts; the full simulation faults both in the first pass
    ks = [_kernel(((WEIGHTS, 16 * MIB),), ((1, 16 * MIB),)),
          _kernel(((1, 16 * MIB),), ((2, 64 * MIB),)),
          _kernel(((2, 64 * MIB),), ((3, 100),))]
    got = mapped_page_faults(ks)
    assert got.tolist() == [0.0, 64 * MIB / PAGE, 0.0]
    assert page_faults(ks)[1] == pytest.approx(64 * MIB / PAGE, abs=1)  # same, simulated


def test_inductor_counts_its_large_buffers_in_a_plain_process(
        profile_factory: Callable[..., HardwareProfile]) -> None:
    """A plain process: inductor's 64 MiB intermediate is paid for at the host's price per page
    (glibc maps it on every call)."""
    import shutil

    import torch
    from torch import nn

    import ftmodel
    from ftmodel.hardware.profile import FrameworkHost
    from tests.conftest import TINY_PER_CALL_S, TINY_PER_EVENT_S
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("inductor's CPU target needs a C++ compiler")
    host = FrameworkHost(per_event_s=dict(TINY_PER_EVENT_S), per_call_s=TINY_PER_CALL_S)
    prof = profile_factory(frameworks={"eager": host, "inductor": host})
    torch.manual_seed(0)
    big = nn.Sequential(nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 8)).eval()
    batch = 4096  # the ReLU's output: 4096 x 4096 fp32 = 64 MiB

    def inputs(b: int) -> torch.Tensor:
        return torch.randn(b, 64)
    p = ftmodel.predict_latency(big, "inductor", prof, batch, inputs=inputs, heap="plain")
    assert p.heap == "plain" and p.page_faults >= 64 * MIB / PAGE
    assert any("32 MiB" in w for w in p.warnings)
    kept = ftmodel.predict_latency(big, "inductor", prof, batch, inputs=inputs, heap="kept")
    assert kept.page_faults == 0 and kept.latency_s < p.latency_s


def _three_alive(size: int) -> list[Kernel]:
    """Three buffers of ``size`` written in turn, all read by a last kernel, then freed."""
    ks = [_kernel(((WEIGHTS, size),), ((i, size),)) for i in range(3)]
    ks.append(_kernel(tuple((i, size) for i in range(3)), ((100, 4096),)))
    return ks


def test_the_threshold_import_torch_leaves_keeps_a_small_pass_resident() -> None:
    ks = _three_alive(600 * 1024)
    # from glibc's initial 128 KiB the first pass maps the buffers and raises the trim threshold
    # to ~1.2 MiB only: every later pass grows the heap to 1.8 MiB and is trimmed back
    assert page_faults(ks).sum() >= 400
    # from the ~1 MiB threshold after `import torch` (trim threshold ~2 MiB) the heap is kept
    assert page_faults(ks, process_start(1_052_672)).sum() == 0


def test_process_start_is_glibc_initial_state_unless_measured_and_caps_at_the_ceiling() -> None:
    assert process_start(0) == GlibcMalloc() == process_start(64 * 1024)
    cfg = process_start(1_052_672)
    assert (cfg.mmap_threshold_bytes, cfg.trim_threshold_bytes) == (1_052_672, 2_105_344)
    big = process_start(1 << 30)
    assert big.mmap_threshold_bytes == big.mmap_threshold_max_bytes == 32 * MIB
