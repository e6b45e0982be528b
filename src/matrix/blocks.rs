//! Operations on a matrix read as blocks of `block_dim` consecutive columns, each block of a
//! row treated like a row of its own (the reshape Kaldi's BatchNorm, block-wise ReLU
//! self-repair and block dropout masks do). The block width is the length of the vector
//! operands; a row whose width is not a multiple of it ends in a shorter block.

use super::buf::on_device;
use super::{MatView, MatViewMut, Real, Vector};

impl MatViewMut<'_> {
    /// `self[i, b·n + j] += v[j]` with n = v.len().
    pub fn add_vec_per_block(&mut self, v: &Vector) {
        on_device!(self.place.on_device() && v.dim() == self.num_cols() => self.add_vec_to_rows(1.0, v, 1.0));
        let v = &v.data[..];
        for r in 0..self.num_rows() {
            for block in self.row_mut(r).chunks_mut(v.len()) {
                for (d, &a) in block.iter_mut().zip(v) {
                    *d += a;
                }
            }
        }
    }
    /// `self[i, b·n + j] *= v[j]` with n = v.len().
    pub fn mul_vec_per_block(&mut self, v: &Vector) {
        on_device!(self.place.on_device() => super::cuda_ops::per_block(self, 0, [v, v, v], None));
        let v = &v.data[..];
        for r in 0..self.num_rows() {
            for block in self.row_mut(r).chunks_mut(v.len()) {
                block.iter_mut().zip(v).for_each(|(d, &s)| *d *= s);
            }
        }
    }
    /// `self[i, b·n + j] = self[i, b·n + j] · mul[j] + add[j]` with n = mul.len() (vectorised;
    /// BatchNorm in test mode).
    pub fn mul_add_vec_per_block(&mut self, mul: &Vector, add: &Vector) {
        assert_eq!(mul.dim(), add.dim(), "mul_add_vec_per_block: dim");
        on_device!(self.place.on_device() => super::cuda_ops::per_block(self, 1, [mul, add, add], None));
        let (mul, add) = (&mul.data[..], &add.data[..]);
        for r in 0..self.num_rows() {
            for block in self.row_mut(r).chunks_mut(mul.len()) {
                super::simd::mul_add_elements(block, mul, add);
            }
        }
    }
    /// `self[i, b·n + j] = (self[i, b·n + j] − sub[j]) · mul[j]` with n = sub.len().
    pub fn sub_vec_mul_vec_per_block(&mut self, sub: &Vector, mul: &Vector) {
        assert_eq!(sub.dim(), mul.dim(), "sub_vec_mul_vec_per_block: dim");
        on_device!(self.place.on_device() => super::cuda_ops::per_block(self, 2, [sub, mul, mul], None));
        let (sub, mul) = (&sub.data[..], &mul.data[..]);
        for r in 0..self.num_rows() {
            for block in self.row_mut(r).chunks_mut(sub.len()) {
                for ((x, &m), &s) in block.iter_mut().zip(sub).zip(mul) {
                    *x = (*x - m) * s;
                }
            }
        }
    }
    /// `self[i, k] = (self[i, k] + add[j]) · mul[j] + a[i, k] · a_mul[j]` with k = b·n + j and
    /// n = add.len() (the BatchNorm training backward).
    pub fn add_vec_mul_vec_add_mat_vec_per_block(
        &mut self,
        add: &Vector,
        mul: &Vector,
        a: MatView<'_>,
        a_mul: &Vector,
    ) {
        let bd = add.dim();
        assert!(mul.dim() == bd && a_mul.dim() == bd, "per_block: dims");
        assert_eq!(a.num_rows(), self.num_rows(), "per_block: rows");
        on_device!(self.place.on_device() && a.place.on_device() && a.num_cols() == self.num_cols() => super::cuda_ops::per_block(self, 3, [add, mul, a_mul], Some(a)));
        let (add, mul, a_mul) = (&add.data[..], &mul.data[..], &a_mul.data[..]);
        for r in 0..self.num_rows() {
            let arow = a.row(r);
            for (b, db) in self.row_mut(r).chunks_mut(bd).enumerate() {
                let ab = &arow[b * bd..(b + 1) * bd];
                for j in 0..bd {
                    db[j] = (db[j] + add[j]) * mul[j] + ab[j] * a_mul[j];
                }
            }
        }
    }
    /// Multiplies every block of row i by row `row_map[i]` of `mask` (block width =
    /// mask.num_cols()); rows whose `row_map` entry is past the mask, and rows past
    /// `row_map.len()`, are left alone.
    pub fn mul_blocks_by_mask_rows(&mut self, mask: MatView<'_>, row_map: &[usize]) {
        let bd = mask.num_cols();
        for (r, &k) in row_map.iter().enumerate().take(self.num_rows()) {
            if k >= mask.num_rows() {
                continue;
            }
            let m = mask.row(k);
            for block in self.row_mut(r).chunks_mut(bd) {
                for (x, &s) in block.iter_mut().zip(m) {
                    *x *= s;
                }
            }
        }
    }
}

impl MatView<'_> {
    /// Per block column j: `(Σ x, Σ x²)` over every row and block, in f32, in row order.
    pub fn block_col_sum_and_sum_squares(&self, block_dim: usize) -> (Vector, Vector) {
        on_device!(self.place.on_device() => super::cuda_ops::block_col_stats(*self, None, block_dim));
        let mut sum = vec![0.0 as Real; block_dim];
        let mut sumsq = vec![0.0 as Real; block_dim];
        for r in 0..self.num_rows() {
            for blk in self.row(r).chunks(block_dim) {
                for ((m, u), &x) in sum.iter_mut().zip(sumsq.iter_mut()).zip(blk) {
                    *m += x;
                    *u += x * x;
                }
            }
        }
        (Vector::from_vec(sum), Vector::from_vec(sumsq))
    }
    /// Per block column j: `(Σ self ⊙ b, Σ b)` over every row and block, in f32, in row order.
    pub fn block_col_dot_and_sum(&self, b: MatView<'_>, block_dim: usize) -> (Vector, Vector) {
        assert_eq!(
            (self.num_rows(), self.num_cols()),
            (b.num_rows(), b.num_cols()),
            "block_col_dot_and_sum: shape"
        );
        on_device!(self.place.on_device() && b.place.on_device() => super::cuda_ops::block_col_stats(*self, Some(b), block_dim));
        let mut dot = vec![0.0 as Real; block_dim];
        let mut sum = vec![0.0 as Real; block_dim];
        for r in 0..self.num_rows() {
            for (zb, db) in self
                .row(r)
                .chunks(block_dim)
                .zip(b.row(r).chunks(block_dim))
            {
                for j in 0..block_dim {
                    dot[j] += zb[j] * db[j];
                    sum[j] += db[j];
                }
            }
        }
        (Vector::from_vec(dot), Vector::from_vec(sum))
    }
}
