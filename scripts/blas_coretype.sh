# Sourced by the bench scripts: picks OpenBLAS's kernels for this CPU unless
# OPENBLAS_CORETYPE is already set. Debian's OpenBLAS misdetects some virtual CPUs (3-5x
# slower), and forcing the AVX-512 kernels on a CPU without AVX-512 dies of an illegal
# instruction, so the choice follows the CPU's flags.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    if grep -qw avx512f /proc/cpuinfo; then
        OPENBLAS_CORETYPE=SkylakeX
    elif grep -qw avx2 /proc/cpuinfo; then
        OPENBLAS_CORETYPE=Haswell
    else
        OPENBLAS_CORETYPE=Sandybridge
    fi
fi
export OPENBLAS_CORETYPE
