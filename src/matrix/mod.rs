//! The matrix backend: the one boundary behind which every numeric kernel lives.
//!
//! Components, the compiler and the runtime only ever call the methods defined in this module
//! (in the spirit of Kaldi's `CuMatrix` interface); none of them touches raw element loops of
//! their own. Matrices are f32, row-major with a row stride, in host memory; a build with the
//! `cuda` feature can keep them in CUDA managed memory instead (`device`, `buf`, `cuda`),
//! behind the same methods, without touching components or the compiler.
//!
//! Types:
//! * [`Matrix`] owns its data (rows × cols, row stride ≥ cols).
//! * [`MatView`] / [`MatViewMut`] are O(1) sub-matrix views by row and column range.
//! * [`Vector`] owns a contiguous f32 vector.
//! * [`WeightMatrix`] is a Matrix of layer weights that keeps a transposed copy for the fast
//!   inference product.

mod attention;
mod attention_backprop;
mod blocks;
mod buf;
pub mod check;
mod cu_compressed;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
mod cuda_buf;
#[cfg(feature = "cuda")]
mod cuda_ops;
#[cfg(feature = "cuda")]
mod cuda_profile;
pub mod device;
mod eigen;
mod elementwise;
mod few_rows;
mod gemm;
mod gru;
pub mod int8;
mod lstm;
mod normalize;
#[cfg(feature = "openblas")]
mod openblas;
mod ops;
mod parallel;
mod patches;
mod pooling;
mod precise;
mod random;
mod rows;
#[cfg(target_arch = "x86_64")]
mod sgemm;
mod simd;
mod stats;
mod unfold;
mod vector;
mod vector64;
mod vector_params;
mod weights;

use buf::{on_device, Buf, Place};
pub use cu_compressed::{CompressionKind, CuCompressedMatrix};
pub use eigen::{symmetric_eigen, SymmetricEigen};
pub use gemm::{
    gemm_backend, gemm_backend_name, num_threads, set_num_threads, GemmBackend, GEMM_ENV,
};
pub use gru::backprop_gru_cell;
pub use lstm::{
    backprop_lstm_nonlinearity, lstm_self_repair_scales, LstmBackpropInput, LstmStatsSums,
};
pub use normalize::NORMALIZE_SQUARED_NORM_FLOOR;
pub use pooling::PoolingOptions;
pub use precise::{gram_f64_of, row_combination_f64_of};
pub use stats::{
    batch_norm_backprop_coefficients, batch_norm_invented_stats, batch_norm_mean_var,
    batch_norm_scale, batch_norm_test_transform,
};
pub use vector64::Vector64;
pub use weights::WeightMatrix;

/// `Σ_i a[i] · b[i]` over the common length (eight partial sums, so it vectorises).
#[inline]
pub fn dot(a: &[Real], b: &[Real]) -> Real {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0 as Real; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: Real = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// The element type of every matrix and vector.
pub type Real = f32;

/// Whether an operand of a matrix product is transposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trans {
    /// Use the operand as it is.
    No,
    /// Use the operand's transpose.
    Yes,
}

/// An owned dense matrix, f32, row-major with a row stride.
#[derive(Default)]
pub struct Matrix {
    data: Buf<Real>,
    rows: usize,
    cols: usize,
    stride: usize,
    /// How many elements of the buffer hold floats written earlier (≥ `data.len()`, ≤ its
    /// capacity): [`Matrix::resize_undefined`] grows within them without writing zeros.
    filled: usize,
}

impl Clone for Matrix {
    fn clone(&self) -> Self {
        let data = self.data.clone();
        Matrix {
            filled: data.len(),
            data,
            rows: self.rows,
            cols: self.cols,
            stride: self.stride,
        }
    }
}

impl PartialEq for Matrix {
    /// Same shape and elements (whatever the buffers hold beyond them).
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data
            && self.rows == other.rows
            && self.cols == other.cols
            && self.stride == other.stride
    }
}

/// A read-only view of (part of) a matrix.
#[derive(Clone, Copy)]
pub struct MatView<'a> {
    /// The elements; host code reads them through `host` (which waits for queued GPU work).
    elems: &'a [Real],
    place: Place,
    rows: usize,
    cols: usize,
    stride: usize,
}

/// A mutable view of (part of) a matrix.
pub struct MatViewMut<'a> {
    /// The elements; host code reaches them through `host` / `host_mut`.
    elems: &'a mut [Real],
    place: Place,
    rows: usize,
    cols: usize,
    stride: usize,
}

/// An owned f32 vector.
#[derive(Clone, Default, PartialEq)]
pub struct Vector {
    data: Buf<Real>,
}

/// Length of the backing slice a (rows, cols, stride) view needs.
#[inline]
fn span(rows: usize, cols: usize, stride: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * stride + cols
    }
}

impl std::fmt::Debug for Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.view().fmt(f)
    }
}

impl std::fmt::Debug for MatView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "Matrix {}x{} [", self.rows, self.cols)?;
        for r in 0..self.rows.min(8) {
            writeln!(f, "  {:?}", &self.row(r)[..self.cols.min(10)])?;
        }
        write!(f, "]")
    }
}

impl std::fmt::Debug for Vector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vector{:?}", &self.data[..])
    }
}

/// `num_rows`, `num_cols` and `stride` of the three matrix forms (they share the fields);
/// with `mut`, also element access `get` and `set` (the owned and the mutable form).
macro_rules! shape_accessors {
    (mut) => {
        shape_accessors!();
        /// Element (r, c).
        pub fn get(&self, r: usize, c: usize) -> Real {
            self.host()[r * self.stride + c]
        }
        /// Sets element (r, c).
        pub fn set(&mut self, r: usize, c: usize, v: Real) {
            let i = r * self.stride + c;
            self.host_mut()[i] = v;
        }
    };
    () => {
        /// Number of rows.
        pub fn num_rows(&self) -> usize {
            self.rows
        }
        /// Number of columns.
        pub fn num_cols(&self) -> usize {
            self.cols
        }
        /// Distance between the starts of consecutive rows, in elements.
        pub fn stride(&self) -> usize {
            self.stride
        }
    };
}

impl Matrix {
    /// The elements for host code (the storage's dereference waits for queued GPU work).
    fn host(&self) -> &[Real] {
        &self.data
    }
    /// As `host`, mutable.
    fn host_mut(&mut self) -> &mut [Real] {
        &mut self.data
    }
    /// A zero matrix.
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Matrix {
            data: buf::zeroed(rows * cols),
            rows,
            cols,
            stride: cols,
            filled: rows * cols,
        }
    }
    /// A matrix from row-major data of length rows × cols.
    pub fn from_vec(rows: usize, cols: usize, data: Vec<Real>) -> Self {
        assert_eq!(
            data.len(),
            rows * cols,
            "Matrix::from_vec: wrong data length"
        );
        let filled = data.len();
        Matrix {
            data: buf::from_vec(data),
            rows,
            cols,
            stride: cols,
            filled,
        }
    }
    /// A matrix from equal-length rows.
    pub fn from_rows(rows: &[Vec<Real>]) -> Self {
        let cols = rows.first().map_or(0, |r| r.len());
        let mut data = Vec::with_capacity(rows.len() * cols);
        for r in rows {
            assert_eq!(r.len(), cols, "Matrix::from_rows: ragged rows");
            data.extend_from_slice(r);
        }
        Matrix::from_vec(rows.len(), cols, data)
    }
    shape_accessors!(mut);
    /// Elements the matrix can hold without reallocating (see [`Matrix::resize`]).
    pub fn capacity(&self) -> usize {
        self.data.capacity()
    }
    /// Changes the size; the contents are unspecified (whatever the buffer held, zero where
    /// it grows past what it ever held), for a matrix that is about to be overwritten. A
    /// buffer reused for a smaller matrix and then a larger one writes nothing: in chunked
    /// inference the pooled buffers change sizes every computation, and zeroing the growth
    /// was 1.3 % of an int8 wsj run.
    pub fn resize_undefined(&mut self, rows: usize, cols: usize) {
        let n = rows * cols;
        if self.data.len() >= n {
            self.data.truncate(n);
        } else if n <= self.filled {
            #[cfg(not(feature = "cuda"))]
            // SAFETY: `filled` ≤ capacity, and elements below it were written before (a
            // truncation leaves floats in place; every reallocation resets `filled`).
            unsafe {
                self.data.set_len(n)
            };
            #[cfg(feature = "cuda")]
            self.data.grow_within(n);
        } else {
            self.data.resize(n, 0.0);
        }
        self.filled = self.filled.max(self.data.len());
        self.rows = rows;
        self.cols = cols;
        self.stride = cols;
    }
    /// How many elements [`Self::resize_undefined`] can make without writing any.
    pub fn reusable_len(&self) -> usize {
        self.filled
    }
    /// Changes the size; contents become zero.
    pub fn resize(&mut self, rows: usize, cols: usize) {
        self.data.clear();
        let cap = self.data.capacity();
        self.data.resize(rows * cols, 0.0);
        // A reallocation keeps only the elements written now.
        self.filled = if self.data.capacity() == cap {
            self.filled.max(self.data.len())
        } else {
            self.data.len()
        };
        self.rows = rows;
        self.cols = cols;
        self.stride = cols;
    }
    /// True when the elements live on the GPU (always false without the `cuda` feature).
    pub fn is_on_device(&self) -> bool {
        Place::of(&self.data).on_device()
    }
    /// The whole matrix as a view.
    pub fn view(&self) -> MatView<'_> {
        MatView {
            elems: &buf::lazy(&self.data)[..span(self.rows, self.cols, self.stride)],
            place: Place::of(&self.data),
            rows: self.rows,
            cols: self.cols,
            stride: self.stride,
        }
    }
    /// The whole matrix as a mutable view.
    pub fn view_mut(&mut self) -> MatViewMut<'_> {
        let n = span(self.rows, self.cols, self.stride);
        let place = Place::of(&self.data);
        MatViewMut {
            elems: &mut buf::lazy_mut(&mut self.data)[..n],
            place,
            rows: self.rows,
            cols: self.cols,
            stride: self.stride,
        }
    }
    /// Rows `[r0, r0+nr)` and columns `[c0, c0+nc)`.
    pub fn sub(&self, r0: usize, nr: usize, c0: usize, nc: usize) -> MatView<'_> {
        self.view().sub(r0, nr, c0, nc)
    }
    /// Mutable rows `[r0, r0+nr)` and columns `[c0, c0+nc)`.
    pub fn sub_mut(&mut self, r0: usize, nr: usize, c0: usize, nc: usize) -> MatViewMut<'_> {
        self.view_mut().into_sub(r0, nr, c0, nc)
    }
    /// Row `r` (num_cols elements).
    ///
    /// Storage access, private to src/matrix: code outside `matrix/`
    /// calls the named operations (a second storage kind would have no host slice to lend).
    /// (Only the matrix module's own tests read a `Matrix` row directly now.)
    #[cfg(test)]
    pub(in crate::matrix) fn row(&self, r: usize) -> &[Real] {
        let s = r * self.stride;
        &self.data[s..s + self.cols]
    }
    /// Row `r`, mutable (the matrix module's own tests fill matrices through it).
    #[cfg(test)]
    pub(in crate::matrix) fn row_mut(&mut self, r: usize) -> &mut [Real] {
        let s = r * self.stride;
        &mut self.data[s..s + self.cols]
    }
    /// The transpose, as a new matrix.
    pub fn transposed(&self) -> Matrix {
        let mut t = Matrix::zeros(self.cols, self.rows);
        t.view_mut().copy_from_trans(self.view());
        t
    }
    /// Row-major copy of the elements (no stride gaps).
    pub fn to_vec(&self) -> Vec<Real> {
        self.view().to_vec()
    }
    /// A copy of row `r` (host copy: the I/O and test boundary).
    pub fn row_to_vec(&self, r: usize) -> Vec<Real> {
        self.view().row_to_vec(r)
    }
    /// Overwrites row `r` with `v` (length num_cols; host copy: the I/O and test boundary).
    pub fn copy_row_from_slice(&mut self, r: usize, v: &[Real]) {
        self.view_mut().copy_row_from_slice(r, v);
    }
}

impl<'a> MatView<'a> {
    /// A view of a contiguous row-major slice.
    pub fn from_slice(data: &'a [Real], rows: usize, cols: usize) -> Self {
        MatView::from_slice_strided(data, rows, cols, cols)
    }
    /// A view of a strided row-major slice.
    pub fn from_slice_strided(data: &'a [Real], rows: usize, cols: usize, stride: usize) -> Self {
        assert!(stride >= cols && data.len() >= span(rows, cols, stride));
        MatView {
            elems: &data[..span(rows, cols, stride)],
            place: Place::HOST,
            rows,
            cols,
            stride,
        }
    }
    shape_accessors!();
    /// The backing slice (length (rows-1)·stride + cols).
    ///
    /// Storage access, private to src/matrix: code outside `matrix/`
    /// calls the named operations (a second storage kind would have no host slice to lend).
    pub(in crate::matrix) fn as_slice(&self) -> &'a [Real] {
        self.host()
    }
    /// The elements for host code, once queued GPU work on them is done.
    #[inline(always)]
    fn host(&self) -> &'a [Real] {
        self.place.settle();
        self.elems
    }
    /// Row `r` (num_cols elements).
    ///
    /// Storage access, private to src/matrix: code outside `matrix/`
    /// calls the named operations (a second storage kind would have no host slice to lend).
    pub(in crate::matrix) fn row(&self, r: usize) -> &'a [Real] {
        debug_assert!(r < self.rows);
        if self.cols == 0 {
            return &[]; // a zero-width view has an empty backing slice
        }
        let s = r * self.stride;
        &self.host()[s..s + self.cols]
    }
    /// Element (r, c).
    pub fn get(&self, r: usize, c: usize) -> Real {
        debug_assert!(r < self.rows && c < self.cols);
        self.host()[r * self.stride + c]
    }
    /// Rows `[r0, r0+nr)` and columns `[c0, c0+nc)` of this view.
    pub fn sub(&self, r0: usize, nr: usize, c0: usize, nc: usize) -> MatView<'a> {
        assert!(
            r0 + nr <= self.rows && c0 + nc <= self.cols,
            "sub-matrix out of range"
        );
        if nr == 0 || nc == 0 {
            return MatView {
                elems: &[],
                place: self.place,
                rows: nr,
                cols: nc,
                stride: self.stride,
            };
        }
        let s = r0 * self.stride + c0;
        MatView {
            elems: &self.elems[s..s + span(nr, nc, self.stride)],
            place: self.place,
            rows: nr,
            cols: nc,
            stride: self.stride,
        }
    }
    /// Rows `[r0, r0+nr)`, all columns.
    pub fn rows_range(&self, r0: usize, nr: usize) -> MatView<'a> {
        self.sub(r0, nr, 0, self.cols)
    }
    /// Columns `[c0, c0+nc)`, all rows.
    pub fn cols_range(&self, c0: usize, nc: usize) -> MatView<'a> {
        self.sub(0, self.rows, c0, nc)
    }
    /// An owned copy.
    pub fn to_matrix(&self) -> Matrix {
        on_device!(self.place.on_device() => {
            // A copy on the device, without the elements passing through the host.
            let mut m = Matrix::zeros(self.rows, self.cols);
            m.view_mut().copy_from(*self);
            m
        });
        Matrix::from_vec(self.rows, self.cols, self.to_vec())
    }
    /// Row-major copy of the elements.
    pub fn to_vec(&self) -> Vec<Real> {
        on_device!(self.place.on_device() => cuda_ops::download_view(*self));
        let mut v = Vec::with_capacity(self.rows * self.cols);
        for r in 0..self.rows {
            v.extend_from_slice(self.row(r));
        }
        v
    }
    /// A copy of row `r` (host copy: the I/O and test boundary).
    pub fn row_to_vec(&self, r: usize) -> Vec<Real> {
        assert!(r < self.rows, "row_to_vec: row {r} of {}", self.rows);
        self.row(r).to_vec()
    }
    /// Appends the elements, row-major, to `out` as little-endian bytes (Kaldi's binary
    /// float data): one pass, no intermediate copy (the output writer's 18 MB utterances
    /// went through a fresh row-major copy and a zero-filled buffer before).
    pub fn extend_le_bytes(&self, out: &mut Vec<u8>) {
        out.reserve(4 * self.rows * self.cols);
        for r in 0..self.rows {
            let row = self.row(r);
            if cfg!(target_endian = "little") {
                // SAFETY: a float slice read as its bytes (no padding, any bit pattern is a
                // valid u8); on a little-endian host those are the little-endian encodings.
                let bytes = unsafe {
                    std::slice::from_raw_parts(
                        row.as_ptr() as *const u8,
                        std::mem::size_of_val(row),
                    )
                };
                out.extend_from_slice(bytes);
            } else {
                for &x in row {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
    /// The elements as Kaldi's binary float data (little-endian bytes, row-major), in place:
    /// for a contiguous view in host memory on a little-endian host, else `None` (then
    /// [`Self::extend_le_bytes`] copies them).
    pub fn le_bytes(&self) -> Option<&'a [u8]> {
        if !cfg!(target_endian = "little") || !self.is_contiguous() || self.place.on_device() {
            return None;
        }
        let n = self.rows * self.cols;
        let data = if n == 0 { &[][..] } else { &self.elems[..n] };
        // SAFETY: a float slice read as its bytes (no padding, every byte initialised).
        Some(unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, 4 * n) })
    }
    /// True if rows follow each other without gaps.
    pub fn is_contiguous(&self) -> bool {
        self.stride == self.cols || self.rows <= 1
    }
}

impl<'a> MatViewMut<'a> {
    /// A mutable view of a contiguous row-major slice.
    pub fn from_slice(data: &'a mut [Real], rows: usize, cols: usize) -> Self {
        MatViewMut::from_slice_strided(data, rows, cols, cols)
    }
    /// A mutable view of a strided row-major slice.
    pub fn from_slice_strided(
        data: &'a mut [Real],
        rows: usize,
        cols: usize,
        stride: usize,
    ) -> Self {
        assert!(stride >= cols && data.len() >= span(rows, cols, stride));
        let n = span(rows, cols, stride);
        MatViewMut {
            elems: &mut data[..n],
            place: Place::HOST,
            rows,
            cols,
            stride,
        }
    }
    shape_accessors!(mut);
    /// A read-only view of the same elements.
    pub fn as_view(&self) -> MatView<'_> {
        MatView {
            elems: self.elems,
            place: self.place,
            rows: self.rows,
            cols: self.cols,
            stride: self.stride,
        }
    }
    /// A shorter-lived mutable view of the same elements (re-borrow).
    pub fn rb(&mut self) -> MatViewMut<'_> {
        MatViewMut {
            elems: self.elems,
            place: self.place,
            rows: self.rows,
            cols: self.cols,
            stride: self.stride,
        }
    }
    /// Row `r` (num_cols elements).
    ///
    /// Storage access, private to src/matrix: code outside `matrix/`
    /// calls the named operations (a second storage kind would have no host slice to lend).
    pub(in crate::matrix) fn row(&self, r: usize) -> &[Real] {
        if self.cols == 0 {
            return &[];
        }
        let s = r * self.stride;
        &self.host()[s..s + self.cols]
    }
    /// Row `r`, mutable.
    ///
    /// Storage access, private to src/matrix: code outside `matrix/`
    /// calls the named operations (a second storage kind would have no host slice to lend).
    pub(in crate::matrix) fn row_mut(&mut self, r: usize) -> &mut [Real] {
        debug_assert!(r < self.rows);
        if self.cols == 0 {
            return &mut [];
        }
        let (s, n) = (r * self.stride, self.cols);
        &mut self.host_mut()[s..s + n]
    }
    /// The elements for host code, once queued GPU work on them is done.
    #[inline(always)]
    fn host(&self) -> &[Real] {
        self.place.settle();
        self.elems
    }
    /// As `host`, mutable.
    #[inline(always)]
    fn host_mut(&mut self) -> &mut [Real] {
        self.place.settle();
        self.elems
    }
    /// The backing slice (length (rows-1)·stride + cols).
    ///
    /// Storage access, private to src/matrix: code outside `matrix/`
    /// calls the named operations (a second storage kind would have no host slice to lend).
    pub(in crate::matrix) fn as_mut_slice(&mut self) -> &mut [Real] {
        self.host_mut()
    }
    /// Overwrites row `r` with `v` (length num_cols; host copy: the I/O and test boundary).
    pub fn copy_row_from_slice(&mut self, r: usize, v: &[Real]) {
        assert!(
            r < self.rows,
            "copy_row_from_slice: row {r} of {}",
            self.rows
        );
        assert_eq!(v.len(), self.cols, "copy_row_from_slice: dim");
        self.row_mut(r).copy_from_slice(v);
    }
    /// Mutable sub-view (borrowing this view).
    pub fn sub_mut(&mut self, r0: usize, nr: usize, c0: usize, nc: usize) -> MatViewMut<'_> {
        self.rb().into_sub(r0, nr, c0, nc)
    }
    /// Mutable sub-view, consuming this view.
    pub fn into_sub(self, r0: usize, nr: usize, c0: usize, nc: usize) -> MatViewMut<'a> {
        assert!(
            r0 + nr <= self.rows && c0 + nc <= self.cols,
            "sub-matrix out of range"
        );
        let stride = self.stride;
        if nr == 0 || nc == 0 {
            return MatViewMut {
                elems: &mut [],
                place: self.place,
                rows: nr,
                cols: nc,
                stride,
            };
        }
        let s = r0 * stride + c0;
        MatViewMut {
            elems: &mut self.elems[s..s + span(nr, nc, stride)],
            place: self.place,
            rows: nr,
            cols: nc,
            stride,
        }
    }
    /// Mutable rows `[r0, r0+nr)`.
    pub fn rows_range_mut(&mut self, r0: usize, nr: usize) -> MatViewMut<'_> {
        let c = self.cols;
        self.sub_mut(r0, nr, 0, c)
    }
    /// Mutable columns `[c0, c0+nc)`.
    pub fn cols_range_mut(&mut self, c0: usize, nc: usize) -> MatViewMut<'_> {
        let r = self.rows;
        self.sub_mut(0, r, c0, nc)
    }
    /// Splits the rows at `r`, giving two disjoint mutable views.
    pub fn split_rows_at(self, r: usize) -> (MatViewMut<'a>, MatViewMut<'a>) {
        assert!(r <= self.rows);
        let (rows, cols, stride, place) = (self.rows, self.cols, self.stride, self.place);
        // An empty side gets no data; otherwise the top ends after its last element.
        let (a, b) = if r == 0 || r == rows || cols == 0 {
            let n = self.elems.len();
            self.elems.split_at_mut(if r == 0 { 0 } else { n })
        } else {
            let (a, b) = self.elems.split_at_mut(r * stride);
            (&mut a[..span(r, cols, stride)], b)
        };
        (
            MatViewMut {
                elems: a,
                place,
                rows: r,
                cols,
                stride,
            },
            MatViewMut {
                elems: b,
                place,
                rows: rows - r,
                cols,
                stride,
            },
        )
    }
    /// Applies `f` to every element.
    ///
    /// Storage access, private to src/matrix: code outside `matrix/`
    /// calls the named operations (a second storage kind would have no host slice to lend).
    #[inline]
    pub(in crate::matrix) fn map_inplace(&mut self, f: impl Fn(Real) -> Real + Sync) {
        parallel::for_row_blocks(self.rb(), |_, mut dst| {
            for r in 0..dst.rows {
                for x in dst.row_mut(r) {
                    *x = f(*x);
                }
            }
        });
    }
    /// `self[i,j] = f(self[i,j], a[i,j])` for every element.
    ///
    /// Storage access, private to src/matrix: code outside `matrix/`
    /// calls the named operations (a second storage kind would have no host slice to lend).
    #[inline]
    pub(in crate::matrix) fn zip_apply(
        &mut self,
        a: MatView<'_>,
        f: impl Fn(Real, Real) -> Real + Sync,
    ) {
        assert_eq!((self.rows, self.cols), (a.rows, a.cols), "zip_apply: shape");
        parallel::for_row_blocks(self.rb(), |first, mut dst| {
            for r in 0..dst.rows {
                let src = a.row(first + r);
                for (x, &y) in dst.row_mut(r).iter_mut().zip(src) {
                    *x = f(*x, y);
                }
            }
        });
    }
    /// `self[i,j] = f(self[i,j], a[i,j], b[i,j])` for every element.
    ///
    /// Storage access, private to src/matrix: code outside `matrix/`
    /// calls the named operations (a second storage kind would have no host slice to lend).
    #[inline]
    pub(in crate::matrix) fn zip2_apply(
        &mut self,
        a: MatView<'_>,
        b: MatView<'_>,
        f: impl Fn(Real, Real, Real) -> Real + Sync,
    ) {
        assert_eq!(
            (self.rows, self.cols),
            (a.rows, a.cols),
            "zip2_apply: shape"
        );
        assert_eq!(
            (self.rows, self.cols),
            (b.rows, b.cols),
            "zip2_apply: shape"
        );
        parallel::for_row_blocks(self.rb(), |first, mut dst| {
            for r in 0..dst.rows {
                let (ra, rb) = (a.row(first + r), b.row(first + r));
                for ((x, &y), &z) in dst.row_mut(r).iter_mut().zip(ra).zip(rb) {
                    *x = f(*x, y, z);
                }
            }
        });
    }
}

impl Vector {
    /// A zero vector.
    pub fn zeros(dim: usize) -> Self {
        Vector {
            data: buf::zeroed(dim),
        }
    }
    /// A vector owning `data`.
    pub fn from_vec(data: Vec<Real>) -> Self {
        Vector {
            data: buf::from_vec(data),
        }
    }
    /// Number of elements.
    pub fn dim(&self) -> usize {
        self.data.len()
    }
    /// The elements, mutable.
    ///
    /// Storage access, private to src/matrix: code outside `matrix/`
    /// calls the named operations (a second storage kind would have no host slice to lend).
    pub(in crate::matrix) fn as_mut_slice(&mut self) -> &mut [Real] {
        &mut self.data
    }
    /// A copy of the elements (host copy: the I/O and test boundary).
    pub fn to_vec(&self) -> Vec<Real> {
        on_device!(self.data.is_device() => cuda_ops::download_view(self.as_row()));
        self.data.to_vec()
    }
    /// The elements, by value.
    pub fn into_vec(self) -> Vec<Real> {
        buf::into_vec(self.data)
    }
    /// Changes the dimension; contents become zero.
    pub fn resize(&mut self, dim: usize) {
        self.data.clear();
        self.data.resize(dim, 0.0);
    }
    /// The vector as a 1 × dim matrix view.
    pub fn as_row(&self) -> MatView<'_> {
        MatView {
            elems: buf::lazy(&self.data),
            place: Place::of(&self.data),
            rows: 1,
            cols: self.data.len(),
            stride: self.data.len(),
        }
    }
    /// The vector as a mutable 1 × dim matrix view.
    pub fn as_row_mut(&mut self) -> MatViewMut<'_> {
        let n = self.data.len();
        let place = Place::of(&self.data);
        MatViewMut {
            elems: buf::lazy_mut(&mut self.data),
            place,
            rows: 1,
            cols: n,
            stride: n,
        }
    }
}

impl From<Vec<Real>> for Vector {
    fn from(v: Vec<Real>) -> Self {
        Vector::from_vec(v)
    }
}

/// A `rows × cols` matrix of deterministic values in [-2, 2) (a multiplicative hash of the
/// position and `seed`), for the kernels' tests.
#[cfg(test)]
pub(crate) fn pseudo_random(rows: usize, cols: usize, seed: u32) -> Matrix {
    let data = (0..rows * cols)
        .map(|k| (((k as u32 * 2654435761u32) ^ seed) % 1000) as f32 / 250.0 - 2.0)
        .collect();
    Matrix::from_vec(rows, cols, data)
}

#[cfg(test)]
mod resize_tests {
    use super::Matrix;

    /// A buffer reused for a smaller matrix and then a larger one gets its old floats back
    /// (nothing written, no reallocation); growing past what it ever held writes zeros; a
    /// clone can only reuse what it holds itself; equality ignores what lies beyond.
    #[test]
    fn resize_undefined_grows_into_what_the_buffer_held() {
        let mut m = Matrix::from_vec(4, 5, (0..20).map(|k| k as f32 + 1.0).collect());
        let cap = m.capacity();
        m.resize_undefined(1, 3);
        assert_eq!(m.reusable_len(), 20);
        let c = m.clone();
        m.resize_undefined(2, 10);
        assert_eq!(m.capacity(), cap);
        assert_eq!(
            m.to_vec(),
            (0..20).map(|k| k as f32 + 1.0).collect::<Vec<_>>()
        );
        // The clone held 3 elements: growing it writes zeros after them.
        let mut c2 = c.clone();
        c2.resize_undefined(3, 4);
        let v = c2.to_vec();
        assert_eq!(&v[..3], &[1.0, 2.0, 3.0]);
        assert!(v[3..].iter().all(|&x| x == 0.0), "{v:?}");
        // Equal contents, different histories.
        let mut a = Matrix::from_vec(1, 3, vec![1.0, 2.0, 3.0]);
        assert!(a == c);
        a.resize_undefined(2, 2);
        a.resize_undefined(1, 3);
        assert!(a == c);
        // Zeroing resize and growth past the capacity keep the bound honest.
        m.resize(2, 3);
        assert!(m.to_vec().iter().all(|&x| x == 0.0));
        m.resize_undefined(4, 5);
        assert_eq!(&m.to_vec()[..6], &[0.0; 6]);
        assert_eq!(
            &m.to_vec()[6..],
            &(7..21).map(|k| k as f32).collect::<Vec<_>>()[..]
        );
        m.resize_undefined(100, 100);
        assert_eq!(m.reusable_len(), 10_000);
        assert!(m.to_vec()[20..].iter().all(|&x| x == 0.0));
    }
}
