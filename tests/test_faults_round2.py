"""Faults of the second probe (docs/reliability.md, "Round 2"), one test per row; each failed before its fix.

A run folder's owner, non-finite training, config values and names checked before models load, inputs bounded
at load time. Processes that must really be someone else (a lock owner) are real subprocesses.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_cohort import TINY, TINY_COHORT

from corl_vl.errors import CorlError
from corl_vl.train.run_lock import LOCK_NAME, acquire_run_lock, release_run_locks

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "corl_vl", *args], capture_output=True, text=True, env=ENV, timeout=timeout
    )


def _one_line_exit_2(proc: subprocess.CompletedProcess) -> str:
    """The CLI's refusal: exit 2, no traceback; returns stderr."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stderr


# ------------------------------------------------------------------------------------------ run folder owner
@pytest.fixture
def holder(tmp_path):
    """Another process that holds the lock of ``tmp_path / 'run'`` until the test ends."""
    run = tmp_path / "run"
    run.mkdir()
    code = (
        "import sys; from corl_vl.train.run_lock import acquire_run_lock; "
        f"acquire_run_lock({str(run)!r}); print('held', flush=True); sys.stdin.read()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV
    )
    assert proc.stdout.readline().strip() == "held"
    yield run, proc.pid
    proc.stdin.close()
    proc.wait(timeout=30)


def test_second_run_on_a_held_folder_is_refused_naming_the_owner(holder):
    run, pid = holder
    config = run.parent / "cohort.yaml"
    config.write_text(TINY_COHORT.read_text())
    proc = _cli(
        "train",
        "--config",
        str(config),
        "--output-dir",
        str(run),
        "--no-progress",
        *(f"--set={o}" for o in TINY),
        "--max-steps=1",
    )
    err = _one_line_exit_2(proc)
    assert f"PID {pid} on {socket.gethostname()}" in err and "in use by another run" in err
    assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]  # nothing written by the refused run


def test_lock_records_owner_and_is_released(tmp_path):
    lock = acquire_run_lock(tmp_path)
    try:
        record = json.loads((tmp_path / LOCK_NAME).read_text())
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname() and record["started"]
        assert acquire_run_lock(tmp_path) is lock  # re-entrant within one process
    finally:
        release_run_locks()
    assert not (tmp_path / LOCK_NAME).exists()


def test_stale_lock_of_a_dead_process_is_taken_over_with_a_line(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = {"pid": dead.pid, "host": socket.gethostname(), "started": "2026-01-01T00:00:00+00:00"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(stale))
    try:
        acquire_run_lock(tmp_path)
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    finally:
        release_run_locks()
    assert f"taking over the stale lock of a run that has ended (PID {dead.pid}" in capsys.readouterr().err


def test_lock_from_another_host_is_refused(tmp_path):
    other = {"pid": 1, "host": socket.gethostname() + "-elsewhere", "started": "2026-01-01T00:00:00+00:00"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(other))
    with pytest.raises(CorlError, match=r"-elsewhere.*another machine.*delete"):
        acquire_run_lock(tmp_path)


def test_config_inside_the_run_folder_is_not_overwritten(tmp_path):
    run = tmp_path / "exp"
    run.mkdir()
    mine = "# my comments\n" + TINY_COHORT.read_text()
    (run / "config.yaml").write_text(mine)
    proc = _cli("train", "--config", str(run / "config.yaml"), "--output-dir", str(run), "--no-progress")
    assert "where the run writes its record" in _one_line_exit_2(proc)
    assert (run / "config.yaml").read_text() == mine
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml"]


# ------------------------------------------------------------------------------------------ config values
@pytest.mark.parametrize(
    ("override", "key", "says"),
    [
        ("train.lr=.nan", "train.lr", "finite"),
        ("train.lr=-1", "train.lr", "> 0"),
        ("train.lr=0", "train.lr", "> 0"),
        ("agents.0.lr=-2e-6", "agents.0.lr", "> 0"),
        ("train.adam_betas=[1.5, 0.9]", "train.adam_betas", "in [0, 1)"),
        ("train.adam_betas=[0.9, -0.1]", "train.adam_betas", "in [0, 1)"),
        ("grpo.temperature=.nan", "grpo.temperature", "finite"),
        ("grpo.temperature=.inf", "grpo.temperature", "finite"),
        ("grpo.top_p=.nan", "grpo.top_p", "finite"),
        ("grpo.epsilon=-0.5", "grpo.epsilon", "clips every token"),
        ("grpo.epsilon_high=-0.1", "grpo.epsilon_high", "≥ 0"),
        ("grpo.importance_ratio_cap=-1", "grpo.importance_ratio_cap", "reverses the update"),
        ("agents.1.importance_ratio_cap=-1", "agents.1.importance_ratio_cap", "≥ 0"),
        ("train.grad_clip=-1", "train.grad_clip", "0 means no clipping"),
        ("train.grad_clip=.nan", "train.grad_clip", "finite"),
        ("grpo.beta=-0.1", "grpo.beta", "KL weight"),
        ("train.weight_decay=-1", "train.weight_decay", "≥ 0"),
        ("train.warmup_ratio=.nan", "train.warmup_ratio", "finite"),
        ("reward.min_share=1.5", "reward.min_share", "in [0, 1]"),
        ("rollout.gpu_memory_utilization=0", "rollout.gpu_memory_utilization", "in (0, 1]"),
        ("train.save_every=-1", "train.save_every", "≥ 0"),
        ("eval.every=-2", "eval.every", "≥ 0"),
        ("data.limit=0", "data.limit", "≥ 1"),
    ],
)
def test_every_numeric_setting_is_checked_at_config_time(override, key, says):
    from corl_vl.config import load_config

    with pytest.raises(CorlError) as err:
        load_config(TINY_COHORT, [override])
    line = str(err.value)
    assert line.startswith(f"{key}: ") and says in line and "\n" not in line


def test_bad_number_stops_the_cli_before_models_load(tmp_path):
    run = tmp_path / "run"
    proc = _cli("train", "--config", str(TINY_COHORT), "--output-dir", str(run), "--set", "train.lr=.nan")
    err = _one_line_exit_2(proc)
    assert "train.lr: must be a finite number, got nan" in err and len(err.strip().splitlines()) == 1
    assert not run.exists()


def test_valid_boundaries_are_accepted():
    from corl_vl.config import load_config

    cfg = load_config(
        TINY_COHORT,
        [
            "train.grad_clip=0",
            "grpo.importance_ratio_cap=0",
            "grpo.beta=0",
            "train.adam_betas=[0, 0.999]",
            "grpo.top_p=1",
            "grpo.epsilon_high=0",
        ],
    )
    assert cfg.train.grad_clip == 0 and cfg.train.adam_betas == (0, 0.999)


# ------------------------------------------------------------------------------------------ names are names
@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("../../../escaped", "only letters"),
        ("a/b", "only letters"),
        (".hidden", "must not start with '.'"),
        ("..", "must not start with '.'"),
        ("has space", "only letters"),
        ("x" * 300, "at most 128"),
    ],
)
def test_agent_names_that_would_leave_their_folder_are_refused(tmp_path, name, says):
    from corl_vl.config import load_config

    with pytest.raises(CorlError, match=r"^agents\.0\.name: .*folder name") as err:
        load_config(TINY_COHORT, [f"agents.0.name={name}"])
    assert says in str(err.value)


def test_agent_names_unique_ignoring_case():
    from corl_vl.config import load_config

    first = load_config(TINY_COHORT).agents[0].name
    with pytest.raises(CorlError, match=r"^agents\.1\.name: .*already the name of agents\.0"):
        load_config(TINY_COHORT, [f"agents.1.name={first.upper()}"])


def test_meta_json_agent_names_are_checked_before_any_path(tmp_path):
    from corl_vl.eval.runs import expand_models

    ckpt = tmp_path / "run" / "checkpoints" / "step-000001"
    ckpt.mkdir(parents=True)
    (ckpt / "meta.json").write_text(json.dumps({"step": 1, "agents": ["../../../escaped"], "format": 2}))
    with pytest.raises(CorlError, match=r"meta\.json: agent name .*not a plain folder name"):
        expand_models([str(tmp_path / "run")])


# ------------------------------------------------------------------------------------------ inputs bounded at load
def _alias_bomb(levels: int = 9) -> str:
    """Nine lists of nine aliases of the one before: 9**9 values once expanded, a few hundred bytes here."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_in_a_config_is_one_line_at_once(tmp_path):
    import time

    config = tmp_path / "bomb.yaml"
    config.write_text(
        TINY_COHORT.read_text() + "\nbomb:\n" + "".join(f"  {x}\n" for x in _alias_bomb().splitlines())
    )
    started = time.perf_counter()
    proc = _cli("train", "--config", str(config), "--output-dir", str(tmp_path / "run"))
    err = _one_line_exit_2(proc)
    assert f"{config}: more than 100,000 values once its aliases are expanded" in err
    assert time.perf_counter() - started < 60 and not (tmp_path / "run").exists()


def test_yaml_alias_bomb_in_adapter_kwargs_or_set_is_refused(tmp_path):
    from corl_vl.config import load_config

    config = tmp_path / "kw.yaml"
    raw = TINY_COHORT.read_text()
    config.write_text(_alias_bomb() + raw)
    with pytest.raises(CorlError, match=r"kw\.yaml: more than 100,000 values"):
        load_config(config)
    flow = "{a: &a [1,1,1,1,1,1,1,1,1,1], b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b],"
    flow += " d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c], e: [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]}"
    with pytest.raises(CorlError, match=r"--set agents\.0\.adapter_kwargs: more than 100,000 values"):
        load_config(TINY_COHORT, [f"agents.0.adapter_kwargs={flow}"])


def test_yaml_nesting_and_recursion_are_refused():
    from corl_vl.typed_yaml import load_yaml

    with pytest.raises(CorlError, match=r"f\.yaml: nested deeper than 64 levels"):
        load_yaml("[" * 5000 + "]" * 5000, "f.yaml")
    with pytest.raises(CorlError, match=r"refers to itself"):
        load_yaml("&a [*a]", "f.yaml")
    assert load_yaml("a: &x {b: 1}\nc: *x\n", "f.yaml") == {"a": {"b": 1}, "c": {"b": 1}}


@pytest.mark.parametrize(
    ("answer", "says"),
    [(["1", "2"], "got list"), ({"v": 1}, "got dict"), (True, "got bool"), (float("nan"), "finite number")],
)
def test_non_string_answers_are_refused_naming_the_row(tmp_path, answer, says):
    from corl_vl.data.datasets import load_problems

    data = tmp_path / "rows.json"
    rows = [{"id": "a", "question": "1+1?", "answer": "2"}, {"id": "b", "question": "2+2?", "answer": answer}]
    data.write_text(json.dumps(rows))  # NaN is written as the bare token NaN
    with pytest.raises(CorlError, match=rf"rows\.json row 1 field 'answer': expected text or a .*{says}"):
        load_problems(data)


def test_numbers_as_answers_are_converted_on_purpose(tmp_path):
    from corl_vl.data.datasets import load_problems

    data = tmp_path / "rows.jsonl"
    data.write_text(
        '{"id": 1, "question": "1+1?", "answer": 2}\n{"id": 2, "question": "half?", "answer": 0.5}\n'
    )
    assert [(p.id, p.answer) for p in load_problems(data)] == [("1", "2"), ("2", "0.5")]


def test_a_question_too_long_for_any_model_is_refused_at_load(tmp_path):
    from corl_vl.data.datasets import MAX_QUESTION_CHARS, load_problems

    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "a", "question": "7" * (MAX_QUESTION_CHARS + 1)}) + "\n")
    with pytest.raises(CorlError, match=r"rows\.jsonl row 0 field 'question': 1,000,001 characters"):
        load_problems(data)


@pytest.mark.parametrize("kind", ["path", "bytes", "pil"])
def test_extreme_aspect_ratio_images_are_refused_per_row(tmp_path, kind):
    import io

    from PIL import Image

    from corl_vl.data.datasets import load_problems

    def image(width, height):
        picture = Image.new("RGB", (width, height), "white")
        if kind == "pil":
            return picture
        buffer = io.BytesIO()
        picture.save(buffer, format="PNG")
        if kind == "bytes":
            return {"bytes": buffer.getvalue()}
        path = tmp_path / f"{width}x{height}.png"
        path.write_bytes(buffer.getvalue())
        return str(path)

    rows = [
        {"id": "ok", "question": "q", "image": image(400, 2)},
        {"id": "thin", "question": "q", "image": image(2000, 2)},
    ]
    if kind == "pil":
        from corl_vl.data.datasets import _images

        assert len(_images(rows[0]["image"], "row 0", tmp_path, True)) == 1
        with pytest.raises(CorlError, match=r"row 1.* 2000x2 pixels, an aspect ratio above 200:1"):
            _images(rows[1]["image"], "row 1", tmp_path, True)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "rows.parquet"
    table = pa.table({"id": ["ok", "thin"], "question": ["q", "q"], "image": [r["image"] for r in rows]})
    pq.write_table(table, data)
    with pytest.raises(
        CorlError, match=r"rows\.parquet row 1 field 'image'.* 2000x2 pixels, an aspect ratio above 200:1"
    ):
        load_problems(data)


def test_a_prompt_without_room_for_the_completion_is_refused_naming_agent_and_problem():
    from test_update_edges import _cfg

    from corl_vl.data.problem import Problem
    from corl_vl.train.agent import Agent, AgentSettings
    from model_adapters.registry import create_adapter

    adapter = create_adapter("tiny-qwen2.5")
    model = adapter.load_model()
    context = model.config.get_text_config().max_position_embeddings
    long = Problem("long", "7 " * context)
    agent = Agent("solo", adapter, model, [Problem("short", "1+1?"), long], AgentSettings.of(_cfg()))
    with pytest.raises(
        CorlError,
        match=rf"agent solo: problem 'long' has a \d+-token prompt, more than the model's context \({context}\)",
    ):
        agent.rollout(["short", "long"], seed=0)
