#!/usr/bin/env bash
# Before/after inference comparison behind docs/PERFORMANCE.md: two `compnet` binaries run the
# whole-process workloads of scripts/bench_inference.sh in turn (A, B, A, B, ...), so machine
# noise hits both alike. Prints the best wall and CPU (user + system) time of each and the
# ratios B/A.
#
# Usage: scripts/bench_compare.sh OLD_BIN NEW_BIN [ROUNDS]   (default 5 rounds)
#   env: PERF_CONFIG_DIR (default: the in-repo copy of the Kaldi perf configs),
#        COMPARE_ONLY="wsj-int8 wsj-looped-int8" (only these workloads)
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1 B=$2 ROUNDS=${3:-5}
DIR=${PERF_CONFIG_DIR:-tests/data/kaldi/perf}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" <<'PY'
import random, struct, sys
out = sys.argv[1]
def ark(path, dim, rows):
    random.seed(dim)
    with open(path, "wb") as f:
        for u in range(4):
            f.write(b"utt%d \0BFM \4" % u + struct.pack("<i", rows) + b"\4" + struct.pack("<i", dim))
            f.write(struct.pack("<%df" % (rows * dim), *(random.uniform(-1, 1) for _ in range(rows * dim))))
ark(f"{out}/feats40.ark", 40, 1500)
ark(f"{out}/feats30.ark", 30, 1500)
ark(f"{out}/ivec.ark", 100, 150)
PY
WORK=(
  "wsj wsj_nnet3_tdnn_1a.config feats40 1"
  "wsj wsj_nnet3_tdnn_1a.config feats40 2"
  "wsj-int8 wsj_nnet3_tdnn_1a.config feats40 1 --quantize=int8"
  "wsj-looped-int8 wsj_nnet3_tdnn_1a.config feats40 1 --looped --quantize=int8"
  "xvector voxceleb_xvector_1a.config feats30 1"
  "xvector-whole voxceleb_xvector_1a.config feats30 1 --frames-per-chunk=1500"
  "tdnnf librispeech_chain_tdnnf_1d.config feats40 1 --frame-subsampling-factor=3"
  "lstm swbd_chain_tdnn_lstm_1m.config feats40 1 --frame-subsampling-factor=3"
)
# "wall cpu" seconds of a command.
secs() {
  /usr/bin/time -o "$OUT/time.txt" -f '%e %U %S' "$@" >/dev/null 2>&1
  awk '{ printf "%.3f %.3f\n", $1, $2 + $3 }' "$OUT/time.txt"
}
printf '%-16s %7s %9s %9s %7s | %9s %9s %7s\n' workload threads old_s new_s new/old old_cpu new_cpu new/old
for w in "${WORK[@]}"; do
  set -- $w
  label=$1 config=$2 feats=$3 t=$4
  shift 4
  if [ -n "${COMPARE_ONLY:-}" ] && ! [[ " $COMPARE_ONLY " == *" $label "* ]]; then continue; fi
  # As scripts/bench_inference.sh: a randomly initialised output layer (the same speed as
  # the configs' zero one, and outputs worth comparing).
  sed 's/ param-stddev=0\.0 bias-stddev=0\.0//' "$DIR/$config" >"$OUT/$label.config"
  "$A" init --srand=1 "$OUT/$label.config" "$OUT/$label.raw" 2>/dev/null
  iv=()
  if grep -q '^input-node name=ivector' "$DIR/$config"; then
    iv=(--online-ivectors="ark:$OUT/ivec.ark" --online-ivector-period=10)
  fi
  ba= bb= ca= cb=
  for r in $(seq "$ROUNDS"); do
    for which in A B; do
      bin=$A; [ $which = B ] && bin=$B
      read -r d c < <(secs "$bin" compute --num-threads="$t" "$@" "${iv[@]}" "$OUT/$label.raw" "ark:$OUT/$feats.ark" ark:/dev/null)
      if [ $which = A ]; then
        if [ -z "$ba" ] || [ "$(echo "$d < $ba" | bc -l)" = 1 ]; then ba=$d; fi
        if [ -z "$ca" ] || [ "$(echo "$c < $ca" | bc -l)" = 1 ]; then ca=$c; fi
      else
        if [ -z "$bb" ] || [ "$(echo "$d < $bb" | bc -l)" = 1 ]; then bb=$d; fi
        if [ -z "$cb" ] || [ "$(echo "$c < $cb" | bc -l)" = 1 ]; then cb=$c; fi
      fi
    done
  done
  printf '%-16s %7s %9.3f %9.3f %7.3f | %9.3f %9.3f %7.3f\n' "$label" "$t" "$ba" "$bb" "$(echo "$bb / $ba" | bc -l)" \
    "$ca" "$cb" "$(echo "$cb / $ca" | bc -l)"
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
