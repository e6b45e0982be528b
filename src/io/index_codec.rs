//! Kaldi's Index-vector codec (facts §3.3): `<I1V>` count, then `<I1> n t x` per index in
//! text, or one signed byte per index in binary (a t step from the previous index when n and
//! x are unchanged, else 127 followed by n, t, x as int32s).

use super::codec::{TokenReader, TokenWriter};
use crate::error::Result;
use crate::index::Index;

/// Byte that announces a full (n, t, x) triple in the binary form.
const FULL: u8 = 127;

/// Writes an Index vector (Kaldi's WriteIndexVector).
pub fn write_index_vector(w: &mut TokenWriter, v: &[Index]) {
    w.token("<I1V>");
    w.i32(v.len() as i32);
    if !w.is_binary() {
        for ix in v {
            w.token("<I1>");
            w.i32(ix.n);
            w.i32(ix.t);
            w.i32(ix.x);
        }
        return;
    }
    let mut prev = Index::new(0, 0, 0);
    for ix in v {
        let dt = ix.t as i64 - prev.t as i64;
        if ix.n == prev.n && ix.x == prev.x && dt.abs() < 125 {
            w.raw(&[(dt as i8) as u8]);
        } else {
            w.raw(&[FULL]);
            w.i32(ix.n);
            w.i32(ix.t);
            w.i32(ix.x);
        }
        prev = *ix;
    }
}

/// Reads an Index vector (Kaldi's ReadIndexVector).
pub fn read_index_vector(r: &mut TokenReader<'_>) -> Result<Vec<Index>> {
    r.expect_token("<I1V>")?;
    let at = r.pos();
    let n = r.i32()?;
    // Every index takes at least one byte, so a count beyond the remaining input is corrupt.
    if n < 0 || n as usize > r.rest().len() {
        return Err(r.err_at(at, format!("a plausible index count (got {n})")));
    }
    let mut v = Vec::with_capacity(n as usize);
    let mut prev = Index::new(0, 0, 0);
    for _ in 0..n {
        let ix = if r.is_binary() {
            let at = r.pos();
            let c = r.byte()? as i8;
            if (c as i32).abs() < 125 {
                Index::new(prev.n, prev.t.wrapping_add(c as i32), prev.x)
            } else if c as u8 == FULL {
                Index::new(r.i32()?, r.i32()?, r.i32()?)
            } else {
                return Err(r.err_at(at, "a compact index byte (|c| < 125) or 127"));
            }
        } else {
            r.expect_token("<I1>")?;
            Index::new(r.i32()?, r.i32()?, r.i32()?)
        };
        v.push(ix);
        prev = ix;
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example bytes quoted in facts §3.3 (from a real nnet3-get-egs archive).
    #[test]
    fn decodes_the_documented_example() {
        let mut b = b"<I1V> \x04\x08\x00\x00\x00".to_vec();
        b.extend([0xfe, 1, 1, 1, 1, 1, 1, 1]);
        let mut r = TokenReader::new(&b, true, "t");
        let v = read_index_vector(&mut r).unwrap();
        let want: Vec<Index> = (-2..6).map(|t| Index::new(0, t, 0)).collect();
        assert_eq!(v, want);
        let mut w = TokenWriter::new(true);
        write_index_vector(&mut w, &v);
        assert_eq!(w.bytes(), b.as_slice());
    }
}
