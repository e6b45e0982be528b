//! Training examples ("egs", Kaldi's `NnetExample`, facts §3.3): named inputs / outputs, each
//! an Index per row plus a [`GeneralMatrix`]; read and written byte-identically to Kaldi.

use super::codec::{TokenReader, TokenWriter};
use super::compressed::CompressionMethod;
use super::index_codec::{read_index_vector, write_index_vector};
use super::sparse::GeneralMatrix;
use super::table::{SequentialTableReader, TableObject, TableWriter};
use crate::error::Result;
use crate::index::Index;

/// One named input or output of an example (Kaldi's `NnetIo`).
#[derive(Debug, Clone, PartialEq)]
pub struct NnetIo {
    /// Node name (`input`, `ivector`, `output`, ...).
    pub name: String,
    /// One Index per row of `features`.
    pub indexes: Vec<Index>,
    /// Features or supervision.
    pub features: GeneralMatrix,
}

/// A training example or minibatch (Kaldi's `NnetExample`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NnetExample {
    /// The inputs and outputs, in file order.
    pub io: Vec<NnetIo>,
}

impl NnetIo {
    /// Reads `<NnetIo> name <I1V>... <GeneralMatrix> </NnetIo>`.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Self> {
        r.expect_token("<NnetIo>")?;
        let name = r.token()?;
        let indexes = read_index_vector(r)?;
        let at = r.pos();
        let features = GeneralMatrix::read(r)?;
        if features.num_rows() != indexes.len() {
            return Err(r.err_at(
                at,
                format!(
                    "a matrix with one row per index ({} indexes, {} rows)",
                    indexes.len(),
                    features.num_rows()
                ),
            ));
        }
        r.expect_token("</NnetIo>")?;
        Ok(NnetIo {
            name,
            indexes,
            features,
        })
    }

    /// Writes the io.
    pub fn write(&self, w: &mut TokenWriter) {
        w.token("<NnetIo>");
        w.token(&self.name);
        write_index_vector(w, &self.indexes);
        self.features.write(w);
        w.token("</NnetIo>");
    }
}

impl NnetExample {
    /// Reads `<Nnet3Eg> <NumIo> N NnetIo... </Nnet3Eg>`.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Self> {
        r.expect_token("<Nnet3Eg>")?;
        r.expect_token("<NumIo>")?;
        let at = r.pos();
        let n = r.i32()?;
        if !(1..=1_000_000).contains(&n) || n as usize > r.rest().len() {
            return Err(r.err_at(at, format!("a number of ios in 1..1000000 (got {n})")));
        }
        let io = (0..n)
            .map(|_| NnetIo::read(r))
            .collect::<Result<Vec<_>>>()?;
        r.expect_token("</Nnet3Eg>")?;
        Ok(NnetExample { io })
    }

    /// Writes the example.
    pub fn write(&self, w: &mut TokenWriter) {
        w.token("<Nnet3Eg>");
        w.token("<NumIo>");
        w.i32(self.io.len() as i32);
        for io in &self.io {
            io.write(w);
        }
        w.token("</Nnet3Eg>");
    }

    /// Compresses every full matrix with the automatic method (Kaldi's NnetExample::Compress).
    pub fn compress(&mut self) {
        for io in &mut self.io {
            io.features.compress(CompressionMethod::Automatic);
        }
    }

    /// The io with this name.
    pub fn get(&self, name: &str) -> Option<&NnetIo> {
        self.io.iter().find(|io| io.name == name)
    }
}

impl TableObject for NnetExample {
    fn read_object(r: &mut TokenReader<'_>) -> Result<Self> {
        NnetExample::read(r)
    }
    fn write_object(&self, w: &mut TokenWriter) {
        self.write(w)
    }
}

/// Sequential reader of training examples.
pub type SequentialNnetExampleReader = SequentialTableReader<NnetExample>;
/// Writer of training examples.
pub type NnetExampleWriter = TableWriter<NnetExample>;
