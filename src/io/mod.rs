//! Kaldi's on-disk formats: the token codec, matrices and vectors (full, compressed, sparse),
//! and tables (archives and scripts addressed by rspecifiers and wspecifiers).

pub mod codec;
pub mod compressed;
pub mod egs;
pub mod index_codec;
pub mod kaldi_matrix;
pub mod sparse;
pub mod table;

pub use codec::{TokenReader, TokenWriter};
pub use compressed::{CompressedMatrix, CompressionMethod};
pub use sparse::{GeneralMatrix, Posterior, SparseMatrix, SparseVector};
pub use table::{
    MatrixWriter, RandomAccessMatrixReader, RandomAccessVectorReader, SequentialMatrixReader,
    SequentialVectorReader, TableObject, VectorWriter,
};

use crate::error::{Error, Result};
use std::path::Path;

/// Writes `bytes` to `path` atomically: a temporary file in the same folder, then a rename, so
/// a failed run never leaves a half-written output behind. `-` writes to stdout.
pub fn write_file_atomic(path: &str, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    if path == "-" || path.is_empty() {
        let mut out = std::io::stdout().lock();
        out.write_all(bytes).map_err(|e| Error::io("<stdout>", e))?;
        return out.flush().map_err(|e| Error::io("<stdout>", e));
    }
    let p = Path::new(path);
    let dir = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let res = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, p)
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(path, e));
    }
    Ok(())
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
