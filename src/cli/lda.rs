//! The LDA-like input transform most TDNN recipes start with: `compnet acc-lda-stats`
//! (Kaldi's `nnet3-acc-lda-stats`: class-conditional statistics of the network's output, the
//! class being each example's supervision) and `compnet get-feature-transform` (Kaldi's
//! `nnet-get-feature-transform`: the transform that whitens the within-class covariance and
//! diagonalises the between-class one, rows scaled by `--within-class-factor`, singular
//! values ceilinged at `--max-singular-value`, and a last column that removes the mean).
//!
//! Statistics file (Kaldi's `LdaEstimate`): `<LDAACCS> <VECSIZE> d <NUMCLASSES> c
//! <ZERO_ACCS>` counts per class, `<FIRST_ACCS>` sums per class (c×d), `<SECOND_ACCS>` the
//! within-class scatter (a packed lower triangle), `</LDAACCS>`; kept in double, written in
//! float as Kaldi writes them.

use crate::cli::args::command_args;
use crate::cli::kaldi_args::KaldiBool;
use crate::compile::cache::{CachingCompiler, CachingCompilerOptions};
use crate::compile::kaldi_draws::KaldiCompileDraws;
use crate::compile::request::{ComputationRequest, IoSpecification};
use crate::error::{Error, Result};
use crate::io::egs::NnetExample;
use crate::io::egs::SequentialNnetExampleReader;
use crate::io::sparse::GeneralMatrix;
use crate::io::{TokenReader, TokenWriter};
use crate::kaldi_rand::GlibcRand;
use crate::log::{fmt_g, log};
use crate::matrix::{symmetric_eigen, Matrix};
use crate::run::NnetComputer;
use crate::train::step::run_forward;

/// Largest feature dimension accepted in a statistics file (its packed matrix is d²/2).
const MAX_DIM: i32 = 1 << 14;
/// Largest number of classes accepted in a statistics file.
const MAX_CLASSES: i32 = 1 << 22;

/// Kaldi's `LdaEstimate`: counts, sums and the summed outer product, in double.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LdaStats {
    pub dim: usize,
    pub num_classes: usize,
    /// Count per class.
    pub zero: Vec<f64>,
    /// Sum per class, class-major (`num_classes × dim`).
    pub first: Vec<f64>,
    /// Lower triangle, row by row (element (i, j), j ≤ i, at i(i+1)/2 + j), of the
    /// within-class scatter Σ w·x·xᵀ − Σ_c first_c·first_cᵀ / zero_c, as Kaldi f4007661 writes
    /// `<SECOND_ACCS>` (measured against its files); while accumulating, Σ w·x·xᵀ (see
    /// [`LdaStats::finish`]).
    pub second: Vec<f64>,
}

impl LdaStats {
    pub fn new(num_classes: usize, dim: usize) -> Self {
        LdaStats {
            dim,
            num_classes,
            zero: vec![0.0; num_classes],
            first: vec![0.0; num_classes * dim],
            second: vec![0.0; dim * (dim + 1) / 2],
        }
    }

    /// Total count.
    pub fn tot_count(&self) -> f64 {
        self.zero.iter().sum()
    }

    /// Adds `x` to class `class` with weight `w`.
    pub fn accumulate(&mut self, x: &[f32], class: usize, w: f32) {
        let w = w as f64;
        self.zero[class] += w;
        let row = &mut self.first[class * self.dim..(class + 1) * self.dim];
        for (a, &v) in row.iter_mut().zip(x) {
            *a = w.mul_add(v as f64, *a);
        }
        let mut k = 0;
        for i in 0..self.dim {
            let wi = w * x[i] as f64;
            for &xj in &x[..=i] {
                self.second[k] = wi.mul_add(xj as f64, self.second[k]);
                k += 1;
            }
        }
    }

    /// Turns the accumulated Σ w·x·xᵀ into the within-class scatter the file holds.
    pub fn finish(&mut self) {
        for c in 0..self.num_classes {
            let z = self.zero[c];
            if z == 0.0 {
                continue;
            }
            let alpha = -1.0 / z;
            let f = &self.first[c * self.dim..(c + 1) * self.dim];
            let mut k = 0;
            for i in 0..self.dim {
                let t = alpha * f[i];
                for &fj in &f[..=i] {
                    self.second[k] = t.mul_add(fj, self.second[k]);
                    k += 1;
                }
            }
        }
    }

    /// The within-class covariance (the scatter / count) in full (n×n, row-major).
    fn within_covariance(&self, count: f64) -> Vec<f64> {
        let n = self.dim;
        let mut m = vec![0.0f64; n * n];
        let mut k = 0;
        for i in 0..n {
            for j in 0..=i {
                let v = self.second[k] / count;
                m[i * n + j] = v;
                m[j * n + i] = v;
                k += 1;
            }
        }
        m
    }

    /// Writes the statistics as Kaldi's `LdaEstimate::Write` (values in float).
    pub fn write(&self, w: &mut TokenWriter) {
        w.token("<LDAACCS>");
        w.token("<VECSIZE>");
        w.i32(self.dim as i32);
        w.token("<NUMCLASSES>");
        w.i32(self.num_classes as i32);
        w.token("<ZERO_ACCS>");
        w.vector(&self.zero.iter().map(|&x| x as f32).collect::<Vec<_>>());
        w.token("<FIRST_ACCS>");
        w.matrix(&Matrix::from_vec(
            self.num_classes,
            self.dim,
            self.first.iter().map(|&x| x as f32).collect(),
        ));
        w.token("<SECOND_ACCS>");
        let packed: Vec<f32> = self.second.iter().map(|&x| x as f32).collect();
        write_packed(w, self.dim, &packed);
        w.token("</LDAACCS>");
    }

    /// Reads statistics written by Kaldi or by [`LdaStats::write`].
    pub fn read(r: &mut TokenReader<'_>) -> Result<LdaStats> {
        r.expect_token("<LDAACCS>")?;
        r.expect_token("<VECSIZE>")?;
        let at = r.pos();
        let dim = r.i32()?;
        r.expect_token("<NUMCLASSES>")?;
        let at_c = r.pos();
        let nc = r.i32()?;
        if !(1..=MAX_DIM).contains(&dim) {
            return Err(r.err_at(at, format!("a dimension in 1..={MAX_DIM} (got {dim})")));
        }
        if !(1..=MAX_CLASSES).contains(&nc) {
            return Err(r.err_at(
                at_c,
                format!("a number of classes in 1..={MAX_CLASSES} (got {nc})"),
            ));
        }
        let (dim, nc) = (dim as usize, nc as usize);
        r.expect_token("<ZERO_ACCS>")?;
        let at = r.pos();
        let zero = r.vector_f64()?;
        if zero.len() != nc {
            return Err(r.err_at(at, format!("{nc} class counts (got {})", zero.len())));
        }
        r.expect_token("<FIRST_ACCS>")?;
        let at = r.pos();
        let (rows, cols, first) = r.matrix_f64()?;
        if (rows, cols) != (nc, dim) {
            return Err(r.err_at(
                at,
                format!("a {nc}x{dim} matrix of class sums (got {rows}x{cols})"),
            ));
        }
        r.expect_token("<SECOND_ACCS>")?;
        let second = read_packed(r, dim)?;
        r.expect_token("</LDAACCS>")?;
        Ok(LdaStats {
            dim,
            num_classes: nc,
            zero,
            first,
            second,
        })
    }

    /// Adds `other` (same dimension and number of classes).
    pub fn add(&mut self, other: &LdaStats) -> std::result::Result<(), String> {
        if (self.dim, self.num_classes) != (other.dim, other.num_classes) {
            return Err(format!(
                "statistics of dimension {} with {} classes, not {} with {}",
                self.dim, self.num_classes, other.dim, other.num_classes
            ));
        }
        for (a, b) in [
            (&mut self.zero, &other.zero),
            (&mut self.first, &other.first),
            (&mut self.second, &other.second),
        ] {
            a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        }
        Ok(())
    }
}

/// A packed symmetric matrix of dimension `dim`: binary `FP`/`DP`, the dimension and the
/// lower triangle; text `[` the lower triangle row by row `]`.
fn read_packed(r: &mut TokenReader<'_>, dim: usize) -> Result<Vec<f64>> {
    let n = dim * (dim + 1) / 2;
    if r.is_binary() {
        let at = r.pos();
        let tok = r.token()?;
        let width = match tok.as_str() {
            "FP" => 4,
            "DP" => 8,
            _ => return Err(r.err_at(at, "FP or DP (a packed matrix)")),
        };
        let at = r.pos();
        let d = r.i32()?;
        if d != dim as i32 {
            return Err(r.err_at(at, format!("a packed matrix of dimension {dim} (got {d})")));
        }
        if n * width > r.rest().len() {
            return Err(r.err(format!("{n} packed values ({} bytes)", n * width)));
        }
        let b = r.bytes(n * width)?;
        Ok(if width == 4 {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                .collect()
        } else {
            b.chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect()
        })
    } else {
        r.open_bracket("a packed matrix")?;
        let mut v = Vec::with_capacity(n);
        loop {
            r.skip_ws();
            if r.rest().first() == Some(&b']') {
                r.set_pos(r.pos() + 1);
                break;
            }
            if v.len() == n {
                return Err(r.err(format!("']' after the {n} values of a packed matrix")));
            }
            v.push(r.f64()?);
        }
        if v.len() != n {
            return Err(r.err(format!(
                "{n} values in a packed matrix of dimension {dim} (got {})",
                v.len()
            )));
        }
        Ok(v)
    }
}

/// Kaldi's `RandPrune`: a weight below `thresh` in magnitude becomes ±`thresh` with
/// probability |w|/thresh, else 0.
fn rand_prune(w: f32, thresh: f32, rng: &mut GlibcRand) -> f32 {
    if w == 0.0 || w.abs() >= thresh {
        return w;
    }
    let u = ((rng.rand() as f64 + 1.0) / (i32::MAX as f64 + 2.0)) as f32;
    if u <= w.abs() / thresh {
        if w >= 0.0 {
            thresh
        } else {
            -thresh
        }
    } else {
        0.0
    }
}

/// The request for one example: its inputs as given, the output node `output` at the
/// supervision's indexes (the output's dimension is the features', not the classes').
fn lda_request(nnet: &crate::nnet::Nnet, eg: &NnetExample) -> Result<ComputationRequest> {
    let mut request = ComputationRequest::default();
    for io in &eg.io {
        let node = nnet.node_index(&io.name);
        if io.name == "output" {
            request.outputs.push(IoSpecification {
                name: io.name.clone(),
                indexes: io.indexes.clone(),
                has_deriv: false,
            });
        } else if node.is_some_and(|n| nnet.is_input_node(n)) {
            let dim = nnet.node_dim(node.unwrap_or_default());
            if io.features.num_cols() != dim {
                return Err(Error::Compute(format!(
                    "the example's '{}' has dimension {} but the network's node has {dim}",
                    io.name,
                    io.features.num_cols()
                )));
            }
            request.inputs.push(IoSpecification {
                name: io.name.clone(),
                indexes: io.indexes.clone(),
                has_deriv: false,
            });
        } else {
            return Err(Error::Compute(format!(
                "the example has '{}' but the network has no input node of that name",
                io.name
            )));
        }
    }
    Ok(request)
}

command_args! {
    /// Options of `compnet acc-lda-stats`.
    #[usage("compnet acc-lda-stats [options] <raw-nnet-in> <training-examples-in> <lda-stats-out>")]
    #[example("compnet acc-lda-stats 0.raw ark:1.egs 1.acc")]
    pub struct AccArgs {
        /// Write the statistics in binary.
        #[arg(long, kaldi_bool = "true")]
        pub binary: bool,
        /// Randomized pruning threshold for the supervision's weights (drawn from the C library's
        /// `rand()` stream with its default seed, after the compiler's draws, as in Kaldi's
        /// tool).
        #[arg(long = "rand-prune", default_value_t = 0.0)]
        pub rand_prune: f32,
        /// `<raw-nnet-in> <training-examples-in> <lda-stats-out>`.
        pub args: Vec<String>,
    }
}

/// Runs `acc-lda-stats`.
pub fn run_acc(a: AccArgs) -> Result<i32> {
    const P: &str = "compnet acc-lda-stats";
    let [model_in, egs_rspec, out] = AccArgs::positionals(&a.args)?;
    if a.rand_prune.is_nan() || a.rand_prune < 0.0 {
        return Err(Error::Usage(format!(
            "--rand-prune={} : the pruning threshold must be >= 0",
            a.rand_prune
        )));
    }
    let nnet = super::average::read_raw(model_in)?;
    if nnet
        .node_index("output")
        .is_none_or(|i| !nnet.is_output_node(i))
    {
        return Err(Error::Compute(format!(
            "{model_in} has no output node named 'output'"
        )));
    }
    let compiler = CachingCompiler::new(CachingCompilerOptions::default());
    // Kaldi's tool never seeds `rand()`; its compiler's consistency checks draw from the
    // same stream as the pruning, so they are replayed before each example's pruning.
    let mut rng = GlibcRand::new(1);
    let mut compile_draws = KaldiCompileDraws::default();
    let mut stats: Option<LdaStats> = None;
    let mut num_egs = 0u64;
    for item in SequentialNnetExampleReader::open(egs_rspec)? {
        let (key, eg) = item.map_err(|e| Error::Compute(format!("{egs_rspec}: {e}")))?;
        let in_eg = |e: Error| Error::Compute(format!("{egs_rspec}: example {key}: {e}"));
        let sup = eg.get("output").ok_or_else(|| {
            Error::Compute(format!(
                "{egs_rspec}: example {key} has no supervision named 'output'"
            ))
        })?;
        let request = lda_request(&nnet, &eg).map_err(in_eg)?;
        let computation = compiler.compile(&nnet, &request).map_err(in_eg)?;
        compile_draws.draw(
            &nnet,
            &request,
            compiler.options().use_shortcut,
            &mut |r| compiler.peek(r),
            &mut rng,
        );
        let mut computer = NnetComputer::new(&computation, &nnet, None);
        run_forward(&mut computer, &request, &eg).map_err(in_eg)?;
        let output = computer.output("output").map_err(in_eg)?;
        let (rows, dim) = (output.num_rows(), output.num_cols());
        let values = output.to_vec();
        let num_classes = sup.features.num_cols();
        if sup.features.num_rows() != rows {
            return Err(in_eg(Error::Compute(format!(
                "{} supervision rows for {rows} output rows",
                sup.features.num_rows()
            ))));
        }
        let st = stats.get_or_insert_with(|| LdaStats::new(num_classes, dim));
        if (st.num_classes, st.dim) != (num_classes, dim) {
            return Err(in_eg(Error::Compute(format!(
                "{num_classes} classes and output dimension {dim}, where earlier examples had \
                 {} and {}",
                st.num_classes, st.dim
            ))));
        }
        let mut add = |r: usize, class: usize, w: f32, st: &mut LdaStats| {
            let w = rand_prune(w, a.rand_prune, &mut rng);
            if w != 0.0 {
                st.accumulate(&values[r * dim..(r + 1) * dim], class, w);
            }
        };
        match &sup.features {
            GeneralMatrix::Sparse(m) => {
                for (r, row) in m.rows.iter().enumerate() {
                    for &(class, w) in &row.pairs {
                        if class < 0 || class as usize >= num_classes {
                            return Err(in_eg(Error::Compute(format!(
                                "class {class} outside 0..{num_classes}"
                            ))));
                        }
                        add(r, class as usize, w, st);
                    }
                }
            }
            other => {
                let m = other.to_matrix();
                for r in 0..rows {
                    for c in 0..num_classes {
                        add(r, c, m.get(r, c), st);
                    }
                }
            }
        }
        num_egs += 1;
    }
    log(P, &format!("Processed {num_egs} examples."));
    let mut stats = match stats {
        Some(s) if s.tot_count() != 0.0 => s,
        _ => return Err(Error::Compute("Accumulated no stats.".into())),
    };
    stats.finish();
    let mut w = TokenWriter::new(a.binary);
    w.binary_header();
    stats.write(&mut w);
    crate::io::table::write_bytes(out, &w.into_bytes())?;
    log(
        P,
        &format!(
            "Accumulated stats, soft frame count = {}.  Wrote to {out}",
            fmt_g(stats.tot_count())
        ),
    );
    Ok(0)
}

command_args! {
    /// Options of `compnet get-feature-transform`.
    #[usage("compnet get-feature-transform [options] <matrix-out> <lda-acc-1> <lda-acc-2> ...")]
    #[example("compnet get-feature-transform --dim=40 lda.mat 1.acc 2.acc")]
    pub struct TransformArgs {
        /// Write the matrix in binary.
        #[arg(long, kaldi_bool = "true")]
        pub binary: bool,
        /// Dimension to project to (-1: the full dimension).
        #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
        pub dim: i32,
        /// If > 0, the largest singular value the transform may have (larger ones are set to it).
        #[arg(
            long = "max-singular-value",
            default_value_t = 5.0,
            allow_negative_numbers = true
        )]
        pub max_singular_value: f32,
        /// Append a column that makes the projected data's mean zero.
        #[arg(long = "remove-offset", kaldi_bool = "true")]
        pub remove_offset: bool,
        /// 1.0: conventional LDA (unit within-class variance after the transform); smaller
        /// scales the directions with little between-class variance down.
        #[arg(long = "within-class-factor", default_value_t = 0.001)]
        pub within_class_factor: f32,
        /// Write the Cholesky factor of the within-class covariance here (a packed lower
        /// triangle; empty when the covariance needed smoothing).
        #[arg(long = "write-cholesky", default_value = "")]
        pub write_cholesky: String,
        /// Write the within-class covariance here (a symmetric packed matrix, the product of
        /// the Cholesky factor with its transpose).
        #[arg(long = "write-within-covar", default_value = "")]
        pub write_within_covar: String,
        /// `<matrix-out> <lda-acc-1> [<lda-acc-2> ...]`.
        pub args: Vec<String>,
    }
}

/// Writes a packed lower triangle of dimension `dim` (`values`: row after row, element
/// (i, j ≤ i)) as Kaldi's `PackedMatrix<float>::Write`: `FP`, the dimension and the floats
/// in binary; in text `[`, one line per row and `]` after the last (`[ ]` when empty).
fn write_packed(w: &mut TokenWriter, dim: usize, values: &[f32]) {
    if w.is_binary() {
        w.token("FP");
        w.i32(dim as i32);
        let mut bytes = Vec::with_capacity(values.len() * 4);
        for &x in values {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        w.raw(&bytes);
    } else if dim == 0 {
        w.raw(b"[ ]\n");
    } else {
        let mut s = String::from("[\n");
        let mut k = 0;
        for i in 0..dim {
            for _ in 0..=i {
                s += &crate::io::codec::fmt_float(f64::from(values[k]));
                s.push(' ');
                k += 1;
            }
            if i + 1 == dim {
                s.push(']');
            }
            s.push('\n');
        }
        w.raw(s.as_bytes());
    }
}

/// Lower Cholesky factor of the n×n row-major SPD matrix `a`, or None if not positive
/// definite.
fn cholesky(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0f64; n * n];
    for i in 0..n {
        for j in 0..=i {
            let mut s = a[i * n + j];
            for k in 0..j {
                s -= l[i * n + k] * l[j * n + k];
            }
            if i == j {
                if s.is_nan() || s <= 0.0 {
                    return None;
                }
                l[i * n + i] = s.sqrt();
            } else {
                l[i * n + j] = s / l[j * n + j];
            }
        }
    }
    Some(l)
}

/// Inverse of a lower-triangular n×n matrix (row-major).
fn invert_lower(l: &[f64], n: usize) -> Vec<f64> {
    let mut inv = vec![0.0f64; n * n];
    for c in 0..n {
        // Solve L x = e_c by forward substitution; x is column c of the inverse.
        for i in c..n {
            let mut s = if i == c { 1.0 } else { 0.0 };
            for k in c..i {
                s -= l[i * n + k] * inv[k * n + c];
            }
            inv[i * n + c] = s / l[i * n + i];
        }
    }
    inv
}

/// The estimated transform (rows × (dim + 1) with the offset column) and the log lines, and
/// the lower Cholesky factor of the within-class covariance, packed row by row, when it was
/// positive definite as it stands (empty when it needed smoothing first: Kaldi keeps the
/// factor only from its first attempt).
pub fn estimate_transform(
    stats: &LdaStats,
    a: &TransformArgs,
    program: &str,
) -> Result<(Matrix, Vec<f64>)> {
    let n = stats.dim;
    let count = stats.tot_count();
    log(program, &format!("Data count is {}", fmt_g(count)));
    if count.is_nan() || count <= 0.0 {
        return Err(Error::Compute("the statistics have no count".into()));
    }
    let target = if a.dim <= 0 { n } else { a.dim as usize };
    if target > n {
        return Err(Error::Usage(format!(
            "--dim={target} is more than the statistics' dimension {n}"
        )));
    }
    // Mean and between-class covariance.
    let mut mean = vec![0.0f64; n];
    for c in 0..stats.num_classes {
        for (m, &f) in mean.iter_mut().zip(&stats.first[c * n..(c + 1) * n]) {
            *m += f;
        }
    }
    mean.iter_mut().for_each(|m| *m /= count);
    let mut within = stats.within_covariance(count);
    let mut between = vec![0.0f64; n * n];
    for c in 0..stats.num_classes {
        let z = stats.zero[c];
        if z == 0.0 {
            continue;
        }
        let cm: Vec<f64> = stats.first[c * n..(c + 1) * n]
            .iter()
            .map(|&f| f / z)
            .collect();
        let w = z / count;
        for i in 0..n {
            for j in 0..n {
                between[i * n + j] += w * cm[i] * cm[j];
            }
        }
    }
    for i in 0..n {
        for j in 0..n {
            between[i * n + j] -= mean[i] * mean[j];
        }
    }
    let mut factor = Vec::new();
    let l = match cholesky(&within, n) {
        Some(l) => {
            for i in 0..n {
                factor.extend_from_slice(&l[i * n..=i * n + i]);
            }
            l
        }
        None => {
            let trace: f64 = (0..n).map(|i| within[i * n + i]).sum();
            let smooth = (1.0e-3 * trace / n as f64) as f32;
            log(
                program,
                &format!(
                    "Cholesky failed (possibly not +ve definite), so adding {} to diagonal and \
                     trying again.\n",
                    fmt_g(smooth as f64)
                ),
            );
            for i in 0..n {
                within[i * n + i] += smooth as f64;
            }
            cholesky(&within, n).ok_or_else(|| {
                Error::Compute(
                    "the within-class covariance is not positive definite even after smoothing"
                        .into(),
                )
            })?
        }
    };
    let linv = invert_lower(&l, n);
    // S = L⁻¹ B L⁻ᵀ.
    let mut tmp = vec![0.0f64; n * n];
    for i in 0..n {
        for j in 0..n {
            let mut s = 0.0;
            for k in 0..=i {
                s += linv[i * n + k] * between[k * n + j];
            }
            tmp[i * n + j] = s;
        }
    }
    let mut s_mat = vec![0.0f64; n * n];
    for i in 0..n {
        for j in 0..=i {
            let mut s = 0.0;
            for k in 0..=j {
                s += tmp[i * n + k] * linv[j * n + k];
            }
            s_mat[i * n + j] = s;
            s_mat[j * n + i] = s;
        }
    }
    // S is positive semi-definite: its singular values are the magnitudes of its eigenvalues.
    let eig = symmetric_eigen(&s_mat, n);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&x, &y| eig.values[y].abs().total_cmp(&eig.values[x].abs()));
    let d: Vec<f64> = order.iter().map(|&k| eig.values[k].abs()).collect();
    let list: String = d.iter().map(|v| format!("{} ", fmt_g(*v))).collect();
    log(program, &format!("LDA singular values are  [ {list}]\n"));
    log(
        program,
        &format!("Sum of all singular values is {}", fmt_g(d.iter().sum())),
    );
    log(
        program,
        &format!(
            "Sum of selected singular values is {}",
            fmt_g(d[..target].iter().sum())
        ),
    );
    // Rows: uᵀ L⁻¹ for the leading eigenvectors u, scaled for the within-class factor.
    let mut m = vec![0.0f32; target * n];
    for (r, &k) in order.iter().take(target).enumerate() {
        for c in 0..n {
            let mut s = 0.0f64;
            for i in c..n {
                s += eig.vectors[i * n + k] * linv[i * n + c];
            }
            m[r * n + c] = s as f32;
        }
        if a.within_class_factor != 1.0 {
            let dv = d[r] as f32;
            let scale = ((a.within_class_factor + dv) / (1.0 + dv)).sqrt();
            m[r * n..(r + 1) * n].iter_mut().for_each(|x| *x *= scale);
        }
    }
    if a.max_singular_value > 0.0 && target > 0 {
        ceil_singular_values(&mut m, target, n, a.max_singular_value, program);
    }
    let cols = if a.remove_offset { n + 1 } else { n };
    let mut out = vec![0.0f32; target * cols];
    for r in 0..target {
        out[r * cols..r * cols + n].copy_from_slice(&m[r * n..(r + 1) * n]);
        if a.remove_offset {
            let mut p = 0.0f32;
            for c in 0..n {
                p += m[r * n + c] * mean[c] as f32;
            }
            out[r * cols + n] = -p;
        }
    }
    Ok((Matrix::from_vec(target, cols, out), factor))
}

/// Sets the singular values of the rows×cols matrix `m` above `ceiling` to it (through the
/// eigen decomposition of m·mᵀ: m = U s Vᵀ, so m' = U diag(min(s, c)/s) Uᵀ m).
fn ceil_singular_values(m: &mut [f32], rows: usize, cols: usize, ceiling: f32, program: &str) {
    let mut g = vec![0.0f64; rows * rows];
    for i in 0..rows {
        for j in 0..rows {
            g[i * rows + j] = (0..cols)
                .map(|c| m[i * cols + c] as f64 * m[j * cols + c] as f64)
                .sum();
        }
    }
    let eig = symmetric_eigen(&g, rows);
    let s: Vec<f64> = eig.values.iter().map(|v| v.max(0.0).sqrt()).collect();
    let max_s = s.iter().copied().fold(0.0, f64::max);
    let n = s.iter().filter(|&&x| x > ceiling as f64).count();
    if n == 0 {
        return;
    }
    log(
        program,
        &format!(
            "Applied ceiling to {n} out of {} singular values of transform using ceiling {}, \
             max is {}",
            rows.min(cols),
            fmt_g(ceiling as f64),
            fmt_g(max_s as f32 as f64)
        ),
    );
    // P = U diag(f) Uᵀ with f = min(s, c)/s (1 where s is not above the ceiling).
    let mut p = vec![0.0f64; rows * rows];
    for (k, &sk) in s.iter().enumerate() {
        let f = if sk > ceiling as f64 {
            ceiling as f64 / sk
        } else {
            1.0
        };
        for i in 0..rows {
            for j in 0..rows {
                p[i * rows + j] += f * eig.vectors[i * rows + k] * eig.vectors[j * rows + k];
            }
        }
    }
    let old: Vec<f64> = m.iter().map(|&x| x as f64).collect();
    for i in 0..rows {
        for c in 0..cols {
            m[i * cols + c] = (0..rows)
                .map(|k| p[i * rows + k] * old[k * cols + c])
                .sum::<f64>() as f32;
        }
    }
}

/// Runs `get-feature-transform`.
pub fn run_transform(a: TransformArgs) -> Result<i32> {
    const P: &str = "compnet get-feature-transform";
    let [out, accs @ ..] = a.args.as_slice() else {
        return Err(Error::Usage(format!("usage: {}", TransformArgs::USAGE)));
    };
    if accs.is_empty() {
        return Err(Error::Usage(format!("usage: {}", TransformArgs::USAGE)));
    }
    let mut stats: Option<LdaStats> = None;
    for acc in accs {
        let (bytes, start, name) = crate::io::table::read_rxfilename(acc)?;
        let mut r = TokenReader::detect(&bytes[start..], name.clone())?;
        let s = LdaStats::read(&mut r)?;
        match &mut stats {
            None => stats = Some(s),
            Some(t) => t
                .add(&s)
                .map_err(|m| Error::Compute(format!("{name}: {m}")))?,
        }
    }
    let stats = stats.expect("at least one accumulator");
    let (m, factor) = estimate_transform(&stats, &a, P)?;
    // The optional outputs first, so that a bad path for them leaves no transform behind.
    let dim = if factor.is_empty() { 0 } else { stats.dim };
    let c: Vec<f32> = factor.iter().map(|&x| x as f32).collect();
    if !a.write_cholesky.is_empty() {
        write_packed_object(&a.write_cholesky, a.binary, dim, &c)?;
    }
    if !a.write_within_covar.is_empty() {
        // C·Cᵀ of the factor as written (in floats), lower triangle.
        let mut covar = Vec::with_capacity(c.len());
        let row = |i: usize| &c[i * (i + 1) / 2..i * (i + 1) / 2 + i + 1];
        for i in 0..dim {
            for j in 0..=i {
                let (ri, rj) = (row(i), row(j));
                let dot: f64 = (0..=j).map(|k| f64::from(ri[k]) * f64::from(rj[k])).sum();
                covar.push(dot as f32);
            }
        }
        write_packed_object(&a.write_within_covar, a.binary, dim, &covar)?;
    }
    crate::io::table::write_object(out, a.binary, &m)?;
    Ok(0)
}

/// Writes a packed matrix ([`write_packed`]) to `wxfilename` as Kaldi's `WriteKaldiObject`
/// does (binary header first in binary).
fn write_packed_object(wxfilename: &str, binary: bool, dim: usize, values: &[f32]) -> Result<()> {
    let mut w = TokenWriter::new(binary);
    w.binary_header();
    write_packed(&mut w, dim, values);
    crate::io::table::write_bytes(wxfilename, &w.into_bytes())
}
