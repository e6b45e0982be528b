//! How much matrix memory a computation holds at once: the figure the optimizer's memory
//! passes are judged by (`compnet compile --memory`, docs/PERFORMANCE.md).
//!
//! Walks the commands in order: an allocation adds the matrix's bytes, a deallocation takes
//! them away. Matrices the computation never frees (outputs, requested derivatives) stay
//! counted to the end. Inputs are counted from their allocation, as the executor holds them.

use super::computation::{Command, NnetComputation};
use crate::matrix::{CompressionKind, Real};

/// The peak of live matrix bytes and where it is reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryPeak {
    /// Bytes of matrix data live at the peak.
    pub peak_bytes: u64,
    /// The command after which the peak is first reached.
    pub at_command: usize,
    /// Bytes of every matrix of the computation together (the peak of a computation that
    /// allocates everything first, as the compiler does).
    pub total_bytes: u64,
}

/// The size of matrix `m` in bytes.
pub fn matrix_bytes(comp: &NnetComputation, m: usize) -> u64 {
    comp.matrices.get(m).map_or(0, |i| {
        (i.num_rows as u64) * (i.num_cols as u64) * std::mem::size_of::<Real>() as u64
    })
}

/// The size of matrix `m` compressed as `kind` says.
fn compressed_bytes(comp: &NnetComputation, m: usize, kind: CompressionKind) -> u64 {
    comp.matrices.get(m).map_or(0, |i| {
        (i.num_rows as u64) * (i.num_cols as u64) * kind.bytes_per_element()
    })
}

/// The peak of live matrix bytes of `comp` (a compressed matrix counts at its compressed
/// size).
pub fn peak_matrix_memory(comp: &NnetComputation) -> MemoryPeak {
    let mut live = vec![false; comp.matrices.len()];
    let mut compressed: Vec<Option<CompressionKind>> = vec![None; comp.matrices.len()];
    let mut now = 0u64;
    let mut peak = MemoryPeak {
        total_bytes: (1..comp.matrices.len())
            .map(|m| matrix_bytes(comp, m))
            .sum(),
        ..Default::default()
    };
    for (k, cmd) in comp.commands.iter().enumerate() {
        match *cmd {
            Command::AllocMatrix { m } | Command::AllocMatrixUndefined { m }
                if m < live.len() && !live[m] =>
            {
                live[m] = true;
                now += matrix_bytes(comp, m);
            }
            Command::DeallocMatrix { m } if m < live.len() && live[m] => {
                live[m] = false;
                now -= matrix_bytes(comp, m);
            }
            // allocate-from-other: `a` takes `b`'s storage (same size); nothing changes.
            Command::SwapMatrix { a, b }
                if a < live.len() && b < live.len() && !live[a] && live[b] =>
            {
                live.swap(a, b);
            }
            Command::CompressMatrix { m, kind } if m < live.len() && live[m] => {
                now -= matrix_bytes(comp, m);
                now += compressed_bytes(comp, m, kind);
                compressed[m] = Some(kind);
            }
            Command::DecompressMatrix { m } if m < live.len() && live[m] => {
                if let Some(kind) = compressed[m].take() {
                    now -= compressed_bytes(comp, m, kind);
                    now += matrix_bytes(comp, m);
                }
            }
            _ => {}
        }
        if now > peak.peak_bytes {
            peak.peak_bytes = now;
            peak.at_command = k;
        }
    }
    peak
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_follows_allocations_and_frees() {
        let mut c = NnetComputation::default();
        let a = c.new_matrix(10, 4); // 160 bytes
        let b = c.new_matrix(5, 4); // 80
        let d = c.new_matrix(1, 1); // 4
        c.commands = vec![
            Command::AllocMatrix { m: a },
            Command::AllocMatrixUndefined { m: b },
            Command::DeallocMatrix { m: a },
            Command::AllocMatrix { m: d },
            Command::DeallocMatrix { m: b },
        ];
        let p = peak_matrix_memory(&c);
        assert_eq!(p.peak_bytes, 240);
        assert_eq!(p.at_command, 1);
        assert_eq!(p.total_bytes, 244);
    }
}
