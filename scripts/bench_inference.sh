#!/usr/bin/env bash
# Inference measurement behind docs/PERFORMANCE.md ("Inference"): whole-process wall time of
# `compnet compute` (defaults: 50-frame chunks) on the real-size networks of
# tests/data/kaldi/perf, the workload of that directory's README (4 utterances × 1,500
# frames of random features, 40-dim or 30 for the x-vector net, online 100-dim iVectors with
# period 10 where the net has an `ivector` input), model load and compilation included as in
# Kaldi's figures; then the in-process bench (benches/inference.rs) on 1 and 2 threads.
#
# With KALDI_RUN set to Kaldi's launcher (e.g. KALDI_RUN=/path/to/kaldi/run, which runs
# `$KALDI_RUN nnet3-compute ...`), Kaldi's nnet3-compute runs interleaved with compnet on the
# same inputs and options (each run of compnet followed by one of Kaldi), and the ratios are
# printed; without it Kaldi is skipped with a message. Workloads with `--looped` or
# `--quantize=int8` (compnet options) are compared with Kaldi's chunked float run of the same
# network.
#
# Usage: scripts/bench_inference.sh [RUNS]      (best of RUNS whole-process runs, default 3)
#   env: CARGO_TARGET_DIR, PERF_CONFIG_DIR, SKIP_INPROC=1 (whole-process runs only),
#        KALDI_RUN (Kaldi's launcher), BENCH_ONLY="wsj tdnnf" (only these workloads),
#        COMPNET (a prebuilt compnet binary: cargo does not run; with SKIP_INPROC=1 nothing
#        is built), INFER_UTTS and INFER_FRAMES (the workload, default 4 utterances x 1500
#        frames), GNU_TIME (default /usr/bin/time)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/blas_coretype.sh  # for KALDI_RUN and any OpenBLAS program
RUNS=${1:-3}
DIR=${PERF_CONFIG_DIR:-tests/data/kaldi/perf}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "${COMPNET:-}" ]; then
  BIN=$COMPNET
else
  cargo build --release --bin compnet >&2
  BIN=${CARGO_TARGET_DIR:-target}/release/compnet
fi
UTTS=${INFER_UTTS:-4}
FRAMES=${INFER_FRAMES:-1500}
TOTAL=$(( UTTS * FRAMES ))
TIME=${GNU_TIME:-/usr/bin/time}

# Random binary archives (Kaldi's binary float-matrix format: "key \0BFM \4<rows>\4<cols><data>").
python3 - "$OUT" "$UTTS" "$FRAMES" <<'EOF'
import random, struct, sys
out, utts, frames = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def ark(path, dim, rows_of):
    random.seed(dim)
    with open(path, "wb") as f:
        for u in range(utts):
            rows = rows_of
            f.write(b"utt%d \0BFM \4" % u + struct.pack("<i", rows) + b"\4" + struct.pack("<i", dim))
            f.write(struct.pack("<%df" % (rows * dim), *(random.uniform(-1, 1) for _ in range(rows * dim))))
ark(f"{out}/feats40.ark", 40, frames)
ark(f"{out}/feats30.ark", 30, frames)
ark(f"{out}/ivec.ark", 100, (frames + 9) // 10)
EOF

if [ -z "${KALDI_RUN:-}" ]; then
  echo "KALDI_RUN is not set: Kaldi's nnet3-compute is skipped (no ratios)"
fi

# Whole-process wall and CPU (user + system) seconds of a command: "wall cpu".
timed() {
  "$TIME" -o "$OUT/time.txt" -f '%e %U %S' "$@" >/dev/null 2>&1
  awk '{ printf "%.3f %.3f\n", $1, $2 + $3 }' "$OUT/time.txt"
}
# lt A B: whether A < B, or B is empty (no best yet).
lt() { [ -z "$2" ] || awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# label config feats options...
WORK=(
  "wsj wsj_nnet3_tdnn_1a.config feats40"
  "wsj-looped wsj_nnet3_tdnn_1a.config feats40 --looped"
  "wsj-looped200 wsj_nnet3_tdnn_1a.config feats40 --looped --frames-per-chunk=200"
  "wsj-int8 wsj_nnet3_tdnn_1a.config feats40 --quantize=int8"
  "wsj-looped-int8 wsj_nnet3_tdnn_1a.config feats40 --looped --quantize=int8"
  "xvector voxceleb_xvector_1a.config feats30"
  "xvector-whole voxceleb_xvector_1a.config feats30 --frames-per-chunk=1500"
  "tdnnf librispeech_chain_tdnnf_1d.config feats40 --frame-subsampling-factor=3"
  "lstm swbd_chain_tdnn_lstm_1m.config feats40 --frame-subsampling-factor=3"
  "lstm-looped swbd_chain_tdnn_lstm_1m.config feats40 --frame-subsampling-factor=3 --looped"
)
printf '%-14s %7s %8s %8s %9s | %8s %8s %9s | %7s %7s\n' workload threads wall_s cpu_s frames/s \
  k_wall_s k_cpu_s k_fr/s wall_x cpu_x
for w in "${WORK[@]}"; do
  # shellcheck disable=SC2086 # the workload's words are its label, config, feats, options
  set -- $w
  label=$1 config=$2 feats=$3
  shift 3
  if [ -n "${BENCH_ONLY:-}" ] && ! [[ " $BENCH_ONLY " == *" $label "* ]]; then continue; fi
  # The configs initialise the output layer to zero (param-stddev=0.0 bias-stddev=0.0, as
  # Kaldi's recipes do before training), which makes every output of every frame equal:
  # nothing to compare between fp32 and int8. Those two options are dropped, so the outputs
  # are those of a randomly initialised network (the speed is the same either way).
  sed 's/ param-stddev=0\.0 bias-stddev=0\.0//' "$DIR/$config" >"$OUT/$label.config"
  "$BIN" init "$OUT/$label.config" "$OUT/$label.raw" 2>/dev/null
  iv=()
  if grep -q '^input-node name=ivector' "$OUT/$label.config"; then
    iv=(--online-ivectors="ark:$OUT/ivec.ark" --online-ivector-period=10)
  fi
  # Kaldi's options: the same, less compnet's --looped (Kaldi's chunked run is the reference).
  kopts=()
  for o in "$@"; do
    case "$o" in --looped|--frames-per-chunk=200|--quantize=*) ;; *) kopts+=("$o") ;; esac
  done
  threads="1"
  [ "$label" = wsj ] && threads="1 2"
  for t in $threads; do
    best='' bestc='' kbest='' kbestc=''
    for _ in $(seq "$RUNS"); do
      read -r d c < <(timed "$BIN" compute --num-threads="$t" "$@" "${iv[@]}" "$OUT/$label.raw" "ark:$OUT/$feats.ark" ark:/dev/null)
      if lt "$d" "$best"; then best=$d; fi
      if lt "$c" "$bestc"; then bestc=$c; fi
      if [ -n "${KALDI_RUN:-}" ] && [ "$t" = 1 ]; then
        read -r d c < <(timed "$KALDI_RUN" nnet3-compute "${kopts[@]}" "${iv[@]}" "$OUT/$label.raw" "ark:$OUT/$feats.ark" ark:/dev/null)
        if lt "$d" "$kbest"; then kbest=$d; fi
        if lt "$c" "$kbestc"; then kbestc=$c; fi
      fi
    done
    if [ -n "$kbest" ]; then
      awk -v l="$label" -v t="$t" -v w="$best" -v c="$bestc" -v kw="$kbest" -v kc="$kbestc" -v n="$TOTAL" \
        'BEGIN { printf "%-14s %7s %8.3f %8.3f %9.0f | %8.3f %8.3f %9.0f | %7.2f %7.2f\n", l, t, w, c, n / w, kw, kc, n / kw, kw / w, kc / c }'
    else
      awk -v l="$label" -v t="$t" -v w="$best" -v c="$bestc" -v n="$TOTAL" \
        'BEGIN { printf "%-14s %7s %8.3f %8.3f %9.0f | %8s %8s %9s | %7s %7s\n", l, t, w, c, n / w, "-", "-", "-", "-", "-" }'
    fi
  done
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

if [ -z "${SKIP_INPROC:-}" ]; then
  cargo bench --bench inference --no-run >&2
  BENCH=$(cargo bench --bench inference --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
  "$BENCH" 1
  "$BENCH" 2 wsj xvector-whole tdnnf
fi
