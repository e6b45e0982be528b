#!/bin/sh
# The long fuzz run: scripts/fuzz.sh DURATION_SECONDS SEED [more compnet-fuzz options]
# Builds the release binaries, then runs compnet-fuzz over tests/data/kaldi (or
# $COMPNET_KALDI_DATA) on 2 parallel jobs. Failures are saved under target/fuzz/<class>-<case>/
# with a one-line reproduction in repro.txt; the summary goes to target/fuzz/summary.txt.
# Exit status 1 when any case panicked, aborted, timed out, went over the memory limit or broke
# a round trip. See docs/RELIABILITY.md.
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 DURATION_SECONDS SEED [compnet-fuzz options]" >&2
    exit 2
fi
duration=$1
seed=$2
shift 2
cd "$(dirname "$0")/.."
cargo build --release --bin compnet --bin compnet-fuzz
exec target/release/compnet-fuzz --duration "$duration" --seed "$seed" --jobs 2 \
    --out target/fuzz "$@"
