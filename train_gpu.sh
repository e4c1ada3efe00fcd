#!/usr/bin/env bash
# Train the live tiny K3 from scratch on one CUDA GPU in about ten minutes (an H200), with large
# batches, and write the finished checkpoint, its card, the training log and the evaluation as files.
#
#   OUT=/some/folder bash train_gpu.sh            # default OUT: assets/ (what the app loads)
#
# MINUTES: a whole number. The number of steps is fixed from the speed of the first steps so that the schedule (warm-up,
# cosine decay, the quantisation-aware last 30%) ends inside MINUTES, leaving time for the export and
# the balance calibration. BATCH sequences of SEQ tokens per step (256 x 128 = 32,768 tokens), in forwards of
# at most 192 sequences (512 ran out of memory on an H200). Measured there (2026-12-04): 3.05 s a step of
# 384 x 128, launch-bound (README, Training), so ten minutes give a few hundred steps, not yet enough.
# Extra arguments go to `python -m model.train` (e.g. --micro 64 when memory is short).
# Without Debian's python3.11-doc (the corpus's documentation pages) the one token cache in runs/
# (runs/tokens-<corpus>-<tokenizer>.npz, built by `python -m model.train` where the package is) is used.
set -euo pipefail
cd "$(dirname "$0")"
OUT="${OUT:-assets}"
MINUTES="${MINUTES:-9}"
BATCH="${BATCH:-256}"
SEQ="${SEQ:-128}"
mkdir -p "$OUT"
python -m model.train --fresh --batch "$BATCH" --seq "$SEQ" --fit-minutes "$MINUTES" --minutes "$((MINUTES + 3))" \
    --runs "$OUT/runs" --out "$OUT" "$@" 2>&1 | tee "$OUT/train_output.txt"
test -f "$OUT/k3_tiny.safetensors" && test -f "$OUT/train_log.csv"
rm -rf "$OUT/runs"
echo "done: $OUT/k3_tiny.safetensors; put it, k3_tiny.json and train_log.csv in assets/, then python -m model.evaluate"
