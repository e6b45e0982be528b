//! memory-compression-level (Kaldi's `OptimizeMemoryCompression`): a matrix that the
//! forward pass computes and only a ReLU's backprop reads again is kept between the two
//! passes as one byte per element (whether each value is > 0, all that backprop reads), so
//! it does not hold its four bytes per element through the peak of the computation, which is
//! reached where the backward pass starts.
//!
//! Level 1 (Kaldi's default) is this, and is exact: the backprop sees the same signs, so
//! derivatives are bit-identical. Kaldi's level 2 adds a lossy 16-bit form for every other
//! matrix that lives across the two passes (values clamped to ±10); compnet does not build
//! it (derivatives would change), and treats levels above 1 as 1.
//!
//! Which backprops qualify is the component's flag `BACKPROP_NEEDS_OUTPUT_SIGN` (Kaldi tests
//! the type name RectifiedLinearComponent). The pass runs last and leaves looped
//! computations alone (the caller's `OptimizeOptions::looped`), as Kaldi does.

use super::analysis::{command_accesses, Access};
use super::computation::{Command, NnetComputation};
use crate::matrix::CompressionKind;
use crate::nnet::Nnet;

/// Inserts CompressMatrix after the last forward use and DecompressMatrix before the one
/// backward use of every matrix that qualifies (module doc); `level` 0 does nothing.
/// Returns how many matrices it compresses.
pub fn optimize_memory_compression(nnet: &Nnet, comp: &mut NnetComputation, level: i32) -> usize {
    if level <= 0 {
        return 0;
    }
    let mut markers = comp
        .commands
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c, Command::NoOperationMarker))
        .map(|(k, _)| k);
    // No backward pass, or (unexpectedly) several: nothing to do, as in Kaldi.
    let (Some(middle), None) = (markers.next(), markers.next()) else {
        return 0;
    };
    let nm = comp.matrices.len();
    // Per matrix: (command, access, read only as a sign-only backprop's out-value).
    let mut accesses: Vec<Vec<(usize, Access, bool)>> = vec![Vec::new(); nm];
    let mut is_output = vec![false; nm];
    for (k, cmd) in comp.commands.iter().enumerate() {
        let acc = command_accesses(nnet, cmd);
        let sign_reader = acc.reads_output_sign(nnet);
        let subs = acc.submatrices(comp);
        for &(s, a) in &subs {
            let m = comp.submatrices[s].matrix;
            let only_out_value = sign_reader && acc.names_of(s).all(|n| n == "out-value");
            if let Some(v) = accesses.get_mut(m) {
                v.push((k, a, only_out_value));
            }
            if matches!(cmd, Command::ProvideOutput { .. }) && m < nm {
                is_output[m] = true;
            }
        }
    }
    // (position to insert before, command), in position order once sorted.
    let mut inserts: Vec<(usize, Command)> = Vec::new();
    for m in 1..nm {
        let acc = &accesses[m];
        if is_output[m] {
            continue;
        }
        let first_backward = acc.partition_point(|&(k, _, _)| k < middle);
        // Used in both passes, and only once in the backward one.
        if first_backward == 0 || first_backward + 1 != acc.len() {
            continue;
        }
        let (last_forward, _, _) = acc[first_backward - 1];
        let (backward, access, only_out_value) = acc[first_backward];
        if access == Access::Read && only_out_value {
            let kind = CompressionKind::SignUint8;
            inserts.push((last_forward + 1, Command::CompressMatrix { m, kind }));
            inserts.push((backward, Command::DecompressMatrix { m }));
        }
    }
    let count = inserts.len() / 2;
    if count > 0 {
        insert_commands(comp, inserts);
    }
    count
}

/// Inserts each `(k, command)` just before command `k` (`k` = len: at the end), keeping the
/// given order among insertions at one place (Kaldi's `InsertCommands`).
fn insert_commands(comp: &mut NnetComputation, mut inserts: Vec<(usize, Command)>) {
    inserts.sort_by_key(|&(k, _)| k);
    let old = std::mem::take(&mut comp.commands);
    let mut out = Vec::with_capacity(old.len() + inserts.len());
    let mut pending = inserts.into_iter().peekable();
    for (k, c) in old.into_iter().enumerate() {
        while let Some((_, cmd)) = pending.next_if(|&(at, _)| at <= k) {
            out.push(cmd);
        }
        out.push(c);
    }
    out.extend(pending.map(|(_, c)| c));
    comp.commands = out;
}
