"""Moved to :mod:`corl_vl.losses.rollout_correction` (below the config checks, which read it); these names stay
for scripts that import them from here."""

from corl_vl.losses.rollout_correction import CORRECTIONS, MODES, Correction, resolve_correction

__all__ = ["CORRECTIONS", "MODES", "Correction", "resolve_correction"]
