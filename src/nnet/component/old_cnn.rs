//! The pre-xconfig CNN components (Kaldi's `nnet-combined-component.h`):
//! `ConvolutionComponent`, a 2-D convolution over an (x, y, z) tensor packed in each row, and
//! `MaxpoolingComponent`, max pooling over the same packing.
//!
//! Both gather their patches with one column gather (`copy_cols`) and scatter derivatives
//! back with one column scatter (`add_to_cols`). The convolution then reads the R × (P·D)
//! patch matrix as (R·P) × D, so that one GEMM with the filters serves every patch of every
//! row; pooling takes group maxima over the gathered patches.
//!
//! Layouts (Kaldi's): the convolution input is x-major; within an x, `zyx` orders y then z
//! (z fastest) and `yzx` orders z then y (y fastest). A patch is (x, y, z) with z fastest,
//! the filter matrix is num-filters × (filt-x · filt-y · z), and the output is (x-step,
//! y-step, filter) with the filter fastest. Pooling input and output are both zyx.

use super::info_summary;
use super::kaldi_fields::{self, read_dim_field, read_field, write_component, write_updatable};
use super::param_init::{self, RandomInit};
use super::param_ops::{self, component_boilerplate, updatable_boilerplate, updatable_common};
use super::{
    update_target, Backprop, Component, Description, Memo, Propagate, Properties, UpdatableCommon,
};
use crate::error::Result;
use crate::gradient::Update;
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{MatView, Matrix, Trans, Vector};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

const CONVOLUTION: &str = "ConvolutionComponent";
const MAXPOOLING: &str = "MaxpoolingComponent";

/// Kaldi's `TensorVectorizationType`, with its stored values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vectorization {
    /// y fastest, then z, then x (stored as 0).
    Yzx = 0,
    /// z fastest, then y, then x (stored as 1).
    Zyx = 1,
}

impl Vectorization {
    /// The input column of element (x, y, z) of an X × Y × Z tensor.
    fn index(self, x: usize, y: usize, z: usize, ydim: usize, zdim: usize) -> usize {
        match self {
            Vectorization::Zyx => (x * ydim + y) * zdim + z,
            Vectorization::Yzx => (x * zdim + z) * ydim + y,
        }
    }
}

/// Number of window positions of `size` with `step` in `dim` (`(dim − size)/step + 1`).
fn num_steps(dim: usize, size: usize, step: usize) -> usize {
    (dim - size) / step + 1
}

/// Checks that a window of `size` moved by `step` tiles `dim` exactly, as Kaldi asserts.
fn check_window(dim: usize, size: usize, step: usize) -> std::result::Result<(), String> {
    if size > dim {
        Err(format!(
            "window size {size} exceeds the input dimension {dim}"
        ))
    } else if !(dim - size).is_multiple_of(step) {
        Err(format!(
            "(input dim {dim} - window size {size}) is not a multiple of the step {step}"
        ))
    } else {
        Ok(())
    }
}

/// Checks that an X × Y × Z tensor row fits the memory limit (and its size fits an integer).
fn check_tensor_size(dims: [usize; 3]) -> std::result::Result<(), String> {
    crate::limits::check_product(
        &[dims[0] as u64, dims[1] as u64, dims[2] as u64, 4],
        "input-x-dim × input-y-dim × input-z-dim",
    )?;
    // Kaldi's dims are int32, and so are the column indexes of the gathers.
    let n = dims.iter().map(|&d| d as u64).product::<u64>();
    if n > i32::MAX as u64 {
        return Err(format!(
            "an input dimension of {n} does not fit Kaldi's int32"
        ));
    }
    Ok(())
}

/// Reads the three input dims `input-{x,y,z}-dim` from a config line.
fn input_dims_from_config(cfg: &ConfigLine) -> Result<[usize; 3]> {
    let dims = [
        param_init::require_positive(cfg, "input-x-dim")?,
        param_init::require_positive(cfg, "input-y-dim")?,
        param_init::require_positive(cfg, "input-z-dim")?,
    ];
    check_tensor_size(dims).map_err(|m| cfg.error_at_value("input-x-dim", m))?;
    Ok(dims)
}

/// `ConvolutionComponent`: the filters slide over x and y with steps filt-x-step and
/// filt-y-step and always span the whole z dimension; plain SGD (Kaldi has no natural
/// gradient here).
#[derive(Clone, Debug)]
pub struct ConvolutionComponent {
    /// Learning-rate options.
    pub common: UpdatableCommon,
    /// Input tensor dims (x, y, z).
    pub input_dims: [usize; 3],
    /// Filter extent in x and y.
    pub filt_dims: [usize; 2],
    /// Filter steps in x and y.
    pub filt_steps: [usize; 2],
    pub vectorization: Vectorization,
    /// num-filters × (filt-x · filt-y · input-z).
    pub filters: Matrix,
    /// One bias per filter.
    pub bias: Vector,
}

impl ConvolutionComponent {
    /// Builds the component after checking the geometry against the parameters.
    #[allow(clippy::too_many_arguments)]
    fn new(
        common: UpdatableCommon,
        input_dims: [usize; 3],
        filt_dims: [usize; 2],
        filt_steps: [usize; 2],
        vectorization: Vectorization,
        filters: Matrix,
        bias: Vector,
    ) -> std::result::Result<Self, String> {
        check_tensor_size(input_dims)?;
        for k in 0..2 {
            let axis = ["x", "y"][k];
            if filt_steps[k] == 0 || filt_dims[k] == 0 {
                return Err(format!(
                    "filt-{axis}-dim and filt-{axis}-step must be positive"
                ));
            }
            check_window(input_dims[k], filt_dims[k], filt_steps[k])
                .map_err(|m| format!("along {axis}: {m}"))?;
        }
        let filter_dim = filt_dims[0] * filt_dims[1] * input_dims[2];
        if filters.num_rows() == 0 || filters.num_cols() != filter_dim {
            return Err(format!(
                "the filter matrix is {}x{}; expected num-filters x {filter_dim} (filt-x-dim · filt-y-dim · input-z-dim)",
                filters.num_rows(),
                filters.num_cols()
            ));
        }
        if bias.dim() != filters.num_rows() {
            return Err(format!(
                "the bias has dimension {}; expected one per filter ({})",
                bias.dim(),
                filters.num_rows()
            ));
        }
        let c = ConvolutionComponent {
            common,
            input_dims,
            filt_dims,
            filt_steps,
            vectorization,
            filters,
            bias,
        };
        let patch_cols = c.num_patches() as u64 * filter_dim as u64;
        let out_dim = c.num_patches() as u64 * c.num_filters() as u64;
        crate::limits::check_elements(patch_cols.max(out_dim), 4, "convolution patch columns")?;
        Ok(c)
    }

    /// Kaldi's ConvolutionComponent::InitFromConfig.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let input_dims = input_dims_from_config(cfg)?;
        let filt_dims = [
            param_init::require_positive(cfg, "filt-x-dim")?,
            param_init::require_positive(cfg, "filt-y-dim")?,
        ];
        let filt_steps = [
            param_init::require_positive(cfg, "filt-x-step")?,
            param_init::require_positive(cfg, "filt-y-step")?,
        ];
        let vectorization = match cfg.get::<String>("input-vectorization-order")?.as_deref() {
            None | Some("zyx") => Vectorization::Zyx,
            Some("yzx") => Vectorization::Yzx,
            Some(other) => {
                return Err(cfg.error_at_value(
                    "input-vectorization-order",
                    format!(
                        "unknown input-vectorization-order '{other}' (expected 'yzx' or 'zyx')"
                    ),
                ))
            }
        };
        let filter_dim = filt_dims[0] * filt_dims[1] * input_dims[2];
        let (filters, bias) = if let Some(path) = cfg.get::<String>("matrix")? {
            // The file holds the filters with the bias as the last column.
            let m = param_init::read_matrix_file(cfg, "matrix", &path)?;
            if m.num_cols() != filter_dim + 1 || m.num_rows() == 0 {
                return Err(cfg.error_at_value(
                    "matrix",
                    format!(
                        "matrix in {path} is {}x{}; expected num-filters x {}",
                        m.num_rows(),
                        m.num_cols(),
                        filter_dim + 1
                    ),
                ));
            }
            if let Some(n) = cfg.get::<i32>("num-filters")? {
                if n as i64 != m.num_rows() as i64 {
                    return Err(cfg.error_at_value(
                        "num-filters",
                        format!("num-filters={n} does not match the matrix in {path}"),
                    ));
                }
            }
            let rows = m.num_rows();
            let filters = m.sub(0, rows, 0, filter_dim).to_matrix();
            let bias = Vector::from_vec(m.sub(0, rows, filter_dim, 1).to_vec());
            (filters, bias)
        } else {
            let num_filters = param_init::require_positive(cfg, "num-filters")?;
            crate::limits::check_product(
                &[num_filters as u64, filter_dim as u64 + 1, 4],
                "num-filters × filter dim",
            )
            .map_err(|m| cfg.error_at_value("num-filters", m))?;
            let init = RandomInit::from_config(cfg, filter_dim, 1.0, false)?;
            let filters = init.weights(num_filters, filter_dim, init_rng);
            (filters, init.bias(num_filters, init_rng))
        };
        let c = Self::new(
            common,
            input_dims,
            filt_dims,
            filt_steps,
            vectorization,
            filters,
            bias,
        )
        .map_err(|m| cfg.error(format!("ConvolutionComponent: {m}")))?;
        Ok(Box::new(c))
    }

    /// Reads a ConvolutionComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let at = r.pos();
        let common = UpdatableCommon::read(r, CONVOLUTION)?;
        let input_dims = [
            read_dim_field(r, "<InputXDim>", "input x dim")?,
            read_dim_field(r, "<InputYDim>", "input y dim")?,
            read_dim_field(r, "<InputZDim>", "input z dim")?,
        ];
        let filt_dims = [
            read_dim_field(r, "<FiltXDim>", "filter x dim")?,
            read_dim_field(r, "<FiltYDim>", "filter y dim")?,
        ];
        let filt_steps = [
            read_dim_field(r, "<FiltXStep>", "filter x step")?,
            read_dim_field(r, "<FiltYStep>", "filter y step")?,
        ];
        let vat = r.pos();
        let vectorization = match read_field::<i32>(r, "<InputVectorization>")? {
            0 => Vectorization::Yzx,
            1 => Vectorization::Zyx,
            v => {
                return Err(r.err_at(
                    vat,
                    format!("an input vectorization of 0 (yzx) or 1 (zyx), got {v}"),
                ))
            }
        };
        let filters: Matrix = read_field(r, "<FilterParams>")?;
        let bias: Vector = read_field(r, "<BiasParams>")?;
        // Kaldi writes <IsGradient> again here, always.
        let is_gradient: bool = read_field(r, "<IsGradient>")?;
        kaldi_fields::expect_closing(r, CONVOLUTION)?;
        let common = UpdatableCommon {
            is_gradient,
            ..common
        };
        let c = Self::new(
            common,
            input_dims,
            filt_dims,
            filt_steps,
            vectorization,
            filters,
            bias,
        )
        .map_err(|m| r.err_at(at, format!("a consistent ConvolutionComponent: {m}")))?;
        Ok(Box::new(c))
    }

    fn filter_dim(&self) -> usize {
        self.filters.num_cols()
    }

    fn num_filters(&self) -> usize {
        self.filters.num_rows()
    }

    /// Patch positions along x and y.
    fn steps(&self) -> [usize; 2] {
        [
            num_steps(self.input_dims[0], self.filt_dims[0], self.filt_steps[0]),
            num_steps(self.input_dims[1], self.filt_dims[1], self.filt_steps[1]),
        ]
    }

    fn num_patches(&self) -> usize {
        let [nx, ny] = self.steps();
        nx * ny
    }

    /// For each column of the patch row (patch-major, then x, y, z within a patch), the
    /// input column it reads. Built per call (its size is that of one patch row), so that
    /// reading a model allocates nothing in proportion to its dimensions.
    fn column_map(&self) -> Vec<i32> {
        let [nx, ny] = self.steps();
        let [_, ydim, zdim] = self.input_dims;
        let mut map = Vec::with_capacity(nx * ny * self.filter_dim());
        for xs in 0..nx {
            for ys in 0..ny {
                for fx in 0..self.filt_dims[0] {
                    for fy in 0..self.filt_dims[1] {
                        for z in 0..zdim {
                            let x = xs * self.filt_steps[0] + fx;
                            let y = ys * self.filt_steps[1] + fy;
                            map.push(self.vectorization.index(x, y, z, ydim, zdim) as i32);
                        }
                    }
                }
            }
        }
        map
    }

    /// The patches of every row, one patch per row: (rows · patches) × filter-dim.
    fn patches(&self, input: MatView<'_>) -> Matrix {
        let rows = input.num_rows();
        let map = self.column_map();
        let mut wide = Matrix::zeros(rows, map.len());
        wide.view_mut().copy_cols(input, &map);
        wide.into_reshaped(rows * self.num_patches(), self.filter_dim())
    }
}

impl Component for ConvolutionComponent {
    fn describe(&self) -> Description {
        Description::new(
            CONVOLUTION,
            self.input_dims.iter().product(),
            self.num_patches() * self.num_filters(),
            Properties::SIMPLE
                | Properties::UPDATABLE
                | Properties::BACKPROP_NEEDS_INPUT
                | Properties::BACKPROP_ADDS
                | Properties::PROPAGATE_ADDS,
        )
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        let rows = p.input.num_rows();
        let patches = self.patches(p.input);
        let mut out = Matrix::zeros(patches.num_rows(), self.num_filters());
        out.view_mut().add_mat_mat(
            1.0,
            patches.view(),
            Trans::No,
            self.filters.view(),
            Trans::Yes,
            0.0,
        );
        out.view_mut().add_vec_to_rows(1.0, &self.bias, 1.0);
        let out = out.into_reshaped(rows, self.output_dim());
        p.output.add_mat(1.0, out.view(), Trans::No);
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        let rows = b.out_deriv.num_rows();
        let od = b
            .out_deriv
            .to_matrix()
            .into_reshaped(rows * self.num_patches(), self.num_filters());
        if let Some(mut d) = b.in_deriv {
            let mut patch_deriv = Matrix::zeros(od.num_rows(), self.filter_dim());
            patch_deriv.view_mut().add_mat_mat(
                1.0,
                od.view(),
                Trans::No,
                self.filters.view(),
                Trans::No,
                0.0,
            );
            let map = self.column_map();
            let patch_deriv = patch_deriv.into_reshaped(rows, map.len());
            d.add_to_cols(patch_deriv.view(), &map);
        }
        if let Some(u) = update_target::<ConvolutionComponent>(b.to_update) {
            let patches = self.patches(b.in_value);
            let mut update = Update::new(&u.common, None, true);
            update.weight_block(
                u.filters.view_mut(),
                Some(&mut u.bias),
                patches.view(),
                od.view(),
            );
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        let v = self.vectorization as i32;
        write_updatable(
            w,
            CONVOLUTION,
            &self.common,
            &[
                ("<InputXDim>", &self.input_dims[0]),
                ("<InputYDim>", &self.input_dims[1]),
                ("<InputZDim>", &self.input_dims[2]),
                ("<FiltXDim>", &self.filt_dims[0]),
                ("<FiltYDim>", &self.filt_dims[1]),
                ("<FiltXStep>", &self.filt_steps[0]),
                ("<FiltYStep>", &self.filt_steps[1]),
                ("<InputVectorization>", &v),
                ("<FilterParams>", &self.filters),
                ("<BiasParams>", &self.bias),
                ("<IsGradient>", &self.common.is_gradient),
            ],
        );
    }
    fn info(&self) -> String {
        format!(
            "{}, input-x-dim={}, input-y-dim={}, input-z-dim={}, filt-x-dim={}, filt-y-dim={}, \
             filt-x-step={}, filt-y-step={}, input-vectorization={}, num-filters={}, {}, {}",
            info_summary::updatable_header(self, &self.common),
            self.input_dims[0],
            self.input_dims[1],
            self.input_dims[2],
            self.filt_dims[0],
            self.filt_dims[1],
            self.filt_steps[0],
            self.filt_steps[1],
            self.vectorization as i32,
            self.num_filters(),
            info_summary::matrix_stats("filter-params", &self.filters, false),
            info_summary::vector_stats("bias-params", &self.bias)
        )
    }
    updatable_boilerplate!();
}

/// The (filters, bias) pair is the parameter set, in Kaldi's Vectorize order.
impl super::UpdatableComponent for ConvolutionComponent {
    updatable_common!();
    fn num_parameters(&self) -> usize {
        self.num_filters() * (self.filter_dim() + 1)
    }
    fn param_blocks(&self) -> Vec<crate::matrix::MatView<'_>> {
        vec![self.filters.view(), self.bias.as_row()]
    }
    fn param_blocks_mut(&mut self) -> Vec<crate::matrix::MatViewMut<'_>> {
        vec![self.filters.view_mut(), self.bias.as_row_mut()]
    }
    fn scale(&mut self, alpha: f32) {
        self.filters.view_mut().scale(alpha);
        self.bias.as_row_mut().scale(alpha);
    }
    fn add(&mut self, alpha: f32, other: &dyn Component) {
        if let Some(o) = other.as_any().downcast_ref::<ConvolutionComponent>() {
            param_ops::pair_add(
                &mut self.filters,
                &mut self.bias,
                alpha,
                &o.filters,
                &o.bias,
            );
        }
    }
    fn dot_product(&self, other: &dyn Component) -> f32 {
        other
            .as_any()
            .downcast_ref::<ConvolutionComponent>()
            .map_or(0.0, |o| {
                param_ops::pair_dot(&self.filters, &self.bias, &o.filters, &o.bias)
            })
    }
    fn perturb_params(&mut self, stddev: f32, rng: &mut dyn RngCore) {
        param_ops::perturb_matrix(&mut self.filters, stddev, rng);
        param_ops::perturb_vector(&mut self.bias, stddev, rng);
    }
}

/// `MaxpoolingComponent`: the maximum over each pool-x × pool-y × pool-z window of a zyx
/// tensor; the derivative goes to every input that equals its window's maximum.
#[derive(Clone, Debug)]
pub struct MaxpoolingComponent {
    /// Input tensor dims (x, y, z).
    pub input_dims: [usize; 3],
    /// Pool sizes (x, y, z).
    pub pool_sizes: [usize; 3],
    /// Pool steps (x, y, z).
    pub pool_steps: [usize; 3],
}

impl MaxpoolingComponent {
    fn new(
        input_dims: [usize; 3],
        pool_sizes: [usize; 3],
        pool_steps: [usize; 3],
    ) -> std::result::Result<Self, String> {
        check_tensor_size(input_dims)?;
        for k in 0..3 {
            let axis = ["x", "y", "z"][k];
            if pool_sizes[k] == 0 || pool_steps[k] == 0 {
                return Err(format!(
                    "pool-{axis}-size and pool-{axis}-step must be positive"
                ));
            }
            check_window(input_dims[k], pool_sizes[k], pool_steps[k])
                .map_err(|m| format!("along {axis}: {m}"))?;
        }
        let c = MaxpoolingComponent {
            input_dims,
            pool_sizes,
            pool_steps,
        };
        let cols = c.output_dim() as u64 * c.pool_size() as u64;
        crate::limits::check_elements(cols, 4, "max-pooling patch columns")?;
        Ok(c)
    }

    /// Kaldi's MaxpoolingComponent::InitFromConfig (every option is required).
    pub fn from_config(cfg: &ConfigLine, _rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let input_dims = input_dims_from_config(cfg)?;
        let mut pool_sizes = [0; 3];
        let mut pool_steps = [0; 3];
        for (k, axis) in ["x", "y", "z"].iter().enumerate() {
            pool_sizes[k] = param_init::require_positive(cfg, &format!("pool-{axis}-size"))?;
        }
        for (k, axis) in ["x", "y", "z"].iter().enumerate() {
            pool_steps[k] = param_init::require_positive(cfg, &format!("pool-{axis}-step"))?;
        }
        let c = Self::new(input_dims, pool_sizes, pool_steps)
            .map_err(|m| cfg.error(format!("MaxpoolingComponent: {m}")))?;
        Ok(Box::new(c))
    }

    /// Reads a MaxpoolingComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let at = r.pos();
        let mut dims = [0usize; 9];
        let tokens = [
            "<InputXDim>",
            "<InputYDim>",
            "<InputZDim>",
            "<PoolXSize>",
            "<PoolYSize>",
            "<PoolZSize>",
            "<PoolXStep>",
            "<PoolYStep>",
            "<PoolZStep>",
        ];
        for (d, t) in dims.iter_mut().zip(tokens) {
            *d = read_dim_field(r, t, "max-pooling dimension")?;
        }
        kaldi_fields::expect_closing(r, MAXPOOLING)?;
        let c = Self::new(
            [dims[0], dims[1], dims[2]],
            [dims[3], dims[4], dims[5]],
            [dims[6], dims[7], dims[8]],
        )
        .map_err(|m| r.err_at(at, format!("a consistent MaxpoolingComponent: {m}")))?;
        Ok(Box::new(c))
    }

    /// Pools along x, y and z.
    fn num_pools(&self) -> [usize; 3] {
        let n = |k: usize| num_steps(self.input_dims[k], self.pool_sizes[k], self.pool_steps[k]);
        [n(0), n(1), n(2)]
    }

    fn pool_size(&self) -> usize {
        self.pool_sizes.iter().product()
    }

    /// For pool j and window offset q, column j·pool-size + q holds the input column it
    /// reads (`column_map`); `expand_map` sends that column back to j, to spread the output
    /// derivative over each pool. Built per call, like the convolution's map.
    fn maps(&self) -> (Vec<i32>, Vec<i32>) {
        let [px, py, pz] = self.num_pools();
        let [_, ydim, zdim] = self.input_dims;
        let [sx, sy, sz] = self.pool_sizes;
        let mut column_map = Vec::with_capacity(px * py * pz * sx * sy * sz);
        let mut expand_map = Vec::with_capacity(column_map.capacity());
        let mut pool = 0;
        for xp in 0..px {
            for yp in 0..py {
                for zp in 0..pz {
                    for x in 0..sx {
                        for y in 0..sy {
                            for z in 0..sz {
                                let xi = xp * self.pool_steps[0] + x;
                                let yi = yp * self.pool_steps[1] + y;
                                let zi = zp * self.pool_steps[2] + z;
                                column_map.push(((xi * ydim + yi) * zdim + zi) as i32);
                                expand_map.push(pool);
                            }
                        }
                    }
                    pool += 1;
                }
            }
        }
        (column_map, expand_map)
    }

    /// The pools of every row side by side: rows × (pools · pool-size).
    fn patches(&self, input: MatView<'_>, column_map: &[i32]) -> Matrix {
        let mut p = Matrix::zeros(input.num_rows(), column_map.len());
        p.view_mut().copy_cols(input, column_map);
        p
    }
}

impl Component for MaxpoolingComponent {
    fn describe(&self) -> Description {
        Description::new(
            MAXPOOLING,
            self.input_dims.iter().product(),
            self.num_pools().iter().product(),
            Properties::SIMPLE
                | Properties::BACKPROP_NEEDS_INPUT
                | Properties::BACKPROP_NEEDS_OUTPUT
                | Properties::BACKPROP_ADDS,
        )
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        let (column_map, _) = self.maps();
        p.output
            .group_max_from(self.patches(p.input, &column_map).view());
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        let Some(mut d) = b.in_deriv else {
            return;
        };
        let (column_map, expand_map) = self.maps();
        let patches = self.patches(b.in_value, &column_map);
        let rows = patches.num_rows();
        let mut deriv = Matrix::zeros(rows, column_map.len());
        deriv
            .view_mut()
            .group_max_deriv(patches.view(), b.out_value);
        let mut spread = Matrix::zeros(rows, column_map.len());
        spread.view_mut().copy_cols(b.out_deriv, &expand_map);
        deriv.view_mut().mul_elements(spread.view());
        d.add_to_cols(deriv.view(), &column_map);
    }
    fn write(&self, w: &mut TokenWriter) {
        let (i, s, t) = (self.input_dims, self.pool_sizes, self.pool_steps);
        write_component(
            w,
            MAXPOOLING,
            &[
                ("<InputXDim>", &i[0]),
                ("<InputYDim>", &i[1]),
                ("<InputZDim>", &i[2]),
                ("<PoolXSize>", &s[0]),
                ("<PoolYSize>", &s[1]),
                ("<PoolZSize>", &s[2]),
                ("<PoolXStep>", &t[0]),
                ("<PoolYStep>", &t[1]),
                ("<PoolZStep>", &t[2]),
            ],
        );
    }
    fn info(&self) -> String {
        let (i, s, t) = (self.input_dims, self.pool_sizes, self.pool_steps);
        format!(
            "{MAXPOOLING}, input-x-dim={}, input-y-dim={}, input-z-dim={}, pool-x-size={}, \
             pool-y-size={}, pool-z-size={}, pool-x-step={}, pool-y-step={}, pool-z-step={}",
            i[0], i[1], i[2], s[0], s[1], s[2], t[0], t[1], t[2]
        )
    }
    component_boilerplate!();
}
