"""``make demo``: a short calibration of this machine, then real predictions in a table.

The calibration (``--quick``, 1-2 min on a 2-core machine) is cached as this machine's profile
(``local-cpu``) and reused by later runs; built-in GPU profiles, where the installed version
ships them, are shown too.
"""

from __future__ import annotations

from ftmodel.api import predict_latency
from ftmodel.errors import ProfileError
from ftmodel.hardware.registry import default_profile_path, list_profiles, load_profile

__all__ = ["run_demo"]


def run_demo(recalibrate: bool = False) -> int:
    from rich.console import Console
    from rich.table import Table

    from ftmodel.tools.zoo import get_model
    console = Console()
    path = default_profile_path("local-cpu")
    try:
        if recalibrate:
            raise ProfileError("recalibrate")
        load_profile(path)
        console.print(f"using this machine's profile {path}")
    except ProfileError:
        from ftmodel.calibration.suite import calibrate
        console.print("calibrating this machine (quick mode, 1-2 min on a 2-core machine) ...")
        calibrate("cpu", ("eager",), path, quick=True, threads=2)
        console.print(f"wrote {path}")
    batches = [1, 2, 4, 8, 16, 32]
    targets = [("local-cpu", "eager")]
    for e in list_profiles():
        if e.source == "builtin" and e.name.lower() in ("rtx8000", "a100"):
            targets.append((e.name, "eager"))
    for model_name in ("resnet18@112", "bert-mini@64", "mlp-deep-narrow", "resnet50",
                       "bert-base"):
        zm = get_model(model_name)
        model = zm.build()
        for gpu, fw in targets:
            if gpu == "local-cpu" and model_name in ("resnet50", "bert-base"):
                continue
            preds = predict_latency(model, fw, gpu, batches, inputs=zm.make_inputs)
            t = Table(title=f"{model_name} · {fw} · {gpu} (crossover batch "
                            f"{'-' if preds[0].crossover_batch is None else f'{preds[0].crossover_batch:.1f}'})")
            for col in ("batch", "latency ms", "host ms", "device ms", "regime", "tax",
                        "launches"):
                t.add_column(col, justify="right")
            for p in preds:
                t.add_row(str(p.batch), f"{p.latency_ms:.2f}", f"{p.overhead_s * 1e3:.2f}",
                          f"{p.compute_s * 1e3:.2f}", p.regime, f"{p.framework_tax:.0%}",
                          str(p.n_launches))
            console.print(t)
    return 0
