#!/usr/bin/env bash
# Prepares the CPU check (scripts/cpu_check.sh) for a machine that has none of its tools: no
# Rust, no Kaldi, no OpenBLAS (the lent GPU machine, whose CPU is an Intel Xeon). Run here, on
# a machine with a Rust toolchain, gcc, libopenblas-dev and Kaldi's binaries; it writes into
# DEST (ignored by git, like .gpu/bin) one compressed payload, payload.tar.xz:
#   bin/compnet        compnet, release, `--features openblas` (stripped)
#   bin/gemm_bench     benches/gemm.rs built with `--features openblas` (stripped)
#   bin/openblas_gemm  scripts/openblas_gemm.c, linked against libopenblas.so.0
#   bin/time           GNU time (the bench scripts time whole processes with it)
#   kaldi/             Kaldi's nnet3-train and nnet3-compute, for comparison only
#   lib/               libopenblas.so.0 (Debian's pthread build), libgfortran.so.5,
#                      libquadmath.so.0: what compnet, the benches and Kaldi load
#   lib-cxx/           libstdc++.so.6, libgcc_s.so.1: used for Kaldi only where the machine's
#                      own libstdc++ is too old for it
# and MANIFEST (what was built from which commit; also inside the payload). It prints the
# payload's size and what a device call carries with it (the working tree plus .gpu, or plus
# DEST alone), against the 64 MiB a call may carry.
#
# Usage: KALDI_DIR=<Kaldi's folder, with bin/> scripts/cpu_check_build.sh [DEST]
#   DEST defaults to .gpu/cpu; KALDI_DIR is read relative to the repository root unless
#   absolute (this script names no place outside the repository). env: CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.gpu/cpu}
: "${KALDI_DIR:?set KALDI_DIR to the Kaldi folder with bin/nnet3-train}"
KBIN=$KALDI_DIR/bin
KALDI_PROGS="nnet3-train nnet3-compute"
T=${CARGO_TARGET_DIR:-target}
for p in $KALDI_PROGS; do
  [ -x "$KBIN/$p" ] || { echo "no $KBIN/$p" >&2; exit 1; }
done
command -v xz >/dev/null || { echo "xz is needed (apt-get install -y xz-utils)" >&2; exit 1; }

cargo build --release --features openblas --bin compnet
cargo bench --features openblas --bench gemm --no-run
BENCH=$(cargo bench --features openblas --bench gemm --no-run 2>&1 |
  sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
[ -x "$BENCH" ] || { echo "cannot find the gemm bench binary" >&2; exit 1; }

S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
mkdir -p "$S/bin" "$S/kaldi" "$S/lib" "$S/lib-cxx"
cp "$T/release/compnet" "$S/bin/compnet"
cp "$BENCH" "$S/bin/gemm_bench"
strip "$S/bin/compnet" "$S/bin/gemm_bench"
# OpenBLAS's header folder as its package declares it (pkg-config).
cflags=$(pkg-config --cflags openblas 2>/dev/null) ||
  { echo "pkg-config does not know openblas (apt-get install -y libopenblas-dev pkg-config)" >&2; exit 1; }
# shellcheck disable=SC2086 # the flags are words
gcc -O2 -o "$S/bin/openblas_gemm" scripts/openblas_gemm.c $cflags -lopenblas
GT=$(type -P time || true)
case $("$GT" --version 2>&1 || true) in
  *GNU*) ;;
  *) echo "GNU time is needed (apt-get install -y time)" >&2; exit 1 ;;
esac
cp "$GT" "$S/bin/time"
for p in $KALDI_PROGS; do cp "$KBIN/$p" "$S/kaldi/$p"; done

# The libraries, as this machine's loader resolves them for Kaldi's binary (the same files
# compnet's openblas build and the C program load).
resolve() { ldd "$1" | awk -v n="$2" '$1 == n { print $3 }'; }
for n in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
  f=$(resolve "$KBIN/nnet3-train" "$n")
  [ -n "$f" ] || { echo "nnet3-train does not load $n here" >&2; exit 1; }
  cp -L "$f" "$S/lib/$n"
done
for n in libstdc++.so.6 libgcc_s.so.1; do
  cp -L "$(resolve "$KBIN/nnet3-train" "$n")" "$S/lib-cxx/$n"
done
# Every library the carried programs need is either carried or part of glibc.
for b in "$S"/bin/* "$S"/kaldi/*; do
  ldd "$b" 2>/dev/null | awk '{ print $1 }' | while read -r n; do
    case $n in
      linux-vdso.so.1 | */ld-linux-x86-64.so.2 | libc.so.6 | libm.so.6 | libpthread.so.0 | \
        libdl.so.2 | librt.so.1) ;;
      *) [ -e "$S/lib/$n" ] || [ -e "$S/lib-cxx/$n" ] || { echo "$b needs $n, not carried" >&2; exit 1; } ;;
    esac
  done
done

{
  echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "compnet and gemm_bench: $(rustc --version), release, --features openblas"
  echo "openblas_gemm: $(gcc --version | head -1)"
  echo "libopenblas.so.0: $(readlink -f "$(resolve "$KBIN/nnet3-train" libopenblas.so.0)")"
  echo "kaldi: $KALDI_PROGS from $KALDI_DIR/bin ($(grep -o 'version string [^,)]*' "$KALDI_DIR/README.md" 2>/dev/null | tr -d '\140' | head -1))"
  echo "needs: glibc >= $(for b in "$S"/kaldi/* "$S"/bin/*; do objdump -T "$b"; done |
    grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)"
  echo "sha256:"
  (cd "$S" && find . -type f ! -name MANIFEST | sort | xargs sha256sum | sed 's/^/  /')
} >"$S/MANIFEST"

mkdir -p "$DEST"
tar -C "$S" -cf - . | xz -9 -T0 >"$DEST/payload.tar.xz.tmp"
mv "$DEST/payload.tar.xz.tmp" "$DEST/payload.tar.xz"
cp "$S/MANIFEST" "$DEST/MANIFEST"
cat "$DEST/MANIFEST"

# What a device call carries: the working tree (tracked and untracked, not ignored files) and
# the ignored folders named in `carry`, 64 MiB at most.
bytes() { du -sb "$@" 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }
tree=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
dest=$(bytes "$DEST")
gpu=$(bytes .gpu)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "payload: $(mib "$(bytes "$DEST/payload.tar.xz")") compressed ($(mib "$(du -sb "$S" | cut -f1)") unpacked)"
echo "carry $DEST alone: working tree $(mib "$tree") + $(mib "$dest") = $(mib $((tree + dest))) of 64 MiB"
case "$(realpath -m "$DEST")/" in
  "$(realpath -m .gpu)"/*)
    if [ $((tree + gpu)) -le $((64 * 1048576)) ]; then fits=fits; else fits="does NOT fit: carry $DEST alone"; fi
    echo "carry .gpu (GPU and CPU checks in one call): working tree $(mib "$tree") + .gpu $(mib "$gpu") = $(mib $((tree + gpu))) of 64 MiB: $fits"
    [ -d .gpu/bin ] || echo "  (.gpu/bin is not there yet: scripts/gpu_build.sh puts about 30 MiB of GPU binaries there)"
    ;;
esac
