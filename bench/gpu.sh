#!/usr/bin/env bash
# GPU-only checks of the multi-process paths that CPU tests cannot reach (NCCL, DeepSpeed on CUDA).
# Needs >= 2 GPUs and `pip install -e '.[deepspeed]'`; not run by `make test` / `make bench` / CI.
#
#   bash bench/gpu.sh            # tiny model + synthetic world, built here; ~5 min
#
# 1. evaluation: torchrun and `accelerate launch` with 2 GPUs give the single-GPU answers (rank 0 writes);
# 2. training: 2 DPO steps under configs/accelerate/multi_gpu.yaml, zero2.yaml and zero3.yaml (bf16 as
#    the presets say), each writing a checkpoint (zero3: the adapter; merge it single-process).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
ngpu=$($PY -c "import torch; print(torch.cuda.device_count())")
if [ "$ngpu" -lt 2 ]; then echo "bench/gpu.sh: needs 2 GPUs, found $ngpu" >&2; exit 2; fi
W=$(mktemp -d /tmp/evalsuite-gpu-XXXX)
export OMP_NUM_THREADS=1 HF_HOME=$W/hf
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
echo "all GPU checks passed ($W)"
