//! Weight matrices with a product layout kept for inference.
//!
//! An affine layer computes `Y = X·Wᵀ` with W (out × in) row-major, as Kaldi stores it. The
//! GEMM kernel then has to repack W on every call: for the 70–600-row products of chunked
//! inference that repacking is a third of the time (wsj TDNN 1950→650 at 280 rows: 146
//! GFLOP/s). Given W column-major instead (Wᵀ row-major, columns padded to whole SIMD
//! vectors), the kernel reads it in place and writes Yᵀ column-major, which *is* Y row-major:
//! 205–215 GFLOP/s on the same product, same results to the bit (docs/PERFORMANCE.md).
//!
//! This holds for the `gemm` crate's kernels. The native AVX2 kernel (src/matrix/sgemm.rs)
//! packs both operands whatever their layout; with it the copy is Wᵀ packed into the
//! kernel's micro-panels (one per column block a Tdnn uses), built on the same rule, so the
//! forward product skips packing W (docs/PERFORMANCE.md, "GEMM"); the backward product is
//! the plain one. The few-row product of looped recurrent computation (`few_rows`) streams
//! the same packed copy.
//!
//! [`WeightMatrix`] derefs to the plain [`Matrix`]; any mutable access drops the transposed
//! copy. The copy is made on the second product with unchanged weights, so feed-forward
//! training (one product per weight between updates) never builds one. A layer used several
//! times per minibatch (a Tdnn's time offsets, tied weights) builds one per update: at
//! training sizes that costs about what the faster products save (measured: 2048×1950→650,
//! 2 threads: 14.4 ms plain vs 13.2 ms transposed, 14.6 ms for the product that also builds
//! the copy).

use super::few_rows;
use super::int8::{self, PackedWeights};
use super::{MatView, MatViewMut, Matrix, Real};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Columns of the transposed copy are padded to a multiple of this (one AVX-512 register), so
/// every column starts aligned and the kernel needs no repacking of partial vectors.
const PAD: usize = 16;

/// Below this many rows the plain product is as fast and needs no copy.
const MIN_ROWS: usize = 8;

/// Above this many rows the input-derivative product packs W as usual: reading W in place
/// doubled 8- and 48-row products (8×1024→512: 42 → 90 GFLOP/s) and made no difference by
/// 640 rows (docs/PERFORMANCE.md, "Training").
const BACKWARD_MAX_ROWS: usize = 256;

/// Products with unchanged weights before the transposed copy is built (chunked inference
/// makes ~30 per weight; feed-forward training one per update).
const USES_BEFORE_COPY: usize = 1;

/// W (out × in), plus (built on its second product) Wᵀ laid out for `Y = X·Wᵀ`.
#[derive(Default)]
pub struct WeightMatrix {
    w: Matrix,
    transposed: OnceLock<Transposed>,
    /// Wᵀ's column blocks packed for the native kernel (used instead of `transposed` there).
    #[cfg(target_arch = "x86_64")]
    packed: Blocks<super::sgemm::PackedB>,
    /// Products computed since the last mutation (only counted until the copy exists).
    uses: AtomicUsize,
    /// Present when forward products are computed in 8-bit integers (inference with
    /// `--quantize=int8`): the quantized copies of the column blocks used so far.
    int8: Option<Int8Blocks>,
    /// Products of at most `few_rows::MAX_ROWS` rows read the packed Wᵀ (`packed`) in place
    /// (`few_rows`) instead of going through the GEMM (looped recurrent computation).
    few_rows: bool,
}

/// Copies of the column blocks `(c0, width)` of W in a product layout: the whole of W for an
/// affine layer, one block per time offset for a Tdnn.
struct Blocks<T> {
    blocks: Mutex<Vec<(usize, usize, Arc<T>)>>,
}

impl<T> Default for Blocks<T> {
    fn default() -> Self {
        Blocks {
            blocks: Mutex::new(Vec::new()),
        }
    }
}

impl<T> Blocks<T> {
    /// The copy of block (c0, width), made by `make` from W's columns if not there yet.
    fn get_or_make(
        &self,
        w: &Matrix,
        c0: usize,
        width: usize,
        make: impl FnOnce(MatView<'_>) -> T,
    ) -> Arc<T> {
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, b)) = blocks.iter().find(|b| b.0 == c0 && b.1 == width) {
            return b.clone();
        }
        let b = Arc::new(make(w.view().cols_range(c0, width)));
        blocks.push((c0, width, b.clone()));
        b
    }

    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn is_empty(&self) -> bool {
        self.blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    fn clear(&mut self) {
        self.blocks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// The quantized column blocks of W (each block with its own row scales).
#[derive(Default)]
struct Int8Blocks {
    blocks: Blocks<PackedWeights>,
}

impl Int8Blocks {
    fn block(&self, w: &Matrix, c0: usize, width: usize) -> Arc<PackedWeights> {
        self.blocks.get_or_make(w, c0, width, PackedWeights::new)
    }

    fn copy(&self) -> Self {
        let blocks = self.blocks.blocks.lock().unwrap_or_else(|e| e.into_inner());
        Int8Blocks {
            blocks: Blocks {
                blocks: Mutex::new(blocks.clone()),
            },
        }
    }
}

/// Wᵀ row-major: element (k, j) = W[j, k] at `k * stride + j`, `stride` = out rounded up.
struct Transposed {
    data: Vec<Real>,
    stride: usize,
}

impl WeightMatrix {
    /// Wraps a weight matrix.
    pub fn new(w: Matrix) -> Self {
        WeightMatrix {
            w,
            transposed: OnceLock::new(),
            #[cfg(target_arch = "x86_64")]
            packed: Blocks::default(),
            uses: AtomicUsize::new(0),
            int8: None,
            few_rows: false,
        }
    }

    /// Turns the few-rows product on or off: on x86-64 with AVX2 and FMA, products of at
    /// most 8 rows then read the native GEMM's packed Wᵀ in place (built at the first one,
    /// and shared with the larger products) instead of the GEMM packing W on every call. Other summation order than the GEMM's, so only where outputs need not
    /// match the default path's bits (looped computation of a recurrent network).
    pub fn set_few_rows(&mut self, on: bool) {
        self.few_rows = on;
    }

    /// Turns 8-bit integer forward products on or off (`compute --quantize=int8`). On
    /// quantizes W per output row at once; the column blocks a Tdnn uses are quantized at
    /// their first product. The backward product and the parameters stay in floats; a
    /// mutation of W re-quantizes it.
    pub fn set_int8(&mut self, on: bool) {
        self.int8 = on.then(Int8Blocks::default);
        if let Some(b) = &self.int8 {
            if self.w.num_cols() <= int8::MAX_COLS && self.w.num_rows() > 0 {
                b.block(&self.w, 0, self.w.num_cols());
            }
        }
    }

    /// Whether forward products are computed in 8-bit integers.
    pub fn is_int8(&self) -> bool {
        self.int8.is_some()
    }

    fn transposed(&self) -> &Transposed {
        self.transposed.get_or_init(|| {
            let (out, inp) = (self.w.num_rows(), self.w.num_cols());
            let stride = out.div_ceil(PAD) * PAD;
            let mut data = vec![0.0; inp * stride];
            // The tiled transpose: an element-at-a-time one was 4 % of a TDNN-LSTM decode.
            MatViewMut::from_slice_strided(&mut data, inp, out, stride)
                .copy_from_trans(self.w.view());
            Transposed { data, stride }
        })
    }

    /// `y = alpha · x · Wᵀ + beta · y` (with `beta == 0` the old `y` is never read).
    ///
    /// # Panics
    /// If the shapes do not agree (a programming error, not an input error).
    pub fn forward(&self, alpha: Real, x: MatView<'_>, y: &mut MatViewMut<'_>, beta: Real) {
        assert_eq!(x.num_cols(), self.w.num_cols(), "WeightMatrix::forward");
        self.forward_cols(alpha, x, y, beta, 0);
    }

    /// As [`forward`](Self::forward) with the column block of W that starts at column `c0`
    /// and is `x.num_cols()` wide (a TDNN's weights for one time offset).
    ///
    /// # Panics
    /// If the shapes do not agree (a programming error, not an input error).
    pub fn forward_cols(
        &self,
        alpha: Real,
        x: MatView<'_>,
        y: &mut MatViewMut<'_>,
        beta: Real,
        c0: usize,
    ) {
        let (out, inp, rows) = (self.w.num_rows(), x.num_cols(), x.num_rows());
        assert!(
            c0 + inp <= self.w.num_cols() && y.num_rows() == rows && y.num_cols() == out,
            "WeightMatrix::forward_cols: {rows}x{inp} · (columns {c0}.. of {out}x{})ᵀ into {}x{}",
            self.w.num_cols(),
            y.num_rows(),
            y.num_cols()
        );
        if let Some(packed) = self.int8_block(c0, inp, rows) {
            int8::forward(&packed, alpha, x, y, beta);
            super::check::check_finite("WeightMatrix::forward (int8)", y.as_view());
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.few_rows
            && rows <= few_rows::MAX_ROWS
            && rows > 0
            && inp > 0
            && out > 0
            && !y.place.on_device()
            && few_rows::available()
        {
            // The GEMM's packed Wᵀ block, whose panels the few-row product streams.
            let packed = self.packed.get_or_make(&self.w, c0, inp, pack_wt);
            let (x_stride, y_stride) = (x.stride(), y.stride());
            few_rows::few_rows_product(&mut few_rows::FewRows {
                y: y.as_mut_slice(),
                y_stride,
                x: x.as_slice(),
                x_stride,
                rows,
                k: inp,
                out,
                w: packed.panels(),
                alpha,
                beta,
            });
            super::check::check_finite("WeightMatrix::forward (few rows)", y.as_view());
            return;
        }
        let native = super::gemm::gemm_backend() == super::gemm::GemmBackend::NativeAvx2;
        #[cfg(target_arch = "x86_64")]
        let built = if native {
            !self.packed.is_empty()
        } else {
            self.transposed.get().is_some()
        };
        #[cfg(not(target_arch = "x86_64"))]
        let built = self.transposed.get().is_some();
        let fresh = !built && self.uses.fetch_add(1, Ordering::Relaxed) < USES_BEFORE_COPY;
        #[cfg(target_arch = "x86_64")]
        if native
            && !fresh
            && rows > 0
            && inp > 0
            && out > 0
            && alpha != 0.0
            && !y.place.on_device()
        {
            let packed = self.packed.get_or_make(&self.w, c0, inp, pack_wt);
            super::gemm::add_mat_packed(y, alpha, x, &packed, beta);
            return;
        }
        // OpenBLAS reads X·Wᵀ with W in place as fast as through a copy.
        let fresh =
            fresh || native || super::gemm::gemm_backend() == super::gemm::GemmBackend::OpenBlas;
        // On a GPU the plain product (cuBLAS) is the fast one.
        if fresh || rows < MIN_ROWS || inp == 0 || out == 0 || alpha == 0.0 || y.place.on_device() {
            let w = self.w.view().cols_range(c0, inp);
            y.add_mat_mat(alpha, x, super::Trans::No, w, super::Trans::Yes, beta);
            return;
        }
        let t = self.transposed();
        product_into_rows(y, &t.data[c0 * t.stride..], t.stride, x, alpha, beta);
        super::check::check_finite("WeightMatrix::forward", y.as_view());
    }
}

impl WeightMatrix {
    /// The quantized column block `c0..c0 + inp` when forward products are in 8-bit integers
    /// and the product has something to compute.
    fn int8_block(&self, c0: usize, inp: usize, rows: usize) -> Option<Arc<PackedWeights>> {
        let b = self.int8.as_ref()?;
        (rows > 0 && inp > 0 && self.w.num_rows() > 0 && inp <= int8::MAX_COLS)
            .then(|| b.block(&self.w, c0, inp))
    }

    /// `y = x · Wᵀ + bias` in every row (an affine layer's forward pass). In 8-bit integers
    /// the bias is added in the pass that scales the sums back (same floats, one pass fewer).
    ///
    /// # Panics
    /// If the shapes do not agree (a programming error, not an input error).
    pub fn forward_affine(&self, x: MatView<'_>, y: &mut MatViewMut<'_>, bias: &super::Vector) {
        if !self.forward_affine_int8(x, y, bias, false) {
            self.forward(1.0, x, y, 0.0);
            y.add_vec_to_rows(1.0, bias, 1.0);
        }
    }

    /// [`Self::forward_affine`] followed by a ReLU of `y`, in one pass where the products are
    /// in 8-bit integers (the same floats as the two steps): returns false, having done
    /// nothing, in floats (where the two steps are the caller's).
    ///
    /// # Panics
    /// If the shapes do not agree (a programming error, not an input error).
    pub fn forward_affine_relu(
        &self,
        x: MatView<'_>,
        y: &mut MatViewMut<'_>,
        bias: &super::Vector,
    ) -> bool {
        self.forward_affine_int8(x, y, bias, true)
    }

    /// The affine product (and with `relu` the ReLU after it) in 8-bit integers, where the
    /// weights have an int8 copy; false, having done nothing, otherwise.
    fn forward_affine_int8(
        &self,
        x: MatView<'_>,
        y: &mut MatViewMut<'_>,
        bias: &super::Vector,
        relu: bool,
    ) -> bool {
        assert_eq!(
            x.num_cols(),
            self.w.num_cols(),
            "WeightMatrix::forward_affine"
        );
        let Some(packed) = self.int8_block(0, x.num_cols(), x.num_rows()) else {
            return false;
        };
        assert_eq!(y.num_rows(), x.num_rows(), "WeightMatrix::forward_affine");
        int8::forward_bias(&packed, x, y, bias.as_row().row(0), relu);
        super::check::check_finite("WeightMatrix::forward (int8)", y.as_view());
        true
    }

    /// `dx = alpha · dy · W + beta · dx` (dy: rows × out, dx: rows × in; an affine layer's
    /// input derivative). W row-major is Wᵀ column-major, the layout in which the kernel
    /// reads the left operand of dxᵀ = Wᵀ·dyᵀ in place, so W is not repacked per product
    /// (a recurrent layer's backward pass makes one product per time step).
    ///
    /// # Panics
    /// If the shapes do not agree (a programming error, not an input error).
    pub fn backward(&self, alpha: Real, dy: MatView<'_>, dx: &mut MatViewMut<'_>, beta: Real) {
        let (out, inp, rows) = (self.w.num_rows(), self.w.num_cols(), dy.num_rows());
        assert!(
            dy.num_cols() == out && dx.num_rows() == rows && dx.num_cols() == inp,
            "WeightMatrix::backward: {rows}x{} · {out}x{inp} into {}x{}",
            dy.num_cols(),
            dx.num_rows(),
            dx.num_cols()
        );
        if rows == 0
            || rows > BACKWARD_MAX_ROWS
            || super::gemm::gemm_backend() != super::gemm::GemmBackend::GemmCrate
            || inp == 0
            || out == 0
            || alpha == 0.0
            || dx.place.on_device()
        {
            dx.add_mat_mat(
                alpha,
                dy,
                super::Trans::No,
                self.w.view(),
                super::Trans::No,
                beta,
            );
            return;
        }
        product_into_rows(
            dx,
            self.w.view().as_slice(),
            self.w.stride(),
            dy,
            alpha,
            beta,
        );
        super::check::check_finite("WeightMatrix::backward", dx.as_view());
    }
}

/// `w`'s columns (in × out of them, W being out × in) as the packed right operand Wᵀ of the
/// native kernel.
#[cfg(target_arch = "x86_64")]
fn pack_wt(w: MatView<'_>) -> super::sgemm::PackedB {
    let b = super::sgemm::Strided {
        data: w.as_slice(),
        rs: 1,
        cs: w.stride(),
    };
    super::sgemm::PackedB::new(w.num_cols(), w.num_rows(), b)
}

/// `dst = alpha · rhs · lhsᵀ + beta · dst` with `lhs` an m × k matrix stored column-major
/// (column c at `c · lhs_cs`), m = dst's columns, k = rhs's columns: the GEMM kernel reads a
/// column-major left operand in place and writes dstᵀ column-major, which is dst row-major,
/// so neither W layout (the transposed copy, or W itself for the input derivative) is
/// repacked. With `beta == 0` dst is never read.
///
/// # Panics
/// If `lhs` is too short for m × k at stride `lhs_cs`, or dst and rhs have different rows.
fn product_into_rows(
    dst: &mut MatViewMut<'_>,
    lhs: &[Real],
    lhs_cs: usize,
    rhs: MatView<'_>,
    alpha: Real,
    beta: Real,
) {
    let (m, n, k) = (dst.num_cols(), dst.num_rows(), rhs.num_cols());
    assert!(
        rhs.num_rows() == n && m <= lhs_cs && (k == 0 || (k - 1) * lhs_cs + m <= lhs.len()),
        "product_into_rows: shapes"
    );
    let parallelism = super::gemm::parallelism_for(m, n, k);
    let (rhs_rs, dst_rs) = (rhs.stride() as isize, dst.stride() as isize);
    let rp = rhs.as_slice().as_ptr();
    let dp = dst.as_mut_slice().as_mut_ptr();
    // SAFETY: the product is m × n × k. The destination dstᵀ (m × n) is addressed
    // column-major in `dst`: element (j, r) at r·dst_rs + j, inside dst's n × m view. The left
    // operand (m × k, column-major) addresses (j, c) at c·lhs_cs + j < (k − 1)·lhs_cs + m ≤
    // lhs.len() (checked above). The right operand rhsᵀ (k × n) addresses (c, r) at
    // r·rhs_rs + c inside rhs's n × k view. `dst` is a unique borrow, so it overlaps neither
    // input; with read_dst = false gemm never reads it.
    unsafe {
        super::gemm::strided_gemm(
            [m, n, k],
            super::gemm::Operand::new(dp, dst_rs, 1),
            super::gemm::Operand::new(lhs.as_ptr(), lhs_cs as isize, 1),
            super::gemm::Operand::new(rp, rhs_rs, 1),
            alpha,
            beta,
            parallelism,
        );
    }
}

impl From<Matrix> for WeightMatrix {
    fn from(w: Matrix) -> Self {
        WeightMatrix::new(w)
    }
}

impl Deref for WeightMatrix {
    type Target = Matrix;
    fn deref(&self) -> &Matrix {
        &self.w
    }
}

impl DerefMut for WeightMatrix {
    /// Mutable access: the transposed copy no longer matches, so it is dropped.
    fn deref_mut(&mut self) -> &mut Matrix {
        self.transposed = OnceLock::new();
        #[cfg(target_arch = "x86_64")]
        self.packed.clear();
        *self.uses.get_mut() = 0;
        if let Some(b) = &mut self.int8 {
            b.blocks.clear();
        }
        &mut self.w
    }
}

impl Clone for WeightMatrix {
    fn clone(&self) -> Self {
        let mut c = WeightMatrix::new(self.w.clone());
        c.int8 = self.int8.as_ref().map(Int8Blocks::copy);
        c.few_rows = self.few_rows;
        c
    }
}

impl std::fmt::Debug for WeightMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.w.fmt(f)
    }
}

impl PartialEq for WeightMatrix {
    fn eq(&self, o: &Self) -> bool {
        self.w == o.w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Trans;

    fn native() -> bool {
        crate::matrix::gemm::gemm_backend() == crate::matrix::GemmBackend::NativeAvx2
    }

    fn pseudo(rows: usize, cols: usize, seed: usize) -> Matrix {
        let mut m = Matrix::zeros(rows, cols);
        for r in 0..rows {
            for (c, v) in m.row_mut(r).iter_mut().enumerate() {
                *v = (((r * 31 + c * 17 + seed * 7) % 23) as Real - 11.0) / 7.0;
            }
        }
        m
    }

    /// With the few-row product on, products of up to 8 rows read the GEMM's packed Wᵀ
    /// (two k-blocks at 600 columns, 300 for the second column block of a TDNN) and give the
    /// bits of the per-output fused multiply-add sum in column order; larger products share
    /// the same packed copy and keep the GEMM's bits; no transposed copy is made.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn few_row_products_read_the_packed_weights() {
        if !few_rows::available() {
            return;
        }
        let (inp, out) = (600, 41);
        let mut w = WeightMatrix::new(pseudo(out, inp, 2));
        w.set_few_rows(true);
        for (rows, c0, width) in [
            (1, 0, inp),
            (4, 0, inp),
            (8, 0, inp),
            (3, 300, 300),
            (5, 0, 300),
        ] {
            let wb = w.view().cols_range(c0, width).to_matrix();
            let x = pseudo(rows, width, 1);
            for (alpha, beta) in [(1.0, 0.0), (0.5, 1.0)] {
                let mut want = pseudo(rows, out, 3);
                let mut got = want.clone();
                few_rows::tests::reference(
                    x.view().as_slice(),
                    wb.view().as_slice(),
                    want.view_mut().as_mut_slice(),
                    [rows, width, out],
                    alpha,
                    beta,
                );
                w.forward_cols(alpha, x.view(), &mut got.view_mut(), beta, c0);
                assert_eq!(got, want, "{rows} rows, columns {c0}+{width}");
            }
        }
        assert_eq!(w.packed.blocks.lock().unwrap().len(), 3);
        assert!(w.transposed.get().is_none());
        if native() {
            let x = pseudo(20, inp, 4);
            let mut want = Matrix::zeros(20, out);
            want.view_mut()
                .add_mat_mat(1.0, x.view(), Trans::No, w.view(), Trans::Yes, 0.0);
            let mut got = Matrix::zeros(20, out);
            w.forward(1.0, x.view(), &mut got.view_mut(), 0.0);
            assert_eq!(got, want);
            assert_eq!(w.packed.blocks.lock().unwrap().len(), 3);
        }
    }

    /// Same values as the plain product (to rounding), for row counts below and above
    /// MIN_ROWS, output dims off the padding, beta 0 and not, and after a mutation.
    #[test]
    fn forward_matches_plain_product() {
        for &(rows, inp, out) in &[(3, 5, 7), (8, 33, 17), (70, 64, 650), (21, 100, 16)] {
            let x = pseudo(rows, inp, 1);
            let mut w = WeightMatrix::new(pseudo(out, inp, 2));
            for round in 0..2 {
                // Enough products with the same weights that the transposed copy is used.
                for &(alpha, beta) in [(1.0, 0.0), (0.5, 1.0), (2.0, -0.5)]
                    .iter()
                    .cycle()
                    .take(3 * USES_BEFORE_COPY)
                {
                    let mut want = pseudo(rows, out, 3);
                    want.view_mut().add_mat_mat(
                        alpha,
                        x.view(),
                        Trans::No,
                        w.view(),
                        Trans::Yes,
                        beta,
                    );
                    let mut got = pseudo(rows, out, 3);
                    w.forward(alpha, x.view(), &mut got.view_mut(), beta);
                    for r in 0..rows {
                        for c in 0..out {
                            let (a, b) = (want.row(r)[c], got.row(r)[c]);
                            assert!(
                                (a - b).abs() <= 1e-4 * (1.0 + a.abs()),
                                "{rows}x{inp}->{out} round {round} ({r},{c}): {a} vs {b}"
                            );
                            // The native kernel's packed Wᵀ gives the plain product's bits.
                            assert!(!native() || a.to_bits() == b.to_bits(), "bits: {a} vs {b}");
                        }
                    }
                }
                // Column blocks (a TDNN offset's weights) of the same W.
                if inp % 2 == 0 && inp >= 2 {
                    let half = inp / 2;
                    let xh = pseudo(rows, half, 4);
                    let mut want = pseudo(rows, out, 5);
                    let wh = w.view().cols_range(half, half);
                    want.view_mut()
                        .add_mat_mat(1.0, xh.view(), Trans::No, wh, Trans::Yes, 1.0);
                    let mut got = pseudo(rows, out, 5);
                    w.forward_cols(1.0, xh.view(), &mut got.view_mut(), 1.0, half);
                    for r in 0..rows {
                        for c in 0..out {
                            let (a, b) = (want.row(r)[c], got.row(r)[c]);
                            assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "cols: {a} vs {b}");
                            assert!(!native() || a.to_bits() == b.to_bits(), "bits: {a} vs {b}");
                        }
                    }
                }
                if native() {
                    // The packed Wᵀ (whole, and the second column block) is in use.
                    #[cfg(target_arch = "x86_64")]
                    assert_eq!(
                        w.packed.blocks.lock().unwrap().len(),
                        1 + (inp % 2 == 0) as usize
                    );
                    assert!(w.transposed.get().is_none());
                } else {
                    assert_eq!(w.transposed.get().is_some(), rows >= MIN_ROWS);
                }
                // A mutation must drop the copies.
                w.row_mut(0)[0] += 1.0;
                assert!(w.transposed.get().is_none());
                #[cfg(target_arch = "x86_64")]
                assert!(w.packed.is_empty());
            }
        }
    }
}
