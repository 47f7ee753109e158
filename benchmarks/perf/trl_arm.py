"""The TRL arm of ``vs_trl.py``: TRL's ``GRPOTrainer`` on the same model folder, problems and shape.

``--shape paper`` (run against TRL 1.16.0 on transformers 5.19): the processor's ``max_pixels`` and its
``size["longest_edge"]`` (a ``SizeDict`` in transformers 5, the one the processor reads) raised as corl-vl's
adapter option does, so TRL sees the same 1,008 × 1,008 pictures (5,184 patches each, counted by
``shapes.VisionCounter``); the drawn completion lengths forced by the same logits processor
(``shapes.force_lengths`` on the model TRL generates with); micro-batches of ``--micro-batch`` rows with
gradient accumulation over the step's batch (one generation and one optimizer step per step:
``steps_per_generation`` = ``gradient_accumulation_steps``, so TRL computes no separate old-logprob pass).

What TRL does per step at this shape (``GRPOTrainer`` source): every one of the K rows is a full prompt with
its own copy of the picture, in the rollout (``generate`` prefills each row, so the tower encodes K pictures)
and in the gradient pass (``_get_per_token_logps_and_entropies`` slices ``pixel_values`` per row: K more);
prompts are left-padded and completions right-padded to the micro-batch's longest, in arrival order.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

from shapes import (
    FAMILIES,
    PAPER_MAX_PIXELS,
    PaddingCounter,
    VisionCounter,
    force_lengths,
    majority_rewards,
    peak_rss_mb,
    problems,
    stated_answer,
)


def _dataset_rows(family: str, args: argparse.Namespace, adapter: Any) -> list[dict[str, Any]]:
    rows = []
    for p in problems(family, args.pool, args.shape):
        if family == "vl":  # corl-vl's messages; TRL puts the "image" column into the image part
            images = [adapter.prepare_image(im) for im in p.images]
            messages = adapter.build_messages(p, images)
            for message in messages:
                message["content"] = [
                    {k: v for k, v in part.items() if k != "image"} for part in message["content"]
                ]
            rows.append({"prompt": messages, "image": images[0]})
        else:  # the very string corl-vl renders: same prompt token ids
            rows.append({"prompt": adapter.render_prompt(p)[0]})
    return rows


def _config(args: argparse.Namespace) -> Any:
    from trl import GRPOConfig

    batch = args.problems * args.k
    micro = batch if args.shape == "tiny" else min(args.micro_batch, batch)
    return GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="vs-trl-"),
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=batch // micro,
        num_generations=args.k,
        steps_per_generation=batch // micro,
        num_iterations=1,
        max_completion_length=args.tokens,
        generation_kwargs={"min_new_tokens": args.tokens} if args.shape == "tiny" else {},
        beta=0.0,
        learning_rate=1e-6,
        temperature=1.0,
        top_p=1.0,
        max_steps=10_000,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        fp16=False,
        disable_tqdm=True,
        seed=0,
        remove_unused_columns=False,
        dataloader_num_workers=0,
    )


def _paper_shape(trainer: Any, adapter: Any, tokens: Any) -> None:
    """The paper-shape pictures corl-vl's adapter option keeps, kept in TRL's processor too, and the forced
    completion lengths both arms share."""
    image_processor = getattr(trainer.processing_class, "image_processor", None)
    if image_processor is not None:
        image_processor.max_pixels = PAPER_MAX_PIXELS  # transformers 5 reads ``size`` (a SizeDict)
        image_processor.size = type(image_processor.size)(
            **{**dict(image_processor.size), "longest_edge": PAPER_MAX_PIXELS}
        )
    banned = list(adapter.placeholder_token_ids)
    force_lengths(trainer.model, list(adapter.stop_token_ids), banned, tokens)


def trl_arm(family: str, args: argparse.Namespace, proto: Any, reply: Any) -> None:
    """TRL's GRPOTrainer; steps when the driver says so (a callback blocks at each step's start), so the arms
    interleave. Never returns."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from model_adapters.registry import create_adapter
    from model_adapters.tiny import ensure_tiny

    paper = args.shape == "paper"
    options = {"image_options": {"max_pixels": PAPER_MAX_PIXELS}} if paper and family == "vl" else {}
    adapter = create_adapter(FAMILIES[family], **options)

    def reward(prompts: Any, completions: Any, completion_ids: Any, **_: Any) -> list[float]:
        answers = [stated_answer(ids, j % args.k, args.shape) for j, ids in enumerate(completion_ids)]
        return majority_rewards(answers, args.k)

    batch = args.problems * args.k
    trainer = GRPOTrainer(
        model=str(ensure_tiny(FAMILIES[family])),
        reward_funcs=reward,
        args=_config(args),
        train_dataset=Dataset.from_list(_dataset_rows(family, args, adapter)),
    )
    if paper:
        _paper_shape(trainer, adapter, args.tokens)
    vision, padding = VisionCounter(trainer.model), PaddingCounter(trainer.model)
    spent = {"generate": 0.0, "score": 0.0}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t0

        return wrapper

    trainer._generate = timed("generate", trainer._generate)
    trainer._generate_and_score_completions = timed("score", trainer._generate_and_score_completions)

    class Driven(TrainerCallback):
        t0 = 0.0

        def on_train_begin(self, *a: Any, **k: Any) -> None:
            reply(proto, {"ready": True, "peak_rss_mb": peak_rss_mb()})

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            if sys.stdin.readline().strip() != "step":
                proto.flush()
                os._exit(0)
            spent.update(generate=0.0, score=0.0)
            vision.take(), padding.take()
            self.t0 = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            total = time.perf_counter() - self.t0
            logged = trainer._metrics["train"]
            reply(
                proto,
                {
                    "total": total,
                    "rollout": spent["generate"],
                    "reward": spent["score"] - spent["generate"],
                    "update": total - spent["score"],
                    "length_min": logged.get("completions/min_length", [float("nan")])[-1],
                    "length_max": logged.get("completions/max_length", [float("nan")])[-1],
                    "trained_rows": float(batch),
                    "peak_rss_mb": peak_rss_mb(),
                    "vision": vision.take(),
                    "padding_share": padding.take(),
                },
            )

    trainer.add_callback(Driven())
    trainer.train()
