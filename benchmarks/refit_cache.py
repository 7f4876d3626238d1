"""Re-fit a CPU calibration's cache model from the cache probe its profile already holds.

    python benchmarks/refit_cache.py benchmarks/results/cpu-xeon/cpu-profile-x14.json \\
        --out benchmarks/results/cpu-xeon/cpu-profile-x14-refit.json

A calibration keeps the cache probe it timed (``provenance.cache_probe``: a chain of layers
streaming their weights, per-layer times by chain length, one layer hot and flushed). When the
fit changes (:func:`ftmodel.calibration.cache.fit_cache_model`; it now also records
``cold_s_per_byte``), this fits those times again, without measuring anything, and writes the
profile with the new ``device.cache``. The probe's times are at the calibration's starting speed
(``provenance.speed.start_reference_s`` where the profile was re-expressed at another speed at
its end), so ``cold_s_per_byte`` is re-expressed as the rest of the profile was. The provenance
(``refits``) records the re-fit and the values it replaced.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.calibration.cache import fit_cache_model  # noqa: E402
from ftmodel.hardware.rescale import cache_at  # noqa: E402
from ftmodel.hardware.profile import read_profile, write_profile  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("profile", help="a calibrated CPU profile with provenance.cache_probe")
    ap.add_argument("--out", required=True, help="where to write the re-fitted profile")
    args = ap.parse_args(argv)
    profile = read_profile(args.profile)
    probe = profile.provenance.get("cache_probe")
    if not probe:
        print(f"error: {args.profile} holds no cache probe (provenance.cache_probe): it was "
              "calibrated without a cache flush or on a GPU; calibrate again with "
              "`ftmodel calibrate --device cpu`", file=sys.stderr)
        return 2
    speed = profile.provenance.get("speed", {})
    start, now = speed.get("start_reference_s"), speed.get("reference_s")
    factor = float(now) / float(start) if start and now else 1.0
    fit = fit_cache_model(probe)
    # a framework's own entries (``<framework>/...``, its runtime's probe) are kept as they are
    cache = {**cache_at(fit, factor),
             **{k: v for k, v in profile.device.cache.items() if "/" in k}}
    refits = list(profile.provenance.get("refits", []))
    refits.append({
        "from": Path(args.profile).name,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "what": "device.cache re-fitted from provenance.cache_probe by "
                "benchmarks/refit_cache.py; nothing re-measured",
        "before": dict(profile.device.cache)})
    out = replace(profile, device=replace(profile.device, cache=cache),
                  provenance={**profile.provenance, "refits": refits})
    write_profile(out, args.out)
    print(f"wrote {args.out}: cache {', '.join(f'{k}={v:.4g}' for k, v in cache.items())} "
          f"(was {', '.join(f'{k}={v:.4g}' for k, v in profile.device.cache.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
