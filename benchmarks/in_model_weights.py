"""Does eager's per-kernel in-model term stand for the weights a network streams? Nothing is timed.

    python benchmarks/in_model_weights.py benchmarks/results/cpu-epyc-rome/cpu-profile-74.json ...

A calibration fits ``measured ≈ host + device_scale·device + per_kernel_s·n_kernels`` to its
synthetic networks (:mod:`ftmodel.calibration.networks`). On the Zen 2 guest the per-kernel need
of single networks at batch 1 ranged 3 µs (a 5-layer MLP with 1.4 MB of weights) to 12-13 µs
(CNNs, a 10-layer MLP with 6.8 MB), as if it grew with the weights the kernels stream. This
scores, by leave-one-network-out median error on each profile's recorded network samples (use a
profile whose samples were priced against its written curves: one refitted by
``benchmarks/refit_in_model.py --against-curves``, or calibrated since), the calibration's form
``k+n`` against ``k+w`` (a cost per byte of weights beyond one core's L2, per forward) and
``k+n+w``, with ``k`` alone for reference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.calibration.networks import synthetic_networks  # noqa: E402
from ftmodel.hardware.profile import read_profile  # noqa: E402

L2_BYTES = 512 * 1024  # one Zen 2-5 core's L2


def _scores(path: str, weight_bytes: dict[str, float]) -> dict[str, tuple[float, list[float]]]:
    prof = read_profile(path)
    assert prof.host is not None
    rows = [s for s in prof.host.frameworks["eager"].samples if "network" in s]
    t, host, dev, n = (np.array([float(s[k]) for s in rows])
                       for k in ("time_s", "host_s", "device_s", "n_kernels"))
    net = np.array([str(s["network"]).split("@")[0] for s in rows])
    beyond_l2 = np.array([max(weight_bytes[g] - L2_BYTES, 0.0) for g in net])
    forms = {"k": [dev], "k+n": [dev, n], "k+w": [dev, beyond_l2], "k+n+w": [dev, n, beyond_l2]}
    out = {}
    for name, cols in forms.items():
        a = np.stack(cols, axis=1)
        errs: list[float] = []
        for held in np.unique(net):  # leave one network out
            tr = net != held
            coef, _ = nnls(a[tr] / t[tr, None], (t[tr] - host[tr]) / t[tr])
            errs += list(np.abs(host[~tr] + a[~tr] @ coef - t[~tr]) / t[~tr])
        coef, _ = nnls(a / t[:, None], (t - host) / t)
        out[name] = (float(np.median(errs)), [float(c) for c in coef])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profiles", nargs="+")
    args = ap.parse_args()
    weight_bytes = {n.name: float(sum(p.numel() * p.element_size()
                                      for p in n.module.parameters()))
                    for n in synthetic_networks(18)}
    print("profile: form leave-one-network-out median APE [coefficients: device scale, "
          "s per kernel and/or s per byte]")
    for path in args.profiles:
        for form, (err, coef) in _scores(path, weight_bytes).items():
            print(f"{path}: {form:<6} {err:.3f} [{', '.join(f'{c:.3g}' for c in coef)}]")


if __name__ == "__main__":
    main()
