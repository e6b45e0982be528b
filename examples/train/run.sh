#!/bin/sh
# The bundled training example: Kaldi's frame-level recipe in miniature, with compnet in place
# of nnet3-init / nnet3-get-egs / nnet3-shuffle-egs / nnet3-merge-egs / nnet3-train /
# nnet3-compute-prob / nnet3-combine. Data: examples/train/make_data.py (8 classes, 13-dim
# features; 40 training and 8 held-out utterances).
#
# Usage: examples/train/run.sh [WORKDIR]      (env COMPNET: the binary; EPOCHS, default 6)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
B=${COMPNET:-$here/../../target/release/compnet}
W=${1:-${TMPDIR:-/tmp}/compnet-train-example}
EPOCHS=${EPOCHS:-6}
mkdir -p "$W"
ctx="--left-context=4 --right-context=4"
"$B" init --srand=1 "$here/net.config" "$W/0.raw" 2>/dev/null
"$B" get-egs --num-pdfs=8 $ctx --num-frames=8 "ark:$here/train_feats.ark" "ark:$here/train_post.txt" "ark:$W/train_unmerged.ark" 2>"$W/get_egs.log"
"$B" get-egs --num-pdfs=8 $ctx --num-frames=8 "ark:$here/valid_feats.ark" "ark:$here/valid_post.txt" "ark:$W/valid_unmerged.ark" 2>>"$W/get_egs.log"
"$B" merge-egs --minibatch-size=32 "ark:$W/valid_unmerged.ark" "ark:$W/valid.ark" 2>/dev/null
prob() { "$B" compute-prob "$1" "ark:$W/valid.ark" 2>&1 | sed -n "s/.*Overall \(log-likelihood\|accuracy\) for 'output' is \([^ ]*\) per frame.*/\2/p" | paste -sd' ' -; }
echo "epoch  held-out log-likelihood  accuracy   (training log: $W/train.N.log)"
set -- $(prob "$W/0.raw"); echo "    0  $1  $2"
e=1
while [ "$e" -le "$EPOCHS" ]; do
  "$B" shuffle-egs --srand="$e" "ark:$W/train_unmerged.ark" "ark:$W/shuffled.ark" 2>/dev/null
  "$B" merge-egs --minibatch-size=32 "ark:$W/shuffled.ark" "ark:$W/train.$e.ark" 2>/dev/null
  "$B" train --srand="$e" --print-interval=20 "$W/$((e - 1)).raw" "ark:$W/train.$e.ark" "$W/$e.raw" 2>"$W/train.$e.log"
  set -- $(prob "$W/$e.raw"); echo "    $e  $1  $2"
  e=$((e + 1))
done
"$B" combine "$W/$EPOCHS.raw" "$W/$((EPOCHS - 1)).raw" "$W/$((EPOCHS - 2)).raw" "ark:$W/valid.ark" "$W/final.raw" 2>"$W/combine.log"
set -- $(prob "$W/final.raw"); echo "final  $1  $2   ($W/final.raw, after combine)"
