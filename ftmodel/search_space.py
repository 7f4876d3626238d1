"""Search spaces the NAS oracle prices from configurations alone (``CostOracle.latencies(
configs, batches, space=space)``): the public home of :mod:`ftmodel.oracle.search_space`.

    >>> import random, ftmodel
    >>> space = ftmodel.search_space.MobileNetV2Space()
    >>> oracle = ftmodel.CostOracle("eager", "a100")
    >>> res = oracle.latencies([space.sample(random.Random(0))], [1, 8], space=space)  # doctest: +SKIP
    >>> res.latency_s.shape                                                            # doctest: +SKIP
    (1, 2)
"""

from ftmodel.oracle.search_space import (BASE_STAGES, DEPTHS, EXPANSIONS, KERNELS, WIDTHS,
                                         BlockConfig, CandidateConfig, MBConv, MobileNetV2Space,
                                         StageConfig, make_divisible)
from ftmodel.oracle.space_oracle import SearchSpace, SpaceResult

__all__ = ["BASE_STAGES", "DEPTHS", "EXPANSIONS", "KERNELS", "WIDTHS", "BlockConfig",
           "CandidateConfig", "MBConv", "MobileNetV2Space", "SearchSpace", "SpaceResult",
           "StageConfig", "make_divisible"]
