"""``make demo``: real predictions in a table, on this machine's profile and built-in GPUs.

``ftmodel demo`` first calibrates this machine (``--quick``, 1-2 min on a 2-core machine) unless
its profile (``local-cpu``) is cached, then calls :func:`run_demo` with it; built-in GPU
profiles, where the installed version ships them, are shown too. This module only predicts.
"""

from __future__ import annotations

import os

from ftmodel.api import predict_latency
from ftmodel.hardware.profile import HardwareProfile
from ftmodel.hardware.registry import list_profiles, load_profile

__all__ = ["run_demo"]

DEMO_MODELS = ("resnet18@112", "bert-mini@64", "mlp-deep-narrow", "resnet50", "bert-base")
FULL_SIZE = ("resnet50", "bert-base")  # predicted on the built-in GPUs only
GPUS = ("rtx8000", "a100")


def run_demo(profile: str | os.PathLike[str] | HardwareProfile) -> int:
    """Print predictions of the demo models on ``profile`` (this machine's calibrated profile:
    a path, name or the profile itself) and on the built-in GPU profiles."""
    from rich.console import Console
    from rich.table import Table

    from ftmodel.tools.zoo import get_model
    console = Console()
    local = load_profile(profile)
    batches = [1, 2, 4, 8, 16, 32]
    targets: list[HardwareProfile | str] = [local]
    for e in list_profiles():
        if e.source == "builtin" and e.name.lower() in GPUS:
            targets.append(e.name)
    for model_name in DEMO_MODELS:
        zm = get_model(model_name)
        model = zm.build()
        for device in targets:
            if device is local and model_name in FULL_SIZE:
                continue
            preds = predict_latency(model, "eager", device, batches, inputs=zm.make_inputs)
            x = preds[0].crossover_batch
            t = Table(title=f"{model_name} · eager · {preds[0].device} (crossover batch "
                            f"{'-' if x is None else f'{x:.1f}'})")
            for col in ("batch", "latency ms", "host ms", "device ms", "regime", "tax",
                        "launches"):
                t.add_column(col, justify="right")
            for p in preds:
                t.add_row(str(p.batch), f"{p.latency_ms:.2f}", f"{p.overhead_s * 1e3:.2f}",
                          f"{p.compute_s * 1e3:.2f}", p.regime, f"{p.framework_tax:.0%}",
                          str(p.n_launches))
            console.print(t)
    return 0
