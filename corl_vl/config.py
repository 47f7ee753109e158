"""Cohort configuration: dataclasses, YAML loading and ``--set a.b=c`` overrides.

Why typed dataclasses and a strict loader: a typo in a YAML key (``epsilom: 0.3``) must not silently train
with the default. Every key is checked against the dataclass fields and every value is coerced to the field's
type; anything else is a :class:`CorlError` naming the key and the file (or ``--set``).

Defaults are the paper's release hyper-parameters for VLM cohorts (docs/reference.md); text cohorts override
K, lengths and prompts per step in their YAML.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from corl_vl.config_compat import MOVED_KEYS, migrate
from corl_vl.config_validation import finalize
from corl_vl.errors import CorlError
from corl_vl.typed_yaml import build_dataclass, load_yaml, set_path

log = logging.getLogger("corl_vl.config")


@dataclass
class LoraConfig:
    """Low-rank adapters on one agent (``agents[i].lora``, corl_vl/train/lora.py); only the adapters train."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=list)  # [] → the adapter's defaults for its family


@dataclass
class AgentConfig:
    """One cohort member."""

    name: str = ""
    model: str = ""  # a preset name (``corl-vl models list``) or a local checkpoint folder
    adapter: str | None = None  # adapter name when ``model`` is a path the registry cannot infer
    adapter_kwargs: dict[str, Any] = field(
        default_factory=dict
    )  # passed to the adapter (image limits, dtype …)
    data_view: str | None = None  # paired (e.g. rephrased) view of the training data; None → the original
    lr: float | None = None  # None → train.lr
    importance_ratio_cap: float | None = None  # None → grpo's, else the adapter's default
    # YYYY-MM-DD the chat template's clock is pinned to (some templates stamp "Today Date"); None → the adapter's
    # default. `corl-vl train` writes the resolved date into the run's config.yaml.
    template_date: str | None = None
    gpus: int | None = None  # multi-process runs: GPUs (processes) for this agent; None → an equal share
    # one-process runs: this agent's device(s), e.g. ["cuda:1"]; None → placed over the visible devices
    devices: list[str] | None = None
    lora: LoraConfig | None = None  # train low-rank adapters (peft) instead of every weight

    def adapter_options(self) -> dict[str, Any]:
        """Keyword arguments for ``create_adapter``: ``adapter_kwargs`` plus the pinned template date."""
        options = dict(self.adapter_kwargs)
        if self.template_date is not None:
            options["template_date"] = self.template_date
        return options


@dataclass
class RewardConfig:
    """What each agent is rewarded by (``--baseline`` sets ``name``) and, for peer rewards, how votes become
    labels (:mod:`corl_vl.rewards.topology`, :mod:`corl_vl.rewards.supervision`)."""

    # a registered reward: co_rl | ttrl | intuitor | rent | empo | gt | co_rewarding_i | …
    name: str = "co_rl"
    # co_rl: hard (1 if = label) | soft (weighted share of peer votes for the answer)
    peer_reward: str = "hard"
    topology: str = "mutual"  # who supervises whom: mutual (N=2) | ring | all_peers | graph
    edges: dict[str, list[str]] = field(default_factory=dict)  # graph: agent → its supervisors
    ties: str = "none"  # what a tie gives: "none" (no label) or "first"
    min_share: float = 0.0  # no label when the top answer's vote share is below this
    # how much each supervisor's vote counts: uniform | agreement | dawid_skene (log-odds of label-free
    # reliability, corl_vl.rewards.reliability); min_weight_share: no label below this weighted winning share
    weighting: str = "uniform"
    min_weight_share: float = 0.0
    reliability_ema: float = 0.5  # weight of the past in the per-step reliability's moving average
    reliability_tag: str | None = None  # a problem meta key (e.g. "skill"): track reliability per its value
    # a reward from the user's own file, "path/to/file.py:function", loaded as trusted code (rewards/plugins.py)
    module: str | None = None
    # rewards added to the main one: [{name: format, weight: 0.1}, …], any registered reward
    combine: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class DataConfig:
    """The training problems every agent sees (by id), in a seeded order."""

    # "synthetic", a recipe (mmr1-math …), a hub id ORG/NAME[@split], or a file/folder
    train: str = "synthetic"
    split: str = "train"
    limit: int | None = None  # use the first N problems of the source (synthetic: how many to generate)
    problems_per_step: int = 8
    shuffle: bool = True
    seed: int = 0  # synthetic data's generator seed (the sampling order follows train.seed)
    # drop problems a rendered prompt is longer for (counted); None: keep all
    max_prompt_tokens: int | None = None
    # pixel budget per image for families that have one (e.g. dynamic-resolution towers); None → the family's
    max_pixels: int | None = None
    min_pixels: int | None = None


@dataclass
class GrpoConfig:
    """The policy update."""

    k: int = 4  # completions per problem
    epsilon: float = 0.2
    epsilon_high: float | None = None
    beta: float = 0.0  # KL to a frozen reference (0 → no reference model, as in the release)
    loss_type: str = "bnpo"  # bnpo | grpo | dr_grpo
    advantage: str = "grpo"  # grpo (std-scaled) | dr_grpo (centred only)
    importance_ratio_cap: float | None = None  # None → the adapter's default; 0 → no IS correction
    # the policy loss and the rest of the loss menu (docs/training.md "Trainer controls"); each off by default
    policy_loss: str = "ppo_clip"  # ppo_clip | gspo | cispo | sapo | gmpo (corl_vl/losses/policy_losses.py)
    sapo_tau_pos: float = 1.0  # SAPO's gate temperatures for positive / negative advantages
    sapo_tau_neg: float = 1.05
    # None → the family's (token_tis at its cap); none | token_tis | token_mask | seq_tis | seq_mask | geo_mask,
    # at the threshold importance_ratio_cap (unset: the mode's default)
    rollout_correction: str | None = None
    kl_estimator: str = "k3"  # k1 | k2 | k3
    kl_placement: str = "loss"  # loss | reward (β·Σ_t KL_t subtracted from each completion's reward)
    entropy_coef: float = 0.0  # entropy bonus: −coef·H_t in each token's loss
    # DAPO's soft overlong penalty over the last N tokens before max_new_tokens; 0: off
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0  # its factor: the reward of a completion at max_new_tokens drops by this
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    # no stop token before this many new tokens (every engine); benchmarks force a fixed length with it
    min_new_tokens: int = 0
    # completions per forward/backward on the trainer at the longest row's length; forwards are built by length
    # within that token budget (corl_vl/train/minibatches.py), so shorter rows may share a larger one
    micro_batch_size: int = 8
    # optimizer steps per rollout batch: the batch is split into this many mini-batches of whole groups
    updates_per_batch: int = 1
    # completions that hit max_new_tokens: keep | mask (no loss) | drop (out of the group)
    truncated: str = "keep"
    # draw more problems until every trained group's rewards vary, at most this many extra draws per step; 0: off
    dynamic_sampling: int = 0
    # completions sampled per problem for the vote (≥ k; only k are trained); None → k
    votes: int | None = None


@dataclass
class RolloutConfig:
    """How completions are sampled."""

    engine: str = "auto"  # hf | vllm | auto: vllm when installed and the model is ≥ vllm_min_params
    vllm_min_params: int = 20_000_000  # auto's threshold, from benchmarks/perf/vllm_vs_hf.py
    gpu_memory_utilization: float = 0.45  # vLLM colocated on GPU
    kv_cache_memory_bytes: int = 256 * 1024 * 1024  # vLLM on CPU (otherwise it reserves ~21 GiB)
    sleep_between_phases: bool = True  # vLLM on GPU: sleep during the update, wake for rollouts
    batch_size: int = 16  # prompts per HF generate call
    # vLLM TP groups of this many ranks inside each agent's group (multi-process)
    tensor_parallel_size: int = 1
    max_model_len: int | None = None  # vLLM context length; None → the longest prompt + grpo.max_new_tokens
    max_images_per_prompt: int = 1  # vLLM's per-prompt image limit
    weight_checksum: bool = False  # after each weight sync, compare a checksum of the engine's weights


@dataclass
class TrainConfig:
    """Optimisation, schedule, run bookkeeping."""

    max_steps: int = 100
    lr: float = 1e-6
    warmup_ratio: float = 0.03
    scheduler: str = "cosine"  # cosine | constant
    adam_betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    seed: int = 0
    save_every: int = 0  # 0 → only at the end
    output_dir: str = "runs/cohort"
    gradient_checkpointing: bool | None = None  # None → on when training on a GPU, off on CPU
    disable_dropout: bool = True  # zero every dropout probability at the start of training
    freeze: list[str] = field(default_factory=list)  # parts that do not train: vision_tower, projector, …
    # log the policy's entropy over every completion: one extra no-grad forward per agent and step (RENT and
    # Intuitor run that pass anyway, and then it is always logged)
    log_entropy: bool = False
    # run the agents' rollouts, then their updates, in concurrent threads (one process; results identical to
    # one after another at the same per-agent thread count); the faster default in benchmarks/perf/README.md
    parallel_agents: bool = True
    plot: bool = True  # PNG curves at the end of the run
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])  # tensorboard | wandb | none
    # warn when label/coverage or answer/parsed_frac stays 0 this long, stop at 2x; 0 = off
    stall_steps: int = 20
    log_completions: int = 0  # rows per agent and step written to completions.jsonl (and TensorBoard/wandb)
    save_total_limit: int = 0  # keep the newest N checkpoints (never best or latest's); 0 → keep all


@dataclass
class OptimizerConfig:
    """Where AdamW's state lives and which kernel steps it (the hyper-parameters stay in ``train``)."""

    offload: str = "none"  # none | cpu: keep master weights and moments in CPU memory, step there
    fused: bool | None = None  # None → the fused kernel where the device has one


@dataclass
class DistributedConfig:
    """Multi-process runs (``torchrun`` / ``accelerate launch``): each agent a DeepSpeed engine on its own ranks.

    Only read when the launch has more than one process; a plain process runs every agent in turn with torch
    optimizers. Each agent gets ``agents[i].gpus`` ranks, placed node by node (:mod:`corl_vl.train.rank_placement`).
    """

    # DeepSpeed JSON (configs/deepspeed/zero2.json | zero3.json); needed if > 1 proc
    deepspeed: str | None = None
    zero_stage: int | None = None  # overrides the JSON's zero_optimization.stage (1, 2 or 3)
    backend: str = "auto"  # torch.distributed backend: auto (nccl on GPU, gloo on CPU) | gloo | nccl


@dataclass
class EvalConfig:
    """Periodic validation during training (:mod:`corl_vl.train.validation`)."""

    every: int = 0  # 0 → off
    source: str | None = None  # "synthetic", a file or a dataset folder; None → data.train
    split: str = "validation"  # a test split only when named here (selecting on test leaks, docs/training.md)
    limit: int | None = None
    max_new_tokens: int = 512
    select_best: str = "none"  # none | peer_agreement (label-free) | accuracy (labelled validation set)
    at_start: bool = False  # also validate before the first step


@dataclass
class HeldoutConfig:
    """An experiment's held-out yardstick: greedy accuracy per skill on synthetic test problems."""

    per_skill: int = 64
    seed: int = 0
    max_new_tokens: int = 10
    every: int = 0  # also evaluate every N steps (0: before and after only)


@dataclass
class ExperimentConfig:
    """Optional: the agents start from warm-started bases (each strong on its own skills, labelled problems,
    built once and cached) and train on synthetic problems of those skills (:mod:`corl_vl.experiment`).

    Why: random tiny models never answer, so a cohort of them gets no labels and trains nothing; warm-started
    bases answer, disagree where their skills differ, and learn from each other (``corl-vl demo``)."""

    # skill_sets: one list of strong skills per agent; the other keys are warm-start settings (WarmStartSpec)
    warm_start: dict[str, Any] = field(default_factory=dict)
    heldout: HeldoutConfig = field(default_factory=HeldoutConfig)
    # agent name → its own warm-start changes; an agent whose skill set is [] is strong on every skill with
    # these changes (e.g. a collapsed agent that always answers the same: target "\\boxed{{3}}"); its own
    # strong_skills / weak_skills (lists of the cohort's skills) replace those its skill set gives
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def skill_sets(self) -> list[list[str]]:
        return [list(group) for group in self.warm_start.get("skill_sets", [])]

    @property
    def contested_skills(self) -> list[str]:
        """Skills every agent is weak on (no agent's strong skill): each agent's accuracy on them is set by its
        own ``weak_error_rates`` (``experiment.agents.<name>``), as in the separatrix grid."""
        return list(self.warm_start.get("contested_skills", []))

    @property
    def skills(self) -> list[str]:
        return [*(s for group in self.skill_sets for s in group), *self.contested_skills]

    @property
    def text_view(self) -> bool:
        """Problems shown as text (the picture in words) rather than pictures: one choice for the warm start,
        the training problems and the held-out set alike. Pictures unless ``warm_start.text_view: true`` asks
        for the text ablation."""
        return bool(self.warm_start.get("text_view", False))


@dataclass
class CohortConfig:
    agents: list[AgentConfig] = field(default_factory=list)
    reward: RewardConfig = field(default_factory=RewardConfig)
    data: DataConfig = field(default_factory=DataConfig)
    grpo: GrpoConfig = field(default_factory=GrpoConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    experiment: ExperimentConfig | None = None

    def agent_names(self) -> list[str]:
        return [a.name for a in self.agents]


# ---------------------------------------------------------------------------------------------------- loading


def load_config(path: str | Path, overrides: list[str] | None = None) -> CohortConfig:
    """Read a YAML config (a cohort, optionally with an ``experiment:`` section), apply ``--set key=value``
    overrides, validate."""
    # lazy: config-path
    from corl_vl.io import read_text_file

    path = Path(path)
    try:
        raw = load_yaml(read_text_file(path, "config"), str(path))
    except FileNotFoundError:
        raise CorlError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise CorlError(f"{path}: is a folder; --config takes a YAML file") from None
    except yaml.YAMLError as err:
        line = getattr(getattr(err, "problem_mark", None), "line", None)
        where = f"{path}:{line + 1}" if line is not None else str(path)
        raise CorlError(f"invalid YAML in {where}: {getattr(err, 'problem', err)}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise CorlError(f"{path}: the top level must be a mapping of sections (agents, grpo, train, …)")
    cfg = build_dataclass(CohortConfig, migrate(raw, str(path)), "", str(path))
    return finalize(apply_overrides(cfg, overrides or []), str(path))


def config_from_dict(raw: dict[str, Any], source: str = "<dict>") -> CohortConfig:
    """Same checks as :func:`load_config` for an in-memory mapping (tests, ``--pair``)."""
    return finalize(build_dataclass(CohortConfig, migrate(raw, source), "", source), source)


def pair_config(presets: list[str], overrides: list[str] | None = None) -> CohortConfig:
    """A cohort of the given presets with default hyper-parameters (``corl-vl train --pair a,b[,c]``)."""
    if len(presets) < 2 or any(not p for p in presets):
        raise CorlError("--pair needs at least two comma-separated preset names, e.g. --pair a,b")
    names = _unique_names(presets)
    raw = {
        "agents": [{"name": n, "model": p} for n, p in zip(names, presets)],
        "reward": {"topology": "mutual" if len(presets) == 2 else "ring"},
    }
    cfg = build_dataclass(CohortConfig, raw, "", "--pair")
    return finalize(apply_overrides(cfg, overrides or []), "--pair")


def apply_overrides(cfg: CohortConfig, overrides: list[str]) -> CohortConfig:
    """Apply ``a.b=c`` strings; ``agents.<index|name>.field=value`` addresses one agent."""
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CorlError(f"--set expects key=value, got '{item}'")
        if key in MOVED_KEYS:
            log.warning("--set %s is deprecated; use --set %s", key, MOVED_KEYS[key])
            key = MOVED_KEYS[key]
        try:
            value = load_yaml(text, f"--set {key}") if text.strip() else None
        except yaml.YAMLError:
            value = text
        set_path(cfg, key.split("."), value, key)
    return cfg


# ------------------------------------------------------------------------------------------- typed building


def _unique_names(presets: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    names = []
    for p in presets:
        base = p.rstrip("/").split("/")[-1]
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return names


def to_dict(cfg: CohortConfig) -> dict[str, Any]:
    """Plain-data form (written next to a run as ``config.yaml``)."""
    data = dataclasses.asdict(cfg)
    data["train"]["adam_betas"] = list(cfg.train.adam_betas)
    return data
