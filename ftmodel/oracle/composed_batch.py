"""Many candidates composed at once: :func:`ftmodel.oracle.composed.price`, vectorised.

:class:`PiecePool` numbers the pieces (:class:`~ftmodel.oracle.composed.Piece`) and keeps their
per-kernel, per-read and per-piece numbers in flat arrays; :meth:`PiecePool.price` takes a
matrix of piece numbers (one candidate per row, ``-1`` after its last block) and prices every
row with :func:`~ftmodel.oracle.composed.price`'s arithmetic, over all candidates' kernels at
once: the kernels of the batch are gathered into one array, the reads that depend on the rest
of a candidate are priced at its bytes per pass and its blocks' tails, the helper kernels are
counted per candidate, and each row's timeline is run on a padded matrix (rows summed apart, so
one candidate's figures do not depend on the others in its batch). It equals ``price`` up to the
order of floating-point sums (``tests/oracle/test_composed.py``).
"""

from __future__ import annotations

import numpy as np

from ftmodel.estimate.launches import helper_counts
from ftmodel.oracle.composed import Piece, Pricing

__all__ = ["PiecePool"]

_KERNEL_FIELDS = ("hot_s", "gap_s", "read_bytes", "local_cold_bytes", "own_host_s", "kind",
                  "entry", "bytes_total", "helper_key", "helper_extra")
_READ_FIELDS = ("ext_owner", "ext_bytes", "ext_after_pass", "ext_after_input")
_FALLBACK_FIELDS = ("fallback", "fallback_weights", "fallback_rest")


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Indices ``starts[i] .. starts[i] + counts[i] - 1`` for every ``i``, concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    shift = np.repeat(starts - (ends - counts), counts)
    out: np.ndarray = np.arange(total, dtype=np.int64) + shift
    return out


class PiecePool:
    """The pieces of one oracle, numbered, in flat arrays (see the module docstring)."""

    def __init__(self, pricing: Pricing) -> None:
        self.pricing = pricing
        self.pieces: list[Piece] = []
        self._built = 0  # pieces in the flat arrays
        self._flat: dict[str, np.ndarray] = {}

    def add(self, piece: Piece) -> int:
        """Number ``piece`` (its position in :attr:`pieces`)."""
        self.pieces.append(piece)
        return len(self.pieces) - 1

    def _arrays(self) -> dict[str, np.ndarray]:
        if self._built == len(self.pieces):
            return self._flat
        ps = self.pieces
        flat: dict[str, np.ndarray] = {}
        for name in _KERNEL_FIELDS + _READ_FIELDS + _FALLBACK_FIELDS:
            flat[name] = np.concatenate([getattr(p, name) for p in ps])
        for name, field in (("n_k", "hot_s"), ("n_r", "ext_owner"), ("n_f", "fallback")):
            flat[name] = np.array([len(getattr(p, field)) for p in ps], dtype=np.int64)
            flat[name.replace("n_", "start_")] = np.cumsum(flat[name]) - flat[name]
        for name in ("pass_bytes", "tail_bytes", "shared_host_s"):
            flat[name] = np.array([getattr(p, name) for p in ps], dtype=np.float64)
        flat["out_is_in"] = np.array([p.out_is_in for p in ps], dtype=bool)
        flat["input_reads"] = np.array([p.input_reads for p in ps], dtype=bool)
        self._flat, self._built = flat, len(ps)
        return flat

    def price(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(latency, overhead, compute) seconds of each row of ``ids`` (piece numbers in block
        order, ``-1`` past a candidate's last block), and which rows could not be composed
        exactly (their figures are NaN; price them whole)."""
        a = self._arrays()
        pr = self.pricing
        m, width = ids.shape
        valid = ids >= 0
        safe = np.where(valid, ids, 0)
        pass_b = np.where(valid, a["pass_bytes"][safe], 0.0)
        P = pass_b.sum(axis=1)
        # bytes since each block's input was last touched: the blocks before it, in order
        tail_in = np.full((m, width), np.nan)
        cur = np.full(m, np.nan)
        bad = np.zeros(m, dtype=bool)
        for j in range(width):
            tail_in[:, j] = cur
            p, v = safe[:, j], valid[:, j]
            if pr.cold:
                bad |= v & a["input_reads"][p] & (j > 0) & np.isnan(cur)
                if j == 0:
                    bad |= v & a["out_is_in"][p]
            t = a["tail_bytes"][p]
            nxt = np.where(~np.isnan(t), t, np.where(a["out_is_in"][p], cur + a["pass_bytes"][p],
                                                     np.nan))
            cur = np.where(v, nxt, cur)
        # the batch's blocks in order, and their kernels
        row, col = np.nonzero(valid)
        pid = ids[row, col]
        n_k = a["n_k"][pid]
        kidx = _ranges(a["start_k"][pid], n_k)
        k_row = np.repeat(row, n_k)
        k_first = np.cumsum(n_k) - n_k  # each block's first kernel in the batch's array
        if pr.cold:
            dev = self._cold_device(a, pid, row, col, kidx, k_first, P, tail_in)
        else:
            dev = a["hot_s"][kidx]
        dev = dev * pr.kind_scales[a["kind"][kidx]] + a["bytes_total"][kidx] * pr.per_byte_s
        own, entry = a["own_host_s"][kidx], a["entry"][kidx]
        if pr.helpers:
            dev, own, entry, k_row = self._helpers(a, kidx, k_row, dev, own, entry, m)
        n = np.bincount(k_row, minlength=m).astype(np.float64)
        shared = pr.module_call_s + np.bincount(row, a["shared_host_s"][pid], minlength=m)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_kernel_shared = np.where(n > 0, shared / n, 0.0)
        host = (own + per_kernel_shared[k_row]) * pr.host_scale + pr.per_kernel_s * entry
        overhead = pr.per_call_s + np.bincount(k_row, host, minlength=m)
        compute = np.bincount(k_row, dev, minlength=m)
        if pr.sync:
            latency = overhead + compute
        else:
            latency = self._async(k_row, host, dev, n.astype(np.int64), m, overhead, compute)
        for arr in (latency, overhead, compute):
            arr[bad] = np.nan
        return latency, overhead, compute, bad

    def _cold_device(self, a: dict[str, np.ndarray], pid: np.ndarray, row: np.ndarray,
                     col: np.ndarray, kidx: np.ndarray, k_first: np.ndarray, P: np.ndarray,
                     tail_in: np.ndarray) -> np.ndarray:
        """Device seconds of the batch's kernels with their cold shares (``price``'s)."""
        pr = self.pricing
        n_r = a["n_r"][pid]
        ridx = _ranges(a["start_r"][pid], n_r)
        r_blk = np.repeat(np.arange(len(pid)), n_r)
        r_row = row[r_blk]
        tin = tail_in[r_row, col[r_blk]]
        after_in = a["ext_after_input"][ridx]
        use_in = ~np.isnan(after_in) & (col[r_blk] > 0) & ~np.isnan(tin)
        arg = np.where(use_in, tin + np.nan_to_num(after_in), P[r_row] + a["ext_after_pass"][ridx])
        owner = k_first[r_blk] + a["ext_owner"][ridx]
        cold = a["local_cold_bytes"][kidx] + np.bincount(
            owner, weights=a["ext_bytes"][ridx] * pr.share(arg), minlength=len(kidx))
        read = a["read_bytes"][kidx]
        with np.errstate(invalid="ignore", divide="ignore"):
            f = np.where(read > 0, pr.stream_share * cold / read, 0.0)
        n_f = a["n_f"][pid]
        if n_f.any():
            fidx = _ranges(a["start_f"][pid], n_f)
            f_blk = np.repeat(np.arange(len(pid)), n_f)
            f[k_first[f_blk] + a["fallback"][fidx]] = (
                a["fallback_weights"][fidx] * pr.share(P[row[f_blk]]) + a["fallback_rest"][fidx])
        dev: np.ndarray = a["hot_s"][kidx] + np.clip(f, 0.0, 1.0) * a["gap_s"][kidx]
        return dev

    def _helpers(self, a: dict[str, np.ndarray], kidx: np.ndarray, k_row: np.ndarray,
                 dev: np.ndarray, own: np.ndarray, entry: np.ndarray, m: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The arrays with each op's helper kernels after it, counted per candidate."""
        pr = self.pricing
        key, per_op = a["helper_key"][kidx], a["helper_extra"][kidx]
        extra = np.zeros(len(kidx), dtype=np.int64)
        for h in np.unique(key[key >= 0]).tolist():
            at = np.flatnonzero(key == h)
            rows = k_row[at]
            seen = np.bincount(rows, minlength=m)
            first = np.cumsum(seen) - seen  # each row's first op of this class
            extra[at] = helper_counts(per_op[at], np.arange(len(at)) - first[rows])
        if not extra.any():
            return dev, own, entry, k_row
        counts = extra + 1
        first = np.cumsum(counts) - counts
        total = int(counts.sum())
        out_dev = np.full(total, pr.aux_device_s * pr.kind_scales[2])
        out_own = np.full(total, pr.aux_host_s)
        out_entry = np.ones(total)
        out_dev[first], out_own[first], out_entry[first] = dev, own, entry
        return out_dev, out_own, out_entry, np.repeat(k_row, counts)

    def _async(self, k_row: np.ndarray, host: np.ndarray, dev: np.ndarray, n: np.ndarray,
               m: int, overhead: np.ndarray, compute: np.ndarray) -> np.ndarray:
        """The two-timeline recurrence of every row, on a padded rows x kernels matrix."""
        pr = self.pricing
        width = int(n.max()) if m else 0
        starts = np.cumsum(n) - n
        col = np.arange(len(k_row)) - starts[k_row]
        h = np.zeros((m, width))
        d = np.zeros((m, width))
        h[k_row, col] = host
        d[k_row, col] = dev
        t_host = pr.per_call_s + np.cumsum(h, axis=1)
        suffix = np.cumsum(d[:, ::-1], axis=1)[:, ::-1]
        reach = (t_host + pr.launch_latency_s + suffix).max(axis=1) if width else np.zeros(m)
        t_dev = np.where(n > 0, np.maximum(compute, reach), 0.0)
        out: np.ndarray = np.maximum(t_dev, overhead) + pr.sync_s
        return out

