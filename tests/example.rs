//! The README's main job, `examples/train/run.sh`, runs and learns: the held-out accuracy
//! after training and combination is far above chance (1/8).

use std::process::Command;

#[test]
fn the_bundled_training_example_learns() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/train");
    let work = std::env::temp_dir().join(format!("compnet-example-{}", std::process::id()));
    let out = Command::new("sh")
        .arg(format!("{dir}/run.sh"))
        .arg(&work)
        .env("COMPNET", env!("CARGO_BIN_EXE_compnet"))
        .env("EPOCHS", "3")
        .output()
        .expect("run sh");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let final_line = text
        .lines()
        .find(|l| l.starts_with("final"))
        .expect("a final line");
    let words: Vec<&str> = final_line.split_whitespace().collect();
    let (logprob, accuracy): (f64, f64) = (words[1].parse().unwrap(), words[2].parse().unwrap());
    assert!(accuracy > 0.8, "{text}");
    assert!(logprob > -0.6, "{text}");
    let _ = std::fs::remove_dir_all(&work);
}

/// The README's main job, `examples/digits/run.sh` (real data: the UCI digits), in a reduced
/// run: the three bundled networks (TDNN and LSTM on frame labels, the x-vector-style pooling
/// network on per-image labels) reach well above 90% validation accuracy.
#[test]
fn the_digits_example_reaches_its_accuracy() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/digits");
    for arch in ["tdnn", "lstm", "xvector"] {
        let work =
            std::env::temp_dir().join(format!("compnet-digits-{}-{arch}", std::process::id()));
        let out = Command::new("sh")
            .arg(format!("{dir}/run.sh"))
            .arg(&work)
            .env("COMPNET", env!("CARGO_BIN_EXE_compnet"))
            .env("ARCH", arch)
            .env("EPOCHS", "5")
            .output()
            .expect("run sh");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let accuracy: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("validation accuracy "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no accuracy line in:\n{text}"));
        assert!(
            accuracy > 0.93,
            "{arch}: validation accuracy {accuracy}\n{text}"
        );
        let model = work.join(arch).join("final.raw");
        let curves = work.join(arch).join("curves.svg");
        assert!(text.contains(&*model.to_string_lossy()), "{text}");
        assert!(std::fs::read_to_string(&curves)
            .unwrap()
            .contains("<polyline"));
        let _ = std::fs::remove_dir_all(&work);
    }
}
