"""Which of ONNX Runtime's CPU code paths runs a ``Transpose`` node, from its permutation and
input shape, as ``onnxruntime/core/providers/cpu/tensor/transpose.cc`` and
``onnxruntime/core/framework/transpose_helper.cc`` choose it (``Transpose::Compute``):

1. the axes longer than 1 keep their order (``IsTransposeReshape``): one ``memcpy`` — priced as a
   plain copy (no variant);
2. a single axis moves (``IsTransposeMovingSingleAxis``) and what moves with it is one element
   (the axes inside it have size 1): one MLAS 2-D transpose per outer index
   (``MlasTranspose``), variant :data:`MLAS`;
3. a single axis moves with a block of more than one element: a strided copy of those blocks
   (outwards) or a ``memcpy`` per block (inwards), variant :data:`BLOCKS`;
4. otherwise, when the innermost axes keep their place, a ``memcpy`` of each contiguous block
   (``DoTransposeImpl``), variant :data:`BLOCKS`; when even the innermost axis moves, a walk
   element by element (``DoTransposeEltWise``), variant :data:`ELEMENTWISE`.

Timed alone on a Zen 4 EPYC (2 threads, single-node sessions of the shapes the corpus's
transformers and hybrids transpose), element by element ran at 1.4-1.8 GB/s, MLAS at 4-25 GB/s
and blocks at 16-54 GB/s (benchmarks/results/cpu-epyc/README.md, "ONNX Runtime's transposes by
permutation"; benchmarks/ort_transposes.py). Blocks of 2-16 floats ran at 9-34 GB/s alone,
inside the long blocks' range, so block length is not a variant; between two nodes of a model
they were priced at 0.32-0.57x (ort-transposes.md), the first thing to look at if it matters.

On the MLAS path ONNX Runtime calls ``MlasTranspose`` once per index of the axes outside the
moved one (``TransposeSingleAxisOutwards`` / ``Inwards``: ``num_loops``), and each call hands its
rows to the thread pool: timed alone on the Zen 4 EPYC (2 threads), each call cost 0.5-1.2 µs
beyond the copy of its bytes (512 transposes of 16x16 floats: 400 µs, one 2-D transpose of the
same bytes 68 µs). :func:`mlas_calls` counts them (``Kernel.planes``), priced by the MLAS
curve's per-call companion where the profile has one (``copy:transpose_mlas:per_plane``,
:mod:`ftmodel.calibration.ort_loops`).

Not modelled: string tensors (element-wise on every path).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

__all__ = ["BLOCKS", "ELEMENTWISE", "MLAS", "mlas_calls", "moved_axis", "transpose_variant"]

MLAS = "transpose_mlas"
BLOCKS = "transpose_blocks"
ELEMENTWISE = "transpose_elementwise"


def _keeps_order(perm: Sequence[int], dims: Sequence[int]) -> bool:
    """``IsTransposeReshape``: the axes longer than 1 keep their order."""
    last = 0
    for p in perm:
        if dims[p] == 1:
            continue
        if p < last:
            return False
        last = p
    return True


def moved_axis(perm: Sequence[int]) -> tuple[int, int] | None:
    """(from, to) when the permutation moves a single axis (``IsTransposeMovingSingleAxis``),
    else None: axis ``from`` of the input becomes axis ``to`` of the output, the others keep
    their order."""
    rank = len(perm)
    for i, axis in enumerate(perm):
        if axis == i:
            continue
        # outwards: after slot i the values run i, i+1, ... skipping ``axis``
        expected = i
        outwards = True
        for cur in range(i + 1, rank):
            if perm[cur] != expected:
                outwards = False
                break
            expected += 2 if cur == axis else 1
        if outwards:
            return axis, i
        # inwards: axis i reappears at one later slot, the others run i+1, i+2, ...
        expected, moved_to = i + 1, -1
        for cur in range(i, rank):
            if perm[cur] != expected:
                if perm[cur] != i:
                    return None
                moved_to = cur
            else:
                expected += 1
        return (i, moved_to) if moved_to >= 0 else None
    return None


def transpose_variant(perm: Sequence[int], dims: Sequence[int]) -> str:
    """The variant of a ``Transpose`` of a tensor of shape ``dims`` by ``perm`` (see the module
    docstring); "" for a plain copy, or when the permutation does not fit the shape."""
    rank = len(dims)
    if sorted(perm) != list(range(rank)) or rank == 0 or any(d <= 0 for d in dims):
        return ""
    if _keeps_order(perm, dims):
        return ""
    moved = moved_axis(perm)
    if moved is not None:
        src, dst = moved
        # what moves with the axis: the axes inside it (outwards: inside its source slot;
        # inwards: inside its destination slot)
        block = prod(dims[src + 1:]) if src > dst else prod(dims[dst + 1:])
        return MLAS if block == 1 else BLOCKS
    suffix = 1  # the innermost axes that keep their place
    for i in range(rank - 1, -1, -1):
        if perm[i] != i:
            break
        suffix *= dims[i]
    return ELEMENTWISE if suffix == 1 else BLOCKS


def mlas_calls(perm: Sequence[int], dims: Sequence[int]) -> int:
    """How many 2-D ``MlasTranspose`` calls a ``Transpose`` on the MLAS path (:data:`MLAS`)
    makes: one per index of the axes outside the moved axis's outer slot (its destination
    when it moves outwards, its source when it moves inwards); 0 on another path."""
    if transpose_variant(perm, dims) != MLAS:
        return 0
    moved = moved_axis(perm)
    assert moved is not None  # the MLAS path moves a single axis
    src, dst = moved
    return prod(int(d) for d in dims[:min(src, dst)])
