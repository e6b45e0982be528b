//! The generic component harness: every registered component type, every one of its test
//! configs, through the checks of `compnet::testing::component::check_component_config`
//! (numeric input- and parameter-derivative checks, adds/in-place honesty, stride
//! independence, text and binary I/O round trips, parameter algebra); plus every component of
//! the golden Kaldi models read and re-written byte for byte, and its info line compared.
//! Failures name the type and config. Non-simple components run as one compiled step would
//! (`Step`: reordered Indexes, precomputed indexes) through the numeric checks and I/O.

use compnet::io::TokenReader;
use compnet::nnet::component::{component_type, registry, Component};
use compnet::testing::component::{check_component_config, round_trip_bytes};
use compnet::testing::golden::{golden_path, split_model_components, KNOWN_MISSING_TYPES};
use std::collections::BTreeSet;

/// Fewest golden models, components and info lines the golden tests below must see: today's
/// counts, so a case that silently drops out of the walk turns them red.
const MIN_GOLDEN_MODELS: usize = 24;
const MIN_ROUND_TRIPPED: usize = 376;
const MIN_INFO_LINES: usize = 218;
const MIN_PARAMETER_COUNTS: usize = 22;

/// Runs `f`, turning a panic into an error message.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(format!(
            "panicked: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

#[test]
fn every_registered_component_passes_the_generic_checks() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for ty in registry() {
        if ty.test_configs.is_empty() {
            eprintln!("note: {} has no test configs", ty.name);
        }
        for (i, cfg) in ty.test_configs.iter().enumerate() {
            let line = format!("type={} {cfg}", ty.name);
            // Several seeds: the checks use random inputs and directions.
            for seed in [1u64, 2] {
                match guarded(|| check_component_config(&line, seed * 1000 + i as u64)) {
                    Ok(notes) => {
                        for n in notes {
                            eprintln!("note: {line}: {n}");
                        }
                    }
                    Err(e) => {
                        failures.push(format!("{line} (seed {seed}): {e}"));
                        break;
                    }
                }
            }
            checked += 1;
        }
    }
    eprintln!(
        "checked {checked} configs of {} component types",
        registry().len()
    );
    assert!(
        failures.is_empty(),
        "{} failing component configs:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every `model.raw` / `model.txt` pair under the golden folder.
fn golden_models() -> Vec<(String, std::path::PathBuf)> {
    let mut out = Vec::new();
    for sub in ["cases", "train"] {
        let dir = golden_path(sub);
        let rd = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut dirs: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        dirs.sort();
        for d in dirs {
            for (raw, _txt) in [
                ("model.raw", "model.txt"),
                ("before.raw", "before.txt"),
                ("after.raw", "after.txt"),
            ] {
                // A trained model's stats change in the last bit on Kaldi's own read/write
                // cycle, so compare with what nnet3-copy wrote where the golden has it.
                let raw = if raw == "model.raw" && d.join("model_copy.raw").exists() {
                    "model_copy.raw"
                } else {
                    raw
                };
                if d.join(raw).exists() {
                    let label = format!(
                        "{}/{}",
                        d.file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        raw
                    );
                    out.push((label, d.join(raw)));
                }
            }
        }
    }
    assert!(
        out.len() >= MIN_GOLDEN_MODELS,
        "only {} golden models found",
        out.len()
    );
    out
}

/// The info file that describes a golden model file.
fn info_file_of(label: &str) -> &'static str {
    if label.ends_with("before.raw") {
        "before_info.txt"
    } else if label.ends_with("after.raw") {
        "after_info.txt"
    } else {
        "info.txt"
    }
}

/// The types not registered yet must be exactly the known-missing ones: a type that drops
/// out of the registry, or one that gets implemented, shows up here.
fn assert_unknown_types_are_known_missing(unknown: &BTreeSet<String>) {
    let want: BTreeSet<String> = KNOWN_MISSING_TYPES.iter().map(|t| t.to_string()).collect();
    assert_eq!(
        unknown, &want,
        "component types without an implementation differ from KNOWN_MISSING_TYPES"
    );
}

#[test]
fn golden_components_round_trip_byte_exact() {
    let models = golden_models();
    let mut failures = Vec::new();
    let mut n = 0;
    let mut unknown = BTreeSet::new();
    let mut with_stats = 0;
    for (label, raw) in models {
        let txt = if raw.ends_with("model_copy.raw") {
            raw.with_file_name("model.txt")
        } else {
            raw.with_extension("txt")
        };
        for (path, binary) in [(raw, true), (txt, false)] {
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for (name, ty, body) in split_model_components(&bytes) {
                if component_type(&ty).is_none() {
                    unknown.insert(ty);
                    continue;
                }
                if has_accumulated_stats(&body, binary) {
                    // Kaldi keeps these as double sums and re-derives averages on write, so its
                    // own read/write cycle moves their last digit; tests/golden_models.rs checks
                    // them against what nnet3-copy really wrote instead.
                    with_stats += 1;
                    continue;
                }
                n += 1;
                let l = format!(
                    "{label} {name} ({ty}, {})",
                    if binary { "binary" } else { "text" }
                );
                if let Err(e) = guarded(|| round_trip_bytes(&body, binary, &l).map(|_| ())) {
                    failures.push(e);
                }
            }
        }
    }
    eprintln!(
        "round-tripped {n} golden components ({with_stats} with accumulated stats left to \
         golden_models); types not registered yet: {unknown:?}"
    );
    assert!(
        failures.is_empty(),
        "{} golden components differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_unknown_types_are_known_missing(&unknown);
    assert!(
        n >= MIN_ROUND_TRIPPED,
        "only {n} golden components round-tripped"
    );
}

/// Info lines whose last printed digit of one statistic differs from Kaldi's, with the reason.
/// They must still agree to 0.2 % in every number (and must differ: a fixed one leaves the list).
const KNOWN_INFO_ROUNDING: &[(&str, &str, &str)] = &[
    (
        "ng-all/after.raw",
        "scale1",
        "scales stddev 0.009521 vs 0.009509: E[x²] − mean² of 20 values near 0.99 keeps 3 digits, \
         and Kaldi's float summation order (OpenBLAS sdot with a stride-0 vector) is reproduced \
         for the other goldens' vectors but not this one",
    ),
    (
        "dropout/before.raw",
        "affine2",
        "bias mean -0.005077 vs -0.005076 (the same bias, byte for byte): a mean of 24 values \
         of magnitude 1 near zero, where float summation order moves the 4th digit",
    ),
];

/// Two info lines that differ only in numbers, each within `rel`.
fn info_close(a: &str, b: &str, rel: f64) -> bool {
    let split = |s: &str| -> Vec<String> {
        s.split([',', '=', ' ', '(', ')'])
            .map(str::to_string)
            .collect()
    };
    let (wa, wb) = (split(a), split(b));
    wa.len() == wb.len()
        && wa
            .iter()
            .zip(&wb)
            .all(|(x, y)| match (x.parse::<f64>(), y.parse::<f64>()) {
                (Ok(p), Ok(q)) => (p - q).abs() <= rel * p.abs().max(q.abs()),
                _ => x == y,
            })
}

#[test]
fn golden_info_lines_match() {
    let mut failures = Vec::new();
    let mut n = 0;
    for (label, raw) in golden_models() {
        let info_path = raw.with_file_name(info_file_of(&label));
        let info = std::fs::read_to_string(&info_path)
            .unwrap_or_else(|e| panic!("{}: {e}", info_path.display()));
        let bytes = std::fs::read(&raw).unwrap_or_else(|e| panic!("{}: {e}", raw.display()));
        for (name, ty, body) in split_model_components(&bytes) {
            if KNOWN_MISSING_TYPES.contains(&ty.as_str()) {
                continue;
            }
            let prefix = format!("component name={name} type=");
            let Some(want) = info.lines().find(|l| l.starts_with(&prefix)) else {
                failures.push(format!(
                    "{label} {name}: no line in {}",
                    info_path.display()
                ));
                continue;
            };
            n += 1;
            let got = guarded(|| {
                let mut r = TokenReader::new(&body, true, label.as_str());
                let c: Box<dyn Component> =
                    compnet::nnet::component::read_component(&mut r).map_err(|e| e.to_string())?;
                Ok(format!("{prefix}{}", c.info()))
            });
            let known = KNOWN_INFO_ROUNDING
                .iter()
                .find(|(l, c, _)| label.ends_with(l) && *c == name);
            match (got, known) {
                (Ok(g), Some((_, _, why))) => {
                    if g == want || !info_close(&g, want, 2e-3) {
                        failures.push(format!(
                            "{label} {name}: listed as a known rounding difference ({why}) but \
                             {}:\n  ours:  {g}\n  kaldi: {want}",
                            if g == want {
                                "now equal: take it off the list"
                            } else {
                                "differs by more"
                            }
                        ));
                    }
                }
                (Ok(g), None) if g == want => {}
                (Ok(g), None) => failures.push(format!(
                    "{label} {name} ({ty}):\n  ours:  {g}\n  kaldi: {want}"
                )),
                (Err(e), _) => failures.push(format!("{label} {name} ({ty}): {e}")),
            }
        }
    }
    eprintln!("compared {n} golden info lines");
    assert!(
        failures.is_empty(),
        "{} info lines differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(n >= MIN_INFO_LINES, "only {n} golden info lines compared");
}

#[test]
fn golden_num_parameters_match_info() {
    let mut failures = Vec::new();
    let mut n = 0;
    for (label, raw) in golden_models() {
        let info_path = raw.with_file_name(info_file_of(&label));
        let info = std::fs::read_to_string(&info_path)
            .unwrap_or_else(|e| panic!("{}: {e}", info_path.display()));
        let want = info
            .lines()
            .find_map(|l| l.strip_prefix("num-parameters: "))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or_else(|| panic!("{}: no num-parameters line", info_path.display()));
        let bytes = std::fs::read(&raw).unwrap_or_else(|e| panic!("{}: {e}", raw.display()));
        let comps = split_model_components(&bytes);
        if comps
            .iter()
            .any(|(_, ty, _)| KNOWN_MISSING_TYPES.contains(&ty.as_str()))
        {
            continue; // A known-missing case (testing::golden::KNOWN_MISSING).
        }
        let got = guarded(|| {
            let mut total = 0;
            for (name, _, body) in &comps {
                let mut r = TokenReader::new(body, true, name.as_str());
                let c =
                    compnet::nnet::component::read_component(&mut r).map_err(|e| e.to_string())?;
                if c.properties()
                    .has(compnet::nnet::component::Properties::UPDATABLE)
                {
                    total += c.as_updatable().map_or(0, |u| u.num_parameters());
                }
            }
            Ok(total)
        });
        n += 1;
        match got {
            Ok(g) if g == want => {}
            Ok(g) => failures.push(format!("{label}: {g} parameters, Kaldi says {want}")),
            Err(e) => failures.push(format!("{label}: {e}")),
        }
    }
    eprintln!("compared num-parameters of {n} golden models");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        n >= MIN_PARAMETER_COUNTS,
        "only {n} golden parameter counts compared"
    );
}

/// True if a component body holds a non-zero `<Count>` or `<OderivCount>` (statistics
/// accumulated in training).
fn has_accumulated_stats(body: &[u8], binary: bool) -> bool {
    has_nonzero_count(body, binary, b"<Count> ")
        || has_nonzero_count(body, binary, b"<OderivCount> ")
}

/// True if a `pat` token in the body is followed by a non-zero number.
fn has_nonzero_count(body: &[u8], binary: bool, pat: &[u8]) -> bool {
    let mut from = 0;
    while let Some(p) = body[from..].windows(pat.len()).position(|w| w == pat) {
        let at = from + p + pat.len();
        let nonzero = if binary {
            match body.get(at) {
                Some(8) => body
                    .get(at + 1..at + 9)
                    .is_some_and(|b| b.iter().any(|&x| x != 0)),
                Some(4) => body
                    .get(at + 1..at + 5)
                    .is_some_and(|b| b.iter().any(|&x| x != 0)),
                _ => false,
            }
        } else {
            let rest = String::from_utf8_lossy(&body[at..]);
            rest.split_whitespace().next().is_some_and(|v| v != "0")
        };
        if nonzero {
            return true;
        }
        from = at;
    }
    false
}
