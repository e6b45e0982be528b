#!/bin/sh
# What Kaldi's steps/nnet3/train_raw_dnn.py does, in miniature, calling only Kaldi's binary
# names: compnet's, from a folder made by `compnet install-kaldi-names` (or, with KALDI_BIN=<dir>,
# whatever binaries that folder holds, e.g. Kaldi's own, to compare). Data: examples/train
# (8 classes, 13-dim features; 40 training and 8 held-out utterances).
#
#   feat-to-dim / feat-to-len / apply-cmvn -> nnet3-init -> nnet3-info (context) ->
#   nnet3-get-egs, nnet3-copy-egs (2 archives), nnet3-subset-egs (diagnostic and combine egs) ->
#   per iteration: nnet3-compute-prob (train and valid), nnet3-info && nnet3-show-progress,
#   2 parallel nnet3-train jobs (nnet3-copy | ..., nnet3-copy-egs | nnet3-shuffle-egs |
#   nnet3-merge-egs), nnet3-average -> nnet3-combine -> nnet3-compute-prob on the final model.
#
# Then it checks the log lines the driver parses: each training job's "Overall average
# objective function for 'output' is X over N frames" and log-prob-per-frame (a job without
# them would be left out of the average), compute-prob's "Overall log-likelihood/accuracy for
# 'output' is X per frame" with the PrintTotalStats():nnet...diagnostics.cc:N prefix,
# show-progress's "Relative parameter differences per layer are [ name:value ... ]" naming every
# updatable component, and nnet3-info's first lines as integers. It prints the valid
# log-likelihood per iteration and exits non-zero if a check fails.
#
# Usage: scripts/kaldi_recipe.sh [WORKDIR]   (env COMPNET: the binary; ITERS, default 4;
#                                             KALDI_BIN: a folder of Kaldi binaries instead)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
data=$root/examples/train
W=${1:-${TMPDIR:-/tmp}/compnet-kaldi-recipe}
ITERS=${ITERS:-4}
NJ=2
mkdir -p "$W"
if [ -n "${KALDI_BIN:-}" ]; then
  bin=$KALDI_BIN
else
  bin=$W/bin
  "${COMPNET:-$root/target/release/compnet}" install-kaldi-names "$bin" 2>/dev/null
fi
PATH=$bin:$PATH
export PATH
dir=$W/exp
egs=$dir/egs
rm -rf "$dir"
mkdir -p "$dir/log" "$egs"
fail() { echo "kaldi_recipe.sh: $*" >&2; exit 1; }

# The data directory's checks and the egs (steps/nnet3/get_egs.sh's calls).
feat_dim=$(feat-to-dim "ark:$data/train_feats.ark" - 2>"$dir/log/feat_to_dim.log")
[ "$feat_dim" = 13 ] || fail "feat-to-dim said '$feat_dim'"
feat-to-len "ark:$data/train_feats.ark" "ark,t:$egs/utt2len" 2>"$dir/log/feat_to_len.log"
[ "$(wc -l < "$egs/utt2len")" = 40 ] || fail "feat-to-len wrote $(wc -l < "$egs/utt2len") lines"
nnet3-init --srand=-2 "$data/net.config" "$dir/0.raw" 2>"$dir/log/init.log"
nnet3-info "$dir/0.raw" 2>/dev/null | head -4 > "$dir/0.info"
# The driver turns every `key: value` of these lines into an integer.
while IFS= read -r line; do
  printf '%s\n' "$line" | grep -Eq '^[a-z-]+: -?[0-9]+$' || fail "nnet3-info line '$line' is not 'key: integer'"
done < "$dir/0.info"
lc=$(sed -n 's/^left-context: //p' "$dir/0.info")
rc=$(sed -n 's/^right-context: //p' "$dir/0.info")
[ -n "$lc" ] && [ -n "$rc" ] || fail "nnet3-info gave no context"
feats() { echo "ark:apply-cmvn --norm-means=false --norm-vars=false ark:/dev/null ark:$1 ark:- |"; }
eg_opts="--num-pdfs=8 --left-context=$lc --right-context=$rc --num-frames=8 --compress=true"
nnet3-get-egs $eg_opts "$(feats "$data/train_feats.ark")" "ark:$data/train_post.txt" "ark:$egs/all.egs" 2>"$dir/log/get_egs_train.log"
nnet3-get-egs $eg_opts "$(feats "$data/valid_feats.ark")" "ark:$data/valid_post.txt" "ark:$egs/valid_all.egs" 2>"$dir/log/get_egs_valid.log"
nnet3-copy-egs --random --srand=0 "ark:$egs/all.egs" "ark:$egs/egs.1.ark" "ark:$egs/egs.2.ark" 2>"$dir/log/split_egs.log"
nnet3-subset-egs --n=300 --srand=0 "ark:$egs/valid_all.egs" "ark:$egs/valid_diagnostic.egs" 2>"$dir/log/subset_valid.log"
nnet3-subset-egs --n=300 --srand=0 "ark:$egs/all.egs" "ark:$egs/train_diagnostic.egs" 2>"$dir/log/subset_train.log"
nnet3-subset-egs --n=200 --srand=1 "ark:$egs/valid_all.egs" "ark:$egs/combine.egs" 2>"$dir/log/subset_combine.log"

diagnostics() { # iter: compute-prob on both diagnostic sets, and progress from the last model
  it=$1
  for set in valid train; do
    nnet3-compute-prob "$dir/$it.raw" "ark,bg:nnet3-copy-egs ark:$egs/${set}_diagnostic.egs ark:- | nnet3-merge-egs --minibatch-size=1:64 ark:- ark:- |" 2>"$dir/log/compute_prob_$set.$it.log" &
  done
  if [ "$it" -gt 0 ]; then
    { nnet3-info "$dir/$it.raw" && nnet3-show-progress --use-gpu=no "$dir/$((it - 1)).raw" "$dir/$it.raw"; } >"$dir/log/progress.$it.log" 2>&1 &
  fi
}

it=0
while [ "$it" -lt "$ITERS" ]; do
  diagnostics "$it"
  # The learning rate decays from 0.002 to 0.0002 and is multiplied by the number of jobs.
  lr=$(awk -v i="$it" -v n="$ITERS" -v j="$NJ" 'BEGIN { printf "%g", j * 0.002 * exp(i / n * log(0.1)) }')
  j=1
  while [ "$j" -le "$NJ" ]; do
    k=$((it * NJ + j - 1))
    archive=$((k % 2 + 1))
    frame=$((k / 2 % 8))
    nnet3-train --print-interval=10 --momentum=0.0 --max-param-change=2.0 \
      --backstitch-training-scale=0.0 --l2-regularize-factor=0.5 --backstitch-training-interval=1 \
      --srand="$it" \
      "nnet3-copy --learning-rate=$lr --scale=1.0 $dir/$it.raw - |" \
      "ark,bg:nnet3-copy-egs --frame=$frame ark:$egs/egs.$archive.ark ark:- | nnet3-shuffle-egs --buffer-size=5000 --srand=$it ark:- ark:- | nnet3-merge-egs --minibatch-size=32 ark:- ark:- |" \
      "$dir/$((it + 1)).$j.raw" 2>"$dir/log/train.$it.$j.log" &
    j=$((j + 1))
  done
  wait
  j=1
  models=""
  while [ "$j" -le "$NJ" ]; do
    log=$dir/log/train.$it.$j.log
    grep -Eq "^LOG .* Overall average objective function for 'output' is [-+0-9.e]+ over [-+0-9.e]+ frames" "$log" \
      || fail "$log: no 'Overall average objective function' line"
    grep -Eq "^LOG .*log-prob-per-frame=[-+0-9.e]+$" "$log" || fail "$log: no log-prob-per-frame line"
    models="$models $dir/$((it + 1)).$j.raw"
    j=$((j + 1))
  done
  nnet3-average $models - 2>"$dir/log/average.$it.log" | nnet3-copy --scale=1.0 - "$dir/$((it + 1)).raw" 2>>"$dir/log/average.$it.log"
  it=$((it + 1))
done
diagnostics "$ITERS"
wait
first=$((ITERS > 2 ? ITERS - 2 : 1))
models=""
i=$first
while [ "$i" -le "$ITERS" ]; do models="$models $dir/$i.raw"; i=$((i + 1)); done
nnet3-combine --max-objective-evaluations=30 --verbose=3 $models \
  "ark,bg:nnet3-copy-egs ark:$egs/combine.egs ark:- | nnet3-merge-egs --minibatch-size=1:64 ark:- ark:- |" \
  "$dir/final.raw" 2>"$dir/log/combine.log"
nnet3-compute-prob "$dir/final.raw" "ark,bg:nnet3-copy-egs ark:$egs/valid_diagnostic.egs ark:- | nnet3-merge-egs --minibatch-size=1:64 ark:- ark:- |" 2>"$dir/log/compute_prob_valid.final.log"

# The lines the driver's report parses.
prob_line="^LOG .nnet3-compute-prob.*:PrintTotalStats\(\):nnet.*diagnostics\.cc:[0-9]+\) Overall"
value() { sed -n -E "s/$prob_line $2 for 'output' is ([-+0-9.e]+) per frame.*/\1/p" "$1"; }
components=$(nnet3-info "$dir/0.raw" 2>/dev/null | sed -n 's/^component name=\([^ ]*\) type=NaturalGradientAffineComponent.*/\1/p')
echo "iter  train log-likelihood  valid log-likelihood  valid accuracy"
i=0
while [ "$i" -le "$ITERS" ]; do
  t=$(value "$dir/log/compute_prob_train.$i.log" log-likelihood)
  v=$(value "$dir/log/compute_prob_valid.$i.log" log-likelihood)
  a=$(value "$dir/log/compute_prob_valid.$i.log" accuracy)
  [ -n "$t" ] && [ -n "$v" ] && [ -n "$a" ] || fail "compute_prob_*.$i.log: no parsable objective or accuracy line"
  echo "$i  $t  $v  $a"
  if [ "$i" -gt 0 ]; then
    p=$dir/log/progress.$i.log
    rel=$(grep -E "^LOG.*Relative parameter differences per layer are \[.*\]" "$p") || fail "$p: no relative differences"
    for c in $components; do
      printf '%s\n' "$rel" | grep -Eq " $c:([-+0-9.e]+|inf|nan) " || fail "$p: no relative difference for $c"
    done
    grep -Eq '^left-context: [0-9]+$' "$p" || fail "$p: no nnet3-info lines"
  fi
  i=$((i + 1))
done
v=$(value "$dir/log/compute_prob_valid.final.log" log-likelihood)
[ -n "$v" ] || fail "compute_prob_valid.final.log: no objective"
echo "final  valid log-likelihood $v  ($dir/final.raw)"
