"""One rank of tests/test_zero3_tail.py (run under ``torchrun``, gloo). Not a test module itself.

Usage: ``zero3_tail_worker.py OUT_DIR [even]``. One tiny Qwen2.5 in a DeepSpeed ZeRO-3 engine over both ranks (the
torchrun world is the agent's world), the logprob tail forced to 2 tokens per chunk; the ranks score DIFFERENT
numbers of completion tokens (10 on rank 0, 3 on rank 1: 5 chunks against 2) unless ``even``. Two steps of:
a no-grad scoring pass; the unchunked (textbook) loss, backward; the chunked tail's loss, backward; ``step``.
Both backward passes add into one step's gradient, so the chunked pass's head gradient is the difference of the
full gradient read after each. Every all-gather that fetches the LM head's weight is counted, per pass.
Results: ``OUT_DIR/rank-<r>.json`` (or ``error-<r>.txt`` with the exception).
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import traceback
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ["CORL_VL_LOGPROB_CHUNK_TOKENS"] = "2"

from corl_vl.paths import configure_cache_env

configure_cache_env()

ROOT = Path(__file__).resolve().parent.parent
COMPLETIONS = {0: [[5, 9, 13, 21, 8, 3, 17], [11, 4, 6]], 1: [[5, 9], [11]]}


def count_head_gathers(model, counter: dict[str, int]) -> None:
    """Wrap every parameter's ZeRO-3 all-gather entry points; count calls that fetch the (partitioned) head."""
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    weight = model.get_output_embeddings().weight

    def wrap(fn, first):
        def counted(*args, **kwargs):
            params = args[0] if args else kwargs.get("param_list", kwargs.get("params"))
            params = [first] if params is None else list(params)
            if any(p is weight for p in params) and weight.ds_status == ZeroParamStatus.NOT_AVAILABLE:
                counter["gathers"] += 1
            return fn(*args, **kwargs)

        return counted

    for p in model.parameters():
        p.all_gather = wrap(p.all_gather, p)
        p.all_gather_coalesced = wrap(p.all_gather_coalesced, p)


def textbook(adapter, engine, prompts, completions):
    """The unchunked tail: the whole batch's logits through the model's own head, fp32 log-softmax, gathered."""
    import torch

    batch = adapter.training_batch(prompts, completions)
    logp = torch.log_softmax(engine(**batch.inputs, use_cache=False).logits.float(), dim=-1)
    out = torch.zeros(len(completions), max(len(c) for c in completions))
    for i, c in enumerate(completions):
        start = int(batch.prompt_lengths[i]) - 1
        out[i, : len(c)] = logp[i, torch.arange(start, start + len(c)), torch.tensor(c)]
    return out


def run(out: Path, even: bool) -> dict:
    import torch
    import torch.distributed as dist
    from deepspeed.utils import safe_get_full_grad

    from corl_vl.data.problem import Problem
    from corl_vl.train.deepspeed_setup import AgentMPU, deepspeed_config, deepspeed_engine
    from model_adapters.registry import create_adapter

    rank = dist.get_rank()
    singles = [dist.new_group([r]) for r in range(2)]  # every rank takes part in every new_group
    mpu = AgentMPU(dist.group.WORLD, [0, 1], singles[rank], rank)
    adapter = create_adapter("tiny-qwen2.5")
    torch.manual_seed(0)
    model = adapter.load_model().train()
    config = deepspeed_config(
        str(ROOT / "configs" / "deepspeed" / "zero3.json"), zero_stage=3, grad_clip=1.0, group_size=2
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine = deepspeed_engine(model, optimizer, config, mpu)
    weight = model.get_output_embeddings().weight
    counter = {"gathers": 0}
    count_head_gathers(model, counter)
    problems = [Problem("a", "What is 2+2?"), Problem("b", "Compute 7*6, then add 6.")]
    prompts = [adapter.encode_prompt(p) for p in problems]
    completions = COMPLETIONS[0 if even else rank]
    weights = torch.randn(2, 7, generator=torch.Generator().manual_seed(1 + rank))
    seen: dict[str, list] = {"gathers": [], "logprob_gap": [], "grad_gap": [], "grad_norm": []}

    def gathers_of(fn):
        counter["gathers"] = 0
        value = fn()
        seen["gathers"].append(counter["gathers"])
        return value

    def loss_of(lp):
        return (weights[:, : lp.shape[1]] * lp).sum()

    for _ in range(2):
        with torch.no_grad():
            gathers_of(lambda: adapter.completion_logprobs(engine, prompts, completions))
        ref_lp = textbook(adapter, engine, prompts, completions)
        engine.backward(loss_of(ref_lp))
        ref_grad = safe_get_full_grad(weight).clone()

        def chunked():
            lp = adapter.completion_logprobs(engine, prompts, completions).logprobs
            engine.backward(loss_of(lp))
            return lp

        lp = gathers_of(chunked)
        grad = safe_get_full_grad(weight) - ref_grad
        seen["logprob_gap"].append(float((lp.detach() - ref_lp.detach()).abs().max()))
        seen["grad_gap"].append(float((grad - ref_grad).norm()))
        seen["grad_norm"].append(float(ref_grad.norm()))
        engine.step()
    return seen


def main(out: Path, even: bool) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    # a collective one rank skips hangs the other: dump every thread's stack and exit rather than wait forever
    hang_log = (out / f"hang-{rank}.txt").open("w")
    faulthandler.dump_traceback_later(
        float(os.environ.get("ZERO3_TAIL_HANG_S", "150")), exit=True, file=hang_log
    )
    try:
        seen = run(out, even)
    except Exception:  # the parent test reads the failure from the file
        (out / f"error-{rank}.txt").write_text(traceback.format_exc())
        raise
    faulthandler.cancel_dump_traceback_later()
    (out / f"rank-{rank}.json").write_text(json.dumps(seen))
    dist.destroy_process_group()


if __name__ == "__main__":
    from torchrun_launch import exit_without_teardown

    main(Path(sys.argv[1]), even=len(sys.argv) > 2 and sys.argv[2] == "even")
    exit_without_teardown()  # the results are written
