//! Reshaped views and the factorised block gather/scatter that turn a convolution into one
//! large GEMM ("unfold", im2col): every (row, group) pair of the destination reads one block of
//! `block` consecutive source columns per slot, from the source row chosen by (row, slot) and
//! the column chosen by (group, slot). The index tables are small (rows × slots and
//! groups × slots), not one entry per copied block.

use super::on_device;
use super::parallel::for_row_blocks;
use super::{MatView, MatViewMut, Real};

impl<'a> MatView<'a> {
    /// The same elements read as `rows` × `cols` (row-major), if the view is contiguous and
    /// has exactly that many elements (Kaldi's CuSubMatrix over a matrix's data).
    pub fn reshaped(&self, rows: usize, cols: usize) -> Option<MatView<'a>> {
        let n = self.num_rows() * self.num_cols();
        (self.is_contiguous() && rows * cols == n)
            .then(|| MatView::from_slice(&self.as_slice()[..n], rows, cols))
    }
}

impl<'a> MatViewMut<'a> {
    /// The same elements read as `rows` × `cols` (row-major), if the view is contiguous and
    /// has exactly that many elements.
    pub fn reshaped_mut(&mut self, rows: usize, cols: usize) -> Option<MatViewMut<'_>> {
        let n = self.num_rows() * self.num_cols();
        let contiguous = self.stride() == self.num_cols() || self.num_rows() <= 1;
        if !contiguous || rows * cols != n {
            return None;
        }
        Some(MatViewMut::from_slice(
            &mut self.as_mut_slice()[..n],
            rows,
            cols,
        ))
    }

    /// Unfold: with `slots = self.cols / block` and `groups` destination rows per source row
    /// group, `self[r·groups + g, s·block .. +block] = src[rows[r·slots + s], cols[g·slots + s]
    /// .. +block]`, or zeros where either index is −1.
    ///
    /// # Panics
    /// If the tables or an index do not fit the shapes (a programming error).
    pub fn copy_blocks_outer(
        &mut self,
        src: MatView<'_>,
        block: usize,
        groups: usize,
        rows: &[i32],
        cols: &[i32],
    ) {
        let slots = check_outer(self.num_rows(), self.num_cols(), block, groups, rows, cols);
        on_device!(self.place.on_device() && src.place.on_device() => super::cuda_ops::copy_blocks_outer(self, src, (block, groups), rows, cols));
        let in_range = |j: i32, c: i32| {
            assert!(
                (j as usize) < src.num_rows() && c as usize + block <= src.num_cols(),
                "copy_blocks_outer: source block ({j}, {c}) outside {}x{}",
                src.num_rows(),
                src.num_cols()
            );
        };
        for_row_blocks(self.rb(), |first, mut dst| {
            for i in 0..dst.num_rows() {
                let (r, g) = ((first + i) / groups, (first + i) % groups);
                let out = dst.row_mut(i);
                for s in 0..slots {
                    let (j, c) = (rows[r * slots + s], cols[g * slots + s]);
                    let d = &mut out[s * block..(s + 1) * block];
                    if j < 0 || c < 0 {
                        d.fill(0.0);
                    } else {
                        in_range(j, c);
                        let c = c as usize;
                        d.copy_from_slice(&src.row(j as usize)[c..c + block]);
                    }
                }
            }
        });
    }
}

impl MatView<'_> {
    /// Fold, the transpose of [`MatViewMut::copy_blocks_outer`]: adds `alpha` times each block
    /// of `self` to the source block it was gathered from (blocks that overlap add up).
    ///
    /// # Panics
    /// If the tables or an index do not fit the shapes (a programming error).
    pub fn add_blocks_outer_to(
        &self,
        alpha: Real,
        dst: &mut MatViewMut<'_>,
        block: usize,
        groups: usize,
        rows: &[i32],
        cols: &[i32],
    ) {
        let slots = check_outer(self.num_rows(), self.num_cols(), block, groups, rows, cols);
        on_device!(self.place.on_device() && dst.place.on_device() => super::cuda_ops::add_blocks_outer_to(dst, *self, alpha, (block, groups), rows, cols));
        let (dr, dc) = (dst.num_rows(), dst.num_cols());
        for i in 0..self.num_rows() {
            let (r, g) = (i / groups, i % groups);
            let from = self.row(i);
            for s in 0..slots {
                let (j, c) = (rows[r * slots + s], cols[g * slots + s]);
                if j < 0 || c < 0 {
                    continue;
                }
                let (j, c) = (j as usize, c as usize);
                assert!(
                    j < dr && c + block <= dc,
                    "add_blocks_outer_to: block ({j}, {c}) outside {dr}x{dc}"
                );
                let to = &mut dst.row_mut(j)[c..c + block];
                for (x, &y) in to.iter_mut().zip(&from[s * block..(s + 1) * block]) {
                    *x += alpha * y;
                }
            }
        }
    }
}

/// Checks the shapes of an outer block gather; returns the number of slots.
fn check_outer(
    num_rows: usize,
    num_cols: usize,
    block: usize,
    groups: usize,
    rows: &[i32],
    cols: &[i32],
) -> usize {
    assert!(block > 0 && groups > 0 && num_cols.is_multiple_of(block));
    let slots = num_cols / block;
    assert!(
        num_rows.is_multiple_of(groups)
            && rows.len() == num_rows / groups * slots
            && cols.len() == groups * slots,
        "outer block tables: {} row and {} column entries for {num_rows}x{num_cols}, \
         block {block}, {groups} groups",
        rows.len(),
        cols.len()
    );
    slots
}

#[cfg(test)]
mod tests {
    use super::super::Matrix;

    #[test]
    fn unfold_then_fold_is_the_transpose() {
        // Source 2×6 (three blocks of 2); destination: 2 row groups × 2 groups, 2 slots.
        let src = Matrix::from_vec(2, 6, (0..12).map(|v| v as f32).collect());
        let rows = [0, 1, 1, -1];
        let cols = [0, 2, 4, -1];
        let mut d = Matrix::zeros(4, 4);
        d.view_mut()
            .copy_blocks_outer(src.view(), 2, 2, &rows, &cols);
        #[rustfmt::skip]
        let want = vec![
            0.0, 1.0, 8.0, 9.0,
            4.0, 5.0, 0.0, 0.0,
            6.0, 7.0, 0.0, 0.0,
            10.0, 11.0, 0.0, 0.0,
        ];
        assert_eq!(d.to_vec(), want);
        // <unfold(x), y> == <x, fold(y)> for any y.
        let y = Matrix::from_vec(4, 4, (0..16).map(|v| (v * 7 % 5) as f32 - 2.0).collect());
        let mut folded = Matrix::zeros(2, 6);
        y.view()
            .add_blocks_outer_to(1.0, &mut folded.view_mut(), 2, 2, &rows, &cols);
        let lhs: f32 = d.to_vec().iter().zip(y.to_vec()).map(|(a, b)| a * b).sum();
        let rhs: f32 = src
            .to_vec()
            .iter()
            .zip(folded.to_vec())
            .map(|(a, b)| a * b)
            .sum();
        assert_eq!(lhs, rhs);
    }

    #[test]
    fn reshape_needs_contiguous_views() {
        let m = Matrix::from_vec(2, 4, (0..8).map(|v| v as f32).collect());
        let r = m.view().reshaped(4, 2).unwrap();
        assert_eq!(r.get(3, 1), 7.0);
        assert!(m.view().cols_range(0, 2).reshaped(2, 2).is_none());
        assert!(m.view().reshaped(3, 3).is_none());
    }
}
