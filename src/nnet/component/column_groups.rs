//! Parameter-free components that combine or reorder groups of columns: ElementwiseProduct,
//! Permute, SumBlock, SumGroup and Pnorm (2-norm). Formats, options and flags follow Kaldi's
//! `nnet-simple-component.{h,cc}`.

use super::kaldi_fields::{expect_closing, read_field, read_pos_i32, write_component, Field};
use super::param_init::cfg_pos;
use super::param_ops::component_boilerplate;
use super::{Backprop, Component, Description, Memo, Propagate, Properties};
use crate::error::Result;
use crate::io::codec::fmt_g;
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::Trans;
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

/// The `input-dim` / `output-dim` pair of the components that map blocks of input columns
/// onto output columns (ElementwiseProduct, SumBlock, Pnorm): read, checked and written the
/// same way by each; `fits` is the component's rule for the pair, `expected` what a file
/// must hold instead.
#[derive(Clone, Copy, Debug)]
struct BlockDims {
    input_dim: usize,
    output_dim: usize,
}

impl BlockDims {
    /// `output-dim` and `input-dim` from a config line.
    fn from_config(cfg: &ConfigLine, fits: fn(usize, usize) -> bool, rule: &str) -> Result<Self> {
        let output_dim = cfg_pos(cfg, "output-dim")?;
        let input_dim = cfg_pos(cfg, "input-dim")?;
        if !fits(input_dim, output_dim) {
            return Err(cfg.error(rule));
        }
        Ok(BlockDims {
            input_dim,
            output_dim,
        })
    }
    /// `<InputDim>` and `<OutputDim>` after the optional `<TypeName>`.
    fn read(
        r: &mut TokenReader<'_>,
        type_name: &str,
        fits: fn(usize, usize) -> bool,
        expected: &str,
    ) -> Result<Self> {
        r.try_token(&format!("<{type_name}>"))?;
        let input_dim = read_pos_i32(r, "<InputDim>")?;
        let at = r.pos();
        let output_dim = read_pos_i32(r, "<OutputDim>")?;
        if !fits(input_dim, output_dim) {
            return Err(r.err_at(at, expected));
        }
        Ok(BlockDims {
            input_dim,
            output_dim,
        })
    }
    /// The number of output-dim blocks of the input.
    fn num_blocks(&self) -> usize {
        self.input_dim / self.output_dim
    }
    fn fields(&self) -> [Field<'_>; 2] {
        [
            ("<InputDim>", &self.input_dim),
            ("<OutputDim>", &self.output_dim),
        ]
    }
    /// Kaldi's `Info()` start: `TypeName, input-dim=.., output-dim=..`.
    fn info(&self, type_name: &str) -> String {
        format!(
            "{type_name}, input-dim={}, output-dim={}",
            self.input_dim, self.output_dim
        )
    }
}

/// Output-dim divides input-dim (SumBlock, Pnorm).
fn divides(input_dim: usize, output_dim: usize) -> bool {
    input_dim.is_multiple_of(output_dim)
}
const DIVIDES: &str = "output-dim must divide input-dim";
const DIVIDING: &str = "an <OutputDim> dividing <InputDim>";

/// Splits the input into `input-dim / output-dim` equal blocks and multiplies them
/// element-wise.
#[derive(Clone, Debug)]
pub struct ElementwiseProductComponent {
    dims: BlockDims,
}

const EP: &str = "ElementwiseProductComponent";

impl ElementwiseProductComponent {
    fn checked(input_dim: usize, output_dim: usize) -> bool {
        input_dim > output_dim && input_dim.is_multiple_of(output_dim)
    }
    /// Registry hook: `input-dim`, `output-dim` (a proper divisor of input-dim).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let rule = "input-dim must be a multiple (> 1) of output-dim";
        let dims = BlockDims::from_config(cfg, Self::checked, rule)?;
        Ok(Box::new(ElementwiseProductComponent { dims }))
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let expected = "an <OutputDim> that properly divides <InputDim>";
        let dims = BlockDims::read(r, EP, Self::checked, expected)?;
        expect_closing(r, EP)?;
        Ok(Box::new(ElementwiseProductComponent { dims }))
    }
}

impl Component for ElementwiseProductComponent {
    fn describe(&self) -> Description {
        Description::new(
            EP,
            self.dims.input_dim,
            self.dims.output_dim,
            Properties::SIMPLE | Properties::BACKPROP_NEEDS_INPUT,
        )
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        let od = self.dims.output_dim;
        p.output.copy_from(p.input.cols_range(0, od));
        for i in 1..self.dims.num_blocks() {
            p.output.mul_elements(p.input.cols_range(i * od, od));
        }
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        let Some(mut in_deriv) = b.in_deriv else {
            return;
        };
        let od = self.dims.output_dim;
        let n = self.dims.num_blocks();
        for i in 0..n {
            let mut block = in_deriv.cols_range_mut(i * od, od);
            block.copy_from(b.out_deriv);
            for j in (0..n).filter(|&j| j != i) {
                block.mul_elements(b.in_value.cols_range(j * od, od));
            }
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        write_component(w, EP, &self.dims.fields());
    }
    fn info(&self) -> String {
        self.dims.info(EP)
    }
    component_boilerplate!();
}
// ---------------------------------------------------------------------------------------

/// Reorders columns: output column i is input column `column_map[i]`.
#[derive(Clone, Debug)]
pub struct PermuteComponent {
    column_map: Vec<i32>,
    reverse_map: Vec<i32>,
}

impl PermuteComponent {
    /// The inverse map, or None if `map` is not a permutation of 0..n.
    fn reverse_of(map: &[i32]) -> Option<Vec<i32>> {
        let mut rev = vec![-1i32; map.len()];
        for (i, &j) in map.iter().enumerate() {
            let slot = rev.get_mut(usize::try_from(j).ok()?)?;
            if *slot != -1 {
                return None;
            }
            *slot = i as i32;
        }
        Some(rev)
    }
    /// Registry hook: `column-map=a,b,c,...` (a permutation of 0..dim-1).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let column_map: Vec<i32> = cfg.require("column-map")?;
        let reverse_map = Self::reverse_of(&column_map)
            .filter(|_| !column_map.is_empty())
            .ok_or_else(|| {
                cfg.error_at_value("column-map", "column-map must be a permutation of 0..dim-1")
            })?;
        Ok(Box::new(PermuteComponent {
            column_map,
            reverse_map,
        }))
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<PermuteComponent>")?;
        r.expect_token("<ColumnMap>")?;
        let at = r.pos();
        let column_map = r.int_vec()?;
        let reverse_map = Self::reverse_of(&column_map)
            .filter(|_| !column_map.is_empty())
            .ok_or_else(|| r.err_at(at, "a <ColumnMap> that is a permutation of 0..dim-1"))?;
        r.expect_token("</PermuteComponent>")?;
        Ok(Box::new(PermuteComponent {
            column_map,
            reverse_map,
        }))
    }
}

impl Component for PermuteComponent {
    fn describe(&self) -> Description {
        Description::new(
            "PermuteComponent",
            self.column_map.len(),
            self.column_map.len(),
            Properties::SIMPLE,
        )
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        p.output.copy_cols(p.input, &self.column_map);
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        if let Some(mut d) = b.in_deriv {
            d.copy_cols(b.out_deriv, &self.reverse_map);
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        write_component(w, "PermuteComponent", &[("<ColumnMap>", &self.column_map)]);
    }
    fn info(&self) -> String {
        let mut s = format!(
            "PermuteComponent, dim={} , column-map=[ ",
            self.column_map.len()
        );
        for c in self.column_map.iter().take(5) {
            s += &format!("{c} ");
        }
        if self.column_map.len() > 5 {
            s += "... ";
        }
        s.push(']');
        s
    }
    component_boilerplate!();
}
// ---------------------------------------------------------------------------------------

/// Sums the `input-dim / output-dim` consecutive blocks of the input, times `scale`.
#[derive(Clone, Debug)]
pub struct SumBlockComponent {
    dims: BlockDims,
    scale: f32,
}

const SB: &str = "SumBlockComponent";

impl SumBlockComponent {
    /// Registry hook: `input-dim`, `output-dim` (divides input-dim), `scale` (1.0).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let dims = BlockDims::from_config(cfg, divides, DIVIDES)?;
        let scale = cfg.get_or("scale", 1.0f32)?;
        Ok(Box::new(SumBlockComponent { dims, scale }))
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let dims = BlockDims::read(r, SB, divides, DIVIDING)?;
        let scale = read_field(r, "<Scale>")?;
        expect_closing(r, SB)?;
        Ok(Box::new(SumBlockComponent { dims, scale }))
    }
}

impl Component for SumBlockComponent {
    fn describe(&self) -> Description {
        Description::new(
            SB,
            self.dims.input_dim,
            self.dims.output_dim,
            Properties::SIMPLE | Properties::PROPAGATE_ADDS | Properties::BACKPROP_ADDS,
        )
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        let od = self.dims.output_dim;
        for b in 0..self.dims.num_blocks() {
            p.output
                .add_mat(self.scale, p.input.cols_range(b * od, od), Trans::No);
        }
        None
    }
    fn backprop(&self, step: Backprop<'_>) {
        let Some(mut d) = step.in_deriv else {
            return;
        };
        let od = self.dims.output_dim;
        for b in 0..self.dims.num_blocks() {
            d.cols_range_mut(b * od, od)
                .add_mat(self.scale, step.out_deriv, Trans::No);
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        let [i, o] = self.dims.fields();
        write_component(w, SB, &[i, o, ("<Scale>", &self.scale)]);
    }
    fn info(&self) -> String {
        let scale = fmt_g(self.scale as f64, 6);
        format!("{}, scale={scale}", self.dims.info(SB))
    }
    component_boilerplate!();
}
// ---------------------------------------------------------------------------------------

/// Sums consecutive groups of input columns of the given sizes into one output column each.
#[derive(Clone, Debug)]
pub struct SumGroupComponent {
    sizes: Vec<i32>,
    /// For each output column, the input column range [start, end).
    ranges: Vec<(i32, i32)>,
    /// For each input column, its output column.
    reverse: Vec<i32>,
}

impl SumGroupComponent {
    fn from_sizes(sizes: Vec<i32>) -> Option<Self> {
        if sizes.is_empty() || sizes.iter().any(|&s| s <= 0) {
            return None;
        }
        let mut ranges = Vec::with_capacity(sizes.len());
        let mut reverse = Vec::new();
        let mut start = 0i32;
        for (j, &s) in sizes.iter().enumerate() {
            let end = start.checked_add(s)?;
            ranges.push((start, end));
            start = end;
            reverse.extend(std::iter::repeat_n(j as i32, s as usize));
        }
        Some(SumGroupComponent {
            sizes,
            ranges,
            reverse,
        })
    }
    /// Registry hook: `sizes=a,b,...` or `input-dim` + `output-dim` (equal groups).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let sizes: Vec<i32> = if cfg.has("sizes") {
            cfg.require("sizes")?
        } else {
            let dims = BlockDims::from_config(cfg, divides, DIVIDES)?;
            vec![dims.num_blocks() as i32; dims.output_dim]
        };
        Self::from_sizes(sizes)
            .map(|c| Box::new(c) as Box<dyn Component>)
            .ok_or_else(|| {
                cfg.error_at_value(
                    "sizes",
                    "sizes must be a non-empty list of positive integers",
                )
            })
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<SumGroupComponent>")?;
        r.expect_token("<Sizes>")?;
        let at = r.pos();
        let sizes = r.int_vec()?;
        // The sizes add up to the input dim, one index per column: check before allocating.
        let total = sizes
            .iter()
            .try_fold(0u64, |a, &s| a.checked_add(u64::from(s.max(0) as u32)));
        crate::limits::check_product(
            &[total.unwrap_or(u64::MAX), 4],
            "<Sizes> adding up to a larger dim",
        )
        .map_err(|m| r.err_at(at, format!("<Sizes> within the memory limit: {m}")))?;
        let c = Self::from_sizes(sizes)
            .ok_or_else(|| r.err_at(at, "a non-empty <Sizes> list of positive integers"))?;
        r.expect_token("</SumGroupComponent>")?;
        Ok(Box::new(c))
    }
}

impl Component for SumGroupComponent {
    fn describe(&self) -> Description {
        Description::new(
            "SumGroupComponent",
            self.reverse.len(),
            self.sizes.len(),
            Properties::SIMPLE,
        )
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        p.output.sum_column_ranges(p.input, &self.ranges);
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        if let Some(mut d) = b.in_deriv {
            d.copy_cols(b.out_deriv, &self.reverse);
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        write_component(w, "SumGroupComponent", &[("<Sizes>", &self.sizes)]);
    }
    fn info(&self) -> String {
        let (input_dim, output_dim) = (self.input_dim(), self.output_dim());
        BlockDims {
            input_dim,
            output_dim,
        }
        .info("SumGroupComponent")
    }
    component_boilerplate!();
}
// ---------------------------------------------------------------------------------------

/// The 2-norm over groups of `input-dim / output-dim` consecutive inputs.
#[derive(Clone, Debug)]
pub struct PnormComponent {
    dims: BlockDims,
}

const PNORM: &str = "PnormComponent";

impl PnormComponent {
    /// Registry hook: `input-dim`, `output-dim` (divides input-dim).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let dims = BlockDims::from_config(cfg, divides, DIVIDES)?;
        Ok(Box::new(PnormComponent { dims }))
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let dims = BlockDims::read(r, PNORM, divides, DIVIDING)?;
        expect_closing(r, PNORM)?;
        Ok(Box::new(PnormComponent { dims }))
    }
}

impl Component for PnormComponent {
    fn describe(&self) -> Description {
        Description::new(
            PNORM,
            self.dims.input_dim,
            self.dims.output_dim,
            Properties::SIMPLE
                | Properties::BACKPROP_NEEDS_INPUT
                | Properties::BACKPROP_NEEDS_OUTPUT,
        )
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        p.output.group_2norm_from(p.input);
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        if let Some(mut d) = b.in_deriv {
            d.diff_group_2norm(b.in_value, b.out_value, b.out_deriv);
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        write_component(w, PNORM, &self.dims.fields());
    }
    fn info(&self) -> String {
        self.dims.info(PNORM)
    }
    component_boilerplate!();
}

#[cfg(test)]
mod tests {
    use crate::matrix::Matrix;
    use crate::testing::component::{forward, init, input_deriv};

    #[test]
    fn pnorm_forward_and_backward() {
        let c = init("type=PnormComponent input-dim=4 output-dim=2").expect("init");
        let x = Matrix::from_rows(&[vec![3.0, 4.0, 0.0, 0.0]]);
        let y = forward(c.as_ref(), &x);
        assert_eq!(y.to_vec(), vec![5.0, 0.0]);
        let od = Matrix::from_rows(&[vec![10.0, 1.0]]);
        let id = input_deriv(c.as_ref(), &x, &y, &od);
        assert_eq!(id.to_vec(), vec![6.0, 8.0, 0.0, 0.0]);
    }

    #[test]
    fn sum_group_and_permute() {
        let c = init("type=SumGroupComponent sizes=1,2").expect("init");
        let x = Matrix::from_rows(&[vec![1.0, 2.0, 4.0]]);
        assert_eq!(forward(c.as_ref(), &x).to_vec(), vec![1.0, 6.0]);
        let p = init("type=PermuteComponent column-map=2,0,1").expect("init");
        assert_eq!(forward(p.as_ref(), &x).to_vec(), vec![4.0, 1.0, 2.0]);
        assert!(init("type=PermuteComponent column-map=0,0,1").is_err());
    }
}
