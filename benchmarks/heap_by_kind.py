"""Page faults per call of a model in a plain process, measured, against the glibc heap
simulation of the same program split by what allocates: kernels' own scratch buffers (a oneDNN
convolution's reordered weights and blocked output, a prepacked convolution's weight copy) and
the program's tensor storages (for inductor: its wrapper's buffers).

    python benchmarks/heap_by_kind.py tcn-6x128@1024 --batches 1,4,16 --framework inductor
    python benchmarks/heap_by_kind.py benchmarks/raw_waveform_nets.py:m11 --input-shape 1x8000 \\
        --profile benchmarks/results/cpu-epyc/cpu-profile-110.json

The model is a corpus name (``ftmodel.tools.corpus``) or ``file.py:factory`` with
``--input-shape`` (one sample's shape). Run it alone: it measures faults with
``getrusage`` around 10 calls per batch, after 5 warm-up calls, batches in the order given (as
the corpus's measuring processes run them), in this process with glibc's default settings. The
simulation is the one predictions use (:func:`ftmodel.estimate.allocator.allocation_faults`,
from the profile's thresholds), run here for every framework, including those whose
predictions leave it out (inductor: ``Framework.allocations_known`` is false). Allocations of
over 100 pages are listed.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.estimate.allocator import Allocation, allocation_faults  # noqa: E402
from ftmodel.frameworks.base import FRAMEWORKS, canonical_framework, get_framework  # noqa: E402
from ftmodel.hardware.registry import load_profile  # noqa: E402
from ftmodel.program import Kernel  # noqa: E402
from ftmodel.tools.corpus import get_corpus_model  # noqa: E402
from ftmodel.tools.user_models import load_model, parse_input_shape  # noqa: E402
from ftmodel.tools.validation import framework_call  # noqa: E402
from ftmodel.tracing.inputs import InputSpec  # noqa: E402


def _model(spec: str, shape: str | None) -> tuple[torch.nn.Module, InputSpec]:
    """A corpus model by name, else any spec ``ftmodel validate`` takes (``file.py:factory``
    with ``--input-shape``, ``timm:...``)."""
    if ":" not in spec:
        zm = get_corpus_model(spec)
        return zm.build().eval(), zm.make_inputs
    return load_model(spec, input_shape=parse_input_shape(shape) if shape else None)


def measured_faults(model: torch.nn.Module, inputs: InputSpec, framework: str,
                    batch: int) -> float:
    """Minor page faults per call of ``model`` under ``framework`` at ``batch``, here."""
    fn = framework_call(get_framework(framework), model, inputs, batch)
    for _ in range(5):
        fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10


def simulated_by_kind(kernels: tuple[Kernel, ...], predictor: Predictor
                      ) -> tuple[int, int, list[tuple[Kernel, Allocation, int]]]:
    """(scratch pages, storage pages, the allocations of over 100 pages) of a simulated
    steady-state pass; scratch buffers are the allocations with negative ids."""
    faults = allocation_faults(kernels, predictor.malloc)
    scratch = sum(n for a, n in faults if a.sid < 0)
    storage = sum(n for a, n in faults if a.sid >= 0)
    return scratch, storage, [(kernels[a.start], a, n) for a, n in faults if n > 100]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a corpus model name, or file.py:factory")
    ap.add_argument("--input-shape", default=None, help="one sample's shape, e.g. 1x16000")
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--framework", default="inductor")
    ap.add_argument("--profile", default=str(ROOT / "benchmarks/results/cpu-epyc/"
                                             "cpu-profile-110.json"))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, make = _model(args.model, args.input_shape)
    batches = [int(b) for b in args.batches.split(",")]
    measured = {b: measured_faults(model, make, args.framework, b) for b in batches}
    name = canonical_framework(args.framework)
    FRAMEWORKS[name] = dataclasses.replace(FRAMEWORKS[name], allocations_known=True)
    predictor = Predictor(name, load_profile(args.profile), heap="plain")
    for b in batches:
        program = predictor.lower(model, make, b, predictor.trace(model, make, b))
        scratch, storage, large = simulated_by_kind(program.kernels, predictor)
        print(f"{args.model} {name} batch {b}: measured {measured[b]:.0f} faults per call; "
              f"simulated {scratch + storage} ({scratch} kernels' scratch, {storage} storages; "
              f"{len(program.kernels)} kernels)")
        for k, a, pages in large:
            kind = "scratch" if a.sid < 0 else "storage"
            print(f"    {k.module_path or '-'} {k.op_class}:{k.variant} {kind} "
                  f"{a.size_bytes / 2**20:.1f} MiB: {pages} pages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
