#!/usr/bin/env bash
# GEMM measurement behind docs/PERFORMANCE.md ("GEMM"): the Rust candidates (benches/gemm.rs)
# and OpenBLAS sgemm (scripts/openblas_gemm.c) on the same shapes, 1 and 2 threads, in
# ROUNDS interleaved rounds; prints the best GFLOP/s per line over all rounds.
#
# Needs (for the measurement only, never for the build): gcc and libopenblas-dev
#   apt-get install -y libopenblas-dev
# Usage: scripts/bench_gemm.sh [ROUNDS]
#   env: CARGO_TARGET_DIR, GEMM_BENCH_TRIALS, GEMM_BENCH_BACKENDS, BENCH (prebuilt binary)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/blas_coretype.sh
ROUNDS=${1:-3}
OUT=$(mktemp -d)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); OpenBLAS kernels: $OPENBLAS_CORETYPE" >&2
gcc -O2 -o "$OUT/openblas_gemm" scripts/openblas_gemm.c \
    -I/usr/include/x86_64-linux-gnu/openblas-pthread -lopenblas
# BENCH may name a prebuilt bench binary (e.g. one built with other GEMM crate features).
if [ -z "${BENCH:-}" ]; then
    cargo bench --bench gemm --no-run >&2
    BENCH=$(cargo bench --bench gemm --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
fi
for r in $(seq "$ROUNDS"); do
    for t in 1 2; do
        "$BENCH" "$t" >>"$OUT/raw.txt"
        "$OUT/openblas_gemm" "$t" >>"$OUT/raw.txt"
    done
    echo "round $r done; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
# best per (backend, threads, shape, dims, form)
grep -v '^#' "$OUT/raw.txt" | sort -k1,5 -k6,6gr | awk '!seen[$1" "$2" "$3" "$4" "$5]++'
