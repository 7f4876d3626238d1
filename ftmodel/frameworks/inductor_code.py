"""Read the kernel calls out of inductor's generated wrapper code (a Python module, parsed by ast).

The wrapper's ``call(args)`` issues, in order:

* generated kernels: ``cpp_fused_relu_0(buf1)`` (CPU, C++), ``triton_poi_fused_relu_0.run(...)``
  (GPU, Triton), ``kernel_cpp_0(...)`` (older naming); each is bound at module level by
  ``name = async_compile.cpp_pybinding(...)`` / ``async_compile.triton(...)``, whose source
  gives the parameter names (``in_ptr*`` read, ``out_ptr*`` written, ``in_out_ptr*`` both);
* extern kernels: ``extern_kernels.addmm/mm/bmm/baddbmm/convolution(...)`` (library GEMMs and
  convolutions);
* fallbacks: ``torch.ops.aten.<op>.<overload>(...)`` / ``aten.<op>...(...)``, and
  ``torch.ops.mkldnn|mkl|quantized...`` when freezing prepacks weights.

Tensor shapes come from the same code: ``empty_strided_*`` allocations, ``reinterpret_tensor``
views, ``assert_size_stride[_grouped]`` / ``assert_tensor_metadata`` checks, buffer reuse
(``buf1 = buf0``) and the graph inputs' ``rand_strided`` calls in ``get_args()``.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KernelCall", "distinct_tensors", "graph_input_count", "kernel_sources", "name_tokens",
           "parse_wrapper"]

Shape = tuple[int, ...]

_DTYPE_SIZE = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8,
               "int64": 8, "long": 8, "int32": 4, "int": 4, "int8": 1, "uint8": 1, "bool": 1}
_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(cpp_pybinding|cpp|triton)\(", re.MULTILINE)
_CPP_PARAMS = re.compile(r'extern\s+"C"\s+void\s+kernel\(([^)]*)\)')
_TRITON_PARAMS = re.compile(r"def\s+(\w+)\(([^)]*)\)")


@dataclass
class _TensorInfo:
    shape: Shape
    dtype: str = "float32"
    strides: Shape | None = None  # as the wrapper states them, where it does

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _DTYPE_SIZE.get(self.dtype, 4)


@dataclass
class KernelCall:
    """One kernel call of the wrapper, with the tensors it touches."""

    kind: str  # "generated" | "extern" | "fallback"
    name: str  # kernel name, "extern_kernels.addmm", "aten.index.Tensor", ...
    reads: list[tuple[str, _TensorInfo]] = field(default_factory=list)
    writes: list[tuple[str, _TensorInfo]] = field(default_factory=list)
    args: list[Any] = field(default_factory=list)  # extern/fallback: _TensorInfo or literals
    kwargs: dict[str, Any] = field(default_factory=dict)
    result: _TensorInfo | None = None  # extern/fallback output, when the code states it
    comment: str = ""  # the "# Topologically Sorted Source Nodes ..." line above, if any
    graph_index: int = 0
    # tensor name in reads/writes -> the buffer whose memory it is (``buf3 = buf0  # reuse``
    # and ``reinterpret_tensor(buf0, ...)`` share buf0's storage); names absent map to themselves
    storages: dict[str, str] = field(default_factory=dict)

    def storage(self, name: str) -> str:
        """The buffer (graph input ``arg*``/``primals*`` or allocation ``buf*``) holding ``name``."""
        return self.storages.get(name, name)

    @property
    def bytes_read(self) -> int:
        return sum(t.nbytes for _, t in distinct_tensors(self.reads))

    @property
    def bytes_written(self) -> int:
        return sum(t.nbytes for _, t in distinct_tensors(self.writes))

    @property
    def bytes_transposed(self) -> int:
        """Bytes of the tensors this call reads in one memory order and writes, the same shape,
        in another (each counted once, as read; the copy writes as much): a generated loop's
        layout conversion, such as the channels-last copy of a convolution's weights inductor
        makes on every call. 0 where the wrapper states no strides."""
        written = dict(distinct_tensors(self.writes))
        writes = [t for t in written.values() if t.strides is not None]
        reads = [t for name, t in distinct_tensors(self.reads)
                 if t.strides is not None and name not in written]
        moved = 0
        for w in writes:
            r = next((r for r in reads if r.shape == w.shape and _order(r) != _order(w)), None)
            if r is not None:
                reads.remove(r)
                moved += r.nbytes
        return moved


def distinct_tensors(items: list[tuple[str, _TensorInfo]]) -> list[tuple[str, _TensorInfo]]:
    seen: dict[str, _TensorInfo] = {}
    for name, t in items:
        seen.setdefault(name, t)
    return list(seen.items())


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def _order(t: _TensorInfo) -> tuple[int, ...]:
    """The tensor's dimensions from the outermost in memory to the innermost (size-1 ones left
    out: their stride says nothing)."""
    strides = t.strides or ()
    dims = [d for d in range(len(t.shape)) if t.shape[d] != 1 and d < len(strides)]
    return tuple(sorted(dims, key=lambda d: (-strides[d], d)))


def _strides(args: list[ast.expr], i: int) -> Shape | None:
    """The stride tuple a call states as its ``i``-th positional argument, if a literal."""
    value = _literal(args[i]) if len(args) > i else None
    return tuple(value) if isinstance(value, tuple) and all(
        isinstance(v, int) for v in value) else None


def _dtype_of(node: ast.AST | None) -> str:
    if isinstance(node, ast.Attribute):  # torch.float32
        return node.attr
    return "float32"


def kernel_sources(code: str) -> dict[str, tuple[str, str]]:
    """kernel name -> (kind: "cpp" | "triton", source) for every generated kernel defined in
    ``code`` (the text from its ``async_compile`` call to the next definition)."""
    defs = list(_KERNEL_DEF.finditer(code))
    return {m.group(1): ("triton" if m.group(2) == "triton" else "cpp",
                         code[m.end(): defs[i + 1].start() if i + 1 < len(defs) else len(code)])
            for i, m in enumerate(defs)}


def _kernel_params(code: str) -> dict[str, tuple[str, list[str]]]:
    """kernel name -> (kind, parameter names) for every generated kernel defined in ``code``."""
    out: dict[str, tuple[str, list[str]]] = {}
    for name, (kind, body) in kernel_sources(code).items():
        params: list[str] = []
        pm = _CPP_PARAMS.search(body) if kind == "cpp" else _TRITON_PARAMS.search(body)
        if pm is not None:
            text = pm.group(1) if kind == "cpp" else pm.group(2)
            for p in text.split(","):
                p = p.strip()
                if p:
                    params.append(re.split(r"[\s*:]+", p.replace("*", " ").strip())[-1]
                                  if kind == "cpp" else p.split(":")[0].strip())
        out[name] = (kind, params)
    return out


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


class _Reader:
    def __init__(self, code: str, graph_index: int) -> None:
        self.code = code
        self.lines = code.splitlines()
        self.graph_index = graph_index
        self.tree = ast.parse(code)
        self.kernels = _kernel_params(code)
        self.tensors: dict[str, _TensorInfo] = {}
        self.roots: dict[str, str] = {}  # name -> the buffer whose storage it shares
        self._read_graph_inputs()

    def root(self, name: str) -> str:
        return self.roots.get(name, name)

    def _read_graph_inputs(self) -> None:
        for fn in ast.walk(self.tree):
            if isinstance(fn, ast.FunctionDef) and fn.name == "get_args":
                for st in fn.body:
                    if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call) and \
                            _dotted(st.value.func) == "rand_strided":
                        shape = _literal(st.value.args[0])
                        dtype = next((_dtype_of(k.value) for k in st.value.keywords
                                      if k.arg == "dtype"), "float32")
                        for tgt in st.targets:
                            if isinstance(tgt, ast.Name) and isinstance(shape, tuple):
                                self.tensors[tgt.id] = _TensorInfo(
                                    tuple(shape), dtype, _strides(st.value.args, 1))

    def call_body(self) -> list[ast.stmt]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.FunctionDef) and node.name == "call":
                return list(node.body)
        return []

    def tensor(self, node: ast.AST) -> _TensorInfo | None:
        if isinstance(node, ast.Name):
            return self.tensors.get(node.id)
        if isinstance(node, ast.Call) and _dotted(node.func) == "reinterpret_tensor":
            base = self.tensor(node.args[0])
            shape = _literal(node.args[1])
            if isinstance(shape, tuple):
                return _TensorInfo(tuple(shape), base.dtype if base else "float32",
                                   _strides(node.args, 2))
        return None

    def _base_name(self, node: ast.AST) -> str:
        if isinstance(node, ast.Call) and _dotted(node.func) == "reinterpret_tensor":
            return self._base_name(node.args[0])
        return node.id if isinstance(node, ast.Name) else ast.unparse(node)

    def _comment_above(self, lineno: int) -> str:
        i = lineno - 2
        while i >= 0 and self.lines[i].strip().startswith("#"):
            if "Source Nodes" in self.lines[i] or "Original ATen" in self.lines[i]:
                return self.lines[i].strip()
            i -= 1
        return ""

    def statements(self, body: list[ast.stmt]) -> Iterator[ast.stmt]:
        for st in body:
            if isinstance(st, (ast.With, ast.If, ast.For)):
                yield from self.statements(st.body)
            else:
                yield st

    def track(self, st: ast.stmt) -> None:
        """Update known tensor shapes from allocations, views, reuse and size asserts."""
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and \
                isinstance(st.targets[0], ast.Name):
            name, value = st.targets[0].id, st.value
            if isinstance(value, ast.Name) and value.id in self.tensors:
                self.tensors[name] = self.tensors[value.id]
                self.roots[name] = self.root(value.id)
            elif isinstance(value, ast.Call):
                fn = _dotted(value.func)
                if fn.startswith("empty_strided") and value.args:
                    shape = _literal(value.args[0])
                    if isinstance(shape, tuple):
                        self.tensors[name] = _TensorInfo(
                            tuple(shape), _dtype_of(value.args[2] if len(value.args) > 2
                                                    else None), _strides(value.args, 1))
                elif fn == "reinterpret_tensor":
                    t = self.tensor(value)
                    if t is not None:
                        self.tensors[name] = t
                        self.roots[name] = self.root(self._base_name(value))
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            fn, args = _dotted(st.value.func), st.value.args
            if fn in ("assert_size_stride", "assert_tensor_metadata") and len(args) >= 2 and \
                    isinstance(args[0], ast.Name):
                shape = _literal(args[1])
                dtype = _dtype_of(args[3]) if fn == "assert_tensor_metadata" and \
                    len(args) > 3 else self.tensors.get(args[0].id, _TensorInfo(())).dtype
                if isinstance(shape, tuple):
                    self.tensors[args[0].id] = _TensorInfo(tuple(shape), dtype,
                                                           _strides(args, 2))
            elif fn == "assert_size_stride_grouped" and len(args) >= 2 and \
                    isinstance(args[0], ast.Tuple):
                shapes = _literal(args[1])
                strides = _literal(args[2]) if len(args) > 2 else None
                if isinstance(shapes, tuple):
                    for i, (n, s) in enumerate(zip(args[0].elts, shapes)):
                        if isinstance(n, ast.Name) and isinstance(s, tuple):
                            old = self.tensors.get(n.id)
                            st_i = (strides[i] if isinstance(strides, tuple) and i < len(strides)
                                    and isinstance(strides[i], tuple) else None)
                            self.tensors[n.id] = _TensorInfo(
                                tuple(s), old.dtype if old else "float32", st_i)

    def kernel_call(self, st: ast.stmt) -> KernelCall | None:
        value = st.value if isinstance(st, (ast.Expr, ast.Assign)) else None
        if not isinstance(value, ast.Call):
            return None
        fn = _dotted(value.func)
        target = st.targets[0].id if isinstance(st, ast.Assign) and isinstance(
            st.targets[0], ast.Name) else None
        comment = self._comment_above(st.lineno)
        head, _, tail = fn.rpartition(".")
        if fn in self.kernels or (tail == "run" and head in self.kernels):
            name = fn if fn in self.kernels else head
            return self._generated(name, value, comment)
        if fn.startswith(("extern_kernels.", "torch.ops.", "aten.")):
            kind = "extern" if fn.startswith("extern_kernels.") else "fallback"
            call = KernelCall(kind, fn.removeprefix("torch.ops."), comment=comment,
                              graph_index=self.graph_index)
            for a in value.args:
                t = self.tensor(a)
                call.args.append(t if t is not None else _literal(a))
                if t is not None:
                    call.reads.append((self._base_name(a), t))
                    call.storages[self._base_name(a)] = self.root(self._base_name(a))
            for k in value.keywords:
                t = self.tensor(k.value)
                if k.arg == "out" and t is not None:
                    call.writes.append((self._base_name(k.value), t))
                    call.storages[self._base_name(k.value)] = self.root(
                        self._base_name(k.value))
                    call.result = t
                else:
                    call.kwargs[str(k.arg)] = t if t is not None else _literal(k.value)
            call.comment = comment
            call.kwargs["_target"] = target
            return call
        return None

    def _generated(self, name: str, value: ast.Call, comment: str) -> KernelCall:
        _, params = self.kernels[name]
        call = KernelCall("generated", name, comment=comment, graph_index=self.graph_index)
        for i, a in enumerate(value.args):
            t = self.tensor(a)
            if t is None:
                continue
            pname = params[i] if i < len(params) else "in_ptr"
            base = self._base_name(a)
            call.storages[base] = self.root(base)
            if pname.startswith("in_out_ptr"):
                call.reads.append((base, t))
                call.writes.append((base, t))
            elif pname.startswith("out_ptr"):
                call.writes.append((base, t))
            else:
                call.reads.append((base, t))
        return call


def graph_input_count(code: str) -> int:
    """The tensors the wrapper's graph takes (its ``get_args()``' ``rand_strided`` calls): the
    parameters and buffers dynamo lifts into graph inputs and the model's own tensor inputs."""
    return len(_Reader(code, 0).tensors)


def parse_wrapper(code: str, graph_index: int = 0) -> list[KernelCall]:
    """The kernel calls the wrapper's ``call`` issues, in order, with tensor shapes."""
    reader = _Reader(code, graph_index)
    calls: list[KernelCall] = []
    for st in reader.statements(reader.call_body()):
        call = reader.kernel_call(st)
        if call is not None:
            target = call.kwargs.pop("_target", None)
            calls.append(call)
            reader.track(st)
            if target is not None and call.result is None:
                call.result = reader.tensors.get(target)
                if call.result is not None:
                    call.writes.append((target, call.result))
        else:
            reader.track(st)
            # an assert right after an extern call states its output shape
            if calls and calls[-1].kind != "generated" and calls[-1].result is None and \
                    isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and \
                    _dotted(st.value.func) in ("assert_size_stride", "assert_tensor_metadata"):
                first = st.value.args[0]
                if isinstance(first, ast.Name) and first.id in reader.tensors:
                    calls[-1].result = reader.tensors[first.id]
                    calls[-1].writes.append((first.id, calls[-1].result))
    return calls


def name_tokens(kernel_name: str, vocabulary: frozenset[str]) -> list[str]:
    """Aten op names in a descriptive kernel name, e.g. ``cpp_fused_add_relu_3`` -> [add, relu].

    Inductor names generated kernels ``<prefix>_fused_<op>_<op>..._<n>`` from the original aten
    ops; ops are matched greedily (longest first) against ``vocabulary``.
    """
    m = re.search(r"fused_(.*?)(?:_\d+)?$", kernel_name)
    if m is None:
        return []
    words = m.group(1).split("_")  # a leading "" keeps "_native_batch_norm..." intact
    out: list[str] = []
    i = 0
    while i < len(words):
        for j in range(len(words), i, -1):
            cand = "_".join(words[i:j])
            if cand in vocabulary:
                out.append(cand)
                i = j
                break
        else:
            i += 1
    return out
