"""Leave the H100 out: predict the live H100 measurements with the paper GPUs' fit.

Used by ``paper_gpus.py`` (the H100 rows of ``paper-gpus.csv`` and of its summary). The built-in
parameters (``gpu_efficiency.json``) are fitted on the paper's three GPUs only, so they are the
fit with the H100 left out; nothing measured on the H100 enters the prediction:

* device half: the ``h100-sxm5`` spec sheet (``gpu_specs.csv``) × Hopper's published achieved
  fractions (``gpu_generations.json``) × the fitted residuals, as ``build_gpu_profiles.py``
  builds every profile, with Hopper's per-kernel ramp measured on the H200's CUDA-graph
  replays (``kernel_ramp_left_out``), not the one measured on this H100's;
* host half: the fit's default host ``paper-host`` (the geometric mean of the paper's fitted
  Xeon hosts with PyTorch 1.12), as for every GPU left out; the H100 was measured from another
  host CPU with torch 2.11 (``results/gpu-h100/env.txt``), so eager's host-bound points carry
  that difference. Eager is also predicted with the measuring machine's own host half
  (``OWN_HOST_LABEL``: the host section of ``h100-profile-v2.json``, per-dispatch costs that
  ``ftmodel calibrate`` measured on that machine's CPU and torch), the device half unchanged:
  what a user who calibrated their host predicts for a GPU they do not have. CUDA graphs get
  no such row: their calibrated host entries include the gap between graph nodes, which the
  H100 itself set. Both frameworks are also predicted with the host half of another GPU's
  machine (``OTHER_HOST_LABEL``: ``gpu-h200/h200-profile-run5.json``, calibrated on an H200 VM
  of the same cloud, a Xeon with torch 2.11 like the H100's): a host from a machine of today's
  software, with nothing measured on the H100 or its machine;
* points: ``results/gpu-h100/eager-v2.csv`` and ``cudagraphs-v2.csv`` (15 models × batch
  1–128, fp32; the latest runs), predicted by ``ftmodel.api.Predictor`` on the real modules
  (``ftmodel.tools.zoo``);
* MACs proxy: latency = c · MACs (ftmodel's count, the CSV's ``macs``), c fitted in log space
  on the same points per framework (in ``paper_gpus.macs_proxy``).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from build_gpu_profiles import NAMES, build  # noqa: E402
from gpu_common import gpu_specs  # noqa: E402

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.hardware.profile import HardwareProfile  # noqa: E402
from ftmodel.tools.zoo import get_model  # noqa: E402

H100_DIR = Path(__file__).resolve().parent / "results" / "gpu-h100"
RUNS = {"eager": H100_DIR / "eager-v2.csv", "cudagraphs": H100_DIR / "cudagraphs-v2.csv"}
LABEL = "H100"
OWN_HOST_LABEL = "H100 (own host)"
OWN_HOST = H100_DIR / "h100-profile-v2.json"
OTHER_HOST_LABEL = "H100 (H200 machine's host)"
# the latest full calibration of an H200 machine of the same cloud (Xeon, 16 vCPUs, torch 2.11);
# chosen before the H100 was predicted with it
OTHER_HOST = H100_DIR.parent / "gpu-h200" / "h200-profile-run5.json"
PROFILE = "h100-sxm5"


def h100_profile(params: dict[str, Any]) -> HardwareProfile:
    """The ``h100-sxm5`` profile built from ``params`` (its host half: the default host) with
    the H100 left out: Hopper's per-kernel ramp is the one measured on the H200's replays, not
    on this H100's (it stays outside every fit)."""
    spec = next(s for s in gpu_specs() if NAMES[(s.gpu, s.variant)][0] == PROFILE)
    profiles, _ = build(params, [spec], left_out=PROFILE)
    return profiles[0]


def _measured(path: Path) -> dict[str, list[tuple[int, float, float]]]:
    """model -> [(batch, measured seconds, MACs)] of one validation CSV."""
    out: dict[str, list[tuple[int, float, float]]] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            out.setdefault(r["model"], []).append(
                (int(r["batch"]), float(r["measured_s"]), float(r["macs"])))
    return out


def logo_rows(params: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of ``paper-gpus.csv`` for the H100 (``predicted_s`` = ``logo_s``: no fit saw it)."""
    profile = h100_profile(params)
    rows = []
    runs: list[tuple[str, str, Path, str | None]] = [
        (LABEL, fw, path, None) for fw, path in RUNS.items()]
    runs += [(OTHER_HOST_LABEL, fw, path, str(OTHER_HOST)) for fw, path in RUNS.items()]
    runs.append((OWN_HOST_LABEL, "eager", RUNS["eager"], str(OWN_HOST)))
    for label, fw, path, host in runs:
        predictor = Predictor(fw, profile, host=host, heap="kept")
        for name, pts in _measured(path).items():
            zm = get_model(name)
            torch.manual_seed(0)
            preds = predictor.predict(zm.build().eval(), [b for b, _, _ in pts], zm.make_inputs)
            for (b, meas, macs), p in zip(pts, preds):
                rows.append({
                    "gpu": label, "framework": fw, "precision": "fp32", "model": name,
                    "batch": b, "measured_s": meas, "predicted_s": p.latency_s,
                    "logo_s": p.latency_s, "overhead_s": p.overhead_s,
                    "compute_s": p.compute_s, "regime": p.regime, "n_launches": p.n_launches,
                    "macs": float(p.macs), "macs_thop": macs,
                    "crossover_batch": p.crossover_batch,
                    "logo_crossover_batch": p.crossover_batch})
    return rows


def host_note(params: dict[str, Any]) -> str:
    """One sentence on the host half the H100 rows were predicted with."""
    host = params["hosts"]["paper-host"]
    return (f"H100 rows: device half `{PROFILE}` (spec sheet × Hopper's published fractions × "
            "the fitted residuals; per-kernel ramp: Hopper's, measured on the H200's CUDA-graph "
            "replays, `gpu_generations.json` `kernel_ramp_left_out`), host half the fit's "
            "default host `paper-host` "
            f"({host['note']}; speed factor {host['speed_factor']:.3f} of the E5-2630), nothing "
            "measured on the H100's machine. The H100 was measured with torch 2.11 from another "
            "host CPU (`results/gpu-h100/env.txt`): eager's host-bound points carry that "
            "difference, CUDA-graph replays (one launch per forward) hardly any. Points: "
            "`gpu-h100/eager-v2.csv`, `gpu-h100/cudagraphs-v2.csv`. Rows *H100 (H200 machine's "
            "host)*: the host half calibrated on an H200 VM of the same cloud "
            "(`gpu-h200/h200-profile-run5.json`: a Xeon with torch 2.11, like the H100's "
            "machine), nothing measured on the H100 or its machine. Rows *H100 (own host)*: eager "
            "with the host half that `ftmodel calibrate` measured on the H100's machine "
            "(`gpu-h100/h100-profile-v2.json`; its CPU and torch 2.11), the device half the same "
            "spec-derived one.")
