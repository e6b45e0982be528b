//! Whole-network parameter algebra the trainer applies after each backward pass (Kaldi's
//! nnet-utils: `ApplyL2Regularization`, `UpdateNnetWithMaxChange`, `ScaleBatchnormStats`,
//! `ConstrainOrthonormal`, `FreezeNaturalGradient`).

use crate::kaldi_rand::kaldi_rand_int;
use crate::matrix::{Matrix, Trans};
use crate::nnet::component::Properties;
use crate::nnet::Nnet;
use rand::RngCore;

/// Adds the L2 term to the delta: for every updatable component with `l2-regularize` > 0,
/// delta += −2 · `l2_scale` · learning-rate · l2 · parameters. `l2_scale` is the number of
/// sequences in the minibatch times `--l2-regularize-factor` (the L2 term is per sequence).
pub fn apply_l2_regularization(nnet: &Nnet, l2_scale: f32, delta: &mut Nnet) {
    if l2_scale == 0.0 {
        return;
    }
    for (src, dest) in nnet.components.iter().zip(delta.components.iter_mut()) {
        if let Some(d) = dest.as_updatable_mut() {
            d.add_l2_term(l2_scale, src.as_ref());
        }
    }
}

/// How often max-change had to act (Kaldi's `MaxChangeStats`).
#[derive(Clone, Debug, Default)]
pub struct MaxChangeStats {
    /// Per updatable component (in component order): minibatches where its own
    /// `max-change` scaled its change down.
    pub per_component: Vec<usize>,
    /// Minibatches where `--max-param-change` scaled the whole change down.
    pub global: usize,
    /// Minibatches whose change was not finite and was therefore not applied.
    pub non_finite: usize,
    /// Updates attempted.
    pub num_minibatches: usize,
}

/// Adds `scale` × `delta` to `nnet`, limiting each updatable component's change to its
/// `max-change` × `max_change_scale` and the whole change to `max_param_change` ×
/// `max_change_scale` (0 = no limit), as Kaldi's `UpdateNnetWithMaxChange`. Components
/// without parameters get `scale` × the statistics gathered in the delta (output-derivative
/// statistics, self-repair counts). Returns false, changing nothing, when the change is
/// not finite.
pub fn update_nnet_with_max_change(
    delta: &Nnet,
    max_param_change: f32,
    max_change_scale: f32,
    scale: f32,
    nnet: &mut Nnet,
    stats: &mut MaxChangeStats,
) -> bool {
    stats.num_minibatches += 1;
    let mut factors = Vec::new();
    let mut per_component_applied = Vec::new();
    let mut sumsq = 0.0f64;
    for c in &delta.components {
        let Some(u) = c.as_updatable() else {
            continue;
        };
        let max_change = u.common().max_change;
        let dot = u.dot_product(c.as_ref()) as f64;
        let norm = dot.sqrt() * scale.abs() as f64;
        let limit = (max_change * max_change_scale) as f64;
        if max_change != 0.0 && norm > limit {
            let f = limit / norm;
            factors.push(f);
            per_component_applied.push(true);
            sumsq += f * f * dot;
        } else {
            factors.push(1.0);
            per_component_applied.push(false);
            sumsq += dot;
        }
    }
    let param_delta = sumsq.sqrt() * scale.abs() as f64;
    if !param_delta.is_finite() {
        stats.non_finite += 1;
        return false;
    }
    let mut scale = scale as f64;
    let global_limit = (max_param_change * max_change_scale) as f64;
    if max_param_change != 0.0 && param_delta > global_limit {
        scale *= global_limit / param_delta;
        stats.global += 1;
    }
    if stats.per_component.len() != factors.len() {
        stats.per_component = vec![0; factors.len()];
    }
    for (count, applied) in stats.per_component.iter_mut().zip(&per_component_applied) {
        *count += usize::from(*applied);
    }
    let mut i = 0;
    for (src, dest) in delta.components.iter().zip(nnet.components.iter_mut()) {
        match dest.as_updatable_mut() {
            Some(d) => {
                d.add((factors[i] * scale) as f32, src.as_ref());
                i += 1;
            }
            None => dest.add_stats(scale as f32, src.as_ref()),
        }
    }
    true
}

/// Scales the statistics of every BatchNormComponent (Kaldi's `ScaleBatchnormStats`,
/// `--batchnorm-stats-scale`, 0.8 by default: recent minibatches weigh more).
pub fn scale_batchnorm_stats(scale: f32, nnet: &mut Nnet) {
    if scale == 1.0 {
        return;
    }
    for c in &mut nnet.components {
        if c.properties().has(Properties::BATCH_STATISTICS) {
            c.scale_stats(scale);
        }
    }
}

/// Freezes (or unfreezes) every natural-gradient estimate in `nnet` (Kaldi's
/// `FreezeNaturalGradient`; backstitch's first step must not move them).
pub fn freeze_natural_gradient(freeze: bool, nnet: &mut Nnet) {
    for c in &mut nnet.components {
        if let Some(u) = c.as_updatable_mut() {
            u.freeze_natural_gradient(freeze);
        }
    }
}

/// Zeroes the statistics of every component (`--zero-component-stats`).
pub fn zero_component_stats(nnet: &mut Nnet) {
    for c in &mut nnet.components {
        c.zero_stats();
    }
}

/// Pushes the weight matrices of components with an `orthonormal-constraint` towards a
/// (scaled) semi-orthogonal matrix (Kaldi's `ConstrainOrthonormal`): on a random quarter of
/// the calls per component, one step M ← M − 4α(MMᵀ − s²I)M on the side with fewer rows
/// (Povey et al. 2018, "Semi-orthogonal low-rank matrix factorization"). A negative
/// constraint lets the scale s float.
pub fn constrain_orthonormal(nnet: &mut Nnet, rng: &mut dyn RngCore) {
    for c in &mut nnet.components {
        let Some(u) = c.as_updatable_mut() else {
            continue;
        };
        // One matrix per component, or each constrained one inside a composite.
        for (constraint, mut m) in u.orthonormal_constraints() {
            if kaldi_rand_int(rng, 0, 3) != 0 {
                continue;
            }
            if m.num_rows() <= m.num_cols() {
                let mut w = m.as_view().to_matrix();
                semi_orthogonal_step(constraint, &mut w);
                m.copy_from(w.view());
            } else {
                let mut w = m.as_view().to_matrix().transposed();
                semi_orthogonal_step(constraint, &mut w);
                m.copy_from(w.transposed().view());
            }
        }
    }
}

/// One step towards M·Mᵀ = s²·I for M with no more rows than columns.
fn semi_orthogonal_step(constraint: f32, m: &mut Matrix) {
    let rows = m.num_rows();
    if rows == 0 {
        return;
    }
    let mut p = Matrix::zeros(rows, rows);
    p.view_mut()
        .add_mat_mat(1.0, m.view(), Trans::No, m.view(), Trans::Yes, 0.0);
    let mut speed = 0.125f32;
    let mut scale = constraint;
    if constraint < 0.0 {
        let trace_p = p.view().trace();
        let trace_pp = p.view().trace_mat_mat(p.view());
        if trace_p <= 0.0 {
            return;
        }
        scale = (trace_pp / trace_p).sqrt();
        // The ratio estimates the spread of P's eigenvalues: slow down when they differ,
        // or the floating-scale update can diverge.
        let ratio = trace_pp * rows as f32 / (trace_p * trace_p);
        if ratio > 1.02 {
            speed *= 0.5;
            if ratio > 1.1 {
                speed *= 0.5;
            }
        }
    }
    p.view_mut().add_to_diag(-scale * scale);
    let alpha = speed / (scale * scale);
    let mut update = Matrix::zeros(rows, m.num_cols());
    update
        .view_mut()
        .add_mat_mat(-4.0 * alpha, p.view(), Trans::No, m.view(), Trans::No, 0.0);
    m.view_mut().add_mat(1.0, update.view(), Trans::No);
}

/// `Σ` of `alpha` × parameters, component by component: the averaged network of
/// `nnet3-average` (weights sum to one) and `combine`'s running average.
pub fn add_nnet(dest: &mut Nnet, alpha: f32, src: &Nnet) {
    for (d, s) in dest.components.iter_mut().zip(&src.components) {
        match d.as_updatable_mut() {
            Some(u) => u.add(alpha, s.as_ref()),
            None => d.add_stats(alpha, s.as_ref()),
        }
    }
}

/// True when two networks have the same components (types, names and dimensions) and
/// nodes, so their parameters can be added.
pub fn same_structure(a: &Nnet, b: &Nnet) -> bool {
    a.component_names == b.component_names
        && a.node_names == b.node_names
        && a.components.iter().zip(&b.components).all(|(x, y)| {
            crate::nnet::component::same_type(x.as_ref(), y.as_ref())
                && x.input_dim() == y.input_dim()
                && x.output_dim() == y.output_dim()
                && x.as_updatable().map(|u| u.num_parameters())
                    == y.as_updatable().map(|u| u.num_parameters())
        })
}
