"""Re-fit a GPU calibration's framework terms from the measurements its profile already holds.

    python benchmarks/refit_gpu_host.py benchmarks/results/gpu-h200/h200-profile-run3.json \\
        --frameworks inductor --out benchmarks/results/gpu-h200/h200-profile-run3-refit.json
    python benchmarks/refit_gpu_host.py benchmarks/results/gpu-h200/h200-profile-run3-refit.json \\
        --frameworks eager,cudagraphs,inductor --keep-costs \\
        --out benchmarks/results/gpu-h200/h200-profile-run3-refit-curves.json

A calibration keeps what it timed: every host program's event counts and time, and every
synthetic network's measured time and device time (``host.frameworks.<f>.samples``). When a fit
or the device curves change, this re-fits those samples without the GPU, for each framework in
the order given:

1. the per-event and per-call host costs from the programs
   (:func:`ftmodel.calibration.framework_host.fit_framework_costs`), unless ``--keep-costs``;
2. the device-side in-model terms (``device_scale``, ``per_byte_s``) from the networks' device
   times (CUDA-graph replays), the networks re-lowered as a prediction lowers them (inductor for
   a GPU without one: read off the CPU schedule) and priced on the profile's own device curves,
   as calibration fits them (:func:`ftmodel.calibration.in_model_gpu.fit_device_terms`); a
   framework with a network that was not captured keeps eager's terms, as calibration does;
3. the in-model ``host_scale`` from the networks' measured times.

Nothing new is measured; the provenance records each re-fit and the values it replaced.
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
from ftmodel.calibration.in_model_gpu import (  # noqa: E402
    NetworkRow,
    device_terms_of,
    fit_device_terms,
    fit_rows_host_scale,
    network_row,
)
from ftmodel.calibration.networks import synthetic_networks  # noqa: E402
from ftmodel.hardware.profile import (  # noqa: E402
    FrameworkHost,
    HardwareProfile,
    read_profile,
    write_profile,
)
from ftmodel.host_model import DEVICE_TERMS  # noqa: E402
from ftmodel.tracing.dispatch import trace  # noqa: E402


def _with_framework(prof: HardwareProfile, framework: str, fh: FrameworkHost) -> HardwareProfile:
    assert prof.host is not None
    return replace(prof, host=replace(prof.host, frameworks={**prof.host.frameworks,
                                                             framework: fh}))


def _network_rows(predictor: Predictor, samples: tuple[dict, ...]  # type: ignore[type-arg]
                  ) -> tuple[list[NetworkRow], list[float], list[float | None]]:
    """Each stored network re-lowered and priced by ``predictor``: its rows, measured times
    and device times (None where it was not captured)."""
    nets = {n.name: n for n in synthetic_networks(18)}
    rows, measured, device = [], [], []
    for s in samples:
        if "network" not in s:
            continue
        name, b = s["network"].rsplit("@b", 1)
        net, batch = nets[name], int(b)
        xs = net.make_inputs(batch)
        prog = predictor.framework.program(net.module, xs, batch, trace(net.module, xs),
                                           device="cuda", dtype="fp32")
        rows.append(network_row(predictor, prog, (name, batch)))
        measured.append(float(s["time_s"]))
        device.append(s.get("device_time_s"))
    return rows, measured, device


def refit(prof: HardwareProfile, framework: str, keep_costs: bool
          ) -> tuple[HardwareProfile, dict[str, object]]:
    """``prof`` with ``framework``'s terms re-fitted; what they were before."""
    assert prof.host is not None
    old = prof.host.frameworks[framework]
    per_event, per_call = dict(old.per_event_s), old.per_call_s
    programs = [s for s in old.samples if "program" in s]
    if not keep_costs and programs:
        per_event, per_call = fit_framework_costs(
            framework, "cuda", [dict(s["events"]) for s in programs],
            [float(s["time_s"]) for s in programs])
    partial = _with_framework(prof, framework, FrameworkHost(per_event, per_call, old.samples,
                                                             {}))
    rows, measured, device_t = _network_rows(Predictor(framework, partial), old.samples)
    device_terms = device_terms_of(old.in_model)
    dev_cv = None
    if rows and all(d is not None for d in device_t):
        dev_fit = fit_device_terms(rows, [float(d) for d in device_t if d is not None])
        device_terms = {k: dev_fit[k] for k in DEVICE_TERMS}
        dev_cv = dev_fit.get("cv_median_ape", 0.0)
    elif framework != "eager":  # calibration's rule for an uncaptured network
        device_terms = device_terms_of(prof.host.frameworks["eager"].in_model)
    host_scale, cv = fit_rows_host_scale(rows, measured, device_terms, per_call, partial)
    in_model = {**old.in_model, **device_terms, "host_scale": host_scale, "cv_median_ape": cv}
    if dev_cv is not None:
        in_model["device_cv_median_ape"] = dev_cv
    before = {"per_event_s": dict(old.per_event_s), "per_call_s": old.per_call_s,
              **{k: old.in_model.get(k) for k in (*DEVICE_TERMS, "host_scale", "cv_median_ape",
                                                    "device_cv_median_ape")}}
    fh = FrameworkHost(per_event, per_call, old.samples, in_model)
    print(f"{framework}: per call {per_call * 1e6:.1f} us, "
          f"device_scale {device_terms['device_scale']:.3f} "
          f"(was {old.in_model.get('device_scale', 1.0):.3f}), per_byte_s "
          f"{device_terms['per_byte_s']:.3g}, device fit error {dev_cv if dev_cv is not None else float('nan'):.1%}, "
          f"host_scale {host_scale:.3f} (was {old.in_model.get('host_scale', 1.0):.3f}; "
          f"leave-one-network-out median APE {cv:.1%})", flush=True)
    return _with_framework(prof, framework, fh), before


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--frameworks", "--framework", default="inductor",
                    help="comma-separated, re-fitted in this order (eager first)")
    ap.add_argument("--keep-costs", action="store_true",
                    help="keep the per-event and per-call host costs; re-fit the in-model terms")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    prof = read_profile(args.profile)
    assert prof.host is not None and prof.device.type == "cuda", "a GPU calibration's profile"
    refits = list(prof.provenance.get("refits", []))
    for framework in args.frameworks.split(","):
        prof, before = refit(prof, framework, args.keep_costs)
        refits.append({
            "framework": framework, "from": Path(args.profile).name,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "what": ("in-model device terms and host_scale" if args.keep_costs else
                     "per-event and per-call costs, in-model device terms and host_scale")
                    + " re-fitted from the stored samples by benchmarks/refit_gpu_host.py on "
                    "the device curves as this version prices them; nothing re-measured",
            "before": before})
    write_profile(replace(prof, provenance={**prof.provenance, "refits": refits}), args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
