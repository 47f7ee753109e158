#!/usr/bin/env bash
# The supported floor, checked: a separate venv with torch 2.11 and transformers 5.17 (the offline GPU image's
# versions) plus corl-vl's other requirements (no vLLM, no DeepSpeed), then a fast subset of the suite in it.
#
#   bash scripts/check_versions.sh                 # venv in /tmp/corl-vl-floor (several GB: the CUDA torch wheel)
#   CHECK_VENV=/path PYTHON=python3.12 bash scripts/check_versions.sh
#
# PyPI's Linux torch 2.11 is the CUDA build; with its nvidia-* wheels it imports and runs on a CPU-only machine.
# Results and what does not work on these versions: docs/install.md ("Supported versions").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${CHECK_VENV:-/tmp/corl-vl-floor}"
py="${PYTHON:-python3.12}"
torch_pin="${TORCH_PIN:-torch==2.11.*}"
vision_pin="${TORCHVISION_PIN:-torchvision==0.26.*}"
transformers_pin="${TRANSFORMERS_PIN:-transformers==5.17.*}"

[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
cons="$(mktemp)"
reqs="$(mktemp)"
trap 'rm -f "$cons" "$reqs"' EXIT
printf '%s\n' "$torch_pin" "$vision_pin" "$transformers_pin" > "$cons"
grep -v '^transformers' requirements/common.txt > "$reqs"  # common.txt pins the vLLM-matched transformers
"${pip[@]}" install -q -c "$cons" "$torch_pin" "$vision_pin" "$transformers_pin" peft -r "$reqs" -r requirements/dev.txt
"${pip[@]}" install -q --no-deps -e .
"$venv/bin/python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'

export CORL_VL_CACHE="${CORL_VL_CACHE:-$venv/corl-vl-cache}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export TOKENIZERS_PARALLELISM=false PYTHONPATH="$root"
exec "$venv/bin/python" -m pytest -m "not slow and not vllm" -q -rfE -p no:cacheprovider \
  tests/test_logprob_tail.py tests/test_grading_formats.py tests/test_grading_official.py tests/test_rewards.py \
  tests/test_config.py tests/test_validation_config.py tests/test_cohort.py tests/test_plan.py \
  tests/test_adapters_prompts.py tests/test_adapters_logprobs.py tests/test_adapter_hooks.py tests/test_tiny_zoo.py \
  tests/test_checkpoint.py tests/test_checkpoint_layout.py tests/test_grpo.py tests/test_full_size.py \
  tests/test_qwen3_vl.py tests/test_placement.py tests/test_rollout.py "$@"
