"""Kept for existing imports: the oracle lives in `slascaler_sim.baselines.oracle`."""

from slascaler_sim.baselines.oracle import OracleController, oracle_requirements
from slascaler_sim.baselines.profiling import window_requirements

__all__ = ["OracleController", "oracle_requirements", "window_requirements"]
