"""Issue 45 (round 3): ``corl-vl theory`` refuses parameters no integration can use, and never hangs or runs
out of memory (a huge K, a cohort of 11+ agents): one line naming the option and what to do, exit 2."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from corl_vl.cli import main
from corl_vl.errors import CorlError
from corl_vl.science import cohort_theory as ct
from corl_vl.science.theory import _pmf

ELEVEN = ",".join(["0.6", "0.4"] * 5 + ["0.5"])


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--pa", "nan", "--pb", "0.5"], "--pa"),
        (["--pa", "0.5", "--pb", "inf"], "--pb"),
        (["--pa", "0.6", "--pb", "0.5", "--eps", "nan"], "--eps"),
        (["--pa", "0.6", "--pb", "0.5", "--eps", "inf"], "--eps"),
        (["--pa", "0.6", "--pb", "0.5", "--eps=-1"], "--eps"),
        (["--pa", "0.6", "--pb", "0.5", "--horizon", "nan"], "--horizon"),
        (["--pa", "0.6", "--pb", "0.5", "--tol=-inf"], "--tol"),
        (["--ring", "0.6,nan,0.2"], "agent 1"),
        (["--ring", "0.6,1.5"], "agent 1"),
        (["--cohort", "0.6,nan"], "--cohort"),
        (["--cohort=0.6,-0.1"], "--cohort"),
        (["--cohort", "0.6,0.4", "--until", "inf"], "--until"),
        (["--pa", "0.6", "--pb", "0.5", "--k", "0"], "--k"),
        (["--pa", "0.6", "--pb", "0.5", "--k", "100000000"], "--k"),  # (K+1)² floats: would hang or OOM
        (["--example", "complementary", "--k", "5000"], "--k"),
        (["--phase-portrait", "never.png", "--k", "10000000"], "--k"),
        (["--cohort", ELEVEN], "--topology ring"),  # 9^10 outcomes per weighted label: refused, not OOM
        (["--cohort", "0.6,0.4,0.5,0.7,0.3,0.2", "--k", "64"], "smaller --k"),
        (["--cohort", ";".join(["0.6,0.4"] * 200)], "fewer rows"),  # 400 cells: minutes, looked like a hang
    ],
)
def test_theory_refuses_unusable_parameters_in_one_line(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["theory", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and named in err
    assert not list(tmp_path.iterdir())  # nothing written (no phase portrait)


def _brute_force(sources: list[float], weights: list[float], k: int) -> dict[float, float]:
    """P(S = s) by enumerating every joint draw (the definition)."""
    out: dict[float, float] = {}
    pmfs = [_pmf(np.asarray(s), k) for s in sources]
    for counts in itertools.product(range(k + 1), repeat=len(sources)):
        s = sum(w * c for w, c in zip(weights, counts)) / (k * sum(weights))
        p = float(np.prod([pmf[c] for pmf, c in zip(pmfs, counts)]))
        key = round(s, 12)
        out[key] = out.get(key, 0.0) + p
    return out


@pytest.mark.parametrize("weights", [[1.0, 1.0, 1.0], [0.5, 1.0, 2.0], [1.0, 2.0, 1.0]])
def test_pooled_share_merges_equal_outcomes_without_changing_the_distribution(weights: list[float]) -> None:
    sources, k = [0.3, 0.6, 0.9], 3
    values, probs = ct.pooled_share(sources, weights, k)
    assert len(set(values.tolist())) == values.size  # merged: every support value once
    got = {round(float(v), 12): float(p) for v, p in zip(values, probs)}
    want = _brute_force(sources, weights, k)
    assert got.keys() == want.keys()
    assert all(got[s] == pytest.approx(want[s], abs=1e-12) for s in want)


def test_eleven_agents_with_equal_weights_stay_small_and_distinct_weights_are_refused() -> None:
    """Equal weights (uniform, the agreement estimate's majority) pool to 10·K + 1 values, not 9^10."""
    values, probs = ct.pooled_share([0.6] * 10, [1.0] * 10, 8)
    assert values.size == 81 and probs.sum() == pytest.approx(1.0)
    rates = ct.agreement_rates(np.full((1, 11), 0.6), 8)  # pools the 10 others for each agent
    assert rates.shape == (2, 1, 11)
    with pytest.raises(CorlError, match="--topology ring"):
        ct.pooled_share([0.6] * 10, [1.0 + i / 100 for i in range(10)], 8)
