//! Cutting utterances into chunks the way Kaldi's `UtteranceSplitter` does (facts §3.3).
//!
//! A "split" is a multiset of chunk sizes: any number of the primary size (the first of
//! `--num-frames`) plus up to two of the others. For each utterance length the splits whose
//! cost is within 2 of the best are candidates; the cost counts one per frame of overlap and
//! two per frame left uncovered. Overlaps go between chunks (spread in proportion to the smaller
//! neighbour), uncovered frames anywhere (spread evenly, placed at random), and each output
//! frame's weight is 1 / (number of chunks that contain it).

use crate::error::{Error, Result};
use crate::io::codec::fmt_g;
use crate::kaldi_rand::GlibcRand;
use std::collections::{BTreeMap, BTreeSet};

/// Kaldi's `ExampleGenerationConfig`.
#[derive(Debug, Clone)]
pub struct ExampleGenerationConfig {
    /// Frames of left context.
    pub left_context: i32,
    /// Frames of right context.
    pub right_context: i32,
    /// Left context of the first chunk of an utterance (-1: same as `left_context`).
    pub left_context_initial: i32,
    /// Right context of the last chunk of an utterance (-1: same as `right_context`).
    pub right_context_final: i32,
    /// Frames of overlap between chunks counted as free when choosing a split.
    pub num_frames_overlap: i32,
    /// Output frame subsampling.
    pub frame_subsampling_factor: i32,
    /// The allowed chunk sizes, primary first.
    pub num_frames: Vec<i32>,
}

/// Parses `--num-frames` (`8`, `8,7,9`, or `-1` for whole utterances: an empty list). Sizes
/// that are not multiples of the subsampling factor are rounded up to one, as Kaldi does (it
/// logs the rounding; the returned flag says whether that happened).
pub fn parse_num_frames(s: &str, fsf: i32) -> Result<(Vec<i32>, bool)> {
    if fsf < 1 {
        return Err(Error::Usage(format!(
            "invalid value --frame-subsampling-factor={fsf}"
        )));
    }
    if fsf > 1 << 20 {
        return Err(Error::Usage(format!(
            "--frame-subsampling-factor={fsf} is out of range (1..={})",
            1 << 20
        )));
    }
    if s.trim() == "-1" {
        return Ok((Vec::new(), false));
    }
    let sizes = s
        .split(',')
        .map(|p| p.trim().parse::<i32>().ok().filter(|&n| n > 0 && n <= 1 << 20))
        .collect::<Option<Vec<i32>>>()
        .ok_or_else(|| {
            Error::Usage(format!(
                "invalid option --num-frames={s} (expected positive integers separated by commas, or -1)"
            ))
        })?;
    let mut changed = false;
    let sizes = sizes
        .into_iter()
        .map(|n| {
            if n % fsf == 0 {
                n
            } else {
                changed = true;
                fsf * (n / fsf + 1)
            }
        })
        .collect();
    Ok((sizes, changed))
}

/// One chunk of an utterance.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkTimeInfo {
    /// First output frame (a multiple of the subsampling factor).
    pub first_frame: i32,
    /// Number of frames.
    pub num_frames: i32,
    /// Left context of this chunk.
    pub left_context: i32,
    /// Right context of this chunk.
    pub right_context: i32,
    /// One weight per (subsampled) output frame.
    pub output_weights: Vec<f32>,
}

/// Kaldi's `UtteranceSplitter`, with the summary statistics it logs.
#[derive(Debug)]
pub struct UtteranceSplitter {
    config: ExampleGenerationConfig,
    /// Candidate splits per utterance length (index = length).
    splits_for_length: Vec<Vec<Vec<i32>>>,
    /// Utterances split.
    pub total_utts: i64,
    /// Frames in the utterances split.
    pub total_input_frames: i64,
    /// Frames where adjacent chunks overlap.
    pub total_overlap_frames: i64,
    /// Chunks produced.
    pub total_chunks: i64,
    /// Frames in the chunks.
    pub total_chunk_frames: i64,
    /// Chunks per chunk size.
    pub chunk_size_counts: BTreeMap<i32, i64>,
    /// Where spare frames go: Kaldi shuffles them with `std::shuffle` from a `random_device`
    /// seed, i.e. differently on every run and without touching `rand()`. We use a stream of
    /// our own, so our output is reproducible and Kaldi's `rand()` draws stay in step.
    gap_rng: GlibcRand,
}

impl UtteranceSplitter {
    /// Tabulates the candidate splits for every length up to the longest tabulated one.
    /// An empty `num_frames` (`--num-frames=-1`) means every utterance is one chunk.
    pub fn new(config: ExampleGenerationConfig) -> Result<Self> {
        let mut splits_for_length = Vec::new();
        if !config.num_frames.is_empty() {
            let primary = config.num_frames[0];
            if config.num_frames_overlap < 0 || config.num_frames_overlap >= primary {
                return Err(Error::Usage(format!(
                    "--num-frames-overlap={} must be in 0..{primary}",
                    config.num_frames_overlap
                )));
            }
            let max_len = max_utterance_length(&config.num_frames);
            // The table holds one entry per length up to `max_len`, each weighing every
            // split; keep that (and the splits, up to ~`max_len / primary` long) bounded.
            let n = config.num_frames.len() as i64;
            let work = (max_len as i64 + 1) * n * n * (max_len as i64 / primary as i64 + 2);
            if config.num_frames.len() > 100 || max_len > 1 << 16 || work > 50_000_000 {
                return Err(Error::Usage(format!(
                    "--num-frames={:?}: too many or too large chunk sizes to tabulate the splits \
                     of (utterances up to {max_len} frames; the longest size should be at \
                     most a few times the first)",
                    config.num_frames
                )));
            }
            let splits = all_splits(&config);
            let durations: Vec<f32> = splits
                .iter()
                .map(|s| default_duration(&config, s))
                .collect();
            splits_for_length = vec![Vec::new(); max_len as usize + 1];
            for (u, slot) in splits_for_length.iter_mut().enumerate() {
                let u = u as f32;
                let costs: Vec<f32> = splits
                    .iter()
                    .zip(&durations)
                    .map(|(s, &d)| {
                        if s.iter().any(|&c| c as f32 > u) {
                            f32::INFINITY
                        } else if d > u {
                            d - u
                        } else {
                            2.0 * (u - d)
                        }
                    })
                    .collect();
                let best = costs.iter().copied().fold(f32::INFINITY, f32::min);
                if best.is_infinite() {
                    continue;
                }
                // Kaldi's threshold is just under 2, so that ties break the same way always.
                for (s, &c) in splits.iter().zip(&costs) {
                    if c < best + 1.9999 {
                        slot.push(s.clone());
                    }
                }
            }
        }
        Ok(UtteranceSplitter {
            config,
            splits_for_length,
            total_utts: 0,
            total_input_frames: 0,
            total_overlap_frames: 0,
            total_chunks: 0,
            total_chunk_frames: 0,
            chunk_size_counts: BTreeMap::new(),
            gap_rng: GlibcRand::new(12_345),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ExampleGenerationConfig {
        &self.config
    }

    /// Chunk sizes for an utterance: one random candidate split of the (reduced) length plus
    /// the primary size once per reduction, sorted, reversed on a coin flip. The draws are
    /// Kaldi's: `RandInt` over the candidates (none when there is only one), then the coin.
    fn chunk_sizes(&self, mut len: i32, rng: &mut GlibcRand) -> Vec<i32> {
        let primary = self.config.num_frames[0];
        let step = primary - self.config.num_frames_overlap;
        let max_tab = self.splits_for_length.len() as i32 - 1;
        let mut repeats = 0usize;
        if len > max_tab {
            // As Kaldi's loop of subtractions, in one step.
            let n = (len - max_tab + step - 1) / step;
            len -= n * step;
            repeats = n as usize;
        }
        let candidates = &self.splits_for_length[len.max(0) as usize];
        if candidates.is_empty() {
            return Vec::new();
        }
        let pick = rng.rand_int(0, candidates.len() as i32 - 1) as usize;
        let mut sizes = candidates[pick].clone();
        sizes.extend(std::iter::repeat_n(primary, repeats));
        sizes.sort_unstable();
        if rng.rand_int(0, 1) == 0 {
            sizes.reverse();
        }
        sizes
    }

    fn gap_sizes(&mut self, len: i32, sizes: &[i32]) -> Result<Vec<i32>> {
        let sf = self.config.frame_subsampling_factor;
        let rng = &mut self.gap_rng;
        if sf > 1 {
            let reduced: Vec<i32> = sizes.iter().map(|s| s / sf).collect();
            let gaps = gap_sizes_plain((len + sf - 1) / sf, &reduced, rng)?;
            return Ok(gaps.into_iter().map(|g| g * sf).collect());
        }
        gap_sizes_plain(len, sizes, rng)
    }

    /// The chunks for one utterance of `len` frames (empty if it is too short).
    pub fn chunks(&mut self, len: i32, rng: &mut GlibcRand) -> Result<Vec<ChunkTimeInfo>> {
        let c = &self.config;
        let (sizes, gaps) = if c.num_frames.is_empty() {
            (vec![len], vec![0])
        } else {
            let sizes = self.chunk_sizes(len, rng);
            let gaps = if sizes.is_empty() {
                Vec::new()
            } else {
                self.gap_sizes(len, &sizes)?
            };
            (sizes, gaps)
        };
        let c = &self.config;
        let n = sizes.len();
        let mut chunks = Vec::with_capacity(n);
        let mut t = 0;
        for (i, (&size, &gap)) in sizes.iter().zip(&gaps).enumerate() {
            t += gap;
            chunks.push(ChunkTimeInfo {
                first_frame: t,
                num_frames: size,
                left_context: if i == 0 && c.left_context_initial >= 0 {
                    c.left_context_initial
                } else {
                    c.left_context
                },
                right_context: if i + 1 == n && c.right_context_final >= 0 {
                    c.right_context_final
                } else {
                    c.right_context
                },
                output_weights: Vec::new(),
            });
            t += size;
        }
        self.set_output_weights(len, &mut chunks);
        self.acc_stats(len, &chunks);
        Ok(chunks)
    }

    fn acc_stats(&mut self, len: i32, chunks: &[ChunkTimeInfo]) {
        self.total_utts += 1;
        self.total_input_frames += len as i64;
        for (i, c) in chunks.iter().enumerate() {
            if i > 0 {
                let prev_end = chunks[i - 1].first_frame + chunks[i - 1].num_frames;
                if prev_end > c.first_frame {
                    self.total_overlap_frames += (prev_end - c.first_frame) as i64;
                }
            }
            *self.chunk_size_counts.entry(c.num_frames).or_insert(0) += 1;
            self.total_chunks += 1;
            self.total_chunk_frames += c.num_frames as i64;
        }
    }

    fn set_output_weights(&self, len: i32, chunks: &mut [ChunkTimeInfo]) {
        let sf = self.config.frame_subsampling_factor;
        let n_out = ((len + sf - 1) / sf).max(0) as usize;
        let range = |c: &ChunkTimeInfo| (c.first_frame / sf)..((c.first_frame + c.num_frames) / sf);
        let mut count = vec![0i32; n_out];
        for c in chunks.iter() {
            for t in range(c) {
                if let Some(n) = count.get_mut(t as usize) {
                    *n += 1;
                }
            }
        }
        for c in chunks.iter_mut() {
            c.output_weights = range(c)
                .map(|t| 1.0 / count.get(t as usize).copied().unwrap_or(1).max(1) as f32)
                .collect();
        }
    }

    /// Kaldi's summary log lines (two, or three when several chunk sizes were used), without
    /// the `LOG (...)` prefix.
    pub fn summary(&self) -> Vec<String> {
        let hours = self.total_input_frames as f64 / 360_000.0;
        let avg = (self.total_chunk_frames as f64 / self.total_chunks as f64) as f32;
        let input = self.total_input_frames as f64;
        let overlap_pct = (self.total_overlap_frames as f64 * 100.0 / input) as f32;
        let output_pct = (self.total_chunk_frames as f64 * 100.0 / input) as f32;
        let g = |v: f32| fmt_g(v as f64, 6);
        let mut lines = vec![
            format!(
                "Split {} utts, with total length {} frames ({} hours assuming 100 frames per second) into {} chunks.",
                self.total_utts,
                self.total_input_frames,
                fmt_g(hours, 6),
                self.total_chunks
            ),
            format!(
                "Average chunk length was {} frames; overlap between adjacent chunks was {}% of input length; length of output was {}% of input length (minus overlap = {}%).",
                g(avg),
                g(overlap_pct),
                g(output_pct),
                g(output_pct - overlap_pct)
            ),
        ];
        if self.chunk_size_counts.len() > 1 {
            let parts: Vec<String> = self
                .chunk_size_counts
                .iter()
                .map(|(&size, &count)| {
                    let pct = (size as f64 * count as f64 * 100.0 / self.total_chunk_frames as f64)
                        as f32;
                    format!("{size} = {}%", fmt_g(pct as f64, 4))
                })
                .collect();
            lines.push(format!(
                "Output frames are distributed among chunk-sizes as follows: {}",
                parts.join(", ")
            ));
        }
        lines
    }
}

fn max_utterance_length(num_frames: &[i32]) -> i32 {
    let primary = num_frames[0];
    let longest = num_frames.iter().copied().max().unwrap_or(primary);
    2 * longest + primary
}

/// The length a split covers, counting `--num-frames-overlap` in proportion as free.
fn default_duration(c: &ExampleGenerationConfig, split: &[i32]) -> f32 {
    if split.is_empty() {
        return 0.0;
    }
    let proportion = c.num_frames_overlap as f32 / c.num_frames[0] as f32;
    let mut d = split.iter().sum::<i32>() as f32;
    for w in split.windows(2) {
        d -= proportion * w[0].min(w[1]) as f32;
    }
    d
}

/// Every split up to the longest duration that can be useful, in sorted order.
fn all_splits(c: &ExampleGenerationConfig) -> Vec<Vec<i32>> {
    let primary = c.num_frames[0];
    let ceiling = (max_utterance_length(&c.num_frames) + primary) as f32;
    let n = c.num_frames.len();
    let mut set = BTreeSet::new();
    for i in 0..n {
        for j in 0..n {
            let mut v = Vec::new();
            if i > 0 {
                v.push(c.num_frames[i]);
            }
            if j > 0 {
                v.push(c.num_frames[j]);
            }
            while default_duration(c, &v) <= ceiling {
                if !v.is_empty() {
                    set.insert(v.clone());
                }
                v.push(primary);
                v.sort_unstable();
            }
        }
    }
    set.into_iter().collect()
}

/// Where each chunk starts relative to the end of the previous one (negative: overlap).
fn gap_sizes_plain(len: i32, sizes: &[i32], rng: &mut GlibcRand) -> Result<Vec<i32>> {
    let total_gap = len - sizes.iter().sum::<i32>();
    let n = sizes.len();
    if total_gap < 0 {
        if n == 1 {
            return Err(Error::Usage(format!(
                "chunk size {} exceeds the utterance length {len}",
                sizes[0]
            )));
        }
        let magnitudes: Vec<i32> = sizes.windows(2).map(|w| w[0].min(w[1])).collect();
        let overlaps = distribute_proportionally(-total_gap, &magnitudes);
        let mut gaps = vec![0];
        gaps.extend(overlaps.iter().map(|o| -o));
        Ok(gaps)
    } else {
        // Gaps may go before, between and after chunks: spread evenly, placed at random
        // (see `UtteranceSplitter::gap_rng`); nothing to place when there is no gap.
        let slots = n + 1;
        let (common, rem) = (
            total_gap / slots as i32,
            (total_gap % slots as i32) as usize,
        );
        let mut gaps: Vec<i32> = (0..slots).map(|i| common + i32::from(i < rem)).collect();
        if total_gap > 0 {
            rng.shuffle(&mut gaps);
        }
        gaps.truncate(n);
        Ok(gaps)
    }
}

/// Splits `total` over the slots in proportion to `magnitudes`, rounding each share down and
/// giving the remainder one by one to the first slots (Kaldi keeps the fractional parts in an
/// integer, so they all tie at zero and the order is the slot order).
fn distribute_proportionally(total: i32, magnitudes: &[i32]) -> Vec<i32> {
    let sum = magnitudes.iter().sum::<i32>() as f32;
    let mut shares: Vec<i32> = magnitudes
        .iter()
        .map(|&m| (total as f32 * m as f32 / sum) as i32)
        .collect();
    let mut given: i32 = shares.iter().sum();
    let mut i = 0;
    while given < total {
        let slot = i % shares.len();
        shares[slot] += 1;
        given += 1;
        i += 1;
    }
    shares
}
