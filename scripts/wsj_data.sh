#!/usr/bin/env bash
# The wsj TDNN benchmarks' data, made the same way for each of them: UTTS utterances of 300
# random 40-dim frames with 100-dim online iVectors (period 10) and random pdf posteriors over
# 3000 pdfs (python's random.Random(1)), the network of tests/data/kaldi/perf initialised
# with --srand=1 (wsj.raw), and its egs of 8 frames (egs.ark, in utterance order).
#
# Usage: scripts/wsj_data.sh COMPNET DIR [UTTS]   (UTTS defaults to 48)
set -euo pipefail
B=$1
DIR=$2
UTTS=${3:-48}
cd "$(dirname "$0")/.."
python3 - "$DIR" "$UTTS" <<'PY'
import random, struct, sys
out, utts = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
with open(f"{out}/feats.ark", "wb") as f, open(f"{out}/ivec.ark", "wb") as g, open(f"{out}/post.txt", "w") as p:
    for u in range(utts):
        rows = 300
        key = b"utt%03d" % u
        f.write(key + b" \0BFM \4" + struct.pack("<i", rows) + b"\4" + struct.pack("<i", 40))
        f.write(struct.pack("<%df" % (rows * 40), *(rng.gauss(0, 1) for _ in range(rows * 40))))
        g.write(key + b" \0BFM \4" + struct.pack("<i", 30) + b"\4" + struct.pack("<i", 100))
        g.write(struct.pack("<%df" % (30 * 100), *(rng.gauss(0, 1) for _ in range(30 * 100))))
        p.write(key.decode() + " " + " ".join("[ %d 1 ]" % rng.randrange(3000) for _ in range(rows)) + "\n")
PY
"$B" init --srand=1 tests/data/kaldi/perf/wsj_nnet3_tdnn_1a.config "$DIR/wsj.raw" 2>/dev/null
"$B" get-egs --num-pdfs=3000 --left-context=13 --right-context=7 --num-frames=8 \
  --online-ivectors="ark:$DIR/ivec.ark" --online-ivector-period=10 \
  "ark:$DIR/feats.ark" "ark:$DIR/post.txt" "ark:$DIR/egs.ark" 2>/dev/null
