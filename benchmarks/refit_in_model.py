"""Re-fit a calibrated CPU profile's eager in-model terms from its own synthetic-network samples.

    python benchmarks/refit_in_model.py P.json --forms device --out P-device.json
    python benchmarks/refit_in_model.py P.json --forms host --out P-host.json
    python benchmarks/refit_in_model.py P.json --against-curves --out P-refit.json

Each network sample of the profile's eager host part (``network``, ``host_s``, ``device_s``,
``bytes``, ``n_kernels``, ``time_s``; as the calibration recorded them, at the profile's speed)
is fitted again by :func:`ftmodel.calibration.networks.fit_in_model` with leave-one-network-out
choice among the candidate forms: ``device`` tries the forms that keep the host time as the
host programs price it (``DEVICE_SCALED_FORMS``), ``host`` those and the ones that also scale
it (``HOST_SCALED_FORMS``). Prints the score of every form and writes the profile with the
chosen terms, so that ``benchmarks/repredict.py`` can price measured points with either.
``--against-curves`` instead rebuilds the networks and fits the recorded times against the host
and device times the profile's own (re-expressed) curves predict for them, as a calibration does
since :func:`ftmodel.calibration.in_model_cpu.refit_in_model` (for profiles written before it;
networks the profile has no time for are left out), for every framework whose networks the
profile records (``--frameworks``: those named only). With ``--without-guards``, a framework's
guard prices (``FrameworkHost.guards``, inductor's) are dropped first and its host costs fitted
again to its programs' recorded times with their guards left in (their cost then falls to the
per-call cost, as before calibration measured guards): the same calibration without the guard
mechanism, to price measured points both ways. With ``--guards-in-model``, a framework's guard
rows are instead multiplied by the factor that fits its synthetic networks' own guards
(:func:`ftmodel.calibration.guards.in_model_guard_scale`, which a calibration does not apply;
the one thing timed: each network's guard event, at the machine's speed now, not the
profile's). Nothing else is timed.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.calibration.in_model_cpu import (InModelNetworks, in_model_networks,  # noqa: E402
                                                refit_profile)
from ftmodel.calibration.networks import (DEVICE_SCALED_FORMS, HOST_SCALED_FORMS,  # noqa: E402
                                          IN_MODEL_FORMS, fit_in_model)
from ftmodel.calibration.framework_host import fit_framework_costs  # noqa: E402
from ftmodel.calibration.guards import in_model_guard_scale, scaled_rows  # noqa: E402
from ftmodel.hardware.profile import HardwareProfile, read_profile, write_profile  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profile")
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--forms", choices=("device", "host"))
    how.add_argument("--against-curves", action="store_true")
    ap.add_argument("--out", required=True)
    ap.add_argument("--frameworks", default=None,
                    help="with --against-curves: comma-separated frameworks to refit")
    ap.add_argument("--without-guards", action="store_true",
                    help="with --against-curves: drop guard prices, refit host costs first")
    ap.add_argument("--guards-in-model", action="store_true",
                    help="with --against-curves: set guard prices to the networks' own level")
    args = ap.parse_args()
    prof = read_profile(args.profile)
    fh = prof.host.frameworks["eager"]
    if args.against_curves:
        quick = bool(prof.provenance.get("settings", {}).get("quick", False))
        # every framework whose networks the profile records times for
        fws = [f for f, h in prof.host.frameworks.items()
               if any("network" in s for s in h.samples)
               and (args.frameworks is None or f in args.frameworks.split(","))]
        if args.without_guards:
            prof = _without_guards(prof, fws)
        nets = {f: in_model_networks(prof, "cpu", quick, f) for f in fws}
        if args.guards_in_model:
            prof = _guards_in_model(prof, nets)
        out = refit_profile(prof, nets)
        for f in fws:
            refit = out.host.frameworks[f]
            print(f"{f} recorded: {dict(prof.host.frameworks[f].in_model)}")
            print(f"{f} refitted: {dict(refit.in_model)} over "
                  f"{sum('network' in s for s in refit.samples)} samples")
        write_profile(out, Path(args.out))
        print(f"wrote {args.out}")
        return
    rows = [s for s in fh.samples if "network" in s]
    if not rows:
        raise SystemExit(f"{args.profile} has no in-model network samples to fit")
    host, device, moved, measured = ([float(s[k]) for s in rows]
                                     for k in ("host_s", "device_s", "bytes", "time_s"))
    kernels = [int(s["n_kernels"]) for s in rows]
    groups = [str(s["network"]).split("@")[0] for s in rows]
    forms = DEVICE_SCALED_FORMS + (HOST_SCALED_FORMS if args.forms == "host" else ())
    for form in forms:  # each form against no correction, for the record
        only = fit_in_model(host, device, moved, kernels, measured, groups=groups,
                            forms=(form,))
        # a form that did not beat no correction comes back without its per-kind scales
        terms = ", ".join(f"{k} {only[k]:.3g}" for k in IN_MODEL_FORMS[form] if k in only)
        print(f"  {form:<7} leave-one-network-out median APE {only['cv_median_ape']:.3f} "
              f"[{terms}]")
    im = fit_in_model(host, device, moved, kernels, measured, groups=groups, forms=forms)
    print(f"chosen: {im} over {len(rows)} samples")
    eager = replace(fh, in_model=im)
    out = replace(prof, host=replace(prof.host,
                                     frameworks={**prof.host.frameworks, "eager": eager}))
    write_profile(out, Path(args.out))
    print(f"wrote {args.out}")


def _without_guards(prof: HardwareProfile, fws: list[str]) -> HardwareProfile:
    """``prof`` with the guard prices of ``fws`` dropped and their host costs fitted again to
    their programs' recorded times, guards left in."""
    assert prof.host is not None
    frameworks = dict(prof.host.frameworks)
    for f in fws:
        old = frameworks[f]
        programs = [s for s in old.samples if "program" in s]
        if not old.guards or not programs:
            continue
        per_event, per_call = fit_framework_costs(
            f, prof.device.type, [dict(s["events"]) for s in programs],
            [float(s["time_s"]) for s in programs])
        print(f"{f}: guards dropped; per call {old.per_call_s * 1e6:.1f} -> "
              f"{per_call * 1e6:.1f} us")
        frameworks[f] = replace(old, per_event_s=per_event, per_call_s=per_call, guards=())
    return replace(prof, host=replace(prof.host, frameworks=frameworks))


def _guards_in_model(prof: HardwareProfile,
                     nets: dict[str, InModelNetworks]) -> HardwareProfile:
    """``prof`` with each framework's guard rows set to its networks' measured guard level."""
    assert prof.host is not None
    frameworks = dict(prof.host.frameworks)
    for f, n in nets.items():
        old = frameworks[f]
        if not old.guards:
            continue
        scale, record = in_model_guard_scale(n.fns, n.programs, old.guards)
        print(f"{f}: guard prices x{scale:.2f} (constant {record['constant_s'] * 1e6:.1f} us) "
              f"from {len(record['networks'])} networks")
        frameworks[f] = replace(old, guards=scaled_rows(old.guards, scale))
    return replace(prof, host=replace(prof.host, frameworks=frameworks))


if __name__ == "__main__":
    main()
