#!/usr/bin/env bash
# GEMM measurement behind docs/PERFORMANCE.md ("GEMM"): the Rust candidates (benches/gemm.rs,
# built with the `openblas` feature, so compnet's backends native, openblas and the gemm crate
# are all measured) and OpenBLAS sgemm called from C (scripts/openblas_gemm.c) on the same
# shapes, 1 and 2 threads, in ROUNDS interleaved rounds; prints the best GFLOP/s per line over
# all rounds, then each backend's ratio to the C call per thread count (min, median, max over
# the shapes): the figures to choose this machine's backend by (COMPNET_GEMM).
#
# Needs (for the measurement only, never for the build): gcc and libopenblas-dev
#   apt-get install -y libopenblas-dev
# Usage: scripts/bench_gemm.sh [ROUNDS]
#   env: CARGO_TARGET_DIR, GEMM_BENCH_TRIALS, GEMM_BENCH_BACKENDS, BENCH (prebuilt binary),
#        OPENBLAS_GEMM (a prebuilt scripts/openblas_gemm.c: then neither gcc nor cargo runs
#        when BENCH is set too, as on a machine that only measures)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/blas_coretype.sh
ROUNDS=${1:-3}
OUT=$(mktemp -d)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); OpenBLAS kernels: $OPENBLAS_CORETYPE" >&2
CBLAS=${OPENBLAS_GEMM:-}
if [ -z "$CBLAS" ]; then
    CBLAS=$OUT/openblas_gemm
    gcc -O2 -o "$CBLAS" scripts/openblas_gemm.c \
        -I/usr/include/x86_64-linux-gnu/openblas-pthread -lopenblas
fi
# BENCH may name a prebuilt bench binary (e.g. one built with other GEMM crate features).
if [ -z "${BENCH:-}" ]; then
    cargo bench --features openblas --bench gemm --no-run >&2
    BENCH=$(cargo bench --features openblas --bench gemm --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
fi
for r in $(seq "$ROUNDS"); do
    for t in 1 2; do
        "$BENCH" "$t" >>"$OUT/raw.txt"
        "$CBLAS" "$t" >>"$OUT/raw.txt"
    done
    echo "round $r done; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
# best per (backend, threads, shape, dims, form)
grep -v '^#' "$OUT/raw.txt" | sort -k1,5 -k6,6gr | awk '!seen[$1" "$2" "$3" "$4" "$5]++' >"$OUT/best.txt"
cat "$OUT/best.txt"
# each backend's GFLOP/s over OpenBLAS's (the C call) on the same line, per thread count
echo "# ratio to openblas (C): backend threads min median max (rows)"
awk '$1 == "openblas" { ref[$2" "$3" "$4" "$5] = $6 }
     { rows[NR] = $0 }
     END { for (i in rows) { split(rows[i], f, " "); key = f[2]" "f[3]" "f[4]" "f[5];
             if (f[1] != "openblas" && (key in ref)) printf "%s %s %.3f\n", f[1], f[2], f[6] / ref[key] } }' \
    "$OUT/best.txt" | sort -k1,2 -k3,3g |
    awk '{ k = $1" "$2; v[k, ++n[k]] = $3 }
         END { for (k in n) { c = n[k]; m = (c % 2) ? v[k, (c + 1) / 2] : (v[k, c / 2] + v[k, c / 2 + 1]) / 2;
               printf "%s %.0f%% %.0f%% %.0f%% (%d)\n", k, 100 * v[k, 1], 100 * m, 100 * v[k, c], c } }' | sort
