#!/usr/bin/env bash
# What derivative-time limits save on a TDNN-LSTM training step (docs/PERFORMANCE.md,
# "Derivative-time limits"): `compnet train` and Kaldi's `nnet3-train` on the same egs, with
# and without `--optimization.min-deriv-time` / `max-deriv-time-relative`, interleaved in the
# same run, best of ROUNDS, whole process, 1 thread; wall time and CPU time (user + sys, the
# steadier figure on a machine shared with other work). Network: the swbd TDNN-LSTM of
# tests/data/kaldi/perf (36 M parameters, context 11/21, iVectors), natural gradient on.
# Egs: random 40-dim features, 100-dim online iVectors (period 10) and random pdf posteriors
# (3000 pdfs); 40-frame chunks with 40 frames of extra left context (as Kaldi's TDNN-LSTM
# recipes cut them), minibatches of 8 chunks (4 utterances of 160 frames: 2 minibatches).
# Limits as Kaldi's train_rnn.py sets them for --deriv-truncate-margin=8: min-deriv-time = -(8 + model left context 11) = -19,
# max-deriv-time-relative = 8 + model right context 21 = 29.
#
# Usage: scripts/bench_deriv_time.sh [ROUNDS] [KALDI_RUN]
#   KALDI_RUN (or env KALDI_RUN): Kaldi's launcher script (`run`); without it only compnet runs.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/blas_coretype.sh  # for KALDI_RUN and any OpenBLAS program
ROUNDS=${1:-2}
KALDI=${2:-${KALDI_RUN:-}}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --release --bin compnet >&2
B=${CARGO_TARGET_DIR:-target}/release/compnet
python3 - "$OUT" <<'PY'
import random, struct, sys
out = sys.argv[1]
rng = random.Random(1)
with open(f"{out}/feats.ark", "wb") as f, open(f"{out}/ivec.ark", "wb") as g, open(f"{out}/post.txt", "w") as p:
    for u in range(4):
        rows = 160
        key = b"utt%03d" % u
        f.write(key + b" \0BFM \4" + struct.pack("<i", rows) + b"\4" + struct.pack("<i", 40))
        f.write(struct.pack("<%df" % (rows * 40), *(rng.gauss(0, 1) for _ in range(rows * 40))))
        g.write(key + b" \0BFM \4" + struct.pack("<i", rows // 10) + b"\4" + struct.pack("<i", 100))
        g.write(struct.pack("<%df" % (rows // 10 * 100), *(rng.gauss(0, 1) for _ in range(rows // 10 * 100))))
        p.write(key.decode() + " " + " ".join("[ %d 1 ]" % rng.randrange(3000) for _ in range(rows)) + "\n")
PY
"$B" init --srand=1 tests/data/kaldi/perf/swbd_chain_tdnn_lstm_1m.config "$OUT/lstm.raw" 2>/dev/null
"$B" get-egs --num-pdfs=3000 --left-context=51 --right-context=21 --num-frames=40 \
  --online-ivectors="ark:$OUT/ivec.ark" --online-ivector-period=10 \
  "ark:$OUT/feats.ark" "ark:$OUT/post.txt" "ark:$OUT/egs1.ark" 2>/dev/null
"$B" merge-egs --minibatch-size=8 "ark:$OUT/egs1.ark" "ark:$OUT/egs.ark" 2>/dev/null
frames=$(( $("$B" compute-prob "$OUT/lstm.raw" "ark:$OUT/egs.ark" 2>&1 | sed -n "s/.*log-likelihood for 'output'.* over \([0-9]*\) frames.*/\1/p") ))
echo "egs: $frames output frames in minibatches of 8 x 40 (+51 left, +21 right context)"
LIMITS="--optimization.min-deriv-time=-19 --optimization.max-deriv-time-relative=29"
best() { sort -g | head -1; }
for f in cf cl kf kl cfu clu kfu klu; do : >"$OUT/$f"; done
# /usr/bin/time -f '%e %U %S' -> wall in $OUT/X, user+sys in $OUT/Xu.
timed() {
  local name=$1; shift
  /usr/bin/time -f '%e %U %S' -o "$OUT/t" "$@" 2>/dev/null
  awk '{ print $1 }' "$OUT/t" >>"$OUT/$name"
  awk '{ print $2 + $3 }' "$OUT/t" >>"$OUT/${name}u"
}
for r in $(seq "$ROUNDS"); do
  for lim in f l; do
    opts=""; [ $lim = l ] && opts=$LIMITS
    # shellcheck disable=SC2086
    timed "c$lim" "$B" train --num-threads=1 --srand=1 $opts "$OUT/lstm.raw" "ark:$OUT/egs.ark" "$OUT/c.raw" 2>/dev/null
    if [ -n "$KALDI" ] && [ -x "$KALDI" ]; then
      # shellcheck disable=SC2086
      OPENBLAS_NUM_THREADS=1 timed "k$lim" "$KALDI" nnet3-train --use-gpu=no --srand=1 $opts "$OUT/lstm.raw" "ark:$OUT/egs.ark" "$OUT/k.raw" 2>/dev/null
    fi
  done
done
report() {
  local what=$1 sfx=$2
  cf=$(best <"$OUT/cf$sfx"); cl=$(best <"$OUT/cl$sfx")
  awk -v w="$what" -v f="$frames" -v a="$cf" -v b="$cl" 'BEGIN { printf "%s compnet: no limits %.2f s (%.0f frames/s), limits %.2f s (%.0f frames/s): %.2f x\n", w, a, f / a, b, f / b, a / b }'
  if [ -s "$OUT/kf$sfx" ]; then
    kf=$(best <"$OUT/kf$sfx"); kl=$(best <"$OUT/kl$sfx")
    awk -v w="$what" -v f="$frames" -v a="$kf" -v b="$kl" 'BEGIN { printf "%s Kaldi:   no limits %.2f s (%.0f frames/s), limits %.2f s (%.0f frames/s): %.2f x\n", w, a, f / a, b, f / b, a / b }'
    awk -v w="$what" -v a="$cf" -v b="$cl" -v c="$kf" -v d="$kl" 'BEGIN { printf "%s compnet / Kaldi speed: no limits %.2f, limits %.2f\n", w, c / a, d / b }'
  fi
}
report "wall" ""
report "cpu " "u"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
