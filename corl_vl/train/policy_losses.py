"""Moved to :mod:`corl_vl.losses.policy_losses` (below the config checks, which read it); this name stays for
scripts that import it from here."""

from corl_vl.losses.policy_losses import POLICY_LOSSES

__all__ = ["POLICY_LOSSES"]
