"""The ``corl-vl`` command line.

Every other module in this package is one subcommand: it defines ``register(subparsers)``, which adds its
parser and sets ``func`` (namespace -> exit code). They are discovered at start-up, so adding a command never
means editing a central list. Heavy imports (torch, transformers) happen inside each command's function, so
``corl-vl --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence

from corl_vl import __version__
from corl_vl.errors import CorlError
from corl_vl.io import os_error_line
from corl_vl.paths import configure_cache_env
from corl_vl.train.interrupts import Interrupted


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="corl-vl",
        description="Co-RL: label-free GRPO for cohorts of vision-language and language models.",
    )
    parser.add_argument("--version", action="version", version=f"corl-vl {__version__}")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="how much corl-vl logs to stderr (default: info)",
    )
    parser.add_argument(
        "--library-progress",
        action="store_true",
        help="show third-party progress bars (model loading, shard writing), hidden by default",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.register(subparsers)
    return parser


def configure_logging(level: str, library_progress: bool = False) -> None:
    """corl-vl's own log lines to stderr (``corl-vl: …``, warnings marked), third-party bars off unless asked."""
    if not library_progress:
        for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
            os.environ.setdefault(name, "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    logger = logging.getLogger("corl_vl")
    logger.setLevel(level.upper())
    if not any(getattr(h, "_corl_vl", False) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(_Format())
        handler._corl_vl = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a line is logged (a caller may have replaced it since)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"corl-vl: {level}{record.getMessage()}"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        configure_cache_env()
    except CorlError as err:  # CORL_VL_CACHE names a file, an unwritable place …: one line, before any work
        print(f"corl-vl: error: {err}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, args.library_progress)
    try:
        return int(args.func(args) or 0)
    except CorlError as err:
        print(f"corl-vl {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (
        Interrupted
    ) as err:  # training stopped on SIGINT/SIGTERM after saving; the message says how to resume
        print(f"corl-vl {args.command}: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:  # Ctrl-C outside a training loop (loading, grading …): nothing to save
        print(f"\ncorl-vl {args.command}: interrupted", file=sys.stderr)
        return 130
    except OSError as err:  # disk full, read-only, permission denied … anywhere: one line, not a traceback
        line = os_error_line(err)
        if line is None:
            raise
        print(f"corl-vl {args.command}: error: {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
