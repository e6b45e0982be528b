//! The online natural-gradient preconditioner of Povey, Zhang & Khudanpur, "Parallel training
//! of DNNs with Natural Gradient and Parameter Averaging" (ICLR 2015 workshop, arXiv 1410.7455,
//! appendix), the method behind Kaldi's NG components.
//!
//! For one side of a weight matrix (the input rows, or the output-derivative rows) it keeps an
//! estimate of the D×D scatter matrix of the rows, low rank plus a scaled identity:
//!
//! ```text
//! F = Rᵀ·diag(d)·R + ρ·I        R: rank×D with orthonormal rows, d > 0, ρ > 0
//! ```
//!
//! and replaces each minibatch X (N×D) by a multiple of X·G⁻¹, where G = F + α/D·tr(F)·I is F
//! smoothed towards the identity. With β = ρ + α/D·tr(F) the inverse is cheap:
//! β·G⁻¹ = I − Rᵀ·diag(e)·R with e_i = d_i/(d_i + β), so the output is
//! `X̂ = X − (X·Rᵀ)·diag(e)·R` and the returned γ = ‖X‖_F/‖X̂‖_F is what the caller multiplies
//! its learning rate by (the norm of the step is kept, only its direction changes).
//!
//! X is preconditioned with the estimate from earlier minibatches (so X does not precondition
//! itself); then, on updating minibatches, the estimate takes one power-iteration step towards
//! T = η·XᵀX/N + (1−η)·F with η = min(0.9, 1 − exp(−N/num_samples_history)):
//! Y = R·T, Z = Y·Yᵀ = U·diag(c)·Uᵀ, R' = diag(c)^-½·Uᵀ·Y (orthonormal rows spanning R·T),
//! ρ' = max(ε, (tr T − Σ√c)/(D − rank)) (the trace T has outside the new subspace, spread over
//! the other D − rank directions) and d' = max(max(ε, δ·max√c), √c − ρ') (so that, when no
//! floor binds, tr F' = tr T: the estimate keeps the trace of its target). ε = 1e-10 and
//! δ = 5e-4 are the paper's floors; c is floored at ((1−η)·ρ)², the least value it can have
//! since T ⪰ (1−η)·ρ·I.
//!
//! Readings where the paper leaves details open, chosen to behave as Kaldi's `nnet3-train`:
//! * Updating minibatches: calls 0 to 10 (the first eleven), then every `update_period`-th call
//!   counted from call 10 (14, 18, … for period 4). This, the initialisation below and the
//!   floors were checked against Kaldi's `nnet3-train` on a NaturalGradientAffine layer
//!   (periods 1, 3, 4, 5; 2 to 40 minibatches): parameters agree to 4e-7 of their size.
//! * Initialisation from the first minibatch X₀: starting from R₀ (row i weighs column i by 1.1
//!   and columns i+rank, i+2·rank, … by 1, normalised), d = ρ = ε, the update above is applied
//!   three times to X₀ (once if N ≤ rank, where one step already gives X₀'s row space); then X₀
//!   is preconditioned and absorbed like any other minibatch.
//! * Rank: at most D − 1 (one direction must be left for ρ); with D = 1 or rank 0 the
//!   preconditioner is the identity (γ = 1).
//! * Frozen (backstitch's first pass): the estimate is used but not updated, and the call does
//!   not count towards `update_period`; a frozen preconditioner still initialises itself.
//! * Non-finite input: x is left as it is, γ = 1 and the estimate is untouched (the trainer's
//!   non-finite check skips that update). Should a finite input still give a non-finite
//!   estimate (overflow), the estimate is discarded and re-initialised from the next minibatch.
//!
//! Numerics: the big products are f32 GEMMs (three of N·D·rank on updating minibatches, two
//! otherwise); Z and R' are formed in f64 from the stored f32 Y, so R' is orthonormal to f32
//! precision however spread the eigenvalues are. Eigen-directions of Z too weak to be
//! determined in f64 (below 1e-9 of the largest, e.g. when N < rank at initialisation) are
//! replaced by orthonormal completions; their d sits at the floor, so they barely act.

use crate::matrix::{
    gram_f64_of, row_combination_f64_of, symmetric_eigen, MatView, MatViewMut, Matrix, Real, Trans,
    Vector,
};
use std::sync::{Arc, Condvar, Mutex};

/// Floor on ρ and on d (the paper's ε).
const EPSILON: f64 = 1e-10;
/// Floor on d relative to the largest eigenvalue estimate (the paper's δ).
const DELTA: f64 = 5e-4;
/// Calls 0..=this always update the estimate, whatever `update_period` says.
const NUM_INITIAL_UPDATES: usize = 10;
/// Upper bound on η: a minibatch never replaces more than this share of the estimate.
const MAX_ETA: f64 = 0.9;
/// Eigenvalues of Z below this fraction of the largest give directions f64 cannot resolve.
const UNRESOLVED_RATIO: f64 = 1e-9;

/// Online estimate of the Fisher matrix of a stream of row vectors, used to precondition them.
#[derive(Clone, Debug)]
pub struct OnlineNaturalGradient {
    rank: usize,
    update_period: usize,
    num_samples_history: f32,
    alpha: f32,
    frozen: bool,
    /// Unfrozen calls so far (decides which calls update).
    calls: usize,
    estimate: Option<Estimate>,
    /// When set (> 1), every minibatch gets η = 1/this whatever its row count (Kaldi's
    /// `SetNumMinibatchesHistory`, used where the rows are a parameter gradient, not frames).
    num_minibatches_history: Option<f32>,
    /// P = X·Rᵀ (N×rank), kept between calls so it is allocated once.
    p: ScratchMatrix,
}

/// The state of an [`OnlineNaturalGradient`] as plain values (it has no generator of its
/// own: its only random-looking choice, the starting point, is fixed).
#[derive(Clone, Debug, PartialEq)]
pub struct NgSnapshot {
    pub rank: usize,
    pub update_period: usize,
    pub num_samples_history: f32,
    pub alpha: f32,
    pub calls: usize,
    pub num_minibatches_history: Option<f32>,
    pub estimate: Option<EstimateSnapshot>,
}

/// F = Rᵀ·diag(d)·R + ρ·I as plain values: R row-major (rows × cols).
#[derive(Clone, Debug, PartialEq)]
pub struct EstimateSnapshot {
    pub rows: usize,
    pub cols: usize,
    pub r: Vec<Real>,
    pub d: Vec<f64>,
    pub rho: f64,
}

/// A working matrix whose contents never outlive a call: a clone starts empty.
#[derive(Debug, Default)]
struct ScratchMatrix(Matrix);

impl Clone for ScratchMatrix {
    fn clone(&self) -> Self {
        ScratchMatrix::default()
    }
}

/// F = Rᵀ·diag(d)·R + ρ·I.
#[derive(Clone, Debug)]
struct FisherEstimate {
    /// rank×D, orthonormal rows.
    r: Matrix,
    d: Vec<f64>,
    rho: f64,
}

/// The estimate, or its update still being computed on a host thread: the update is needed
/// only by the next call, so its f64 products and eigendecomposition run beside the rest
/// of the step (the GPU's work, or the other layers') instead of in front of it.
#[derive(Clone, Debug)]
enum Estimate {
    Ready(FisherEstimate),
    Updating(PendingUpdate),
}

/// An update running on its own thread. Clones share the one result (or the panic message
/// of the thread, which the waiter raises again: a bug must not become a hang).
#[derive(Clone)]
struct PendingUpdate {
    rank: usize,
    dim: usize,
    result: Arc<(Mutex<Option<UpdateResult>>, Condvar)>,
}

/// What an update thread leaves: the new estimate, or its panic message.
type UpdateResult = Result<HostEstimate, String>;

impl std::fmt::Debug for PendingUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PendingUpdate({}x{})", self.rank, self.dim)
    }
}

/// The host's half of an update: Y = R·T (rank×D, row-major) and what the new d and ρ
/// depend on.
struct UpdateInput {
    y: Vec<Real>,
    rank: usize,
    dim: usize,
    d: Vec<f64>,
    rho: f64,
    tr_xx: f64,
    n: usize,
    eta: f64,
}

/// An estimate held on the host: R row-major.
#[derive(Clone)]
struct HostEstimate {
    r: Vec<Real>,
    rank: usize,
    dim: usize,
    d: Vec<f64>,
    rho: f64,
}

impl Estimate {
    fn shape(&self) -> (usize, usize) {
        match self {
            Estimate::Ready(e) => (e.r.num_rows(), e.r.num_cols()),
            Estimate::Updating(u) => (u.rank, u.dim),
        }
    }

    /// The estimate, waiting for its update if one is running.
    fn into_ready(self) -> FisherEstimate {
        match self {
            Estimate::Ready(e) => e,
            Estimate::Updating(u) => u.wait().into_estimate(),
        }
    }

    fn snapshot(&self) -> EstimateSnapshot {
        match self {
            Estimate::Ready(e) => EstimateSnapshot {
                rows: e.r.num_rows(),
                cols: e.r.num_cols(),
                r: e.r.to_vec(),
                d: e.d.clone(),
                rho: e.rho,
            },
            Estimate::Updating(u) => {
                let h = u.wait();
                EstimateSnapshot {
                    rows: h.rank,
                    cols: h.dim,
                    r: h.r,
                    d: h.d,
                    rho: h.rho,
                }
            }
        }
    }
}

impl PendingUpdate {
    /// Starts `input`'s update on a thread of its own (not the thread pool's, which the
    /// caller may be waiting in); where no thread can be started, computes it here.
    fn spawn(input: UpdateInput) -> Estimate {
        let result = Arc::new((Mutex::new(None), Condvar::new()));
        let (rank, dim) = (input.rank, input.dim);
        let shared = Arc::clone(&result);
        let input = Arc::new(Mutex::new(Some(input)));
        let taken = Arc::clone(&input);
        let started = std::thread::Builder::new()
            .name("natural-gradient update".into())
            .spawn(move || {
                let Some(input) = taken.lock().ok().and_then(|mut i| i.take()) else {
                    return;
                };
                let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| input.compute()))
                    .map_err(|p| {
                        p.downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default()
                    });
                let (lock, done) = &*shared;
                if let Ok(mut r) = lock.lock() {
                    *r = Some(e);
                }
                done.notify_all();
            });
        match started {
            Ok(_) => Estimate::Updating(PendingUpdate { rank, dim, result }),
            Err(_) => {
                let input = input.lock().ok().and_then(|mut i| i.take());
                Estimate::Ready(input.expect("the update's input").compute().into_estimate())
            }
        }
    }

    fn wait(&self) -> HostEstimate {
        let (lock, done) = &*self.result;
        let mut r = lock.lock().expect("natural-gradient update");
        loop {
            match r.as_ref() {
                Some(Ok(e)) => return e.clone(),
                Some(Err(msg)) => panic!("natural-gradient update: {msg}"),
                None => r = done.wait(r).expect("natural-gradient update"),
            }
        }
    }
}

impl UpdateInput {
    /// True when the estimate this update gives will be finite: Z = Y·Yᵀ, its eigenvectors,
    /// the new d and ρ and the unit rows of R' are finite whenever Y and the old d, ρ are.
    fn is_finite(&self) -> bool {
        self.tr_xx.is_finite()
            && self.rho.is_finite()
            && self.d.iter().all(|d| d.is_finite())
            && self.y.iter().all(|y| y.is_finite())
    }

    /// The rest of the power-iteration step, all on the host in f64: Z = Y·Yᵀ = U·diag(c)·Uᵀ,
    /// the new d and ρ, and R' = diag(c)^-½·Uᵀ·Y.
    fn compute(self) -> HostEstimate {
        let UpdateInput {
            y,
            rank,
            dim,
            d,
            rho,
            tr_xx,
            n,
            eta,
        } = self;
        let z = gram_f64_of(&y, rank, dim);
        let eig = symmetric_eigen(&z, rank);

        let trace_t =
            eta / n as f64 * tr_xx + (1.0 - eta) * (dim as f64 * rho + d.iter().sum::<f64>());
        let c_floor = ((1.0 - eta) * rho).powi(2);
        let sqrt_c: Vec<f64> = eig.values.iter().map(|&c| c.max(c_floor).sqrt()).collect();
        let new_rho = ((trace_t - sqrt_c.iter().sum::<f64>()) / (dim - rank) as f64).max(EPSILON);
        let d_floor = EPSILON.max(DELTA * sqrt_c.iter().copied().fold(0.0, f64::max));
        let new_d = sqrt_c.iter().map(|&s| (s - new_rho).max(d_floor)).collect();

        // R' = diag(c)^-½·Uᵀ·Y over the directions f64 resolves (eigenvalues sorted, so a
        // prefix), normalised by the computed c so the rows stay unit length.
        let c_max = eig.values.first().copied().unwrap_or(0.0);
        let resolved = eig
            .values
            .iter()
            .take_while(|&&c| c > UNRESOLVED_RATIO * c_max && c > 0.0)
            .count();
        let mut coeffs = vec![0.0f64; resolved * rank];
        for k in 0..resolved {
            let inv_sqrt = 1.0 / eig.values[k].sqrt();
            for j in 0..rank {
                coeffs[k * rank + j] = eig.vectors[j * rank + k] * inv_sqrt;
            }
        }
        let mut r = row_combination_f64_of(&coeffs, resolved, &y, rank);
        r.resize(rank * dim, 0.0);
        if resolved < rank {
            MatViewMut::from_slice(&mut r, rank, dim).complete_orthonormal_rows(resolved);
        }
        HostEstimate {
            r,
            rank,
            dim,
            d: new_d,
            rho: new_rho,
        }
    }
}

impl HostEstimate {
    fn into_estimate(self) -> FisherEstimate {
        FisherEstimate {
            r: Matrix::from_vec(self.rank, self.dim, self.r),
            d: self.d,
            rho: self.rho,
        }
    }
}

impl OnlineNaturalGradient {
    /// `rank`: of the low-rank part (capped at D − 1 per call); `update_period`: update the
    /// estimate every this many calls after the first ten (0 is read as 1);
    /// `num_samples_history`: the time constant of the estimate, in rows; `alpha`: the
    /// smoothing towards the identity (Kaldi's default 4). Values are validated by the caller
    /// (the component's config); a non-positive history makes every update use η = 0.9.
    pub fn new(rank: usize, update_period: usize, num_samples_history: f32, alpha: f32) -> Self {
        OnlineNaturalGradient {
            rank,
            update_period: update_period.max(1),
            num_samples_history,
            alpha,
            frozen: false,
            calls: 0,
            estimate: None,
            num_minibatches_history: None,
            p: ScratchMatrix::default(),
        }
    }

    /// Makes every minibatch count as 1/`n` of the estimate (`n` > 1), as Kaldi's
    /// TimeHeightConvolutionComponent does with its num-minibatches-history.
    pub fn with_num_minibatches_history(mut self, n: f32) -> Self {
        self.num_minibatches_history = Some(n);
        self
    }

    /// Everything later calls depend on (`compnet fit`'s checkpoints); the frozen flag is
    /// not part of it (callers set it before every use).
    pub fn snapshot(&self) -> NgSnapshot {
        NgSnapshot {
            rank: self.rank,
            update_period: self.update_period,
            num_samples_history: self.num_samples_history,
            alpha: self.alpha,
            calls: self.calls,
            num_minibatches_history: self.num_minibatches_history,
            estimate: self.estimate.as_ref().map(Estimate::snapshot),
        }
    }

    /// The preconditioner a [`Self::snapshot`] was taken of; None when the snapshot's sizes
    /// do not agree with each other.
    pub fn from_snapshot(s: NgSnapshot) -> Option<Self> {
        let estimate = match s.estimate {
            None => None,
            Some(e) => {
                if e.r.len() != e.rows.checked_mul(e.cols)? || e.d.len() != e.rows {
                    return None;
                }
                Some(Estimate::Ready(FisherEstimate {
                    r: Matrix::from_vec(e.rows, e.cols, e.r),
                    d: e.d,
                    rho: e.rho,
                }))
            }
        };
        Some(OnlineNaturalGradient {
            rank: s.rank,
            update_period: s.update_period.max(1),
            num_samples_history: s.num_samples_history,
            alpha: s.alpha,
            frozen: false,
            calls: s.calls,
            estimate,
            num_minibatches_history: s.num_minibatches_history,
            p: ScratchMatrix::default(),
        })
    }

    /// While frozen, the estimate is used but not updated (backstitch's first pass).
    pub fn freeze(&mut self, frozen: bool) {
        self.frozen = frozen;
    }

    /// Preconditions the rows of `x` (N×D) in place; returns the scale γ by which the caller
    /// must multiply its learning rate so the Frobenius norm matches the un-preconditioned x.
    pub fn precondition_directions(&mut self, mut x: MatViewMut<'_>) -> f32 {
        let (n, dim) = (x.num_rows(), x.num_cols());
        let rank = self.rank.min(dim.saturating_sub(1));
        if n == 0 || rank == 0 {
            return 1.0;
        }
        // Finite exactly when every element is (module doc: non-finite input is left alone).
        let tr_xx = x.as_view().sum_squares_f64();
        if !tr_xx.is_finite() {
            return 1.0;
        }
        let eta = self.eta(n);
        let alpha = self.alpha as f64;
        let estimate = match self.estimate.take() {
            Some(e) if e.shape() == (rank, dim) => e.into_ready(),
            _ => FisherEstimate::from_first_minibatch(x.as_view(), tr_xx, rank, eta),
        };
        let updating = !self.frozen
            && (self.calls <= NUM_INITIAL_UPDATES
                || (self.calls - NUM_INITIAL_UPDATES).is_multiple_of(self.update_period));
        let eta = updating.then_some(eta);
        let (gamma, update) = estimate.precondition(x.rb(), tr_xx, alpha, eta, &mut self.p.0);
        if !self.frozen {
            self.calls += 1;
        }
        // The updated estimate is finite exactly when Y is (module doc), so the check needs
        // no wait for the update.
        let finite = match &update {
            Some(u) => u.is_finite(),
            None => estimate.is_finite(),
        };
        if finite && gamma.is_finite() {
            self.estimate = Some(match update {
                // Beside the step when more than one thread is allowed (`--num-threads`).
                Some(u) if crate::matrix::num_threads() > 1 => PendingUpdate::spawn(u),
                Some(u) => Estimate::Ready(u.compute().into_estimate()),
                None => Estimate::Ready(estimate),
            });
            gamma as f32
        } else {
            1.0
        }
    }

    /// Share of the new estimate that comes from a minibatch of `n` rows.
    fn eta(&self, n: usize) -> f64 {
        if let Some(h) = self.num_minibatches_history {
            return 1.0 / h as f64;
        }
        let eta = 1.0 - (-(n as f64) / self.num_samples_history as f64).exp();
        if eta.is_nan() {
            MAX_ETA
        } else {
            eta.min(MAX_ETA)
        }
    }
}

impl FisherEstimate {
    /// The starting point before any data: R₀ as described in the module doc, d = ρ = ε.
    fn starting_point(rank: usize, dim: usize) -> Self {
        let mut r = Matrix::zeros(rank, dim);
        for i in 0..rank {
            let mut row = vec![0.0; dim];
            for j in (i..dim).step_by(rank) {
                row[j] = if j == i { 1.1 } else { 1.0 };
            }
            let norm = row.iter().map(|x| x * x).sum::<Real>().sqrt();
            row.iter_mut().for_each(|x| *x /= norm);
            r.copy_row_from_slice(i, &row);
        }
        FisherEstimate {
            r,
            d: vec![EPSILON; rank],
            rho: EPSILON,
        }
    }

    /// The estimate after absorbing the first minibatch a few times (module doc).
    /// `tr_xx`: Σ x².
    fn from_first_minibatch(x: MatView<'_>, tr_xx: f64, rank: usize, eta: f64) -> Self {
        let mut estimate = Self::starting_point(rank, x.num_cols());
        let iterations = if x.num_rows() <= rank { 1 } else { 3 };
        let mut p = Matrix::default();
        for _ in 0..iterations {
            let a = estimate.moments(x, &mut p);
            estimate = estimate
                .update_input(&a, tr_xx, x.num_rows(), eta)
                .compute()
                .into_estimate();
        }
        estimate
    }

    /// P = X·Rᵀ (N×rank, into `p`); with `gram`, also returns A = Pᵀ·X = R·XᵀX (rank×D).
    fn projections(&self, x: MatView<'_>, p: &mut Matrix, gram: bool) -> Option<Matrix> {
        let (n, dim, rank) = (x.num_rows(), x.num_cols(), self.r.num_rows());
        // beta = 0: the old contents are not read.
        p.resize_undefined(n, rank);
        p.view_mut()
            .add_mat_mat(1.0, x, Trans::No, self.r.view(), Trans::Yes, 0.0);
        gram.then(|| {
            let mut a = Matrix::zeros(rank, dim);
            a.view_mut()
                .add_mat_mat(1.0, p.view(), Trans::Yes, x, Trans::No, 0.0);
            a
        })
    }

    /// A = R·XᵀX (rank×D), using `p` as the N×rank working matrix.
    fn moments(&self, x: MatView<'_>, p: &mut Matrix) -> Matrix {
        self.projections(x, p, true).unwrap_or_default()
    }

    /// Replaces x by X̂ = X·β·G⁻¹; returns γ, and with `eta` the input of the estimate's
    /// update with X (to run with [`UpdateInput::compute`]). `tr_xx`: Σ x² of the input.
    fn precondition(
        &self,
        mut x: MatViewMut<'_>,
        tr_xx: f64,
        alpha: f64,
        eta: Option<f64>,
        p: &mut Matrix,
    ) -> (f64, Option<UpdateInput>) {
        let n = x.num_rows();
        let a = self.projections(x.as_view(), p, eta.is_some());
        p.view_mut().mul_cols_vec(&self.inverse_weights(alpha));
        x.add_mat_mat(-1.0, p.view(), Trans::No, self.r.view(), Trans::No, 1.0);
        let tr_hat = x.as_view().sum_squares_f64();
        let gamma = if tr_hat > 0.0 {
            (tr_xx / tr_hat).sqrt()
        } else {
            1.0
        };
        let update = match (eta, a) {
            (Some(eta), Some(a)) => Some(self.update_input(&a, tr_xx, n, eta)),
            _ => None,
        };
        (gamma, update)
    }

    /// e_i = d_i/(d_i + β) with β = ρ + α/D·tr F: β·G⁻¹ = I − Rᵀ·diag(e)·R.
    fn inverse_weights(&self, alpha: f64) -> Vector {
        let dim = self.r.num_cols() as f64;
        let trace_f = self.d.iter().sum::<f64>() + dim * self.rho;
        let beta = self.rho + alpha / dim * trace_f;
        Vector::from_vec(self.d.iter().map(|&d| (d / (d + beta)) as Real).collect())
    }

    /// The matrix work of one power-iteration step towards T = η·XᵀX/N + (1−η)·F (module
    /// doc), given A = R·XᵀX and tr(XᵀX): Y = R·T, brought to the host with what the rest
    /// of the step needs.
    fn update_input(&self, a: &Matrix, tr_xx: f64, n: usize, eta: f64) -> UpdateInput {
        let (rank, dim) = (self.r.num_rows(), self.r.num_cols());
        // Y = R·T = η/N·A + (1−η)·diag(d + ρ)·R.
        let mut y = self.r.clone();
        let keep: Vec<Real> = self
            .d
            .iter()
            .map(|&d| ((1.0 - eta) * (d + self.rho)) as Real)
            .collect();
        y.view_mut().mul_rows_vec(&Vector::from_vec(keep));
        y.view_mut()
            .add_mat((eta / n as f64) as Real, a.view(), Trans::No);
        UpdateInput {
            y: y.to_vec(),
            rank,
            dim,
            d: self.d.clone(),
            rho: self.rho,
            tr_xx,
            n,
            eta,
        }
    }

    fn is_finite(&self) -> bool {
        self.rho.is_finite() && self.d.iter().all(|d| d.is_finite()) && self.r.view().is_finite()
    }
}
