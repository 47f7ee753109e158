"""Pure reward functions: Co-RL peer reward and the label-free / supervised baselines
(docs/reference.md#baselines-reward-per-completion); which one trains is chosen in :mod:`corl_vl.rewards.registry`.

Answer-based rewards take ``{problem_id: [K extracted answers]}`` and return ``{problem_id: [K floats]}``;
Intuitor and RENT take torch tensors and return one reward per sequence. None of them touch models or files.
"""

from corl_vl.rewards.co_rewarding import co_rewarding_i_rewards
from corl_vl.rewards.ground_truth import gt_rewards
from corl_vl.rewards.peer import check_same_ids, match_rewards, peer_pseudo_labels, peer_rewards
from corl_vl.rewards.self_rewards import (
    empo_rewards,
    intuitor_rewards,
    rent_rewards,
    token_entropy,
    token_self_certainty,
    ttrl_rewards,
)

__all__ = [
    "check_same_ids",
    "co_rewarding_i_rewards",
    "empo_rewards",
    "gt_rewards",
    "intuitor_rewards",
    "match_rewards",
    "peer_pseudo_labels",
    "peer_rewards",
    "rent_rewards",
    "token_entropy",
    "token_self_certainty",
    "ttrl_rewards",
]
