"""Inductor's captured wrapper code to a Program: kernels, work, operands and host events.

Used by :mod:`ftmodel.frameworks.inductor`, which compiles the model and captures the code.

Counting semantics
------------------
* **Kernels**: every call that ``call(args)`` issues in each wrapper (parsed with ``ast`` by
  :mod:`ftmodel.frameworks.inductor_code`): generated kernels (``cpp_fused_*`` on the CPU,
  ``triton_*.run`` on the GPU), extern kernels (``extern_kernels.mm/addmm/bmm/convolution``) and
  aten fallbacks (``torch.ops.aten.*``). A generated kernel is one kernel whatever it fuses,
  including the layout-conversion loops inductor adds before library convolutions.
* **Work**: bytes from the buffers each call touches, sized from the wrapper itself
  (``empty_strided``, ``reinterpret_tensor``, size asserts, ``get_args``): ``in_ptr``/``out_ptr``/
  ``in_out_ptr`` parameters of generated kernels; arguments and ``out=`` of externs. MACs of
  externs and fallbacks from ftmodel's formulas on meta tensors of those shapes. Generated
  kernels carry 0 MACs, except Triton templates (``triton_tem_*``: GEMMs/convolutions), which
  take the MACs of the eager Trace's MAC op they replace (in order) — an approximation.
* **Operands**: each kernel's reads and writes as (storage id, bytes), one id per buffer of the
  wrapper (``reinterpret_tensor`` views and ``# reuse`` aliases share their buffer's), so the
  cache model (:mod:`ftmodel.estimate.cache`) sees which operands were just written and which
  (parameters, the graph's inputs) come round once a pass. Kernels run eagerly between graphs
  keep the eager trace's ids, moved past the wrappers' so the two never collide.
* **Variant** of an extern convolution: the backend eager selects for the same shapes
  (``mkldnn``, ``slow2d``, ...; :func:`ftmodel.tracing.formulas.variant_of`), so it is priced on
  the same curve as eager's call; for a 2-d one, ``_nhwc`` added
  (:func:`ftmodel.tracing.variants.channels_last_conv_variant`): on a CPU, inductor lays out
  every graph with a convolution channels-last (``GraphLowering.decide_layout_opt``) and hands
  the convolution to aten on channels-last tensors, priced on the profile's ``_nhwc`` curves
  where it has them. 1-d convolutions stay contiguous and keep eager's variant and curves.
  A oneDNN one copies its channels-last weights into its blocked layout on every call: their
  bytes are its ``Kernel.bytes_scratch``
  (:func:`ftmodel.tracing.variants.channels_last_reorders_weights`).
* **Transposed bytes** of a generated kernel (``Kernel.bytes_transposed``): the tensors it
  reads in one memory order and writes, the same shape, in another, from the strides the
  wrapper states (``empty_strided``, ``assert_size_stride``, ``reinterpret_tensor``). Without
  freezing, inductor copies every convolution's weights (k x k > 1) into channels-last on every
  call, fused into the kernel before the convolution, and a graph's NCHW input likewise; such a
  copy runs 2-4x slower than a contiguous loop over the same bytes. A copy kernel that does only
  that has the variant ``transpose``.
* **Op class** of a generated kernel from the aten ops in its descriptive name
  (``cpp_fused__native_batch_norm_legit_no_training_relu_1``): the most specific non-MAC class
  among them (softmax > norm > pool > reduction > embedding > elementwise > copy); a kernel
  named only after MAC/view ops is a layout prologue: ``copy``.
* **Module paths**: MAC kernels pair with the eager Trace's MAC ops in order when the counts
  agree; other kernels take the module of the next eager op (from the last match on) whose name
  appears in the kernel's name, else the previous kernel's module. Inductor reorders and fuses
  across modules, so this attribution is approximate.
* **Graph breaks**: one wrapper per compiled graph; ``graph_break`` host events count the breaks
  (``torch._dynamo.utils.graph_break_reasons``). Recurrent layers (``nn.RNN``, ``nn.GRU``,
  ``nn.LSTM``) are a graph break dynamo always makes (unless ``torch._dynamo.config.allow_rnn``):
  they run eagerly, so their ops are counted as eager counts them (the eager Trace's records
  under those modules, after the compiled graphs' kernels). When dynamo compiles no graph at
  all (it skips a forward it cannot break gracefully, as at a recurrent layer called inside an
  expression), every op runs eagerly and is counted so. Other ops that run eagerly between
  graphs are not counted (a warning says so); eagerly run kernels take inductor's per-kernel
  host cost.
* Host events: ``kernel:<class>`` per kernel call; ``guard:tensor`` (each compiled graph's
  tensor inputs: the parameters and buffers it reads, and the model's inputs) and
  ``guard:module`` (the model's modules), which dynamo's guards check on every call, priced by
  :mod:`ftmodel.estimate.guards`; the rest of the per-call cost (the wrapper) is the profile's
  ``per_call_s``.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from ftmodel.frameworks._common import make_kernel
from ftmodel.program import GUARD_MODULE, GUARD_TENSOR, Kernel, Program, kernel_events
from ftmodel.frameworks.eager import kernel_of
from ftmodel.frameworks.inductor_code import (KernelCall, distinct_tensors, graph_input_count,
                                              name_tokens, parse_wrapper)
from ftmodel.tracing.formulas import MAC_CLASSES, classify, macs_of, variant_of
from ftmodel.tracing.records import OpRecord, Trace
from ftmodel.tracing.variants import (TRANSPOSE, channels_last_conv_variant,
                                      channels_last_reorders_weights)

__all__ = ["NAME", "lower_code", "recurrent_paths"]

NAME = "inductor"

_PRIORITY = ("softmax", "norm", "pool", "reduction", "embedding", "elementwise", "copy")
_MAC_TOKENS = {"mm": "gemm", "addmm": "gemm", "bmm": "bmm", "baddbmm": "bmm",
               "convolution": "conv", "_convolution": "conv"}
_VIEW_TOKENS = frozenset({"t", "view", "_unsafe_view", "reshape", "permute", "transpose",
                          "expand", "squeeze", "unsqueeze", "select", "slice", "as_strided",
                          "alias", "unbind", "split", "split_with_sizes"})


@functools.lru_cache(maxsize=1)
def _vocabulary() -> frozenset[str]:
    names = torch._C._dispatch_get_all_op_names()
    return frozenset(n.split("::", 1)[1].split(".")[0] for n in names if n.startswith("aten::"))


@functools.lru_cache(maxsize=1024)
def _token_class(token: str) -> str:
    packet = getattr(torch.ops.aten, token, None)
    if packet is None:
        return "other"
    overloads = packet.overloads()
    if not overloads:
        return "other"
    op = getattr(packet, "default" if "default" in overloads else overloads[0])
    try:
        return classify(op, ())
    except Exception:  # noqa: BLE001 - formulas that need args: treat as elementwise
        return "elementwise"


def _generated_class(call: KernelCall, tokens: list[str]) -> str:
    """The op class a generated kernel is priced as, from the aten ops its name lists (the
    first of :data:`_PRIORITY` among them; ``copy`` if none). An indexing op among them makes
    it an ``embedding``, priced on the gather curve, whose bytes count the table a gather
    reads from, unless the kernel writes at least what it reads: then it is an expansion
    (attention's grouped keys and values repeated for every head, with its mask indexed, in
    an LLM's decode step), a ``copy``."""
    if call.name.startswith("triton_tem_"):
        macs = [_MAC_TOKENS[t] for t in tokens if t in _MAC_TOKENS]
        return macs[0] if macs else "gemm"
    classes = {_token_class(t) for t in tokens
               if t not in _MAC_TOKENS and t not in _VIEW_TOKENS}
    classes -= {"view", "alloc", "other"} | set(MAC_CLASSES)
    for cls in _PRIORITY:
        if cls in classes:
            if cls == "embedding" and call.bytes_written >= call.bytes_read:
                return "copy"
            return cls
    return "copy"


def _meta(info: Any, device: str = "meta") -> Any:
    """An empty tensor of the shape and dtype ``info`` describes (other values as they are)."""
    if hasattr(info, "shape") and hasattr(info, "dtype"):
        return torch.empty(info.shape, dtype=getattr(torch, info.dtype, torch.float32),
                           device=device)
    return info


def _aten_op(call: KernelCall) -> Any:
    name = call.name
    if name.startswith("extern_kernels."):
        packet = getattr(torch.ops.aten, name.split(".", 1)[1], None)
        return getattr(packet, "default", None) if packet is not None else None
    parts = name.split(".")  # aten.index.Tensor
    if len(parts) == 3 and parts[0] == "aten":
        packet = getattr(torch.ops.aten, parts[1], None)
        return getattr(packet, parts[2], None) if packet is not None else None
    return None


def _extern_cost(call: KernelCall) -> tuple[str, int, int, str]:
    """(op class, MACs, bytes written, variant) of an extern/fallback call, from meta tensors;
    the variant is what eager's tracer gives the same call (e.g. the convolution backend,
    ``mkldnn`` or ``slow2d``, whose speeds differ several-fold)."""
    op = _aten_op(call)
    if op is None:
        low = call.name.lower()
        cls = "conv" if "conv" in low else ("gemm" if "linear" in low or "mm" in low
                                            else "other")
        return cls, 0, call.bytes_written, ""
    args = [_meta(a) for a in call.args]
    kwargs = {k: _meta(v) for k, v in call.kwargs.items()}
    try:
        out = op(*args, **kwargs)
    except Exception:  # noqa: BLE001 - no meta kernel: class only
        out = None
    cls = classify(op, args)
    macs = macs_of(op, args, out) if out is not None and cls in MAC_CLASSES else 0
    written = call.bytes_written
    if not written and isinstance(out, torch.Tensor):
        written = out.numel() * out.element_size()
    return cls, int(macs), written, _variant(op, call) if cls in MAC_CLASSES else ""


def _variant(op: Any, call: KernelCall) -> str:
    """Eager's variant for this call (:func:`variant_of`), on fake CPU tensors of its shapes:
    backend selection depends on the device, and meta tensors select none. A convolution's is
    that on channels-last tensors (:func:`channels_last_conv_variant`), as inductor runs it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        args = [_meta(a, "cpu") for a in call.args]
        kwargs = {k: _meta(v, "cpu") for k, v in call.kwargs.items()}
        try:
            positional = _positional(op, args, kwargs)
            if op is torch.ops.aten.convolution.default and len(positional) >= 9:
                return channels_last_conv_variant(positional)
            return variant_of(op, positional)
        except Exception:  # noqa: BLE001 - no variant rather than no prediction
            return ""


def _reordered_weights(call: KernelCall, variant: str) -> int:
    """Bytes of the weights an extern convolution of ``variant`` copies on every call
    (:func:`channels_last_reorders_weights`; its second argument), else 0."""
    if not channels_last_reorders_weights(variant) or len(call.args) < 2:
        return 0
    return int(getattr(call.args[1], "nbytes", 0))


def _positional(op: Any, args: list[Any], kwargs: dict[str, Any]) -> list[Any]:
    """``args`` followed by the keyword arguments in the op's schema order (externs pass
    ``stride=..., groups=...`` by keyword; eager's variant logic reads them by position)."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return args
    out = list(args)
    for a in schema.arguments[len(args):]:
        if a.name not in kwargs:
            break
        out.append(kwargs[a.name])
    return out


_CANONICAL = {"native_batch_norm_legit_no_training": "batch_norm",
              "native_batch_norm_legit": "batch_norm", "native_batch_norm": "batch_norm",
              "native_layer_norm": "layer_norm", "native_group_norm": "group_norm",
              "max_pool2d_with_indices": "max_pool2d", "log_softmax": "softmax",
              "safe_softmax": "softmax", "adaptive_avg_pool2d": "avg_pool2d",
              "scaled_dot_product_flash_attention_for_cpu": "attention"}


def _canonical(op: str) -> str:
    """Comparable op names: "_native_batch_norm_legit_no_training" ~ "native_batch_norm"."""
    base = op.strip("_")
    return _CANONICAL.get(base, base)


def _packet(r: OpRecord) -> str:
    parts = r.op.split(".")
    return _canonical(parts[1] if len(parts) >= 3 else parts[-1])


def _operands(call: KernelCall, ids: dict[tuple[int, str], int]
              ) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """(reads, writes) of a call as (storage id, bytes) pairs for the cache model: one id per
    buffer of the wrapper (views and ``# reuse`` aliases share their buffer's id); ``ids`` is
    filled as buffers appear. A graph's inputs are its own buffers: an output of one graph read
    by the next counts as a different storage (a cold-side approximation at graph breaks)."""
    def pairs(items: list[tuple[str, Any]]) -> tuple[tuple[int, int], ...]:
        return tuple((ids.setdefault((call.graph_index, call.storage(name)), len(ids)),
                      int(t.nbytes)) for name, t in distinct_tensors(items))
    return pairs(call.reads), pairs(call.writes)


def recurrent_paths(model: nn.Module) -> tuple[str, ...]:
    """Module paths of the recurrent layers dynamo leaves to eager mode (all ``nn.RNN``,
    ``nn.GRU`` and ``nn.LSTM`` unless ``torch._dynamo.config.allow_rnn``), outermost only."""
    if torch._dynamo.config.allow_rnn:
        return ()
    paths: list[str] = []
    for name, mod in model.named_modules():
        if isinstance(mod, (nn.RNN, nn.GRU, nn.LSTM)) and not any(
                name.startswith(p + ".") for p in paths):
            paths.append(name)
    return tuple(paths)


def _eager_kernels(trace: Trace | None, paths: tuple[str, ...], first_id: int) -> list[Kernel]:
    """The eager Trace's kernels under ``paths`` (modules that run eagerly between graphs), as
    eager lowers them, their storage ids moved past the wrappers' (from ``first_id`` on)."""
    if trace is None or not paths:
        return []
    def moved(ops: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        return tuple((first_id + sid, n) for sid, n in ops)
    return [replace(k, reads=moved(k.reads), writes=moved(k.writes))
            for k in (kernel_of(r) for r in trace.records
                      if r.launches and _under(r.module_path, paths))]


def _under(path: str, paths: tuple[str, ...]) -> bool:
    """Whether module ``path`` is one of ``paths`` or inside one ("" is the root: every op)."""
    return any(not p or path == p or path.startswith(p + ".") for p in paths)


def lower_code(codes: list[str], trace: Trace | None, *, batch: int | None, n_breaks: int = 0,
               framework: str = NAME, input_shapes: frozenset[tuple[int, ...]] = frozenset(),
               eager_paths: tuple[str, ...] = (), n_modules: int = 0) -> Program:
    """The Program of inductor wrapper modules (one per compiled graph), in call order, then
    the eager Trace's kernels under ``eager_paths`` (modules run eagerly between graphs).
    ``n_modules``: the modules of the compiled model, whose guards every call checks."""
    calls = [c for i, code in enumerate(codes) for c in parse_wrapper(code, i)]
    # the compiled graphs' kernels pair with the ops outside the modules run eagerly
    records = ([r for r in trace.records if r.launches and not (
        eager_paths and _under(r.module_path, eager_paths))] if trace is not None else [])
    mac_records = [r for r in records if r.op_class in MAC_CLASSES]
    staged: list[tuple[KernelCall, str, int, int, list[str], str, int]] = []
    for call in calls:
        tokens = name_tokens(call.name, _vocabulary()) if call.kind == "generated" else []
        moved = call.bytes_transposed if call.kind == "generated" else 0
        if call.kind == "generated":
            cls, macs, written = _generated_class(call, tokens), 0, call.bytes_written
            # a layout prologue that reads every operand in one order, writes it in another
            variant = TRANSPOSE if cls == "copy" and 0 < call.bytes_read == moved else ""
        else:
            cls, macs, written, variant = _extern_cost(call)
        staged.append((call, cls, macs, written, tokens, variant, moved))
    n_mac = sum(1 for _, cls, *_ in staged if cls in MAC_CLASSES)
    pair_macs = bool(mac_records) and n_mac == len(mac_records)
    kernels: list[Kernel] = []
    storage_ids: dict[tuple[int, str], int] = {}
    cursor, mac_i, prev_path = 0, 0, ""
    index_of = {id(r): i for i, r in enumerate(records)}
    for call, cls, macs, written, tokens, variant, moved in staged:
        path = prev_path
        if cls in MAC_CLASSES:
            if mac_i < len(mac_records):
                rec = mac_records[mac_i]
                if pair_macs:
                    path = rec.module_path
                    cursor = index_of[id(rec)] + 1
                if not macs:
                    macs = rec.macs  # Triton templates: the eager op's MACs
            mac_i += 1
        else:
            wanted = {_canonical(t) for t in tokens
                      if t not in _VIEW_TOKENS and t not in _MAC_TOKENS}
            if call.kind != "generated":
                wanted.add(_canonical(call.name.split(".")[-2] if "." in call.name
                                      else call.name))
            found = next((i for i in range(cursor, len(records))
                          if _packet(records[i]) in wanted), None)
            if found is not None:
                path, cursor = records[found].module_path, found + 1
            elif pair_macs and mac_i < len(mac_records):
                path = mac_records[mac_i].module_path  # a prologue of the next MAC op
        weights = sum(t.nbytes for name, t in dict(call.reads).items()
                      if name.startswith(("arg", "primals")) and t.shape not in input_shapes)
        touched = call.writes or call.reads
        dtype = touched[0][1].dtype if touched else "float32"
        dtype = {"float": "float32", "half": "float16"}.get(dtype, dtype)
        members = tuple(f"aten.{t}" for t in tokens) if tokens else (call.name,)
        kernels.append(make_kernel(cls, macs, call.bytes_read, written, path,
                                   (call.name, *members) if tokens else members, dtype,
                                   variant, weights, *_operands(call, storage_ids),
                                   bytes_scratch=_reordered_weights(call, variant),
                                   bytes_transposed=moved))
        prev_path = path
    kernels += _eager_kernels(trace, eager_paths, len(storage_ids))
    kt = tuple(kernels)
    events = kernel_events(kt)
    warns: list[str] = []
    if codes:  # dynamo's guards, checked on every call (ftmodel.estimate.guards)
        events[GUARD_TENSOR] = sum(graph_input_count(code) for code in codes)
        events[GUARD_MODULE] = n_modules
    if n_breaks:
        events["graph_break"] = n_breaks
        warns.append(f"torch.compile hit {n_breaks} graph break(s) and compiled {len(codes)} "
                     "graph(s); ops that run eagerly around the breaks are not counted"
                     + (f", except those of {', '.join(eager_paths)} (recurrent layers, run "
                        "eagerly)" if any(eager_paths) else ""))
    if not codes and trace is not None:
        warns.append("torch.compile compiled no graph (dynamo fell back to eager for the "
                     "model's forward, e.g. at a recurrent layer): its ops are counted as eager "
                     "runs them")
    elif any(eager_paths) and not n_breaks:
        warns.append(f"{', '.join(eager_paths)} run eagerly between compiled graphs (dynamo "
                      "does not trace recurrent layers)")
    return Program(framework, kt, dict(events), batch, tuple(warns))
