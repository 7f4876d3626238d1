"""The cost oracle for hardware-aware NAS: :class:`CostOracle` and what it caches.

The oracle wraps a :class:`~ftmodel.api.Predictor` and reuses what candidates of one search
space share: block traces (:mod:`~ftmodel.oracle.trace_cache`, keyed by
:mod:`~ftmodel.oracle.structure`, traced per segment by :mod:`~ftmodel.oracle.segment_trace`),
lowered programs and per-kernel device times (:mod:`~ftmodel.oracle.device_cache`). Search
spaces to query it with live in :mod:`~ftmodel.oracle.search_space`.
"""

from ftmodel.oracle.cost_oracle import CacheInfo, CostOracle, Failure, OracleResult

__all__ = ["CacheInfo", "CostOracle", "Failure", "OracleResult"]
