//! One error type for the whole crate. Errors are data: each variant carries the facts a person
//! needs (file, line, column or byte offset, what was expected), and `Display` renders them.

use std::path::PathBuf;

/// Result alias used throughout compnet.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where in a text input something went wrong (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TextPos {
    /// File name (or a label such as `<config>`); may be empty.
    pub file: String,
    /// 1-based line number; 0 if unknown.
    pub line: usize,
    /// 1-based column (in characters); 0 if unknown.
    pub column: usize,
    /// The full text of the offending line, for the caret display; may be empty.
    pub line_text: String,
}

impl std::fmt::Display for TextPos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = if self.file.is_empty() {
            "<input>"
        } else {
            &self.file
        };
        write!(f, "{file}")?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
            if self.column > 0 {
                write!(f, ":{}", self.column)?;
            }
        }
        Ok(())
    }
}

/// Renders the caret display under a line: the line itself, then `^` under the column.
fn caret(pos: &TextPos) -> String {
    if pos.line_text.is_empty() || pos.column == 0 {
        return String::new();
    }
    let pad: String = pos
        .line_text
        .chars()
        .take(pos.column - 1)
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    format!("\n    {}\n    {}^", pos.line_text, pad)
}

/// Every failure compnet reports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system I/O failure on a named file.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A malformed text input (config line, descriptor, text matrix, ...).
    #[error("{pos}: {msg}{}", caret(pos))]
    Parse { pos: TextPos, msg: String },
    /// A malformed binary or Kaldi-text object at a byte offset.
    #[error("{file}: at byte {offset}: expected {expected}, found {found}")]
    Format {
        file: String,
        offset: usize,
        expected: String,
        found: String,
    },
    /// A network that does not hang together (unknown names, dimension mismatches, ...).
    #[error("invalid network: {0}")]
    Network(String),
    /// Dimensions that do not agree.
    #[error("dimension mismatch in {context}: expected {expected}, got {got}")]
    DimMismatch {
        context: String,
        expected: usize,
        got: usize,
    },
    /// A computation that cannot be compiled or run (e.g. outputs not computable).
    #[error("{0}")]
    Compute(String),
    /// Wrong usage of a command or option.
    #[error("{0}")]
    Usage(String),
}

impl Error {
    /// A parse error at a known text position.
    pub fn parse(pos: TextPos, msg: impl Into<String>) -> Self {
        Error::Parse {
            pos,
            msg: msg.into(),
        }
    }
    /// An I/O error on a path.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
    /// Ok when `got` is `expected`, else a [`Error::DimMismatch`] in `context`.
    pub fn check_dim(context: &str, expected: usize, got: usize) -> Result<()> {
        if got != expected {
            return Err(Error::DimMismatch {
                context: context.into(),
                expected,
                got,
            });
        }
        Ok(())
    }
    /// A format error at a byte offset.
    pub fn format(
        file: impl Into<String>,
        offset: usize,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> Self {
        Error::Format {
            file: file.into(),
            offset,
            expected: expected.into(),
            found: found.into(),
        }
    }
}
