"""``corl-vl theory``: self-reward vs Co-RL in the two-outcome GRPO model, with the user's own numbers.

Lets users see, before any GPU time, whether their starting accuracies fall in Co-RL's basin of correct convergence
(pA + pB > 1) and how it compares with self-reward. The maths lives in :mod:`corl_vl.science.theory`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from corl_vl.errors import CorlError

EXAMPLES = ("complementary", "ring3", "collapsed")
#: Largest --k: the exact sums over K draws build (K+1)×(K+1) matrices per step (K = 1024 takes seconds; a
#: million would need terabytes), and GRPO groups in practice hold 4–64 rollouts.
MAX_K = 1024
#: Most cells (prompt types × agents) --cohort integrates: each is an exact pooled sum per step, and 48 cells take
#: about a minute on one core (16 types × 3 agents measured 38 s); more would look like a hang.
MAX_COHORT_CELLS = 48


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "theory",
        help="integrate the two-outcome GRPO dynamics (self-reward vs Co-RL)",
        description="Integrate dp/dt = q_K(p) φ_K(p_label_source) for self-reward and Co-RL (paper §5, App. B).",
    )
    parser.add_argument(
        "--example", choices=EXAMPLES, help="the paper's complementary example, or a 3-agent ring"
    )
    parser.add_argument("--pa", type=float, help="agent A's starting accuracy on one prompt")
    parser.add_argument("--pb", type=float, help="agent B's starting accuracy on one prompt")
    parser.add_argument(
        "--ring", metavar="P1,P2,...", help="starting accuracies of an N-agent ring on one prompt"
    )
    parser.add_argument(
        "--cohort",
        metavar="ROWS",
        help="N-agent cohort: one row of accuracies per prompt type, rows separated by ';' (e.g. "
        "'0.9,0.2,0;0.2,0.9,0'); compares the weightings uniform, agreement and dawid_skene",
    )
    parser.add_argument(
        "--topology", choices=("all_peers", "ring"), help="--cohort: who supervises whom (default all_peers)"
    )
    parser.add_argument(
        "--per-tag",
        action="store_true",
        help="--cohort: reliability per prompt type (topology.reliability_tag)",
    )
    parser.add_argument("--until", type=float, help="--cohort: time to integrate to (default 200)")
    parser.add_argument(
        "--peer-reward",
        choices=("hard", "soft"),
        help="hard label or soft share (train.peer_reward; default hard)",
    )
    parser.add_argument(
        "--advantage",
        choices=("grpo", "dr_grpo"),
        help="std-scaled or centred (grpo.advantage; default grpo)",
    )
    parser.add_argument("--k", type=int, default=8, help="rollouts per prompt (default 8)")
    parser.add_argument(
        "--eps", type=float, default=0.0, help="GRPO's std epsilon (default 0: the eps → 0 limit)"
    )
    parser.add_argument(
        "--tol", type=float, help="stop within this distance of a fixed point (default 1e-6; not --cohort)"
    )
    parser.add_argument(
        "--rtol", type=float, help="integrator relative tolerance (default 1e-9; not --cohort)"
    )
    parser.add_argument(
        "--atol", type=float, help="integrator absolute tolerance (default 1e-12; not --cohort)"
    )
    parser.add_argument(
        "--horizon",
        type=float,
        help="longest time to integrate, learning-rate units (default 1e12; --cohort uses --until)",
    )
    parser.add_argument(
        "--phase-portrait",
        metavar="OUT.png",
        help="draw the two-agent flow (hard reward, grpo advantage) in the pA–pB square with the separatrix",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(func=run)


def _ring(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CorlError(f"--ring: expected comma-separated numbers, got {text!r}") from None
    if len(values) < 2:
        raise CorlError("--ring: give at least two accuracies")
    return values


def _rows(text: str) -> list[list[float]]:
    try:
        rows = [[float(x) for x in row.split(",") if x.strip()] for row in text.split(";") if row.strip()]
    except ValueError:
        raise CorlError(f"--cohort: expected numbers like '0.9,0.2,0;0.2,0.9,0', got {text!r}") from None
    if not rows or len(rows[0]) < 2 or any(len(r) != len(rows[0]) for r in rows):
        raise CorlError(
            "--cohort: give rows of equally many accuracies (one per agent, at least 2), separated by ';'"
        )
    if any(not 0.0 <= x <= 1.0 for r in rows for x in r):
        raise CorlError("--cohort: accuracies must be in [0, 1]")
    if len(rows) * len(rows[0]) > MAX_COHORT_CELLS:
        raise CorlError(
            f"--cohort: {len(rows)} prompt types × {len(rows[0])} agents = {len(rows) * len(rows[0])} cells, more "
            f"than the {MAX_COHORT_CELLS} one integration handles in about a minute; give fewer rows or agents"
        )
    return rows


def _cohort(rows: list[list[float]] | tuple, args: argparse.Namespace) -> tuple[dict, list[str]]:
    """Final accuracies of an N-agent cohort under each weighting (pooled supervisors, :mod:`cohort_theory`)."""
    # lazy: numpy, scipy
    from corl_vl.science import cohort_theory as ct

    n = len(rows[0])
    sups = ct.all_peers(n) if args.topology == "all_peers" else ct.ring(n)
    ct.check_size(
        max(len(s) for s in sups), args.k
    )  # before integrating: weighted labels enumerate all outcomes
    result: dict = {"k": args.k, "topology": args.topology, "peer_reward": args.peer_reward, "final": {}}
    lines = [
        f"{n}-agent cohort ({args.topology}, {args.peer_reward} reward, {args.advantage}, K = {args.k}), "
        f"accuracy per prompt type: " + "; ".join(", ".join(f"{x:g}" for x in r) for r in rows),
        f"  state at t = {args.until:g} (per agent, mean over prompt types):",
    ]
    for weighting in ct.WEIGHTINGS:
        final = ct.simulate(
            rows,
            sups,
            args.k,
            horizon=args.until,
            weighting=weighting,
            per_type=args.per_tag,
            reward=args.peer_reward,
            advantage=args.advantage,
            eps=args.eps,
        ).final
        result["final"][weighting] = final.tolist()
        lines.append(f"  {weighting:>12}: " + ", ".join(f"{x:.3f}" for x in final.mean(axis=0)))
    return result, lines


# option → (default, what it applies to); None in args means "not given"
_INTEGRATOR = {"tol": 1e-6, "rtol": 1e-9, "atol": 1e-12, "horizon": 1e12}
_COHORT = {"until": 200.0, "topology": "all_peers", "per_tag": False}
_REWARD = {"peer_reward": "hard", "advantage": "grpo"}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _check_applicable(args: argparse.Namespace, *, cohort: bool, integrates: bool) -> None:
    """Refuse an option the chosen mode would ignore, and values no integration can use; then fill defaults."""
    given = lambda table: [d for d in table if getattr(args, d) not in (None, False)]  # noqa: E731
    if cohort and given(_INTEGRATOR):
        raise CorlError(
            f"{_flag(given(_INTEGRATOR)[0])} does not apply to --cohort (it integrates on a fixed grid up to "
            "--until); drop it"
        )
    if not cohort and given(_COHORT):
        raise CorlError(f"{_flag(given(_COHORT)[0])} applies to --cohort (or --example collapsed) only")
    if not integrates and given(_REWARD):
        raise CorlError(
            f"{_flag(given(_REWARD)[0])}: --phase-portrait draws the hard-reward, grpo-advantage flow; the option "
            "applies to --example, --pa/--pb, --ring and --cohort"
        )
    for dest in ("until", "tol", "rtol", "atol", "horizon"):
        value = getattr(args, dest)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise CorlError(f"{_flag(dest)} must be a positive, finite number, got {value}")
    for table in (_INTEGRATOR, _COHORT, _REWARD):
        for dest, default in table.items():
            if getattr(args, dest) is None:
                setattr(args, dest, default)
    if (
        integrates
        and args.phase_portrait is not None
        and (args.peer_reward, args.advantage) != ("hard", "grpo")
    ):
        print(
            f"corl-vl theory: the phase portrait shows the hard-reward, grpo-advantage flow; "
            f"--peer-reward {args.peer_reward} --advantage {args.advantage} apply to the integration only",
            file=sys.stderr,
        )


def _end(traj_final: tuple[float, ...], names: tuple[str, ...]) -> dict[str, float]:
    return {f"final_{name}": value for name, value in zip(names, traj_final)}


def run(args: argparse.Namespace) -> int:
    from corl_vl.science import theory  # lazy: numpy, scipy (off the CLI's other commands)

    modes = _check_args(args)
    opts = {"eps": args.eps, "tol": args.tol, "rtol": args.rtol, "atol": args.atol, "horizon": args.horizon}
    opts |= {"reward": args.peer_reward, "advantage": args.advantage}
    result: dict = {}
    lines: list[str] = []
    if args.example == "collapsed" or args.cohort is not None:
        # lazy: numpy, scipy
        from corl_vl.science.cohort_theory import COLLAPSED

        rows = COLLAPSED if args.cohort is None else _rows(args.cohort)
        result, lines = _cohort(rows, args)
    elif args.example is not None:
        result, lines = _example(args, opts, theory)
    elif args.pa is not None:
        result, lines = _pair(args, opts, theory)
    elif args.ring is not None:
        result, lines = _ring_run(args, opts, theory)
    if args.phase_portrait is not None:
        path = theory.plot_phase_portrait(args.phase_portrait, args.k, eps=args.eps)
        if not any(modes):
            result = {"phase_portrait": str(path)}
        lines.append(f"phase portrait written to {path}")
    print(json.dumps(result) if args.json else "\n".join(lines))
    return 0


def _check_args(args: argparse.Namespace) -> list[bool]:
    """The flags' combinations and ranges, each refusal one line; returns which modes were asked for."""
    modes = [
        args.example is not None,
        args.pa is not None or args.pb is not None,
        args.ring is not None,
        args.cohort is not None,
    ]
    if sum(modes) > 1:
        raise CorlError("give only one of --example, --pa/--pb, --ring, --cohort")
    if not any(modes) and args.phase_portrait is None:
        raise CorlError("give --example, --pa and --pb, --ring, --cohort, or --phase-portrait")
    if (args.pa is None) != (args.pb is None):
        raise CorlError("--pa and --pb go together")
    for flag, value in (("--pa", args.pa), ("--pb", args.pb)):
        if value is not None and not 0.0 <= value <= 1.0:
            raise CorlError(f"{flag} must be an accuracy in [0, 1], got {value}")
    if not 1 <= args.k <= MAX_K:
        raise CorlError(
            f"--k must be an integer from 1 to {MAX_K} (rollouts per prompt; the exact sums grow as K²), got {args.k}"
        )
    if not (math.isfinite(args.eps) and args.eps >= 0):
        raise CorlError(f"--eps must be a finite number ≥ 0 (GRPO's std epsilon), got {args.eps}")
    _check_applicable(
        args, cohort=args.cohort is not None or args.example == "collapsed", integrates=any(modes)
    )
    return modes


def _example(args: argparse.Namespace, opts: dict, theory: Any) -> tuple[dict, list[str]]:
    prompts = theory.COMPLEMENTARY if args.example == "complementary" else theory.RING3
    res = theory.compare(prompts, args.k, **opts)
    self_acc = sum(res["self_reward"]) / len(res["self_reward"])
    co_acc = sum(res["co_rl"]) / len(res["co_rl"])
    result = {"self_reward_accuracy": self_acc, "co_rl_accuracy": co_acc}
    if args.example == "ring3":
        result |= {"self_reward_per_agent": res["self_reward"], "co_rl_per_agent": res["co_rl"]}
    rows = ", ".join("(" + ", ".join(f"{x:g}" for x in row) + ")" for row in prompts)
    return result, [
        f"{args.example} example, K = {args.k}, start accuracies per prompt type: {rows}",
        f"  self-reward final accuracy: {self_acc:.4f}",
        f"  Co-RL ({'mutual' if len(prompts[0]) == 2 else 'ring'}) final accuracy: {co_acc:.4f}",
    ]


def _pair(args: argparse.Namespace, opts: dict, theory: Any) -> tuple[dict, list[str]]:
    start = (args.pa, args.pb)
    co = theory.integrate(start, theory.ring_supervisors(2), args.k, **opts)
    own = theory.integrate(start, theory.self_supervisors(2), args.k, **opts)
    names = ("pa", "pb")
    result = {
        "co_rl": {**_end(co.final, names), "converged": co.limit is not None, "t_end": float(co.t[-1])},
        "self_reward": {
            **_end(own.final, names),
            "converged": own.limit is not None,
            "t_end": float(own.t[-1]),
        },
        "k": args.k,
    }
    return result, [
        f"start (pA, pB) = ({args.pa:g}, {args.pb:g}), K = {args.k}, pA + pB = {args.pa + args.pb:g}",
        f"  Co-RL end state:       pA = {co.final[0]:.4f}, pB = {co.final[1]:.4f}",
        f"  self-reward end state: pA = {own.final[0]:.4f}, pB = {own.final[1]:.4f}",
    ]


def _ring_run(args: argparse.Namespace, opts: dict, theory: Any) -> tuple[dict, list[str]]:
    start = _ring(args.ring)
    n = len(start)
    ring = theory.integrate(start, theory.ring_supervisors(n), args.k, **opts)
    own = theory.integrate(start, theory.self_supervisors(n), args.k, **opts)
    result = {"ring": {"final": list(ring.final)}, "self_reward": {"final": list(own.final)}, "k": args.k}

    def fmt(xs: Any) -> str:
        return ", ".join(f"{x:.4f}" for x in xs)

    return result, [
        f"{n}-agent ring (agent i supervised by agent i+1 mod {n}), K = {args.k}, start ({args.ring})",
        f"  ring end state:        {fmt(ring.final)}",
        f"  self-reward end state: {fmt(own.final)}",
    ]
