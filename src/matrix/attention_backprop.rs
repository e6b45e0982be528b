//! Restricted attention's backward pass, fused into one walk over the output rows (what the
//! windowed products of `attention.rs`, `add_mat` and `diff_softmax_per_row` computed in five
//! passes over each head, with two temporaries). Output row i visits each of its window rows
//! `i + o·row_shift` once and does all the work on it there.
//!
//! The rows are t-major over the sequences, so output rows i and i + row_shift share C − 1
//! window rows, and rows i and i + 1 none. The walk follows these chains (i, i + row_shift,
//! i + 2·row_shift, ...) and does every head of a row before moving on, so each input row
//! (all heads) is fetched from memory once and is still in cache for the C output rows that
//! read it; the row a step ahead in the chain is prefetched, because the window's rows are
//! a page or more apart and the hardware prefetchers do not follow them.
//!
//! A chain's key and value derivatives are added up in a scratch (zeroed, a row stride of an
//! odd number of cache lines) and added to the derivative matrix when the chain is
//! done. In the usual layouts row_shift rows are a multiple of 4 KiB (16 sequences × 3
//! frames × 1,088 columns × 4 bytes is 51 pages in the bench), so the C window rows fall
//! into the same L1 sets; the scratch's rows do not, which took 10–25 % off the bench's
//! backprop. The same for the input rows (a copy per chain) changed nothing measurable.
//! With the scratch a derivative element becomes `old + (its terms summed in increasing
//! output row order)`, without it `((old + t1) + t2) + ...`, on every path alike.
//!
//! Chains share no derivative row (a chain's window and query rows are all ≡ its first row
//! modulo row_shift), so with more than one thread allowed the chains are spread over the
//! threads, each with its own scratch; a chain is computed the same on any thread, so the
//! result does not depend on the thread count (2 threads: 1.5–2.1× on the bench).
//!
//! With every operand on the GPU, two kernels do it instead (see
//! `restricted_attention_backprop` in `cuda_ops.rs`): the softmax's backprop and the query
//! terms per (output row, head), then the key and value terms per input element, each
//! element's terms added up by the one thread that writes it (no atomics, a fixed order).

use super::buf::on_device;
use super::simd::{halving_sum, multiversion};
use super::{MatView, MatViewMut, Real};

/// Lanes of the partial sums (one AVX-512 vector, two AVX2 ones).
const LANES: usize = 16;

impl MatViewMut<'_> {
    /// `RestrictedAttentionComponent`'s backprop over all its heads, added to `self` (Kaldi
    /// has no single name for it). `input` and `self` are the input rows and their
    /// derivative, per head the columns `key (K), value (V), query key (K), query context
    /// (C)`; the queries of output row i are in input row `rows_left + i`, its window rows are
    /// `r_o = i + o·row_shift` for o = 0..C. `weights` (N × heads·C) are the softmax weights c
    /// the forward pass kept, `out_deriv` (N × heads·V, or N × heads·(V + C) with
    /// output-context) the output's derivative. Per output row and head:
    ///
    /// ```text
    /// dc_o = out_deriv_i[..V] · value(r_o)  (+ out_deriv_i[V + o] with output-context)
    /// db_o = c_o · (dc_o − Σ_p c_p · dc_p)                  (the softmax's backprop)
    /// query context_i[o] += db_o        query key_i += key_scale · Σ_o db_o · key(r_o)
    /// key(r_o) += key_scale · db_o · query key_i      value(r_o) += c_o · out_deriv_i[..V]
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn add_restricted_attention_backprop(
        &mut self,
        input: MatView<'_>,
        weights: MatView<'_>,
        out_deriv: MatView<'_>,
        rows_left: usize,
        num_heads: usize,
        key_dim: usize,
        key_scale: Real,
        row_shift: usize,
    ) {
        let heads = num_heads.max(1);
        let (n, c) = (weights.num_rows(), weights.num_cols() / heads);
        let (rows_in, head_cols) = (input.num_rows(), input.num_cols() / heads);
        assert!(
            c >= 1
                && weights.num_cols() == heads * c
                && input.num_cols() == heads * head_cols
                && head_cols >= 2 * key_dim + c,
            "add_restricted_attention_backprop: {} weight columns and {} input columns for \
             {heads} heads of key dim {key_dim}",
            weights.num_cols(),
            input.num_cols()
        );
        let value_dim = head_cols - 2 * key_dim - c;
        let od_cols = out_deriv.num_cols();
        assert!(
            self.num_rows() == rows_in
                && self.num_cols() == input.num_cols()
                && out_deriv.num_rows() == n
                && (od_cols == heads * value_dim || od_cols == heads * (value_dim + c))
                && rows_in == n + (c - 1) * row_shift
                && rows_left + n <= rows_in,
            "add_restricted_attention_backprop: {rows_in} input rows, {n} output rows, \
             {c} context positions {row_shift} rows apart, {rows_left} rows on the left, \
             {od_cols} output derivative columns"
        );
        if n == 0 {
            return;
        }
        on_device!(self.place.on_device()
        && input.place.on_device()
        && weights.place.on_device()
        && out_deriv.place.on_device()
        => super::cuda_ops::restricted_attention_backprop(
            self, input, weights, out_deriv, rows_left, heads, key_dim, key_scale, row_shift
        ));
        let deriv_stride = self.stride();
        backprop(Attention {
            deriv: self.as_mut_slice(),
            deriv_stride,
            deriv_div: 1,
            input: input.as_slice(),
            input_stride: input.stride(),
            weights: weights.as_slice(),
            weights_stride: weights.stride(),
            out_deriv: out_deriv.as_slice(),
            out_deriv_stride: out_deriv.stride(),
            output_context: od_cols > heads * value_dim,
            rows: n,
            rows_left,
            row_shift,
            heads,
            context: c,
            key_dim,
            value_dim,
            key_scale,
        });
        super::check::check_finite("add_restricted_attention_backprop", self.as_view());
    }
}

/// The operands as slices with their row strides (in elements).
struct Attention<'a> {
    deriv: &'a mut [Real],
    deriv_stride: usize,
    /// Input row r's derivative is row r / deriv_div of `deriv` (1, or row_shift when
    /// `deriv` holds one chain's rows).
    deriv_div: usize,
    input: &'a [Real],
    input_stride: usize,
    weights: &'a [Real],
    weights_stride: usize,
    out_deriv: &'a [Real],
    out_deriv_stride: usize,
    output_context: bool,
    rows: usize,
    rows_left: usize,
    row_shift: usize,
    heads: usize,
    context: usize,
    key_dim: usize,
    value_dim: usize,
    key_scale: Real,
}

impl Attention<'_> {
    /// Input (and derivative) columns per head.
    fn head_cols(&self) -> usize {
        2 * self.key_dim + self.value_dim + self.context
    }
    /// Where input row r's derivative starts in `deriv`.
    fn deriv_at(&self, r: usize) -> usize {
        r / self.deriv_div * self.deriv_stride
    }
    /// From one window position's derivative row to the next in `deriv`.
    fn deriv_step(&self) -> usize {
        self.row_shift / self.deriv_div * self.deriv_stride
    }
    /// Output derivative columns per head.
    fn head_od_cols(&self) -> usize {
        self.value_dim + if self.output_context { self.context } else { 0 }
    }
}

/// The two inner loops, portable or with intrinsics; both round every sum the same way, so
/// the results are equal bit for bit.
trait Kernels {
    /// Returns `a · b` (16 lanes over the 16-column blocks, summed by [`halving_sum`], plus the
    /// remaining columns in order) and adds `scale · a` to `y`. All three have one length.
    ///
    /// # Safety
    /// The CPU must have the instruction set of the implementation.
    unsafe fn dot_and_add_scaled(a: &[Real], b: &[Real], y: &mut [Real], scale: Real) -> Real;

    /// Output row i's keys and query key part in the head whose columns start at `col`:
    /// `key_deriv(r_o) += s_o · query_i` and `query_deriv_i += Σ_o s_o · key(r_o)`, the sum
    /// in position order per column.
    ///
    /// # Safety
    /// As above, and `h` must have passed [`check_extents`].
    unsafe fn keys_and_query(h: &mut Attention<'_>, i: usize, col: usize, s: &[Real]);

    /// Asks for the cache lines output row i will be the first to touch: the window's last
    /// row (input and derivative, every head), the out_deriv and weights rows. The window's
    /// rows are a page or more apart, which the hardware prefetchers do not follow.
    ///
    /// # Safety
    /// As [`Kernels::keys_and_query`]; i < h.rows.
    #[inline(always)]
    unsafe fn prefetch(_h: &Attention<'_>, _i: usize) {}
}

/// How many steps of a chain ahead [`Kernels::prefetch`] asks for the lines.
const AHEAD: usize = 1;

/// The extents every access stays within (so that the kernels may use raw pointers).
fn check_extents(h: &Attention<'_>) {
    let (c, last) = (h.context, h.rows.saturating_sub(1));
    let last_in = last + (c - 1) * h.row_shift;
    let (cols, od_cols) = (h.heads * h.head_cols(), h.heads * h.head_od_cols());
    assert!(
        h.rows == 0
            || h.rows_left + last <= last_in
                && last_in * h.input_stride + cols <= h.input.len()
                && h.deriv_at(last_in) + cols <= h.deriv.len()
                && last * h.weights_stride + h.heads * c <= h.weights.len()
                && last * h.out_deriv_stride + od_cols <= h.out_deriv.len(),
        "restricted attention backprop: extents"
    );
}

/// All output rows and heads, through the fastest kernels this CPU has.
fn backprop(h: Attention<'_>) {
    backprop_on(Path::best(), h);
}

/// The kernels: portable, or AVX2 or AVX-512 intrinsics; all round every sum the same way.
#[derive(Clone, Copy, Debug)]
enum Path {
    Portable,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx512,
}

impl Path {
    /// The fastest path this CPU has.
    fn best() -> Path {
        [Path::Avx512, Path::Avx2]
            .into_iter()
            .find(|p| p.available())
            .unwrap_or(Path::Portable)
    }

    /// Whether this CPU can run the path.
    fn available(self) -> bool {
        match self {
            Path::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// [`backprop`] through the given kernels; false (and nothing done) if the CPU lacks them.
#[cfg(test)]
fn backprop_with(path: Path, h: Attention<'_>) -> bool {
    if !path.available() {
        return false;
    }
    backprop_on(path, h);
    true
}

/// [`backprop`] on `path`, which the CPU must have. Where the query rows are in the chains
/// (always, for the component's layouts) and there is more than one chain, chain by chain
/// with each chain's derivative rows added up in a scratch, the chains spread over the
/// allowed threads ([`chains`]); otherwise row by row in place.
fn backprop_on(path: Path, mut h: Attention<'_>) {
    check_extents(&h);
    let step = h.row_shift;
    if step > 1 && h.rows_left.is_multiple_of(step) {
        chains(path, h);
        return;
    }
    let (mut dc, mut db) = (vec![0.0 as Real; h.context], vec![0.0 as Real; h.context]);
    for first in 0..step.max(1).min(h.rows) {
        // SAFETY: the CPU has the path's instructions (`available`), and the extents were
        // checked above.
        unsafe { chain_on(path, &mut h, first, &mut dc, &mut db) };
    }
}

/// The chained walk (see the module comment). Chain `first` (output rows first, first +
/// step, ...) reads and writes the derivative rows ≡ first (mod step) only, its query rows
/// included (rows_left being a multiple of step), so no two chains share a derivative row:
/// each chain is summed in a scratch of its own with a row stride of an odd number of cache
/// lines (so that 64 consecutive rows start in 64 different L1 sets), then added to its rows
/// of `deriv`, and the chains are spread over the allowed threads. A chain is computed the
/// same on whichever thread, so the result does not depend on the thread count.
fn chains(path: Path, mut h: Attention<'_>) {
    let (n, step, c) = (h.rows, h.row_shift, h.context);
    let cols = h.heads * h.head_cols();
    let rows_in = n + (c - 1) * step;
    let chain_rows = rows_in.div_ceil(step);
    let lines = cols.div_ceil(16);
    let scratch_stride = 16 * (lines + 1 - lines % 2);
    // Each chain's derivative rows, as disjoint slices of `deriv`.
    let deriv = std::mem::take(&mut h.deriv);
    let mut work: Vec<Vec<&mut [Real]>> = (0..step.min(n))
        .map(|_| Vec::with_capacity(chain_rows))
        .collect();
    for (r, row) in deriv.chunks_mut(h.deriv_stride).take(rows_in).enumerate() {
        if let Some(rows) = work.get_mut(r % step) {
            rows.push(&mut row[..cols]);
        }
    }
    let shared = &h;
    super::parallel::for_chunks(&mut work, n * cols * c, |first_chain, part| {
        let mut scratch = vec![0.0 as Real; chain_rows * scratch_stride];
        let (mut dc, mut db) = (vec![0.0 as Real; c], vec![0.0 as Real; c]);
        for (k, rows) in part.iter_mut().enumerate() {
            {
                let mut chain = Attention {
                    deriv: &mut scratch,
                    deriv_stride: scratch_stride,
                    deriv_div: step,
                    ..*shared
                };
                // SAFETY: the CPU has the path's instructions, the extents were checked
                // (the scratch holds the chain's rows: row first + k·step at k).
                unsafe { chain_on(path, &mut chain, first_chain + k, &mut dc, &mut db) };
            }
            for (to, from) in rows.iter_mut().zip(scratch.chunks_mut(scratch_stride)) {
                add_and_clear(to, from);
            }
        }
    });
}

multiversion! {
    /// `to += from`, then `from = 0` (a chain's scratch row into its derivative row).
    fn add_and_clear(to: &mut [Real], from: &mut [Real]) {
        for (y, x) in to.iter_mut().zip(from.iter_mut()) {
            *y += *x;
            *x = 0.0;
        }
    }
}

/// One chain, output rows first, first + row_shift, ..., every head of a row in turn, on
/// the kernels of `path`.
///
/// # Safety
/// The CPU must have the path's instructions, and `h` must have passed [`check_extents`].
unsafe fn chain_on(
    path: Path,
    h: &mut Attention<'_>,
    first: usize,
    dc: &mut [Real],
    db: &mut [Real],
) {
    match path {
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => x86::chain_avx2(h, first, dc, db),
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => x86::chain_avx512(h, first, dc, db),
        _ => chain::<Portable>(h, first, dc, db),
    }
}

/// [`chain_on`] with the kernels `K`.
///
/// # Safety
/// As [`Kernels::keys_and_query`].
#[inline(always)]
unsafe fn chain<K: Kernels>(h: &mut Attention<'_>, first: usize, dc: &mut [Real], db: &mut [Real]) {
    let (n, step) = (h.rows, h.row_shift.max(1));
    for i in (first..n).step_by(step) {
        if i + AHEAD * step < n {
            K::prefetch(h, i + AHEAD * step);
        }
        for head in 0..h.heads {
            row::<K>(h, i, head, dc, db);
        }
    }
}

/// Output row i of one head; `dc` and `db` are C-long scratch.
///
/// # Safety
/// As [`Kernels::keys_and_query`].
#[inline(always)]
unsafe fn row<K: Kernels>(
    h: &mut Attention<'_>,
    i: usize,
    head: usize,
    dc: &mut [Real],
    db: &mut [Real],
) {
    let (c, kd, vd) = (h.context, h.key_dim, h.value_dim);
    // The head's first columns in input and deriv, weights, out_deriv.
    let col = head * h.head_cols();
    let od_at = i * h.out_deriv_stride + head * h.head_od_cols();
    let od = &h.out_deriv[od_at..][..vd];
    let w = &h.weights[i * h.weights_stride + head * c..][..c];
    // Through the weighted sum: dc, and the values' derivative (it needs only c).
    for (o, d) in dc.iter_mut().enumerate() {
        let r = i + o * h.row_shift;
        let value = &h.input[r * h.input_stride + col + kd..][..vd];
        let at = h.deriv_at(r) + col + kd;
        let value_deriv = &mut h.deriv[at..][..vd];
        *d = K::dot_and_add_scaled(od, value, value_deriv, w[o]);
    }
    if h.output_context {
        for (d, &x) in dc.iter_mut().zip(&h.out_deriv[od_at + vd..][..c]) {
            *d += x;
        }
    }
    // Through the softmax: db = c ⊙ (dc − c·dc), into the query's context part.
    let mut cdc = 0.0 as Real;
    for (&wo, &d) in w.iter().zip(dc.iter()) {
        cdc += wo * d;
    }
    let q_at = h.deriv_at(h.rows_left + i) + col;
    let context_deriv = &mut h.deriv[q_at + 2 * kd + vd..][..c];
    for ((b, (&wo, &d)), y) in db
        .iter_mut()
        .zip(w.iter().zip(dc.iter()))
        .zip(context_deriv)
    {
        *b = wo * (d - cdc);
        *y += *b;
        *b *= h.key_scale;
    }
    // Through the key·query products.
    K::keys_and_query(h, i, col, db);
}

/// The kernels in plain Rust.
struct Portable;

impl Kernels for Portable {
    #[inline(always)]
    unsafe fn dot_and_add_scaled(a: &[Real], b: &[Real], y: &mut [Real], scale: Real) -> Real {
        let n = a.len() / LANES * LANES;
        let mut lanes = [0.0 as Real; LANES];
        for j in (0..n).step_by(LANES) {
            for l in 0..LANES {
                lanes[l] += a[j + l] * b[j + l];
                y[j + l] += scale * a[j + l];
            }
        }
        let mut tail = 0.0 as Real;
        for ((&a, &b), y) in a[n..].iter().zip(&b[n..]).zip(&mut y[n..]) {
            tail += a * b;
            *y += scale * a;
        }
        halving_sum(&lanes) + tail
    }

    #[inline(always)]
    unsafe fn keys_and_query(h: &mut Attention<'_>, i: usize, col: usize, s: &[Real]) {
        let query_col = col + h.key_dim + h.value_dim;
        let q_in = (h.rows_left + i) * h.input_stride + query_col;
        let q_deriv = h.deriv_at(h.rows_left + i) + query_col;
        for j in 0..h.key_dim {
            let q = h.input[q_in + j];
            let mut acc = 0.0 as Real;
            for (o, &s) in s.iter().enumerate() {
                let r = i + o * h.row_shift;
                acc += s * h.input[r * h.input_stride + col + j];
                let at = h.deriv_at(r) + col + j;
                h.deriv[at] += s * q;
            }
            h.deriv[q_deriv + j] += acc;
        }
    }
}

/// The kernels with AVX2 intrinsics (the compiler turned the portable loops into 2-lane
/// code with scalar stores here). No fused multiply-add, so they round as the portable ones.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Attention, Kernels, Real, LANES};
    use crate::matrix::simd::prefetch_lines;
    use std::arch::x86_64::*;

    /// [`super::chain`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU must have AVX2, and `h` must have passed `check_extents`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn chain_avx2(
        h: &mut Attention<'_>,
        first: usize,
        dc: &mut [Real],
        db: &mut [Real],
    ) {
        super::chain::<Avx2>(h, first, dc, db)
    }

    /// [`super::chain`] compiled for AVX-512 (half the instructions of AVX2 for the same
    /// work; a few per cent faster on the bench).
    ///
    /// # Safety
    /// The CPU must have AVX-512F, and `h` must have passed `check_extents`.
    #[target_feature(enable = "avx512f,avx2")]
    pub(super) unsafe fn chain_avx512(
        h: &mut Attention<'_>,
        first: usize,
        dc: &mut [Real],
        db: &mut [Real],
    ) {
        super::chain::<Avx512>(h, first, dc, db)
    }

    struct Avx2;

    struct Avx512;

    impl Kernels for Avx512 {
        #[inline(always)]
        unsafe fn dot_and_add_scaled(a: &[Real], b: &[Real], y: &mut [Real], scale: Real) -> Real {
            let len = a.len().min(b.len()).min(y.len());
            let n = len / LANES * LANES;
            let (pa, pb, py) = (a.as_ptr(), b.as_ptr(), y.as_mut_ptr());
            let sv = _mm512_set1_ps(scale);
            let mut lanes = _mm512_setzero_ps();
            let mut j = 0;
            while j < n {
                let a0 = _mm512_loadu_ps(pa.add(j));
                lanes = _mm512_add_ps(lanes, _mm512_mul_ps(a0, _mm512_loadu_ps(pb.add(j))));
                let y0 = _mm512_add_ps(_mm512_loadu_ps(py.add(j)), _mm512_mul_ps(sv, a0));
                _mm512_storeu_ps(py.add(j), y0);
                j += LANES;
            }
            let mut tail = 0.0 as Real;
            for j in n..len {
                tail += a[j] * b[j];
                y[j] += scale * a[j];
            }
            let lo = _mm512_castps512_ps256(lanes);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(lanes)));
            halving_sum(lo, hi) + tail
        }

        #[inline(always)]
        unsafe fn keys_and_query(h: &mut Attention<'_>, i: usize, col: usize, s: &[Real]) {
            let k = Keys::new(h, i, col);
            let n = h.key_dim / LANES * LANES;
            let mut j = 0;
            while j < n {
                let qv = _mm512_loadu_ps(k.q.add(j));
                let mut acc = _mm512_setzero_ps();
                for (o, &so) in s.iter().enumerate() {
                    let sv = _mm512_set1_ps(so);
                    let key = _mm512_loadu_ps(k.input.add(o * k.in_step + j));
                    acc = _mm512_add_ps(acc, _mm512_mul_ps(sv, key));
                    let kp = k.deriv.add(o * k.d_step + j);
                    _mm512_storeu_ps(
                        kp,
                        _mm512_add_ps(_mm512_loadu_ps(kp), _mm512_mul_ps(sv, qv)),
                    );
                }
                _mm512_storeu_ps(
                    k.qd.add(j),
                    _mm512_add_ps(_mm512_loadu_ps(k.qd.add(j)), acc),
                );
                j += LANES;
            }
            k.rest(s, n, h.key_dim);
        }

        #[inline(always)]
        unsafe fn prefetch(h: &Attention<'_>, i: usize) {
            prefetch_row(h, i)
        }
    }

    /// Output row i's key-pass pointers in the head whose columns start at `col`.
    struct Keys {
        input: *const Real,
        deriv: *mut Real,
        q: *const Real,
        qd: *mut Real,
        in_step: usize,
        d_step: usize,
    }

    impl Keys {
        #[inline(always)]
        unsafe fn new(h: &mut Attention<'_>, i: usize, col: usize) -> Keys {
            let query_col = col + h.key_dim + h.value_dim;
            let q_row = h.rows_left + i;
            Keys {
                input: h.input.as_ptr().add(i * h.input_stride + col),
                deriv: h.deriv.as_mut_ptr().add(h.deriv_at(i) + col),
                q: h.input.as_ptr().add(q_row * h.input_stride + query_col),
                qd: h.deriv.as_mut_ptr().add(h.deriv_at(q_row) + query_col),
                in_step: h.row_shift * h.input_stride,
                d_step: h.deriv_step(),
            }
        }

        /// Columns `from..to` in 8-wide blocks, then one by one. Every column is
        /// independent here, so any width rounds as the scalar loop.
        #[inline(always)]
        unsafe fn rest(&self, s: &[Real], from: usize, to: usize) {
            let mut j = from;
            while j + 8 <= to {
                let qv = _mm256_loadu_ps(self.q.add(j));
                let mut acc = _mm256_setzero_ps();
                for (o, &so) in s.iter().enumerate() {
                    let sv = _mm256_set1_ps(so);
                    let key = _mm256_loadu_ps(self.input.add(o * self.in_step + j));
                    acc = _mm256_add_ps(acc, _mm256_mul_ps(sv, key));
                    let kp = self.deriv.add(o * self.d_step + j);
                    _mm256_storeu_ps(
                        kp,
                        _mm256_add_ps(_mm256_loadu_ps(kp), _mm256_mul_ps(sv, qv)),
                    );
                }
                let qd = self.qd.add(j);
                _mm256_storeu_ps(qd, _mm256_add_ps(_mm256_loadu_ps(qd), acc));
                j += 8;
            }
            for j in j..to {
                let qj = *self.q.add(j);
                let mut acc = 0.0 as Real;
                for (o, &so) in s.iter().enumerate() {
                    acc += so * *self.input.add(o * self.in_step + j);
                    *self.deriv.add(o * self.d_step + j) += so * qj;
                }
                *self.qd.add(j) += acc;
            }
        }
    }

    /// The halving sum of `halving_sum` over lanes 0..8 in `lo` and 8..16 in `hi`: l + l+8,
    /// l + l+4, then (0+2) + (1+3).
    #[inline(always)]
    unsafe fn halving_sum(lo: __m256, hi: __m256) -> Real {
        let s8 = _mm256_add_ps(lo, hi);
        let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
        _mm_cvtss_f32(s1)
    }

    impl Kernels for Avx2 {
        #[inline(always)]
        unsafe fn dot_and_add_scaled(a: &[Real], b: &[Real], y: &mut [Real], scale: Real) -> Real {
            let len = a.len().min(b.len()).min(y.len());
            let n = len / LANES * LANES;
            let (pa, pb, py) = (a.as_ptr(), b.as_ptr(), y.as_mut_ptr());
            let sv = _mm256_set1_ps(scale);
            let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut j = 0;
            while j < n {
                let (a0, a1) = (_mm256_loadu_ps(pa.add(j)), _mm256_loadu_ps(pa.add(j + 8)));
                let (b0, b1) = (_mm256_loadu_ps(pb.add(j)), _mm256_loadu_ps(pb.add(j + 8)));
                lo = _mm256_add_ps(lo, _mm256_mul_ps(a0, b0));
                hi = _mm256_add_ps(hi, _mm256_mul_ps(a1, b1));
                let y0 = _mm256_add_ps(_mm256_loadu_ps(py.add(j)), _mm256_mul_ps(sv, a0));
                let y1 = _mm256_add_ps(_mm256_loadu_ps(py.add(j + 8)), _mm256_mul_ps(sv, a1));
                _mm256_storeu_ps(py.add(j), y0);
                _mm256_storeu_ps(py.add(j + 8), y1);
                j += LANES;
            }
            let mut tail = 0.0 as Real;
            for j in n..len {
                tail += a[j] * b[j];
                y[j] += scale * a[j];
            }
            halving_sum(lo, hi) + tail
        }

        #[inline(always)]
        unsafe fn keys_and_query(h: &mut Attention<'_>, i: usize, col: usize, s: &[Real]) {
            Keys::new(h, i, col).rest(s, 0, h.key_dim);
        }

        #[inline(always)]
        unsafe fn prefetch(h: &Attention<'_>, i: usize) {
            prefetch_row(h, i)
        }
    }

    #[inline(always)]
    unsafe fn prefetch_row(h: &Attention<'_>, i: usize) {
        let r = i + (h.context - 1) * h.row_shift;
        let cols = h.heads * h.head_cols();
        prefetch_lines(h.input.as_ptr().add(r * h.input_stride), cols);
        prefetch_lines(h.deriv.as_ptr().add(h.deriv_at(r)), cols);
        let od_cols = h.heads * h.head_od_cols();
        prefetch_lines(h.out_deriv.as_ptr().add(i * h.out_deriv_stride), od_cols);
        prefetch_lines(
            h.weights.as_ptr().add(i * h.weights_stride),
            h.heads * h.context,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{backprop_with, Attention, Path};
    use crate::matrix::{pseudo_random as m, MatView, MatViewMut, Matrix, Real, Trans};

    /// The five passes the component made before the fused kernel (kept as the reference):
    /// dc from the windowed dot products (plus the context columns of out_deriv), the
    /// softmax's backprop, then the query context, query key, key and value derivatives.
    #[allow(clippy::too_many_arguments)]
    fn five_passes(
        deriv: &mut MatViewMut<'_>,
        input: MatView<'_>,
        weights: MatView<'_>,
        out_deriv: MatView<'_>,
        rows_left: usize,
        kd: usize,
        key_scale: Real,
        shift: usize,
    ) {
        let (n, c, rows_in) = (weights.num_rows(), weights.num_cols(), input.num_rows());
        let vd = input.num_cols() - 2 * kd - c;
        let od_values = out_deriv.cols_range(0, vd);
        let mut c_deriv = Matrix::zeros(n, c);
        c_deriv.view_mut().set_attention_dot_products(
            1.0,
            od_values,
            input.cols_range(kd, vd),
            shift,
        );
        if out_deriv.num_cols() > vd {
            c_deriv
                .view_mut()
                .add_mat(1.0, out_deriv.cols_range(vd, c), Trans::No);
        }
        let mut b_deriv = Matrix::zeros(n, c);
        b_deriv
            .view_mut()
            .diff_softmax_per_row(weights, c_deriv.view());
        deriv
            .sub_mut(rows_left, n, 2 * kd + vd, c)
            .add_mat(1.0, b_deriv.view(), Trans::No);
        deriv
            .sub_mut(rows_left, n, kd + vd, kd)
            .add_attention_weighted_rows(key_scale, input.cols_range(0, kd), b_deriv.view(), shift);
        deriv
            .sub_mut(0, rows_in, 0, kd)
            .add_attention_scaled_to_input(
                key_scale,
                input.sub(rows_left, n, kd + vd, kd),
                b_deriv.view(),
                shift,
            );
        deriv
            .sub_mut(0, rows_in, kd, vd)
            .add_attention_scaled_to_input(1.0, od_values, weights, shift);
    }

    /// One test case: the operands, each a view with two spare columns on the left and
    /// three on the right (so every view is strided), and the starting derivative.
    struct Case {
        heads: usize,
        n: usize,
        kd: usize,
        c: usize,
        shift: usize,
        rows_left: usize,
        cols: usize,
        od_cols: usize,
        input: Matrix,
        weights: Matrix,
        out_deriv: Matrix,
        deriv: Matrix,
    }

    fn case(shape: Shape) -> Case {
        let (heads, n, kd, vd, c, shift, ctx) = shape;
        let rows_in = n + (c - 1) * shift;
        let cols = heads * (2 * kd + vd + c);
        let od_cols = heads * (vd + if ctx { c } else { 0 });
        let scores = m(n, heads * c, 31);
        let mut weights = m(n, heads * c + 5, 32);
        for h in 0..heads {
            if n > 0 {
                weights
                    .sub_mut(0, n, 2 + h * c, c)
                    .softmax_per_row_from(scores.view().cols_range(h * c, c));
            }
        }
        Case {
            heads,
            n,
            kd,
            c,
            shift,
            // Queries anywhere in the window; with an odd number of heads in a window row
            // (as in the component, so that the walk adds up the chains in a scratch).
            rows_left: {
                let q = (n + kd) % ((c - 1) * shift + 1);
                if heads % 2 == 1 {
                    q / shift * shift
                } else {
                    q
                }
            },
            cols,
            od_cols,
            input: m(rows_in, cols + 5, 33),
            weights,
            out_deriv: m(n, od_cols + 5, 34),
            deriv: m(rows_in, cols + 5, 35),
        }
    }

    impl Case {
        fn rows_in(&self) -> usize {
            self.input.num_rows()
        }
        fn input(&self) -> MatView<'_> {
            self.input.sub(0, self.rows_in(), 2, self.cols)
        }
        fn weights(&self) -> MatView<'_> {
            self.weights.sub(0, self.n, 2, self.heads * self.c)
        }
        fn value_dim(&self) -> usize {
            self.cols / self.heads - 2 * self.kd - self.c
        }
        fn out_deriv(&self) -> MatView<'_> {
            self.out_deriv.sub(0, self.n, 2, self.od_cols)
        }
        /// The derivative after the fused kernel (through `path` if given; None if the CPU
        /// lacks it).
        fn fused_with(&self, path: Option<Path>) -> Option<Matrix> {
            let mut deriv = self.deriv.clone();
            let rows_in = self.rows_in();
            let mut view = deriv.sub_mut(0, rows_in, 2, self.cols);
            if let Some(path) = path {
                let deriv_stride = view.stride();
                let ran = backprop_with(
                    path,
                    Attention {
                        deriv: view.as_mut_slice(),
                        deriv_stride,
                        deriv_div: 1,
                        input: self.input().as_slice(),
                        input_stride: self.input().stride(),
                        weights: self.weights().as_slice(),
                        weights_stride: self.weights().stride(),
                        out_deriv: self.out_deriv().as_slice(),
                        out_deriv_stride: self.out_deriv().stride(),
                        output_context: self.od_cols > self.heads * self.value_dim(),
                        rows: self.n,
                        rows_left: self.rows_left,
                        row_shift: self.shift,
                        heads: self.heads,
                        context: self.c,
                        key_dim: self.kd,
                        value_dim: self.value_dim(),
                        key_scale: 0.3,
                    },
                );
                if !ran {
                    return None;
                }
            } else {
                view.add_restricted_attention_backprop(
                    self.input(),
                    self.weights(),
                    self.out_deriv(),
                    self.rows_left,
                    self.heads,
                    self.kd,
                    0.3,
                    self.shift,
                );
            }
            Some(deriv)
        }
        /// The derivative after the five passes, head by head.
        fn reference(&self) -> Matrix {
            let mut want = self.deriv.clone();
            let (ip, op) = (self.cols / self.heads, self.od_cols / self.heads);
            for h in 0..self.heads {
                five_passes(
                    &mut want.sub_mut(0, self.rows_in(), 2 + h * ip, ip),
                    self.input().cols_range(h * ip, ip),
                    self.weights().cols_range(h * self.c, self.c),
                    self.out_deriv().cols_range(h * op, op),
                    self.rows_left,
                    self.kd,
                    0.3,
                    self.shift,
                );
            }
            want
        }
        /// The derivative after the fused kernel, through the dispatch.
        fn fused(&self) -> Matrix {
            self.fused_with(None).unwrap()
        }
    }

    /// Heads, output rows, key dim, value dim, C, row shift, output-context.
    type Shape = (usize, usize, usize, usize, usize, usize, bool);

    /// Key and value dims below, at and off multiples of 8 and 16, C = 1, 3, 8, 9, 17,
    /// row shifts 1 to 3 (and 16, where the walk's chains are long), with and without
    /// output-context, one to three heads.
    const SHAPES: [Shape; 12] = [
        (1, 9, 32, 64, 8, 3, true),
        (2, 7, 3, 5, 1, 1, false),
        (1, 6, 17, 20, 3, 2, true),
        (3, 5, 20, 70, 9, 1, false),
        (1, 4, 33, 19, 17, 2, true),
        (2, 11, 8, 16, 8, 3, false),
        (1, 13, 40, 80, 3, 1, true),
        (3, 3, 7, 9, 17, 3, false),
        (2, 21, 16, 48, 9, 2, true),
        (2, 40, 32, 64, 4, 16, true),
        (1, 1, 5, 6, 1, 7, true),
        (3, 30, 32, 64, 8, 6, true),
    ];

    /// The chains spread over threads give the same bits whatever the thread count (a case
    /// large enough for the split: 400 rows × 408 columns × C = 8), and the same as the five
    /// passes within rounding.
    #[test]
    fn chains_do_not_depend_on_the_thread_count() {
        let shape = (3, 400, 32, 64, 8, 16, true);
        let t = case(shape);
        assert_eq!(
            t.rows_left % t.shift,
            0,
            "the case must take the chained walk"
        );
        let mut got = Vec::new();
        for threads in [1, 2, 3] {
            crate::matrix::set_num_threads(threads);
            got.push(t.fused().to_vec());
        }
        crate::matrix::set_num_threads(0);
        for (threads, g) in [2, 3].iter().zip(&got[1..]) {
            for (k, (a, b)) in g.iter().zip(&got[0]).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "element {k} with {threads} threads: {a} vs {b} with one"
                );
            }
        }
        let one = t.fused();
        assert_eq!(one.to_vec(), got[0]);
        crate::testing::numeric::assert_close_to_reference(
            "chained backprop against the five passes",
            &one,
            &t.reference(),
            2e-6,
        );
    }

    /// The fused kernel adds what the five passes add, within float rounding (the sums are
    /// grouped differently), and leaves the columns around the views alone.
    #[test]
    fn fused_backprop_equals_the_five_passes() {
        for shape in SHAPES {
            let (heads, n, kd, vd, c, shift, ctx) = shape;
            let t = case(shape);
            let want = t.reference();
            let got = t.fused();
            let (start, got, want) = (t.deriv.to_vec(), got.to_vec(), want.to_vec());
            let mut changed = 0;
            for (k, ((&g, &w), &s)) in got.iter().zip(&want).zip(&start).enumerate() {
                let tol = 2e-6 * (1.0 + w.abs());
                assert!(
                    (g - w).abs() <= tol,
                    "element {k} (row {}, column {}) of heads={heads} n={n} kd={kd} vd={vd} \
                     c={c} shift={shift} ctx={ctx}: fused {g}, five passes {w}",
                    k / (t.cols + 5),
                    k % (t.cols + 5)
                );
                changed += usize::from(w != s);
            }
            // At least every value derivative the output rows reach receives something.
            let reached = n * heads * vd;
            assert!(
                changed >= reached,
                "the reference changed {changed} elements, fewer than {reached}"
            );
        }
    }

    /// Every path the CPU has (AVX-512, AVX2, portable) gives the same bits, and a second
    /// run the same again.
    #[test]
    fn every_path_rounds_the_same() {
        for shape in SHAPES {
            let (_, n, kd, vd, c, shift, _) = shape;
            let t = case(shape);
            let want = t.fused_with(Some(Path::Portable)).unwrap().to_vec();
            assert_eq!(t.fused_with(Some(Path::Portable)).unwrap().to_vec(), want);
            for path in [Path::Avx2, Path::Avx512] {
                let Some(got) = t.fused_with(Some(path)) else {
                    continue;
                };
                for (k, (g, w)) in got.to_vec().iter().zip(&want).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        w.to_bits(),
                        "element {k} of n={n} kd={kd} vd={vd} c={c} shift={shift}, {path:?}: \
                         {g} vs portable {w}"
                    );
                }
            }
        }
    }

    /// No output rows: nothing changes (the input has just the window's extra rows).
    #[test]
    fn no_output_rows_changes_nothing() {
        let t = case((2, 0, 32, 64, 8, 3, true));
        assert_eq!(t.fused().to_vec(), t.deriv.to_vec());
    }

    /// Shapes that do not fit are refused before any access.
    #[test]
    #[should_panic(expected = "add_restricted_attention_backprop")]
    fn mismatched_rows_are_refused() {
        let t = case((1, 4, 8, 8, 3, 2, true));
        let mut deriv = t.deriv.clone();
        let rows_in = t.rows_in();
        deriv
            .sub_mut(0, rows_in - 1, 2, t.cols)
            .add_restricted_attention_backprop(
                t.input.sub(0, rows_in - 1, 2, t.cols),
                t.weights(),
                t.out_deriv(),
                0,
                1,
                8,
                0.3,
                2,
            );
    }
}
