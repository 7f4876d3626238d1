"""The cost oracle for hardware-aware NAS: :class:`CostOracle` and what it caches.

The oracle wraps a :class:`~ftmodel.api.Predictor` and reuses what candidates of one search
space share: block traces (:mod:`~ftmodel.oracle.trace_cache`, keyed by
:mod:`~ftmodel.oracle.structure`, traced per segment by :mod:`~ftmodel.oracle.segment_trace`),
lowered programs and per-kernel device times (:mod:`~ftmodel.oracle.device_cache`). Search
spaces to query it with live in :mod:`~ftmodel.oracle.search_space`; their candidates are
priced from configurations, never built (:mod:`~ftmodel.oracle.space_oracle`, composed from
block summaries by :mod:`~ftmodel.oracle.composed`).
"""

from ftmodel.oracle.cost_oracle import CacheInfo, CostOracle, Failure, OracleResult
from ftmodel.oracle.space_oracle import SpaceResult

__all__ = ["CacheInfo", "CostOracle", "Failure", "OracleResult", "SpaceResult"]
