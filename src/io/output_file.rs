//! Output files that appear whole or not at all.
//!
//! A regular file is written to a temporary file beside it and renamed into place when
//! committed, so a failed run never leaves a half-written model or archive behind. A destination
//! that exists and is *not* a regular file (`/dev/null`, a FIFO, a terminal) is written in place:
//! renaming over it would replace the device node with a plain file, which as root breaks the
//! whole machine (every later `> /dev/null` then appends to that file).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// An open output file; call [`OutputFile::commit`] to make it appear, or drop it (or call
/// [`OutputFile::discard`]) to leave the destination untouched.
pub struct OutputFile {
    file: Option<std::io::BufWriter<File>>,
    /// The temporary file to rename into place, when writing through one.
    tmp: Option<PathBuf>,
    /// Where the output ends up (a symlink's target when the destination is a symlink).
    dest: PathBuf,
}

impl OutputFile {
    /// Opens `path` for writing (see the module documentation for how).
    pub fn create(path: &str) -> std::io::Result<OutputFile> {
        let given = Path::new(path);
        if let Ok(meta) = std::fs::metadata(given) {
            if !meta.file_type().is_file() {
                let file = std::fs::OpenOptions::new().write(true).open(given)?;
                return Ok(OutputFile {
                    file: Some(std::io::BufWriter::new(file)),
                    tmp: None,
                    dest: given.to_path_buf(),
                });
            }
        }
        // Write through a symlink rather than replace it.
        let dest = match std::fs::symlink_metadata(given) {
            Ok(m) if m.file_type().is_symlink() => {
                std::fs::canonicalize(given).unwrap_or_else(|_| given.to_path_buf())
            }
            _ => given.to_path_buf(),
        };
        let dir = dest
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let base = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        remove_stale_temporaries(dir, &base);
        let tmp = dir.join(format!(".{base}.tmp{}", std::process::id()));
        let file = File::create(&tmp)?;
        // The lock says "a writer is alive"; the OS drops it when the process dies, even by
        // kill -9, which is how a later run tells a stale temporary from a live one.
        let _ = file.try_lock();
        Ok(OutputFile {
            file: Some(std::io::BufWriter::new(file)),
            tmp: Some(tmp),
            dest,
        })
    }

    /// Flushes and moves the output into place.
    pub fn commit(mut self) -> std::io::Result<()> {
        let Some(w) = self.file.take() else {
            return Ok(());
        };
        let file = w.into_inner().map_err(|e| e.into_error())?;
        if let Some(tmp) = self.tmp.take() {
            let res = file
                .sync_all()
                .and_then(|_| std::fs::rename(&tmp, &self.dest));
            if res.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            res
        } else {
            Ok(())
        }
    }

    /// Abandons the output: the temporary file is removed and the destination left as it was
    /// (what dropping it does; this names the intent at the call site).
    pub fn discard(self) {}
}

/// Removes temporaries of `base` in `dir` left by writers that died before committing (kill
/// -9, power loss): those whose lock can be taken, i.e. no live process holds it.
fn remove_stale_temporaries(dir: &Path, base: &str) {
    let prefix = format!(".{base}.tmp");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        if pid.is_empty() || !pid.bytes().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(f) = File::open(e.path()) else {
            continue;
        };
        if f.try_lock().is_ok() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.file {
            Some(w) => w.write(buf),
            None => Err(std::io::Error::other("output already closed")),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match &mut self.file {
            Some(w) => w.write_all(buf),
            None => Err(std::io::Error::other("output already closed")),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        self.file = None;
        if let Some(tmp) = self.tmp.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_file_appears_only_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.bin");
        let ps = p.to_str().unwrap();
        std::fs::write(&p, b"old").unwrap();
        let mut o = OutputFile::create(ps).unwrap();
        o.write_all(b"new contents").unwrap();
        o.flush().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        o.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new contents");
        // Dropped without commit: the old file stays and no temporary is left.
        let mut o = OutputFile::create(ps).unwrap();
        o.write_all(b"lost").unwrap();
        drop(o);
        assert_eq!(std::fs::read(&p).unwrap(), b"new contents");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn symlink_is_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.txt");
        let link = dir.path().join("link.txt");
        std::fs::write(&target, b"old").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let mut o = OutputFile::create(link.to_str().unwrap()).unwrap();
        o.write_all(b"via link").unwrap();
        o.commit().unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"via link");
    }

    /// A FIFO stands in for `/dev/null`: it must still be a FIFO afterwards, and the reader on
    /// its other end must receive the bytes.
    #[test]
    fn special_file_is_written_in_place() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let ok = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(ok.success());
        let reader_path = fifo.clone();
        let reader = std::thread::spawn(move || std::fs::read(reader_path).unwrap());
        let mut o = OutputFile::create(fifo.to_str().unwrap()).unwrap();
        o.write_all(b"through the pipe").unwrap();
        o.commit().unwrap();
        assert_eq!(reader.join().unwrap(), b"through the pipe");
        let ft = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(ft.is_fifo(), "the FIFO was replaced by {ft:?}");
    }
}
