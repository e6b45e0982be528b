//! The CUDA backend (cargo feature `cuda`): one GPU per process, one stream, managed memory
//! from a caching allocator, cuBLAS for the products and NVRTC-compiled kernels for the
//! other operations.
//!
//! Storage is CUDA managed memory, so the host can read every device matrix: an operation
//! with a kernel runs on the GPU, one without runs its host code over the same elements
//! (the pages move to the host and back). By default every launch waits for its stream
//! before it returns, so host code never sees a half-written result; the price is one
//! synchronisation per operation. With `COMPNET_GPU_ASYNC=1` launches, products, copies and
//! memsets only queue their work, and host code waits (`settle`) where it is about to touch
//! device elements: the matrix views' host accessors, the storage's `Deref`, and the host
//! branch of every operation that has a kernel (`on_device!`).
//!
//! The CUDA libraries are loaded when a GPU is first selected (`cudarc`'s dynamic loading):
//! the crate builds, and runs on the CPU, on a machine without CUDA.

use super::cuda_profile as profile;
use cudarc::cublas::CudaBlas;
use cudarc::driver::PushKernelArg;
use cudarc::driver::{result, sys, CudaContext, CudaFunction, CudaStream, LaunchConfig};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};

/// The kernels' CUDA C source.
pub const KERNEL_SOURCE: &str = include_str!("cuda_kernels.cu");

/// Every kernel the Rust side launches (checked against the compiled module at start-up and
/// by the kernel-source test).
pub const KERNEL_NAMES: &[&str] = &[
    "k_set_const",
    "k_scale",
    "k_add_const",
    "k_floor",
    "k_ceiling",
    "k_exp",
    "k_log",
    "k_pow",
    "k_heaviside",
    "k_abs",
    "k_sigmoid",
    "k_tanh",
    "k_sigmoid_deriv_from_output",
    "k_tanh_deriv_from_output",
    "k_copy",
    "k_add_mat",
    "k_add_mat_scaled",
    "k_mul",
    "k_div",
    "k_max_with",
    "k_min_with",
    "k_sigmoid_from",
    "k_tanh_from",
    "k_relu_from",
    "k_diff_sigmoid_in_place",
    "k_diff_tanh_in_place",
    "k_diff_relu_in_place",
    "k_copy_t",
    "k_add_mat_t",
    "k_add_mul",
    "k_diff_sigmoid",
    "k_diff_tanh",
    "k_diff_relu",
    "k_add_vec_to_rows",
    "k_add_vec_to_cols",
    "k_mul_cols_vec",
    "k_add_mat_diag_vec",
    "k_add_affine_mat_diag_vec",
    "k_group_pnorm",
    "k_group_max",
    "k_group_deriv",
    "k_per_block",
    "k_block_col_stats",
    "k_lstm_cell",
    "k_gru_cell",
    "k_output_gru_cell",
    "k_lstm_backprop",
    "k_lstm_scale_sums",
    "k_sum_parts",
    "k_gru_backprop",
    "k_mul_into",
    "k_mul_rows_vec",
    "k_copy_rows",
    "k_add_rows",
    "k_copy_to_rows",
    "k_add_to_rows",
    "k_add_row_sum",
    "k_add_col_sum",
    "k_softmax_rows",
    "k_diff_softmax_rows",
    "k_normalize",
    "k_diff_normalize",
    "k_row_reduce",
    "k_add_elements",
    "k_dot_elements",
    "k_attention_head",
    "k_attention_backprop_db",
    "k_attention_backprop_kv",
    "k_copy_cols",
    "k_add_to_cols",
    "k_copy_blocks_outer",
    "k_add_blocks_outer_to",
    "k_add_row_range_stats",
    "k_backprop_row_range_stats",
    "k_prefix_cols",
    "k_pool_row_range_stats",
    "k_pool_stats_deriv",
    "k_add_pool_stats_deriv",
];

/// The selected GPU.
pub(in crate::matrix) struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: Mutex<CudaBlas>,
    functions: HashMap<&'static str, CudaFunction>,
    /// Freed managed buffers by size in bytes, reused before asking the driver (as Kaldi's
    /// CuMemoryAllocator does: the compiled programs allocate and free on every step).
    pool: Mutex<HashMap<usize, Vec<u64>>>,
    /// Whether GPU calls return before their work is done (`COMPNET_GPU_ASYNC=1`, on a GPU
    /// whose managed memory the host may touch while kernels run); host code then waits in
    /// `settle` before it touches device elements.
    queues: bool,
    description: String,
}

static GPU: OnceLock<Gpu> = OnceLock::new();
static SELECTED: AtomicBool = AtomicBool::new(false);
static ENV_SELECTION: Once = Once::new();

/// Runs `f`, turning a panic of cudarc's library loading into an error naming the library
/// (cudarc panics when a CUDA library cannot be loaded; that is an answer here, not a bug).
fn loading<T>(f: impl FnOnce() -> Result<T, String> + std::panic::UnwindSafe) -> Result<T, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(f);
    std::panic::set_hook(hook);
    r.unwrap_or_else(|payload| {
        let msg = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let lib = ["cublas", "nvrtc", "cuda"]
            .into_iter()
            .find(|l| msg.contains(&format!("\"{l}\"")))
            .unwrap_or("cuda");
        Err(format!(
            "the CUDA library lib{lib}.so could not be loaded (is the NVIDIA driver installed, \
             and the CUDA libraries on LD_LIBRARY_PATH?)"
        ))
    })
}

/// Compiles the kernels with NVRTC for `arch` (e.g. `sm_90`), which needs no GPU.
fn compile(arch: &'static str) -> Result<cudarc::nvrtc::Ptx, String> {
    cudarc::nvrtc::compile_ptx_with_opts(
        KERNEL_SOURCE,
        cudarc::nvrtc::CompileOptions {
            arch: Some(arch),
            ..Default::default()
        },
    )
    .map_err(|e| format!("compiling the kernels with NVRTC: {e}"))
}

/// Compiles the kernels for `arch` without a GPU and checks that each kernel the backend
/// launches is defined; returns how many there are.
pub(in crate::matrix) fn check_kernel_source(arch: &'static str) -> Result<usize, String> {
    let ptx = loading(|| compile(arch))?.to_src();
    let missing: Vec<&str> = KERNEL_NAMES
        .iter()
        .copied()
        .filter(|k| !ptx.contains(&format!(".entry {k}(")))
        .collect();
    if missing.is_empty() {
        Ok(KERNEL_NAMES.len())
    } else {
        Err(format!(
            "kernels missing from the compiled source: {missing:?}"
        ))
    }
}

/// Starts the first GPU (once per process) and selects it for all later allocations;
/// returns its description, or why it cannot be used.
pub(in crate::matrix) fn start() -> Result<String, String> {
    if let Some(g) = GPU.get() {
        SELECTED.store(true, Ordering::SeqCst);
        return Ok(g.description.clone());
    }
    let gpu = loading(init_gpu)?;
    let desc = gpu.description.clone();
    let _ = GPU.set(gpu);
    SELECTED.store(true, Ordering::SeqCst);
    Ok(desc)
}

/// True when new storage goes to the GPU. `COMPNET_DEVICE=cuda` selects the GPU for a
/// process that never calls `start` itself (the test executables run by
/// `scripts/gpu_check.sh`).
pub(in crate::matrix) fn selected() -> bool {
    ENV_SELECTION.call_once(|| {
        if std::env::var("COMPNET_DEVICE").as_deref() == Ok("cuda") {
            if let Err(e) = start() {
                eprintln!("compnet: COMPNET_DEVICE=cuda: no usable GPU: {e}");
                std::process::exit(1);
            }
        }
    });
    SELECTED.load(Ordering::Relaxed)
}

fn init_gpu() -> Result<Gpu, String> {
    let n = CudaContext::device_count().map_err(|e| format!("CUDA driver: {e}"))?;
    if n < 1 {
        return Err("the CUDA driver sees no GPU".into());
    }
    let ctx = CudaContext::new(0).map_err(|e| format!("GPU 0: {e}"))?;
    let name = ctx.name().unwrap_or_else(|_| "GPU 0".into());
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| format!("GPU 0: {e}"))?;
    let total = ctx.total_mem().unwrap_or(0);
    let stream = ctx.default_stream();
    let blas = CudaBlas::new(stream.clone()).map_err(|e| format!("cuBLAS: {e}"))?;
    let arch: &'static str = Box::leak(format!("sm_{major}{minor}").into_boxed_str());
    let ptx = compile(arch)?;
    let module = ctx
        .load_module(ptx)
        .map_err(|e| format!("loading the kernels: {e}"))?;
    let mut functions = HashMap::new();
    for &k in KERNEL_NAMES {
        let f = module
            .load_function(k)
            .map_err(|e| format!("kernel {k}: {e}"))?;
        functions.insert(k, f);
    }
    // Without concurrent managed access the host may not touch any managed page while a
    // kernel runs, so queued launches would fault: those GPUs keep waiting after each call.
    let asked = std::env::var("COMPNET_GPU_ASYNC").as_deref() == Ok("1");
    let concurrent = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)
        .is_ok_and(|v| v == 1);
    let mode = match (asked, concurrent) {
        (true, true) => ", asynchronous launches",
        (true, false) => ", COMPNET_GPU_ASYNC ignored: no concurrent managed access",
        _ => "",
    };
    Ok(Gpu {
        ctx,
        stream,
        blas: Mutex::new(blas),
        functions,
        pool: Mutex::new(HashMap::new()),
        queues: asked && concurrent,
        description: format!(
            "{name} (compute capability {major}.{minor}, {:.1} GiB{mode})",
            total as f64 / (1u64 << 30) as f64
        ),
    })
}

/// The selected GPU. Only called for storage that lives on it, which exists only once one
/// has been started.
pub(in crate::matrix) fn gpu() -> &'static Gpu {
    GPU.get().expect("device storage without a started GPU")
}

/// GPU calls queued without a wait, and how many of them are known to be done: host code
/// may touch device elements once the second has caught up with the first.
static QUEUED: AtomicU64 = AtomicU64::new(0);
static FINISHED: AtomicU64 = AtomicU64::new(0);

/// Waits for every queued GPU call before host code touches device elements (nothing to do,
/// two atomic loads, when the calls wait for themselves or nothing is queued). Safe from any
/// thread: a caller returns only once a synchronisation that began after its own view of
/// the queue has ended.
pub(in crate::matrix) fn settle() {
    catch_up(&QUEUED, &FINISHED, || {
        let t = profile::begin();
        gpu().bind();
        gpu().sync("queued before a host access");
        profile::end(t, "host waits for queued work", 0);
    });
}

/// Runs `wait` (which waits for the queue) when `queued` is ahead of `finished`, then
/// records as finished what was queued before it began.
fn catch_up(queued: &AtomicU64, finished: &AtomicU64, wait: impl FnOnce()) {
    let q = queued.load(Ordering::Acquire);
    if q > finished.load(Ordering::Acquire) {
        wait();
        finished.fetch_max(q, Ordering::AcqRel);
    }
}

/// The smallest buffer `Gpu::to_gpu` prefetches.
const PREFETCH_MIN_BYTES: usize = 1 << 20;

/// Whether managed buffers are moved to the GPU ahead of use (`COMPNET_GPU_PREFETCH=0`
/// turns it off, to measure what it gives).
fn prefetching() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("COMPNET_GPU_PREFETCH").as_deref() != Ok("0"))
}

/// GPU 0, as a memory location.
fn gpu_location() -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: 0,
    }
}

/// A kernel argument.
#[derive(Clone, Copy)]
pub(in crate::matrix) enum Arg {
    /// A device pointer.
    Ptr(u64),
    /// An `int`.
    Int(i32),
    /// A `float`.
    Float(f32),
}

/// The size class a request of `bytes` is served from: whole 256-byte units up to 64 KiB,
/// then steps of an eighth of the power of two below, so that a buffer is reused for any
/// request within 12.5 % of its size.
fn size_class(bytes: usize) -> usize {
    let b = bytes.max(256);
    if b <= 1 << 16 {
        return b.div_ceil(256) * 256;
    }
    let step = (1usize << (usize::BITS - 1 - b.leading_zeros())) / 8;
    b.div_ceil(step) * step
}

impl Gpu {
    /// A managed buffer of at least `bytes` bytes; returns the pointer and its real size.
    pub(in crate::matrix) fn alloc(&self, bytes: usize) -> (u64, usize) {
        let class = size_class(bytes);
        if let Some(p) = self
            .pool
            .lock()
            .expect("pool")
            .get_mut(&class)
            .and_then(Vec::pop)
        {
            self.to_gpu(p, class);
            return (p, class);
        }
        self.bind();
        let t = profile::begin();
        // SAFETY: a fresh allocation of `class` bytes; the contents are set by the caller.
        let p =
            unsafe { result::malloc_managed(class, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
                .unwrap_or_else(|e| panic!("GPU memory: cannot allocate {class} bytes: {e}"));
        profile::end(t, "malloc_managed", class as u64);
        if prefetching() {
            // SAFETY: the whole range of the allocation just made.
            let _ = unsafe {
                result::mem_advise(
                    p,
                    class,
                    sys::CUmem_advise::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                    gpu_location(),
                )
            };
        }
        self.to_gpu(p, class);
        (p, class)
    }

    /// Moves the pages of a managed buffer to the GPU in one transfer, ahead of the kernels
    /// (which would otherwise fault them in one by one wherever host code left them). A
    /// hint: a failure changes nothing but speed.
    fn to_gpu(&self, ptr: u64, class: usize) {
        // Below a MiB the call costs more than the few faults it saves.
        if !prefetching() || class < PREFETCH_MIN_BYTES {
            return;
        }
        let t = profile::begin();
        // SAFETY: `ptr` is a managed allocation of `class` bytes (from `alloc`).
        let _ = unsafe {
            result::mem_prefetch_async(ptr, class, gpu_location(), self.stream.cu_stream())
        };
        profile::end(t, "prefetch", class as u64);
    }

    /// Gives a buffer from `alloc` back to the pool.
    pub(in crate::matrix) fn free(&self, ptr: u64, class: usize) {
        self.pool
            .lock()
            .expect("pool")
            .entry(class)
            .or_default()
            .push(ptr);
    }

    fn bind(&self) {
        self.ctx
            .bind_to_thread()
            .unwrap_or_else(|e| panic!("binding the CUDA context: {e}"));
    }

    /// Lets cuBLAS round the single-precision products' inputs to TF32 on the tensor cores
    /// (Kaldi's `--cuda-use-tf32-compute`), or keeps them in full FP32.
    pub(in crate::matrix) fn set_tf32(&self, on: bool) -> Result<(), String> {
        use cudarc::cublas::sys::{cublasMath_t, cublasSetMathMode, cublasStatus_t};
        let mode = if on {
            cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            cublasMath_t::CUBLAS_DEFAULT_MATH
        };
        let blas = self.blas.lock().expect("cuBLAS");
        // SAFETY: a live handle of this process.
        match unsafe { cublasSetMathMode(*blas.handle(), mode) } {
            cublasStatus_t::CUBLAS_STATUS_SUCCESS => Ok(()),
            e => Err(format!("cublasSetMathMode: {e:?}")),
        }
    }

    /// Waits until every queued operation has finished.
    pub(in crate::matrix) fn sync(&self, what: &str) {
        self.stream
            .synchronize()
            .unwrap_or_else(|e| panic!("GPU operation {what}: {e}"));
    }

    /// After a call is queued on the stream: waits for it, or, with `COMPNET_GPU_ASYNC=1`,
    /// counts it as queued for `settle` (the profile then times launches, not the work).
    fn done_or_queued(&self, what: &str) {
        if self.queues {
            QUEUED.fetch_add(1, Ordering::AcqRel);
        } else {
            self.sync(what);
        }
    }

    /// Sets `bytes` bytes at `ptr` to zero.
    pub(in crate::matrix) fn zero(&self, ptr: u64, bytes: usize) {
        self.bind();
        let t = profile::begin();
        // SAFETY: `ptr` is a managed buffer of at least `bytes` bytes.
        unsafe { result::memset_d8_async(ptr, 0, bytes, self.stream.cu_stream()) }
            .unwrap_or_else(|e| panic!("GPU memset: {e}"));
        self.done_or_queued("memset");
        profile::end(t, "memset", bytes as u64);
    }

    /// Copies `bytes` bytes from `src` to `dst` (both device or managed memory).
    pub(in crate::matrix) fn copy(&self, dst: u64, src: u64, bytes: usize) {
        self.bind();
        let t = profile::begin();
        // SAFETY: both buffers hold at least `bytes` bytes and do not overlap.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }
            .unwrap_or_else(|e| panic!("GPU copy: {e}"));
        self.done_or_queued("copy");
        profile::end(t, "copy", bytes as u64);
    }

    /// Copies a host table of indices to a new device buffer (give it back with `free`).
    pub(in crate::matrix) fn upload_i32(&self, v: &[i32]) -> (u64, usize) {
        let (p, class) = self.alloc(std::mem::size_of_val(v));
        self.bind();
        let t = profile::begin();
        // SAFETY: `p` holds at least `v`'s bytes; the copy from pageable memory has read `v`
        // when the call returns.
        unsafe { result::memcpy_htod_async(p, v, self.stream.cu_stream()) }
            .unwrap_or_else(|e| panic!("GPU upload: {e}"));
        profile::end(t, "upload indexes", std::mem::size_of_val(v) as u64);
        (p, class)
    }

    /// Copies `n` values of type `T` from device or managed memory at `ptr` to a host `Vec`
    /// (a copy, so that the pages stay on the GPU).
    pub(in crate::matrix) fn download<T: Copy + Default>(&self, ptr: u64, n: usize) -> Vec<T> {
        let mut v = vec![T::default(); n];
        if n == 0 {
            return v;
        }
        self.bind();
        let queued = QUEUED.load(Ordering::Acquire);
        self.sync("download");
        FINISHED.fetch_max(queued, Ordering::AcqRel);
        let t = profile::begin();
        // SAFETY: `ptr` holds at least `n` values of `T`; the stream is idle, so they are final.
        unsafe { result::memcpy_dtoh_sync(&mut v, ptr) }
            .unwrap_or_else(|e| panic!("GPU download: {e}"));
        profile::end(t, "download", std::mem::size_of_val(&v[..]) as u64);
        v
    }

    /// Copies a host slice into device or managed memory at `ptr` (which holds at least as
    /// many values).
    pub(in crate::matrix) fn upload<T: Copy>(&self, ptr: u64, v: &[T]) {
        if v.is_empty() {
            return;
        }
        self.bind();
        let t = profile::begin();
        if self.queues {
            // Queued behind the calls that may still read `ptr`; the driver has staged the
            // pageable `v` when the call returns, so the caller may drop it.
            // SAFETY: `ptr` holds at least `v.len()` values of `T`.
            unsafe { result::memcpy_htod_async(ptr, v, self.stream.cu_stream()) }
                .unwrap_or_else(|e| panic!("GPU upload: {e}"));
            QUEUED.fetch_add(1, Ordering::AcqRel);
        } else {
            // SAFETY: `ptr` holds at least `v.len()` values of `T`.
            unsafe { result::memcpy_htod_sync(ptr, v) }
                .unwrap_or_else(|e| panic!("GPU upload: {e}"));
        }
        profile::end(t, "upload", std::mem::size_of_val(v) as u64);
    }

    /// Launches kernel `name` with `args` and waits for it (with `COMPNET_GPU_ASYNC=1`, queues
    /// it: see `settle`).
    pub(in crate::matrix) fn launch(
        &self,
        name: &'static str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_mem_bytes: u32,
        args: &[Arg],
    ) {
        self.launch_then(name, grid, block, shared_mem_bytes, args, true);
    }

    /// As `launch`, without the wait when `wait` is false: for a kernel whose result is read
    /// next by `download`, which waits for the stream itself.
    pub(in crate::matrix) fn launch_then(
        &self,
        name: &'static str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_mem_bytes: u32,
        args: &[Arg],
        wait: bool,
    ) {
        let f = self
            .functions
            .get(name)
            .unwrap_or_else(|| panic!("no kernel {name}"));
        let t = profile::begin();
        let mut b = self.stream.launch_builder(f);
        for a in args {
            match a {
                Arg::Ptr(p) => b.arg(p),
                Arg::Int(i) => b.arg(i),
                Arg::Float(x) => b.arg(x),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: block,
            shared_mem_bytes,
        };
        // SAFETY: each kernel's arguments are built by its one caller in `ops`, which passes
        // pointers of live device buffers with the shapes and strides the kernel indexes.
        unsafe { b.launch(cfg) }.unwrap_or_else(|e| panic!("launching {name}: {e}"));
        if self.queues {
            QUEUED.fetch_add(1, Ordering::AcqRel);
        } else if wait || profile::enabled() {
            self.sync(name);
        }
        profile::end(t, name, 0);
    }

    /// `c = alpha · op(a) · op(b) + beta · c` through cuBLAS, all three row-major with row
    /// strides: cuBLAS, column-major, computes cᵀ = op(b)ᵀ · op(a)ᵀ on the same memory.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::matrix) fn sgemm(
        &self,
        (m, n, k): (usize, usize, usize),
        alpha: f32,
        (a, lda, ta): (u64, usize, bool),
        (b, ldb, tb): (u64, usize, bool),
        beta: f32,
        (c, ldc): (u64, usize),
    ) {
        use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        let op = |t: bool| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
        let blas = self.blas.lock().expect("cuBLAS");
        self.bind();
        let t = profile::begin();
        // SAFETY: the shapes and leading dimensions describe the callers' views, which lie
        // inside live device buffers; `c` does not overlap `a` or `b`.
        unsafe {
            cudarc::cublas::result::sgemm(
                *blas.handle(),
                op(tb),
                op(ta),
                n as i32,
                m as i32,
                k as i32,
                &alpha,
                b as *const f32,
                ldb as i32,
                a as *const f32,
                lda as i32,
                &beta,
                c as *mut f32,
                ldc as i32,
            )
        }
        .unwrap_or_else(|e| panic!("cuBLAS sgemm {m}x{n}x{k}: {e}"));
        self.done_or_queued("sgemm");
        profile::end(
            t,
            profile::product_name(m, n, k, ta, tb),
            2 * (m * n * k) as u64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Host accesses wait only while something queued is not known to be done, and a wait
    /// covers exactly what was queued before it.
    #[test]
    fn host_accesses_wait_only_for_unfinished_calls() {
        let (queued, finished) = (AtomicU64::new(0), AtomicU64::new(0));
        let waits = std::cell::Cell::new(0);
        let wait = || waits.set(waits.get() + 1);
        catch_up(&queued, &finished, wait);
        assert_eq!(waits.get(), 0, "nothing queued");
        queued.fetch_add(3, Ordering::AcqRel);
        catch_up(&queued, &finished, wait);
        assert_eq!((waits.get(), finished.load(Ordering::Acquire)), (1, 3));
        catch_up(&queued, &finished, wait);
        assert_eq!(waits.get(), 1, "already caught up");
        // A call queued while a wait runs is not counted as finished by it.
        queued.fetch_add(1, Ordering::AcqRel);
        catch_up(&queued, &finished, || {
            queued.fetch_add(1, Ordering::AcqRel);
        });
        assert_eq!(finished.load(Ordering::Acquire), 4);
        catch_up(&queued, &finished, wait);
        assert_eq!((waits.get(), finished.load(Ordering::Acquire)), (2, 5));
    }

    #[test]
    fn size_classes_cover_the_request_and_waste_little() {
        for bytes in [
            1,
            255,
            256,
            257,
            4096,
            65536,
            65537,
            1 << 20,
            (1 << 20) + 1,
            3 << 27,
        ] {
            let c = size_class(bytes);
            assert!(c >= bytes, "{bytes} -> {c}");
            assert!(
                c as f64 <= (bytes.max(256) as f64) * 1.126 + 256.0,
                "{bytes} -> {c}"
            );
            assert_eq!(size_class(c), c, "a class is its own class");
        }
    }
}
