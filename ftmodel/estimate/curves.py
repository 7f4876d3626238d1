"""Calibrated op-class curves: a kernel's time from the samples calibration measured.

Inside the samples' hull the log inverse throughput is interpolated linearly, outside it by the
distance-weighted nearest samples; the result is tabulated and made monotone in work (see
:class:`SampleCurve`). A convolution sample far slower than larger ones (an *inversion*, see
:data:`INVERSION_CLASSES`) is left out first. Used by :class:`ftmodel.estimate.kernels.DeviceModel`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.interpolate import LinearNDInterpolator
from scipy.spatial import QhullError

from ftmodel.hardware.profile import OpClassData
from ftmodel.tracing.formulas import MAC_CLASSES

__all__ = ["GRID_STEP", "GRU_STEP_CURVE", "INTENSITY_WEIGHTS", "INVERSION_CLASSES", "PER_CALL",
           "PER_PLANE", "LSTM_STEP_CURVE", "STEP_CURVES", "WINDOWS", "SampleCurve",
           "inversions", "step_work", "work"]

_EPS = 1.0


# How far apart two MAC kernels are, for the nearest-neighbour curves: the weight of log
# arithmetic intensity (MACs per byte) next to log MACs. 0 is the plain (log MACs, log bytes)
# plane. A GEMM with few rows (m = 1-16, a 1×1 convolution on a 2×2 map) streams its weights at
# a few MACs per byte and runs several times slower per MAC than a GEMM of the same MACs and
# bytes with more rows; in the plain plane its nearest samples may be those, while weighting
# intensity keeps its neighbours among kernels of like intensity. Each curve keeps the weight
# that predicts its own samples best, each from the others (:meth:`SampleCurve.fit`).
INTENSITY_WEIGHTS = (0.0, 1.0, 2.0)


def _features(op_class: str, macs: np.ndarray, br: np.ndarray, bw: np.ndarray,
              intensity_weight: float = 0.0) -> np.ndarray:
    if op_class in MAC_CLASSES:
        log_macs, log_bytes = np.log(macs + _EPS), np.log(br + bw + _EPS)
        if intensity_weight:
            return np.stack([log_macs, intensity_weight * (log_macs - log_bytes)], axis=1)
        return np.stack([log_macs, log_bytes], axis=1)
    feats: np.ndarray = np.log(np.stack([br + _EPS, bw + _EPS], axis=1))
    return feats


def _distances(q: np.ndarray, feats: np.ndarray) -> np.ndarray:
    dist: np.ndarray = np.sqrt(((q[:, None, :] - feats[None, :, :]) ** 2).sum(-1))  # (N, M)
    return dist


def _knn_log_inv(d: np.ndarray, log_inv: np.ndarray, k: int) -> np.ndarray:
    """Distance-weighted mean of the ``k`` nearest samples' log inverse throughput, given each
    query's distances ``d`` (N, M) to the samples."""
    idx = np.argsort(d, axis=1)[:, :k]  # (N, k)
    w = 1.0 / np.maximum(np.take_along_axis(d, idx, axis=1), 1e-3) ** 2
    mean: np.ndarray = (w * log_inv[idx]).sum(1) / w.sum(1)
    return mean


def _loo_error(feats: np.ndarray, log_inv: np.ndarray, k: int) -> float:
    """Median |log error| of each sample predicted from the others (leave-one-out)."""
    d = _distances(feats, feats)
    np.fill_diagonal(d, np.inf)  # a sample is never its own neighbour
    return float(np.median(np.abs(_knn_log_inv(d, log_inv, k) - log_inv)))


# Curves whose samples are per sequential step of a fused recurrent layer (``steps=<n>`` in the
# kernel's variant; a step's work is :func:`step_work`, its time the layer's over its steps): oneDNN's LSTM runs
# each step as a small GEMM that waits for the previous one, at batch 1 latency-bound and at
# batch 16 near the core's AVX-512 peak, so neither the layer's total work on a GEMM curve nor a
# per-step GEMM on MKL's curve prices it (AMD EPYC: 0.48x at batch 1, 1.7x at 16 on the first).
# The LSTM's curve prices every fused recurrent op without one of its own; ONNX Runtime's GRU has
# its own (two GEMMs a step where its LSTM runs one: 1.6x the LSTM's time per MAC on the EPYC)
LSTM_STEP_CURVE = "gemm@mkldnn_rnn_layer"
GRU_STEP_CURVE = "gemm@gru"
STEP_CURVES = frozenset({LSTM_STEP_CURVE, GRU_STEP_CURVE})
# A per-step curve's companion (``<curve>:per_call``): what each call of such a layer costs
# besides its steps, against a step's work (oneDNN re-orders the layer's weights on every call)
PER_CALL = ":per_call"
# A per-op curve's companion (``<curve>:per_plane``): what a kernel costs beyond its curve when
# it loops over many small units one call at a time (batch norm's (image, channel) planes, ONNX
# Runtime's MLAS transpose calls, broadcast spans and batched MatMul's matrices), against their
# count (held on the bytes-read axis of its samples: ``(0, planes, 0, seconds)``, and read as
# a byte class's curve whatever the class it accompanies; Kernel.planes)
PER_PLANE = ":per_plane"
# A pool's per-window curve (``pool@<op>:windows``): the op's time against the bytes of input its
# windows read (held on the bytes-read axis of its samples; Kernel.bytes_window_reads,
# ftmodel.tracing.windows), which prices a pool where its bytes do not: on the same input a
# 5x5 max pool of stride 1 moves 2.4x the bytes of a 3x3 one of stride 2 and took 8.8x its
# time (4.5 against 0.5 ms, AMD EPYC)
WINDOWS = ":windows"


def step_work(macs: np.ndarray, bytes_read: np.ndarray, bytes_weights: np.ndarray,
              bytes_written: np.ndarray, steps: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(MACs, bytes read, bytes written) of one of ``steps`` sequential steps of a fused layer:
    a step's share of the MACs and activations, and every weight (each step reads them all)."""
    act = np.maximum(bytes_read - bytes_weights, 0.0)
    return macs / steps, np.minimum(bytes_weights, bytes_read) + act / steps, bytes_written / steps


def work(op_class: str, macs: np.ndarray, br: np.ndarray, bw: np.ndarray) -> np.ndarray:
    return (macs if op_class in MAC_CLASSES else br + bw) + _EPS


# A convolution sample is set aside as an *inversion* when at least INVERSION_WITNESSES other
# samples, each doing at least its MACs and moving at least its bytes, ran more than
# INVERSION_RATIO times faster, each taking at least INVERSION_MIN_S (below that a time net of
# its family's floor is noise). Such a sample is cuDNN's choice of a slow algorithm for an odd
# shape (without benchmark mode, a 7x7 filter on a small map: on an H200 and an H100, 512
# channels on a 7-px map at batch 1 in 670 µs, 30-70x the convolutions around it), not the
# class's trend. Kept, the monotone envelope raised every larger convolution towards it:
# ResNet-34 at batch 32 as a CUDA graph was priced at 3.2 ms against 1.4 ms measured, its 3x3
# convolutions at 6 TMAC/s. Other classes keep every sample: cuBLAS's slow fp32 GEMMs of 32-64
# rows (13 µs on the H200, where 1,024 rows take 4 µs) are a regime that models run in (a
# ViT-S at batch 1: 13.5 µs per GEMM, profiled), and a merged elementwise curve holds
# different functions, not odd shapes.
INVERSION_CLASSES = frozenset({"conv", "conv_grouped"})
INVERSION_RATIO = 4.0
INVERSION_WITNESSES = 2
INVERSION_MIN_S = 2e-6


def inversions(op_class: str, macs: np.ndarray, br: np.ndarray, bw: np.ndarray,
               seconds: np.ndarray) -> np.ndarray:
    """Boolean mask of the samples that are inversions (see :data:`INVERSION_CLASSES`)."""
    if op_class not in INVERSION_CLASSES:
        return np.zeros(len(seconds), dtype=bool)
    size = br + bw
    witness = ((macs[None, :] >= macs[:, None]) & (size[None, :] >= size[:, None])
               & (seconds[None, :] >= INVERSION_MIN_S)
               & (seconds[None, :] * INVERSION_RATIO < seconds[:, None]))
    np.fill_diagonal(witness, False)
    flagged: np.ndarray = witness.sum(1) >= INVERSION_WITNESSES
    return flagged


# Spacing of the monotone grid (:class:`SampleCurve`), in natural-log units of work: 0.15 is
# ~16% more work from one node to the next, finer than the samples (a factor 2-4 apart)
GRID_STEP = 0.15


def _cumulative(a: np.ndarray, op: np.ufunc, reverse: bool, both_axes: bool = True
                ) -> np.ndarray:
    """``op``-accumulate along both axes of a 2-D grid (``both_axes``; else along the first
    only): with ``np.maximum`` from the low corner, each node takes the largest value of the
    nodes it dominates (no larger on either axis)."""
    if reverse:
        return _cumulative(a[::-1, ::-1], op, False, both_axes)[::-1, ::-1]
    out: np.ndarray = op.accumulate(a, axis=0)
    return op.accumulate(out, axis=1) if both_axes else out


def _bound_by_samples(log_t: np.ndarray, sample_lo: np.ndarray, sample_hi: np.ndarray,
                      both_axes: bool = True) -> None:
    """Hold each grid node between the calibrated samples around it: no slower than the fastest
    sample doing at least its work on both axes, no faster than the slowest sample doing at most
    its work (more work never takes less time). ``sample_lo`` / ``sample_hi``: the grid with each
    sample's log time at its node (the largest / smallest where several share one), -inf / +inf
    elsewhere. Where the two bounds disagree (noisy samples that are not monotone), their mean.
    In place.

    Interpolation carries a *throughput* from far-apart samples: between tiny kernels dominated
    by a fixed per-call cost (oneDNN's ~30 µs on the AMD EPYC) and a large one, a node of few
    MACs and many bytes (the hull's thin low-intensity edge, or beyond it) took their time per
    MAC times its own MACs, 90-196 µs; the monotone envelope then spread that to every larger
    node, pricing a calibrated 48 µs convolution sample at 94 µs. ``both_axes``: as in
    :func:`_cumulative`."""
    lo = _cumulative(sample_lo, np.maximum, reverse=False, both_axes=both_axes)
    hi = _cumulative(sample_hi, np.minimum, reverse=True, both_axes=both_axes)
    clipped = np.minimum(np.maximum(log_t, lo), hi)
    disagree = lo > hi  # both finite there
    clipped[disagree] = 0.5 * (lo[disagree] + hi[disagree])
    log_t[...] = clipped


@dataclass
class SampleCurve:
    """Interpolated log inverse throughput, made monotone in work.

    Inside the samples' hull (in feature space) the log inverse throughput is interpolated
    linearly (Delaunay triangles; along a line when the samples lie on one, as a byte class's
    sweep of one read/write ratio does), so a calibrated sample is reproduced and time between
    two samples moves between theirs. Outside it, the distance-weighted mean of the ``k``
    nearest samples (:meth:`raw`), each feature clipped to the samples' range. Samples at the
    same features (two shapes of one size) are averaged first.

    Neither is monotone on its own: between samples of unlike intensity a kernel with more MACs
    and more bytes can land among faster neighbours and be priced below a smaller one (a skinny
    GEMM at batch 8 below batch 4), and the weighted mean swings between samples. The curve
    therefore tabulates the log time on a grid over the samples' range — (log MACs, log bytes)
    for matrix-like classes, (log bytes read, log bytes written) otherwise — takes the mean of
    its lower envelope (each node raised to the largest value of the nodes it dominates) and
    upper envelope (lowered to the smallest of the nodes dominating it), both non-decreasing
    along each axis, and interpolates that bilinearly: more work never takes less time. On a
    matrix-like class, a grid node of an intensity (MACs per byte) no sample has is priced at
    the nearest sampled intensity (its bytes moved into the sampled band). Beyond the grid a
    query is priced at its edge and time grows linearly with work.

    A curve of a fused recurrent layer's steps (:data:`STEP_CURVES`) is monotone in MACs only
    (``monotone_in_bytes`` false): its bytes are the layer's weights, read whole by every step,
    and at equal MACs a step with more weights has fewer rows (batch), which a step runs
    faster, not slower (oneDNN's LSTM on an Intel Xeon, 1.6 M MACs a step: 25.5 µs at hidden 64
    and batch 64, 18.5 µs at hidden 256 and batch 4). Held monotone in bytes too, every step of
    a hidden-256-512 layer at batch 4-16 was raised towards the small-hidden samples' time,
    1.15-1.3x its own calibrated samples."""

    op_class: str
    feats: np.ndarray  # (M, F)
    log_inv_tput: np.ndarray  # (M,)
    k: int = 3
    intensity_weight: float = 0.0  # see INTENSITY_WEIGHTS
    intensity_range: tuple[float, float] = (0.0, 0.0)  # log MACs/byte, min and max (MAC class)
    axes: tuple[np.ndarray, np.ndarray] | None = None  # grid coordinates, built on first use
    log_t: np.ndarray | None = None  # (X, Y) monotone log time at the grid nodes
    monotone_in_bytes: bool = True  # False: the envelope runs along MACs only (see above)

    @classmethod
    def fit(cls, op_class: str, data: OpClassData, cold: bool = False,
            peak_rate: float = 0.0, monotone_in_bytes: bool = True) -> SampleCurve:
        """A MAC class keeps the intensity weight of :data:`INTENSITY_WEIGHTS` with the lowest
        leave-one-out error on its own samples (ties: the first); it needs more samples than
        neighbours to choose, else takes 0. Inversions (:func:`inversions`) are left out, and
        so are samples faster than ``peak_rate`` (work per second; 0: no limit), the fastest
        rate the device was seen to reach: a sample whose time, net of its family's floor,
        vanished into the floor's noise (a 1x1 convolution of 69,000 MACs at 1 ns) says only
        that it is small, and interpolated in log time it would price its neighbours at
        several times the machine's peak. If every sample is that fast, all are kept."""
        s = np.asarray(data.samples, dtype=np.float64)  # (M, 4)
        times = np.asarray(data.cold_s, dtype=np.float64) if cold else s[:, 3]  # (M,)
        keep = ~inversions(op_class, s[:, 0], s[:, 1], s[:, 2], s[:, 3])
        if peak_rate > 0:
            rate = (work(op_class, s[:, 0], s[:, 1], s[:, 2]) - _EPS) / np.maximum(s[:, 3], 1e-12)
            possible = rate <= peak_rate * (1 + 1e-9)
            if (keep & possible).any():
                keep &= possible
        s, times = s[keep], times[keep]
        macs, br, bw, t = s[:, 0], s[:, 1], s[:, 2], np.maximum(times, 1e-9)
        log_inv = np.log(t / work(op_class, macs, br, bw))
        k = min(3, len(s))
        weights = INTENSITY_WEIGHTS if op_class in MAC_CLASSES and len(s) > k + 1 else (0.0,)
        weight = weights[0] if len(weights) == 1 else min(
            weights, key=lambda w: _loo_error(_features(op_class, macs, br, bw, w), log_inv, k))
        feats = _features(op_class, macs, br, bw, weight)
        intensity = np.log(macs + _EPS) - np.log(br + bw + _EPS)
        return cls(op_class, feats, log_inv, k=k, intensity_weight=weight,
                   intensity_range=(float(intensity.min()), float(intensity.max())),
                   monotone_in_bytes=monotone_in_bytes)

    def raw(self, macs: np.ndarray, br: np.ndarray, bw: np.ndarray) -> np.ndarray:
        """Seconds by the nearest samples alone (not monotone in work)."""
        # a query beyond the sampled range is moved to its edge (each feature clipped to the
        # samples' range), so its neighbours and their weights stop changing with size there:
        # the edge throughput is kept and time grows linearly with work
        q = np.clip(_features(self.op_class, macs, br, bw, self.intensity_weight),
                    self.feats.min(0), self.feats.max(0))  # (N, F)
        log_inv = _knn_log_inv(_distances(q, self.feats), self.log_inv_tput, self.k)
        seconds: np.ndarray = np.exp(log_inv) * work(self.op_class, macs, br, bw)
        return seconds

    def _grid_coords(self, macs: np.ndarray, br: np.ndarray, bw: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
        if self.op_class in MAC_CLASSES:
            return np.log(macs + _EPS), np.log(br + bw + _EPS)
        return np.log(br + _EPS), np.log(bw + _EPS)

    def _from_coords(self, x: np.ndarray, y: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(macs, bytes read, bytes written) at grid coordinates."""
        if self.op_class in MAC_CLASSES:
            lo, hi = self.intensity_range  # keep the node's intensity within the sampled band
            y = np.clip(y, x - hi, x - lo)
            return np.exp(x) - _EPS, np.exp(y) - _EPS, np.zeros_like(x)
        return np.zeros_like(x), np.exp(x) - _EPS, np.exp(y) - _EPS

    def _linear(self, q: np.ndarray) -> np.ndarray:
        """Log inverse throughput interpolated linearly among the samples at features ``q``
        (N, F); NaN outside their hull."""
        feats, idx = np.unique(self.feats, axis=0, return_inverse=True)
        log_inv = np.bincount(idx.ravel(), self.log_inv_tput) / np.bincount(idx.ravel())
        out = np.full(len(q), np.nan)
        if len(feats) < 2:
            return out
        centred = feats - feats.mean(0)
        _, sv, vt = np.linalg.svd(centred, full_matrices=False)
        if len(feats) >= 3 and sv[-1] > 1e-6 * sv[0]:  # a 2-D cloud: triangles
            try:
                return np.asarray(LinearNDInterpolator(feats, log_inv)(q), dtype=np.float64)
            except QhullError:
                pass
        # on a line: interpolate along it, for queries on it
        t = centred @ vt[0]
        order = np.argsort(t)
        tq = (q - feats.mean(0)) @ vt[0]
        off = np.linalg.norm((q - feats.mean(0)) - np.outer(tq, vt[0]), axis=1)
        on = (off <= 1e-6 + 1e-3 * sv[0]) & (tq >= t.min()) & (tq <= t.max())
        out[on] = np.interp(tq[on], t[order], log_inv[order])
        return out

    def _build_grid(self) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        if self.op_class in MAC_CLASSES:
            x_s = self.feats[:, 0]
            # the samples' log bytes, from their features
            y_s = (self.feats[:, 1] if not self.intensity_weight
                   else x_s - self.feats[:, 1] / self.intensity_weight)
        else:
            x_s, y_s = self.feats[:, 0], self.feats[:, 1]
        # evenly spaced nodes, and the samples' own coordinates (a sample is a node)
        axes = tuple(np.unique(np.concatenate([
            np.linspace(v.min(), v.max(), max(2, int(np.ceil(np.ptp(v) / GRID_STEP)) + 1)), v]))
            for v in (x_s, y_s))
        gx, gy = np.meshgrid(axes[0], axes[1], indexing="ij")
        nodes = self._from_coords(gx.ravel(), gy.ravel())
        raw = np.log(np.maximum(self.raw(*nodes), 1e-30))
        inside = self._linear(_features(self.op_class, *nodes, self.intensity_weight))
        ok = np.isfinite(inside)
        raw[ok] = inside[ok] + np.log(work(self.op_class, *nodes))[ok]
        raw = raw.reshape(gx.shape)
        # each sample's own log time at its node (samples are nodes: their coordinates are axes)
        i_s, j_s = np.searchsorted(axes[0], x_s), np.searchsorted(axes[1], y_s)
        log_t_s = self.log_inv_tput + np.log(work(self.op_class, *self._from_coords(x_s, y_s)))
        sample_lo, sample_hi = np.full(gx.shape, -np.inf), np.full(gx.shape, np.inf)
        np.maximum.at(sample_lo, (i_s, j_s), log_t_s)
        np.minimum.at(sample_hi, (i_s, j_s), log_t_s)
        both = self.monotone_in_bytes
        _bound_by_samples(raw, sample_lo, sample_hi, both)
        lower = _cumulative(raw, np.maximum, reverse=False, both_axes=both)
        upper = _cumulative(raw, np.minimum, reverse=True, both_axes=both)
        return (axes[0], axes[1]), 0.5 * (lower + upper)

    def __call__(self, macs: np.ndarray, br: np.ndarray, bw: np.ndarray) -> np.ndarray:
        if self.log_t is None or self.axes is None:
            self.axes, self.log_t = self._build_grid()
        (ax, ay), g = self.axes, self.log_t
        x, y = self._grid_coords(macs, br, bw)
        xc, yc = np.clip(x, ax[0], ax[-1]), np.clip(y, ay[0], ay[-1])
        i = np.clip(np.searchsorted(ax, xc, side="right") - 1, 0, max(len(ax) - 2, 0))
        j = np.clip(np.searchsorted(ay, yc, side="right") - 1, 0, max(len(ay) - 2, 0))
        i1, j1 = np.minimum(i + 1, len(ax) - 1), np.minimum(j + 1, len(ay) - 1)
        fx = np.where(ax[i1] > ax[i], (xc - ax[i]) / np.maximum(ax[i1] - ax[i], 1e-300), 0.0)
        fy = np.where(ay[j1] > ay[j], (yc - ay[j]) / np.maximum(ay[j1] - ay[j], 1e-300), 0.0)
        log_t = ((1 - fx) * (1 - fy) * g[i, j] + fx * (1 - fy) * g[i1, j]
                 + (1 - fx) * fy * g[i, j1] + fx * fy * g[i1, j1])
        # beyond the grid: the edge's time, scaled by the work the clipping removed; below its
        # first node (less work than any sample), by that work to the power of the curve's own
        # slope there (:meth:`_low_slope`)
        edge = self._from_coords(xc, yc)
        scale = work(self.op_class, macs, br, bw) / work(self.op_class, *edge)
        below = x < xc
        if below.any():  # the slope only where a query lies below the grid
            scale[below] = scale[below] ** self._low_slope(yc[below])
        out: np.ndarray = np.exp(log_t) * np.where((x != xc) | (y != yc), scale, 1.0)
        return out

    def _low_slope(self, y: np.ndarray) -> np.ndarray:
        """d log time / d log work along the grid's first axis over its first e-fold (the whole
        axis where shorter), at second-axis coordinates ``y``, within 0 and 1: how the time of
        the smallest sampled kernels follows their work. A class whose smallest samples sit on
        its fixed per-call cost has a slope near 0, and a kernel smaller still costs about as
        much; scaled down in proportion to its work instead, eager's oneDNN convolutions of
        0.1 M MACs were priced at 20 µs, where the sweep's smallest (0.45 M MACs) took 59 µs
        and those inside a model 50-55 µs (the AMD EPYC, Zen 5, batch 4)."""
        assert self.axes is not None and self.log_t is not None
        (ax, ay), g = self.axes, self.log_t
        step = min(1.0, float(ax[-1] - ax[0]))
        if step <= 0.0:
            return np.ones_like(y)
        k = int(np.clip(np.searchsorted(ax, ax[0] + step), 1, len(ax) - 1))
        rise = np.interp(y, ay, g[k]) - np.interp(y, ay, g[0]) if len(ay) > 1 \
            else np.full(y.shape, float(g[k, 0] - g[0, 0]))
        slope: np.ndarray = np.clip(rise / float(ax[k] - ax[0]), 0.0, 1.0)
        return slope
