//! Kaldi's binary names. `compnet install-kaldi-names <dir>` fills `<dir>` with symbolic links
//! named after every Kaldi binary compnet implements, each pointing at the running `compnet`;
//! `compnet` started under one of those names (the file name of `argv[0]`) runs the matching
//! subcommand with Kaldi's positional arguments and options, prints its log lines with Kaldi's
//! prefix (`LOG (nnet3-train[compnet-<version>]:PrintTotalStats():nnet-training.cc:317) ...`,
//! which Kaldi's Python libraries parse) and exits as Kaldi's binaries do: 1 for a usage error,
//! 255 for any other error. With the directory first on `PATH`, Kaldi's recipes
//! (`steps/nnet3/train_raw_dnn.py`, ...) call compnet where they call Kaldi.

use crate::error::{Error, Result};

/// Every Kaldi binary compnet implements, with the subcommand it runs.
pub const KALDI_NAMES: &[(&str, &str)] = &[
    ("nnet3-init", "init"),
    ("nnet3-info", "info"),
    ("nnet3-copy", "copy"),
    ("copy-feats", "copy-feats"),
    ("nnet3-compute", "compute"),
    ("nnet3-get-egs", "get-egs"),
    ("nnet3-get-egs-dense-targets", "get-egs-dense-targets"),
    ("nnet3-merge-egs", "merge-egs"),
    ("nnet3-shuffle-egs", "shuffle-egs"),
    ("nnet3-copy-egs", "copy-egs"),
    ("nnet3-subset-egs", "subset-egs"),
    ("nnet3-train", "train"),
    ("nnet3-compute-prob", "compute-prob"),
    ("nnet3-compute-from-egs", "compute-from-egs"),
    ("nnet3-average", "average"),
    ("nnet3-combine", "combine"),
    ("nnet3-show-progress", "show-progress"),
    ("feat-to-dim", "feat-to-dim"),
    ("feat-to-len", "feat-to-len"),
    ("apply-cmvn", "apply-cmvn"),
    ("matrix-sum", "matrix-sum"),
    ("vector-sum", "vector-sum"),
    ("ali-to-post", "ali-to-post"),
    ("nnet3-am-init", "am-init"),
    ("nnet3-am-copy", "am-copy"),
    ("nnet3-am-info", "am-info"),
    ("nnet3-am-adjust-priors", "am-adjust-priors"),
    ("nnet3-am-train-transitions", "am-train-transitions"),
    ("ali-to-pdf", "ali-to-pdf"),
    ("nnet3-acc-lda-stats", "acc-lda-stats"),
    ("nnet-get-feature-transform", "get-feature-transform"),
    ("nnet3-xvector-compute", "xvector-compute"),
];

/// The Kaldi name `argv0` (a path) was started under and the subcommand it runs, if its file
/// name is one of [`KALDI_NAMES`].
pub fn lookup(argv0: &str) -> Option<(&'static str, &'static str)> {
    let file = std::path::Path::new(argv0).file_name()?.to_str()?;
    KALDI_NAMES.iter().copied().find(|(k, _)| *k == file)
}

/// Options of `compnet install-kaldi-names`.
#[derive(clap::Args, Debug)]
#[command(
    override_usage = "compnet install-kaldi-names <dir>",
    after_help = "e.g., in a Kaldi recipe's path.sh:\n  compnet install-kaldi-names \
                  $PWD/compnet-bin && export PATH=$PWD/compnet-bin:$PATH"
)]
pub struct Args {
    /// The directory to fill (created if missing).
    pub dir: String,
}

/// Runs the command: one link per Kaldi name, replacing links of those names already there.
pub fn run(a: Args) -> Result<i32> {
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| Error::io("the running compnet executable", e))?;
    let dir = std::path::Path::new(&a.dir);
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    for (name, _) in KALDI_NAMES {
        let link = dir.join(name);
        if let Ok(meta) = std::fs::symlink_metadata(&link) {
            if !meta.file_type().is_symlink() {
                return Err(Error::Usage(format!(
                    "{}: exists and is not a symbolic link; not replacing it",
                    link.display()
                )));
            }
        }
        // A new link beside it, renamed over the old one: the name never goes missing.
        let tmp = dir.join(format!(".{name}.compnet-tmp{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&exe, &tmp).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, &link).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io(&link, e)
        })?;
    }
    crate::log::log(
        "compnet install-kaldi-names",
        &format!(
            "Linked {} Kaldi names in {} to {}",
            KALDI_NAMES.len(),
            dir.display(),
            exe.display()
        ),
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_subcommands_by_file_name() {
        assert_eq!(
            lookup("/opt/bin/nnet3-train"),
            Some(("nnet3-train", "train"))
        );
        assert_eq!(lookup("feat-to-dim"), Some(("feat-to-dim", "feat-to-dim")));
        assert_eq!(lookup("/usr/bin/compnet"), None);
        assert_eq!(lookup("nnet3-train-extra"), None);
    }
}
