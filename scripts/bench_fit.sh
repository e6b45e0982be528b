#!/usr/bin/env bash
# `compnet fit` straight from feature archives against `compnet train` on pre-made egs
# (docs/PERFORMANCE.md, "compnet fit"): the wsj TDNN of tests/data/kaldi/perf (natural
# gradient), the same data, the same minibatch shape (256 chunks x 8 output frames, 13/7
# context, one 100-dim iVector per utterance), one pass / one epoch with Kaldi's stepper, 1 and
# 2 threads, whole process (reading, cutting and merging included for fit; reading pre-made
# merged egs for train), interleaved (train, fit, train, fit, ...), best of ROUNDS, by wall
# clock and by CPU time (user + sys, steadier on a loaded machine).
# Random 40-dim features, iVectors and pdf alignments (3000 pdfs) are made by python3.
#
# Usage: scripts/bench_fit.sh [ROUNDS]
#   env FIT_OPTS: more options for fit (e.g. --checkpoint-every=never, to leave out the
#   end-of-run checkpoint, which train does not write)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --release --bin compnet >&2
B=${CARGO_TARGET_DIR:-target}/release/compnet
mkdir -p "$OUT/data"
python3 - "$OUT/data" <<'PY'
import random, struct, sys
out = sys.argv[1]
rng = random.Random(1)
with open(f"{out}/feats.ark", "wb") as f, open(f"{out}/ivector.ark", "wb") as g, open(f"{out}/ali.ark", "w") as a, \
        open(f"{out}/../ivector_rows.ark", "wb") as m:
    for u in range(48):
        rows = 300
        key = b"utt%03d" % u
        f.write(key + b" \0BFM \4" + struct.pack("<i", rows) + b"\4" + struct.pack("<i", 40))
        f.write(struct.pack("<%df" % (rows * 40), *(rng.gauss(0, 1) for _ in range(rows * 40))))
        g.write(key + b" \0BFV \4" + struct.pack("<i", 100))
        ivec = struct.pack("<100f", *(rng.gauss(0, 1) for _ in range(100)))
        g.write(ivec)
        # The same iVector as a one-row matrix for get-egs (online iVectors, period 300).
        m.write(key + b" \0BFM \4" + struct.pack("<i", 1) + b"\4" + struct.pack("<i", 100) + ivec)
        a.write(key.decode() + " " + " ".join("%d" % rng.randrange(3000) for _ in range(rows)) + "\n")
PY
"$B" init --srand=1 tests/data/kaldi/perf/wsj_nnet3_tdnn_1a.config "$OUT/wsj.raw" 2>/dev/null
# The egs `train` reads: the same chunks fit cuts (get-egs takes an alignment as well),
# shuffled and merged into minibatches of 256.
"$B" get-egs --num-pdfs=3000 --left-context=13 --right-context=7 --num-frames=8 \
  --online-ivectors="ark:$OUT/ivector_rows.ark" --online-ivector-period=300 \
  "ark:$OUT/data/feats.ark" "ark:$OUT/data/ali.ark" "ark:$OUT/egs1.ark" 2>/dev/null
"$B" shuffle-egs --srand=1 "ark:$OUT/egs1.ark" "ark:$OUT/egs2.ark" 2>/dev/null
"$B" merge-egs --minibatch-size=256 "ark:$OUT/egs2.ark" "ark:$OUT/egs.ark" 2>/dev/null
frames=$(( $("$B" compute-prob "$OUT/wsj.raw" "ark:$OUT/egs.ark" 2>&1 | sed -n "s/.*log-likelihood.* over \([0-9]*\) frames.*/\1/p") ))
echo "data: $frames output frames; train: pre-made egs in minibatches of 256 x 8; fit: --train $OUT/data (feats.ark, ali.ark, ivector.ark), --minibatch-size=256 --chunk-width=8"
best() { cut -d' ' -f1 | sort -g | head -1; }
best_cpu() { awk '{ print $2 + $3 }' | sort -g | head -1; }
for t in 1 2; do
  : >"$OUT/t$t"; : >"$OUT/f$t"
  for r in $(seq "$ROUNDS"); do
    /usr/bin/time -f "%e %U %S" -a -o "$OUT/t$t" "$B" train --num-threads=$t --srand=1 \
      "$OUT/wsj.raw" "ark:$OUT/egs.ark" "$OUT/t.raw" 2>/dev/null
    rm -rf "$OUT/fit"
    /usr/bin/time -f "%e %U %S" -a -o "$OUT/f$t" "$B" fit "$OUT/wsj.raw" --train "$OUT/data" --out "$OUT/fit" \
      --num-threads=$t --srand=1 --stepper=ng --learning-rate=0.001 --num-epochs=1 \
      --minibatch-size=256 --chunk-width=8 ${FIT_OPTS:-} >/dev/null 2>&1
  done
  tt=$(best <"$OUT/t$t"); ff=$(best <"$OUT/f$t")
  tc=$(best_cpu <"$OUT/t$t"); fc=$(best_cpu <"$OUT/f$t")
  awk -v n="$frames" -v a="$tt" -v b="$ff" -v c="$tc" -v d="$fc" -v t="$t" -v r="$ROUNDS" 'BEGIN {
    printf "threads %d (best of %d): wall: train on egs %.2f s (%.0f frames/s), fit from archives %.2f s (%.0f frames/s), fit/train frames/s %.3f; CPU: train %.2f s, fit %.2f s, fit/train %.3f\n",
      t, r, a, n / a, b, n / b, a / b, c, d, c / d }'
  echo "  all runs (wall user sys): train $(tr '\n' ';' <"$OUT/t$t") | fit $(tr '\n' ';' <"$OUT/f$t")"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
