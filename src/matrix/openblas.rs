//! The system OpenBLAS as a GEMM backend (the `openblas` cargo feature): `cblas_sgemm` on
//! row-major operands, OpenBLAS itself kept at one thread, C's longer side cut into blocks
//! that depend on the shape only and handed to the rayon threads in whole blocks, so every
//! block is the same OpenBLAS call whatever the thread count and the results do not depend
//! on it.
//!
//! Only the few functions used are declared here; the library is linked from the system
//! (`libopenblas-dev` on Debian and Ubuntu), nothing is downloaded or built.

use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

/// CBLAS's enumerations (cblas.h): row-major storage, no transpose, transpose.
const CBLAS_ROW_MAJOR: c_int = 101;
const CBLAS_NO_TRANS: c_int = 111;
const CBLAS_TRANS: c_int = 112;

#[link(name = "openblas")]
extern "C" {
    #[allow(clippy::too_many_arguments)]
    fn cblas_sgemm(
        order: c_int,
        trans_a: c_int,
        trans_b: c_int,
        m: c_int,
        n: c_int,
        k: c_int,
        alpha: f32,
        a: *const f32,
        lda: c_int,
        b: *const f32,
        ldb: c_int,
        beta: f32,
        c: *mut f32,
        ldc: c_int,
    );
    fn openblas_set_num_threads(n: c_int);
    fn openblas_get_corename() -> *const c_char;
}

/// Sets OpenBLAS to one thread, once per process (the parallelism is ours).
fn init() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        // SAFETY: a plain setter of OpenBLAS's thread count; no pointers.
        unsafe { openblas_set_num_threads(1) }
    });
}

/// The kernel set OpenBLAS chose for this CPU (e.g. "SkylakeX", "Haswell", "Zen"; set by
/// `OPENBLAS_CORETYPE` or detected when the library loads), lower-cased.
pub(super) fn core_name() -> String {
    // SAFETY: OpenBLAS returns a pointer to a static NUL-terminated string (or null).
    unsafe {
        let p = openblas_get_corename();
        if p.is_null() {
            return String::new();
        }
        CStr::from_ptr(p).to_string_lossy().to_ascii_lowercase()
    }
}

/// Whether OpenBLAS runs its AVX-512 kernels here (the cores whose sgemm uses them).
pub(super) fn uses_avx512_kernels() -> bool {
    matches!(
        core_name().as_str(),
        "skylakex" | "cooperlake" | "sapphirerapids"
    )
}

/// One operand: its row-major storage (`rows` × `cols` stored, row stride `ld`) and whether
/// the product reads it transposed.
#[derive(Clone, Copy)]
pub(super) struct Stored {
    pub ptr: *const f32,
    pub ld: usize,
    pub trans: bool,
}

/// A pointer moved into the threads of one product (each writes its own block of C).
#[derive(Clone, Copy)]
struct Shared<T>(T);
// SAFETY: the threads read A and B and write disjoint blocks of C (see `sgemm`).
unsafe impl<T> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Shared<T> {}

/// Whether every size of the product fits OpenBLAS's 32-bit integers.
pub(super) fn fits(sizes: &[usize]) -> bool {
    sizes.iter().all(|&s| c_int::try_from(s).is_ok())
}

/// `c (m×n, row stride ldc) = alpha · op(a) (m×k) · op(b) (k×n) + beta · c` on `threads`
/// threads; with `beta == 0` c is not read (OpenBLAS overwrites it).
///
/// # Safety
/// m, n, k ≥ 1 and each fit a C int (as do the strides, see [`fits`]); `a` stores op(A)
/// (m×k, or k×m when transposed) with row stride `a.ld` ≥ its columns, likewise `b`; `c`
/// addresses m rows of n elements at stride `ldc` ≥ n, inside one live allocation that
/// overlaps neither input.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn sgemm(
    [m, n, k]: [usize; 3],
    alpha: f32,
    a: Stored,
    b: Stored,
    beta: f32,
    c: *mut f32,
    ldc: usize,
    threads: usize,
    min_work: usize,
) {
    init();
    let by_rows = m >= n;
    let len = if by_rows { m } else { n };
    let (block, count) =
        super::gemm::split_blocks(len, m.saturating_mul(n).saturating_mul(k), min_work);
    let (a, b, c) = (Shared(a), Shared(b), Shared(c));
    let call = move |i: usize| {
        let (a, b, c) = (a, b, c);
        let s = i * block;
        let l = block.min(len - s);
        let (rows, cols) = if by_rows { (l, n) } else { (m, l) };
        // Block rows s.. of op(A) and C, or block columns s.. of op(B) and C. Row s of op(A)
        // is stored row s (column s when transposed); column s of op(B) is stored column
        // s (row s when transposed).
        let (ap, bp, cp) = if by_rows {
            let off = if a.0.trans { s } else { s * a.0.ld };
            // SAFETY: s < m, so the offset stays inside op(A)'s and C's storage.
            unsafe { (a.0.ptr.add(off), b.0.ptr, c.0.add(s * ldc)) }
        } else {
            let off = if b.0.trans { s * b.0.ld } else { s };
            // SAFETY: s < n, as above for op(B) and C.
            unsafe { (a.0.ptr, b.0.ptr.add(off), c.0.add(s)) }
        };
        let t = |x: Stored| if x.trans { CBLAS_TRANS } else { CBLAS_NO_TRANS };
        // SAFETY: the block is a rows × cols part of C (sizes and strides fit a C int, the
        // caller's contract) and the matching part of op(A) and op(B); different blocks are
        // disjoint parts of C.
        unsafe {
            cblas_sgemm(
                CBLAS_ROW_MAJOR,
                t(a.0),
                t(b.0),
                rows as c_int,
                cols as c_int,
                k as c_int,
                alpha,
                ap,
                a.0.ld as c_int,
                bp,
                b.0.ld as c_int,
                beta,
                cp,
                ldc as c_int,
            );
        }
    };
    let threads = threads.clamp(1, count);
    if threads == 1 {
        (0..count).for_each(call);
        return;
    }
    // Thread t takes the consecutive blocks t·per .. (t+1)·per.
    let per = count.div_ceil(threads);
    rayon::scope(|sc| {
        for t in 0..threads {
            sc.spawn(move |_| (t * per..count.min((t + 1) * per)).for_each(call));
        }
    });
}
