#!/usr/bin/env bash
# Data-parallel training throughput behind docs/SCALING.md ("Measured"): `compnet fit
# --parallel=data` under mpirun with 1 and 2 ranks (1 thread each) on the wsj TDNN of
# tests/data/kaldi/perf (Kaldi's natural-gradient stepper), global minibatches of 256 egs x 8
# frames, egs made as scripts/bench_train.sh makes them (random 40-dim features, 100-dim online
# iVectors, 3000 pdfs). Prints, per rank count, the training rate (global frames/s over the
# minibatches' time, from fit's own report), the gradient all-reduce per minibatch and its
# share of the step, the best of ROUNDS runs, and the speed-up of 2 ranks over 1.
#
# Usage: scripts/bench_mpi.sh [ROUNDS] [EPOCHS]
#   Needs Open MPI (mpirun) and a build with `--features mpi` (the script builds it; or env
#   COMPNET: such a binary).
#   MPIRUN_ARGS: extra mpirun options (default: --oversubscribe, and --allow-run-as-root as
#   root). The machine's load is printed first: run it on a quiet machine for figures to keep.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
EPOCHS=${2:-1}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "${COMPNET:-}" ]; then
  B=$COMPNET
else
  cargo build --release --features mpi --bin compnet >&2
  B=${CARGO_TARGET_DIR:-target}/release/compnet
fi
ROOT=()
[ "$(id -u)" = 0 ] && ROOT=(--allow-run-as-root)
read -r -a EXTRA <<<"${MPIRUN_ARGS:---oversubscribe}"
scripts/wsj_data.sh "$B" "$OUT" 48
params=$("$B" info "$OUT/wsj.raw" 2>/dev/null | sed -n 's/^num-parameters: *//p')
echo "wsj TDNN: $params parameters ($((params * 4 / 1048576)) MiB of gradient); 1800 egs of 8 frames, minibatches of 256 egs"
for np in 1 2; do
  best=0
  line=
  for r in $(seq "$ROUNDS"); do
    rm -rf "$OUT/fit"
    mpirun "${ROOT[@]}" "${EXTRA[@]}" -np "$np" "$B" fit "$OUT/wsj.raw" --train "ark:$OUT/egs.ark" \
      --out "$OUT/fit" --stepper=ng --minibatch-size=256 --num-epochs="$EPOCHS" \
      --learning-rate=0.0001 --srand=1 --num-threads=1 --parallel=data 2>"$OUT/log" >/dev/null ||
      { cat "$OUT/log" >&2; exit 1; }
    l=$(grep -o '[0-9]* ranks, --parallel=data: .*' "$OUT/log")
    rate=$(sed -n 's/.*--parallel=data: \([0-9.]*\) frames.*/\1/p' <<<"$l")
    if awk -v a="$rate" -v b="$best" 'BEGIN { exit !(a > b) }'; then
      best=$rate
      line=$l
    fi
  done
  echo "$line" | sed "s/^1 ranks/1 rank/"
  eval "rate$np=$best"
done
awk -v a="$rate1" -v b="$rate2" 'BEGIN { printf "2 ranks / 1 rank: %.2f x\n", b / a }'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
