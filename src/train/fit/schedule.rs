//! Schedules: per-epoch values in CNTK's notation, Kaldi's exponential learning-rate decay,
//! warm-up, and Kaldi's dropout schedule.

use crate::error::{Error, Result};

/// A per-epoch schedule in CNTK's notation: `0.8:3.2*14:0.08` = 0.8 for epoch 1, 3.2 for
/// epochs 2–15, 0.08 from epoch 16 on (the last value lasts for ever).
#[derive(Clone, Debug, PartialEq)]
pub struct EpochSchedule {
    /// (value, number of epochs), in order.
    pub items: Vec<(f64, usize)>,
}

impl EpochSchedule {
    /// [`EpochSchedule::parse`] of an option that may be absent.
    pub fn parse_option(s: Option<&str>, what: &str) -> Result<Option<Self>> {
        s.map(|s| Self::parse(s, what)).transpose()
    }

    /// Parses the notation; `what` names the option in errors.
    pub fn parse(s: &str, what: &str) -> Result<Self> {
        let bad = |item: usize, text: &str, why: &str| {
            Error::Usage(format!(
                "{what}=\"{s}\": item {} \"{text}\": {why} (expected VALUE or VALUE*EPOCHS \
                 separated by ':', e.g. 0.8:3.2*14:0.08)",
                item + 1
            ))
        };
        let mut items = Vec::new();
        for (i, part) in s.split(':').enumerate() {
            let part = part.trim();
            let (v, n) = match part.split_once('*') {
                Some((v, n)) => {
                    let n: usize = n
                        .trim()
                        .parse()
                        .ok()
                        .filter(|&n| n > 0 && n <= 1_000_000)
                        .ok_or_else(|| bad(i, part, "the count is not a positive integer"))?;
                    (v, n)
                }
                None => (part, 1),
            };
            let v: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| bad(i, part, "the value is not a finite number >= 0"))?;
            items.push((v, n));
        }
        Ok(EpochSchedule { items })
    }

    /// The value for epoch `epoch` (0-based).
    pub fn value(&self, epoch: usize) -> f64 {
        let mut e = epoch;
        for &(v, n) in &self.items {
            if e < n {
                return v;
            }
            e -= n;
        }
        self.items.last().map_or(0.0, |x| x.0)
    }
}

/// Kaldi's exponential decay: the effective learning rate goes from `initial` to `final_`
/// geometrically over the training (`progress` = fraction of minibatches done, in [0, 1]).
pub fn exponential_decay(initial: f64, final_: f64, progress: f64) -> f64 {
    initial * (final_ / initial).powf(progress.clamp(0.0, 1.0))
}

/// Linear warm-up: the factor on the learning rate for minibatch `k` (0-based) of a warm-up
/// over `warmup` minibatches.
pub fn warmup_factor(k: usize, warmup: usize) -> f64 {
    if warmup == 0 || k >= warmup {
        1.0
    } else {
        (k + 1) as f64 / warmup as f64
    }
}

/// Kaldi's dropout schedule, e.g. `0,0@0.20,0.5@0.5,0`: piecewise linear in the fraction of
/// data seen; the first value is at 0 and the last at 1, a value without `@` lies halfway
/// (evenly) between its neighbours' positions. An optional `pattern=` prefix (glob with `*`)
/// says which dropout components it applies to (all when absent).
#[derive(Clone, Debug, PartialEq)]
pub struct DropoutSchedule {
    pub pattern: String,
    /// (data fraction, proportion), fractions increasing from 0 to 1.
    pub points: Vec<(f64, f64)>,
}

impl DropoutSchedule {
    pub fn parse(s: &str) -> Result<Self> {
        let bad = |why: String| Error::Usage(format!("--dropout-schedule=\"{s}\": {why}"));
        let (pattern, body) = match s.split_once('=') {
            Some((p, b)) => (p.trim().to_string(), b),
            None => ("*".to_string(), s),
        };
        let mut vals = Vec::new();
        let mut pos: Vec<Option<f64>> = Vec::new();
        for (i, item) in body.split(',').enumerate() {
            let (v, f) = match item.split_once('@') {
                Some((v, f)) => (v, Some(f)),
                None => (item, None),
            };
            let v: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|v| (0.0..=1.0).contains(v))
                .ok_or_else(|| {
                    bad(format!(
                        "item {} \"{item}\": the proportion is not a number in [0, 1]",
                        i + 1
                    ))
                })?;
            let f = match f {
                None => None,
                Some(f) => Some(
                    f.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|f| (0.0..=1.0).contains(f))
                        .ok_or_else(|| {
                            bad(format!(
                                "item {} \"{item}\": the data fraction after @ is not in [0, 1]",
                                i + 1
                            ))
                        })?,
                ),
            };
            vals.push(v);
            pos.push(f);
        }
        let n = vals.len();
        if n == 1 {
            return Ok(DropoutSchedule {
                pattern,
                points: vec![(0.0, vals[0]), (1.0, vals[0])],
            });
        }
        for (i, want) in [(0usize, 0.0f64), (n - 1, 1.0)] {
            match pos[i] {
                None => pos[i] = Some(want),
                Some(f) if f == want => {}
                Some(f) => {
                    return Err(bad(format!(
                        "the {} value is at data fraction {want}, not {f}",
                        if i == 0 { "first" } else { "last" }
                    )))
                }
            }
        }
        // Values without a position are spread evenly between the known ones.
        let mut i = 0;
        while i < n - 1 {
            let j = (i + 1..n).find(|&j| pos[j].is_some()).expect("last is set");
            let (a, b) = (pos[i].expect("set"), pos[j].expect("set"));
            if b < a {
                return Err(bad(format!(
                    "data fractions must not decrease ({a} then {b})"
                )));
            }
            for (k, slot) in pos.iter_mut().enumerate().take(j).skip(i + 1) {
                *slot = Some(a + (b - a) * (k - i) as f64 / (j - i) as f64);
            }
            i = j;
        }
        Ok(DropoutSchedule {
            pattern,
            points: pos.into_iter().map(|p| p.expect("set")).zip(vals).collect(),
        })
    }

    /// The dropout proportion after `fraction` of the data.
    pub fn value(&self, fraction: f64) -> f64 {
        let f = fraction.clamp(0.0, 1.0);
        for w in self.points.windows(2) {
            let ((a, va), (b, vb)) = (w[0], w[1]);
            if f <= b {
                return if b > a {
                    va + (vb - va) * (f - a) / (b - a)
                } else {
                    vb
                };
            }
        }
        self.points.last().map_or(0.0, |p| p.1)
    }

    /// Whether the component name matches the pattern (`*` matches any run of characters).
    pub fn matches(&self, name: &str) -> bool {
        glob_match(self.pattern.as_bytes(), name.as_bytes())
    }
}

fn glob_match(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|k| glob_match(rest, &s[k..])),
        Some((c, rest)) => s.first() == Some(c) && glob_match(rest, &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cntk_notation_expands_to_the_documented_epochs() {
        let s = EpochSchedule::parse("0.8:3.2*14:0.08", "--learning-rate").unwrap();
        let v: [f64; 17] = std::array::from_fn(|e| s.value(e));
        assert_eq!(v[0], 0.8);
        assert!(v[1..15].iter().all(|&x| x == 3.2));
        assert_eq!(v[15], 0.08);
        assert_eq!(v[16], 0.08);
        let m = EpochSchedule::parse("64*2:128", "--minibatch-size").unwrap();
        assert_eq!([0, 1, 2, 3].map(|e| m.value(e)), [64.0, 64.0, 128.0, 128.0]);
        let c = EpochSchedule::parse("0.5", "x").unwrap();
        assert_eq!([0, 1].map(|e| c.value(e)), [0.5, 0.5]);
    }

    #[test]
    fn bad_schedules_name_the_item() {
        for (s, item) in [
            ("0.8:x", "item 2"),
            ("1*0", "item 1"),
            ("", "item 1"),
            ("0.1:-2", "item 2"),
        ] {
            let e = EpochSchedule::parse(s, "--learning-rate")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(item) && e.contains("--learning-rate"),
                "{s}: {e}"
            );
        }
    }

    #[test]
    fn dropout_schedule_as_kaldi_documents_it() {
        let d = DropoutSchedule::parse("0,0@0.20,0.5@0.5,0").unwrap();
        assert_eq!(
            d.points,
            vec![(0.0, 0.0), (0.2, 0.0), (0.5, 0.5), (1.0, 0.0)]
        );
        assert_eq!(d.value(0.1), 0.0);
        assert!((d.value(0.35) - 0.25).abs() < 1e-12);
        assert!((d.value(0.75) - 0.25).abs() < 1e-12);
        let e = DropoutSchedule::parse("lstm*=0,0.2,0").unwrap();
        assert_eq!(e.points, vec![(0.0, 0.0), (0.5, 0.2), (1.0, 0.0)]);
        assert!(e.matches("lstm1.dropout") && !e.matches("tdnn1.dropout"));
        assert!(DropoutSchedule::parse("0,1.5").is_err());
        assert!(DropoutSchedule::parse("0,0.3@0.6,0.2@0.4,0").is_err());
    }

    #[test]
    fn decay_and_warmup() {
        assert!((exponential_decay(0.01, 0.001, 0.5) - 0.01 * 0.1f64.sqrt()).abs() < 1e-12);
        assert_eq!(exponential_decay(0.01, 0.001, 1.0), 0.001);
        assert_eq!(warmup_factor(0, 4), 0.25);
        assert_eq!(warmup_factor(4, 4), 1.0);
    }
}
