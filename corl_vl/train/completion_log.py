"""``train.log_completions: N``: what the agents actually wrote, next to what they were rewarded for.

Why: a reward curve cannot tell a parser that never matches from a model that never answers, nor a wrong
pseudo-label from a right one; reading a few completions with their extracted answer, label, reward and
advantage can. Each agent's group leader appends N rows per step to ``RUN_DIR/agents/<agent>/completions.jsonl``
(the first N completions of the step, group by group) and hands them to TensorBoard / wandb as text tables when
those sinks are on. A resumed run first drops rows past its checkpoint, like metrics.jsonl.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corl_vl.io import read_jsonl, write_jsonl_atomic
from corl_vl.train.loop import Callback, TrainingRun

PROMPT_EXCERPT = 200  # characters of the question kept per row
COLUMNS = ("step", "problem_id", "prompt", "completion", "answer", "label", "reward", "advantage")


def completions_path(run_dir: Path, agent: str) -> Path:
    return run_dir / "agents" / agent / "completions.jsonl"


def completion_rows(step: int, agent: Any, agent_step: Any, n: int) -> list[dict[str, Any]]:
    """The first ``n`` completions of one agent's step as log rows (``agent_step``: the cohort's AgentStep)."""
    rows: list[dict[str, Any]] = []
    index = 0
    for rollout in agent_step.rollouts:
        pid = rollout.problem_id
        for j, completion in enumerate(rollout.completions):
            if len(rows) == n:
                return rows
            advantage = agent_step.advantages[index] if index < len(agent_step.advantages) else None
            rows.append(
                {
                    "step": step,
                    "problem_id": pid,
                    "prompt": agent.view[pid].question[:PROMPT_EXCERPT],
                    "completion": completion.text,
                    "answer": agent_step.answers[pid][j],
                    "label": agent_step.labels.get(pid),
                    "reward": agent_step.rewards[pid][j],
                    "advantage": advantage,
                }
            )
            index += 1
    return rows


class CompletionLog(Callback):
    """Writes :func:`completion_rows` per agent and step; ``sinks``: the run's :class:`MetricsLog` (its
    TensorBoard writers and wandb run get the same rows as text tables)."""

    def __init__(self, run_dir: Path, agents: list[str], n: int, sinks: Any = None) -> None:
        self.run_dir, self.agents, self.n, self.sinks = Path(run_dir), agents, n, sinks

    def on_fit_start(self, run: TrainingRun) -> None:
        for name in self.agents:  # a resumed run: rows past the checkpoint were never part of this run
            path = completions_path(self.run_dir, name)
            if path.exists():
                rows = read_jsonl(path, skip_bad=True)
                write_jsonl_atomic(path, (row for _, row in rows if row["step"] < run.start_step))

    def on_step_end(self, run: TrainingRun) -> None:
        for agent, agent_step in zip(run.cohort.agents, run.cohort.last):
            if agent.name not in self.agents:
                continue
            rows = completion_rows(run.step_index, agent, agent_step, self.n)
            path = completions_path(self.run_dir, agent.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as file:
                file.writelines(json.dumps(row) + "\n" for row in rows)
            if self.sinks is not None:
                self.sinks.write_table(agent.name, run.step_index, list(COLUMNS), rows)
