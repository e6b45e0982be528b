//! The Kaldi golden data in `tests/data/kaldi` (see its README): where it is, and the checks
//! that compare one component of a golden model with Kaldi's bytes and `nnet3-info` line.
//!
//! Nothing here treats a missing file, component or info line as a pass: each one is an
//! error (or a panic, for the paths), so a renamed case or a deleted file turns a test red
//! instead of quietly shrinking what it checks.

use super::component::round_trip_bytes;
use crate::io::TokenReader;
use crate::nnet::component::read_component;
use std::path::PathBuf;

/// The golden folder inside the repository. Panics if it is missing.
pub fn golden_dir() -> PathBuf {
    let base = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi"));
    assert!(
        base.is_dir(),
        "golden test data not found at {}",
        base.display()
    );
    base
}

/// `rel` inside the golden folder. Panics if that file or folder does not exist.
pub fn golden_path(rel: &str) -> PathBuf {
    let p = golden_dir().join(rel);
    assert!(p.exists(), "golden file {} not found", p.display());
    p
}

/// Golden inference cases compnet cannot run yet, each with the reason. Tests that walk the
/// golden cases skip exactly these and fail on any other case they cannot handle; a case that
/// starts working must leave this list (the tests check that too).
pub const KNOWN_MISSING: &[(&str, &str)] = &[];

/// The component types behind [`KNOWN_MISSING`].
pub const KNOWN_MISSING_TYPES: &[&str] = &[];

/// Why golden case `case` is known not to work yet, if it is listed in [`KNOWN_MISSING`].
pub fn known_missing(case: &str) -> Option<&'static str> {
    KNOWN_MISSING
        .iter()
        .find(|(c, _)| *c == case)
        .map(|(_, why)| *why)
}

/// Position of `needle` in `hay` at or after `from`.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from > hay.len() {
        return None;
    }
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// Every component of a raw model's bytes: (name, type, bytes from `<Type>` through
/// `</Type> `).
pub fn split_model_components(model: &[u8]) -> Vec<(String, String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(i) = find(model, b"<ComponentName> ", pos) {
        let name_start = i + b"<ComponentName> ".len();
        let Some(name_end) = find(model, b" ", name_start) else {
            break;
        };
        let body_start = name_end + 1;
        let Some(ty_end) = find(model, b" ", body_start) else {
            break;
        };
        let ty_tok = String::from_utf8_lossy(&model[body_start..ty_end]).into_owned();
        let ty = ty_tok
            .trim_start_matches('<')
            .trim_end_matches('>')
            .to_string();
        let close = format!("</{ty}> ");
        let Some(c) = find(model, close.as_bytes(), ty_end) else {
            break;
        };
        let end = c + close.len();
        out.push((
            String::from_utf8_lossy(&model[name_start..name_end]).into_owned(),
            ty,
            model[body_start..end].to_vec(),
        ));
        pos = end;
    }
    out
}

/// The bytes of component `name` in golden case `case`'s `model.raw` (`binary`) or
/// `model.txt`; an error names the file or component that is missing.
pub fn golden_component(case: &str, name: &str, binary: bool) -> Result<Vec<u8>, String> {
    let file = if binary { "model.raw" } else { "model.txt" };
    let path = golden_dir().join(format!("cases/{case}/{file}"));
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    split_model_components(&bytes)
        .into_iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, _, b)| b)
        .ok_or_else(|| format!("{}: no component named {name}", path.display()))
}

/// Reads component `name` of golden `case` in text and in binary and writes it back; an error
/// names what differs, or what is missing.
pub fn round_trip_golden(case: &str, name: &str) -> Result<(), String> {
    for binary in [false, true] {
        let bytes = golden_component(case, name, binary)?;
        let label = format!("{case}/{name} ({})", if binary { "binary" } else { "text" });
        round_trip_bytes(&bytes, binary, &label)?;
    }
    Ok(())
}

/// Compares our info line for component `name` (read from `model.raw`) with the line in the
/// golden `info.txt`; a missing info file or line is an error too.
pub fn check_golden_info(case: &str, name: &str) -> Result<(), String> {
    let bytes = golden_component(case, name, true)?;
    let info_path = golden_dir().join(format!("cases/{case}/info.txt"));
    let info =
        std::fs::read_to_string(&info_path).map_err(|e| format!("{}: {e}", info_path.display()))?;
    let prefix = format!("component name={name} type=");
    let want = info
        .lines()
        .find(|l| l.starts_with(&prefix))
        .ok_or_else(|| format!("{}: no info line for {name}", info_path.display()))?;
    let mut r = TokenReader::new(&bytes, true, "model.raw");
    let c = read_component(&mut r).map_err(|e| format!("{case}/{name}: {e}"))?;
    let got = format!("{prefix}{}", c.info());
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "{case}/{name} info differs:\n ours:  {got}\n kaldi: {want}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_golden_components_and_info_lines_are_errors() {
        assert!(round_trip_golden("seed", "no-such-component").is_err());
        assert!(round_trip_golden("no-such-case", "affine1").is_err());
        assert!(check_golden_info("seed", "no-such-component").is_err());
        assert!(check_golden_info("no-such-case", "affine1").is_err());
        assert!(std::panic::catch_unwind(|| golden_path("cases/no-such-case")).is_err());
        // And the real ones pass, so the errors above are not about the folder.
        round_trip_golden("seed", "affine1").unwrap();
        check_golden_info("seed", "affine1").unwrap();
    }
}
