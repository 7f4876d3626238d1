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
from ftmodel.oracle.vit_space import (VIT_DEPTHS, VIT_DIMS, VIT_HEADS, VIT_MLP_RATIOS, ViTBlock,
                                      ViTBlockConfig, ViTConfig, ViTSpace)

__all__ = ["BASE_STAGES", "DEPTHS", "EXPANSIONS", "KERNELS", "WIDTHS", "BlockConfig",
           "CandidateConfig", "MBConv", "MobileNetV2Space", "SearchSpace", "SpaceResult",
           "StageConfig", "VIT_DEPTHS", "VIT_DIMS", "VIT_HEADS", "VIT_MLP_RATIOS", "ViTBlock",
           "ViTBlockConfig", "ViTConfig", "ViTSpace", "make_divisible"]
