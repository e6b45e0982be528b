//! Row-parallel execution of the row-wise kernels used in training, on the rayon pool the
//! GEMMs use, within the process-wide thread bound ([`super::num_threads`]).
//!
//! A kernel hands over its destination and a closure that processes a block of consecutive
//! rows; every row is computed by the same code whichever block it lands in, so results do
//! not depend on the number of threads.

use super::gemm::num_threads;
use super::MatViewMut;

/// Below this many elements a kernel stays on the calling thread: a rayon fork/join costs a
/// few microseconds, about what a single thread needs for this many elements.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 17;

/// Calls `f(first_row, block)` on blocks of consecutive rows that together cover `m`: one
/// block (the whole of `m`) when `m` is small or one thread is allowed, else one block per
/// thread, run in parallel.
pub(super) fn for_row_blocks<F>(m: MatViewMut<'_>, f: F)
where
    F: Fn(usize, MatViewMut<'_>) + Sync,
{
    let rows = m.num_rows();
    let parts = if rows.saturating_mul(m.num_cols()) < PARALLEL_MIN_ELEMENTS {
        1
    } else {
        num_threads().min(rows).max(1)
    };
    split(0, m, parts, &f);
}

/// Calls `f(first, chunk)` on consecutive chunks of `out` that together cover it: one chunk
/// when `work` (the elements the whole call reads or writes) is small or one thread is
/// allowed, else one chunk per thread, run in parallel. For per-row results of a reduction.
pub(super) fn for_chunks<T, F>(out: &mut [T], work: usize, f: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Sync,
{
    let parts = if work < PARALLEL_MIN_ELEMENTS {
        1
    } else {
        num_threads().min(out.len()).max(1)
    };
    split(0, out, parts, &f);
}

/// What [`split`] divides: a matrix view by rows, a slice by elements.
trait Halves: Send + Sized {
    fn length(&self) -> usize;
    fn split_at(self, r: usize) -> (Self, Self);
}

impl Halves for MatViewMut<'_> {
    fn length(&self) -> usize {
        self.num_rows()
    }
    fn split_at(self, r: usize) -> (Self, Self) {
        self.split_rows_at(r)
    }
}

impl<T: Send> Halves for &mut [T] {
    fn length(&self) -> usize {
        self.len()
    }
    fn split_at(self, r: usize) -> (Self, Self) {
        self.split_at_mut(r)
    }
}

/// Calls `f(first, part)` on `parts` consecutive parts of `whole` (in parallel when more than
/// one); `first` is the part's offset in `whole`.
fn split<H: Halves, F>(first: usize, whole: H, parts: usize, f: &F)
where
    F: Fn(usize, H) + Sync,
{
    if parts <= 1 {
        f(first, whole);
        return;
    }
    let left = parts / 2;
    let r = whole.length() * left / parts;
    let (a, b) = whole.split_at(r);
    rayon::join(
        || split(first, a, left, f),
        || split(first + r, b, parts - left, f),
    );
}
