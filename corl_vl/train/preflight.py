"""Checks that run before any model is loaded: everything that can fail early fails early, in one line.

Why: loading a cohort takes seconds on CPU and minutes on a GPU node; an error found only afterwards (more
problems per step than the data has, GT reward on data without gold answers, a hub id on a machine without
internet) wastes that time and can leave ``config.yaml``, TensorBoard folders and empty metrics behind.
These checks run in :func:`corl_vl.recipe.train` before the models load, and nothing is written to the run
folder until they have passed.

Hub ids: on a cluster node without internet (or with ``HF_HUB_OFFLINE`` set) a model that is not in the local
Hugging Face cache costs half a minute of retries and two tracebacks. Here the cache is looked at first;
a missing model with the hub switched off or unreachable is one line that says how to get it. When every hub
model is cached but the hub is unreachable, offline mode is switched on so the loaders do not retry either.
"""

from __future__ import annotations

import importlib.util
import json
import netrc
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corl_vl.config import CohortConfig, DistributedConfig
from corl_vl.errors import CorlError
from corl_vl.io import read_json_file
from corl_vl.train.deepspeed_setup import deepspeed_config
from corl_vl.train.launch_support import check_support, launch_of

if TYPE_CHECKING:
    from corl_vl.data.sources import SyntheticScope

HUB_PROBE_SECONDS = 5.0  # one request, no retries: an answer in time means "reachable"
_TRUE = {"1", "on", "yes", "true"}


def _hub_id(model: str) -> str | None:
    """The hub id ``model`` would download (a real preset's, or an ``org/name``), or None (tiny, local)."""
    # lazy: PIL, numpy, tokenizers
    from model_adapters.presets import all_presets, get_preset

    if model in all_presets():
        return get_preset(model).hub_id
    if Path(model).is_dir() or model.count("/") != 1 or model.startswith((".", "/", "~")):
        return None
    return model


def _offline_env() -> bool:
    return any(
        os.environ.get(k, "").strip().lower() in _TRUE for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _cached(repo_id: str) -> bool:
    # lazy: huggingface_hub
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


def hub_reachable(timeout: float = HUB_PROBE_SECONDS) -> bool:
    """One HEAD request to the hub's endpoint; any answer (even an HTTP error) means it is reachable."""
    # lazy: huggingface_hub
    from huggingface_hub import constants

    try:
        urllib.request.urlopen(urllib.request.Request(constants.ENDPOINT, method="HEAD"), timeout=timeout)
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):  # URLError, timeouts, refused connections, DNS failures
        return False
    return True


def _go_offline() -> None:
    """The hub is unreachable but everything needed is cached: make the loaders read the cache, not retry."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        # lazy: huggingface_hub
        from huggingface_hub import constants

        constants.HF_HUB_OFFLINE = True  # read at import time; the loaders may already have imported it
    except ImportError:
        pass


def check_adapters(cfg: CohortConfig) -> None:
    """An explicit ``agents[i].adapter`` exists and drives the model's architecture (a preset's family, a
    folder's ``config.json`` model_type); otherwise the load fails later in a traceback or a template error,
    or trains a model through another family's prompts. Adapters that declare no model types are trusted."""
    # lazy: PIL, numpy, tokenizers
    from model_adapters.presets import all_presets, get_preset
    from model_adapters.registry import get_adapter_class

    for i, agent in enumerate(cfg.agents):
        if not agent.adapter:
            continue
        drives = set(get_adapter_class(agent.adapter).model_types)
        spec = str(agent.model)
        if spec in all_presets():
            preset = get_preset(spec)
            types, what = set(get_adapter_class(preset.adapter).model_types), f"preset {spec}"
        elif (Path(spec).expanduser() / "config.json").is_file():
            try:
                found = json.loads((Path(spec).expanduser() / "config.json").read_text()).get("model_type")
            except (OSError, ValueError, AttributeError):
                continue  # the loader names an unreadable config.json itself
            types, what = ({found} if isinstance(found, str) else set()), f"{spec} (model_type {found!r})"
        else:
            continue  # hub ids: their config is not read before the load
        if drives and types and not drives & types:
            raise CorlError(
                f"agents.{i}.adapter: {agent.adapter} drives model types {', '.join(sorted(drives))}, not "
                f"{what}; drop agents.{i}.adapter (the model's own is found) or point agents.{i}.model at a "
                f"{agent.adapter} checkpoint"
            )


def check_models_available(cfg: CohortConfig) -> None:
    """Every agent's model is a tiny preset, a local folder, or a hub id that can be had without waiting."""
    check_adapters(cfg)
    missing = []
    for i, agent in enumerate(cfg.agents):
        spec = str(agent.model)
        if spec.startswith(("/", ".", "~")) and not Path(spec).expanduser().is_dir():
            raise CorlError(f"agents.{i}.model: folder {spec} does not exist")
        repo = _hub_id(spec)
        if repo is not None and not _cached(repo):
            missing.append((i, agent.name, repo))
    hub_ids = [_hub_id(str(a.model)) for a in cfg.agents]
    if not any(hub_ids):
        return
    offline = _offline_env()
    reachable = False if offline else hub_reachable()
    if missing and not reachable:
        i, name, repo = missing[0]
        why = (
            "HF_HUB_OFFLINE is set" if offline else "the Hugging Face hub cannot be reached from this machine"
        )
        others = f" (and {len(missing) - 1} more agent(s))" if len(missing) > 1 else ""
        raise CorlError(
            f"model {repo} of agent '{name}'{others} is not in the local Hugging Face cache and {why}: "
            f"download it where there is internet (huggingface-cli download {repo} --local-dir DIR), then pass "
            f"the folder (--set agents.{i}.model=DIR) or set HF_HOME to the cache that holds it"
        )
    if not reachable:
        _go_offline()


def check_data(cfg: CohortConfig, scope: SyntheticScope | None = None) -> list[Any]:
    """Load the training problems once (synthetic ones of ``scope``: an experiment's skills and view) and check
    what the step needs of them; returns them."""
    # lazy: PIL, numpy
    from corl_vl.rewards.combine import step_reward
    from corl_vl.train.cohort_data import load_base_problems

    d = cfg.data
    problems = load_base_problems(d, scope)
    if not problems:
        raise CorlError(f"data.train: {d.train} has no problems")
    if d.problems_per_step > len(problems):
        raise CorlError(
            f"data.problems_per_step={d.problems_per_step} but {d.train} has only {len(problems)} problems; "
            f"lower data.problems_per_step or raise data.limit"
        )
    if step_reward(cfg.reward).needs_gold:  # the main reward or a reward.combine part
        no_gold = [p.id for p in problems if p.answer in (None, "")]
        if no_gold:
            raise CorlError(
                f"reward.name={cfg.reward.name} needs a gold answer for every problem, but {len(no_gold)} of {len(problems)} in "
                f"{d.train} have none (first: {no_gold[0]!r}); use a labelled dataset or another reward"
            )
    for i, agent in enumerate(cfg.agents):
        if agent.data_view and not Path(agent.data_view).exists():
            raise CorlError(f"agents.{i}.data_view: {agent.data_view} does not exist")
    return problems


def check_deepspeed(settings: DistributedConfig) -> None:
    """``distributed.deepspeed`` (of ``settings``, the section) names a readable JSON file."""
    path = settings.deepspeed
    if not path:
        return
    read_json_file(path, "distributed.deepspeed")


def check_launch(cfg: CohortConfig, dist: Any) -> None:
    """What this process layout refuses (``dist``: a launch's placement, None for one process), decided from the
    config before any model loads or the run folder is written: the DeepSpeed file's trainer-owned keys, stage
    and offload, then the table of what each layout supports (:mod:`corl_vl.train.launch_support`)."""
    path, stage = cfg.distributed.deepspeed, None
    if path and dist is not None:  # the dtype only fills "auto"
        ds = deepspeed_config(
            path,
            zero_stage=cfg.distributed.zero_stage,
            grad_clip=cfg.train.grad_clip,
            group_size=dist.group_size,
            offload=cfg.optimizer.offload,
        )
        stage = ds["zero_optimization"]["stage"]
    check_support(cfg, launch_of(cfg, dist, stage))


WANDB_LOCAL_MODES = {"offline", "disabled", "dryrun"}


def check_reporting(report_to: Sequence[str]) -> None:
    """``wandb`` in ``report_to`` (``train.report_to``) can start without asking: installed, and an API key (``WANDB_API_KEY``
    or a ``wandb login`` entry in the netrc file) or a local mode (``WANDB_MODE=offline``). Otherwise
    ``wandb.init`` fails with a traceback after the models have loaded."""
    if "wandb" not in report_to:
        return

    if importlib.util.find_spec("wandb") is None:
        raise CorlError("train.report_to: wandb is not installed (pip install wandb), or drop it")
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE", "").lower() in WANDB_LOCAL_MODES:
        return
    host = urllib.parse.urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        if netrc.netrc(str(path)).authenticators(host or "api.wandb.ai"):
            return
    except (OSError, netrc.NetrcParseError):
        pass  # no readable netrc: no stored key
    raise CorlError(
        "train.report_to: wandb has no API key here (no WANDB_API_KEY, no `wandb login` entry in "
        f"{path}); run `wandb login`, set WANDB_API_KEY, set WANDB_MODE=offline to log locally, or drop wandb"
    )


def preflight(cfg: CohortConfig) -> None:
    """The config-only checks in the order ``corl-vl train`` runs them (the run folder is checked after)."""
    check_deepspeed(cfg.distributed)
    check_reporting(cfg.train.report_to)
    check_models_available(cfg)
    check_data(cfg)
