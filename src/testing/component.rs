//! Test helpers for components: the generic checks of the component harness
//! (`tests/components.rs`).
//!
//! [`check_component_config`] runs every generic check on one config line and says which
//! check failed; other modules can call it from their own unit tests. General (non-simple)
//! components are checked on a [`Step`]: Indexes reordered and precomputed as the compiler
//! does, rows permuted to match; their own tests use `Step` directly.

use crate::index::Index;
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{Matrix, Trans};
use crate::nnet::component::{
    new_component_from_config, read_component, Backprop, BackpropInPlace, Component, Memo,
    MiscComputationInfo, PrecomputedIndexes, Propagate, PropagateInPlace, Properties,
    UpdatableComponent,
};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

/// Host copies of a component's parameters, for tests: the parameter blocks one after
/// another, each row by row (the order of `UpdatableComponent::param_blocks`).
pub trait ParamCopies {
    /// Copies the parameters into the front of `out` (as many as fit).
    fn copy_params_to(&self, out: &mut [f32]);
    /// Sets the parameters from `params`; blocks past its end keep their values.
    fn copy_params_from(&mut self, params: &[f32]);
    /// The parameters as one host vector.
    fn params_to_vec(&self) -> Vec<f32>;
}

impl<T: UpdatableComponent + ?Sized> ParamCopies for T {
    fn copy_params_to(&self, out: &mut [f32]) {
        let mut off = 0;
        for b in self.param_blocks() {
            let n = b.num_rows() * b.num_cols();
            if let Some(dst) = out.get_mut(off..off + n) {
                dst.copy_from_slice(&b.to_vec());
            }
            off += n;
        }
    }
    fn copy_params_from(&mut self, params: &[f32]) {
        let mut off = 0;
        for mut b in self.param_blocks_mut() {
            let n = b.num_rows() * b.num_cols();
            if let Some(src) = params.get(off..off + n) {
                b.copy_from_row_major(src);
            }
            off += n;
        }
    }
    fn params_to_vec(&self) -> Vec<f32> {
        self.param_blocks()
            .iter()
            .flat_map(|b| b.to_vec())
            .collect()
    }
}

/// Reads component bytes (text or binary) and writes them back; the error names what differs.
pub fn round_trip_bytes(
    bytes: &[u8],
    binary: bool,
    label: &str,
) -> Result<Box<dyn Component>, String> {
    let mut r = TokenReader::new(bytes, binary, label);
    let c = read_component(&mut r).map_err(|e| format!("{label}: read failed: {e}"))?;
    if !r.at_eof() {
        return Err(format!(
            "{label}: reader stopped at byte {} of {}",
            r.pos(),
            bytes.len()
        ));
    }
    let mut w = TokenWriter::new(binary);
    c.write(&mut w);
    let out = w.into_bytes();
    if out != bytes {
        let at = out
            .iter()
            .zip(bytes)
            .position(|(a, b)| a != b)
            .unwrap_or(out.len().min(bytes.len()));
        let show = |b: &[u8]| crate::io::codec::describe(b, at.saturating_sub(6));
        return Err(format!(
            "{label}: written bytes differ at byte {at}: ours {} vs Kaldi {}",
            show(&out),
            show(bytes)
        ));
    }
    Ok(c)
}

/// Types whose Backprop is deliberately not the derivative of Propagate.
const NOT_A_DERIVATIVE: &[&str] = &[
    "ClipGradientComponent",
    "BackpropTruncationComponent",
    "ScaleGradComponent",
];
/// Types whose Backprop with an update target self-repairs from the statistics it has just
/// stored, on a random half of the calls (Kaldi's GRU `TanhStatsAndSelfRepair`, whatever the
/// earlier statistics): their input derivative may change when `to_update` is given.
const REPAIRS_WHEN_UPDATING: &[&str] =
    &["GruNonlinearityComponent", "OutputGruNonlinearityComponent"];
/// Config keys that make Backprop differ from the derivative (self-repair, gradient scaling).
const NOT_A_DERIVATIVE_KEYS: &[&str] = &["self-repair-scale=", "backprop-scale="];
/// Types that are only piecewise differentiable: one of the random directions may cross a kink.
const PIECEWISE: &[&str] = &[
    "RectifiedLinearComponent",
    "PnormComponent",
    "MaxpoolingComponent",
    "NormalizeComponent",
];

/// Number of rows of the random test matrices.
const ROWS: usize = 7;

/// The output of `c` for input `x`: one propagate into zeros, generator seeded 0.
pub fn forward(c: &dyn Component, x: &Matrix) -> Matrix {
    let mut y = Matrix::zeros(x.num_rows(), c.output_dim());
    c.propagate(Propagate::new(
        x.view(),
        y.view_mut(),
        &mut crate::random::seeded_rng(0),
    ));
    y
}

/// The input derivative of `c` for output derivative `od` at input `x` and output `y`: one
/// backprop into zeros, nothing updated, generator seeded 0.
pub fn input_deriv(c: &dyn Component, x: &Matrix, y: &Matrix, od: &Matrix) -> Matrix {
    let mut id = Matrix::zeros(x.num_rows(), x.num_cols());
    c.backprop(Backprop {
        in_value: x.view(),
        out_value: y.view(),
        ..Backprop::new(
            od.view(),
            Some(id.view_mut()),
            &mut crate::random::seeded_rng(0),
        )
    });
    id
}

fn gauss_matrix(rows: usize, cols: usize, rng: &mut dyn RngCore) -> Matrix {
    crate::nnet::component::param_init::gaussian_matrix(rows, cols, 0.0, 1.0, rng)
}

/// True if `a ≈ b` to `tol` relative to the larger magnitude (and 1).
fn close(a: &Matrix, b: &Matrix, tol: f32) -> bool {
    if (a.num_rows(), a.num_cols()) != (b.num_rows(), b.num_cols()) {
        return false;
    }
    let scale = 1.0f32.max(a.view().max_abs()).max(b.view().max_abs());
    let mut d = a.clone();
    d.view_mut().add_mat(-1.0, b.view(), Trans::No);
    d.view().max_abs() <= tol * scale
}

fn close_vec(a: &[f32], b: &[f32], tol: f32) -> bool {
    a.len() == b.len() && {
        let scale = a.iter().chain(b).fold(1.0f32, |m, x| m.max(x.abs()));
        a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol * scale)
    }
}

/// Σ y ⊙ d in f64 (the objective of the derivative checks).
fn objective(y: &Matrix, d: &Matrix) -> f64 {
    (0..y.num_rows())
        .map(|r| {
            y.row_to_vec(r)
                .iter()
                .zip(&d.row_to_vec(r))
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum::<f64>()
        })
        .sum()
}

/// One component under test.
/// A fresh generator for each propagate or backprop the harness runs, always with the same
/// seed: a random component then draws the same masks in every call, so calls compare.
fn step_rng() -> rand::rngs::StdRng {
    crate::random::seeded_rng(17)
}

struct Harness<'a> {
    c: &'a dyn Component,
    props: Properties,
}

impl Harness<'_> {
    /// Propagates `x`; the output starts filled with `prefill`. With `strided`, input and output
    /// are views into wider matrices where the component allows non-contiguous data.
    fn forward(&self, x: &Matrix, prefill: f32, strided: bool) -> (Matrix, Option<Memo>) {
        let (rows, od) = (x.num_rows(), self.c.output_dim());
        let pad_in = strided && !self.props.has(Properties::INPUT_CONTIGUOUS);
        let pad_out = strided && !self.props.has(Properties::OUTPUT_CONTIGUOUS);
        let mut xin = Matrix::zeros(rows, x.num_cols() + if pad_in { 3 } else { 0 });
        xin.view_mut().set_const(f32::NAN);
        xin.sub_mut(0, rows, 0, x.num_cols()).copy_from(x.view());
        let mut y = Matrix::zeros(rows, od + if pad_out { 2 } else { 0 });
        y.view_mut().set_const(prefill);
        let memo = self.c.propagate(Propagate::new(
            xin.sub(0, rows, 0, x.num_cols()),
            y.sub_mut(0, rows, 0, od),
            &mut step_rng(),
        ));
        (y.sub(0, rows, 0, od).to_matrix(), memo)
    }

    /// The plain output of Propagate (output pre-zeroed).
    fn value(&self, x: &Matrix) -> Matrix {
        self.forward(x, 0.0, false).0
    }

    /// Backprop of `d` at `x`; the input derivative starts filled with `prefill`.
    fn backward(
        &self,
        x: &Matrix,
        d: &Matrix,
        to_update: Option<&mut dyn Component>,
        prefill: f32,
        strided: bool,
    ) -> Matrix {
        let (y, memo) = self.forward(x, 0.0, false);
        let empty = Matrix::zeros(0, 0);
        let in_value = if self.props.has(Properties::BACKPROP_NEEDS_INPUT) {
            x.view()
        } else {
            empty.view()
        };
        let out_value = if self.props.has(Properties::BACKPROP_NEEDS_OUTPUT) {
            y.view()
        } else {
            empty.view()
        };
        let pad = strided && !self.props.has(Properties::INPUT_CONTIGUOUS);
        let (rows, id) = (x.num_rows(), x.num_cols());
        let mut g = Matrix::zeros(rows, id + if pad { 1 } else { 0 });
        g.view_mut().set_const(prefill);
        let mut rng = step_rng();
        self.c.backprop(Backprop {
            in_value,
            out_value,
            memo: memo.as_ref(),
            // Re-borrowed: the step holds it only as long as this call.
            to_update: to_update.map(|u| -> &mut dyn Component { u }),
            ..Backprop::new(d.view(), Some(g.sub_mut(0, rows, 0, id)), &mut rng)
        });
        g.sub(0, rows, 0, id).to_matrix()
    }
}

/// Three directions from `direction`, each tried at every delta until the predicted and the
/// measured objective change (`predicted_measured(direction, delta)`) agree; the directions
/// where they never did, with the last attempt.
fn directional_failures<D>(
    mut direction: impl FnMut() -> D,
    deltas: &[f32],
    noise: f64,
    mut predicted_measured: impl FnMut(&D, f32) -> (f64, f64),
) -> Vec<String> {
    let mut failures = Vec::new();
    for k in 0..3 {
        let dir = direction();
        let mut best = String::new();
        let ok = deltas.iter().any(|&delta| {
            let (predicted, measured) = predicted_measured(&dir, delta);
            best = format!("predicted {predicted:.6e}, measured {measured:.6e} (delta {delta})");
            derivative_agrees(predicted, measured, noise * delta as f64)
        });
        if !ok {
            failures.push(format!("direction {k}: {best}"));
        }
    }
    failures
}

/// Relative agreement of a predicted and a measured objective change.
fn derivative_agrees(predicted: f64, measured: f64, noise: f64) -> bool {
    (predicted - measured).abs() <= 0.05 * predicted.abs().max(measured.abs()) + noise
}

/// The component a config line (with its `type=`) makes, random values drawn with seed 0.
pub fn init(config: &str) -> crate::error::Result<Box<dyn Component>> {
    let cfg = ConfigLine::parse_str(config)?;
    new_component_from_config(&cfg, &mut crate::random::seeded_rng(0))
}

/// Runs every generic check on one config line (with its `type=`). Returns notes (checks
/// skipped and why) or the first failure.
pub fn check_component_config(config: &str, seed: u64) -> Result<Vec<String>, String> {
    let cfg = ConfigLine::parse_str(config).map_err(|e| format!("config does not parse: {e}"))?;
    let mut init_rng = crate::random::seeded_rng(seed);
    let mut c = new_component_from_config(&cfg, &mut init_rng)
        .map_err(|e| format!("from_config failed: {e}"))?;
    let type_name: String = cfg.get_or("type", String::new()).unwrap_or_default();
    check_component(c.as_mut(), &type_name, config, seed)
}

/// One step run onto zeros (`r0`), onto ones (`r1`) and onto zeros through strided views
/// (`rs`): with `adds` (the step's `flag`) `r1` must be `r0` + 1, else equal to it, and the
/// strides must not matter.
fn check_adds_and_strides(
    r0: &Matrix,
    r1: &Matrix,
    rs: &Matrix,
    adds: bool,
    flag: &str,
    step: &str,
    target: &str,
) -> Result<(), String> {
    let mut r1m = r1.clone();
    if adds {
        r1m.view_mut().add_const(-1.0);
    }
    if !close(r0, &r1m, 1e-5) {
        return Err(if adds {
            format!("{flag} set but {step} does not add to {target}")
        } else {
            format!("{flag} unset but {step} depends on {target}'s previous contents")
        });
    }
    if !close(r0, rs, 1e-5) {
        return Err(format!("{step} gives different results on strided views"));
    }
    Ok(())
}

/// Runs every generic check on a component (see [`check_component_config`]).
pub fn check_component(
    c: &mut dyn Component,
    type_name: &str,
    config: &str,
    seed: u64,
) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    let props = c.properties();
    if c.type_name() != type_name {
        return Err(format!(
            "type_name() is {} but the config says {type_name}",
            c.type_name()
        ));
    }
    if props.has(Properties::RANDOM_COMPONENT) {
        c.set_test_mode(true, &mut crate::random::seeded_rng(0));
        notes.push("random component: checked in test mode".into());
    }
    if !props.has(Properties::SIMPLE) {
        return check_general(c, type_name, config, seed, notes);
    }
    let c: &dyn Component = c;
    let (id, od) = (c.input_dim(), c.output_dim());
    if id == 0 || od == 0 {
        return Err(format!("zero dimension (input {id}, output {od})"));
    }
    if !c.info().starts_with(type_name) {
        return Err(format!(
            "info() should start with the type name: {}",
            c.info()
        ));
    }
    let mut rng = crate::random::seeded_rng(seed);
    let x = gauss_matrix(ROWS, id, &mut rng);
    let d = gauss_matrix(ROWS, od, &mut rng);
    let h = Harness { c, props };

    // Propagate: adds-honesty, stride-independence, memo.
    let (y0, memo) = h.forward(&x, 0.0, false);
    let (y1, _) = h.forward(&x, 1.0, false);
    let (ys, _) = h.forward(&x, 0.0, true);
    let adds = props.has(Properties::PROPAGATE_ADDS);
    check_adds_and_strides(
        &y0,
        &y1,
        &ys,
        adds,
        "PROPAGATE_ADDS",
        "propagate",
        "the output",
    )?;
    if memo.is_some() && !props.has(Properties::USES_MEMO) {
        return Err("propagate returned a memo without USES_MEMO".into());
    }
    if y0.to_vec().iter().any(|v| !v.is_finite()) {
        return Err("propagate produced non-finite values".into());
    }

    // Backprop: adds-honesty and strides.
    let g0 = h.backward(&x, &d, None, 0.0, false);
    let g1 = h.backward(&x, &d, None, 1.0, false);
    let gs = h.backward(&x, &d, None, 0.0, true);
    let adds = props.has(Properties::BACKPROP_ADDS);
    check_adds_and_strides(&g0, &g1, &gs, adds, "BACKPROP_ADDS", "backprop", "in_deriv")?;

    // In-place variants.
    if props.has(Properties::PROPAGATE_IN_PLACE) {
        if id != od {
            return Err("PROPAGATE_IN_PLACE with input-dim != output-dim".into());
        }
        let mut data = x.clone();
        c.propagate_in_place(PropagateInPlace::new(data.view_mut(), &mut step_rng()));
        if !close(&data, &y0, 1e-6) {
            return Err("propagate_in_place differs from propagate".into());
        }
    }
    let updatable = props.has(Properties::UPDATABLE);
    if updatable != c.as_updatable().is_some() {
        return Err("UPDATABLE flag and as_updatable() disagree".into());
    }
    let new_gradient = || -> Box<dyn Component> {
        let mut g = c.clone_box();
        if let Some(u) = g.as_updatable_mut() {
            u.set_zero(true);
        }
        g
    };
    let params = |c: &dyn Component| -> Vec<f32> {
        c.as_updatable()
            .map(|u| u.params_to_vec())
            .unwrap_or_default()
    };
    let mut grad = new_gradient();
    let g_with_update = h.backward(&x, &d, Some(grad.as_mut()), 0.0, false);
    if !REPAIRS_WHEN_UPDATING.contains(&type_name) && !close(&g_with_update, &g0, 1e-6) {
        return Err("the input derivative changes when to_update is given".into());
    }
    let grad_vec = params(grad.as_ref());
    if props.has(Properties::BACKPROP_IN_PLACE) {
        if id != od {
            return Err("BACKPROP_IN_PLACE with input-dim != output-dim".into());
        }
        let (y, memo) = h.forward(&x, 0.0, false);
        let empty = Matrix::zeros(0, 0);
        let in_value = if props.has(Properties::BACKPROP_NEEDS_INPUT) {
            x.view()
        } else {
            empty.view()
        };
        let out_value = if props.has(Properties::BACKPROP_NEEDS_OUTPUT) {
            y.view()
        } else {
            empty.view()
        };
        let mut deriv = d.clone();
        let mut grad2 = new_gradient();
        let mut rng = step_rng();
        c.backprop_in_place(BackpropInPlace {
            in_value,
            out_value,
            memo: memo.as_ref(),
            to_update: Some(grad2.as_mut()),
            ..BackpropInPlace::new(deriv.view_mut(), &mut rng)
        });
        if !close(&deriv, &g0, 1e-5) {
            return Err("backprop_in_place gives a different input derivative".into());
        }
        if !close_vec(&params(grad2.as_ref()), &grad_vec, 1e-5) {
            return Err("backprop_in_place gives a different parameter gradient".into());
        }
    }

    // Numeric derivative checks.
    let exempt = NOT_A_DERIVATIVE.contains(&type_name)
        || NOT_A_DERIVATIVE_KEYS.iter().any(|k| config.contains(k));
    let piecewise = PIECEWISE.contains(&type_name);
    let f0 = objective(&y0, &d);
    let noise = 1e-5
        * (1.0
            + (0..ROWS)
                .map(|r| {
                    y0.row_to_vec(r)
                        .iter()
                        .zip(&d.row_to_vec(r))
                        .map(|(a, b)| (a * b).abs() as f64)
                        .sum::<f64>()
                })
                .sum::<f64>());
    let deltas = [1e-2f32, 3e-3, 1e-3];
    if exempt {
        notes.push(
            "backprop is not the exact derivative here: numeric derivative checks skipped".into(),
        );
    } else {
        let failures = directional_failures(
            || gauss_matrix(ROWS, id, &mut rng),
            &deltas,
            noise,
            |dir, delta| {
                let predicted = delta as f64 * objective(&g0, dir);
                let mut xp = x.clone();
                xp.view_mut().add_mat(delta, dir.view(), Trans::No);
                let mut xm = x.clone();
                xm.view_mut().add_mat(-delta, dir.view(), Trans::No);
                let measured = (objective(&h.value(&xp), &d) - objective(&h.value(&xm), &d)) / 2.0;
                (predicted, measured)
            },
        );
        if failures.len() > usize::from(piecewise) {
            return Err(format!(
                "input derivative check failed (objective {f0:.4e}): {}",
                failures.join("; ")
            ));
        }
        if updatable {
            let theta = params(c);
            let n = theta.len();
            let failures = directional_failures(
                || -> Vec<f32> {
                    (0..n)
                        .map(|_| crate::random::rand_gauss(&mut rng))
                        .collect()
                },
                &deltas,
                noise,
                |dir, delta| {
                    let g_dot: f64 = grad_vec
                        .iter()
                        .zip(dir)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum();
                    let at = |sign: f32| {
                        let mut cp = c.clone_box();
                        let p: Vec<f32> = theta
                            .iter()
                            .zip(dir)
                            .map(|(t, r)| t + sign * delta * r)
                            .collect();
                        if let Some(u) = cp.as_updatable_mut() {
                            u.copy_params_from(&p);
                        }
                        objective(
                            &Harness {
                                c: cp.as_ref(),
                                props,
                            }
                            .value(&x),
                            &d,
                        )
                    };
                    let measured = (at(1.0) - at(-1.0)) / 2.0;
                    (delta as f64 * g_dot, measured)
                },
            );
            if failures.len() > usize::from(piecewise) {
                return Err(format!(
                    "parameter derivative check failed: {}",
                    failures.join("; ")
                ));
            }
        }
    }

    if updatable {
        check_updatable(c, &h, &x, &d, &grad_vec, &mut rng)?;
    }
    check_io(c)?;
    Ok(notes)
}

/// Parameter algebra and the training-mode update direction.
fn check_updatable(
    c: &dyn Component,
    h: &Harness<'_>,
    x: &Matrix,
    d: &Matrix,
    grad_vec: &[f32],
    rng: &mut dyn RngCore,
) -> Result<(), String> {
    let u = c.as_updatable().ok_or("no updatable interface")?;
    let n = u.num_parameters();
    let theta = u.params_to_vec();
    if grad_vec.len() != n {
        return Err(format!(
            "gradient has {} parameters, component {n}",
            grad_vec.len()
        ));
    }
    let vec_of = |c: &dyn Component| -> Vec<f32> {
        c.as_updatable()
            .map_or_else(|| vec![0.0; n], |u| u.params_to_vec())
    };
    // Host copy round trip through the parameter blocks.
    let mut z = c.clone_box();
    let zu = z
        .as_updatable_mut()
        .ok_or("clone lost the updatable interface")?;
    zu.set_zero(false);
    if vec_of(z.as_ref()).iter().any(|&v| v != 0.0) {
        return Err("set_zero left non-zero parameters".into());
    }
    if let Some(zu) = z.as_updatable_mut() {
        zu.copy_params_from(&theta);
    }
    if vec_of(z.as_ref()) != theta {
        return Err("the parameters copied in do not copy back out".into());
    }
    // Dot product.
    let self_dot: f64 = theta.iter().map(|&v| v as f64 * v as f64).sum();
    let dp = u.dot_product(c) as f64;
    if (dp - self_dot).abs() > 1e-4 * (1.0 + self_dot) {
        return Err(format!("dot_product(self) = {dp}, Σ θ² = {self_dot}"));
    }
    // c·1.5 == c + 0.5·c.
    let mut a = c.clone_box();
    let mut b = c.clone_box();
    if let Some(au) = a.as_updatable_mut() {
        au.scale(1.5);
    }
    if let Some(bu) = b.as_updatable_mut() {
        bu.add(0.5, c);
    }
    if !close_vec(&vec_of(a.as_ref()), &vec_of(b.as_ref()), 1e-6) {
        return Err("scale(1.5) differs from add(0.5, self)".into());
    }
    // Perturbation has about the requested size.
    let mut p = c.clone_box();
    if let Some(pu) = p.as_updatable_mut() {
        pu.perturb_params(0.1, rng);
    }
    let pv = vec_of(p.as_ref());
    let ms: f64 = pv
        .iter()
        .zip(&theta)
        .map(|(a, b)| ((a - b) as f64).powi(2))
        .sum::<f64>()
        / n.max(1) as f64;
    if n >= 8 && !(0.001..0.05).contains(&ms) {
        return Err(format!(
            "perturb_params(0.1) changed parameters by mean square {ms}"
        ));
    }
    // set_zero(true) makes a gradient holder.
    let mut g = c.clone_box();
    if let Some(gu) = g.as_updatable_mut() {
        gu.set_zero(true);
        if gu.common().learning_rate != 1.0 || !gu.common().is_gradient {
            return Err("set_zero(true) must set learning rate 1 and is_gradient".into());
        }
    }
    // A training-mode update moves the parameters uphill on the objective.
    let gnorm: f64 = grad_vec.iter().map(|&v| v as f64 * v as f64).sum();
    if gnorm > 1e-12 {
        let mut t = c.clone_box();
        if let Some(tu) = t.as_updatable_mut() {
            tu.common_mut().learning_rate = 1e-3;
            tu.common_mut().is_gradient = false;
        }
        h.backward(x, d, Some(t.as_mut()), 0.0, false);
        let change: f64 = vec_of(t.as_ref())
            .iter()
            .zip(&theta)
            .zip(grad_vec)
            .map(|((a, b), g)| (a - b) as f64 * *g as f64)
            .sum();
        if change <= 0.0 {
            return Err(format!(
                "a training update does not follow the gradient (change · gradient = {change:e})"
            ));
        }
    }
    Ok(())
}

/// Text and binary write → read → write, byte-identical; info survives a binary round trip.
fn check_io(c: &dyn Component) -> Result<(), String> {
    for binary in [false, true] {
        let mut w = TokenWriter::new(binary);
        c.write(&mut w);
        let bytes = w.into_bytes();
        let label = if binary {
            "binary round trip"
        } else {
            "text round trip"
        };
        let back = round_trip_bytes(&bytes, binary, label)?;
        if back.type_name() != c.type_name() {
            return Err(format!("{label}: read back as {}", back.type_name()));
        }
        if binary && back.info() != c.info() {
            return Err(format!(
                "{label}: info changed:\n {}\n {}",
                c.info(),
                back.info()
            ));
        }
        if back.properties() != c.properties() {
            return Err(format!("{label}: properties changed"));
        }
    }
    let mut w1 = TokenWriter::new(true);
    c.write(&mut w1);
    let mut w2 = TokenWriter::new(true);
    c.clone_box().write(&mut w2);
    if w1.bytes() != w2.bytes() {
        return Err("clone_box writes differently from the original".into());
    }
    Ok(())
}

// ------------------------------------------------------------------ general components

/// A general component's step set up as the compiler does: Indexes reordered (and perhaps
/// padded) by the component, rows permuted to match, indexes precomputed. Callers give and
/// get matrices in their own row order; padded input rows stay zero.
pub struct Step<'a> {
    pub c: &'a dyn Component,
    /// The Indexes in the step's row order.
    pub input: Vec<Index>,
    pub output: Vec<Index>,
    /// The step's row of each of the caller's input rows; the same for outputs.
    in_perm: Vec<usize>,
    out_perm: Vec<usize>,
    pub pre: Option<Box<dyn PrecomputedIndexes>>,
}

impl<'a> Step<'a> {
    /// Panics where [`Step::try_new`] fails (for tests).
    pub fn new(c: &'a dyn Component, input: &[Index], output: &[Index]) -> Self {
        Self::try_new(c, input, output).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Fails if reordering drops an Index or is not idempotent (Kaldi checks both).
    pub fn try_new(
        c: &'a dyn Component,
        input: &[Index],
        output: &[Index],
    ) -> Result<Self, String> {
        let (mut i2, mut o2) = (input.to_vec(), output.to_vec());
        if c.properties().has(Properties::REORDERS_INDEXES) {
            c.reorder_indexes(&mut i2, &mut o2);
            let (mut i3, mut o3) = (i2.clone(), o2.clone());
            c.reorder_indexes(&mut i3, &mut o3);
            if (&i3, &o3) != (&i2, &o2) {
                return Err("reorder_indexes is not idempotent".into());
            }
        }
        let perm = |from: &[Index], to: &[Index]| -> Result<Vec<usize>, String> {
            from.iter()
                .map(|x| {
                    to.iter()
                        .position(|y| y == x)
                        .ok_or_else(|| format!("reorder_indexes dropped {x}"))
                })
                .collect()
        };
        let (in_perm, out_perm) = (perm(input, &i2)?, perm(output, &o2)?);
        let pre = c.precompute_indexes(&MiscComputationInfo::default(), &i2, &o2, true);
        Ok(Step {
            c,
            input: i2,
            output: o2,
            in_perm,
            out_perm,
            pre,
        })
    }

    fn to_step_rows(perm: &[usize], rows: usize, m: &Matrix) -> Matrix {
        let mut out = Matrix::zeros(rows, m.num_cols());
        for (r, &p) in perm.iter().enumerate() {
            out.copy_row_from_slice(p, &m.row_to_vec(r));
        }
        out
    }
    fn to_caller_rows(perm: &[usize], m: &Matrix) -> Matrix {
        let mut out = Matrix::zeros(perm.len(), m.num_cols());
        for (r, &p) in perm.iter().enumerate() {
            out.copy_row_from_slice(r, &m.row_to_vec(p));
        }
        out
    }
    /// The caller's input rows in the step's order.
    pub fn permute_in(&self, x: &Matrix) -> Matrix {
        Self::to_step_rows(&self.in_perm, self.input.len(), x)
    }
    /// The caller's output-derivative rows in the step's order.
    pub fn permute_out(&self, d: &Matrix) -> Matrix {
        Self::to_step_rows(&self.out_perm, self.output.len(), d)
    }
    /// Step-ordered input rows (an input derivative) in the caller's order.
    pub fn unpermute_in(&self, g: &Matrix) -> Matrix {
        Self::to_caller_rows(&self.in_perm, g)
    }
    /// Step-ordered output rows in the caller's order.
    pub fn unpermute_out(&self, y: &Matrix) -> Matrix {
        Self::to_caller_rows(&self.out_perm, y)
    }

    /// A destination as the optimizer may hand it over: zeroed if the component adds to it,
    /// else holding anything (NaN here, so rows left unwritten show in the results).
    /// A rows × cols destination holding `init`; None: NaN as the optimizer hands it over, or
    /// zero where the component adds (`adds`).
    fn destination(&self, rows: usize, cols: usize, init: Option<f32>, adds: Properties) -> Matrix {
        let mut m = Matrix::zeros(rows, cols);
        match init {
            Some(v) => m.view_mut().set_const(v),
            None if !self.c.properties().has(adds) => m.view_mut().set_const(f32::NAN),
            None => {}
        }
        m
    }

    /// Propagate on step-ordered input rows into an output that starts as `init` (NaN: as
    /// the optimizer hands it over, zero where the component adds).
    pub fn propagate_onto(&self, xin: &Matrix, init: Option<f32>) -> (Matrix, Option<Memo>) {
        let (rows, cols) = (self.output.len(), self.c.output_dim());
        let mut y = self.destination(rows, cols, init, Properties::PROPAGATE_ADDS);
        let memo = self.c.propagate(Propagate {
            indexes: self.pre.as_deref(),
            ..Propagate::new(xin.view(), y.view_mut(), &mut step_rng())
        });
        (y, memo)
    }

    /// The output for the caller's input rows, in the caller's output order.
    pub fn forward(&self, x: &Matrix) -> Matrix {
        self.unpermute_out(&self.propagate_onto(&self.permute_in(x), None).0)
    }

    /// The input derivative (caller's order) for output derivative `d` (caller's order),
    /// the gradient going to `to_update`.
    pub fn backward(
        &self,
        x: &Matrix,
        d: &Matrix,
        to_update: Option<&mut dyn Component>,
    ) -> Matrix {
        self.backward_onto(x, d, None, to_update)
    }

    /// [`Step::backward`] with the input derivative starting as `init` (None: NaN, or zero
    /// where the component adds).
    pub fn backward_onto(
        &self,
        x: &Matrix,
        d: &Matrix,
        init: Option<f32>,
        to_update: Option<&mut dyn Component>,
    ) -> Matrix {
        let xin = self.permute_in(x);
        let (y, memo) = self.propagate_onto(&xin, None);
        let dd = self.permute_out(d);
        let props = self.c.properties();
        let empty = Matrix::zeros(0, 0);
        let (rows, cols) = (self.input.len(), self.c.input_dim());
        let mut g = self.destination(rows, cols, init, Properties::BACKPROP_ADDS);
        let mut rng = step_rng();
        self.c.backprop(Backprop {
            indexes: self.pre.as_deref(),
            in_value: if props.has(Properties::BACKPROP_NEEDS_INPUT) {
                xin.view()
            } else {
                empty.view()
            },
            out_value: if props.has(Properties::BACKPROP_NEEDS_OUTPUT) {
                y.view()
            } else {
                empty.view()
            },
            memo: memo.as_ref(),
            // Re-borrowed: the step holds it only as long as this call.
            to_update: to_update.map(|u| -> &mut dyn Component { u }),
            ..Backprop::new(dd.view(), Some(g.view_mut()), &mut rng)
        });
        self.unpermute_in(&g)
    }

    /// Checks the input derivative at `x` by central differences along three random
    /// directions (columns in `frozen_cols` left alone: an input the component does not
    /// differentiate, as pooling's count).
    pub fn check_input_derivative(
        &self,
        x: &Matrix,
        seed: u64,
        frozen_cols: &[usize],
    ) -> Result<(), String> {
        let mut rng = crate::random::seeded_rng(seed);
        let d = gauss_matrix(self.output.len(), self.c.output_dim(), &mut rng);
        let g = self.backward(x, &d, None);
        for k in 0..3 {
            let mut dir = gauss_matrix(x.num_rows(), x.num_cols(), &mut rng);
            for r in 0..dir.num_rows() {
                for &c in frozen_cols {
                    dir.set(r, c, 0.0);
                }
            }
            let ok = [1e-2f32, 3e-3].iter().any(|&delta| {
                let predicted = delta as f64 * objective(&g, &dir);
                let measured = self.measured_change(x, &dir, delta, &d);
                (measured - predicted).abs() <= 0.01 * measured.abs().max(predicted.abs()) + 1e-4
            });
            if !ok {
                let predicted = 1e-2 * objective(&g, &dir);
                let measured = self.measured_change(x, &dir, 1e-2, &d);
                return Err(format!(
                    "input derivative of {} (direction {k}): predicted {predicted:.6e}, measured {measured:.6e}",
                    self.c.type_name()
                ));
            }
        }
        Ok(())
    }

    /// Half the change of `⟨forward(x ± delta·dir), d⟩`.
    fn measured_change(&self, x: &Matrix, dir: &Matrix, delta: f32, d: &Matrix) -> f64 {
        let mut xp = x.clone();
        xp.view_mut().add_mat(delta, dir.view(), Trans::No);
        let mut xm = x.clone();
        xm.view_mut().add_mat(-delta, dir.view(), Trans::No);
        (objective(&self.forward(&xp), d) - objective(&self.forward(&xm), d)) / 2.0
    }

    /// The same step for another component of the same configuration (a perturbed copy).
    fn for_copy<'b>(&self, c: &'b dyn Component) -> Step<'b> {
        Step {
            c,
            input: self.input.clone(),
            output: self.output.clone(),
            in_perm: self.in_perm.clone(),
            out_perm: self.out_perm.clone(),
            pre: c.precompute_indexes(
                &MiscComputationInfo::default(),
                &self.input,
                &self.output,
                true,
            ),
        }
    }

    /// Checks the parameter gradient at `x` by central differences along three random
    /// directions in parameter space.
    pub fn check_parameter_derivative(&self, x: &Matrix, seed: u64) -> Result<(), String> {
        let u = self.c.as_updatable().ok_or("not updatable")?;
        let theta = u.params_to_vec();
        let mut rng = crate::random::seeded_rng(seed);
        let d = gauss_matrix(self.output.len(), self.c.output_dim(), &mut rng);
        let mut grad = self.c.clone_box();
        let holder = grad.as_updatable_mut().ok_or("the copy is not updatable")?;
        holder.set_zero(true);
        self.backward(x, &d, Some(grad.as_mut()));
        let g = grad.as_updatable().ok_or("no gradient")?.params_to_vec();
        let moved = |dir: &[f32], delta: f32| -> f64 {
            let mut cp = self.c.clone_box();
            let p: Vec<f32> = theta.iter().zip(dir).map(|(t, r)| t + delta * r).collect();
            if let Some(u) = cp.as_updatable_mut() {
                u.copy_params_from(&p);
            }
            objective(&self.for_copy(cp.as_ref()).forward(x), &d)
        };
        for k in 0..3 {
            let dir: Vec<f32> = (0..theta.len())
                .map(|_| crate::random::rand_gauss(&mut rng))
                .collect();
            let per_unit: f64 = g.iter().zip(&dir).map(|(&a, &b)| a as f64 * b as f64).sum();
            let mut best = String::new();
            let ok = [1e-2f32, 3e-3, 1e-3].iter().any(|&delta| {
                let predicted = delta as f64 * per_unit;
                let measured = (moved(&dir, delta) - moved(&dir, -delta)) / 2.0;
                best =
                    format!("predicted {predicted:.6e}, measured {measured:.6e} (delta {delta})");
                (measured - predicted).abs() <= 0.01 * measured.abs().max(predicted.abs()) + 1e-4
            });
            if !ok {
                return Err(format!(
                    "parameter derivative of {} (direction {k}): {best}",
                    self.c.type_name()
                ));
            }
        }
        Ok(())
    }
}

/// Makes random rows a valid input where a component reads more than numbers: statistics
/// pooling reads a count, sums and (with stddevs) sums of squares, whose variance must stay
/// above the floor that its backprop does not differentiate (as Kaldi's). Returns the input
/// columns the component does not differentiate (the count; Kaldi does not either).
fn make_valid_input(c: &dyn Component, x: &mut Matrix) -> Vec<usize> {
    use crate::nnet::component::statistics::StatisticsPoolingComponent;
    let Some(p) = c.as_any().downcast_ref::<StatisticsPoolingComponent>() else {
        return Vec::new();
    };
    let d = if p.output_stddevs {
        (p.input_dim - 1) / 2
    } else {
        p.input_dim - 1
    };
    for r in 0..x.num_rows() {
        let count = 1.0 + x.get(r, 0).abs();
        x.set(r, 0, count);
        if p.output_stddevs {
            for j in 1..=d {
                let sum = x.get(r, j);
                let spread = 0.5 + x.get(r, d + j).abs();
                x.set(r, d + j, sum * sum / count + spread * count);
            }
        }
    }
    vec![0]
}

/// The generic checks of a general component, on one step as the compiler would set it up
/// for two sequences: the outputs at t in {-6, 0, 6, 12} (multiples of every period in the
/// test configs, as Kaldi's statistics extraction requires) that the component can compute
/// from inputs at t in -12..=24, and the inputs it says it uses.
fn check_general(
    c: &dyn Component,
    type_name: &str,
    config: &str,
    seed: u64,
    mut notes: Vec<String>,
) -> Result<Vec<String>, String> {
    let misc = MiscComputationInfo::default();
    let available: std::collections::HashSet<Index> = (0..2)
        .flat_map(|n| (-12..=24).map(move |t| Index::new(n, t, 0)))
        .collect();
    let mut inputs = std::collections::BTreeSet::new();
    let mut outputs = Vec::new();
    for o in (0..2).flat_map(|n| [-6, 0, 6, 12].map(|t| Index::new(n, t, 0))) {
        let mut used = Vec::new();
        if c.is_computable(&misc, &o, &|i| available.contains(i), Some(&mut used)) {
            outputs.push(o);
            inputs.extend(used);
        }
    }
    if outputs.is_empty() {
        return Err(
            "no output at t in {-6, 0, 6, 12} is computable from inputs at t in -12..=24".into(),
        );
    }
    let inputs: Vec<Index> = inputs.into_iter().collect();
    let step = Step::try_new(c, &inputs, &outputs)?;
    let mut rng = crate::random::seeded_rng(seed);
    let mut x = gauss_matrix(inputs.len(), c.input_dim(), &mut rng);
    let frozen = make_valid_input(c, &mut x);
    if step.forward(&x).to_vec().iter().any(|v| !v.is_finite()) {
        return Err("propagate left output rows unwritten or produced non-finite values".into());
    }
    let exempt = NOT_A_DERIVATIVE.contains(&type_name)
        || NOT_A_DERIVATIVE_KEYS.iter().any(|k| config.contains(k));
    if exempt {
        notes.push(
            "backprop is not the exact derivative here: numeric derivative checks skipped".into(),
        );
    } else {
        if inputs.is_empty() {
            notes.push("no input rows: input derivative not checked".into());
        } else {
            step.check_input_derivative(&x, seed + 1, &frozen)?;
        }
        if c.properties().has(Properties::UPDATABLE) {
            step.check_parameter_derivative(&x, seed + 2)?;
        }
    }
    check_io(c)?;
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nnet::component::affine::AffineComponent;
    use crate::nnet::component::Description;
    use crate::nnet::component::UpdatableComponent;

    /// Deliberate defects, to show that the harness catches them.
    #[derive(Clone, Copy, Debug)]
    enum Bug {
        InputDerivative,
        ParameterGradient,
        FalseAddsFlag,
        NoMutableParams,
    }

    #[derive(Clone, Debug)]
    struct Broken(AffineComponent, Bug);

    impl Component for Broken {
        fn describe(&self) -> Description {
            Description::new(
                self.0.type_name(),
                self.0.input_dim(),
                self.0.output_dim(),
                match self.1 {
                    Bug::FalseAddsFlag => self.0.properties() | Properties::PROPAGATE_ADDS,
                    _ => self.0.properties(),
                },
            )
        }
        fn propagate(&self, p: Propagate<'_>) -> Option<Memo> {
            self.0.propagate(p)
        }
        fn backprop(&self, b: Backprop<'_>) {
            let (d, g, rng) = (b.out_deriv, b.in_deriv, b.rng);
            let u = b
                .to_update
                .and_then(|u| u.as_any_mut().downcast_mut::<Broken>())
                .map(|b| &mut b.0 as &mut dyn Component);
            // The same step with other derivatives, update target and generator.
            macro_rules! step {
                ($out_deriv:expr, $in_deriv:expr, $to_update:expr, $rng:expr) => {
                    Backprop {
                        out_deriv: $out_deriv,
                        in_deriv: $in_deriv,
                        to_update: $to_update,
                        rng: $rng,
                        ..b
                    }
                };
            }
            let mut d2 = d.to_matrix();
            match self.1 {
                Bug::InputDerivative => d2.view_mut().scale(1.2),
                Bug::ParameterGradient => {
                    // The gradient for the wrong output derivative, the input derivative right.
                    let mut wrong = d.to_matrix();
                    wrong.view_mut().scale(-1.0);
                    self.0.backprop(step!(wrong.view(), None, u, &mut *rng));
                    self.0.backprop(step!(d, g, None, rng));
                    return;
                }
                _ => {}
            }
            self.0.backprop(step!(d2.view(), g, u, rng));
        }
        fn write(&self, w: &mut TokenWriter) {
            self.0.write(w)
        }
        fn info(&self) -> String {
            self.0.info()
        }
        crate::nnet::component::param_ops::component_boilerplate!();
        fn as_updatable(&self) -> Option<&dyn UpdatableComponent> {
            Some(&self.0)
        }
        fn as_updatable_mut(&mut self) -> Option<&mut dyn UpdatableComponent> {
            match self.1 {
                // A gradient holder that is not one: set_zero does nothing.
                Bug::NoMutableParams => None,
                _ => Some(&mut self.0),
            }
        }
    }

    #[test]
    fn harness_accepts_a_correct_affine_component() {
        let notes =
            check_component_config("type=AffineComponent input-dim=4 output-dim=3", 7).unwrap();
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn harness_catches_deliberate_defects() {
        let cfg = ConfigLine::parse_str("input-dim=4 output-dim=3").unwrap();
        let inner = AffineComponent::from_config(&cfg, &mut crate::random::seeded_rng(0)).unwrap();
        let inner = inner
            .as_any()
            .downcast_ref::<AffineComponent>()
            .unwrap()
            .clone();
        for (bug, want) in [
            (Bug::InputDerivative, "input derivative check"),
            (Bug::ParameterGradient, "parameter derivative check"),
            (Bug::FalseAddsFlag, "PROPAGATE_ADDS"),
            (Bug::NoMutableParams, "parameter derivative check"),
        ] {
            let mut c = Broken(inner.clone(), bug);
            let e = check_component(&mut c, "AffineComponent", "", 3)
                .expect_err(&format!("{bug:?} not caught"));
            assert!(e.contains(want), "{bug:?}: {e}");
        }
    }
}
