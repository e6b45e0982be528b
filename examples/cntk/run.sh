#!/bin/sh
# Makes the synthetic corpus (make_data.py) and runs timit.config with compnet cntk.
# Usage: examples/cntk/run.sh [WORKDIR]   (env COMPNET: the binary)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
B=${COMPNET:-$here/../../target/release/compnet}
W=${1:-${TMPDIR:-/tmp}/compnet-cntk}
mkdir -p "$W"
python3 "$here/make_data.py" "$W/data"
cd "$here"
"$B" cntk timit.config DataDir="$W/data" ExpDir="$W/exp"
