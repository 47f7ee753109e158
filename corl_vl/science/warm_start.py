"""Supervised warm start: give a tiny random model *partial, skill-specific* competence before label-free RL.

Why: Co-RL's claim (paper Thm. 1, §6) is about cohorts whose members are right on different problems. Random
models are right on nothing, so peer votes are noise and nothing can be shown. A short teacher-forced run on
*labelled* synthetic problems — many labels for the agent's strong skills, few for its weak ones — gives each
agent accuracies strictly between 0 and 1 that differ by skill: agent A good on S1 and weak on S2, B the
reverse. That is the complementary setting the theory predicts Co-RL can exploit and self-reward cannot.

Weak skills can also be given *systematic* errors (``weak_error_rate``): that share of a weak skill's labels
is replaced by the skill's consistent wrong answer (:attr:`Skill.mistake`, e.g. one side too many, the next
colour of the palette). The agent then learns a self-consistent wrong rule whose answer is its plurality on
that skill — the correlated errors that self-reward (TTRL) reinforces and a peer with decoupled errors can
correct. Sparse labels alone (``weak_fraction``) give *random* errors, which leave a peer nothing to fix that
the agent's own majority would not: the first toy attempt measured exactly that (benchmarks/science/README.md).

The loss is ``−mean`` of the target completion's token logprobs (token mean over the batch), computed through
the adapter (:meth:`ModelAdapter.completion_logprobs`), so any family the trainer drives can be warm-started
with the very prompt format it is later trained and evaluated with. Targets are short (``\\boxed{7}`` by
default) so that RL rollouts stay cheap (a handful of new tokens).

Deterministic by seed (weights, label subset, batch order); the result is a normal checkpoint folder cached
under ``cache_dir()/"warm_start"/<key>`` where the key hashes the spec, so it is built once and shared by the
demo, the toy reproduction and the tests.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.data.synth import generate_problems, get_skill, to_text_problem
from corl_vl.errors import CorlError
from corl_vl.paths import cache_dir
from model_adapters.presets import all_presets
from model_adapters.registry import create_adapter
from model_adapters.tiny import ensure_tiny
from model_adapters.vllm_layout import apply_to_folder

VERSION = 3  # bump when the recipe below changes: cached folders are keyed by it
DONE = "warm_start.json"  # written last inside the folder: its presence marks a complete build


@dataclass(frozen=True)
class WarmStartSpec:
    """What to warm-start and how; every field is part of the cache key.

    Attributes:
        model: preset name or checkpoint folder of the *base* model.
        strong_skills: skills labelled generously (``labels_per_skill`` labelled problems each).
        weak_skills: skills labelled sparsely (``weak_fraction × labels_per_skill`` each) — the agent ends up
            weak but not at zero on them, so per-skill accuracies lie strictly inside (0, 1).
        weak_fraction: share of labels a weak skill gets relative to a strong one.
        weak_error_rate: share of a weak skill's labels replaced by the skill's systematic wrong answer (seeded
            per problem); needs skills with a ``mistake`` rule (``shape_color``, ``shape_sides``).
        weak_error_rates: per-skill overrides of ``weak_error_rate`` (skill → share), e.g. one skill
            contested at a chosen accuracy while the others keep the common rate. A rate acts where its skill is
            weak (a strong skill's labels stay gold), so one mapping can serve a whole cohort. Left out of the
            cache key when empty, so the bases built before the field existed keep their folders.
        labels_per_skill: labelled problems per strong skill (the synthetic ``train`` split).
        text_view: train on the problems' text rendering (the picture described in words) instead of pixels;
            off by default (corl-vl is VLM first: the problems are pictures), on only as the text ablation.
        steps, batch_size, lr: the optimisation (AdamW, linear warm-up 10 %, cosine to 0, grad clip 1).
        seed: label subset, which weak labels are mistaken, batch order.
        init_seed: the random initialisation of a tiny preset (``model`` names one): another seed is another
            random network, so warm-start seeds differ in their starting weights too. Ignored for folders.
        data_seed: the synthetic generator seed of the labelled pool (keep it apart from the RL data seed).
        target: completion template; ``{answer}`` is replaced by the gold answer.
        adapter_kwargs: passed to the adapter (same as the cohort's agent config).
    """

    model: str
    strong_skills: tuple[str, ...]
    weak_skills: tuple[str, ...] = ()
    weak_fraction: float = 0.1
    weak_error_rate: float = 0.0
    labels_per_skill: int = 1024
    text_view: bool = False
    steps: int = 300
    batch_size: int = 16
    lr: float = 1e-3
    seed: int = 0
    init_seed: int = 0
    data_seed: int = 1000
    target: str = "\\boxed{{{answer}}}"
    adapter_kwargs: dict[str, Any] = field(default_factory=dict, hash=False)
    weak_error_rates: dict[str, float] = field(default_factory=dict, hash=False)

    def key(self) -> str:
        """Short stable hash of the spec (plus the recipe ``VERSION``) naming the cache folder."""
        data = dataclasses.asdict(self) | {"version": VERSION}
        if not self.weak_error_rates:  # absent → the key every spec had before the field existed
            del data["weak_error_rates"]
        digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=list).encode()).hexdigest()[:12]
        base = Path(self.model).name if Path(self.model).is_dir() else self.model
        return f"{base}-{digest}"


def labelled_pool(spec: WarmStartSpec) -> list[Problem]:
    """The labelled problems of ``spec``: every strong-skill problem, a seeded subset of each weak skill, a
    seeded ``weak_error_rate`` share of the weak skills' labels replaced by their systematic wrong answer
    (marked ``meta["label"] = "mistake"``; the others ``"gold"``)."""
    overlap = set(spec.strong_skills) & set(spec.weak_skills)
    if overlap:
        raise CorlError(f"warm start: skill(s) {sorted(overlap)} are both strong and weak")
    if not 0.0 <= spec.weak_fraction <= 1.0:
        raise CorlError(f"warm start: weak_fraction must be in [0, 1], got {spec.weak_fraction}")
    if not 0.0 <= spec.weak_error_rate <= 1.0:
        raise CorlError(f"warm start: weak_error_rate must be in [0, 1], got {spec.weak_error_rate}")
    check_error_rates(spec.weak_error_rates, (*spec.strong_skills, *spec.weak_skills))
    pool: list[Problem] = []
    rng = random.Random(f"corl-vl-warm-start:{spec.seed}")
    flip = random.Random(f"corl-vl-warm-start-mistakes:{spec.seed}")
    for skill in (*spec.strong_skills, *spec.weak_skills):
        n = spec.labels_per_skill
        if skill in spec.weak_skills:
            n = max(1, round(spec.weak_fraction * n)) if spec.weak_fraction > 0 else 0
        if n == 0:
            continue
        problems = generate_problems(n, seed=spec.data_seed, split="train", skills=[skill])
        mistake = get_skill(skill).mistake
        rate = spec.weak_error_rates.get(skill, spec.weak_error_rate)
        if skill in spec.weak_skills and rate > 0 and mistake is None:
            raise CorlError(
                f"warm start: skill {skill!r} has no systematic mistake rule (weak_error_rate > 0)"
            )
        for p in problems:
            wrong = skill in spec.weak_skills and flip.random() < rate
            answer = mistake(p.meta["params"]) if wrong and mistake is not None else p.answer
            q = to_text_problem(p) if spec.text_view else p
            pool.append(
                dataclasses.replace(
                    q, answer=answer, meta={**q.meta, "label": "mistake" if wrong else "gold"}
                )
            )
    rng.shuffle(pool)
    return pool


def check_error_rates(rates: Any, skills: Sequence[str]) -> None:
    """Refuse per-skill error rates that are not a mapping of one of ``skills`` to a share in [0, 1] (one line)."""
    if not isinstance(rates, dict):
        raise CorlError(f"warm start: weak_error_rates must map a skill to a share in [0, 1], got {rates!r}")
    for skill, rate in rates.items():
        if skill not in skills:
            raise CorlError(
                f"warm start: weak_error_rates names {skill!r}, which is not one of the skills {list(skills)}"
            )
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
            raise CorlError(f"warm start: weak_error_rates.{skill} must be a share in [0, 1], got {rate!r}")


def _initial_adapter(spec: WarmStartSpec) -> Any:
    """The adapter of the starting model: the tiny preset rebuilt with ``init_seed`` (cached), else ``spec.model``."""
    preset = all_presets().get(spec.model)
    if spec.init_seed and preset is not None and preset.tiny:
        path = ensure_tiny(spec.model, seed=spec.init_seed)
        return create_adapter(path, adapter=preset.adapter, **{**preset.defaults, **spec.adapter_kwargs})
    return create_adapter(spec.model, **spec.adapter_kwargs)


def target_text(spec: WarmStartSpec, problem: Problem) -> str:
    if problem.answer is None:
        raise CorlError(f"warm start: problem {problem.id} has no label")
    return spec.target.format(answer=problem.answer)


def target_ids(adapter: Any, text: str) -> list[int]:
    """The completion the model should write: the text's tokens, then the first stop token (so it learns to stop)."""
    ids = adapter.tokenizer(text, add_special_tokens=False)["input_ids"]
    return [*ids, adapter.stop_token_ids[0]]


def _lr_factor(step: int, steps: int) -> float:
    warmup = max(1, math.ceil(0.1 * steps))
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def train_warm_start(
    spec: WarmStartSpec, *, log_every: int = 0, device: str = "cpu"
) -> tuple[Any, Any, dict[str, Any]]:
    """Run the supervised warm start in memory; returns ``(adapter, model, record)``.

    ``record`` holds the loss curve (``losses``: mean loss per logging window), the first/last window losses,
    pool sizes per skill and the wall time — what :func:`ensure_warm_start` stores next to the weights.
    """
    # lazy: torch
    import torch

    adapter = _initial_adapter(spec)
    pool = labelled_pool(spec)
    if not adapter.supports_images:  # a text model reads the pictures described in words, as in training
        pool = [to_text_problem(p) if p.images else p for p in pool]
    if not pool:
        raise CorlError("warm start: no labelled problems (no strong skills and weak_fraction = 0?)")
    t0 = time.perf_counter()
    # encoded on first draw: a pool larger than steps × batch_size is never encoded whole
    encoded: dict[int, tuple[Any, list[int]]] = {}

    def example(i: int) -> tuple[Any, list[int]]:
        if i not in encoded:
            encoded[i] = (adapter.encode_prompt(pool[i]), target_ids(adapter, target_text(spec, pool[i])))
        return encoded[i]

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = adapter.load_model(device=device)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.0)
        order = random.Random(f"corl-vl-warm-start-batches:{spec.seed}")
        window: list[float] = []
        losses: list[float] = []
        every = log_every or max(1, spec.steps // 20)
        for step in range(spec.steps):
            idx = order.sample(range(len(pool)), min(spec.batch_size, len(pool)))
            batch = [example(i) for i in idx]
            scored = adapter.completion_logprobs(
                model, [b[0] for b in batch], [b[1] for b in batch], micro_batch_size=spec.batch_size
            )
            loss = -(scored.logprobs.sum() / scored.mask.sum().clamp(min=1))
            for group in optimizer.param_groups:
                group["lr"] = spec.lr * _lr_factor(step, spec.steps)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            window.append(float(loss.detach()))
            if len(window) == every or step == spec.steps - 1:
                losses.append(sum(window) / len(window))
                window = []
                if log_every:
                    print(f"  warm start {spec.key()}: step {step + 1}/{spec.steps} loss {losses[-1]:.3f}")
    model.eval()
    counts: dict[str, int] = {}
    mistakes: dict[str, int] = {}
    for p in pool:
        counts[p.meta["skill"]] = counts.get(p.meta["skill"], 0) + 1
        if p.meta.get("label") == "mistake":
            mistakes[p.meta["skill"]] = mistakes.get(p.meta["skill"], 0) + 1
    record = {
        "spec": dataclasses.asdict(spec),
        "key": spec.key(),
        "labels_per_skill": counts,
        "mistaken_labels": mistakes,
        "losses": losses,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return adapter, model, record


def warm_start_dir(spec: WarmStartSpec) -> Path:
    return cache_dir() / "warm_start" / spec.key()


def ensure_warm_start(spec: WarmStartSpec, *, log_every: int = 0) -> Path:
    """The cached warm-started checkpoint folder of ``spec``, trained on first use.

    Written into a temporary sibling and renamed into place, so a reader never sees a half-written
    checkpoint; a racing process that loses the rename discards its copy.
    """
    target = warm_start_dir(spec)
    if (target / DONE).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # processes asking for the same base (test workers, ranks) wait for the one that trains it, not train it too
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / DONE).exists():
            return target
        return _train_and_save(spec, target, log_every)


def _train_and_save(spec: WarmStartSpec, target: Path, log_every: int) -> Path:
    adapter, model, record = train_warm_start(spec, log_every=log_every)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        # the tensors in the layout vLLM loads (the adapter's hook)
        apply_to_folder(tmp, adapter.vllm_weights)
        adapter.processor.save_pretrained(tmp)
        for name in ("generation_config.json",):  # keep the base's stop tokens
            base = Path(adapter.model_path) / name
            if base.exists():
                shutil.copy(base, tmp / name)
        (tmp / DONE).write_text(json.dumps(record, indent=1))
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / DONE).exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def warm_start_record(path: str | Path) -> dict[str, Any]:
    """The record stored with a warm-started checkpoint (spec, losses, labels per skill, seconds)."""
    return json.loads((Path(path) / DONE).read_text())


def complementary_specs(
    models: Sequence[str], skill_sets: Sequence[Sequence[str]], **common: Any
) -> list[WarmStartSpec]:
    """One spec per model: model ``i`` is strong on ``skill_sets[i]`` and weak on every other set's skills."""
    if len(models) != len(skill_sets):
        raise CorlError(f"{len(models)} models but {len(skill_sets)} skill sets")
    specs = []
    for i, model in enumerate(models):
        weak = tuple(s for j, group in enumerate(skill_sets) if j != i for s in group)
        specs.append(
            WarmStartSpec(model=model, strong_skills=tuple(skill_sets[i]), weak_skills=weak, **common)
        )
    return specs
