//! Kaldi's on-disk formats: the token codec, matrices and vectors (full, compressed, sparse),
//! and tables (archives and scripts addressed by rspecifiers and wspecifiers).

pub mod codec;
pub mod compressed;
pub mod egs;
pub mod htk;
pub mod index_codec;
pub mod kaldi_matrix;
pub mod le_bytes;
pub mod mlf;
pub mod output_file;
pub mod sparse;
pub mod table;
pub mod text_seq;
pub mod uci;

pub use codec::{TokenReader, TokenWriter};
pub use compressed::{CompressedMatrix, CompressionMethod};
pub use sparse::{GeneralMatrix, Posterior, SparseMatrix, SparseVector};
pub use table::{
    MatrixWriter, RandomAccessMatrixReader, RandomAccessVectorReader, SequentialMatrixReader,
    SequentialVectorReader, TableObject, VectorWriter,
};

use crate::error::{Error, Result};
pub use output_file::OutputFile;

/// Writes `bytes` to `path` atomically (see [`OutputFile`]), so a failed run never leaves a
/// half-written output behind. `-` writes to stdout.
pub fn write_file_atomic(path: &str, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    if path == "-" || path.is_empty() {
        let mut out = std::io::stdout().lock();
        out.write_all(bytes).map_err(|e| Error::io("<stdout>", e))?;
        return out.flush().map_err(|e| Error::io("<stdout>", e));
    }
    let mut out = OutputFile::create(path).map_err(|e| Error::io(path, e))?;
    out.write_all(bytes)
        .and_then(|_| out.commit())
        .map_err(|e| Error::io(path, e))
}

/// Reads a file (`-` = stdin) as UTF-8 text.
pub fn read_text(path: &str) -> Result<String> {
    let bytes = read_file(path)?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        Error::format(path, at, "UTF-8 text", "a byte that is not valid UTF-8")
    })
}

/// Reads a whole file (`-` = stdin) into memory.
pub fn read_file(path: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    if path == "-" || path.is_empty() {
        let mut v = Vec::new();
        std::io::stdin()
            .read_to_end(&mut v)
            .map_err(|e| Error::io("<stdin>", e))?;
        return Ok(v);
    }
    std::fs::read(path).map_err(|e| Error::io(path, e))
}
