"""Agents on disjoint rank groups: placement, the mpu guard, and a real 2-process ZeRO-2 cohort on gloo.

The 2-process run (``torchrun``, one tiny text agent per process, each a DeepSpeed ZeRO-2 engine with its own
AdamW) is compared with the single-process run of the same config and seeds. Rollouts, answers, labels,
rewards and every reward/label/length metric match exactly; the update agrees to float rounding only, because
DeepSpeed clips with a grad norm it computes over its flat fp32 partition (≈ 1e-5 relative from torch's
per-tensor norm), and the step-2 IS statistics inherit that 1e-8 weight difference.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from fork_launch import fork_launch
from torchrun_launch import torchrun

from corl_vl.errors import CorlError
from corl_vl.train.deepspeed_setup import AgentMPU, deepspeed_engine
from corl_vl.train.rank_placement import place

TESTS = Path(__file__).resolve().parent
EXACT = ("reward/", "label/", "peer/", "groups/", "length/", "answer/", "trained_rows", "lr")


def test_two_agents_on_four_ranks_of_one_node_get_disjoint_contiguous_groups():
    assert place([None, None], [[0, 1, 2, 3]]).groups == [[0, 1], [2, 3]]
    assert place([None, None, None], [[0, 1, 2]]).groups == [[0], [1], [2]]
    assert place([None, None], [[0, 1, 2]]).groups == [[0, 1], [2]]  # uneven: the first agent gets one more
    with pytest.raises(CorlError, match="no GPU left"):
        place([None, None, None], [[0, 1]])


def test_mpu_answers_with_the_agents_group_and_a_single_rank_model_group():
    mpu = AgentMPU("group-of-agent-1", [2, 3], "rank-3-alone", rank=3)
    assert mpu.get_data_parallel_group() == "group-of-agent-1"
    assert (mpu.get_data_parallel_world_size(), mpu.get_data_parallel_rank()) == (2, 1)
    assert mpu.get_data_parallel_group_ranks() == [2, 3]
    assert mpu.get_model_parallel_group() == mpu.get_tensor_model_parallel_group() == "rank-3-alone"
    assert (mpu.get_model_parallel_world_size(), mpu.get_model_parallel_rank()) == (1, 0)


def test_an_engine_without_mpu_is_refused():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    with pytest.raises(CorlError, match="without the agent's mpu"):
        deepspeed_engine(model, opt, {"train_micro_batch_size_per_gpu": 1}, None)


@contextlib.contextmanager
def one_thread():
    """The in-process reference at the workers' thread count (``OMP_NUM_THREADS=1`` in their environment): a
    float sum's order, and so its last bits, depends on the number of threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _records(run: Path, agent: str) -> list[dict]:
    return [json.loads(line) for line in (run / "agents" / agent / "metrics.jsonl").read_text().splitlines()]


def _launch(
    out: Path,
    *args: str,
    env: dict,
    timeout: float = 600,
    nproc: int = 2,
    command: list[str] | None = None,
    output: list[str] | None = None,
) -> float:
    """dist_worker.py on ``nproc`` ranks forked from a pre-imported process (tests/fork_launch.py), or a real
    ``torchrun`` of ``command`` (a module and its arguments); returns seconds. ``output``: a list that receives
    the run's whole stdout and stderr (also when it failed).

    A hang fails the test: the ranks (or the launcher's whole process group: its own session, torchrun and its
    workers, nothing else) get SIGTERM — each worker then prints its stack (faulthandler) — then SIGKILL.
    """
    t0 = time.perf_counter()
    if command is None:
        try:
            done = fork_launch(
                TESTS / "dist_worker.py",
                str(out),
                *args,
                env=env,
                nproc=nproc,
                timeout=timeout,
                logs=out.parent / f"{out.name}-logs",
            )
        except TimeoutError as hung:
            pytest.fail(str(hung))
        returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
    else:
        returncode, stdout, stderr = _torchrun(command, env, timeout, nproc)
    if output is not None:
        output += [stdout, stderr]
    assert returncode == 0, stdout[-3000:] + stderr[-5000:]
    return time.perf_counter() - t0


def _torchrun(command: list[str], env: dict, timeout: float, nproc: int) -> tuple[int, str, str]:
    proc = subprocess.Popen(
        torchrun(*command, nproc=nproc),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            stdout, stderr = proc.communicate(timeout=15)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"{nproc}-process run hung for {timeout} s:\n{stderr[-8000:]}")
    return proc.returncode, stdout, stderr


def _assert_metrics_match(got: list[dict], want: list[dict], agent: str) -> None:
    """Reward/label/length metrics exactly equal; update metrics to float rounding (DeepSpeed's flat grad norm)."""
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for key, value in w.items():
            if key.startswith("time/") or value is None:
                continue
            if key.startswith(EXACT):
                assert g[key] == value, (agent, g["step"], key)
            else:
                assert math.isclose(g[key], value, rel_tol=1e-4, abs_tol=1e-6), (agent, g["step"], key)


@pytest.mark.distributed
def test_two_process_zero2_cohort_matches_the_single_process_run(tmp_path):
    from dist_worker import run_worker
    from safetensors.torch import load_file

    dist_out, single_out = tmp_path / "dist", tmp_path / "single"
    dist_out.mkdir()
    single_out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}  # cold cache
    _launch(dist_out, env=env)
    assert not list((tmp_path / "ext").glob("**/*.so"))  # no DeepSpeed op was compiled (shm_comm skipped)
    with one_thread():
        reference = {r["agent"]: r for r in run_worker(single_out)}

    ranks = [json.loads((dist_out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [len(r) for r in ranks] == [1, 1]  # each rank owns exactly one agent
    r0, r1 = ranks[0][0], ranks[1][0]
    assert (r0["agent"], r0["group_ranks"], r1["agent"], r1["group_ranks"]) == ("qwen", [0], "llama", [1])
    assert r0["deepspeed"] and r1["deepspeed"] and r0["world_size"] == r1["world_size"] == 2
    for rec in (r0, r1):  # both agents really trained
        assert rec["changed_tensors"] > rec["tensors"] // 2, rec
    single_steps = reference["qwen"]["steps"]
    assert len(r0["steps"]) == len(r1["steps"]) == len(single_steps) == 2
    for s0, s1, ref in zip(r0["steps"], r1["steps"], single_steps):
        ids = ref["answer_ids"]["qwen"]
        assert len(ids) == 2
        for step in (s0, s1):  # every rank received every agent's answers, keyed by the same ids
            assert step["answer_ids"] == {"qwen": ids, "llama": ids}
            assert step["labels"] == ref["labels"]  # pseudo-labels identical on every rank and to 1 process
    assert any(
        label is not None
        for step in single_steps
        for lab in step["labels"].values()
        for label in lab.values()
    )

    for agent in ("qwen", "llama"):
        got, want = _records(dist_out / "run", agent), _records(single_out / "run", agent)
        assert [r["step"] for r in got] == [0, 1]
        assert sum(r["trained_rows"] for r in got) > 0
        _assert_metrics_match(got, want, agent)
        a = load_file(str(dist_out / "run" / "checkpoints" / "step-000002" / agent / "model.safetensors"))
        b = load_file(str(single_out / "run" / "checkpoints" / "step-000002" / agent / "model.safetensors"))
        assert a.keys() == b.keys() and max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-5
    ckpt = dist_out / "run" / "checkpoints" / "step-000002"
    assert json.loads((ckpt / "meta.json").read_text())["world_size"] == 2
    assert (ckpt / "rng" / "rank-1.json").exists() and (ckpt / "rng" / "rank-1.safetensors").exists()
    # training state beside the model folder
    assert (ckpt / "state" / "llama" / "deepspeed" / "state").is_dir()
    assert not list((ckpt / "llama").glob("trainer_state*"))


@pytest.mark.distributed
def test_two_process_zero3_cohort_trains_saves_and_resumes_like_the_single_process_run(tmp_path):
    """ZeRO-3, two families on two ranks: no hang, labels/rewards as in one process, exact resume.

    Two launches: 2 steps (checkpoint at step 2), then ``--resume`` to step 3; the reference is one plain process
    running 3 steps and saving at 2 and 3. What this guards: ZeRO-3's trace check scoped to the agent's group
    (over WORLD it fails at the first generation: the ranks run different architectures), generation and
    ``save_pretrained`` on gathered weights (labels equal the reference; the HF folders hold whole tensors),
    gradient accumulation over micro-batches through the engine (llama trains 8 rows in 2 micro-batches; a
    bypassed engine overwrote the first one's gradient), and ZeRO-3 partitions reloaded on resume.
    """
    from dist_worker import run_worker
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    dist_out, single_out = tmp_path / "dist", tmp_path / "single"
    dist_out.mkdir()
    single_out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    zero3 = str(TESTS.parent / "configs" / "deepspeed" / "zero3.json")
    _launch(dist_out, "--deepspeed", zero3, "--max-steps", "2", env=env)
    _launch(dist_out, "--deepspeed", zero3, "--max-steps", "3", "--resume", env=env)
    with one_thread():
        reference = {r["agent"]: r for r in run_worker(single_out, max_steps=3, save_every=2)}

    for rank, agent in ((0, "qwen"), (1, "llama")):
        first = json.loads((dist_out / f"rank-{rank}.json").read_text())
        resumed = json.loads((dist_out / f"rank-{rank}-resumed.json").read_text())
        assert [r["agent"] for r in first] == [r["agent"] for r in resumed] == [agent]
        first, resumed = first[0], resumed[0]
        assert first["deepspeed"] and first["group_ranks"] == [rank]
        # both agents trained (whole parameters compared, gathered from their ZeRO-3 partitions)
        assert first["changed_tensors"] > first["tensors"] // 2, first
        steps = first["steps"] + resumed["steps"]
        assert [len(first["steps"]), len(resumed["steps"])] == [2, 1]
        for step, ref in zip(steps, reference[agent]["steps"], strict=True):
            assert step["answer_ids"] == ref["answer_ids"]
            assert step["labels"] == ref["labels"]
        got, want = _records(dist_out / "run", agent), _records(single_out / "run", agent)
        assert [r["step"] for r in got] == [0, 1, 2]
        assert sum(r["trained_rows"] for r in got) > 0
        _assert_metrics_match(got, want, agent)  # rewards included; step 2 ran after the resume
        for name in ("step-000002", "step-000003"):
            folder = dist_out / "run" / "checkpoints" / name / agent
            state = folder.parent / "state" / agent  # beside the model folder
            assert (state / "deepspeed" / "state").is_dir()
            assert [p.name for p in folder.glob("*.safetensors")] == ["model.safetensors"]
            a = load_file(str(folder / "model.safetensors"))
            b = load_file(str(single_out / "run" / "checkpoints" / name / agent / "model.safetensors"))
            assert a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a)  # whole, not partitions
            assert max(float((a[k] - b[k]).abs().max()) for k in a) < 5e-5, (agent, name)
        model = AutoModelForCausalLM.from_pretrained(folder)
        loaded = dict(model.named_parameters())
        assert loaded.keys() == a.keys() and all(torch.equal(loaded[k], a[k]) for k in a)
    assert_some_label(reference["qwen"]["steps"])


def assert_some_label(steps: list[dict]) -> None:
    """At least one problem got a pseudo-label (else rewards and updates test nothing)."""
    assert any(
        label is not None for step in steps for lab in step["labels"].values() for label in lab.values()
    )


@pytest.mark.distributed
def test_documented_torchrun_command_trains_the_demo_config(tmp_path):
    """docs/training.md's command: torchrun of `corl-vl train --config configs/demo.yaml` (warm-started bases,
    one agent per process, ZeRO-2 on gloo)."""
    root = TESTS.parent
    out = tmp_path / "run"
    settings = [
        f"distributed.deepspeed={root / 'configs/deepspeed/zero2.json'}",
        "data.problems_per_step=2",
        "grpo.k=4",
    ]
    command = ["-m", "corl_vl", "train", "--config", str(root / "configs/demo.yaml"), "--max-steps", "1"]
    command += [*(arg for item in settings for arg in ("--set", item)), "--output-dir", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    _launch(out, env=env, command=command)
    for agent in ("qwen", "internvl"):
        (row,) = _records(out, agent)
        assert row["trained_rows"] > 0 and row["update/skipped"] == 0.0
