//! Hooks of the fit loop, each with its own schedule ([`Every`]): the metrics log and
//! monitors, the checkpoint saver, the stoppers, and the visualiser that redraws the learning
//! curves as SVG.

use super::stepper::ByteReader;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// When a hook runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Every {
    Never,
    Minibatches(usize),
    Epochs(usize),
}

impl Every {
    /// Parses `N` (epochs), `Ne` (epochs), `Nmb` (minibatches) or `never`/`0`.
    pub fn parse(s: &str, what: &str) -> Result<Self> {
        let t = s.trim();
        let bad = || {
            Error::Usage(format!(
                "{what}=\"{s}\": expected N or Ne (every N epochs), Nmb (every N minibatches) \
                 or never"
            ))
        };
        if t == "never" || t == "0" {
            return Ok(Every::Never);
        }
        let (num, mb) = if let Some(n) = t.strip_suffix("mb") {
            (n, true)
        } else {
            (t.strip_suffix('e').unwrap_or(t), false)
        };
        let n: usize = num.parse().ok().filter(|&n| n > 0).ok_or_else(bad)?;
        Ok(if mb {
            Every::Minibatches(n)
        } else {
            Every::Epochs(n)
        })
    }

    /// Due after minibatch number `global_minibatch` (1-based count of minibatches done)?
    pub fn after_minibatch(self, done: u64) -> bool {
        matches!(self, Every::Minibatches(n) if done.is_multiple_of(n as u64))
    }

    /// Due after epoch `epoch` (1-based count of epochs done)?
    pub fn after_epoch(self, done: usize) -> bool {
        matches!(self, Every::Epochs(n) if done.is_multiple_of(n))
    }
}

/// One row of the metrics log (`metrics.jsonl`): what the monitors measured in an epoch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    pub epoch: usize,
    pub minibatches: u64,
    pub learning_rate: f64,
    pub train_objective: f64,
    pub train_accuracy: f64,
    pub valid_objective: Option<f64>,
    pub valid_accuracy: Option<f64>,
}

/// The metrics log: one JSON object per epoch, rewritten atomically after each.
pub fn write_metrics(path: &str, records: &[EpochRecord]) -> Result<()> {
    let mut text = String::new();
    for r in records {
        text.push_str(&serde_json::to_string(r).map_err(|e| Error::Usage(e.to_string()))?);
        text.push('\n');
    }
    crate::io::write_file_atomic(path, text.as_bytes())
}

/// Early stopping on the validation objective: stop after `patience` epochs without a new
/// best (0 = never).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EarlyStopping {
    pub patience: usize,
    pub epochs_without_improvement: usize,
}

impl EarlyStopping {
    /// Records an epoch; true when training should stop.
    pub fn update(&mut self, improved: bool) -> bool {
        if improved {
            self.epochs_without_improvement = 0;
        } else {
            self.epochs_without_improvement += 1;
        }
        self.patience > 0 && self.epochs_without_improvement >= self.patience
    }
}

/// One line of a panel: its name, its SVG dash attribute, its (epoch, value) points.
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// The learning curves as an SVG picture: objective (left) and accuracy (right) per epoch,
/// training solid and validation dashed. Written by hand: no fonts or system libraries.
pub fn curves_svg(records: &[EpochRecord]) -> String {
    let (w, h) = (900.0, 360.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let panel = |s: &mut String, x0: f64, title: &str, series: &[Series<'_>]| {
        let (pw, ph, top, left) = (380.0, 270.0, 40.0, x0 + 50.0);
        let pts: Vec<(f64, f64)> = series.iter().flat_map(|x| x.2.iter().copied()).collect();
        s.push_str(&format!(
            "<text x=\"{}\" y=\"24\" font-size=\"14\">{title}</text>\n",
            left
        ));
        s.push_str(&format!(
            "<rect x=\"{left}\" y=\"{top}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" \
             stroke=\"black\"/>\n"
        ));
        if pts.is_empty() {
            return;
        }
        let xmax = pts.iter().map(|p| p.0).fold(1.0f64, f64::max);
        let mut ymin = pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let mut ymax = pts.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        if ymax - ymin < 1e-9 {
            ymin -= 0.5;
            ymax += 0.5;
        }
        let px = |x: f64| left + pw * x / xmax;
        let py = |y: f64| top + ph * (1.0 - (y - ymin) / (ymax - ymin));
        for k in 0..=4 {
            let y = ymin + (ymax - ymin) * k as f64 / 4.0;
            s.push_str(&format!(
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{:.3}</text>\n",
                left - 4.0,
                py(y) + 4.0,
                y
            ));
        }
        s.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">epoch (0..{xmax})</text>\n",
            left + pw / 2.0,
            top + ph + 20.0
        ));
        for (i, (name, dash, line)) in series.iter().enumerate() {
            if line.is_empty() {
                continue;
            }
            let d: Vec<String> = line
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            s.push_str(&format!(
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" {dash} points=\"{}\"/>\n",
                ["#1f77b4", "#d62728"][i % 2],
                d.join(" ")
            ));
            s.push_str(&format!(
                "<text x=\"{}\" y=\"{}\" fill=\"{}\">{name}</text>\n",
                left + 8.0,
                top + 16.0 + 14.0 * i as f64,
                ["#1f77b4", "#d62728"][i % 2]
            ));
        }
    };
    let pick = |f: &dyn Fn(&EpochRecord) -> Option<f64>| -> Vec<(f64, f64)> {
        records
            .iter()
            .filter_map(|r| f(r).filter(|v| v.is_finite()).map(|v| (r.epoch as f64, v)))
            .collect()
    };
    // One panel per metric: the training curve and, dashed, the validation curve.
    type Metric = fn(&EpochRecord) -> Option<f64>;
    let panels: [(f64, &str, Metric, Metric); 2] = [
        (
            0.0,
            "objective per frame",
            |r| Some(r.train_objective),
            |r| r.valid_objective,
        ),
        (
            450.0,
            "accuracy",
            |r| Some(r.train_accuracy),
            |r| r.valid_accuracy,
        ),
    ];
    for (left, title, train, valid) in panels {
        panel(
            &mut s,
            left,
            title,
            &[
                ("train", "", pick(&train)),
                ("validation", "stroke-dasharray=\"6,4\"", pick(&valid)),
            ],
        );
    }
    s.push_str("</svg>\n");
    s
}

/// What a checkpoint holds besides the model and the stepper: where the loop is and what it
/// has seen (every random choice is derived from `--srand` and the position, so no generator
/// state is needed).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoopState {
    /// The epoch in progress (0-based) and minibatches done in it.
    pub epoch: usize,
    pub position: usize,
    /// Minibatches done in all.
    pub global_minibatch: u64,
    /// AutoAdjust's factor on the learning rate, and how often it reduced it.
    pub lr_factor: f64,
    pub reductions: usize,
    pub best_valid: Option<f64>,
    pub early_stopping: EarlyStopping,
    pub records: Vec<EpochRecord>,
    /// The epoch in progress: objective, accuracy and frame sums so far.
    pub train_objf: f64,
    pub train_weight: f64,
    pub train_correct: f64,
    pub train_acc_weight: f64,
    /// The number of parameters of the network it was written with (a checkpoint of another
    /// network is refused).
    pub num_parameters: usize,
}

const MAGIC: &[u8] = b"COMPNET-FIT-CHECKPOINT-2\n";
/// Version 1 had no natural-gradient part; it reads with that part empty.
const MAGIC_V1: &[u8] = b"COMPNET-FIT-CHECKPOINT-1\n";

/// The number of length-prefixed parts after the loop state.
const NUM_PARTS: usize = 4;

/// A checkpoint file: magic, then length-prefixed parts: the loop state (JSON), the model
/// (Kaldi binary), the stepper state, the exact component statistics, the natural-gradient
/// preconditioners (`ng_state`; empty for the plain steppers). One file, written
/// atomically, so the parts always belong together.
pub fn write_checkpoint(path: &str, state: &LoopState, parts: [&[u8]; NUM_PARTS]) -> Result<()> {
    let json = serde_json::to_vec(state).map_err(|e| Error::Usage(e.to_string()))?;
    let mut out = MAGIC.to_vec();
    for part in std::iter::once(&json[..]).chain(parts) {
        out.extend_from_slice(&(part.len() as u64).to_le_bytes());
        out.extend_from_slice(part);
    }
    crate::io::write_file_atomic(path, &out)
}

/// Reads a checkpoint: the loop state and the other parts.
pub fn read_checkpoint(path: &str) -> Result<(LoopState, Vec<Vec<u8>>)> {
    let bytes = crate::io::read_file(path)?;
    let (magic, num_parts) = if bytes.starts_with(MAGIC_V1) {
        (MAGIC_V1, NUM_PARTS - 1)
    } else {
        (MAGIC, NUM_PARTS)
    };
    if !bytes.starts_with(magic) {
        return Err(Error::Usage(format!(
            "{path}: not a compnet fit checkpoint (it does not start with {:?})",
            String::from_utf8_lossy(&MAGIC[..MAGIC.len() - 1])
        )));
    }
    let mut r = ByteReader {
        bytes: &bytes,
        pos: magic.len(),
        file: path,
    };
    let mut parts = Vec::new();
    for _ in 0..=num_parts {
        let n = r.u64()?;
        if n > (bytes.len() - r.pos) as u64 {
            return Err(r.err(&format!("a part of {n} bytes, more than the file holds")));
        }
        parts.push(r.bytes(n as usize)?.to_vec());
    }
    let state: LoopState = serde_json::from_slice(&parts[0])
        .map_err(|e| Error::Usage(format!("{path}: the loop state: {e}")))?;
    if r.pos != bytes.len() {
        return Err(r.err("the end of the checkpoint"));
    }
    parts.remove(0);
    parts.resize(NUM_PARTS, Vec::new());
    Ok((state, parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_of_hooks() {
        assert_eq!(Every::parse("2", "x").unwrap(), Every::Epochs(2));
        assert_eq!(Every::parse("50mb", "x").unwrap(), Every::Minibatches(50));
        assert_eq!(Every::parse("never", "x").unwrap(), Every::Never);
        assert!(Every::parse("-3", "--checkpoint-every").is_err());
        assert!(Every::Minibatches(50).after_minibatch(100));
        assert!(!Every::Minibatches(50).after_minibatch(101));
        assert!(Every::Epochs(2).after_epoch(4) && !Every::Epochs(2).after_epoch(3));
    }

    #[test]
    fn early_stopping_waits_for_patience() {
        let mut e = EarlyStopping {
            patience: 2,
            ..Default::default()
        };
        assert!(!e.update(true));
        assert!(!e.update(false));
        assert!(e.update(false));
        let mut never = EarlyStopping::default();
        assert!(!(0..10).any(|_| never.update(false)));
    }

    #[test]
    fn checkpoint_round_trips_and_damage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.ckpt").to_string_lossy().into_owned();
        let state = LoopState {
            epoch: 3,
            position: 7,
            best_valid: Some(-0.123456789012345),
            ..Default::default()
        };
        write_checkpoint(&p, &state, [b"model", b"stepper", b"", b"ng"]).unwrap();
        let (s, parts) = read_checkpoint(&p).unwrap();
        assert_eq!(s, state);
        assert_eq!(
            parts,
            vec![
                b"model".to_vec(),
                b"stepper".to_vec(),
                Vec::new(),
                b"ng".to_vec()
            ]
        );
        // A version-1 checkpoint (three parts) reads with an empty natural-gradient part.
        let v2 = std::fs::read(&p).unwrap();
        let mut v1 = MAGIC_V1.to_vec();
        let body = &v2[MAGIC.len()..v2.len() - 8 - 2];
        v1.extend_from_slice(body);
        std::fs::write(&p, v1).unwrap();
        let (s1, parts1) = read_checkpoint(&p).unwrap();
        assert_eq!((s1, &parts1[..3]), (state.clone(), &parts[..3]));
        assert!(parts1[3].is_empty());
        write_checkpoint(&p, &state, [b"model", b"stepper", b"", b"ng"]).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        let e = read_checkpoint(&p).unwrap_err().to_string();
        assert!(e.contains("c.ckpt"), "{e}");
        std::fs::write(&p, b"hello").unwrap();
        assert!(read_checkpoint(&p)
            .unwrap_err()
            .to_string()
            .contains("not a compnet fit"));
    }

    #[test]
    fn a_failed_checkpoint_write_names_the_file_and_keeps_the_previous_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.ckpt").to_string_lossy().into_owned();
        let state = LoopState::default();
        write_checkpoint(&p, &state, [b"one", b"", b"", b""]).unwrap();
        // A path under a regular file cannot be written.
        let bad = format!("{p}/nested.ckpt");
        let e = write_checkpoint(&bad, &state, [b"two", b"", b"", b""])
            .unwrap_err()
            .to_string();
        assert!(e.contains("nested.ckpt"), "{e}");
        assert_eq!(read_checkpoint(&p).unwrap().1[0], b"one".to_vec());
    }

    #[test]
    fn the_svg_has_both_panels() {
        let r = |e: usize, v: f64| EpochRecord {
            epoch: e,
            minibatches: 10,
            learning_rate: 0.1,
            train_objective: -v,
            train_accuracy: v,
            valid_objective: Some(-v),
            valid_accuracy: Some(v),
        };
        let s = curves_svg(&[r(1, 0.5), r(2, 0.7)]);
        assert_eq!(s.matches("<polyline").count(), 4);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
    }
}
