//! The GPU side of the matrix operations: each function launches one kernel (or cuBLAS) over
//! views whose elements are all on the device. The host files call these from their
//! `on_device!` arms; shapes were checked there already.

use super::cuda::{gpu, Arg};
use crate::matrix::{LstmBackpropInput, MatView, MatViewMut, Real, Trans, Vector};

/// Threads per block for the element-wise kernels: 32 columns × 8 rows.
const BLOCK_2D: (u32, u32, u32) = (32, 8, 1);
/// Threads per block for the one-block-per-row kernels (a power of two).
const ROW_THREADS: u32 = 256;
/// The grid's y (rows) is capped by CUDA at 65535; the kernels stride over the rest.
const MAX_GRID_Y: usize = 65535;

fn grid_2d(rows: usize, cols: usize) -> (u32, u32, u32) {
    let gx = cols.div_ceil(BLOCK_2D.0 as usize).min(1 << 20);
    let gy = rows.div_ceil(BLOCK_2D.1 as usize).min(MAX_GRID_Y);
    (gx as u32, gy as u32, 1)
}

fn grid_rows(rows: usize) -> (u32, u32, u32) {
    (rows.min(1 << 20) as u32, 1, 1)
}

fn p(v: &MatView<'_>) -> Arg {
    Arg::Ptr(v.elems.as_ptr() as u64)
}

fn pm(v: &mut MatViewMut<'_>) -> Arg {
    Arg::Ptr(v.elems.as_mut_ptr() as u64)
}

fn pv(v: &Vector) -> Arg {
    Arg::Ptr(v.data.as_ptr() as u64)
}

fn int(n: usize) -> Arg {
    Arg::Int(i32::try_from(n).expect("GPU matrices are limited to 2^31 rows, columns and strides"))
}

fn empty(x: &MatViewMut<'_>) -> bool {
    x.rows == 0 || x.cols == 0
}

/// A matrix argument, (pointer, row stride), of `y`, or of `x` itself where `y` is `None`
/// (the in-place forms).
fn or_self(x: &mut MatViewMut<'_>, y: Option<MatView<'_>>) -> [Arg; 2] {
    match y {
        Some(y) => [p(&y), int(y.stride)],
        None => [pm(x), int(x.stride)],
    }
}

/// Launches a one-block-per-unit kernel (a row, or a block of a row) over `units` units,
/// with `scalar_bytes` of shared memory per thread for its reductions.
fn per_row(name: &'static str, units: usize, scalar_bytes: u32, args: &[Arg]) {
    let shared = ROW_THREADS * scalar_bytes;
    gpu().launch(name, grid_rows(units), (ROW_THREADS, 1, 1), shared, args);
}

/// `x = f(x, operands...)` by kernel `name` with scalars `a`, `b`: the element-wise kernels
/// (`EW1`, `EW2`, `EW2T`, `EW3` in kernels.cu) take each matrix as (pointer, row stride),
/// then rows, columns, a and b.
pub(in crate::matrix) fn ew(
    name: &'static str,
    x: &mut MatViewMut<'_>,
    operands: &[MatView<'_>],
    a: Real,
    b: Real,
) {
    if empty(x) {
        return;
    }
    let (r, c) = (x.rows, x.cols);
    let mut args = vec![pm(x), int(x.stride)];
    for y in operands {
        args.extend([p(y), int(y.stride)]);
    }
    args.extend([int(r), int(c), Arg::Float(a), Arg::Float(b)]);
    gpu().launch(name, grid_2d(r, c), BLOCK_2D, 0, &args);
}

/// `x = f(x, v)` by kernel `name`, `v` indexed by column or row.
pub(in crate::matrix) fn ewv(
    name: &'static str,
    x: &mut MatViewMut<'_>,
    v: &Vector,
    a: Real,
    b: Real,
) {
    with_vector(name, x, None, v, a, b);
}

/// `x = f(x, y, v)` by kernel `name`, `y` a matrix of x's shape and `v` read per column.
pub(in crate::matrix) fn ewmv(
    name: &'static str,
    x: &mut MatViewMut<'_>,
    y: MatView<'_>,
    v: &Vector,
    a: Real,
    b: Real,
) {
    with_vector(name, x, Some(y), v, a, b);
}

/// The launch of [`ewv`] and [`ewmv`]: x, then y if any, then v, the shape and two scalars.
fn with_vector(
    name: &'static str,
    x: &mut MatViewMut<'_>,
    y: Option<MatView<'_>>,
    v: &Vector,
    a: Real,
    b: Real,
) {
    if empty(x) {
        return;
    }
    let (r, c) = (x.rows, x.cols);
    let v = on_the_device(v);
    let mut args = vec![pm(x), int(x.stride)];
    if let Some(y) = &y {
        args.extend([p(y), int(y.stride)]);
    }
    args.extend([pv(&v), int(r), int(c), Arg::Float(a), Arg::Float(b)]);
    gpu().launch(name, grid_2d(r, c), BLOCK_2D, 0, &args);
}

/// A grouped reduction `x = reduce(y)` over consecutive groups of `y.cols / x.cols` columns
/// (`k_group_pnorm` with `p`, `k_group_max`).
pub(in crate::matrix) fn grouped(
    name: &'static str,
    x: &mut MatViewMut<'_>,
    y: MatView<'_>,
    p: Real,
) {
    if empty(x) {
        return;
    }
    let (r, c) = (x.rows, x.cols);
    let args = [
        pm(x),
        int(x.stride),
        self::p(&y),
        int(y.stride),
        int(y.cols / c),
        int(r),
        int(c),
        Arg::Float(p),
    ];
    gpu().launch(name, grid_2d(r, c), BLOCK_2D, 0, &args);
}

/// What [`group_deriv`] computes.
pub(in crate::matrix) enum GroupDeriv {
    /// The p-norm's input derivative.
    Pnorm(Real),
    /// The 2-norm's, as `x · (dy / y)`.
    TwoNorm,
    /// GroupMax's 0/1 mask (`out_deriv` not read).
    MaxMask,
}

/// The input derivative of a grouped reduction into `x` (the input's shape): `in_value`
/// the input, `out_value` and `out_deriv` the output's value and derivative.
pub(in crate::matrix) fn group_deriv(
    x: &mut MatViewMut<'_>,
    in_value: MatView<'_>,
    out_value: MatView<'_>,
    out_deriv: MatView<'_>,
    what: GroupDeriv,
) {
    if empty(x) || out_value.cols == 0 {
        return;
    }
    let (r, c) = (x.rows, x.cols);
    let (p, mode) = match what {
        GroupDeriv::Pnorm(p) => (p, 0),
        GroupDeriv::TwoNorm => (2.0, 1),
        GroupDeriv::MaxMask => (0.0, 2),
    };
    let args = [
        pm(x),
        int(x.stride),
        self::p(&in_value),
        int(in_value.stride),
        self::p(&out_value),
        int(out_value.stride),
        self::p(&out_deriv),
        int(out_deriv.stride),
        int(c / out_value.cols),
        int(r),
        int(c),
        Arg::Float(p),
        Arg::Int(mode),
    ];
    gpu().launch("k_group_deriv", grid_2d(r, c), BLOCK_2D, 0, &args);
}

/// A per-block broadcast over `x` (blocks of `p.dim()` columns) by `k_per_block`: mode 0
/// `x·p`, 1 `x·p + q`, 2 `(x − p)·q`, 3 `(x + p)·q + y·s` (unused operands may be any).
pub(in crate::matrix) fn per_block(
    x: &mut MatViewMut<'_>,
    mode: i32,
    vectors: [&Vector; 3],
    y: Option<MatView<'_>>,
) {
    if empty(x) || vectors[0].dim() == 0 {
        return;
    }
    let (r, c) = (x.rows, x.cols);
    let [pv0, pv1, pv2] = vectors.map(on_the_device);
    let (yp, ys) = match &y {
        Some(y) => (self::p(y), int(y.stride)),
        None => (pm(x), int(x.stride)),
    };
    let args = [
        pm(x),
        int(x.stride),
        yp,
        ys,
        pv(&pv0),
        pv(&pv1),
        pv(&pv2),
        int(pv0.dim()),
        int(r),
        int(c),
        Arg::Int(mode),
    ];
    gpu().launch("k_per_block", grid_2d(r, c), BLOCK_2D, 0, &args);
}

/// Per block column j < `n`: `(Σ x, Σ x²)` (no `y`) or `(Σ x·y, Σ y)`, over every row and
/// block of `x`, into two new device vectors.
pub(in crate::matrix) fn block_col_stats(
    x: MatView<'_>,
    y: Option<MatView<'_>>,
    n: usize,
) -> (Vector, Vector) {
    let (a, b) = (Vector::zeros(n), Vector::zeros(n));
    if n == 0 || x.rows == 0 || x.cols == 0 {
        return (a, b);
    }
    let (yp, ys, mode) = match &y {
        Some(y) => (self::p(y), int(y.stride), 1),
        None => (self::p(&x), int(x.stride), 0),
    };
    let args = [
        pv(&a),
        pv(&b),
        self::p(&x),
        int(x.stride),
        yp,
        ys,
        int(n),
        int(x.rows),
        int(x.cols),
        Arg::Int(mode),
    ];
    let blocks = n.div_ceil(ROW_THREADS as usize) as u32;
    gpu().launch(
        "k_block_col_stats",
        (blocks, 1, 1),
        (ROW_THREADS, 1, 1),
        0,
        &args,
    );
    (a, b)
}

/// The LSTM cell for the first `min(rows)` rows of `input` into `x` ([c_t, m_t]); `params`
/// holds the 3 × C peephole weights.
pub(in crate::matrix) fn lstm_cell(
    x: &mut MatViewMut<'_>,
    input: MatView<'_>,
    params: MatView<'_>,
    use_dropout: bool,
) {
    let (r, c) = (input.rows.min(x.rows), params.cols);
    if r == 0 || c == 0 {
        return;
    }
    let args = [
        pm(x),
        int(x.stride),
        p(&input),
        int(input.stride),
        p(&params),
        int(params.stride),
        int(r),
        int(c),
        Arg::Int(i32::from(use_dropout)),
    ];
    gpu().launch("k_lstm_cell", grid_2d(r, c), BLOCK_2D, 0, &args);
}

/// The GRU cell into `x` = [h, c] (n × 2C, the pre-activation in h on entry) from `z` and
/// `c_prev` (n × C).
pub(in crate::matrix) fn gru_cell(x: &mut MatViewMut<'_>, z: MatView<'_>, c_prev: MatView<'_>) {
    let (r, c) = (x.rows, z.cols);
    if r == 0 || c == 0 {
        return;
    }
    let args = [
        pm(x),
        int(x.stride),
        p(&z),
        int(z.stride),
        p(&c_prev),
        int(c_prev.stride),
        int(r),
        int(c),
    ];
    gpu().launch("k_gru_cell", grid_2d(r, c), BLOCK_2D, 0, &args);
}

/// The output-GRU cell into `x` = [h, c] from `input` = [z, hpart, c_prev] and the per-unit
/// weights `w`.
pub(in crate::matrix) fn output_gru_cell(x: &mut MatViewMut<'_>, input: MatView<'_>, w: &Vector) {
    let (r, c) = (x.rows, w.dim());
    if r == 0 || c == 0 {
        return;
    }
    let w = on_the_device(w);
    let args = [
        pm(x),
        int(x.stride),
        p(&input),
        int(input.stride),
        pv(&w),
        int(r),
        int(c),
    ];
    gpu().launch("k_output_gru_cell", grid_2d(r, c), BLOCK_2D, 0, &args);
}

/// Threads per block of `k_lstm_backprop`, each owning one unit.
const LSTM_UNITS: u32 = 64;
/// The fewest rows a `k_lstm_backprop` thread takes: it writes its 13 partial sums once per
/// chunk, which should not cost more than the rows it reads.
const LSTM_MIN_CHUNK: usize = 4;
/// About how many (unit, chunk) threads `k_lstm_backprop` aims for: enough to fill a GPU,
/// while the partial sums (13 doubles each) stay a few MiB.
const LSTM_THREADS: usize = 1 << 16;

/// The LSTM cell's backward pass (`lstm::backprop_lstm_nonlinearity`, shapes checked there).
/// `k_lstm_backprop` writes `in_deriv`'s first 5C columns (when given) and, per chunk of
/// rows, 13 per-unit sums in double; `k_sum_parts` adds the chunks in order on the device and
/// the totals are added on the host into `params_deriv` (3C) and `stats` (the value and
/// derivative sums, 5C each), where given. With dropout, `k_lstm_scale_sums` writes each
/// row's three dropout-scale derivatives into `in_deriv`'s columns 5C..5C+3.
pub(in crate::matrix) fn lstm_backprop(
    a: LstmBackpropInput<'_>,
    in_deriv: Option<&mut MatViewMut<'_>>,
    params_deriv: Option<&mut [f64]>,
    stats: Option<(&mut [f64], &mut [f64])>,
) {
    let (rows, c) = (a.in_value.rows, a.params.cols);
    let wants_sums = params_deriv.is_some() || stats.is_some();
    if rows == 0 || c == 0 || !(in_deriv.is_some() || wants_sums) {
        return;
    }
    let repair = on_the_device(a.self_repair);
    let chunk = rows.div_ceil(LSTM_THREADS.div_ceil(c)).max(LSTM_MIN_CHUNK);
    let chunks = rows.div_ceil(chunk);
    let n = 13 * c;
    let (part, part_class) = gpu().alloc(chunks * n * 8);
    // The scale terms only matter for the input derivative.
    let scale_terms = (a.use_dropout && in_deriv.is_some()).then(|| gpu().alloc(rows * 3 * c * 4));
    // Outputs not wanted get a harmless pointer: the kernel does not write them.
    let (st_ptr, st_stride) = scale_terms.map_or((part, 0), |(ptr, _)| (ptr, 3 * c));
    let mut in_deriv = in_deriv;
    let (id_ptr, id_stride) = match in_deriv.as_deref_mut() {
        Some(d) => (pm(d), int(d.stride)),
        None => (Arg::Ptr(part), Arg::Int(0)),
    };
    let args = [
        id_ptr,
        id_stride,
        Arg::Ptr(st_ptr),
        int(st_stride),
        Arg::Ptr(part),
        p(&a.in_value),
        int(a.in_value.stride),
        p(&a.params),
        int(a.params.stride),
        p(&a.out_deriv),
        int(a.out_deriv.stride),
        pv(&repair),
        int(rows),
        int(c),
        int(chunk),
        Arg::Int(i32::from(a.use_dropout)),
        Arg::Int(i32::from(in_deriv.is_some())),
    ];
    let grid = (
        c.div_ceil(LSTM_UNITS as usize).min(1 << 20) as u32,
        chunks.min(MAX_GRID_Y) as u32,
        1,
    );
    gpu().launch("k_lstm_backprop", grid, (LSTM_UNITS, 1, 1), 0, &args);
    if let (Some(d), Some((st, st_class))) = (in_deriv, scale_terms) {
        let args = [
            pm(d),
            int(d.stride),
            Arg::Ptr(st),
            int(3 * c),
            int(rows),
            int(3),
            int(c),
        ];
        gpu().launch("k_lstm_scale_sums", grid_2d(rows, 3), BLOCK_2D, 0, &args);
        gpu().free(st, st_class);
    }
    if wants_sums {
        if chunks > 1 {
            // No wait: the download below waits for the stream.
            gpu().launch_then(
                "k_sum_parts",
                blocks_for(n),
                (256, 1, 1),
                0,
                &[Arg::Ptr(part), int(chunks), int(n)],
                false,
            );
        }
        let sums = gpu().download::<f64>(part, n);
        if let Some(pd) = params_deriv {
            for (d, s) in pd.iter_mut().zip(&sums[10 * c..]) {
                *d += s;
            }
        }
        if let Some((value_sum, deriv_sum)) = stats {
            for (d, s) in value_sum.iter_mut().zip(&sums[..5 * c]) {
                *d += s;
            }
            for (d, s) in deriv_sum.iter_mut().zip(&sums[5 * c..10 * c]) {
                *d += s;
            }
        }
    }
    gpu().free(part, part_class);
}

/// The GRU cell's backward pass (`gru::backprop_gru_cell`, shapes checked there): `h_deriv`
/// from `x` = [h, out_deriv, z, c_prev], and when `in_deriv` = (matrix, z column, c_prev
/// column) is given, the z and c_prev derivatives added into it.
pub(in crate::matrix) fn gru_backprop(
    h_deriv: &mut MatViewMut<'_>,
    in_deriv: Option<(&mut MatViewMut<'_>, usize, usize)>,
    x: [MatView<'_>; 4],
) {
    let (r, c) = (h_deriv.rows, h_deriv.cols);
    if r == 0 || c == 0 {
        return;
    }
    let [h, od, z, cp] = x;
    let (hd_ptr, hd_stride) = (pm(h_deriv), int(h_deriv.stride));
    // Without `in_deriv` the kernel does not touch its pointer.
    let (id_ptr, id_stride, zc, cpc, add) = match in_deriv {
        Some((d, zc, cpc)) => (pm(d), int(d.stride), zc, cpc, 1),
        None => (hd_ptr, hd_stride, 0, 0, 0),
    };
    let args = [
        hd_ptr,
        hd_stride,
        id_ptr,
        id_stride,
        int(zc),
        int(cpc),
        Arg::Int(add),
        p(&h),
        int(h.stride),
        p(&od),
        int(od.stride),
        p(&z),
        int(z.stride),
        p(&cp),
        int(cp.stride),
        int(r),
        int(c),
    ];
    gpu().launch("k_gru_backprop", grid_2d(r, c), BLOCK_2D, 0, &args);
}

/// `v` where a kernel can read it: itself, or a temporary device copy of a vector kept on
/// the host (statistics bookkeeping).
fn on_the_device(v: &Vector) -> std::borrow::Cow<'_, Vector> {
    if v.data.is_device() {
        std::borrow::Cow::Borrowed(v)
    } else {
        std::borrow::Cow::Owned(Vector::from_vec(v.to_vec()))
    }
}

/// A row gather (`rows` = destination rows) or scatter (`rows` = source rows) by `idx`.
pub(in crate::matrix) fn rows_by_index(
    name: &'static str,
    x: &mut MatViewMut<'_>,
    y: MatView<'_>,
    idx: &[i32],
    alpha: Option<Real>,
) {
    let (r, c) = (idx.len(), x.cols);
    if r == 0 || c == 0 {
        return;
    }
    let (ip, class) = gpu().upload_i32(idx);
    let mut args = vec![
        pm(x),
        int(x.stride),
        p(&y),
        int(y.stride),
        Arg::Ptr(ip),
        int(r),
        int(c),
    ];
    if let Some(a) = alpha {
        args.push(Arg::Float(a));
    }
    gpu().launch(name, grid_2d(r, c), BLOCK_2D, 0, &args);
    gpu().free(ip, class);
}

/// `out = alpha · (sums of m's rows, `by_rows`; or of its columns) + beta · out` (Kaldi's
/// AddRowSumMat: a column's sum over the rows; AddColSumMat: a row's sum over the columns).
pub(in crate::matrix) fn add_sums(
    out: &mut Vector,
    alpha: Real,
    m: MatView<'_>,
    beta: Real,
    over_rows: bool,
) {
    let (r, c) = (m.rows, m.cols);
    let n = if over_rows { c } else { r };
    if n == 0 {
        return;
    }
    let args = [
        pv(out),
        p(&m),
        int(m.stride),
        int(r),
        int(c),
        Arg::Float(alpha),
        Arg::Float(beta),
    ];
    if over_rows {
        col_sums(&args, c, false);
    } else {
        per_row("k_add_col_sum", n, 4, &args);
    }
}

/// The column reduction `k_add_row_sum` over `cols` columns, of squares when `square`.
fn col_sums(args: &[Arg], cols: usize, square: bool) {
    let mut args = args.to_vec();
    args.push(Arg::Int(square as i32));
    gpu().launch(
        "k_add_row_sum",
        (cols.div_ceil(32) as u32, 1, 1),
        (32, 32, 1),
        0,
        &args,
    );
}

/// `out = alpha · (column sums of m's squares) + beta · out` (AddDiagMat2 with Trans::Yes).
pub(in crate::matrix) fn add_col_sumsq(out: &mut Vector, alpha: Real, m: MatView<'_>, beta: Real) {
    if m.cols == 0 {
        return;
    }
    let args = [
        pv(out),
        p(&m),
        int(m.stride),
        int(m.rows),
        int(m.cols),
        Arg::Float(alpha),
        Arg::Float(beta),
    ];
    col_sums(&args, m.cols, true);
}

/// `x = softmax(y)` or `log_softmax(y)` per row; `y` = `None`: of `x` itself.
pub(in crate::matrix) fn softmax_rows(
    x: &mut MatViewMut<'_>,
    y: Option<MatView<'_>>,
    log_form: bool,
) {
    if empty(x) {
        return;
    }
    let (r, c) = (x.rows, x.cols);
    let mut args = vec![pm(x), int(x.stride)];
    args.extend(or_self(x, y));
    args.extend([int(r), int(c), Arg::Int(log_form as i32)]);
    per_row("k_softmax_rows", r, 4, &args);
}

/// The backward pass of `softmax_rows` from the value `y` and output derivative `d`; `d` =
/// `None`: `x` holds it.
pub(in crate::matrix) fn diff_softmax_rows(
    x: &mut MatViewMut<'_>,
    y: MatView<'_>,
    d: Option<MatView<'_>>,
    log_form: bool,
) {
    if empty(x) {
        return;
    }
    let (r, c) = (x.rows, x.cols);
    let mut args = vec![pm(x), int(x.stride), p(&y), int(y.stride)];
    args.extend(or_self(x, d));
    args.extend([int(r), int(c), Arg::Int(log_form as i32)]);
    per_row("k_diff_softmax_rows", r, 4, &args);
}

/// `c = alpha · op(a) · op(b) + beta · c` by cuBLAS (shapes checked by the caller, all ≥ 1).
pub(in crate::matrix) fn gemm(
    c: &mut MatViewMut<'_>,
    alpha: Real,
    (a, ta): (MatView<'_>, Trans),
    (b, tb): (MatView<'_>, Trans),
    beta: Real,
) {
    let k = if ta == Trans::No { a.cols } else { a.rows };
    let (m, n) = (c.rows, c.cols);
    let ptr = |v: &MatView<'_>| v.elems.as_ptr() as u64;
    // A view of one row has no meaningful stride for cuBLAS's leading dimension: use its
    // width, which cuBLAS requires to be at least the row length.
    let ld = |v: &MatView<'_>| if v.rows <= 1 { v.cols.max(1) } else { v.stride };
    let c_ld = if c.rows <= 1 { c.cols.max(1) } else { c.stride };
    gpu().sgemm(
        (m, n, k),
        alpha,
        (ptr(&a), ld(&a), ta == Trans::Yes),
        (ptr(&b), ld(&b), tb == Trans::Yes),
        beta,
        (c.elems.as_mut_ptr() as u64, c_ld),
    );
}

/// Kaldi's NormalizePerRow of `y` (or of `x` itself, without the log column) into `x`.
pub(in crate::matrix) fn normalize(
    x: &mut MatViewMut<'_>,
    y: Option<MatView<'_>>,
    block_dim: usize,
    target_rms: Real,
    add_log: bool,
) {
    let (rows, cols) = (x.rows, y.map_or(x.cols, |y| y.cols));
    if rows == 0 || cols == 0 || block_dim == 0 {
        return;
    }
    let blocks = cols / block_dim;
    let mut args = vec![pm(x), int(x.stride)];
    args.extend(or_self(x, y));
    args.extend([
        int(rows),
        int(blocks),
        int(block_dim),
        Arg::Int(add_log as i32),
    ]);
    args.extend([
        Arg::Float(block_dim as f32 * target_rms * target_rms),
        Arg::Float(target_rms.ln()),
    ]);
    per_row("k_normalize", rows * blocks, 4, &args);
}

/// Kaldi's DiffNormalizePerRow into `x` from the input value `v` and the output derivative
/// `d` (`None`: `x` holds it and is replaced).
pub(in crate::matrix) fn diff_normalize(
    x: &mut MatViewMut<'_>,
    v: MatView<'_>,
    d: Option<MatView<'_>>,
    block_dim: usize,
    target_rms: Real,
    add_log: bool,
) {
    let (rows, cols) = (x.rows, x.cols);
    if rows == 0 || cols == 0 || block_dim == 0 {
        return;
    }
    let (blocks, overwrite) = (cols / block_dim, d.is_none());
    let mut args = vec![pm(x), int(x.stride), p(&v), int(v.stride)];
    args.extend(or_self(x, d));
    args.extend([
        int(rows),
        int(blocks),
        int(block_dim),
        Arg::Int((add_log && !overwrite) as i32),
    ]);
    args.extend([
        Arg::Float(block_dim as f32 * target_rms * target_rms),
        Arg::Int(overwrite as i32),
    ]);
    per_row("k_diff_normalize", rows * blocks, 4, &args);
}

/// What [`row_reduce`] sums per row.
#[derive(Clone, Copy)]
pub(in crate::matrix) enum RowSum<'a> {
    /// Σ x·y.
    Dot(MatView<'a>),
    /// Σ x.
    Plain,
    /// Σ x².
    Squares,
}

/// The per-row sums of `x` (in double), read back to the host.
pub(in crate::matrix) fn row_reduce(x: MatView<'_>, what: RowSum<'_>) -> Vec<f64> {
    let (rows, cols) = (x.rows, x.cols);
    if rows == 0 {
        return Vec::new();
    }
    let (out, class) = gpu().alloc(rows * 8);
    let (yp, ys, mode) = match what {
        RowSum::Dot(y) => (p(&y), y.stride, 0),
        RowSum::Plain => (p(&x), x.stride, 1),
        RowSum::Squares => (p(&x), x.stride, 2),
    };
    let args = [
        Arg::Ptr(out),
        p(&x),
        int(x.stride),
        yp,
        int(ys),
        int(rows),
        int(cols),
        Arg::Int(mode),
    ];
    // No wait: the download below waits for the stream.
    gpu().launch_then(
        "k_row_reduce",
        grid_rows(rows),
        (ROW_THREADS, 1, 1),
        ROW_THREADS * 8,
        &args,
        false,
    );
    let sums = gpu().download::<f64>(out, rows);
    gpu().free(out, class);
    sums
}

/// The elements (r, c, v) as the kernels read them: three ints each, v by its bits.
fn upload_elements(elements: &[(usize, usize, Real)]) -> (u64, usize) {
    let table: Vec<i32> = elements
        .iter()
        .flat_map(|&(r, c, v)| [r as i32, c as i32, v.to_bits() as i32])
        .collect();
    gpu().upload_i32(&table)
}

fn blocks_for(n: usize) -> (u32, u32, u32) {
    (n.div_ceil(256).min(1 << 16) as u32, 1, 1)
}

/// `x[r, c] += alpha · v` for each element; no (r, c) appears twice.
pub(in crate::matrix) fn add_elements(
    x: &mut MatViewMut<'_>,
    alpha: Real,
    elements: &[(usize, usize, Real)],
) {
    if elements.is_empty() {
        return;
    }
    let (table, class) = upload_elements(elements);
    let args = [
        pm(x),
        int(x.stride),
        Arg::Ptr(table),
        int(elements.len()),
        Arg::Float(alpha),
    ];
    gpu().launch(
        "k_add_elements",
        blocks_for(elements.len()),
        (256, 1, 1),
        0,
        &args,
    );
    gpu().free(table, class);
}

/// The products v · x[r, c] of each element, in double, read back in order.
pub(in crate::matrix) fn element_products(
    x: MatView<'_>,
    elements: &[(usize, usize, Real)],
) -> Vec<f64> {
    if elements.is_empty() {
        return Vec::new();
    }
    let (table, class) = upload_elements(elements);
    let (out, out_class) = gpu().alloc(elements.len() * 8);
    let args = [
        Arg::Ptr(out),
        p(&x),
        int(x.stride),
        Arg::Ptr(table),
        int(elements.len()),
    ];
    // No wait: the download below waits for the stream.
    gpu().launch_then(
        "k_dot_elements",
        blocks_for(elements.len()),
        (256, 1, 1),
        0,
        &args,
        false,
    );
    let products = gpu().download::<f64>(out, elements.len());
    gpu().free(out, out_class);
    gpu().free(table, class);
    products
}

/// The elements of `x`, row-major, copied to the host (its pages stay on the GPU).
pub(in crate::matrix) fn download_view(x: MatView<'_>) -> Vec<Real> {
    if x.rows == 0 || x.cols == 0 {
        return Vec::new();
    }
    let span = (x.rows - 1) * x.stride + x.cols;
    let all = gpu().download::<Real>(x.elems.as_ptr() as u64, span);
    if x.stride == x.cols {
        return all;
    }
    (0..x.rows)
        .flat_map(|r| all[r * x.stride..r * x.stride + x.cols].iter().copied())
        .collect()
}

/// Threads per block of the attention kernels: whole warps, which add up the dot products
/// over their lanes.
const ATTENTION_THREADS: u32 = 128;

/// Dynamic shared memory of the attention kernels, `floats` per block, within the 48 KiB a
/// launch gets without asking.
fn attention_shared(floats: usize) -> u32 {
    let bytes = floats * std::mem::size_of::<Real>();
    assert!(
        bytes <= 48 << 10,
        "restricted attention on the GPU: {floats} context positions do not fit in shared memory"
    );
    bytes as u32
}

/// One head of restricted attention forward (`MatViewMut::add_restricted_attention`,
/// shapes checked there) by `k_attention_head`: `out` gets the weighted values (and the
/// weights with output-context), `weights` the softmax weights.
pub(in crate::matrix) fn restricted_attention(
    out: &mut MatViewMut<'_>,
    weights: &mut MatViewMut<'_>,
    input: MatView<'_>,
    queries: MatView<'_>,
    key_dim: usize,
    key_scale: Real,
    row_shift: usize,
) {
    let (n, c) = (weights.rows, weights.cols);
    if n == 0 {
        return;
    }
    let value_dim = input.cols - key_dim;
    let args = [
        pm(out),
        int(out.stride),
        int(out.cols),
        pm(weights),
        int(weights.stride),
        p(&queries),
        int(queries.stride),
        p(&input),
        int(input.stride),
        int(n),
        int(row_shift),
        int(c),
        int(key_dim),
        int(value_dim),
        Arg::Float(key_scale),
    ];
    gpu().launch(
        "k_attention_head",
        grid_rows(n),
        (ATTENTION_THREADS, 1, 1),
        attention_shared(c),
        &args,
    );
}

/// Restricted attention's backward pass over all heads
/// (`MatViewMut::add_restricted_attention_backprop`, shapes checked there), added to
/// `deriv`. `k_attention_backprop_db` computes each (output row, head)'s softmax backprop
/// into a scratch and adds the query terms, which belong to that output row alone;
/// `k_attention_backprop_kv` then gives each key and value derivative element one thread,
/// which adds up the terms of the output rows whose window holds its row. No element has two
/// writers, so there are no atomics and the sums' order is fixed.
#[allow(clippy::too_many_arguments)]
pub(in crate::matrix) fn restricted_attention_backprop(
    deriv: &mut MatViewMut<'_>,
    input: MatView<'_>,
    weights: MatView<'_>,
    out_deriv: MatView<'_>,
    rows_left: usize,
    heads: usize,
    key_dim: usize,
    key_scale: Real,
    row_shift: usize,
) {
    let (n, c) = (weights.rows, weights.cols / heads);
    let rows_in = input.rows;
    if n == 0 {
        return;
    }
    let value_dim = input.cols / heads - 2 * key_dim - c;
    let output_context = Arg::Int(i32::from(out_deriv.cols > heads * value_dim));
    let (db, db_class) = gpu().alloc(n * heads * c * std::mem::size_of::<Real>());
    let args = [
        pm(deriv),
        int(deriv.stride),
        Arg::Ptr(db),
        int(heads * c),
        p(&input),
        int(input.stride),
        p(&weights),
        int(weights.stride),
        p(&out_deriv),
        int(out_deriv.stride),
        int(n),
        int(rows_left),
        int(row_shift),
        int(heads),
        int(c),
        int(key_dim),
        int(value_dim),
        output_context,
        Arg::Float(key_scale),
    ];
    gpu().launch(
        "k_attention_backprop_db",
        grid_rows(n * heads),
        (ATTENTION_THREADS, 1, 1),
        attention_shared(2 * c),
        &args,
    );
    let cols = heads * (key_dim + value_dim);
    if cols > 0 {
        let args = [
            pm(deriv),
            int(deriv.stride),
            p(&input),
            int(input.stride),
            Arg::Ptr(db),
            int(heads * c),
            p(&weights),
            int(weights.stride),
            p(&out_deriv),
            int(out_deriv.stride),
            int(n),
            int(rows_in),
            int(rows_left),
            int(row_shift),
            int(heads),
            int(c),
            int(key_dim),
            int(value_dim),
            output_context,
            Arg::Float(key_scale),
        ];
        gpu().launch(
            "k_attention_backprop_kv",
            grid_2d(rows_in, cols),
            BLOCK_2D,
            0,
            &args,
        );
    }
    gpu().free(db, db_class);
}

/// Groups `(key, value)` pairs by key (every key < `n`), keeping their order within a key,
/// as one table for the scatter kernels: `n + 1` offsets into the values, then the values.
/// A kernel thread that owns key k reads its values in the order the host loop meets them.
pub(in crate::matrix) fn grouped_table(n: usize, pairs: &[(usize, i32)]) -> Vec<i32> {
    let mut offsets = vec![0usize; n + 1];
    for &(k, _) in pairs {
        offsets[k + 1] += 1;
    }
    for k in 0..n {
        offsets[k + 1] += offsets[k];
    }
    let mut table: Vec<i32> = offsets.iter().map(|&o| to_i32(o)).collect();
    table.resize(n + 1 + pairs.len(), 0);
    let mut next = offsets;
    for &(k, v) in pairs {
        table[n + 1 + next[k]] = v;
        next[k] += 1;
    }
    table
}

fn to_i32(n: usize) -> i32 {
    i32::try_from(n).expect("GPU index tables are limited to 2^31 entries")
}

/// Uploads `table` for the length of `f`, which gets its device address.
fn with_table(table: &[i32], f: impl FnOnce(u64)) {
    // An empty upload is not worth a special case in the driver: send one unused entry.
    let table = if table.is_empty() { &[0][..] } else { table };
    let (ptr, class) = gpu().upload_i32(table);
    f(ptr);
    gpu().free(ptr, class);
}

/// `x[:, c] = y[:, idx[c]]`, 0 where `idx[c] = −1` (idx checked by the caller).
pub(in crate::matrix) fn copy_cols(x: &mut MatViewMut<'_>, y: MatView<'_>, idx: &[i32]) {
    if empty(x) {
        return;
    }
    let (r, c) = (x.rows, x.cols);
    with_table(idx, |t| {
        let args = [
            pm(x),
            int(x.stride),
            p(&y),
            int(y.stride),
            Arg::Ptr(t),
            int(r),
            int(c),
        ];
        gpu().launch("k_copy_cols", grid_2d(r, c), BLOCK_2D, 0, &args);
    });
}

/// `x[:, idx[j]] += y[:, j]` for every `idx[j] ≠ −1` (idx checked by the caller), one
/// thread per element of x adding its sources in order.
pub(in crate::matrix) fn add_to_cols(x: &mut MatViewMut<'_>, y: MatView<'_>, idx: &[i32]) {
    if empty(x) {
        return;
    }
    let (r, c) = (x.rows, x.cols);
    let pairs: Vec<(usize, i32)> = idx
        .iter()
        .enumerate()
        .filter(|&(_, &d)| d >= 0)
        .map(|(j, &d)| (d as usize, to_i32(j)))
        .collect();
    with_table(&grouped_table(c, &pairs), |t| {
        let args = [
            pm(x),
            int(x.stride),
            p(&y),
            int(y.stride),
            Arg::Ptr(t),
            int(r),
            int(c),
        ];
        gpu().launch("k_add_to_cols", grid_2d(r, c), BLOCK_2D, 0, &args);
    });
}

/// Checks, before a kernel reads them, the indices of an outer block gather that the host
/// loop would use (those paired with a non-negative index in the other table), against a
/// `src_rows` × `src_cols` matrix of blocks `block` wide.
fn check_outer_indices(
    what: &str,
    (rows, cols): (&[i32], &[i32]),
    (slots, block): (usize, usize),
    (src_rows, src_cols): (usize, usize),
) {
    let used = |t: &[i32], s: usize| t.iter().skip(s).step_by(slots).any(|&v| v >= 0);
    for s in 0..slots {
        if used(cols, s) {
            for &j in rows.iter().skip(s).step_by(slots) {
                assert!(
                    j < 0 || (j as usize) < src_rows,
                    "{what}: row {j} outside {src_rows} rows"
                );
            }
        }
        if used(rows, s) {
            for &c in cols.iter().skip(s).step_by(slots) {
                assert!(
                    c < 0 || c as usize + block <= src_cols,
                    "{what}: block at column {c} outside {src_cols} columns"
                );
            }
        }
    }
}

/// Unfold into `x` from `y` (shapes of the tables checked by the caller): a gather, one
/// thread per element of `x`.
pub(in crate::matrix) fn copy_blocks_outer(
    x: &mut MatViewMut<'_>,
    y: MatView<'_>,
    (block, groups): (usize, usize),
    rows: &[i32],
    cols: &[i32],
) {
    let slots = x.cols / block;
    check_outer_indices(
        "copy_blocks_outer",
        (rows, cols),
        (slots, block),
        (y.rows, y.cols),
    );
    if empty(x) {
        return;
    }
    let (r, c) = (x.rows, x.cols);
    let table = [rows, cols].concat();
    with_table(&table, |t| {
        let args = [
            pm(x),
            int(x.stride),
            p(&y),
            int(y.stride),
            Arg::Ptr(t),
            Arg::Ptr(t + 4 * rows.len() as u64),
            int(r),
            int(c),
            int(block),
            int(groups),
        ];
        gpu().launch("k_copy_blocks_outer", grid_2d(r, c), BLOCK_2D, 0, &args);
    });
}

/// Fold: `x` (the source of an unfold) += `alpha` × the blocks of `y` gathered from it.
/// Blocks may overlap, so one thread per element of `x` finds its contributions through two
/// inverse tables (see `k_add_blocks_outer_to`) and adds them in the host's order.
pub(in crate::matrix) fn add_blocks_outer_to(
    x: &mut MatViewMut<'_>,
    y: MatView<'_>,
    alpha: Real,
    (block, groups): (usize, usize),
    rows: &[i32],
    cols: &[i32],
) {
    let slots = y.cols / block;
    check_outer_indices(
        "add_blocks_outer_to",
        (rows, cols),
        (slots, block),
        (x.rows, x.cols),
    );
    if empty(x) || y.rows == 0 || slots == 0 {
        return;
    }
    let (r, c) = (x.rows, x.cols);
    // Per row of x, the row groups q that name it in some slot, each once, increasing.
    let mut by_row = Vec::new();
    for (q, slot_rows) in rows.chunks(slots).enumerate() {
        for (s, &j) in slot_rows.iter().enumerate() {
            if j >= 0 && !slot_rows[..s].contains(&j) {
                by_row.push((j as usize, to_i32(q)));
            }
        }
    }
    // Per column of x, the (group, slot) pairs whose block covers it, increasing.
    let mut by_col = Vec::new();
    for (gs, &c0) in cols.iter().enumerate() {
        if c0 >= 0 && rows.iter().skip(gs % slots).step_by(slots).any(|&j| j >= 0) {
            by_col.extend((0..block).map(|k| (c0 as usize + k, to_i32(gs))));
        }
    }
    let (rinv, cinv) = (grouped_table(r, &by_row), grouped_table(c, &by_col));
    let table = [rows, cols, &rinv, &cinv].concat();
    let at = |n: usize| 4 * n as u64;
    with_table(&table, |t| {
        let args = [
            pm(x),
            int(x.stride),
            p(&y),
            int(y.stride),
            Arg::Ptr(t),
            Arg::Ptr(t + at(rows.len())),
            Arg::Ptr(t + at(rows.len() + cols.len())),
            Arg::Ptr(t + at(rows.len() + cols.len() + rinv.len())),
            int(r),
            int(c),
            int(block),
            int(groups),
            int(slots),
            Arg::Float(alpha),
        ];
        gpu().launch("k_add_blocks_outer_to", grid_2d(r, c), BLOCK_2D, 0, &args);
    });
}

/// Checks row ranges before a kernel reads them: `out_rows` output rows at least, each
/// range ordered and inside `in_rows` input rows.
fn check_ranges(what: &str, ranges: &[(usize, usize)], in_rows: usize, out_rows: usize) {
    assert!(
        ranges.len() <= out_rows,
        "{what}: {} ranges for {out_rows} output rows",
        ranges.len()
    );
    for &(s, e) in ranges {
        assert!(
            s <= e && e <= in_rows,
            "{what}: range {s}..{e} outside {in_rows} input rows"
        );
    }
}

/// The ranges as the kernels read them: start, end per output row.
fn range_table(ranges: &[(usize, usize)]) -> Vec<i32> {
    ranges
        .iter()
        .flat_map(|&(s, e)| [to_i32(s), to_i32(e)])
        .collect()
}

/// StatisticsExtraction forward: `x` row o adds `[count, Σ y, Σ y² (if x is that wide)]`
/// over `y`'s rows in `ranges[o]`.
pub(in crate::matrix) fn add_row_range_stats(
    x: &mut MatViewMut<'_>,
    y: MatView<'_>,
    ranges: &[(usize, usize)],
) {
    check_ranges("add_row_range_stats", ranges, y.rows, x.rows);
    let (r, c) = (ranges.len(), x.cols);
    if r == 0 || c == 0 {
        return;
    }
    with_table(&range_table(ranges), |t| {
        let args = [
            pm(x),
            int(x.stride),
            p(&y),
            int(y.stride),
            Arg::Ptr(t),
            int(r),
            int(c),
            int(y.cols),
        ];
        gpu().launch("k_add_row_range_stats", grid_2d(r, c), BLOCK_2D, 0, &args);
    });
}

/// Its backward pass into `x` (input rows × d) from the output derivative `od`: each input
/// row is written by the last output row whose range holds it (the host loop overwrites), so
/// the owner is found here and each thread writes one element.
pub(in crate::matrix) fn backprop_row_range_stats(
    x: &mut MatViewMut<'_>,
    od: MatView<'_>,
    ranges: &[(usize, usize)],
    v: Option<MatView<'_>>,
) {
    let what = "backprop_row_range_stats";
    check_ranges(what, ranges, x.rows, od.rows);
    let width = 1 + x.cols * if v.is_some() { 2 } else { 1 };
    assert!(od.cols >= width, "{what}: output derivative too narrow");
    if let Some(v) = &v {
        assert!(v.rows >= x.rows && v.cols >= x.cols, "{what}: input value");
    }
    if empty(x) {
        return;
    }
    let (r, c) = (x.rows, x.cols);
    let mut owner = vec![-1i32; r];
    for (o, &(s, e)) in ranges.iter().enumerate() {
        owner[s..e].fill(to_i32(o));
    }
    let (vp, vs) = match &v {
        Some(v) => (p(v), int(v.stride)),
        None => (p(&od), int(od.stride)),
    };
    with_table(&owner, |t| {
        let args = [
            pm(x),
            int(x.stride),
            p(&od),
            int(od.stride),
            vp,
            vs,
            Arg::Ptr(t),
            int(r),
            int(c),
            Arg::Int(v.is_some() as i32),
        ];
        gpu().launch(
            "k_backprop_row_range_stats",
            grid_2d(r, c),
            BLOCK_2D,
            0,
            &args,
        );
    });
}

/// StatisticsPooling forward into `x` from the extraction statistics `y`; `prefix`: the
/// host's choice of double prefix sums for long windows (computed here by `k_prefix_cols`).
pub(in crate::matrix) fn pool_row_range_stats(
    x: &mut MatViewMut<'_>,
    y: MatView<'_>,
    ranges: &[(usize, usize)],
    opts: crate::matrix::PoolingOptions,
    prefix: bool,
) {
    check_ranges("pool_row_range_stats", ranges, y.rows, x.rows);
    let (r, c) = (ranges.len(), x.cols);
    if r == 0 || c == 0 {
        return;
    }
    let nl = opts.num_log_count_features;
    let fd = (y.cols - 1) / if opts.output_stddevs { 2 } else { 1 };
    let pre = prefix.then(|| {
        let (ptr, class) = gpu().alloc((y.rows + 1) * y.cols * 8);
        let args = [
            Arg::Ptr(ptr),
            p(&y),
            int(y.stride),
            int(y.rows),
            int(y.cols),
        ];
        let blocks = y.cols.div_ceil(ROW_THREADS as usize) as u32;
        gpu().launch(
            "k_prefix_cols",
            (blocks, 1, 1),
            (ROW_THREADS, 1, 1),
            0,
            &args,
        );
        (ptr, class)
    });
    with_table(&range_table(ranges), |t| {
        let args = [
            pm(x),
            int(x.stride),
            p(&y),
            int(y.stride),
            Arg::Ptr(pre.map_or(0, |(ptr, _)| ptr)),
            Arg::Ptr(t),
            int(r),
            int(c),
            int(nl),
            int(fd),
            Arg::Int(opts.output_stddevs as i32),
            Arg::Float(opts.variance_floor),
        ];
        gpu().launch("k_pool_row_range_stats", grid_2d(r, c), BLOCK_2D, 0, &args);
    });
    if let Some((ptr, class)) = pre {
        gpu().free(ptr, class);
    }
}

/// StatisticsPooling backward, added into `x` (input rows × (1 + statistics)): first each
/// output row's derivative with respect to its summed statistics (`k_pool_stats_deriv`, into
/// a scratch matrix), then one thread per element of `x` adds those of the output rows whose
/// ranges hold its row, in order (ranges may overlap).
pub(in crate::matrix) fn backprop_pool_row_range_stats(
    x: &mut MatViewMut<'_>,
    (iv, ov, od): (MatView<'_>, MatView<'_>, MatView<'_>),
    ranges: &[(usize, usize)],
    opts: crate::matrix::PoolingOptions,
) {
    let what = "backprop_pool_row_range_stats";
    let n_out = ranges.len();
    check_ranges(what, ranges, x.rows, od.rows);
    let nl = opts.num_log_count_features;
    let cols = x.cols.saturating_sub(1);
    assert!(od.cols >= nl + cols, "{what}: output derivative too narrow");
    if opts.output_stddevs || nl > 0 {
        assert!(
            ov.rows >= n_out && ov.cols >= nl + cols,
            "{what}: output value"
        );
    }
    if nl == 0 {
        assert!(iv.rows >= x.rows && iv.cols >= 1, "{what}: input value");
    }
    if n_out == 0 || cols == 0 || x.rows == 0 {
        return;
    }
    let fd = cols / if opts.output_stddevs { 2 } else { 1 };
    let (dd, class) = gpu().alloc(n_out * cols * 4);
    let pairs: Vec<(usize, i32)> = ranges
        .iter()
        .enumerate()
        .flat_map(|(o, &(s, e))| (s..e).map(move |i| (i, to_i32(o))))
        .collect();
    let rg = range_table(ranges);
    let inv = grouped_table(x.rows, &pairs);
    let table = [&rg[..], &inv].concat();
    with_table(&table, |t| {
        let args = [
            Arg::Ptr(dd),
            int(cols),
            p(&iv),
            int(iv.stride),
            p(&ov),
            int(ov.stride),
            p(&od),
            int(od.stride),
            Arg::Ptr(t),
            int(n_out),
            int(cols),
            int(nl),
            int(fd),
            Arg::Int(opts.output_stddevs as i32),
        ];
        gpu().launch(
            "k_pool_stats_deriv",
            grid_2d(n_out, cols),
            BLOCK_2D,
            0,
            &args,
        );
        let args = [
            pm(x),
            int(x.stride),
            Arg::Ptr(dd),
            int(cols),
            Arg::Ptr(t + 4 * rg.len() as u64),
            int(x.rows),
            int(cols),
        ];
        gpu().launch(
            "k_add_pool_stats_deriv",
            grid_2d(x.rows, cols),
            BLOCK_2D,
            0,
            &args,
        );
    });
    gpu().free(dd, class);
}

#[cfg(test)]
mod tests {
    use super::grouped_table;

    #[test]
    fn grouped_tables_keep_the_order_within_a_key() {
        let t = grouped_table(4, &[(2, 7), (0, 1), (2, 3), (2, 9), (0, 4)]);
        // Offsets: key 0 has 2 values, key 1 none, key 2 three, key 3 none.
        assert_eq!(&t[..5], &[0, 2, 2, 5, 5]);
        assert_eq!(&t[5..], &[1, 4, 7, 3, 9]);
        assert_eq!(grouped_table(2, &[]), vec![0, 0, 0]);
    }
}
