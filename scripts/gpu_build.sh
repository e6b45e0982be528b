#!/usr/bin/env bash
# Builds what scripts/gpu_check.sh runs, on a machine without a GPU: compnet and the test
# executables with `--features cuda`, stripped, into .gpu/bin (ignored by git; the GPU
# machine gets the folder as it is and builds nothing).
#
# Usage: scripts/gpu_build.sh [DEST]   (DEST defaults to .gpu/bin)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.gpu/bin}
TESTS="device device_kernels golden_compute components all_component_types derivative training"
mkdir -p "$DEST"
cargo build --release --features cuda --bin compnet
cp target/release/compnet "$DEST/compnet"
args=()
for t in $TESTS; do args+=(--test "$t"); done
cargo test --release --features cuda --no-run "${args[@]}" 2>&1 |
  sed -n 's/.*Executable tests\/\([a-z_]*\)\.rs (\(.*\))$/\1 \2/p' |
  while read -r name exe; do cp "$exe" "$DEST/$name"; done
for f in "$DEST"/*; do if [ -x "$f" ]; then strip "$f"; fi; done
# The test executables read tests/data and run compnet by the paths of this checkout.
echo "$PWD" >"$DEST/manifest_dir"
ls -la "$DEST"
