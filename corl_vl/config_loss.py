"""Config checks of the loss menu (``grpo.policy_loss``, ``grpo.rollout_correction``, KL, entropy, overlong), in one
line each, before models load.

Why a module of its own: these rules read the loss tables (:mod:`corl_vl.losses.policy_losses`,
:mod:`corl_vl.losses.rollout_correction`, :mod:`corl_vl.losses.objectives`, none of which imports torch), and one of
them — no rollout correction with nucleus sampling — is a rule about the rollout as much as the loss.
"""

from __future__ import annotations

from typing import Any

from corl_vl.config_checks import Bad
from corl_vl.losses.objectives import KL_ESTIMATORS, KL_PLACEMENTS
from corl_vl.losses.policy_losses import POLICY_LOSSES
from corl_vl.losses.rollout_correction import CORRECTIONS, MODES

# why a correction refuses a truncated sampler (docs/training.md, "Policy losses and rollout corrections")
TOP_P_WHY = (
    "the rollout's logprobs are then those of the renormalised top-p distribution while the trainer's are of the "
    "full one, so every ratio is biased (the trainer does not replay the truncation)"
)


def correction_on(cfg: Any) -> str | None:
    """The first agent (name) whose rollout correction is on, as far as the config tells (None: none is).

    An unset mode with no cap set anywhere is the family's default, on for every shipped family."""
    grpo = cfg.grpo
    if grpo.rollout_correction == "none":
        return None
    for agent in cfg.agents:
        cap = (
            agent.importance_ratio_cap
            if agent.importance_ratio_cap is not None
            else grpo.importance_ratio_cap
        )
        if cap != 0:
            return agent.name or agent.model
    return None


def check_loss_menu(cfg: Any, bad: Bad) -> None:
    """The loss menu's names, ranges and combinations (raises ``bad(key, msg)``)."""
    grpo = cfg.grpo
    choices = {
        "grpo.policy_loss": (grpo.policy_loss, tuple(POLICY_LOSSES)),
        "grpo.kl_estimator": (grpo.kl_estimator, tuple(KL_ESTIMATORS)),
        "grpo.kl_placement": (grpo.kl_placement, KL_PLACEMENTS),
    }
    if grpo.rollout_correction is not None:
        choices["grpo.rollout_correction"] = (grpo.rollout_correction, MODES)
    for key, (value, allowed) in choices.items():
        if value not in allowed:
            raise bad(key, f"must be one of {', '.join(allowed)}, got '{value}'")
    for key in ("sapo_tau_pos", "sapo_tau_neg"):
        if getattr(grpo, key) <= 0:
            raise bad(f"grpo.{key}", f"must be > 0 (SAPO's gate temperature), got {getattr(grpo, key)}")
    for key in ("entropy_coef", "overlong_penalty"):
        if getattr(grpo, key) < 0:
            raise bad(f"grpo.{key}", f"must be ≥ 0, got {getattr(grpo, key)}")
    if not 0 <= grpo.overlong_buffer <= grpo.max_new_tokens:
        raise bad(
            "grpo.overlong_buffer",
            f"must be in [0, grpo.max_new_tokens={grpo.max_new_tokens}] (0 turns it off), got {grpo.overlong_buffer}",
        )
    mode = grpo.rollout_correction
    if mode not in (None, "none") and grpo.importance_ratio_cap == 0:
        raise bad(
            "grpo.importance_ratio_cap",
            f"0 turns the correction off, but grpo.rollout_correction is '{mode}': unset the cap (the mode's "
            "default threshold) or set grpo.rollout_correction: none",
        )
    if mode in CORRECTIONS and CORRECTIONS[mode].kind == "masked":
        caps = [("grpo.importance_ratio_cap", grpo.importance_ratio_cap)]
        caps += [(f"agents.{a.name}.importance_ratio_cap", a.importance_ratio_cap) for a in cfg.agents]
        for key, cap in caps:
            if cap not in (None, 0) and cap <= 1:
                raise bad(key, f"{mode} keeps ratios in [1/τ, τ], so its threshold τ must be > 1, got {cap}")
    on = correction_on(cfg)
    if grpo.top_p < 1 and on is not None:
        raise bad(
            "grpo.top_p",
            f"{grpo.top_p} < 1 with agent {on}'s rollout correction on: {TOP_P_WHY}; set grpo.top_p: 1, or "
            "grpo.rollout_correction: none",
        )
