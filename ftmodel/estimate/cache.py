"""Which operand bytes come from cache and which from memory, per kernel of a Program.

Op sweeps time each op on the same operands over and over, so they run from cache ("hot");
calibration also times them right after a cache flush ("cold"). Inside a model the truth lies
between, operand by operand: an activation written by the previous op is still in cache, while
the weights (read once per forward pass) and skip connections (written many ops earlier) have
been evicted once the model touches more bytes than the cache holds. :func:`cold_fractions`
gives, per kernel, the effective cold share ``f`` of what it reads;
:class:`~ftmodel.estimate.kernels.DeviceModel` turns it into
``t = t_hot + f · max(0, t_cold − t_hot)``.

Counting semantics
------------------
* An operand of ``s`` bytes read when ``d`` bytes have been touched since its storage was last
  touched is cold in the share ``φ(d + s)``: 0 below ``lo_bytes``, 1 above ``hi_bytes``, linear
  in between (a soft least-recently-used cache: real caches are set-associative, shared and
  partly inclusive, so eviction sets in gradually).
* ``d`` counts every operand byte read or written in between, repeats included (an upper bound
  of the distinct bytes LRU would count; repeats between two uses of one tensor are rare in a
  forward pass, and counting them keeps this O(operands)).
* Steady state: the forward pass is simulated twice and the second pass is reported, so weights
  and model inputs (first touched in the previous call) see the whole pass's traffic as ``d``.
* ``stream_share`` scales the result: a flushed single call pays the full cold latency, while a
  model that streams one layer's cold weights after another pays only part of it (hardware
  prefetch overlaps the stream). A kernel's ``f`` is ``stream_share ·`` its bytes-weighted cold
  share.
* Kernels that carry no operand identities (``Kernel.reads`` and ``writes`` empty, e.g. ONNX
  Runtime's kernels) fall back to: weights at a distance of one whole pass, other inputs just
  written (``d = 0``).
* Writes are not priced here: fresh outputs cost the same in hot and cold sweeps.

The three parameters are measured by calibration (:mod:`ftmodel.calibration.cache`): a chain of distinct
layers whose weights together span less to more than the cache, timed against one layer hot and
flushed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ftmodel.program import Kernel

__all__ = ["CacheModel", "OperandEvents", "cold_fractions", "cold_fractions_reference",
           "operand_events"]


@dataclass(frozen=True)
class CacheModel:
    """A soft LRU cache: cold share 0 below ``lo_bytes``, 1 above ``hi_bytes``, times
    ``stream_share``."""

    lo_bytes: float
    hi_bytes: float
    stream_share: float = 1.0
    # the cache probe's cold penalty per byte read (a layer's weights after a flush, beyond its
    # hot time); 0 where the profile predates it. A MAC kernel on a framework's hot-only curve
    # (ONNX Runtime's, inductor's, TorchScript's prepacked convolutions) is charged it per byte
    # (ftmodel.estimate.kernels.DeviceModel)
    cold_s_per_byte: float = 0.0
    # how a layer's streaming cost per byte changes with its size: ``cold_s_per_byte`` holds for
    # a layer of ``narrow_bytes`` (the probe's 1 MiB layers) or less, ``wide_ratio`` times it
    # for one of ``wide_bytes`` or more (a chain of wide layers, probed too), log-linear
    # between. A large weight matrix streams at the memory's bandwidth where a chain of small
    # ones pays a fixed cost per layer (2-vCPU VMs: a 16 MiB layer at 46 GB/s on the Intel
    # Xeon, 1 MiB layers at 24 GB/s beyond their hot time). 1.0 where the profile predates it
    narrow_bytes: float = 0.0
    wide_bytes: float = 0.0
    wide_ratio: float = 1.0
    # a framework probed through its own runtime (its convolutions' weights packed once, with
    # the session): its convolutions stream at the GEMM rate for their size times this. 0 where
    # not probed: convolutions pay ``cold_s_per_byte``, the narrow layers' price (eager's
    # re-order their weights on every call), unless their weights are prepacked
    # (:func:`ftmodel.estimate.streaming.stream_mac_penalty`)
    conv_ratio: float = 0.0

    @classmethod
    def from_params(cls, params: Mapping[str, float], framework: str = "") -> CacheModel | None:
        """The model a device profile's ``cache`` mapping describes (None when empty); the
        ``<framework>/lo_bytes``... entries, when present, override the shared ones (a
        framework's own allocator and runtime leave more or less of the cache to the model)."""
        def get(key: str, default: float) -> float:
            return float(params.get(f"{framework}/{key}", params.get(key, default)))
        hi = get("hi_bytes", 0.0)
        if hi <= 0:
            return None
        lo = get("lo_bytes", 0.0)
        return cls(lo, max(hi, lo + 1.0), get("stream_share", 1.0), get("cold_s_per_byte", 0.0),
                   get("narrow_bytes", 0.0), get("wide_bytes", 0.0), get("wide_ratio", 1.0),
                   get("conv_ratio", 0.0))

    def cold_s_per_byte_at(self, layer_bytes: np.ndarray) -> np.ndarray:
        """The cold penalty per byte read of kernels reading ``layer_bytes`` each
        (:attr:`cold_s_per_byte` scaled by the probe's size ratio, see :attr:`wide_ratio`)."""
        b = np.asarray(layer_bytes, dtype=np.float64)
        if self.wide_ratio == 1.0 or not 0.0 < self.narrow_bytes < self.wide_bytes:
            return np.full(b.shape, self.cold_s_per_byte)
        pos = np.clip(np.log(np.maximum(b, 1.0) / self.narrow_bytes)
                      / np.log(self.wide_bytes / self.narrow_bytes), 0.0, 1.0)
        out: np.ndarray = self.cold_s_per_byte * np.exp(pos * np.log(self.wide_ratio))
        return out

    def cold_share(self, bytes_since: float) -> float:
        """φ: the share of an operand that is cold when ``bytes_since`` (its own size
        included) were touched since it was last touched."""
        return float(min(max((bytes_since - self.lo_bytes) / (self.hi_bytes - self.lo_bytes),
                             0.0), 1.0))


class OperandEvents(NamedTuple):
    """The operand events of a kernel sequence, in order (what :func:`cold_fractions`
    simulates): per event its storage id (``-1 - i`` for kernel ``i`` when it carries no
    operand identities: one anonymous block of its traffic), bytes, whether it is a read and
    its kernel's index; and the indices of the kernels without identities."""

    sids: np.ndarray  # (m,) int64
    sizes: np.ndarray  # (m,) float64
    is_read: np.ndarray  # (m,) bool
    owner: np.ndarray  # (m,) int64
    fallback: np.ndarray  # (f,) int64


def operand_events(kernels: Sequence[Kernel]) -> OperandEvents:
    """The :class:`OperandEvents` of ``kernels``."""
    sids: list[int] = []
    sizes: list[float] = []
    is_read: list[bool] = []
    owner: list[int] = []
    fallback: list[int] = []
    for i, k in enumerate(kernels):
        if not k.reads and not k.writes:  # no identities: one anonymous block of traffic
            fallback.append(i)
            sids.append(-1 - i)
            sizes.append(float(k.bytes_total))
            is_read.append(False)
            owner.append(i)
            continue
        for sid, size in k.reads:
            sids.append(sid)
            sizes.append(float(size))
            is_read.append(True)
            owner.append(i)
        for sid, size in k.writes:
            sids.append(sid)
            sizes.append(float(size))
            is_read.append(False)
            owner.append(i)
    return OperandEvents(np.asarray(sids, dtype=np.int64), np.asarray(sizes, dtype=np.float64),
                         np.asarray(is_read, dtype=bool), np.asarray(owner, dtype=np.int64),
                         np.asarray(fallback, dtype=np.int64))


def cold_fractions(kernels: Sequence[Kernel], cache: CacheModel | None,
                   events: OperandEvents | None = None) -> np.ndarray:
    """Per kernel, the effective cold share of what it reads (0 = all from cache).

    Vectorised over the operand events of two passes (a NAS oracle calls this once per
    candidate); :func:`cold_fractions_reference` is the same simulation as a plain loop.
    ``events``: :func:`operand_events` of ``kernels``, if already known (the result is the
    same either way)."""
    n = len(kernels)
    out = np.zeros(n)
    if n == 0 or cache is None:
        return out
    ev = operand_events(kernels) if events is None else events
    m = len(ev.sids)
    size = np.tile(ev.sizes, 2)  # the first pass only sets up the steady state
    sid = np.tile(ev.sids, 2)
    after = np.cumsum(size)  # operand bytes touched once each event is done
    pass_bytes = float(after[m - 1])
    # the previous touch of the same storage, by a stable sort on (storage, position)
    order = np.lexsort((np.arange(2 * m), sid))
    same = sid[order[1:]] == sid[order[:-1]]
    prev = np.full(2 * m, -1, dtype=np.int64)
    prev[order[1:][same]] = order[:-1][same]
    second = slice(m, 2 * m)
    p2 = prev[second]
    before = after[second] - size[second]
    distance = np.where(p2 >= 0, before - after[np.maximum(p2, 0)], pass_bytes)
    reads = ev.is_read
    span = cache.hi_bytes - cache.lo_bytes
    share = np.clip((distance + size[second] - cache.lo_bytes) / span, 0.0, 1.0)
    own = ev.owner
    read_bytes = np.bincount(own[reads], weights=size[second][reads], minlength=n)
    cold_bytes = np.bincount(own[reads], weights=(size[second] * share)[reads], minlength=n)
    has = read_bytes > 0
    out[has] = cache.stream_share * cold_bytes[has] / read_bytes[has]
    for i in ev.fallback.tolist():
        out[i] = _fallback_share(kernels[i], pass_bytes, cache)
    return out


def cold_fractions_reference(kernels: Sequence[Kernel], cache: CacheModel | None
                             ) -> np.ndarray:
    """:func:`cold_fractions` as a plain loop over operands (the specification; slower)."""
    n = len(kernels)
    out = np.zeros(n)
    if n == 0 or cache is None:
        return out
    pass_bytes = float(sum(sum(b for _, b in k.reads) + sum(b for _, b in k.writes)
                           if k.reads or k.writes else k.bytes_total for k in kernels))
    last_touch: dict[int, float] = {}
    clock = 0.0  # operand bytes touched so far
    for sweep in (0, 1):  # the first pass only sets up the steady state
        for i, k in enumerate(kernels):
            if not k.reads and not k.writes:
                if sweep:
                    out[i] = _fallback_share(k, pass_bytes, cache)
                clock += k.bytes_total
                continue
            cold = read = 0.0
            for sid, size in k.reads:
                seen = last_touch.get(sid)
                distance = clock - seen if seen is not None else pass_bytes
                cold += size * cache.cold_share(distance + size)
                read += size
                clock += size
                last_touch[sid] = clock
            for sid, size in k.writes:
                clock += size
                last_touch[sid] = clock
            if sweep and read > 0:
                out[i] = cache.stream_share * cold / read
    return out


def _fallback_share(k: Kernel, pass_bytes: float, cache: CacheModel) -> float:
    if k.bytes_read <= 0:
        return 0.0
    weights = float(min(k.bytes_weights, k.bytes_read))
    acts = float(k.bytes_read) - weights
    cold = weights * cache.cold_share(pass_bytes) + acts * cache.cold_share(acts)
    return cache.stream_share * cold / float(k.bytes_read)
