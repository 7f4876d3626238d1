"""How many GPU kernels one of inductor's generated C++ kernels stands for.

Inductor's C++ backend puts several loop nests into one kernel function: nodes that depend on
each other (a row's mean, then the row normalised by it) and, unlike Triton, nodes that do not
(the layout conversions of every convolution weight of a ResNet, horizontally fused into the
first kernel). On a GPU, Triton fuses the dependent nests into one kernel and launches each
independent one as a kernel of its own. :func:`independent_nests` counts the kernel's top-level
loop nests (``for`` statements not inside another loop's body) and joins those that read what
an earlier one wrote, or write the same buffer (``out_ptr``/``in_out_ptr`` parameters); what is
left is the number of Triton kernels the same nodes become. Loops over local variables only
(a parallel reduction's per-thread accumulators) are not nests of their own.

Checked against inductor's own CUDA wrappers (torch 2.11, an H200, batch 1,
``benchmarks/results/gpu-h200/inductor-code-run1.tar.gz``): RegNetX-400MF 91 groups for 91
Triton kernels, ResNet-34 67 for 68, ConvNeXt-T 60 for 63, ViT-S 41 for 39. Not counted: what
the GPU lowers differently from the CPU (attention, split reductions; see
:mod:`ftmodel.frameworks.inductor_gpu`).
"""

from __future__ import annotations

import re

from ftmodel.frameworks.inductor_code import kernel_sources

__all__ = ["independent_nests", "loop_nests", "triton_kernels"]

_FOR = re.compile(r"\bfor\s*\(")
_PTR = re.compile(r"\b((?:in_out|out|in)_ptr\d+)\b")
_STORE = re.compile(r"store\(\s*((?:in_out|out)_ptr\d+)"  # vector store
                    r"|\b((?:in_out|out)_ptr\d+)\s*\[[^\]]*\]\s*=(?!=)"  # scalar store
                    r"|transpose_mxn<[^>]*>\([^,]*,[^,]*,\s*((?:in_out|out)_ptr\d+)")


def _skip_parens(text: str, i: int) -> int:
    """The index after the ``)`` that closes the ``(`` just before ``i``."""
    depth = 1
    while depth and i < len(text):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    return i


def loop_nests(source: str) -> list[str]:
    """The text of each top-level loop nest of a C++ kernel's body, in order."""
    start = source.find("kernel(")
    body = source[source.find("{", max(start, 0)):] if start >= 0 else ""
    nests: list[str] = []
    stack: list[bool] = []  # per open brace: is it a loop's body?
    pending, nest_start, i = False, -1, 0
    while i < len(body):
        m = _FOR.match(body, i)
        if m is not None:
            if not any(stack):
                nest_start = i
            pending = True
            i = _skip_parens(body, m.end())
            continue
        c = body[i]
        if c == "{":
            stack.append(pending)
            pending = False
        elif c == "}" and stack:
            if stack.pop() and not any(stack) and nest_start >= 0:
                nests.append(body[nest_start:i + 1])
                nest_start = -1
        elif c == ";":
            pending = False
        i += 1
    return nests


def independent_nests(source: str) -> int:
    """Groups of top-level loop nests that neither read nor write one another's outputs
    (at least 1)."""
    # loops over locals only (a parallel reduction's per-thread accumulators, set up and
    # combined) belong to the nest that uses them
    nests = [t for t in loop_nests(source) if _PTR.search(t)]
    if len(nests) <= 1:
        return 1
    writes = [{a or b or c for a, b, c in _STORE.findall(t)} for t in nests]
    reads = [set(_PTR.findall(t)) for t in nests]
    parent = list(range(len(nests)))

    def root(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for j in range(len(nests)):
        for i in range(j):
            # j reads what i wrote (one Triton kernel), or both write the same buffer (a
            # vectorised loop and its scalar tail, one node)
            if writes[i] & (reads[j] | writes[j]):
                parent[root(j)] = root(i)
    return len({root(x) for x in range(len(nests))})


def triton_kernels(codes: list[str]) -> dict[str, int]:
    """Generated C++ kernel name -> the Triton kernels it stands for
    (:func:`independent_nests`), over inductor's wrapper modules ``codes``."""
    return {name: independent_nests(src) for code in codes
            for name, (kind, src) in kernel_sources(code).items() if kind == "cpp"}
