#!/usr/bin/env bash
# Training throughput behind docs/PERFORMANCE.md ("Training"): `compnet train` against Kaldi's
# `nnet3-train` on the same egs, in the same run, on the wsj TDNN of tests/data/kaldi/perf
# (natural gradient on), minibatches of 256 egs x 8 frames, 1 and 2 threads, whole process,
# interleaved (compnet, Kaldi, compnet, Kaldi, ...), best of ROUNDS. The egs are made by
# compnet's get-egs / shuffle-egs / merge-egs (byte-identical to Kaldi's tools) from random
# 40-dim features, 100-dim online iVectors (period 10) and random pdf posteriors (3000 pdfs).
#
# Usage: scripts/bench_train.sh [ROUNDS] [KALDI_RUN]
#   KALDI_RUN (or env KALDI_RUN): the path of Kaldi's launcher script (`run`, which sets one
#   BLAS thread and runs a Kaldi binary by name); without it only compnet runs.
#   BASE=path/to/an/older/compnet: also run that binary, interleaved with the others (a
#   before/after comparison in the same run).
#   TORCH_PYTHON (default python3): where that Python has torch, also PyTorch's training step
#   on the same network and minibatch on the CPU with the same thread count
#   (scripts/torch_wsj_tdnn.py: steps only, no data reading, plain SGD), interleaved.
#   COMPNET: a prebuilt compnet binary (then cargo does not run); TRAIN_UTTS (default 48, at
#   least 7 for one whole minibatch): utterances of 300 frames in the egs; TRAIN_THREADS
#   (default "1 2"): the thread counts; TORCH_STEPS (default 10): PyTorch's timed steps;
#   GNU_TIME (default /usr/bin/time).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/blas_coretype.sh  # for KALDI_RUN and any OpenBLAS program
ROUNDS=${1:-3}
KALDI=${2:-${KALDI_RUN:-}}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "${COMPNET:-}" ]; then
  B=$COMPNET
else
  cargo build --release --bin compnet >&2
  B=${CARGO_TARGET_DIR:-target}/release/compnet
fi
BASE=${BASE:-}
TIME=${GNU_TIME:-/usr/bin/time}
scripts/wsj_data.sh "$B" "$OUT" "${TRAIN_UTTS:-48}"
mv "$OUT/egs.ark" "$OUT/egs1.ark"
"$B" shuffle-egs --srand=1 "ark:$OUT/egs1.ark" "ark:$OUT/egs2.ark" 2>/dev/null
"$B" merge-egs --minibatch-size=256 "ark:$OUT/egs2.ark" "ark:$OUT/egs.ark" 2>/dev/null
frames=$(( $("$B" compute-prob "$OUT/wsj.raw" "ark:$OUT/egs.ark" 2>&1 | sed -n "s/.*log-likelihood.* over \([0-9]*\) frames.*/\1/p") ))
echo "egs: $frames output frames in minibatches of 256 x 8"
best() { sort -g | head -1; }
PY=${TORCH_PYTHON:-python3}
"$PY" -c 'import torch' 2>/dev/null || PY=
for t in ${TRAIN_THREADS:-1 2}; do
  : >"$OUT/c$t"; : >"$OUT/k$t"; : >"$OUT/b$t"; : >"$OUT/p$t"
  for _ in $(seq "$ROUNDS"); do
    if [ -n "$BASE" ]; then
      "$TIME" -f %e -a -o "$OUT/b$t" "$BASE" train --num-threads="$t" --srand=1 "$OUT/wsj.raw" "ark:$OUT/egs.ark" "$OUT/b.raw" 2>/dev/null
    fi
    "$TIME" -f %e -a -o "$OUT/c$t" "$B" train --num-threads="$t" --srand=1 "$OUT/wsj.raw" "ark:$OUT/egs.ark" "$OUT/c.raw" 2>/dev/null
    if [ -n "$KALDI" ] && [ -x "$KALDI" ]; then
      OPENBLAS_NUM_THREADS=$t "$TIME" -f %e -a -o "$OUT/k$t" "$KALDI" nnet3-train --use-gpu=no --srand=1 "$OUT/wsj.raw" "ark:$OUT/egs.ark" "$OUT/k.raw" 2>/dev/null
    fi
    if [ -n "$PY" ]; then
      "$PY" scripts/torch_wsj_tdnn.py "${TORCH_STEPS:-10}" cpu "$t" 2>/dev/null | sed -n 's/.*training \([0-9]*\) frames.*/\1/p' >>"$OUT/p$t" || true
    fi
  done
  c=$(best <"$OUT/c$t")
  line=$(awk -v f="$frames" -v c="$c" -v t="$t" 'BEGIN { printf "threads %d: compnet %.2f s (%.0f frames/s)", t, c, f / c }')
  if [ -s "$OUT/k$t" ]; then
    k=$(best <"$OUT/k$t")
    line="$line$(awk -v f="$frames" -v c="$c" -v k="$k" 'BEGIN { printf ", Kaldi %.2f s (%.0f frames/s), ratio %.2f", k, f / k, k / c }')"
  fi
  if [ -s "$OUT/b$t" ]; then
    b=$(best <"$OUT/b$t")
    line="$line$(awk -v f="$frames" -v c="$c" -v b="$b" 'BEGIN { printf "; base %.2f s (%.0f frames/s), speed-up %.3f", b, f / b, b / c }')"
    if [ -s "$OUT/k$t" ]; then
      line="$line$(awk -v b="$b" -v k="$k" 'BEGIN { printf ", base / Kaldi %.2f", k / b }')"
    fi
  fi
  if [ -s "$OUT/p$t" ]; then
    p=$(sort -gr <"$OUT/p$t" | head -1)
    line="$line$(awk -v f="$frames" -v c="$c" -v p="$p" 'BEGIN { printf "; pytorch step %.0f frames/s, compnet / pytorch %.2f", p, f / c / p }')"
  elif [ -n "$PY" ]; then
    line="$line; pytorch step: no figure (scripts/torch_wsj_tdnn.py failed)"
  fi
  echo "$line"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
