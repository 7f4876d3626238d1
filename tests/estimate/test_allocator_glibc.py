"""The heap simulation against glibc itself: the same posix_memalign/free stream replayed in a
fresh interpreter (glibc's initial thresholds, no torch imported) and simulated."""

from __future__ import annotations

import pytest

from ftmodel.calibration.allocator import replay_in_glibc
from ftmodel.estimate.allocator import GlibcMalloc, stream_page_faults
from ftmodel.heap import is_glibc

pytestmark = pytest.mark.skipif(not is_glibc(), reason="glibc's malloc is what is simulated")

MIB = 1 << 20


def test_a_chain_of_equal_aligned_buffers_faults_as_glibc_does() -> None:
    # buffer i is written, then buffer i-1 freed: glibc cannot reuse a freed buffer's chunk for
    # the next (posix_memalign asks for 96 bytes more), grows and trims the heap every pass;
    # placed as plain mallocs (as predictions place them), two chunks are reused and a seventh
    # as many pages fault
    events: list[tuple[str, int, int]] = []
    for i in range(1, 21):
        events.append(("memalign", MIB, i))
        if i > 1:
            events.append(("free", 0, i - 1))
    events.append(("free", 0, 20))
    real = replay_in_glibc(events, passes=4)
    assert real is not None
    simulated = stream_page_faults(events, GlibcMalloc(memalign_padding=True),
                                   passes=4)[-1].faults
    assert real[-1] > 1000  # not a heap that settled
    assert simulated == pytest.approx(real[-1], rel=0.1)
    plain = stream_page_faults(events, GlibcMalloc(), passes=4)[-1].faults
    assert plain < real[-1] / 4
