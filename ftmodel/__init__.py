"""ftmodel: predict the inference latency of a PyTorch model per framework, device and batch size.

    >>> import ftmodel
    >>> p = ftmodel.predict_latency(model, "eager", "a100", batch=8)   # doctest: +SKIP
    >>> p.latency_s, p.regime, p.framework_tax, p.crossover_batch      # doctest: +SKIP

Importing ftmodel never initialises CUDA.
"""

from ftmodel.api import (DeviceSpec, HostSpec, LayerCost, Prediction, Predictor,
                         crossover_batch, load_profile, predict_latency, trace)
from ftmodel.errors import (BackendUnavailable, FrameworkUnsupported, FtmodelError,
                            InvalidArgumentError, MissingExtraError, ProfileError, TraceError,
                            UnknownNameError)
from ftmodel.hardware.registry import list_profiles
from ftmodel.oracle import CostOracle, OracleResult
from ftmodel.tools.compare import FrameworkComparison, compare_frameworks
from ftmodel.tracing.records import OpRecord, Trace
from ftmodel import inputs, search_space

__version__ = "0.1.0"
__all__ = [
    "predict_latency", "crossover_batch", "compare_frameworks", "CostOracle", "trace",
    "load_profile", "list_profiles", "Prediction", "LayerCost", "Predictor", "OracleResult",
    "FrameworkComparison", "DeviceSpec", "HostSpec", "Trace", "OpRecord", "inputs",
    "search_space",
    "FtmodelError", "InvalidArgumentError", "UnknownNameError", "ProfileError",
    "FrameworkUnsupported", "BackendUnavailable", "MissingExtraError", "TraceError",
    "__version__",
]
