//! Row and column gather/scatter operations with index vectors (−1 means "leave" or "zero"),
//! as the compiled computation's CopyRows/AddRows/AddRowRanges/CopyCols commands need.

use super::on_device;
use super::parallel::for_row_blocks;
use super::{MatView, MatViewMut, Real};

impl MatViewMut<'_> {
    /// `self[i] = src[idx[i]]`, or zero where `idx[i] = −1` (Kaldi's CopyRows).
    pub fn copy_rows(&mut self, src: MatView<'_>, idx: &[i32]) {
        assert_eq!(idx.len(), self.num_rows());
        on_device!(self.place.on_device() && src.place.on_device() && src.num_cols() == self.num_cols() => super::cuda_ops::rows_by_index("k_copy_rows", self, src, idx, None));
        assert_eq!(idx.len(), self.num_rows());
        assert_eq!(src.num_cols(), self.num_cols());
        for_row_blocks(self.rb(), |first, mut dst| {
            for (i, &j) in idx[first..first + dst.num_rows()].iter().enumerate() {
                if j < 0 {
                    dst.row_mut(i).fill(0.0);
                } else {
                    dst.row_mut(i).copy_from_slice(src.row(j as usize));
                }
            }
        });
    }
    /// `self[i] += alpha · src[idx[i]]` where `idx[i] ≠ −1` (Kaldi's AddRows).
    pub fn add_rows(&mut self, alpha: Real, src: MatView<'_>, idx: &[i32]) {
        assert_eq!(idx.len(), self.num_rows());
        on_device!(self.place.on_device() && src.place.on_device() && src.num_cols() == self.num_cols() => super::cuda_ops::rows_by_index("k_add_rows", self, src, idx, Some(alpha)));
        assert_eq!(idx.len(), self.num_rows());
        assert_eq!(src.num_cols(), self.num_cols());
        for_row_blocks(self.rb(), |first, mut dst| {
            for (i, &j) in idx[first..first + dst.num_rows()].iter().enumerate() {
                if j >= 0 {
                    for (x, &y) in dst.row_mut(i).iter_mut().zip(src.row(j as usize)) {
                        *x += alpha * y;
                    }
                }
            }
        });
    }
    /// `self[idx[i]] = src[i]` where `idx[i] ≠ −1` (Kaldi's CopyToRows, single destination).
    pub fn copy_to_rows_from(&mut self, src: MatView<'_>, idx: &[i32]) {
        assert_eq!(idx.len(), src.num_rows());
        assert!(
            idx.iter().all(|&j| j < self.num_rows() as i32),
            "copy_to_rows_from: row index"
        );
        on_device!(self.place.on_device() && src.place.on_device() && src.num_cols() == self.num_cols() => super::cuda_ops::rows_by_index("k_copy_to_rows", self, src, idx, None));
        assert_eq!(idx.len(), src.num_rows());
        for (i, &j) in idx.iter().enumerate() {
            if j >= 0 {
                self.row_mut(j as usize).copy_from_slice(src.row(i));
            }
        }
    }
    /// `self[idx[i]] += alpha · src[i]` where `idx[i] ≠ −1` (Kaldi's AddToRows).
    pub fn add_to_rows_from(&mut self, alpha: Real, src: MatView<'_>, idx: &[i32]) {
        assert_eq!(idx.len(), src.num_rows());
        assert!(
            idx.iter().all(|&j| j < self.num_rows() as i32),
            "add_to_rows_from: row index"
        );
        on_device!(self.place.on_device() && src.place.on_device() && src.num_cols() == self.num_cols() => super::cuda_ops::rows_by_index("k_add_to_rows", self, src, idx, Some(alpha)));
        assert_eq!(idx.len(), src.num_rows());
        for (i, &j) in idx.iter().enumerate() {
            if j >= 0 {
                for (x, &y) in self.row_mut(j as usize).iter_mut().zip(src.row(i)) {
                    *x += alpha * y;
                }
            }
        }
    }
    /// `self[i] = m[j]` for `srcs[i] = Some((m, j))`, zero for `None` (Kaldi's CopyRows
    /// with row pointers).
    pub fn copy_rows_multi(&mut self, srcs: &[Option<(MatView<'_>, usize)>]) {
        assert_eq!(srcs.len(), self.num_rows());
        for (i, s) in srcs.iter().enumerate() {
            match s {
                Some((m, j)) => self.copy_row_from(i, *m, *j),
                None => self.row_mut(i).fill(0.0),
            }
        }
    }
    /// `self[i] += alpha · m[j]` for `srcs[i] = Some((m, j))` (Kaldi's AddRows with row
    /// pointers).
    pub fn add_rows_multi(&mut self, alpha: Real, srcs: &[Option<(MatView<'_>, usize)>]) {
        assert_eq!(srcs.len(), self.num_rows());
        for (i, s) in srcs.iter().enumerate() {
            if let Some((m, j)) = s {
                self.add_row_from(i, alpha, *m, *j);
            }
        }
    }
    /// `self[i] += Σ_{j ∈ [start, end)} src[j]` with `ranges[i] = (start, end)`;
    /// `(−1, −1)` or an empty range adds nothing (Kaldi's AddRowRanges).
    pub fn add_row_ranges(&mut self, src: MatView<'_>, ranges: &[(i32, i32)]) {
        assert_eq!(ranges.len(), self.num_rows());
        for (i, &(s, e)) in ranges.iter().enumerate() {
            for j in s.max(0)..e {
                for (x, &y) in self.row_mut(i).iter_mut().zip(src.row(j as usize)) {
                    *x += y;
                }
            }
        }
    }
    /// `self[:, c] = src[:, idx[c]]`, or zero where `idx[c] = −1` (Kaldi's CopyCols).
    pub fn copy_cols(&mut self, src: MatView<'_>, idx: &[i32]) {
        assert_eq!(idx.len(), self.num_cols());
        assert_eq!(src.num_rows(), self.num_rows());
        on_device!(self.place.on_device() && src.place.on_device() => {
            let n = src.num_cols() as i32;
            assert!(idx.iter().all(|&j| j < n), "copy_cols: column index out of range");
            super::cuda_ops::copy_cols(self, src, idx)
        });
        for r in 0..self.num_rows() {
            let s = src.row(r);
            for (x, &j) in self.row_mut(r).iter_mut().zip(idx) {
                *x = if j < 0 { 0.0 } else { s[j as usize] };
            }
        }
    }
    /// `self[:, c] += src[:, idx[c]]` where `idx[c] ≠ −1` (Kaldi's AddCols).
    pub fn add_cols(&mut self, src: MatView<'_>, idx: &[i32]) {
        assert_eq!(idx.len(), self.num_cols());
        assert_eq!(src.num_rows(), self.num_rows());
        for r in 0..self.num_rows() {
            let s = src.row(r);
            for (x, &j) in self.row_mut(r).iter_mut().zip(idx) {
                if j >= 0 {
                    *x += s[j as usize];
                }
            }
        }
    }
    /// `self[i] += alpha · Σ_{j ∈ [start, end)} src[j]` (AddRowRanges with a scale; each
    /// product is added on its own, so alpha = 1 gives [`add_row_ranges`](Self::add_row_ranges)).
    pub fn add_row_ranges_scaled(&mut self, alpha: Real, src: MatView<'_>, ranges: &[(i32, i32)]) {
        assert_eq!(ranges.len(), self.num_rows());
        for (i, &(a, b)) in ranges.iter().enumerate() {
            let row = self.row_mut(i);
            for j in a.max(0)..b {
                for (x, &y) in row.iter_mut().zip(src.row(j as usize)) {
                    *x += alpha * y;
                }
            }
        }
    }
    /// Row `i` becomes zero.
    pub fn zero_row(&mut self, i: usize) {
        self.row_mut(i).fill(0.0);
    }
    /// Rows `i` with `which[i]` become zero (rows past `which.len()` are kept).
    pub fn zero_rows(&mut self, which: &[bool]) {
        for (i, _) in which.iter().enumerate().filter(|(_, &z)| z) {
            self.row_mut(i).fill(0.0);
        }
    }
    /// `self[i] = src[j]` (one row; Kaldi's `Row(i).CopyFromVec(src.Row(j))`).
    pub fn copy_row_from(&mut self, i: usize, src: MatView<'_>, j: usize) {
        assert_eq!(src.num_cols(), self.num_cols(), "copy_row_from: dim");
        self.row_mut(i).copy_from_slice(src.row(j));
    }
    /// `self[i] = alpha · src[j]` (one row).
    pub fn copy_row_scaled_from(&mut self, i: usize, alpha: Real, src: MatView<'_>, j: usize) {
        assert_eq!(src.num_cols(), self.num_cols(), "copy_row_scaled_from: dim");
        for (x, &y) in self.row_mut(i).iter_mut().zip(src.row(j)) {
            *x = alpha * y;
        }
    }
    /// `self[i] += alpha · src[j]` (one row).
    pub fn add_row_from(&mut self, i: usize, alpha: Real, src: MatView<'_>, j: usize) {
        assert_eq!(src.num_cols(), self.num_cols(), "add_row_from: dim");
        for (x, &y) in self.row_mut(i).iter_mut().zip(src.row(j)) {
            *x += alpha * y;
        }
    }
}
