"""A candidate priced from summaries of its blocks, never built: the oracle's composed path.

A search space (:mod:`ftmodel.oracle.search_space`) names a candidate's blocks in order. Each
distinct block at each input shape is traced and lowered once (eager: one kernel per launching
record, :meth:`ftmodel.oracle.trace_cache.TraceCache.eager_block`) and summarised as a
:class:`Piece`; :func:`price` composes a candidate's pieces through the same estimate code that
:func:`ftmodel.predict_latency` runs on the built candidate — the curves' hot and cold times,
the cache model's cold shares, the in-model terms, the device's helper kernels and the timeline
— to the same latency, up to the order floating-point sums are taken in
(``tests/oracle/test_composed.py``: random candidates, CPU and GPU profiles).

Why the composition is exact
----------------------------
* **Cold operands** (:mod:`ftmodel.estimate.cache`): a read is charged by the bytes touched
  since its storage was last touched. Inside a block that distance is the block's own, except
  for the first read of a storage the block did not write: a weight, buffer or the model's
  input, last touched in the previous call, is at the candidate's bytes per pass ``P`` less the
  span of its touches in this block; the block's input was last touched by the previous block,
  at that block's *tail* (the bytes it touched after its output) plus what this block touched
  before the read. A kernel without operand identities prices its weights at ``P``. A piece
  keeps those reads apart; everything else is priced when the piece is made.
* **Helper kernels** (GPU profiles, :mod:`ftmodel.estimate.launches`): the ``k``-th op of a class
  gets its helpers by ``k``, its index in the whole program: counted over the candidate.
* **Host**: each kernel's own cost, and the other events (module calls, Python calls, views,
  allocations) spread evenly over the candidate's kernels: each block's are counted without the
  one call of the container it was traced in, and the candidate's own call is added.

Not composed (:class:`NotComposable`; the oracle builds the candidate and prices it whole):
frameworks other than eager (their compilers fuse and change layouts across blocks), a CPU
profile predicting a plain process's heap (its page faults follow the whole program's
allocations), a block whose output is its input's storage at the start of a candidate, and
blocks that cannot be traced as a chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ftmodel.api import Predictor
from ftmodel.estimate.cache import operand_events
from ftmodel.estimate.launches import (AUX_CLASS, dtype_key, helper_counts, helper_table,
                                       launches_per_op)
from ftmodel.estimate.timeline import kernel_host_costs_s, kernel_kinds
from ftmodel.hardware.profile import KIND_SCALES
from ftmodel.oracle.segment_trace import EagerBlock, TensorMeta
from ftmodel.program import Kernel, entry_launches

__all__ = ["NotComposable", "Piece", "Pricing", "piece_of", "price"]


class NotComposable(Exception):
    """A candidate, or one of its blocks, that the composed path cannot price exactly."""


@dataclass(frozen=True)
class Piece:
    """One block at one input, summarised for :func:`price` (per-kernel arrays, in order)."""

    out: TensorMeta | None
    hot_s: np.ndarray  # device seconds, operands in cache
    gap_s: np.ndarray  # max(0, cold - hot): what a fully cold read adds
    read_bytes: np.ndarray  # operand bytes each kernel reads
    local_cold_bytes: np.ndarray  # of those, cold by distances inside the block
    own_host_s: np.ndarray  # each kernel's own kernel:<class> host cost
    kind: np.ndarray  # kernel_kinds: 0 convolution, 1 other MAC kernel, 2 none
    entry: np.ndarray  # 1.0 where the model's Python launched the kernel
    bytes_total: np.ndarray  # per kernel
    helper_key: np.ndarray  # its "<class>:<dtype>" as numbered by piece_of's caller, or -1
    helper_extra: np.ndarray  # helpers its class launches per op (0: none)
    # reads whose storage the block did not write before them (see the module docstring)
    ext_owner: np.ndarray  # kernel index
    ext_bytes: np.ndarray
    ext_after_pass: np.ndarray  # distance + size is P + this (last touched a call ago)
    ext_after_input: np.ndarray  # distance + size is the previous tail + this (nan: not input)
    fallback: np.ndarray  # kernels without operand identities
    fallback_weights: np.ndarray  # stream share x weights / bytes read: times φ(P)
    fallback_rest: np.ndarray  # stream share x activations' cold share / bytes read
    pass_bytes: float  # operand bytes the block touches
    tail_bytes: float  # touched after its output's last touch (nan: output not touched)
    out_is_in: bool  # its output is its input's storage
    input_reads: bool  # it reads its input before writing it
    shared_host_s: float  # its non-kernel host events, priced
    macs: int


@dataclass(frozen=True)
class Pricing:
    """What :func:`price` needs of a Predictor, taken once."""

    lo_bytes: float
    span_bytes: float
    stream_share: float
    cold: bool  # whether the device prices cold operands
    kind_scales: np.ndarray  # device scale of kinds 0, 1, 2
    per_byte_s: float
    host_scale: float
    per_kernel_s: float
    per_call_s: float
    sync: bool
    launch_latency_s: float
    sync_s: float
    helpers: dict[str, float]  # the device's helper table (empty: no helpers)
    aux_device_s: float
    aux_host_s: float
    module_call_s: float  # the candidate's own call

    @classmethod
    def of(cls, predictor: Predictor) -> Pricing:
        if predictor.page_fault_s > 0.0 or predictor.framework.name != "eager":
            raise NotComposable("only eager with the heap kept is composed from its blocks")
        dm, fh = predictor.device_model, predictor.fw_host
        cache = dm.cache
        im = fh.in_model
        scale = im.get("device_scale", 1.0)
        kinds = (np.array([im.get(KIND_SCALES[0], scale), scale, im.get(KIND_SCALES[1], scale)])
                 if any(k in im for k in KIND_SCALES) else np.full(3, scale))
        table = helper_table(predictor.profile.device, "eager")
        aux = Kernel(AUX_CLASS, 0, 0, 0, "", (AUX_CLASS,), "float32", "aux")
        hot, _ = predictor.hot_cold_times_s([aux], [])
        dev = predictor.profile.device
        return cls(cache.lo_bytes if cache else 0.0,
                   (cache.hi_bytes - cache.lo_bytes) if cache else 1.0,
                   cache.stream_share if cache else 0.0, dm.has_cold_data, kinds,
                   im.get("per_byte_s", 0.0), im.get("host_scale", 1.0),
                   im.get("per_kernel_s", 0.0), fh.per_call_s, dev.execution == "sync",
                   dev.launch_latency_s, dev.sync_s, table, float(hot[0]),
                   float(kernel_host_costs_s([aux], fh)[0]),
                   fh.per_event_s.get("module_call", 0.0))

    def share(self, distance_bytes: np.ndarray) -> np.ndarray:
        """φ of :class:`ftmodel.estimate.cache.CacheModel` (distance, own size included)."""
        return np.clip((distance_bytes - self.lo_bytes) / self.span_bytes, 0.0, 1.0)


def piece_of(block: EagerBlock, predictor: Predictor, pricing: Pricing,
             helper_keys: dict[str, int]) -> Piece:
    """The :class:`Piece` of one block, traced and lowered on its own (``block``, its Program
    counted with one call of the container it was traced in). ``helper_keys`` numbers the
    ``"<class>:<dtype>"`` keys helper kernels are counted by (grown here; one per oracle)."""
    ks = block.program.kernels
    n = len(ks)
    hot, cold = predictor.hot_cold_times_s(ks, [])  # its warnings: SpaceResult has none
    ev = operand_events(ks)
    after = np.cumsum(ev.sizes)
    before = after - ev.sizes
    m = len(ev.sids)
    order = np.lexsort((np.arange(m), ev.sids))
    same = ev.sids[order[1:]] == ev.sids[order[:-1]]
    prev = np.full(m, -1, dtype=np.int64)
    prev[order[1:][same]] = order[:-1][same]
    _, which = np.unique(ev.sids, return_inverse=True)
    last_of = np.full(int(which.max()) + 1 if m else 0, -1, dtype=np.int64)
    np.maximum.at(last_of, which, np.arange(m))
    last = last_of[which]  # each event's storage's last event in the block
    reads = ev.is_read & (ev.sids >= 0)
    local = reads & (prev >= 0)
    dist = np.where(local, before - after[np.maximum(prev, 0)], 0.0) + ev.sizes
    read_bytes = np.bincount(ev.owner[reads], weights=ev.sizes[reads], minlength=n)
    local_cold = np.bincount(ev.owner[local], weights=(ev.sizes * pricing.share(dist))[local],
                             minlength=n)
    ext = reads & (prev < 0)
    is_input = ext & (ev.sids == (-1 if block.in_sid is None else block.in_sid))
    ext_pass = before - after[np.maximum(last, 0)] + ev.sizes
    ext_input = np.where(is_input, before + ev.sizes, np.nan)
    fb = ev.fallback
    fb_read = np.array([float(ks[i].bytes_read) for i in fb.tolist()])
    fb_w = np.array([float(min(ks[i].bytes_weights, ks[i].bytes_read)) for i in fb.tolist()])
    with np.errstate(invalid="ignore", divide="ignore"):
        fb_weights = np.where(fb_read > 0, pricing.stream_share * fb_w / fb_read, 0.0)
        fb_rest = np.where(fb_read > 0, pricing.stream_share * (fb_read - fb_w)
                           * pricing.share(fb_read - fb_w) / fb_read, 0.0)
    out_events = np.flatnonzero(ev.sids == (-2 if block.out_sid is None else block.out_sid))
    tail = (float(after[-1] - after[out_events[-1]]) if len(out_events) else float("nan"))
    per = predictor.fw_host.per_event_s
    events = dict(block.program.host_events)
    events["module_call"] = events.get("module_call", 0) - 1  # the container traced in
    extra = np.array([launches_per_op(pricing.helpers, k.op_class, dtype_key(k.dtype)) - 1.0
                      for k in ks], dtype=np.float64)
    helper = np.array([helper_keys.setdefault(f"{k.op_class}:{dtype_key(k.dtype)}",
                                              len(helper_keys)) if x > 0 else -1
                       for k, x in zip(ks, extra.tolist())], dtype=np.int64)
    return Piece(
        block.out, hot, np.maximum(cold - hot, 0.0) if pricing.cold else np.zeros(n),
        read_bytes, local_cold, kernel_host_costs_s(ks, predictor.fw_host), kernel_kinds(ks),
        entry_launches(ks), np.array([k.bytes_total for k in ks], dtype=np.float64), helper,
        np.maximum(extra, 0.0),
        ev.owner[ext], ev.sizes[ext], ext_pass[ext], ext_input[ext], fb, fb_weights, fb_rest,
        float(after[-1]) if m else 0.0, tail,
        block.out_is_in, bool(is_input.any()),
        sum(c * per.get(e, 0.0) for e, c in events.items() if not e.startswith("kernel:")),
        sum(k.macs for k in ks))


def price(pieces: Sequence[Piece], pricing: Pricing) -> tuple[float, float, float]:
    """(latency, overhead, compute) seconds of the candidate made of ``pieces`` in order, as
    :meth:`ftmodel.api.Predictor.prediction` gives them for the built candidate."""
    P = float(sum(p.pass_bytes for p in pieces))
    device, host, kinds, entries, nbytes, helper, extras = [], [], [], [], [], [], []
    tail = float("nan")  # bytes since the current block's input was last touched
    for j, p in enumerate(pieces):
        if pricing.cold:
            if j == 0 and p.out_is_in:
                raise NotComposable("a candidate whose first block returns its input")
            arg = np.where(np.isnan(p.ext_after_input) | (j == 0) | np.isnan(tail),
                           P + p.ext_after_pass, tail + p.ext_after_input)
            cold = p.local_cold_bytes + np.bincount(
                p.ext_owner, weights=p.ext_bytes * pricing.share(arg), minlength=len(p.hot_s))
            with np.errstate(invalid="ignore", divide="ignore"):
                f = np.where(p.read_bytes > 0, pricing.stream_share * cold / p.read_bytes, 0.0)
            if len(p.fallback):
                f[p.fallback] = p.fallback_weights * pricing.share(np.array(P)) + p.fallback_rest
            device.append(p.hot_s + np.clip(f, 0.0, 1.0) * p.gap_s)
        else:
            device.append(p.hot_s)
        host.append(p.own_host_s)
        kinds.append(p.kind)
        entries.append(p.entry)
        nbytes.append(p.bytes_total)
        helper.append(p.helper_key)
        extras.append(p.helper_extra)
        if p.input_reads and j > 0 and np.isnan(tail):
            raise NotComposable("a block reads an input no earlier block touched")
        if not np.isnan(p.tail_bytes):
            tail = p.tail_bytes
        elif p.out_is_in:
            tail = tail + p.pass_bytes
        else:
            tail = float("nan")
    dev = np.concatenate(device) * pricing.kind_scales[np.concatenate(kinds)]
    dev = dev + np.concatenate(nbytes) * pricing.per_byte_s
    own = np.concatenate(host)
    entry = np.concatenate(entries)
    shared = pricing.module_call_s + sum(p.shared_host_s for p in pieces)
    if pricing.helpers:
        dev, own, entry = _with_helpers(np.concatenate(helper), np.concatenate(extras), dev,
                                        own, entry, pricing)
    n = len(dev)
    host_s = (own + (shared / n if n else 0.0)) * pricing.host_scale + pricing.per_kernel_s * entry
    overhead = pricing.per_call_s + float(host_s.sum())
    compute = float(dev.sum())
    if pricing.sync:
        return overhead + compute, overhead, compute
    t_host = pricing.per_call_s + np.cumsum(host_s)
    suffix = np.cumsum(dev[::-1])[::-1]
    t_dev = max(compute, float(np.max(t_host + pricing.launch_latency_s + suffix))) if n else 0.0
    t_end = float(t_host[-1]) if n else pricing.per_call_s
    return max(t_dev, t_end) + pricing.sync_s, overhead, compute


def _with_helpers(key: np.ndarray, per_op: np.ndarray, dev: np.ndarray, own: np.ndarray,
                  entry: np.ndarray, pricing: Pricing
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The arrays with each op's helper kernels after it (:func:`ftmodel.estimate.launches.
    expand_launches`: the ``k``-th op of a class by ``k`` in the whole candidate)."""
    extra = np.zeros(len(key), dtype=np.int64)
    for h in np.unique(key[key >= 0]).tolist():
        at = np.flatnonzero(key == h)
        extra[at] = helper_counts(per_op[at], np.arange(len(at)))
    if not extra.any():
        return dev, own, entry
    counts = extra + 1
    first = np.cumsum(counts) - counts  # where each op lands
    total = int(counts.sum())
    out_dev = np.full(total, pricing.aux_device_s * pricing.kind_scales[2])  # kind: other
    out_own = np.full(total, pricing.aux_host_s)
    out_entry = np.ones(total)
    out_dev[first], out_own[first], out_entry[first] = dev, own, entry
    return out_dev, out_own, out_entry
