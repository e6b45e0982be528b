//! Hooks of the fit loop, each with its own schedule ([`Every`]): the metrics log and
//! monitors, the checkpoint saver, the stoppers, and the visualiser that redraws the learning
//! curves as SVG.

use crate::error::{Error, Result};
use crate::io::le_bytes::ByteReader;
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
        r.check().map_err(|why| {
            Error::Compute(format!(
                "the training diverged ({why}); {path} is not written"
            ))
        })?;
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

/// The checkpoint format this compnet writes and reads.
pub const FORMAT_VERSION: u32 = 3;
const MAGIC_PREFIX: &[u8] = b"COMPNET-FIT-CHECKPOINT-";
const MAGIC: &[u8] = b"COMPNET-FIT-CHECKPOINT-3\n";

/// The number of length-prefixed parts after the loop state.
const NUM_PARTS: usize = 4;

/// Epochs a run may have (`--num-epochs`), and so a checkpoint's epoch counter.
pub const MAX_EPOCHS: usize = 100_000;

/// Minibatches a checkpoint may count (2⁵³: every count is exact as a JSON number).
pub const MAX_MINIBATCHES: u64 = 1 << 53;

/// The checkpoint's checksum: 64-bit FNV-1a over every byte before it. Each step is a
/// bijection of the running value for a given byte, so any change of one byte (and so any
/// single bit flip) always changes the sum.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl LoopState {
    /// The counters in range and every number finite (JSON cannot hold NaN or infinity);
    /// the reason when not.
    pub fn check(&self) -> std::result::Result<(), String> {
        let finite = |name: &str, v: f64| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(format!("{name} is {v}, not a finite number"))
            }
        };
        let non_negative = |name: &str, v: f64| {
            finite(name, v)?;
            if v >= 0.0 {
                Ok(())
            } else {
                Err(format!("{name} is {v}, below 0"))
            }
        };
        if self.epoch > MAX_EPOCHS {
            return Err(format!(
                "the epoch counter {} is above {MAX_EPOCHS}",
                self.epoch
            ));
        }
        if self.global_minibatch > MAX_MINIBATCHES || (self.position as u64) > self.global_minibatch
        {
            return Err(format!(
                "the minibatch counters (epoch position {}, {} in all) are out of range",
                self.position, self.global_minibatch
            ));
        }
        non_negative("the learning-rate factor", self.lr_factor)?;
        if self.lr_factor > 1.0 {
            return Err(format!(
                "the learning-rate factor is {}, above 1",
                self.lr_factor
            ));
        }
        if self.reductions > self.epoch {
            return Err(format!(
                "{} learning-rate reductions in {} epochs",
                self.reductions, self.epoch
            ));
        }
        if self.early_stopping.epochs_without_improvement > self.epoch {
            return Err(format!(
                "{} epochs without improvement in {} epochs",
                self.early_stopping.epochs_without_improvement, self.epoch
            ));
        }
        if let Some(b) = self.best_valid {
            finite("the best validation objective", b)?;
        }
        finite("the epoch's objective sum", self.train_objf)?;
        non_negative("the epoch's frame weight", self.train_weight)?;
        finite("the epoch's correct frames", self.train_correct)?;
        finite("the epoch's accuracy weight", self.train_acc_weight)?;
        if self.records.len() != self.epoch {
            return Err(format!(
                "{} epoch records for {} epochs done",
                self.records.len(),
                self.epoch
            ));
        }
        let mut minibatches = 0;
        for (i, r) in self.records.iter().enumerate() {
            if r.epoch != i + 1
                || r.minibatches < minibatches
                || r.minibatches > self.global_minibatch
            {
                return Err(format!(
                    "epoch record {} (epoch {}, {} minibatches) is out of order",
                    i + 1,
                    r.epoch,
                    r.minibatches
                ));
            }
            minibatches = r.minibatches;
            r.check()?;
        }
        Ok(())
    }
}

impl EpochRecord {
    /// Every number finite and the learning rate >= 0; the reason when not.
    pub fn check(&self) -> std::result::Result<(), String> {
        let e = self.epoch;
        let mut values = vec![
            ("training objective", Some(self.train_objective)),
            ("training accuracy", Some(self.train_accuracy)),
            ("validation objective", self.valid_objective),
            ("validation accuracy", self.valid_accuracy),
            ("learning rate", Some(self.learning_rate)),
        ];
        values.retain(|v| v.1.is_some_and(|x| !x.is_finite()));
        if let Some((name, Some(v))) = values.first() {
            return Err(format!("epoch {e}'s {name} is {v}, not a finite number"));
        }
        if self.learning_rate < 0.0 {
            return Err(format!(
                "epoch {e}'s learning rate is {}, below 0",
                self.learning_rate
            ));
        }
        Ok(())
    }
}

/// A checkpoint file: magic (with the format version), then length-prefixed parts: the loop
/// state (JSON), the model (Kaldi binary), the stepper state, the exact component
/// statistics, the natural-gradient preconditioners (`ng_state`; empty for the plain
/// steppers); then the [`checksum`] of all that (u64 LE). One file, written atomically, so
/// the parts always belong together. A state that would not read back (a number that is not
/// finite, a counter out of range) is not written: the error says so and the previous
/// checkpoint stays.
pub fn write_checkpoint(path: &str, state: &LoopState, parts: [&[u8]; NUM_PARTS]) -> Result<()> {
    state.check().map_err(|why| {
        Error::Compute(format!(
            "the training diverged ({why}); {path} is not written (the last checkpoint \
             written, if any, is kept)"
        ))
    })?;
    let json = serde_json::to_vec(state).map_err(|e| Error::Usage(e.to_string()))?;
    crate::io::write_file_atomic(path, &encode_checkpoint(&json, parts))
}

/// The bytes of a checkpoint of the loop state `json` and `parts`.
fn encode_checkpoint(json: &[u8], parts: [&[u8]; NUM_PARTS]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    for part in std::iter::once(json).chain(parts) {
        out.extend_from_slice(&(part.len() as u64).to_le_bytes());
        out.extend_from_slice(part);
    }
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Reads a checkpoint: the loop state and the other parts. A file of another format
/// version, one whose checksum does not match (a changed or truncated file) or one whose loop
/// state is out of range is refused; reading never changes the file.
pub fn read_checkpoint(path: &str) -> Result<(LoopState, Vec<Vec<u8>>)> {
    let bytes = crate::io::read_file(path)?;
    let damaged = |why: String| {
        Error::Usage(format!(
            "{path}: {why}: the checkpoint is damaged (left as it is; resume from another \
             copy or start again)"
        ))
    };
    if !bytes.starts_with(MAGIC_PREFIX) {
        return Err(Error::Usage(format!(
            "{path}: not a compnet fit checkpoint (it does not start with {:?})",
            String::from_utf8_lossy(&MAGIC[..MAGIC.len() - 1])
        )));
    }
    if !bytes.starts_with(MAGIC) {
        let rest = &bytes[MAGIC_PREFIX.len()..];
        let version = rest
            .iter()
            .position(|&b| b == b'\n')
            .filter(|&n| n <= 4)
            .and_then(|n| std::str::from_utf8(&rest[..n]).ok())
            .and_then(|v| v.parse::<u32>().ok());
        return Err(match version {
            Some(v) if v < FORMAT_VERSION => Error::Usage(format!(
                "{path}: a checkpoint of format version {v}, written by an older compnet \
                 without a checksum; this compnet reads version {FORMAT_VERSION} (start the \
                 training again, or finish it with the compnet that wrote it)"
            )),
            Some(v) => Error::Usage(format!(
                "{path}: a checkpoint of format version {v}; this compnet reads version \
                 {FORMAT_VERSION}"
            )),
            None => damaged("the format version is unreadable".into()),
        });
    }
    if bytes.len() < MAGIC.len() + 8 {
        return Err(damaged(format!(
            "{} bytes, too short for a checkpoint",
            bytes.len()
        )));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    let stored = u64::from_le_bytes(sum.try_into().expect("8 bytes"));
    let computed = checksum(body);
    if stored != computed {
        return Err(damaged(format!(
            "the checksum does not match (stored {stored:016x}, computed {computed:016x} over \
             {} bytes)",
            body.len()
        )));
    }
    let mut r = ByteReader {
        bytes: body,
        pos: MAGIC.len(),
        file: path,
    };
    let mut parts = Vec::new();
    for _ in 0..=NUM_PARTS {
        let n = r.u64()?;
        if n > (body.len() - r.pos) as u64 {
            return Err(r.err(&format!("a part of {n} bytes, more than the file holds")));
        }
        parts.push(r.bytes(n as usize)?.to_vec());
    }
    if r.pos != body.len() {
        return Err(r.err("the end of the checkpoint"));
    }
    let state: LoopState = serde_json::from_slice(&parts[0])
        .map_err(|e| Error::Usage(format!("{path}: the loop state: {e}")))?;
    state
        .check()
        .map_err(|why| damaged(format!("the loop state: {why}")))?;
    parts.remove(0);
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
            epoch: 0,
            position: 7,
            global_minibatch: 7,
            lr_factor: 0.25,
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
        // An older format (no checksum) is refused, naming its version.
        let v3 = std::fs::read(&p).unwrap();
        let mut v2 = b"COMPNET-FIT-CHECKPOINT-2\n".to_vec();
        v2.extend_from_slice(&v3[MAGIC.len()..v3.len() - 8]);
        std::fs::write(&p, v2).unwrap();
        let e = read_checkpoint(&p).unwrap_err().to_string();
        assert!(e.contains("format version 2") && e.contains("older"), "{e}");
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

    /// Every single bit flip and every truncation of a checkpoint is refused (the checksum),
    /// naming the file; reading leaves the file as it was.
    #[test]
    fn every_bit_flip_and_truncation_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.ckpt").to_string_lossy().into_owned();
        let state = LoopState {
            epoch: 1,
            position: 2,
            global_minibatch: 12,
            lr_factor: 1.0,
            best_valid: Some(-1.5),
            records: vec![EpochRecord {
                epoch: 1,
                minibatches: 10,
                learning_rate: 0.01,
                train_objective: -2.0,
                train_accuracy: 0.3,
                valid_objective: Some(-1.5),
                valid_accuracy: Some(0.4),
            }],
            train_objf: -3.0,
            train_weight: 2.0,
            ..Default::default()
        };
        write_checkpoint(&p, &state, [b"model bytes", b"adam\0", b"", b"ng"]).unwrap();
        let good = std::fs::read(&p).unwrap();
        assert_eq!(read_checkpoint(&p).unwrap().0, state);
        for at in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[at] ^= 1 << bit;
                std::fs::write(&p, &bad).unwrap();
                let e = read_checkpoint(&p)
                    .expect_err(&format!("byte {at} bit {bit} accepted"))
                    .to_string();
                assert!(e.contains("c.ckpt"), "{e}");
                assert_eq!(std::fs::read(&p).unwrap(), bad);
            }
        }
        for cut in 0..good.len() {
            std::fs::write(&p, &good[..cut]).unwrap();
            let e = read_checkpoint(&p).unwrap_err().to_string();
            assert!(e.contains("c.ckpt"), "{cut}: {e}");
        }
    }

    /// A loop state out of range is refused on reading even with a right checksum, and never
    /// written: a diverged run says so instead of writing JSON `null`.
    #[test]
    fn a_loop_state_out_of_range_is_neither_written_nor_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.ckpt").to_string_lossy().into_owned();
        let good = LoopState {
            lr_factor: 1.0,
            ..Default::default()
        };
        let record = EpochRecord {
            epoch: 1,
            minibatches: 0,
            learning_rate: 0.1,
            train_objective: -1.0,
            train_accuracy: 0.5,
            valid_objective: None,
            valid_accuracy: None,
        };
        let bad: Vec<(LoopState, &str)> = vec![
            (
                LoopState {
                    global_minibatch: u64::MAX,
                    ..good.clone()
                },
                "minibatch counters",
            ),
            (
                LoopState {
                    lr_factor: -1e308,
                    ..good.clone()
                },
                "learning-rate factor",
            ),
            (
                LoopState {
                    lr_factor: 3.0,
                    ..good.clone()
                },
                "above 1",
            ),
            (
                LoopState {
                    epoch: 1,
                    ..good.clone()
                },
                "epoch records",
            ),
            (
                LoopState {
                    epoch: 1,
                    records: vec![EpochRecord {
                        learning_rate: f64::INFINITY,
                        ..record.clone()
                    }],
                    ..good.clone()
                },
                "learning rate",
            ),
            (
                LoopState {
                    train_objf: f64::NAN,
                    ..good.clone()
                },
                "objective sum",
            ),
            (
                LoopState {
                    best_valid: Some(f64::NEG_INFINITY),
                    ..good.clone()
                },
                "best validation",
            ),
        ];
        write_checkpoint(&p, &good, [b"m", b"", b"", b""]).unwrap();
        let before = std::fs::read(&p).unwrap();
        for (state, what) in bad {
            let e = write_checkpoint(&p, &state, [b"m", b"", b"", b""])
                .unwrap_err()
                .to_string();
            assert!(e.contains("diverged") && e.contains(what), "{e}");
            assert_eq!(std::fs::read(&p).unwrap(), before);
            // The same state with a right checksum (NaN and infinity as JSON null, as an
            // older compnet wrote them) is refused on reading; a null best objective reads
            // as none.
            let json = serde_json::to_vec(&state).unwrap();
            std::fs::write(&p, encode_checkpoint(&json, [b"m", b"", b"", b""])).unwrap();
            match read_checkpoint(&p) {
                Err(e) => assert!(e.to_string().contains("c.ckpt"), "{e}"),
                Ok((read, _)) => assert!(state.best_valid.is_some() && read.best_valid.is_none()),
            }
            std::fs::write(&p, &before).unwrap();
        }
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
