"""Optional dependencies: which ``pip install 'ftmodel[<extra>]'`` brings each one.

ftmodel's core (tracing, the eager, TorchScript, inductor and CUDA-graph lowerings, the latency
model, built-in GPU profiles) needs torch, numpy, scipy and rich only. The rest is optional:

=============  ==========================================  ====================================
extra          packages                                    for
=============  ==========================================  ====================================
onnxruntime    onnx, onnxruntime, onnxscript               the ``onnxruntime`` framework (CPU)
gpu            onnx, onnxruntime-gpu, onnxscript,          NVML device detection, ONNX Runtime
               nvidia-ml-py                                on CUDA (use instead of onnxruntime)
zoo            torchvision, transformers, timm             the built-in model zoo and corpus
plot           matplotlib                                  plots of reports and validations
nas            optuna                                      the NAS examples
distributed    ray[tune], optuna                           examples/nas_ray.py (Ray Tune)
=============  ==========================================  ====================================
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ftmodel.errors import MissingExtraError

__all__ = ["EXTRA_OF", "require"]

# import name -> the extra that installs it
EXTRA_OF = {
    "onnx": "onnxruntime", "onnxruntime": "onnxruntime", "onnxscript": "onnxruntime",
    "pynvml": "gpu", "torchvision": "zoo", "transformers": "zoo", "timm": "zoo",
    "matplotlib": "plot", "optuna": "nas", "ray": "distributed",
}


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise :class:`~ftmodel.errors.MissingExtraError` naming the extra
    that installs it (``purpose``: what needs it, e.g. ``"the onnxruntime framework"``)."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        top = module.split(".")[0]
        if err.name is not None and err.name.split(".")[0] != top:
            raise  # the package is there but one of its own imports failed: show that
        raise MissingExtraError(top, EXTRA_OF.get(top, top), purpose) from None
