#!/usr/bin/env bash
# The CPU check: compnet against Kaldi, OpenBLAS and PyTorch on one machine's CPU, in the same
# run, for a machine where nothing can be built or installed (the lent GPU machine, an Intel
# Xeon with AVX-512). It builds nothing: scripts/cpu_check_build.sh prepares DIR elsewhere;
# this reads only DIR, the repository and python3 (torch where installed), no network. It
#  1. unpacks DIR/payload.tar.xz into a temporary folder, sets LD_LIBRARY_PATH to its
#     libraries, OPENBLAS_CORETYPE for the CPU's flags (scripts/blas_coretype.sh) and one
#     BLAS thread for Kaldi, and names the CPU (model, cores, AVX-512 / VNNI / AMX flags);
#  2. runs, as jobs pinned to their own physical cores (taskset) and at the same time unless
#     CPU_CHECK_PARALLEL=0, each job comparing its programs interleaved in the same run:
#     - gemm: the GEMM shapes of benches/gemm.rs, compnet's backends against OpenBLAS called
#       from C, 1 and 2 threads (scripts/bench_gemm.sh), GFLOP/s and ratios;
#     - train-1t, train-2t: the wsj TDNN, `compnet train` against Kaldi's `nnet3-train` on
#       the same egs and model, and PyTorch's CPU step where torch imports
#       (scripts/bench_train.sh; the egs are made by compnet, scripts/wsj_data.sh);
#     - wsj-*, lstm-*, lstm-looped-*: `compnet compute` fp32 and --quantize=int8 on the wsj
#       TDNN, the Switchboard TDNN-LSTM chunked and --looped, against Kaldi's fp32
#       `nnet3-compute` (scripts/bench_inference.sh);
#     compnet runs with each GEMM backend of CPU_CHECK_BACKENDS (default "openblas
#     gemm-crate": the `openblas` build's choice on AVX-512 and the default build's), forced
#     by COMPNET_GEMM;
#  3. writes SUMMARY: the machine, every job's command line and output, and the time taken.
#
# Usage: scripts/cpu_check.sh [DIR] [SUMMARY]   (defaults .gpu/cpu, cpu_summary.txt)
#   env: CPU_CHECK_DRY=1        tiny sizes, to run every step on any machine in a minute or two
#        CPU_CHECK_PARALLEL=0   one job at a time (default: jobs side by side on free cores)
#        CPU_CHECK_ROUNDS       rounds of the training and inference benches (default 2; GEMM 1)
#        CPU_CHECK_BACKENDS     compnet's GEMM backends to run (default "openblas gemm-crate")
#        CPU_CHECK_JOB_TIMEOUT  seconds after which a job is stopped (default 330)
#        TRAIN_UTTS, INFER_UTTS, INFER_FRAMES, GEMM_BENCH_TRIALS, GEMM_BENCH_SHAPES, TORCH_STEPS
#                               the sizes (see the bench scripts; defaults below)
#        TORCH_PYTHON           the Python with torch (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=$(cd "${1:-.gpu/cpu}" && pwd)
SUM=$(realpath -m "${2:-cpu_summary.txt}")
mkdir -p "$(dirname "$SUM")" && : >"$SUM"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
say() { echo "$*" | tee -a "$SUM"; }
start=$(date +%s)

DRY=${CPU_CHECK_DRY:-0}
if [ "$DRY" = 1 ]; then
  : "${TRAIN_UTTS:=7}" "${INFER_UTTS:=1}" "${INFER_FRAMES:=150}" "${GEMM_BENCH_TRIALS:=1}"
  : "${GEMM_BENCH_SHAPES:=small,infer-16}" "${TORCH_STEPS:=2}" "${CPU_CHECK_ROUNDS:=1}"
fi
# Full sizes, sized so that the jobs fit in about 4 minutes on 8 free cores:
# training 48 utterances (14,144 frames, 7 minibatches), inference 4 x 1,500 frames.
export TRAIN_UTTS=${TRAIN_UTTS:-48} INFER_UTTS=${INFER_UTTS:-4} INFER_FRAMES=${INFER_FRAMES:-1500}
export GEMM_BENCH_TRIALS=${GEMM_BENCH_TRIALS:-3} TORCH_STEPS=${TORCH_STEPS:-5}
[ -n "${GEMM_BENCH_SHAPES:-}" ] && export GEMM_BENCH_SHAPES
ROUNDS=${CPU_CHECK_ROUNDS:-2}
BACKENDS=${CPU_CHECK_BACKENDS:-openblas gemm-crate}
JOB_TIMEOUT=${CPU_CHECK_JOB_TIMEOUT:-330}
PARALLEL=${CPU_CHECK_PARALLEL:-1}

# 1. The payload and the machine.
P=$W/payload
mkdir -p "$P"
# Python's tarfile (needs its lzma module), else tar with xz.
if ! python3 - "$DIR/payload.tar.xz" "$P" 2>"$W/unpack.log" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    try:
        t.extractall(sys.argv[2], filter="data")
    except TypeError:  # a Python without extraction filters
        t.extractall(sys.argv[2])
PY
then
  tar -C "$P" -xJf "$DIR/payload.tar.xz" 2>>"$W/unpack.log" ||
    { say "cannot unpack $DIR/payload.tar.xz: $(tail -2 "$W/unpack.log")"; exit 1; }
fi
export LD_LIBRARY_PATH="$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OPENBLAS_NUM_THREADS=1
. scripts/blas_coretype.sh
GNU_TIME=$P/bin/time
case $(/usr/bin/time --version 2>&1 || true) in *GNU*) GNU_TIME=/usr/bin/time ;; esac
export GNU_TIME

model=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
[ -n "$model" ] || model=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -1)
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
have=""
for f in avx2 fma avx512f avx512bw avx512vl avx512_vnni avx_vnni avx512_bf16 amx_tile amx_int8 amx_bf16; do
  case $flags in *" $f "*) have="$have $f" ;; esac
done
say "# CPU check, $(date -u '+%Y-%m-%d %H:%M UTC')$([ "$DRY" = 1 ] && echo ' (DRY RUN: tiny sizes, no figure means anything)')"
say "machine: $model; $(nproc) logical CPUs; flags:${have:- none of avx2/avx512/vnni/amx}"
lscpu 2>/dev/null | grep -E '^(Socket|Core|Thread|NUMA node\(s\)|L2|L3|Hypervisor|CPU max MHz)' |
  sed 's/  */ /g; s/^/  /' | tee -a "$SUM" || true
say "  kernel $(uname -r); $(ldd --version 2>&1 | head -1); load $(cut -d' ' -f1-3 /proc/loadavg)"
say "OpenBLAS kernels: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (scripts/blas_coretype.sh, from the CPU's flags)"
sed 's/^/  /' "$P/MANIFEST" | grep -v -E '^  (sha256:|  )' | sed 's/^  /payload: /' | tee -a "$SUM"

B=$P/bin/compnet
if ! "$B" --help >/dev/null 2>"$W/probe.log"; then
  say "compnet does not start here: $(head -2 "$W/probe.log")"
  exit 1
fi
choice=$(GEMM_BENCH_SHAPES=none "$P/bin/gemm_bench" 1 2>/dev/null |
  sed -n 's/.*compnet = add_mat_mat on \([a-z0-9-]*\).*/\1/p' || true)
say "compnet's own GEMM choice on this CPU (openblas build, no COMPNET_GEMM): ${choice:-unknown}; measured: $BACKENDS (forced by COMPNET_GEMM)"
say "  (a default build, without the openblas feature, runs native on AVX2-only CPUs and gemm-crate on AVX-512 ones)"

# Kaldi: its binaries with the carried libraries; the carried libstdc++ only where the
# machine's own is too old for them.
KALDI_RUN=""
for libs in "$P/lib" "$P/lib:$P/lib-cxx"; do
  usage=$(LD_LIBRARY_PATH=$libs "$P/kaldi/nnet3-compute" --help 2>&1 || true)
  if grep -q '^Usage' <<<"$usage"; then
    cat >"$W/kaldi_run" <<EOF
#!/usr/bin/env bash
# Kaldi's binary \$1 with the carried libraries, one BLAS thread unless OPENBLAS_NUM_THREADS says.
export LD_LIBRARY_PATH="$libs" OPENBLAS_NUM_THREADS=\${OPENBLAS_NUM_THREADS:-1}
prog=\$1
shift
exec "$P/kaldi/\$prog" "\$@"
EOF
    chmod +x "$W/kaldi_run"
    KALDI_RUN=$W/kaldi_run
    say "kaldi: nnet3-train, nnet3-compute, libraries ${libs//$P\//payload\/}"
    break
  fi
done
if [ -z "$KALDI_RUN" ]; then
  say "kaldi: does not start here, the comparisons run without it: $(LD_LIBRARY_PATH=$P/lib:$P/lib-cxx "$P/kaldi/nnet3-compute" --help 2>&1 | head -2 | tr '\n' ' ')"
fi
PY=${TORCH_PYTHON:-python3}
if "$PY" -c 'import torch' 2>/dev/null; then
  say "pytorch: $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null), CPU step in the training jobs"
else
  say "pytorch: not installed here"
fi

# compnet with one GEMM backend forced (the bench scripts take one binary).
for be in $BACKENDS; do
  printf '#!/bin/sh\nCOMPNET_GEMM=%s exec "%s" "$@"\n' "$be" "$B" >"$W/compnet-$be"
  chmod +x "$W/compnet-$be"
done
read -r BE1 BE2 _ <<<"$BACKENDS $BACKENDS"
[ "$BE2" = "$BE1" ] && BE2=""

# 2. The jobs. Physical cores: the first logical CPU of each (socket, core) among the CPUs
# this process may run on (a container may see all of the host's CPUs in lscpu).
allowed=" $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | tr ',' '\n' |
  awk -F- 'NF == 2 { for (i = $1; i <= $2; i++) print i; next } NF == 1 { print $1 }' | tr '\n' ' ')"
mapfile -t CORES < <(lscpu -p=CPU,CORE,SOCKET 2>/dev/null | grep -v '^#' |
  awk -F, -v ok="$allowed" 'ok ~ /^ *$/ || index(ok, " " $1 " ")' |
  sort -t, -k3,3n -k2,2n -k1,1n | awk -F, '!seen[$3 "," $2]++ { print $1 }')
[ ${#CORES[@]} -gt 0 ] || mapfile -t CORES < <(seq 0 $(($(nproc) - 1)))
say "physical cores for the jobs: ${#CORES[@]} (first CPU of each: ${CORES[*]}); allowed CPUs:$allowed"
PIN=1
command -v taskset >/dev/null || PIN=0
FREE=()
for i in "${!CORES[@]}"; do FREE+=("$i"); done
declare -A JOB_CORES=()
NAMES=()

reap() { # frees the cores of finished jobs
  local pid
  for pid in "${!JOB_CORES[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" || true
      # shellcheck disable=SC2206 # a list of core indices
      FREE+=(${JOB_CORES[$pid]})
      unset "JOB_CORES[$pid]"
    fi
  done
}

# job NAME NCORES COMMAND...: runs COMMAND on NCORES free physical cores, output to NAME.log.
job() {
  local name=$1 n=$2 cpus="" idx="" k
  shift 2
  [ "$n" -le ${#CORES[@]} ] || n=${#CORES[@]}
  while [ ${#FREE[@]} -lt "$n" ]; do reap; sleep 1; done
  for ((k = 0; k < n; k++)); do
    idx="$idx ${FREE[0]}"
    cpus="$cpus${cpus:+,}${CORES[${FREE[0]}]}"
    FREE=("${FREE[@]:1}")
  done
  NAMES+=("$name")
  {
    echo "## $name (CPUs $cpus$([ "$PIN" = 1 ] || echo ', not pinned: no taskset'))"
    printf '$'
    printf ' %q' "$@"
    echo
  } >"$W/$name.head"
  local pin=()
  [ "$PIN" = 1 ] && pin=(taskset -c "$cpus")
  (
    t0=$(date +%s)
    if "${pin[@]}" timeout "$JOB_TIMEOUT" "$@" >"$W/$name.log" 2>&1; then rc=0; else rc=$?; fi
    echo "exit $rc after $(($(date +%s) - t0)) s$([ "$rc" = 124 ] && echo ": stopped after CPU_CHECK_JOB_TIMEOUT=$JOB_TIMEOUT s")" >"$W/$name.rc"
  ) &
  if [ "$PARALLEL" = 1 ]; then
    JOB_CORES[$!]=$idx
  else
    wait $! || true
    # shellcheck disable=SC2206 # a list of core indices
    FREE+=($idx)
  fi
}

kaldi_env=()
[ -n "$KALDI_RUN" ] && kaldi_env=(KALDI_RUN="$KALDI_RUN")
base_env=()
[ -n "$BE2" ] && base_env=(BASE="$W/compnet-$BE2")
# Longest first.
for t in 1 2; do
  job "train-${t}t" "$t" env COMPNET="$W/compnet-$BE1" "${base_env[@]}" "${kaldi_env[@]}" \
    TRAIN_THREADS=$t TORCH_PYTHON="$PY" scripts/bench_train.sh "$ROUNDS"
done
for w in lstm lstm-looped; do
  for be in $BACKENDS; do
    job "$w-$be" 1 env COMPNET="$W/compnet-$be" "${kaldi_env[@]}" SKIP_INPROC=1 BENCH_ONLY="$w" \
      scripts/bench_inference.sh "$ROUNDS"
  done
done
job gemm 2 env -u OPENBLAS_NUM_THREADS COMPNET_GEMM=gemm-crate \
  GEMM_BENCH_BACKENDS=compnet,weights,compnet-native,compnet-openblas BENCH="$P/bin/gemm_bench" \
  OPENBLAS_GEMM="$P/bin/openblas_gemm" scripts/bench_gemm.sh 1
for be in $BACKENDS; do
  job "wsj-$be" 2 env COMPNET="$W/compnet-$be" "${kaldi_env[@]}" SKIP_INPROC=1 \
    BENCH_ONLY="wsj wsj-int8 wsj-looped-int8" scripts/bench_inference.sh "$ROUNDS"
done
wait

# 3. The summary.
say ""
if [ "$PARALLEL" = 1 ]; then
  say "The jobs below ran at the same time, each on its own physical cores (CPUs listed), so"
  say "they share the L3, the memory bandwidth and the all-core clock; within each job the"
  say "programs it compares ran one after another, interleaved, in that same run."
else
  say "The jobs below ran one at a time (CPU_CHECK_PARALLEL=0)."
fi
say "Sizes: training $TRAIN_UTTS utterances x 300 frames (minibatches of 256 x 8 frames), best of $ROUNDS;"
say "inference $INFER_UTTS x $INFER_FRAMES frames, whole process, best of $ROUNDS; GEMM best of $GEMM_BENCH_TRIALS trials, 1 round."
say "compnet-<backend> in a command is compnet with COMPNET_GEMM=<backend>. In train-*, 'compnet' is"
say "$BE1${BE2:+ and 'base' is $BE2}; in gemm, 'compnet' and 'weights' run on gemm-crate (the default build's"
say "backend on AVX-512), compnet-native and compnet-openblas on those backends, 'openblas' is the C call."
for name in "${NAMES[@]}"; do
  say ""
  tee -a "$SUM" <"$W/$name.head"
  tee -a "$SUM" <"$W/$name.log"
  if [ "$name" = gemm ]; then
    say "# per shape, GFLOP/s, and in brackets the ratio to openblas (the C call) of the same row:"
    awk 'NF == 6 && $4 ~ /^[0-9]+x[0-9]+x[0-9]+$/ && $6 ~ /^[0-9.]+$/ {
           row = $2 " " $3 " " $4 " " $5; g[row, $1] = $6
           if (!(row in seen)) { seen[row] = 1; rows[++nr] = row }
           if (!($1 in be)) { be[$1] = 1; if ($1 != "openblas") bes[++nb] = $1 } }
         END { printf "%-7s %-10s %-15s %-6s %9s", "threads", "shape", "MxKxN", "form", "openblas"
               for (i = 1; i <= nb; i++) printf " %24s", bes[i]; print ""
               for (r = 1; r <= nr; r++) { split(rows[r], f, " "); ref = g[rows[r], "openblas"]
                 printf "%-7s %-10s %-15s %-6s %9s", f[1], f[2], f[3], f[4], ref
                 for (i = 1; i <= nb; i++) { v = g[rows[r], bes[i]]
                   if (v == "") printf " %24s", "-"
                   else if (ref > 0) printf " %15s (%5.0f %%)", v, 100 * v / ref
                   else printf " %24s", v }
                 print "" } }' "$W/gemm.log" | tee -a "$SUM"
  fi
  say "($(cat "$W/$name.rc"))"
done
say ""
say "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
say "cpu_check: $(($(date +%s) - start)) s"
