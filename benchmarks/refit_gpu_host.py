"""Re-fit a framework's GPU host costs from the measurements a calibrated profile already holds.

    python benchmarks/refit_gpu_host.py benchmarks/results/gpu-h200/h200-profile-run3.json \\
        --framework inductor --out benchmarks/results/gpu-h200/h200-profile-run3-refit.json

A calibration keeps what it timed: every host program's event counts and time, and every
synthetic network's measured time (``host.frameworks.<f>.samples``). When the fit changes
(:func:`ftmodel.calibration.framework_host.fit_framework_costs`), this re-fits those samples
without the GPU: the per-event and per-call costs from the programs, then the in-model
``host_scale`` from the networks, re-lowered here as a prediction lowers them (inductor for a
GPU without one: read off the CPU schedule) and priced on the profile's own device curves, its
device-side in-model terms kept. Nothing new is measured; the provenance records the re-fit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.calibration.framework_host import fit_framework_costs  # noqa: E402
from ftmodel.calibration.in_model_gpu import fit_rows_host_scale, network_row  # noqa: E402
from ftmodel.calibration.networks import synthetic_networks  # noqa: E402
from ftmodel.hardware.profile import FrameworkHost, read_profile, write_profile  # noqa: E402
from ftmodel.host_model import DEVICE_TERMS  # noqa: E402
from ftmodel.tracing.dispatch import trace  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--framework", default="inductor")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    prof = read_profile(args.profile)
    assert prof.host is not None and prof.device.type == "cuda", "a GPU calibration's profile"
    old = prof.host.frameworks[args.framework]
    programs = [s for s in old.samples if "program" in s]
    per_event, per_call = fit_framework_costs(
        args.framework, "cuda", [dict(s["events"]) for s in programs],
        [float(s["time_s"]) for s in programs])
    costs = FrameworkHost(per_event, per_call, old.samples, {})
    partial = replace(prof, host=replace(prof.host, frameworks={**prof.host.frameworks,
                                                                 args.framework: costs}))
    predictor = Predictor(args.framework, partial)
    nets = {n.name: n for n in synthetic_networks(18)}
    rows, measured = [], []
    for s in old.samples:
        if "network" not in s:
            continue
        name, b = s["network"].rsplit("@b", 1)
        net, batch = nets[name], int(b)
        xs = net.make_inputs(batch)
        prog = predictor.framework.program(net.module, xs, batch, trace(net.module, xs),
                                           device="cuda", dtype="fp32")
        rows.append(network_row(predictor, prog, (name, batch)))
        measured.append(float(s["time_s"]))
        print(f"{s['network']}: {len(prog.kernels)} kernels, measured {s['time_s'] * 1e3:.3f} ms",
              flush=True)
    device_terms = {k: float(old.in_model.get(k, 1.0 if k == "device_scale" else 0.0))
                    for k in DEVICE_TERMS}
    host_scale, cv = fit_rows_host_scale(rows, measured, device_terms, per_call, partial)
    in_model = {**old.in_model, "host_scale": host_scale, "cv_median_ape": cv}
    refit = replace(costs, in_model=in_model)
    provenance = dict(prof.provenance)
    provenance["refits"] = list(provenance.get("refits", [])) + [{
        "framework": args.framework, "from": Path(args.profile).name,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "what": "per-event and per-call costs and in-model host_scale re-fitted from the "
                "stored samples by benchmarks/refit_gpu_host.py; nothing re-measured",
        "before": {"per_event_s": dict(old.per_event_s), "per_call_s": old.per_call_s,
                   "host_scale": old.in_model.get("host_scale", 1.0)}}]
    out = replace(prof, host=replace(prof.host, frameworks={**prof.host.frameworks,
                                                             args.framework: refit}),
                  provenance=provenance)
    write_profile(out, args.out)
    us = {k: round(v * 1e6, 2) for k, v in sorted(per_event.items())}
    print(f"{args.framework}: per call {per_call * 1e6:.1f} us, per event (us) {us}, "
          f"host_scale {host_scale:.3f} (leave-one-network-out median APE {cv:.1%}); "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
