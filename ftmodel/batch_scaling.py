"""A kernel's work at another batch size, from the same kernel at one or two batch sizes.

Used by the crossover search (:meth:`ftmodel.api.Predictor.crossover`), which prices a model over
continuous batch without lowering it again at each batch.
"""

from __future__ import annotations

from dataclasses import replace

from ftmodel.program import Kernel

__all__ = ["kernel_at_batch", "kernel_between_batches"]


def kernel_between_batches(k1: Kernel, k2: Kernel, b: float, b1: float = 2.0) -> Kernel:
    """The kernel at continuous batch ``b`` from the same kernel at batch ``b1`` (``k1``) and
    ``b1 + 1`` (``k2``): its work affine through the two."""
    def lin(a: int, c: int) -> int:
        return int(max(0.0, a + (c - a) * (b - b1)))

    def operands(o1: tuple[tuple[int, int], ...], o2: tuple[tuple[int, int], ...]
                 ) -> tuple[tuple[int, int], ...]:
        if len(o1) != len(o2):
            return o1
        return tuple((sid, lin(n1, n2)) for (sid, n1), (_, n2) in zip(o1, o2))

    return replace(k1, macs=lin(k1.macs, k2.macs), bytes_read=lin(k1.bytes_read, k2.bytes_read),
                   bytes_written=lin(k1.bytes_written, k2.bytes_written),
                   bytes_weights=lin(k1.bytes_weights, k2.bytes_weights),
                   weight_reads=max(1, lin(k1.weight_reads, k2.weight_reads)),
                   reads=operands(k1.reads, k2.reads), writes=operands(k1.writes, k2.writes),
                   planes=lin(k1.planes, k2.planes),
                   bytes_window_reads=lin(k1.bytes_window_reads, k2.bytes_window_reads),
                   bytes_transposed=lin(k1.bytes_transposed, k2.bytes_transposed))


def kernel_at_batch(k: Kernel, b0: int, b: int) -> Kernel:
    """Kernel ``k`` of a program at batch ``b0``, at batch ``b``: MACs, bytes written and bytes
    read other than weights in proportion to batch, weights as they are (read once per image
    where the kernel does so, ``Kernel.weights_per_image``); of its transposed bytes, the
    weights' as they are, the rest in proportion."""
    r = b / b0

    def per_batch(ops: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        return tuple((sid, int(n * r)) for sid, n in ops)

    act = max(k.bytes_read - k.bytes_weights, 0)
    reads = k.reads if k.bytes_weights else per_batch(k.reads)
    weight_reads = max(1, round(k.weight_reads * r)) if k.weights_per_image else k.weight_reads
    return replace(k, macs=int(k.macs * r), bytes_read=int(k.bytes_weights + act * r),
                   bytes_written=int(k.bytes_written * r), reads=reads,
                   writes=per_batch(k.writes), weight_reads=weight_reads,
                   planes=int(k.planes * r),
                   bytes_window_reads=int(k.bytes_window_reads * r),
                   bytes_transposed=int(min(k.bytes_transposed, k.bytes_weights)
                                        + max(k.bytes_transposed - k.bytes_weights, 0) * r))
