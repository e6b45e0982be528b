#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU (H100 class). It builds nothing: run
# scripts/gpu_build.sh elsewhere first and bring its .gpu/bin. In under 8 minutes it
#  1. finds the CUDA libraries (driver, cuBLAS, NVRTC) and names the GPU;
#  2. runs the test executables with COMPNET_DEVICE=cuda, so that every matrix lives on the
#     GPU, each twice: waiting after every GPU call, and with COMPNET_GPU_ASYNC=1
#     (device_kernels: each kernel against the host operation it replaces, on the same
#     operands): the --use-gpu tests and the kernel-source check (device), every dev golden's
#     compute output against Kaldi's (golden_compute), the component harness's derivative
#     checks (components, all_component_types, derivative) and the training goldens
#     (training);
#  3. trains one pass of a training golden on the GPU and on the CPU and compares the models;
#  4. measures the wsj TDNN (tests/data/kaldi/perf): compnet train and compute, CPU (all
#     cores) against GPU (fp32, and TF32 with --cuda-use-tf32-compute), and PyTorch's same
#     network on the same GPU, fp32 and TF32, where it is installed;
# and writes one summary file.
#
# Usage: scripts/gpu_check.sh [BIN_DIR] [SUMMARY]   (defaults .gpu/bin, gpu_summary.txt)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$(cd "${1:-.gpu/bin}" && pwd)
SUM=$(realpath -m "${2:-gpu_summary.txt}")
B=$BIN/compnet
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
say() { echo "$*" | tee -a "$SUM"; }
mkdir -p "$(dirname "$SUM")" && : >"$SUM"
start=$(date +%s)

# 1. Libraries: the driver's folder, the toolkit's, and the pip wheels of PyTorch's CUDA.
dirs=""
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/local/cuda/lib64 \
  /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
  [ -d "$d" ] && dirs="$dirs:$d"
done
py=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
for s in $py; do
  for d in "$s"/nvidia/*/lib "$s"/nvidia/cu*/lib; do [ -d "$d" ] && dirs="$dirs:$d"; done
done
export LD_LIBRARY_PATH="${dirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say "machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1); CPU $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"

# 2. The test executables on the GPU. They were built in another checkout and read its
# tests/data and target/release/compnet: point that path here.
M=$(cat "$BIN/manifest_dir" 2>/dev/null || echo "$PWD")
if [ "$M" != "$PWD" ] && [ ! -e "$M" ]; then mkdir -p "$(dirname "$M")" && ln -s "$PWD" "$M"; fi
mkdir -p target/release && [ -x target/release/compnet ] || cp "$B" target/release/compnet
# All at once (they share the GPU; each is bounded), then reported in order; a second time
# with COMPNET_GPU_ASYNC=1 (launches queue their work; host code waits only before it
# touches device elements).
# device_kernels compares kernels with the host on operands made on the host first: it
# selects the GPU itself (no COMPNET_DEVICE) and is ignored unless asked for; each of its
# tests runs in a process of its own, as the selection is for the whole process.
TESTS="device device_kernels golden_compute components all_component_types derivative training"
for async in 0 1; do
  for t in $TESTS; do
    if [ "$t" = device_kernels ]; then
      # One process per test: each makes its host operands before it selects the GPU.
      [ -x "$BIN/$t" ] && for name in $("$BIN/$t" --ignored --list 2>/dev/null | sed -n 's/: test$//p'); do
        COMPNET_GPU_ASYNC=$async timeout 150 "$BIN/$t" --ignored --exact "$name"
      done >"$W/$t.$async.log" 2>&1 &
    else
      [ -x "$BIN/$t" ] && COMPNET_GPU_ASYNC=$async COMPNET_DEVICE=cuda timeout 150 "$BIN/$t" --test-threads=2 >"$W/$t.$async.log" 2>&1 &
    fi
  done
  wait
  for t in $TESTS; do
    if [ ! -x "$BIN/$t" ]; then say "tests $t: executable missing"; continue; fi
    res=$(grep -E '^test result:' "$W/$t.$async.log" | sed 's/; finished in.*//' | paste -sd '|' -)
    say "tests $t (GPU$([ $async = 1 ] && echo ', COMPNET_GPU_ASYNC=1')): ${res:-no result line: $(tail -1 "$W/$t.$async.log")}"
    grep -E -A2 '^---- ' "$W/$t.$async.log" | grep -v -E '^--$|^$' | head -30 | sed 's/^/    /' | tee -a "$SUM"
    cp "$W/$t.$async.log" "$(dirname "$SUM")/gpu_$t.$async.log" 2>/dev/null || true
  done
done

# 3. One training pass of a golden, GPU against CPU.
case=tests/data/kaldi/train/affine-plain
for d in no yes async; do
  g=$d; [ $d = async ] && g=yes
  COMPNET_GPU_ASYNC=$([ $d = async ] && echo 1 || echo 0) timeout 60 "$B" train --use-gpu=$g --srand=1 "$case/before.raw" "ark:$case/egs.ark" "$W/$d.raw" 2>"$W/train_$d.log"
  "$B" copy --binary=false "$W/$d.raw" "$W/$d.txt" 2>/dev/null
done
for d in yes async; do
say "train golden affine-plain, GPU$([ $d = async ] && echo ' (COMPNET_GPU_ASYNC=1)') vs CPU model: $(python3 - "$W/no.txt" "$W/$d.txt" <<'PY'
import sys
def nums(p):
    out = []
    try:
        text = open(p).read()
    except OSError:
        return out
    for t in text.split():
        try: out.append(float(t))
        except ValueError: pass
    return out
a, b = nums(sys.argv[1]), nums(sys.argv[2])
if len(a) != len(b) or not a:
    print(f"FAILED: {len(a)} vs {len(b)} numbers")
else:
    worst = max(abs(x - y) / (1 + abs(x)) for x, y in zip(a, b))
    print(("ok" if worst <= 1e-4 else "FAILED") + f": largest relative difference {worst:.2e} over {len(a)} numbers")
PY
)"
done

# 4. Speed: the wsj TDNN, as scripts/bench_train.sh sets it up, with 384 utterances (57
# minibatches of 256 eight-frame chunks; the natural-gradient estimates reach their
# every-4th-minibatch updates). Training rates are compnet's own "frames/s after the first
# minibatch" (the first also compiles and, on the GPU, starts the device); inference is the
# whole process.
UTTS=${GPU_CHECK_UTTS:-384}
scripts/wsj_data.sh "$B" "$W" $UTTS
mv "$W/egs.ark" "$W/egs1.ark"
"$B" shuffle-egs --srand=1 "ark:$W/egs1.ark" "ark:$W/egs2.ark" 2>/dev/null
"$B" merge-egs --minibatch-size=256 "ark:$W/egs2.ark" "ark:$W/egs.ark" 2>/dev/null
frames=$(( UTTS * 300 ))
rate() { awk -v f="$1" -v s="$2" 'BEGIN { printf "%.0f", f / s }'; }
secs() {
  local t0 t1 rc
  t0=$(date +%s.%N)
  "$@" >/dev/null 2>"$W/last.log"
  rc=$?
  t1=$(date +%s.%N)
  if [ $rc -eq 0 ]; then awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'; else echo "failed (exit $rc after $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }') s)"; fi
}
train_rate() { # the rate compnet train logs, or why there is none
  if timeout 120 "$B" train --srand=1 "$@" "$W/wsj.raw" "ark:$W/egs.ark" "$W/t.raw" 2>"$W/last.log"; then
    sed -n 's/.*after the first minibatch in \([0-9.]*\) s: \([0-9]*\) frames\/s/\2 frames\/s (\1 s)/p' "$W/last.log"
  else
    echo "failed: $(tail -1 "$W/last.log")"
  fi
}
say "wsj TDNN training, $UTTS utterances, CPU ($(nproc) cores): $(train_rate --use-gpu=no)"
train_rate --use-gpu=yes >/dev/null # warm-up: page cache, the driver's caches
say "wsj TDNN training, GPU, fp32: $(train_rate --use-gpu=yes)"
say "wsj TDNN training, GPU, TF32 (--cuda-use-tf32-compute): $(train_rate --use-gpu=yes --cuda-use-tf32-compute)"
say "wsj TDNN training, GPU, fp32, no prefetch (COMPNET_GPU_PREFETCH=0): $(COMPNET_GPU_PREFETCH=0 train_rate --use-gpu=yes)"
say "wsj TDNN training, GPU, fp32, COMPNET_GPU_ASYNC=1: $(COMPNET_GPU_ASYNC=1 train_rate --use-gpu=yes)"
say "wsj TDNN training, GPU, TF32, COMPNET_GPU_ASYNC=1: $(COMPNET_GPU_ASYNC=1 train_rate --use-gpu=yes --cuda-use-tf32-compute)"
# Where the asynchronous run still waits: the profile's "host waits for queued work" row.
COMPNET_GPU_ASYNC=1 COMPNET_GPU_PROFILE=1 train_rate --use-gpu=yes >/dev/null
grep -E 'GPU profile|host waits|cublas sgemm' "$W/last.log" | head -3 | sed 's/^/    async profile: /' | tee -a "$SUM"
for d in no yes async; do
  g=$d; [ $d = async ] && g=yes
  ti=$(COMPNET_GPU_ASYNC=$([ $d = async ] && echo 1 || echo 0) secs timeout 60 "$B" compute --use-gpu=$g --online-ivectors="ark:$W/ivec.ark" --online-ivector-period=10 "$W/wsj.raw" "ark:$W/feats.ark" "ark:/dev/null")
  case $ti in
    failed*) say "wsj TDNN inference --use-gpu=$d: $ti: $(tail -1 "$W/last.log")" ;;
    *) say "wsj TDNN inference --use-gpu=$d: $(rate $frames "$ti") frames/s ($ti s, whole process)" ;;
  esac
done
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  for p in fp32 tf32; do
    say "$(timeout 120 python3 scripts/torch_wsj_tdnn.py 50 cuda 1 $p 2>&1 | tail -1)"
  done
else
  say "pytorch: not installed here"
fi
say "gpu_check: $(( $(date +%s) - start )) s"
