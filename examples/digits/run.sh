#!/bin/sh
# The README's main job: trains a network on real data, the UCI hand-written digits (1,797
# images of 8x8 pixels, CC BY 4.0; see LICENSE and make_data.py), each image 8 frames of 8
# pixels with a label per frame, straight from the Kaldi archives in train/ and valid/.
#
# Usage: examples/digits/run.sh [WORKDIR]
#   env COMPNET: the binary; ARCH: tdnn (default), lstm or xvector (a pooling network trained
#   on the per-image labels of utt2label); EPOCHS: overrides fit.toml's 12.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
B=${COMPNET:-$here/../../target/release/compnet}
W=${1:-${TMPDIR:-/tmp}/compnet-digits}
ARCH=${ARCH:-tdnn}
mkdir -p "$W"
set -- --config="$here/fit.toml"
if [ "$ARCH" = xvector ]; then set -- "$@" --labels=utterance; fi
if [ -n "${EPOCHS:-}" ]; then set -- "$@" --num-epochs="$EPOCHS"; fi
"$B" fit "$here/$ARCH.config" --train "$here/train" --valid "$here/valid" --out "$W/$ARCH" \
  --num-threads=2 "$@" 2>"$W/$ARCH.log" || { cat "$W/$ARCH.log" >&2; exit 1; }
echo "training log: $W/$ARCH.log; per-epoch figures: $W/$ARCH/metrics.jsonl"
