#!/usr/bin/env bash
# CNN-TDNN inference behind docs/PERFORMANCE.md ("Convolution"): whole-process wall time of
# `compnet compute` and Kaldi's `nnet3-compute` (defaults: 50-frame chunks) on
# tests/data/kaldi/perf/mini_librispeech_cnn_tdnn_1a.config, 4 utterances × 1,500 frames of
# random 40-dim features, 1 and 2 threads, interleaved, best of RUNS; where `perf` is installed,
# the convolution's share of compnet's CPU samples; then the per-layer convolution speed against
# the sgemm peak (examples/conv_bench.rs) on 1 and 2 threads.
#
# Usage: scripts/bench_cnn.sh KALDI_RUN [RUNS]   (KALDI_RUN: Kaldi's launcher script;
#   it must run `KALDI_RUN nnet3-compute ...`)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/blas_coretype.sh  # for KALDI_RUN and any OpenBLAS program
KALDI=${1:?usage: scripts/bench_cnn.sh KALDI_RUN [RUNS]}
RUNS=${2:-3}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --release --bin compnet --example conv_bench >&2
BIN=${CARGO_TARGET_DIR:-target}/release/compnet
python3 - "$OUT" <<'PY'
import random, struct, sys
out = sys.argv[1]
random.seed(40)
with open(f"{out}/feats.ark", "wb") as f:
    for u in range(4):
        f.write(b"utt%d \0BFM \4" % u + struct.pack("<i", 1500) + b"\4" + struct.pack("<i", 40))
        f.write(struct.pack("<%df" % (1500 * 40), *(random.uniform(-1, 1) for _ in range(1500 * 40))))
PY
"$BIN" init tests/data/kaldi/perf/mini_librispeech_cnn_tdnn_1a.config "$OUT/cnn.raw" 2>/dev/null
# No output comparison here: the freshly initialised model's BatchNorm layers have no
# statistics, and each program invents random ones in test mode (with different generators).
# Agreement with Kaldi is the cnn-small golden case's job (tests/golden_compute.rs).
printf '%-8s %7s %8s %9s\n' program threads best_s frames/s
declare -A best
for r in $(seq "$RUNS"); do
  for t in 1 2; do
    for prog in compnet kaldi; do
      s=$(date +%s.%N)
      if [ $prog = compnet ]; then
        "$BIN" compute --num-threads="$t" "$OUT/cnn.raw" "ark:$OUT/feats.ark" ark:/dev/null 2>/dev/null
      else
        OPENBLAS_NUM_THREADS=$t "$KALDI" nnet3-compute "$OUT/cnn.raw" "ark:$OUT/feats.ark" ark:/dev/null 2>/dev/null
      fi
      e=$(date +%s.%N)
      d=$(echo "$e - $s" | bc -l)
      k="$prog $t"
      if [ -z "${best[$k]:-}" ] || [ "$(echo "$d < ${best[$k]}" | bc -l)" = 1 ]; then best[$k]=$d; fi
    done
  done
done
for t in 1 2; do
  for prog in compnet kaldi; do
    b=${best["$prog $t"]}
    printf '%-8s %7s %8.3f %9.0f\n' "$prog" "$t" "$b" "$(echo "6000 / $b" | bc -l)"
  done
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
# The convolution's share of the time, measured: `perf` call graphs of one `compute` run, the
# share of the CPU samples (all threads) spent inside TimeHeightConvolutionComponent's
# propagate, its GEMMs included.
if command -v perf >/dev/null; then
  for t in 1 2; do
    if ! perf record -q --call-graph dwarf,16384 -F 400 -o "$OUT/perf.data" \
      "$BIN" compute --num-threads="$t" "$OUT/cnn.raw" "ark:$OUT/feats.ark" ark:/dev/null 2>/dev/null; then
      echo "perf record failed (not permitted here?); no measured share"
      break
    fi
    share=$(perf report -i "$OUT/perf.data" --children --stdio -g none --sort sym 2>/dev/null \
      | awk '/TimeHeightConvolutionComponent as .*Component>::propagate/ && !found { print $1; found = 1 }')
    echo "convolution's share of the CPU samples, $t thread(s): ${share:-not found}"
  done
fi
EX=${CARGO_TARGET_DIR:-target}/release/examples/conv_bench
"$EX" 1
"$EX" 2
