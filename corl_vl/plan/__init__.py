"""Memory plans: what one cohort config needs per agent and GPU, before any model loads (``corl-vl plan``).

:func:`plan_for_config` is the entry point the trainer can call first (``plan.fits``, ``plan.first_fix``);
:mod:`corl_vl.plan.arithmetic` holds the pure byte arithmetic it is made of.
"""

from .cohort_plan import plan_for_config
from .model import Plan
from .planner import parse_memory

__all__ = ["Plan", "parse_memory", "plan_for_config"]
