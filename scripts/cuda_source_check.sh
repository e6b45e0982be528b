#!/usr/bin/env bash
# Checks the CUDA kernels' source without a GPU: NVRTC (from PyPI's nvidia-cuda-nvrtc-cu12
# wheel, fetched once into target/nvrtc) compiles src/matrix/cuda_kernels.cu for sm_90 and
# sm_80, and every kernel the backend launches must be defined (tests/device.rs,
# cuda_kernel_source_compiles_with_every_kernel, in a --features cuda build).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=target/nvrtc
if ! ls "$dir"/nvidia/cuda_nvrtc/lib/libnvrtc.so.* >/dev/null 2>&1; then
  mkdir -p "$dir"
  python3 -m pip download --quiet --no-deps --only-binary=:all: nvidia-cuda-nvrtc-cu12 -d "$dir"
  python3 -m zipfile -e "$dir"/nvidia_cuda_nvrtc_cu12-*.whl "$dir"
fi
export LD_LIBRARY_PATH="$PWD/$dir/nvidia/cuda_nvrtc/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo test --release --features cuda --test device
