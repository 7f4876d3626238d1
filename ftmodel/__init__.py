"""ftmodel: predict the inference latency of a PyTorch model per framework, device and batch size.

    >>> import ftmodel
    >>> p = ftmodel.predict_latency(model, "eager", "cpu", batch=8)   # doctest: +SKIP
    >>> p.latency_s, p.regime, p.framework_tax, p.crossover_batch      # doctest: +SKIP

Importing ftmodel never initialises CUDA.
"""

from ftmodel.api import (LayerCost, Prediction, Predictor, crossover_batch, load_profile,
                         predict_latency, trace)
from ftmodel.errors import (FrameworkUnsupported, FtmodelError, InvalidArgumentError,
                            ProfileError, TraceError, UnknownNameError)
from ftmodel.tracing.records import OpRecord, Trace

__version__ = "0.1.0"
__all__ = [
    "predict_latency", "crossover_batch", "trace", "load_profile", "Prediction", "LayerCost",
    "Predictor", "Trace", "OpRecord", "FtmodelError", "InvalidArgumentError", "UnknownNameError",
    "ProfileError", "FrameworkUnsupported", "TraceError", "__version__",
]
