//! `DistributeComponent` (Kaldi's `nnet-general-component.h`): spreads the blocks of an input
//! row over the x index. With B = input-dim / output-dim blocks, output (n, t, x) is block
//! `x mod B` (rounding towards −∞) of input (n, t, ⌊x / B⌋); the consumer usually sums the x
//! values back with `ReplaceIndex(…, x, k)`.

use super::kaldi_fields::{self, read_dim_field, Field};
use super::param_init;
use super::param_ops::component_boilerplate;
use super::{
    Backprop, Component, Description, Memo, MiscComputationInfo, PrecomputedIndexes, Propagate,
    Properties,
};
use crate::error::Result;
use crate::index::{Index, TRange};
use crate::io::TokenReader;
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;
use rustc_hash::FxHashMap;

const DISTRIBUTE: &str = "DistributeComponent";

/// `DistributeComponent`.
#[derive(Clone, Debug)]
pub struct DistributeComponent {
    pub input_dim: usize,
    pub output_dim: usize,
}

/// Per step: for each block, the input row each output row reads (−1: another block), and
/// for each input row the output row that reads that block of it (−1: none).
#[derive(Clone, Debug, PartialEq)]
pub struct DistributePrecomputed {
    num_input_rows: usize,
    num_output_rows: usize,
    forward: Vec<Vec<i32>>,
    backward: Vec<Vec<i32>>,
}

impl PrecomputedIndexes for DistributePrecomputed {}

impl DistributeComponent {
    fn new(input_dim: usize, output_dim: usize) -> std::result::Result<Self, String> {
        if input_dim == 0 || output_dim == 0 || !input_dim.is_multiple_of(output_dim) {
            return Err(format!(
                "input-dim ({input_dim}) must be a positive multiple of output-dim ({output_dim})"
            ));
        }
        Ok(DistributeComponent {
            input_dim,
            output_dim,
        })
    }

    /// Kaldi's DistributeComponent::InitFromConfig.
    pub fn from_config(cfg: &ConfigLine, _rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let input_dim = param_init::require_positive(cfg, "input-dim")?;
        let output_dim = param_init::require_positive(cfg, "output-dim")?;
        let c = Self::new(input_dim, output_dim)
            .map_err(|m| cfg.error_at_value("output-dim", format!("DistributeComponent: {m}")))?;
        Ok(Box::new(c))
    }

    /// Reads a DistributeComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let at = r.pos();
        let input_dim = read_dim_field(r, "<InputDim>", "input dim")?;
        let output_dim = read_dim_field(r, "<OutputDim>", "output dim")?;
        kaldi_fields::expect_closing(r, DISTRIBUTE)?;
        let c = Self::new(input_dim, output_dim).map_err(|m| r.err_at(at, m))?;
        Ok(Box::new(c))
    }

    fn num_blocks(&self) -> usize {
        self.input_dim / self.output_dim
    }

    /// The input Index of an output Index and the block of the input it takes.
    fn input_index_and_block(&self, o: &Index) -> (Index, usize) {
        let b = self.num_blocks() as i64;
        let x = o.x as i64;
        let input_x = x.div_euclid(b);
        (
            Index::new(o.n, o.t, input_x as i32),
            x.rem_euclid(b) as usize,
        )
    }

    /// The precomputed maps if they fit matrices of these sizes.
    fn maps<'a>(
        &self,
        indexes: Option<&'a dyn PrecomputedIndexes>,
        num_in: usize,
        num_out: usize,
    ) -> Option<&'a DistributePrecomputed> {
        indexes
            .and_then(|p| p.as_any().downcast_ref::<DistributePrecomputed>())
            .filter(|p| {
                p.num_input_rows == num_in
                    && p.num_output_rows == num_out
                    && p.forward.len() == self.num_blocks()
            })
    }
}

impl Component for DistributeComponent {
    fn describe(&self) -> Description {
        Description::new(
            DISTRIBUTE,
            self.input_dim,
            self.output_dim,
            Properties::default(),
        )
    }
    fn propagate(&self, mut step: Propagate<'_>) -> Option<Memo> {
        step.output.set_zero();
        // Without step.indexes for this step there is nothing to distribute (the compiler always
        // precomputes them); the step.output stays zero rather than guessing.
        if let Some(p) = self.maps(step.indexes, step.input.num_rows(), step.output.num_rows()) {
            let d = self.output_dim;
            for (b, rows) in p.forward.iter().enumerate() {
                step.output
                    .add_rows(1.0, step.input.cols_range(b * d, d), rows);
            }
        }
        None
    }
    fn backprop(&self, step: Backprop<'_>) {
        let Some(mut g) = step.in_deriv else {
            return;
        };
        let Some(p) = self.maps(step.indexes, g.num_rows(), step.out_deriv.num_rows()) else {
            g.set_zero();
            return;
        };
        let d = self.output_dim;
        for (b, rows) in p.backward.iter().enumerate() {
            g.cols_range_mut(b * d, d).copy_rows(step.out_deriv, rows);
        }
    }
    fn kaldi_fields(&self) -> Vec<Field<'_>> {
        vec![
            ("<InputDim>", &self.input_dim),
            ("<OutputDim>", &self.output_dim),
        ]
    }
    fn info(&self) -> String {
        format!(
            "{DISTRIBUTE}, input-dim={}, output-dim={}",
            self.input_dim, self.output_dim
        )
    }
    component_boilerplate!();

    fn output_t_range(&self, input: TRange) -> TRange {
        input
    }
    fn get_input_indexes(&self, _: &MiscComputationInfo, o: &Index, desired: &mut Vec<Index>) {
        desired.clear();
        desired.push(self.input_index_and_block(o).0);
    }
    fn precompute_indexes(
        &self,
        _: &MiscComputationInfo,
        input: &[Index],
        output: &[Index],
        _need_backprop: bool,
    ) -> Option<Box<dyn PrecomputedIndexes>> {
        let pos: FxHashMap<Index, usize> = input.iter().enumerate().map(|(i, x)| (*x, i)).collect();
        let nb = self.num_blocks();
        let mut forward = vec![vec![-1i32; output.len()]; nb];
        let mut backward = vec![vec![-1i32; input.len()]; nb];
        for (i, o) in output.iter().enumerate() {
            let (idx, b) = self.input_index_and_block(o);
            // An output whose input is missing stays zero (the graph builder only asks for
            // computable ones).
            if let Some(&j) = pos.get(&idx) {
                forward[b][i] = j as i32;
                backward[b][j] = i as i32;
            }
        }
        Some(Box::new(DistributePrecomputed {
            num_input_rows: input.len(),
            num_output_rows: output.len(),
            forward,
            backward,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_map_to_x_with_floor_division() {
        let c = DistributeComponent::new(6, 2).unwrap();
        let at = |x| c.input_index_and_block(&Index::new(0, 5, x));
        assert_eq!(at(0), (Index::new(0, 5, 0), 0));
        assert_eq!(at(2), (Index::new(0, 5, 0), 2));
        assert_eq!(at(3), (Index::new(0, 5, 1), 0));
        assert_eq!(at(-1), (Index::new(0, 5, -1), 2));
        assert_eq!(at(-3), (Index::new(0, 5, -1), 0));
        assert!(DistributeComponent::new(6, 4).is_err());
    }
}
