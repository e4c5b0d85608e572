#!/usr/bin/env bash
# The one prepared GPU script: single-GPU figures, then the multi-GPU checks where 2 GPUs are visible.
# Not run by `make test` / `make bench` / CI. Nothing is downloaded. Part 1 is sized for under 8 minutes
# on one H200 (measured: about 4 minutes, figures in bench/RESULTS.md).
#
#   bash bench/gpu.sh            # part 1 on 7B shapes (needs CUDA); part 2 with >= 2 GPUs
#   bash bench/gpu.sh --tiny     # part 1 on tiny shapes: the same code in seconds, CPU or GPU
#                                # (tests/integration/test_gpu_figures.py runs this on CPU)
# Extra arguments go to bench/gpu_figures.py (--arch llava|qwen2_vl|both, --tiny, --out FILE).
#
# Part 1, always: bench/gpu_figures.py on random-init LLaVA-1.5-7B- and Qwen2-VL-7B-shaped models in
#   bf16: evaluation tokens/s (evalsuite's generate vs plain HF generate, same batch and token count),
#   CSR tree nodes/s and tokens/s (reference engine on 4 prompts, pool engine on 64, vLLM (tree.engine vllm,
#   LLaVA, where a vLLM environment is found) on the pool's 64, each with peak memory, forwards per
#   1,000 sentences and the estimated hours of one 12,856-prompt iteration), LoRA DPO s/step and peak memory, each with MFU against the device's
#   bf16 peak (the formulas: bench/gpu_models.py). The table is printed; the JSON goes to $W.
# Part 2, >= 2 GPUs (needs `pip install -e '.[deepspeed]'`), else one "skipped" line; about 5 minutes:
#   1. evaluation: torchrun and `accelerate launch` with 2 GPUs give the single-GPU answers (rank 0 writes);
#   2. training: 2 DPO steps under configs/accelerate/multi_gpu.yaml, zero2.yaml and zero3.yaml (bf16 as
#      the presets say), each writing a checkpoint (zero3: the adapter; merge it single-process).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
W=$(mktemp -d "${TMPDIR:-/tmp}/evalsuite-gpu-XXXX")
export OMP_NUM_THREADS=1 HF_HOME=$W/hf

echo "== part 1: single-GPU figures"
$PY bench/gpu_figures.py --arch both --out "$W/gpu_figures.json" "$@"

ngpu=$($PY -c "import torch; print(torch.cuda.device_count())")
if [ "$ngpu" -lt 2 ]; then
  echo "== part 2: skipped (the multi-GPU checks need 2 GPUs, found $ngpu)"
  echo "bench/gpu.sh: done in ${SECONDS}s ($W)"
  exit 0
fi
echo "== part 2: multi-GPU checks on $ngpu GPUs"
$PY -m evalsuite world build --out "$W/world" --images 40 --seed 0 >/dev/null
$PY -m evalsuite tiny-ckpt --out "$W/ck" --seed 0 >/dev/null

answers() { $PY -c "import json,sys; print([json.loads(l)['answer'] for l in open(sys.argv[1])])" "$1/pope/samples.jsonl"; }
RUN=(-m evalsuite run --ckpt "$W/ck" --tasks pope --data-root "$W/world" --limit 16 --gen-kwargs max_new_tokens=4)

$PY "${RUN[@]}" --store "$W/s1" --output "$W/o1" --device cuda:0 >/dev/null
torchrun --nproc_per_node 2 "${RUN[@]}" --store "$W/s2" --output "$W/o2" >/dev/null
accelerate launch --multi_gpu --num_processes 2 "${RUN[@]}" --store "$W/s3" --output "$W/o3" >/dev/null
for o in o2 o3; do
  if [ "$(answers "$W/$o")" != "$(answers "$W/o1")" ]; then echo "FAIL eval $o: answers differ from 1 GPU"; exit 1; fi
done
echo "ok   eval: torchrun and accelerate launch on 2 GPUs = 1 GPU (16 POPE answers)"

$PY - "$W" <<'EOF'
import json, sys
from pathlib import Path
sys.path.insert(0, ".")
from tests.integration.test_train import _captions
w = Path(sys.argv[1])
caps = _captions(w / "world")[:16]
pairs = [{"image": img, "prompt": "describe the image.", "chosen": c, "rejected": caps[(i + 1) % len(caps)][1]}
         for i, (img, c) in enumerate(caps)]
(w / "pairs.json").write_text(json.dumps(pairs))
EOF
for preset in multi_gpu zero2 zero3; do
  extra=(); if [ "$preset" = zero3 ]; then extra=(--save_merged false); fi
  accelerate launch --config_file "configs/accelerate/$preset.yaml" --num_processes 2 training/train.py \
    --config configs/train/tiny_cpu.yaml --use_cpu false --bf16 true --model_name_or_path "$W/ck" \
    --data_path "$W/pairs.json" --image_root "$W/world" --output_dir "$W/train_$preset" "${extra[@]}" >/dev/null
  test -s "$W/train_$preset/metrics.jsonl" || { echo "FAIL train $preset: no metrics"; exit 1; }
  echo "ok   train $preset: $(grep -c '"loss"' "$W/train_$preset/metrics.jsonl") logged steps"
done
echo "all multi-GPU checks passed"
echo "bench/gpu.sh: done in ${SECONDS}s ($W)"
