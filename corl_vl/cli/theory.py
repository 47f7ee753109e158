"""``corl-vl theory``: self-reward vs Co-RL in the two-outcome GRPO model, with the user's own numbers.

Lets users see, before any GPU time, whether their starting accuracies fall in Co-RL's basin of correct convergence
(pA + pB > 1) and how it compares with self-reward. The maths lives in :mod:`corl_vl.science.theory`.
"""

from __future__ import annotations

import argparse
import json

from corl_vl.errors import CorlError

EXAMPLES = ("complementary", "ring3")


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
    parser.add_argument("--k", type=int, default=8, help="rollouts per prompt (default 8)")
    parser.add_argument(
        "--eps", type=float, default=0.0, help="GRPO's std epsilon (default 0: the eps → 0 limit)"
    )
    parser.add_argument("--tol", type=float, default=1e-6, help="stop within this distance of a fixed point")
    parser.add_argument("--rtol", type=float, default=1e-9, help="integrator relative tolerance")
    parser.add_argument("--atol", type=float, default=1e-12, help="integrator absolute tolerance")
    parser.add_argument(
        "--horizon", type=float, default=1e12, help="longest time to integrate (learning-rate units)"
    )
    parser.add_argument("--phase-portrait", metavar="OUT.png", help="draw the pA–pB flow with the separatrix")
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


def _end(traj_final: tuple[float, ...], names: tuple[str, ...]) -> dict[str, float]:
    return {f"final_{name}": value for name, value in zip(names, traj_final)}


def run(args: argparse.Namespace) -> int:
    from corl_vl.science import theory

    modes = [args.example is not None, args.pa is not None or args.pb is not None, args.ring is not None]
    if sum(modes) > 1:
        raise CorlError("give only one of --example, --pa/--pb, --ring")
    if not any(modes) and args.phase_portrait is None:
        raise CorlError("give --example, --pa and --pb, --ring, or --phase-portrait")
    if (args.pa is None) != (args.pb is None):
        raise CorlError("--pa and --pb go together")
    for flag, value in (("--pa", args.pa), ("--pb", args.pb)):
        if value is not None and not 0.0 <= value <= 1.0:
            raise CorlError(f"{flag} must be an accuracy in [0, 1], got {value}")
    if args.k < 1:
        raise CorlError(f"--k must be a positive integer, got {args.k}")
    opts = {"eps": args.eps, "tol": args.tol, "rtol": args.rtol, "atol": args.atol, "horizon": args.horizon}
    result: dict = {}
    lines: list[str] = []
    if args.example is not None:
        prompts = theory.COMPLEMENTARY if args.example == "complementary" else theory.RING3
        res = theory.compare(prompts, args.k, **opts)
        self_acc = sum(res["self_reward"]) / len(res["self_reward"])
        co_acc = sum(res["co_rl"]) / len(res["co_rl"])
        result = {"self_reward_accuracy": self_acc, "co_rl_accuracy": co_acc}
        if args.example == "ring3":
            result |= {"self_reward_per_agent": res["self_reward"], "co_rl_per_agent": res["co_rl"]}
        rows = ", ".join("(" + ", ".join(f"{x:g}" for x in row) + ")" for row in prompts)
        lines += [
            f"{args.example} example, K = {args.k}, start accuracies per prompt type: {rows}",
            f"  self-reward final accuracy: {self_acc:.4f}",
            f"  Co-RL ({'mutual' if len(prompts[0]) == 2 else 'ring'}) final accuracy: {co_acc:.4f}",
        ]
    elif args.pa is not None:
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
        lines += [
            f"start (pA, pB) = ({args.pa:g}, {args.pb:g}), K = {args.k}, pA + pB = {args.pa + args.pb:g}",
            f"  Co-RL end state:       pA = {co.final[0]:.4f}, pB = {co.final[1]:.4f}",
            f"  self-reward end state: pA = {own.final[0]:.4f}, pB = {own.final[1]:.4f}",
        ]
    elif args.ring is not None:
        start = _ring(args.ring)
        n = len(start)
        ring = theory.integrate(start, theory.ring_supervisors(n), args.k, **opts)
        own = theory.integrate(start, theory.self_supervisors(n), args.k, **opts)
        result = {"ring": {"final": list(ring.final)}, "self_reward": {"final": list(own.final)}, "k": args.k}
        fmt = lambda xs: ", ".join(f"{x:.4f}" for x in xs)  # noqa: E731
        lines += [
            f"{n}-agent ring (agent i supervised by agent i+1 mod {n}), K = {args.k}, start ({args.ring})",
            f"  ring end state:        {fmt(ring.final)}",
            f"  self-reward end state: {fmt(own.final)}",
        ]
    if args.phase_portrait is not None:
        path = theory.plot_phase_portrait(args.phase_portrait, args.k, eps=args.eps)
        if not any(modes):
            result = {"phase_portrait": str(path)}
        lines.append(f"phase portrait written to {path}")
    print(json.dumps(result) if args.json else "\n".join(lines))
    return 0
