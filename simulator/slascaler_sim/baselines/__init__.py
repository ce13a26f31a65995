"""The autoscalers slascaler is measured against, each as its published algorithm.

One module per baseline, each citing the document or code it follows:
- `hpa`: the Kubernetes HPA (replica calculator, behaviour normalisation) and its two LLM
  recipes, HPA on queue length (`HPAController("queue", 5)`) and KEDA on TTFT;
- `llmd`: llm-d's SLO-aware KEDA recipe (`LlmdSLOController`);
- `dynamo`: NVIDIA Dynamo's planner, load-based mode, aggregated (`DynamoLoadPlanner`);
- `aibrix`: AIBrix's KPA, Knative's stable and panic windows (`KPAController`);
- `static`: static peak provisioning (`StaticController`) and the hindsight-best static
  configuration (`hindsight_best_static`);
- `oracle`: the bound, with the future known (`OracleController`, `oracle_requirements`);
- `profiling`: the runs at fixed counts that the oracle and the hindsight search share;
- `interface`: what a baseline may read and do (`FleetView`).

Every controller is called every `period_s` by the run loop with the fleet; it reads only
what its real counterpart would read and acts only by `fleet.scale`.
"""

from slascaler_sim.baselines.aibrix import KPAController
from slascaler_sim.baselines.dynamo import DynamoLoadPlanner
from slascaler_sim.baselines.hpa import QUEUE_TARGET_PER_POD, HPAController
from slascaler_sim.baselines.llmd import LlmdSLOController
from slascaler_sim.baselines.oracle import OracleController, oracle_requirements
from slascaler_sim.baselines.profiling import Requirements, StaticRuns, window_requirements
from slascaler_sim.baselines.static import StaticChoice, StaticController, hindsight_best_static

__all__ = [
    "QUEUE_TARGET_PER_POD",
    "DynamoLoadPlanner",
    "HPAController",
    "KPAController",
    "LlmdSLOController",
    "OracleController",
    "Requirements",
    "StaticChoice",
    "StaticController",
    "StaticRuns",
    "hindsight_best_static",
    "oracle_requirements",
    "window_requirements",
]
