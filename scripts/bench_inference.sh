#!/usr/bin/env bash
# Inference measurement behind docs/PERFORMANCE.md ("Inference"): whole-process wall time of
# `compnet compute` (defaults: 50-frame chunks) on the real-size networks of
# tests/data/kaldi/perf, the workload of that directory's README (4 utterances × 1,500
# frames of random features, 40-dim or 30 for the x-vector net, online 100-dim iVectors with
# period 10 where the net has an `ivector` input), model load and compilation included as in
# Kaldi's figures; then the in-process bench (benches/inference.rs) on 1 and 2 threads.
#
# Usage: scripts/bench_inference.sh [RUNS]      (best of RUNS whole-process runs, default 3)
#   env: CARGO_TARGET_DIR, PERF_CONFIG_DIR, SKIP_INPROC=1 (whole-process runs only)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
DIR=${PERF_CONFIG_DIR:-tests/data/kaldi/perf}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --release --bin compnet >&2
BIN=${CARGO_TARGET_DIR:-target}/release/compnet

# Random binary archives (Kaldi's binary float-matrix format: "key \0BFM \4<rows>\4<cols><data>").
python3 - "$OUT" <<'EOF'
import random, struct, sys
out = sys.argv[1]
def ark(path, dim, rows_of):
    random.seed(dim)
    with open(path, "wb") as f:
        for u in range(4):
            rows = rows_of
            f.write(b"utt%d \0BFM \4" % u + struct.pack("<i", rows) + b"\4" + struct.pack("<i", dim))
            f.write(struct.pack("<%df" % (rows * dim), *(random.uniform(-1, 1) for _ in range(rows * dim))))
ark(f"{out}/feats40.ark", 40, 1500)
ark(f"{out}/feats30.ark", 30, 1500)
ark(f"{out}/ivec.ark", 100, 150)
EOF

# label config feats options...
WORK=(
  "wsj wsj_nnet3_tdnn_1a.config feats40"
  "xvector voxceleb_xvector_1a.config feats30"
  "xvector-whole voxceleb_xvector_1a.config feats30 --frames-per-chunk=1500"
  "tdnnf librispeech_chain_tdnnf_1d.config feats40 --frame-subsampling-factor=3"
  "lstm swbd_chain_tdnn_lstm_1m.config feats40 --frame-subsampling-factor=3"
)
printf '%-14s %7s %8s %9s\n' workload threads best_s frames/s
for w in "${WORK[@]}"; do
  set -- $w
  label=$1 config=$2 feats=$3
  shift 3
  "$BIN" init "$DIR/$config" "$OUT/$label.raw" 2>/dev/null
  iv=()
  if grep -q '^input-node name=ivector' "$DIR/$config"; then
    iv=(--online-ivectors="ark:$OUT/ivec.ark" --online-ivector-period=10)
  fi
  threads="1"
  [ "$label" = wsj ] && threads="1 2"
  for t in $threads; do
    best=
    for r in $(seq "$RUNS"); do
      s=$(date +%s.%N)
      "$BIN" compute --num-threads="$t" "$@" "${iv[@]}" "$OUT/$label.raw" "ark:$OUT/$feats.ark" ark:/dev/null 2>/dev/null
      e=$(date +%s.%N)
      d=$(echo "$e - $s" | bc -l)
      if [ -z "$best" ] || [ "$(echo "$d < $best" | bc -l)" = 1 ]; then best=$d; fi
    done
    printf '%-14s %7s %8.3f %9.0f\n' "$label" "$t" "$best" "$(echo "6000 / $best" | bc -l)"
  done
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

if [ -z "${SKIP_INPROC:-}" ]; then
  cargo bench --bench inference --no-run >&2
  BENCH=$(cargo bench --bench inference --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
  "$BENCH" 1
  "$BENCH" 2 wsj xvector-whole tdnnf
fi
