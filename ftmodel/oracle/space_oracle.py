"""Candidates of a declared search space priced from their configurations, never built.

Used by :meth:`ftmodel.oracle.CostOracle.latencies` with ``space=``. A space names a
candidate's blocks in order (:meth:`SearchSpace.blocks`: hashable keys) and builds one block
from its key (:meth:`SearchSpace.block`, on the meta device). Each distinct block is built
once; each block at each input shape is traced, lowered and summarised once
(:func:`ftmodel.oracle.composed.piece_of`), and the candidates of a call are priced from their
blocks' summaries all at once (:meth:`ftmodel.oracle.composed_batch.PiecePool.price`, the
vectorised form of :func:`ftmodel.oracle.composed.price`). Where that cannot be exact
(:class:`~ftmodel.oracle.composed.NotComposable`: another framework than eager, a plain
process's heap on a CPU), the candidate is built on the meta device and priced whole, as
:meth:`ftmodel.oracle.CostOracle.latency` prices any model.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from ftmodel.api import DTYPES, Predictor
from ftmodel.errors import InvalidArgumentError
from ftmodel.oracle.composed import NotComposable, Pricing, piece_of
from ftmodel.oracle.composed_batch import PiecePool
from ftmodel.oracle.segment_trace import TensorMeta
from ftmodel.oracle.structure import input_meta, plan_of
from ftmodel.oracle.trace_cache import TraceCache
from ftmodel.tracing.variants import backend_threads

__all__ = ["SearchSpace", "SpacePricer", "SpaceResult", "space_latencies"]


class SearchSpace(Protocol):
    """What the oracle needs of a search space (:class:`ftmodel.oracle.search_space.
    MobileNetV2Space` is one): the candidate is ``nn.Sequential(*(block(k) for k in
    blocks(cfg)))`` called on ``input_spec()`` resized to each batch."""

    def check(self, cfg: Any) -> None: ...

    def blocks(self, cfg: Any) -> tuple[Hashable, ...]: ...

    def block(self, key: Hashable) -> nn.Module: ...

    def build(self, cfg: Any, device: str | torch.device = ...) -> nn.Module: ...

    def input_spec(self) -> torch.Tensor: ...


@dataclass(frozen=True)
class SpaceResult:
    """Latencies of the candidates that succeeded, in input order, per batch (seconds):
    ``latency_s``, ``overhead_s`` (per-call and per-kernel host cost) and ``compute_s``
    (device time), each ``(n_candidates, n_batches)``."""

    candidates: tuple[Any, ...]
    batches: tuple[int, ...]
    latency_s: np.ndarray
    overhead_s: np.ndarray
    compute_s: np.ndarray
    failures: tuple[Any, ...] = ()  # ftmodel.oracle.cost_oracle.Failure
    composed: bool = True  # priced from block summaries (False: each candidate built)

    def __len__(self) -> int:
        return len(self.candidates)


class SpacePricer:
    """Block summaries of one Predictor's candidates (see the module docstring)."""

    def __init__(self, predictor: Predictor, traces: TraceCache) -> None:
        self.predictor = predictor
        self.traces = traces
        self.pricing = Pricing.of(predictor)  # NotComposable where it cannot be exact
        self.pool = PiecePool(self.pricing)
        self._blocks: dict[tuple[int, Hashable], nn.Sequential] = {}
        # (space, block key, input meta number) -> (piece number, output meta number)
        self._pieces: dict[tuple[int, Hashable, int], tuple[int, int]] = {}
        self._metas: dict[TensorMeta | None, int] = {}
        self._meta_of: list[TensorMeta | None] = []
        self._inputs: dict[tuple[int, int], int] = {}
        self._helper_keys: dict[str, int] = {}
        self._spaces: dict[int, Any] = {}  # id -> space, keeping ids from being reused

    def __len__(self) -> int:
        return len(self._pieces)

    def clear(self) -> None:
        self.pool = PiecePool(self.pricing)
        for d in (self._blocks, self._pieces, self._metas, self._inputs, self._spaces):
            d.clear()
        self._meta_of.clear()

    def row(self, space: SearchSpace, cfg: Any, batch: int,
            keys: Sequence[Hashable] | None = None) -> list[int]:
        """The piece numbers of candidate ``cfg`` at ``batch``, in block order (pieces made
        on first sight; a block that cannot be summarised raises NotComposable). ``keys``:
        ``space.blocks(cfg)``, where already known."""
        sid = id(space)
        meta = self._inputs.get((sid, batch))
        if meta is None:
            self._spaces.setdefault(sid, space)
            meta = self._inputs[(sid, batch)] = self._meta(self._input(space, batch))
        out = []
        pieces = self._pieces
        for key in space.blocks(cfg) if keys is None else keys:
            got = pieces.get((sid, key, meta))
            if got is None:
                got = self._piece(space, sid, key, meta)
            out.append(got[0])
            meta = got[1]
        return out

    def _meta(self, meta: TensorMeta | None) -> int:
        got = self._metas.get(meta)
        if got is None:
            got = self._metas[meta] = len(self._meta_of)
            self._meta_of.append(meta)
        return got

    def _input(self, space: SearchSpace, batch: int) -> TensorMeta:
        _, metas = input_meta(nn.Identity(), space.input_spec(), batch,
                              DTYPES[self.predictor.dtype], None)
        if len(metas) != 1:
            raise InvalidArgumentError(
                f"a search space's input_spec() must be one tensor, got {len(metas)}")
        return metas[0]

    def _piece(self, space: SearchSpace, sid: int, key: Hashable, meta_id: int
               ) -> tuple[int, int]:
        meta = self._meta_of[meta_id]
        wrapped = self._blocks.get((sid, key))
        if wrapped is None:
            # one container around the block: its program counts that call, which
            # piece_of takes out again
            wrapped = self._blocks[(sid, key)] = nn.Sequential(space.block(key)).eval()
        plan = plan_of(wrapped, self.traces.intern)
        if not plan.chain or any(k is None for k in plan.keys) or meta is None:
            raise NotComposable(f"block {key!r} cannot be traced as a chain ({plan.why})")
        with backend_threads(self.predictor.threads):
            block = self.traces.eager_block(plan, meta, DTYPES[self.predictor.dtype])
        if block is None:
            raise NotComposable(f"block {key!r} cannot be assembled from its segments")
        piece = piece_of(block, self.predictor, self.pricing, self._helper_keys)
        got = self._pieces[(sid, key, meta_id)] = (self.pool.add(piece), self._meta(piece.out))
        return got


def space_latencies(pricer: SpacePricer | None, whole: Any, space: SearchSpace,
                    configs: Sequence[Any], batches: Sequence[int]) -> SpaceResult:
    """Every configuration of ``space`` at every batch: composed by ``pricer`` where it can be
    (None: never), else built on the meta device and priced by ``whole(model, batches,
    inputs)`` (a list of Predictions). Each configuration is checked first: one outside the
    space raises :class:`~ftmodel.errors.InvalidArgumentError` naming the choices. A candidate
    that fails otherwise is skipped and reported in ``failures``, and as a warning."""
    from ftmodel.oracle.cost_oracle import Failure  # the oracle imports this module

    if pricer is None:  # else each is checked as its blocks are named
        for cfg in configs:
            space.check(cfg)
    n, nb = len(configs), len(batches)
    out = np.full((3, n, nb), np.nan)
    whole_rows = np.ones(n, dtype=bool) if pricer is None else np.zeros(n, dtype=bool)
    errors: dict[int, BaseException] = {}
    if pricer is not None:
        rows: list[list[list[int]]] = [[[] for _ in configs] for _ in batches]  # [batch][cfg]
        for i, cfg in enumerate(configs):
            try:
                keys = space.blocks(cfg)  # checks it: one outside the space raises
                for j, b in enumerate(batches):
                    rows[j][i] = pricer.row(space, cfg, b, keys)
            except NotComposable:
                whole_rows[i] = True
            except InvalidArgumentError:  # a configuration outside the space
                raise
            except Exception as err:  # noqa: BLE001 - one bad candidate never ends a search
                errors[i] = err
        for j, batch_rows in enumerate(rows):
            width = max((len(r) for r in batch_rows), default=0)
            ids = np.full((n, width), -1, dtype=np.int64)
            for i, r in enumerate(batch_rows):
                if not (whole_rows[i] or i in errors):
                    ids[i, :len(r)] = r
            lat, ovh, comp, bad = pricer.pool.price(ids)
            out[:, :, j] = lat, ovh, comp
            whole_rows |= bad
    for i in [i for i in range(n) if whole_rows[i] and i not in errors]:
        try:
            preds = whole(space.build(configs[i], device="meta"), list(batches),
                          space.input_spec())
            out[:, i, :] = np.array([[p.latency_s, p.overhead_s, p.compute_s] for p in preds]).T
        except Exception as err:  # noqa: BLE001 - one bad candidate never ends a search
            errors[i] = err
    failed = []
    for i, error in sorted(errors.items()):
        text = f"{type(error).__name__}: {str(error).strip()[:500]}"
        failed.append(Failure(configs[i], text))
        warnings.warn(f"ftmodel oracle: candidate {configs[i]!r} skipped ({text})",
                      RuntimeWarning, stacklevel=3)
    keep = np.array([i not in errors for i in range(n)], dtype=bool)
    return SpaceResult(tuple(c for c, k in zip(configs, keep) if k), tuple(batches),
                       out[0][keep], out[1][keep], out[2][keep], tuple(failed),
                       not bool(whole_rows[keep].any()))
