//! Where matrices live: Kaldi's `--use-gpu=yes|no|optional|wait`, decided once per process.
//!
//! As with Kaldi's `CuDevice`, the choice is made at the start of a command and holds for
//! every matrix and vector allocated afterwards: components, the compiler and the runtime do
//! not change. Without the `cuda` cargo feature there is no GPU to select: `yes` and `wait`
//! are an error, `optional` falls back to the CPU with one log line.

use std::fmt;

/// Kaldi's `--use-gpu` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UseGpu {
    /// The CPU.
    No,
    /// A GPU, or an error.
    Yes,
    /// A GPU when one is usable, else the CPU (one log line says which).
    Optional,
    /// As `yes`: Kaldi waits for a GPU in exclusive mode to become free; compnet takes the
    /// first visible GPU, which it shares.
    Wait,
}

impl UseGpu {
    /// Reads an option value (`yes`, `no`, `optional`, `wait`; also `true`/`false`, which a
    /// bare `--use-gpu` and some scripts give).
    pub fn parse(s: &str) -> Result<UseGpu, String> {
        match s {
            "yes" | "true" => Ok(UseGpu::Yes),
            "no" | "false" => Ok(UseGpu::No),
            "optional" => Ok(UseGpu::Optional),
            "wait" => Ok(UseGpu::Wait),
            other => Err(format!(
                "--use-gpu: expected yes, no, optional or wait, got '{other}'"
            )),
        }
    }
    /// `fit`'s `--device=cpu|cuda`.
    pub fn from_device_option(s: &str) -> Result<UseGpu, String> {
        match s {
            "cpu" => Ok(UseGpu::No),
            "cuda" | "gpu" => Ok(UseGpu::Yes),
            other => Err(format!("--device: expected cpu or cuda, got '{other}'")),
        }
    }
}

/// Why no GPU could be selected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoGpu(pub String);

impl fmt::Display for NoGpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no usable GPU: {}", self.0)
    }
}

impl std::error::Error for NoGpu {}

/// What `select` chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selected {
    /// The CPU; with `optional`, the reason a GPU was not used (to log once).
    Cpu(Option<String>),
    /// A GPU, described (name, memory) for the log.
    Gpu(String),
}

/// Chooses the device for this process from Kaldi's `--use-gpu` value. `yes`/`wait` without
/// a usable GPU is an error naming the reason; `optional` then falls back to the CPU.
pub fn select(mode: UseGpu) -> Result<Selected, NoGpu> {
    if mode == UseGpu::No {
        return Ok(Selected::Cpu(None));
    }
    match start_gpu() {
        Ok(desc) => Ok(Selected::Gpu(desc)),
        Err(e) if mode == UseGpu::Optional => Ok(Selected::Cpu(Some(e.to_string()))),
        Err(e) => Err(e),
    }
}

/// True once a GPU has been selected: new matrices and vectors are then allocated on it.
pub fn gpu_selected() -> bool {
    #[cfg(feature = "cuda")]
    return super::cuda::selected();
    #[cfg(not(feature = "cuda"))]
    false
}

/// Kaldi's `--cuda-use-tf32-compute`: single-precision products on the selected GPU may
/// round their inputs to TF32 (tensor cores). Without a selected GPU it changes nothing.
pub fn use_tf32(on: bool) -> Result<(), String> {
    #[cfg(feature = "cuda")]
    if super::cuda::selected() {
        return super::cuda::gpu().set_tf32(on);
    }
    let _ = on;
    Ok(())
}

/// Prints the GPU backend's call profile to stderr when `COMPNET_GPU_PROFILE=1` was set and
/// a GPU was used (called when a command ends).
pub fn report_profile() {
    #[cfg(feature = "cuda")]
    if let Some(table) = super::cuda_profile::report() {
        eprint!("{table}");
    }
}

/// Compiles the CUDA kernels' source with NVRTC for `arch` (`sm_90` for H100/H200, `sm_80`
/// for A100), which needs the NVRTC library but no GPU, and checks that every kernel the
/// backend launches is defined; returns their number.
#[cfg(feature = "cuda")]
pub fn check_kernel_source(arch: &'static str) -> Result<usize, String> {
    super::cuda::check_kernel_source(arch)
}

#[cfg(feature = "cuda")]
fn start_gpu() -> Result<String, NoGpu> {
    super::cuda::start().map_err(NoGpu)
}

#[cfg(not(feature = "cuda"))]
fn start_gpu() -> Result<String, NoGpu> {
    Err(NoGpu(
        "this compnet was built without CUDA support (rebuild with `--features cuda`)".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_values_parse_as_kaldi_spells_them() {
        assert_eq!(UseGpu::parse("yes"), Ok(UseGpu::Yes));
        assert_eq!(UseGpu::parse("no"), Ok(UseGpu::No));
        assert_eq!(UseGpu::parse("optional"), Ok(UseGpu::Optional));
        assert_eq!(UseGpu::parse("wait"), Ok(UseGpu::Wait));
        assert_eq!(UseGpu::parse("true"), Ok(UseGpu::Yes));
        assert!(UseGpu::parse("maybe").unwrap_err().contains("maybe"));
        assert_eq!(UseGpu::from_device_option("cuda"), Ok(UseGpu::Yes));
        assert!(UseGpu::from_device_option("tpu").is_err());
    }

    #[test]
    fn no_selects_the_cpu_quietly() {
        assert_eq!(select(UseGpu::No), Ok(Selected::Cpu(None)));
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn without_cuda_yes_fails_and_optional_falls_back() {
        let e = select(UseGpu::Yes).unwrap_err();
        assert!(e.to_string().contains("without CUDA"), "{e}");
        assert!(select(UseGpu::Wait).is_err());
        match select(UseGpu::Optional) {
            Ok(Selected::Cpu(Some(why))) => assert!(why.contains("without CUDA")),
            other => panic!("optional gave {other:?}"),
        }
        assert!(!gpu_selected());
    }
}
