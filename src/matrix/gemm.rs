//! Matrix products and the process-wide thread bound shared by every parallel kernel.
//!
//! GEMM backends, one chosen per process ([`gemm_backend`]): compnet's own AVX2+FMA kernel
//! (src/matrix/sgemm.rs) on x86-64 CPUs with AVX2 and FMA but not AVX-512; in a build with
//! the `openblas` feature, the system OpenBLAS (src/matrix/openblas.rs) on CPUs with AVX-512
//! where OpenBLAS runs its AVX-512 kernels; the pure-Rust `gemm` crate everywhere else (its
//! AVX-512 kernels were within 89–99 % of OpenBLAS on an AMD CPU and 10–40 % behind on an
//! Intel one; its AVX2 ones are behind). Chosen by measurement: docs/PERFORMANCE.md, "GEMM".
//! `COMPNET_GEMM=native|openblas|gemm-crate` overrides the choice (for benchmarks and
//! comparisons); [`MatViewMut::add_mat_mat_on`] runs one product on a named backend.

use super::on_device;
use super::{MatView, MatViewMut, Real, Trans};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Which GEMM implementation is in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmBackend {
    /// The `gemm` crate (runtime-dispatched AVX2/AVX-512/NEON kernels, rayon threading).
    GemmCrate,
    /// compnet's own blocked kernel for x86-64 with AVX2 and FMA (src/matrix/sgemm.rs).
    NativeAvx2,
    /// The system OpenBLAS's `cblas_sgemm` (only in builds with the `openblas` feature).
    OpenBlas,
}

impl GemmBackend {
    /// The name printed by `info` and the benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            GemmBackend::GemmCrate => "gemm-crate",
            GemmBackend::NativeAvx2 => "native-avx2",
            GemmBackend::OpenBlas => "openblas",
        }
    }

    /// Whether this build and CPU can run the backend.
    pub fn is_available(self) -> bool {
        match self {
            GemmBackend::GemmCrate => true,
            GemmBackend::NativeAvx2 => native_available(),
            GemmBackend::OpenBlas => cfg!(feature = "openblas"),
        }
    }

    /// The backends this build can run on this CPU (for tests and benchmarks that compare
    /// them).
    pub fn available() -> Vec<GemmBackend> {
        [
            GemmBackend::NativeAvx2,
            GemmBackend::OpenBlas,
            GemmBackend::GemmCrate,
        ]
        .into_iter()
        .filter(|b| b.is_available())
        .collect()
    }
}

/// The environment variable that overrides the backend: `native`, `openblas` or `gemm-crate`.
pub const GEMM_ENV: &str = "COMPNET_GEMM";

/// The GEMM backend of this process: chosen at the first product from the CPU's features
/// (the native kernel where the CPU has AVX2 and FMA but not AVX-512; with the `openblas`
/// feature, OpenBLAS where the CPU has AVX-512 and OpenBLAS uses its AVX-512 kernels; else
/// the `gemm` crate), unless `COMPNET_GEMM` says otherwise.
pub fn gemm_backend() -> GemmBackend {
    static BACKEND: OnceLock<GemmBackend> = OnceLock::new();
    *BACKEND.get_or_init(|| choose_backend(std::env::var(GEMM_ENV).ok().as_deref()))
}

/// Name of the GEMM backend in use (for `info` and benchmarks).
pub fn gemm_backend_name() -> &'static str {
    gemm_backend().name()
}

fn native_available() -> bool {
    super::simd::has_avx2_fma()
}

fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether OpenBLAS is compiled in and runs its AVX-512 kernels on this CPU (Debian's
/// OpenBLAS misdetects some virtual CPUs and then runs older, slower kernels; see
/// `OPENBLAS_CORETYPE` in docs/PERFORMANCE.md).
fn openblas_avx512() -> bool {
    #[cfg(feature = "openblas")]
    return has_avx512() && super::openblas::uses_avx512_kernels();
    #[cfg(not(feature = "openblas"))]
    false
}

/// The backend for an override value (`None`: no override).
fn choose_backend(requested: Option<&str>) -> GemmBackend {
    let auto = if native_available() && !has_avx512() {
        GemmBackend::NativeAvx2
    } else if openblas_avx512() {
        GemmBackend::OpenBlas
    } else {
        GemmBackend::GemmCrate
    };
    match requested.map(str::trim) {
        None | Some("") => auto,
        Some("gemm-crate") => GemmBackend::GemmCrate,
        Some("openblas") if GemmBackend::OpenBlas.is_available() => GemmBackend::OpenBlas,
        Some("openblas") => {
            eprintln!(
                "WARNING: {GEMM_ENV}=openblas needs a build with the `openblas` feature; using {}",
                auto.name()
            );
            auto
        }
        Some("native") if native_available() => GemmBackend::NativeAvx2,
        Some("native") => {
            eprintln!(
                "WARNING: {GEMM_ENV}=native needs a CPU with AVX2 and FMA; using the gemm crate"
            );
            GemmBackend::GemmCrate
        }
        Some(other) => {
            eprintln!(
                "WARNING: {GEMM_ENV}={other:?} is none of native, openblas, gemm-crate; using {}",
                auto.name()
            );
            auto
        }
    }
}

/// The shortest block of C's longer side, in rows or columns, in the OpenBLAS backend: each
/// block is one OpenBLAS call, which packs the other operand again (a 512-long block costs
/// 1–4 % against one call on the training shapes).
#[cfg_attr(not(feature = "openblas"), allow(dead_code))] // tested in every build
const MIN_BLOCK: usize = 512;
/// The most blocks one product is cut into.
#[cfg_attr(not(feature = "openblas"), allow(dead_code))] // tested in every build
const MAX_BLOCKS: usize = 16;
/// Block lengths are multiples of this (a multiple of every OpenBLAS sgemm tile), so block
/// edges fall on tile edges.
#[cfg_attr(not(feature = "openblas"), allow(dead_code))] // tested in every build
const BLOCK_ALIGN: usize = 64;

/// How the OpenBLAS backend cuts C's longer side (`len`): (block length, number of blocks).
/// A function of the shape only: one block when `work` (m·n·k) is below the parallel
/// cut-off `min_work`, else the largest power of two up to [`MAX_BLOCKS`] blocks of at
/// least [`MIN_BLOCK`].
#[cfg_attr(not(feature = "openblas"), allow(dead_code))] // tested in every build
pub(super) fn split_blocks(len: usize, work: usize, min_work: usize) -> (usize, usize) {
    if work < min_work || len < 2 * MIN_BLOCK {
        return (len, 1);
    }
    let mut count = 1;
    while count * 2 <= MAX_BLOCKS && len / (count * 2) >= MIN_BLOCK {
        count *= 2;
    }
    let block = len.div_ceil(count).next_multiple_of(BLOCK_ALIGN);
    (block, len.div_ceil(block))
}

/// One operand of [`strided_gemm`]: its first element and the distances, in elements,
/// between consecutive columns and consecutive rows.
pub(super) struct Operand<P> {
    ptr: P,
    col_stride: isize,
    row_stride: isize,
}

impl<P> Operand<P> {
    pub(super) fn new(ptr: P, col_stride: isize, row_stride: isize) -> Self {
        Operand {
            ptr,
            col_stride,
            row_stride,
        }
    }
}

/// `dst (m×n) = alpha · lhs (m×k) · rhs (k×n) + beta · dst`, `[m, n, k] = shape`, on the
/// `gemm` crate (whose own `alpha` is the destination's scale and `beta` the product's);
/// `dst` is read only when `beta` is not zero.
///
/// # Safety
/// Each operand's pointer and strides address only elements of its own live allocation (m×k,
/// k×n and m×n elements), and `dst` overlaps neither input.
pub(super) unsafe fn strided_gemm<T: Copy + PartialEq + Default + 'static>(
    shape: [usize; 3],
    dst: Operand<*mut T>,
    lhs: Operand<*const T>,
    rhs: Operand<*const T>,
    alpha: T,
    beta: T,
    parallelism: gemm::Parallelism,
) {
    let [m, n, k] = shape;
    // SAFETY: the caller's contract is gemm::gemm's.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.ptr,
            dst.col_stride,
            dst.row_stride,
            beta != T::default(),
            lhs.ptr,
            lhs.col_stride,
            lhs.row_stride,
            rhs.ptr,
            rhs.col_stride,
            rhs.row_stride,
            beta,
            alpha,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// The thread bound; 0 means "not set yet" (then all cores are used).
static NUM_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Products with fewer multiply-adds than this stay single-threaded: below it the rayon
/// fork/join costs more than it saves (measured: 256×200×512 is about 2^24.6).
const PARALLEL_MIN_WORK: usize = 1 << 21;

/// Bounds the number of threads used by the numeric kernels (0 = all cores), process-wide.
pub fn set_num_threads(n: usize) {
    let n = if n == 0 { available_cores() } else { n };
    NUM_THREADS.store(n, Ordering::Relaxed);
}

/// The current thread bound (all cores unless [`set_num_threads`] said otherwise).
pub fn num_threads() -> usize {
    match NUM_THREADS.load(Ordering::Relaxed) {
        0 => available_cores(),
        n => n,
    }
}

fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Threads for an m×n×k product: all allowed ones for big products, else one.
fn threads_for(m: usize, n: usize, k: usize) -> usize {
    let threads = num_threads();
    if threads > 1 && m.saturating_mul(n).saturating_mul(k) >= PARALLEL_MIN_WORK {
        threads
    } else {
        1
    }
}

/// [`threads_for`] as the `gemm` crate's parallelism.
pub(super) fn parallelism_for(m: usize, n: usize, k: usize) -> gemm::Parallelism {
    match threads_for(m, n, k) {
        1 => gemm::Parallelism::None,
        t => gemm::Parallelism::Rayon(t),
    }
}

/// `y = alpha · x · B + beta · y` with B (x's columns × y's columns) packed for the native
/// kernel: [`WeightMatrix`](super::WeightMatrix)'s forward product with Wᵀ packed once per
/// weight change. With `beta == 0` y is never read.
///
/// # Panics
/// If `b` was packed for another shape.
#[cfg(target_arch = "x86_64")]
pub(super) fn add_mat_packed(
    y: &mut MatViewMut<'_>,
    alpha: Real,
    x: MatView<'_>,
    b: &super::sgemm::PackedB,
    beta: Real,
) {
    let (m, n, k) = (y.num_rows(), y.num_cols(), x.num_cols());
    let a = super::sgemm::Strided {
        data: x.as_slice(),
        rs: x.stride(),
        cs: 1,
    };
    let c_rs = y.stride();
    let parts = threads_for(m, n, k);
    super::sgemm::sgemm_packed([m, n, k], alpha, a, b, beta, y.as_mut_slice(), c_rs, parts);
    super::check::check_finite("WeightMatrix::forward", y.as_view());
}

/// (rows, cols, row stride, column stride) of op(a) for a row-major view.
#[inline]
fn op_layout(a: &MatView<'_>, t: Trans) -> (usize, usize, isize, isize) {
    let s = a.stride() as isize;
    match t {
        Trans::No => (a.num_rows(), a.num_cols(), s, 1),
        Trans::Yes => (a.num_cols(), a.num_rows(), 1, s),
    }
}

impl MatViewMut<'_> {
    /// `self = alpha · op(a) · op(b) + beta · self` (Kaldi's AddMatMat). With `beta == 0` the
    /// old contents are never read (NaN in them does not propagate).
    ///
    /// # Panics
    /// If the shapes do not agree (a programming error, not an input error).
    pub fn add_mat_mat(
        &mut self,
        alpha: Real,
        a: MatView<'_>,
        ta: Trans,
        b: MatView<'_>,
        tb: Trans,
        beta: Real,
    ) {
        self.add_mat_mat_on(gemm_backend(), alpha, a, ta, b, tb, beta);
    }

    /// [`add_mat_mat`](Self::add_mat_mat) on a named backend instead of the process's (for
    /// tests and benchmarks that compare backends; see [`GemmBackend::available`]).
    ///
    /// # Panics
    /// If the shapes do not agree, or the backend is not available in this build or on this
    /// CPU.
    #[allow(clippy::too_many_arguments)] // add_mat_mat's operands plus the backend
    pub fn add_mat_mat_on(
        &mut self,
        backend: GemmBackend,
        alpha: Real,
        a: MatView<'_>,
        ta: Trans,
        b: MatView<'_>,
        tb: Trans,
        beta: Real,
    ) {
        assert!(
            backend.is_available(),
            "add_mat_mat_on: backend {} is not available here",
            backend.name()
        );
        let (m, k, a_rs, a_cs) = op_layout(&a, ta);
        let (k2, n, b_rs, b_cs) = op_layout(&b, tb);
        assert!(
            k == k2 && m == self.num_rows() && n == self.num_cols(),
            "add_mat_mat: shapes {m}x{k} · {k2}x{n} into {}x{}",
            self.num_rows(),
            self.num_cols()
        );
        if m == 0 || n == 0 {
            return;
        }
        if k == 0 || alpha == 0.0 {
            if beta == 0.0 {
                self.set_zero();
            } else if beta != 1.0 {
                self.scale(beta);
            }
            return;
        }
        on_device!(self.place.on_device() && a.place.on_device() && b.place.on_device() => super::cuda_ops::gemm(self, alpha, (a, ta), (b, tb), beta));
        // The native kernel computes C row-major directly: the transposed route below (for
        // the gemm crate) was slower with it (50×650→3000: 48–53 against 56–62 GFLOP/s).
        #[cfg(target_arch = "x86_64")]
        if backend == GemmBackend::NativeAvx2 {
            use super::sgemm::Strided;
            // Views have non-negative strides (op_layout's are a row stride and 1).
            let op = |data, rs: isize, cs: isize| Strided {
                data,
                rs: rs as usize,
                cs: cs as usize,
            };
            let c_rs = self.stride();
            super::sgemm::sgemm(
                [m, n, k],
                alpha,
                op(a.as_slice(), a_rs, a_cs),
                op(b.as_slice(), b_rs, b_cs),
                beta,
                self.as_mut_slice(),
                c_rs,
                threads_for(m, n, k),
            );
            super::check::check_finite("add_mat_mat", self.as_view());
            return;
        }
        // OpenBLAS reads the row-major views as they are (a transposed operand is a
        // transposed flag and the same row stride).
        #[cfg(feature = "openblas")]
        if backend == GemmBackend::OpenBlas
            && super::openblas::fits(&[m, n, k, a.stride(), b.stride(), self.stride()])
        {
            use super::openblas::Stored;
            let stored = |v: &MatView<'_>, t: Trans| Stored {
                ptr: v.as_slice().as_ptr(),
                ld: v.stride().max(1),
                trans: t == Trans::Yes,
            };
            let (sa, sb) = (stored(&a, ta), stored(&b, tb));
            let ldc = self.stride().max(1);
            // SAFETY: m, n, k ≥ 1 and every size fits a C int (checked above); each view's
            // slice holds its rows × cols at its stride (≥ its columns), which is op(a) (m×k)
            // or its transpose, op(b) (k×n) or its transpose, and C (m×n); `self` is a
            // unique borrow, so C overlaps neither input.
            unsafe {
                super::openblas::sgemm(
                    [m, n, k],
                    alpha,
                    sa,
                    sb,
                    beta,
                    self.as_mut_slice().as_mut_ptr(),
                    ldc,
                    threads_for(m, n, k),
                    PARALLEL_MIN_WORK,
                );
            }
            super::check::check_finite("add_mat_mat", self.as_view());
            return;
        }
        let parallelism = parallelism_for(m, n, k);
        let c_rs = self.stride() as isize;
        let c_ptr = self.as_mut_slice().as_mut_ptr();
        let (ap, bp) = (a.as_slice().as_ptr(), b.as_slice().as_ptr());
        // Few rows times a wide output (a chunk through a big output layer): the kernel is
        // 1.8× faster at Cᵀ = op(B)ᵀ·op(A)ᵀ written row-major than at C = op(A)·op(B)
        // (50×650→3000: 171 vs 94 GFLOP/s, docs/PERFORMANCE.md "Inference"), and the m×n
        // transpose-copy back costs far less than the product.
        if m <= 128 && n >= 2 * m && k >= 64 {
            let mut t = vec![0.0 as Real; m * n];
            // SAFETY: as below, with the n×m row-major destination `t` (length n·m) and the
            // operands' own elements addressed transposed.
            unsafe {
                strided_gemm(
                    [n, m, k],
                    Operand::new(t.as_mut_ptr(), 1, m as isize),
                    Operand::new(bp, b_rs, b_cs),
                    Operand::new(ap, a_rs, a_cs),
                    alpha,
                    0.0,
                    parallelism,
                );
            }
            let tv = MatView::from_slice(&t, n, m);
            if beta == 0.0 {
                self.copy_from_trans(tv);
            } else {
                if beta != 1.0 {
                    self.scale(beta);
                }
                self.add_mat(1.0, tv, Trans::Yes);
            }
            super::check::check_finite("add_mat_mat", self.as_view());
            return;
        }
        // SAFETY: m, n, k ≥ 1 and each (pointer, row stride, column stride) triple addresses
        // only elements inside its view's backing slice: op(a) is m×k inside `a`, op(b) is k×n
        // inside `b`, and the destination is m×n inside `self` (spans checked by the view
        // constructors). `self` is a unique borrow, so it cannot overlap `a` or `b`. The
        // `gemm` crate computes dst := alpha_g·dst + beta_g·lhs·rhs, and with read_dst = false
        // it never reads dst.
        unsafe {
            strided_gemm(
                [m, n, k],
                Operand::new(c_ptr, 1, c_rs),
                Operand::new(ap, a_cs, a_rs),
                Operand::new(bp, b_cs, b_rs),
                alpha,
                beta,
                parallelism,
            );
        }
        super::check::check_finite("add_mat_mat", self.as_view());
    }

    /// `self = alpha · a · b + beta · self` for two vectors seen as a column and a row: the
    /// rank-one update `self[i, j] = alpha · x[i] · y[j] + beta · self[i, j]` (Kaldi's AddVecVec).
    pub fn add_vec_vec(&mut self, alpha: Real, x: &[Real], y: &[Real], beta: Real) {
        assert_eq!(
            (x.len(), y.len()),
            (self.num_rows(), self.num_cols()),
            "add_vec_vec: dims"
        );
        for (r, &xi) in x.iter().enumerate() {
            let s = alpha * xi;
            let row = self.row_mut(r);
            if beta == 0.0 {
                for (d, &yj) in row.iter_mut().zip(y) {
                    *d = s * yj;
                }
            } else {
                for (d, &yj) in row.iter_mut().zip(y) {
                    *d = s * yj + beta * *d;
                }
            }
        }
    }
}

impl MatView<'_> {
    /// `v = alpha · op(self) · x + beta · v` (Kaldi's AddMatVec); with `beta == 0`, `v`'s old
    /// contents are not read.
    pub fn add_mat_vec_to(&self, v: &mut [Real], alpha: Real, t: Trans, x: &[Real], beta: Real) {
        match t {
            Trans::No => {
                assert_eq!(
                    (v.len(), x.len()),
                    (self.num_rows(), self.num_cols()),
                    "add_mat_vec"
                );
                for (r, y) in v.iter_mut().enumerate() {
                    let d: Real = super::dot(self.row(r), x);
                    *y = if beta == 0.0 {
                        alpha * d
                    } else {
                        alpha * d + beta * *y
                    };
                }
            }
            Trans::Yes => {
                assert_eq!(
                    (v.len(), x.len()),
                    (self.num_cols(), self.num_rows()),
                    "add_mat_vec"
                );
                if beta == 0.0 {
                    v.fill(0.0);
                } else if beta != 1.0 {
                    v.iter_mut().for_each(|y| *y *= beta);
                }
                for (r, &xr) in x.iter().enumerate() {
                    let s = alpha * xr;
                    if s != 0.0 {
                        for (y, &a) in v.iter_mut().zip(self.row(r)) {
                            *y += s * a;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OpenBLAS's blocks cover the side exactly, are aligned, and depend on the shape only.
    #[test]
    fn split_blocks_cover_the_side() {
        assert_eq!(split_blocks(5632, usize::MAX, 1), (704, 8));
        assert_eq!(split_blocks(3000, usize::MAX, 1), (768, 4));
        assert_eq!(split_blocks(1023, usize::MAX, 1), (1023, 1));
        assert_eq!(split_blocks(1024, usize::MAX, 1), (512, 2));
        assert_eq!(split_blocks(100_000, usize::MAX, 1).1, MAX_BLOCKS);
        assert_eq!(split_blocks(5632, 10, 11), (5632, 1));
        for len in (1..20_000).step_by(37) {
            let (block, count) = split_blocks(len, usize::MAX, 1);
            assert!(block * count >= len && block * (count - 1) < len, "{len}");
            assert!(count == 1 || block % BLOCK_ALIGN == 0, "{len}");
        }
    }

    /// The override picks any backend of this build; anything else (or nothing) gives the
    /// CPU's choice, which is the native kernel exactly where AVX2+FMA exist without AVX-512
    /// and OpenBLAS exactly where it is compiled in and runs AVX-512 kernels.
    #[test]
    fn backend_choice_follows_cpu_and_override() {
        let auto = choose_backend(None);
        assert_eq!(
            auto == GemmBackend::NativeAvx2,
            native_available() && !has_avx512()
        );
        assert_eq!(auto == GemmBackend::OpenBlas, openblas_avx512());
        assert!(auto.is_available() && GemmBackend::available().contains(&auto));
        let openblas = choose_backend(Some("openblas"));
        if cfg!(feature = "openblas") {
            assert_eq!(openblas, GemmBackend::OpenBlas);
        } else {
            assert_eq!(openblas, auto);
            assert!(!GemmBackend::available().contains(&GemmBackend::OpenBlas));
        }
        assert_eq!(choose_backend(Some("")), auto);
        assert_eq!(choose_backend(Some("fastest")), auto);
        assert_eq!(choose_backend(Some("gemm-crate")), GemmBackend::GemmCrate);
        let native = choose_backend(Some("native"));
        assert_eq!(native == GemmBackend::NativeAvx2, native_available());
        assert_eq!(
            native.name(),
            if native_available() {
                "native-avx2"
            } else {
                "gemm-crate"
            }
        );
    }
}
