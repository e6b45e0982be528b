//! Kaldi's HMM side of an acoustic model: the topology (`<Topology>`), the transition model
//! (`<TransitionModel>`: topology, `<Triples>` or `<Tuples>`, `<LogProbs>`) that maps
//! transition-ids to pdf-ids, its maximum-likelihood re-estimation from alignments, and the
//! phonetic decision tree (`tree`) that a transition model can be built from. Read and
//! written in Kaldi's text and binary forms byte for byte (facts §2.5).
//!
//! Numbering, as Kaldi's: a transition-state is a tuple (phone, HMM state, forward pdf,
//! self-loop pdf), numbered from 1 in the sorted order of the tuples; each transition out of
//! that HMM state gets a transition-id, numbered from 1 over the transition-states in order.
//! `<LogProbs>` holds one log probability per transition-id, index 0 unused.

pub mod tree;

use crate::error::{Error, Result};
use crate::io::{TokenReader, TokenWriter};

/// Most phones or pdf-ids a model may name (a bound so that damaged counts fail cleanly).
const MAX_ID: i32 = 1 << 24;

/// One state of a phone's HMM.
#[derive(Clone, Debug, PartialEq)]
pub struct HmmState {
    /// Pdf-class of the transitions into other states (-1: non-emitting).
    pub forward_pdf_class: i32,
    /// Pdf-class of the self-loop (equal to `forward_pdf_class` in an ordinary HMM).
    pub self_loop_pdf_class: i32,
    /// (destination state, probability).
    pub transitions: Vec<(i32, f32)>,
}

/// Kaldi's `HmmTopology`: one HMM per group of phones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    /// The phones covered, sorted.
    pub phones: Vec<i32>,
    /// For each phone id, the index of its entry (-1: not covered).
    pub phone2idx: Vec<i32>,
    /// The HMMs; the last state of each is the final, non-emitting one.
    pub entries: Vec<Vec<HmmState>>,
}

impl Topology {
    /// True when every state's self-loop has the same pdf-class as its forward transitions
    /// (written with `<PdfClass>` and `<Triples>`), false for separate self-loop classes
    /// (`<ForwardPdfClass>`/`<SelfLoopPdfClass>`, `<Tuples>`).
    pub fn is_hmm(&self) -> bool {
        self.entries
            .iter()
            .flatten()
            .all(|s| s.forward_pdf_class == s.self_loop_pdf_class)
    }

    /// The HMM of `phone`, if covered.
    pub fn entry_for(&self, phone: i32) -> Option<&[HmmState]> {
        let idx = *self.phone2idx.get(usize::try_from(phone).ok()?)?;
        self.entries
            .get(usize::try_from(idx).ok()?)
            .map(|e| e.as_slice())
    }

    /// Number of pdf-classes of `phone`'s HMM (largest class + 1).
    pub fn num_pdf_classes(&self, phone: i32) -> i32 {
        self.entry_for(phone).map_or(0, |e| {
            e.iter()
                .map(|s| s.forward_pdf_class.max(s.self_loop_pdf_class))
                .max()
                .unwrap_or(-1)
                + 1
        })
    }

    /// Reads `<Topology> ... </Topology>` in the reader's mode (text is Kaldi's readable
    /// form with `<TopologyEntry>` blocks, binary its member dump).
    pub fn read(r: &mut TokenReader<'_>) -> Result<Topology> {
        let start = r.next_token_pos();
        r.expect_token("<Topology>")?;
        let topo = if r.is_binary() {
            read_topology_binary(r)?
        } else {
            read_topology_text(r)?
        };
        topo.check().map_err(|msg| r.err_at(start, msg))?;
        Ok(topo)
    }

    /// Writes the topology as Kaldi's `HmmTopology::Write` does.
    pub fn write(&self, w: &mut TokenWriter) {
        let hmm = self.is_hmm();
        w.token("<Topology>");
        if w.is_binary() {
            w.int_vec(&self.phones);
            w.int_vec(&self.phone2idx);
            if !hmm {
                w.i32(-1);
            }
            w.i32(self.entries.len() as i32);
            for entry in &self.entries {
                w.i32(entry.len() as i32);
                for s in entry {
                    w.i32(s.forward_pdf_class);
                    if !hmm {
                        w.i32(s.self_loop_pdf_class);
                    }
                    w.i32(s.transitions.len() as i32);
                    for &(dst, p) in &s.transitions {
                        w.i32(dst);
                        w.f32(p);
                    }
                }
            }
        } else {
            w.raw(b"\n");
            for (i, entry) in self.entries.iter().enumerate() {
                w.token("<TopologyEntry>");
                w.raw(b"\n");
                w.token("<ForPhones>");
                w.raw(b"\n");
                for (phone, &idx) in self.phone2idx.iter().enumerate() {
                    if idx == i as i32 {
                        w.raw(format!("{phone} ").as_bytes());
                    }
                }
                w.raw(b"\n");
                w.token("</ForPhones>");
                w.raw(b"\n");
                for (j, s) in entry.iter().enumerate() {
                    w.token("<State>");
                    w.i32(j as i32);
                    if s.forward_pdf_class != -1 {
                        if hmm {
                            w.token("<PdfClass>");
                            w.i32(s.forward_pdf_class);
                        } else {
                            w.token("<ForwardPdfClass>");
                            w.i32(s.forward_pdf_class);
                            w.token("<SelfLoopPdfClass>");
                            w.i32(s.self_loop_pdf_class);
                        }
                    }
                    for &(dst, p) in &s.transitions {
                        w.token("<Transition>");
                        w.i32(dst);
                        w.f32(p);
                    }
                    w.token("</State>");
                    w.raw(b"\n");
                }
                w.token("</TopologyEntry>");
                w.raw(b"\n");
            }
        }
        w.token("</Topology>");
        w.newline_if_text();
    }

    /// The consistency Kaldi's `HmmTopology::Check` demands, as a message when violated.
    fn check(&self) -> std::result::Result<(), String> {
        if self.entries.is_empty() || self.phones.is_empty() || self.phone2idx.is_empty() {
            return Err("a topology with at least one entry and one phone".into());
        }
        let mut seen = vec![false; self.entries.len()];
        for &p in &self.phones {
            match self.phone2idx.get(p.max(0) as usize) {
                Some(&i) if p > 0 && i >= 0 && (i as usize) < self.entries.len() => {
                    seen[i as usize] = true
                }
                _ => return Err(format!("a topology entry for phone {p}")),
            }
        }
        if self.phones.windows(2).any(|w| w[0] >= w[1]) {
            return Err("phones sorted and each in one topology entry".into());
        }
        let covered = self.phone2idx.iter().filter(|&&i| i != -1).count();
        if covered != self.phones.len() {
            return Err("a phone-to-entry table that agrees with the phone list".into());
        }
        for (i, entry) in self.entries.iter().enumerate() {
            if !seen[i] {
                return Err(format!("topology entry {i} used by some phone"));
            }
            let n = entry.len();
            if n <= 1 {
                return Err(format!(
                    "topology entry {i} with at least one emitting state"
                ));
            }
            let last = &entry[n - 1];
            if !last.transitions.is_empty() || last.forward_pdf_class != -1 {
                return Err(format!(
                    "topology entry {i}: a final state without transitions or pdf-class"
                ));
            }
            let mut classes = Vec::new();
            for (j, s) in entry.iter().enumerate() {
                if (s.forward_pdf_class == -1) != (s.self_loop_pdf_class == -1) {
                    return Err(format!(
                        "topology entry {i}, state {j}: both pdf-classes set or neither"
                    ));
                }
                if s.forward_pdf_class != -1 {
                    classes.push(s.forward_pdf_class);
                    classes.push(s.self_loop_pdf_class);
                }
                let mut dsts = Vec::new();
                let mut total = 0.0f32;
                for &(dst, p) in &s.transitions {
                    if dst < 0 || dst as usize >= n || dsts.contains(&dst) {
                        return Err(format!(
                            "topology entry {i}, state {j}: distinct transitions to states \
                             0..{n} (got {dst})"
                        ));
                    }
                    if p.is_nan() || p <= 0.0 {
                        return Err(format!(
                            "topology entry {i}, state {j}: positive transition probabilities"
                        ));
                    }
                    if dst as usize == n - 1 && s.forward_pdf_class == -1 {
                        return Err(format!(
                            "topology entry {i}, state {j}: an emitting state before the final \
                             state"
                        ));
                    }
                    dsts.push(dst);
                    total += p;
                }
                if j + 1 < n && total <= 0.0 {
                    return Err(format!(
                        "topology entry {i}, state {j}: transitions out of a non-final state"
                    ));
                }
            }
            classes.sort_unstable();
            classes.dedup();
            if classes.first() != Some(&0) || *classes.last().unwrap() as usize != classes.len() - 1
            {
                return Err(format!(
                    "topology entry {i}: pdf-classes contiguous from zero"
                ));
            }
        }
        Ok(())
    }
}

/// A count read at `at`, checked to be in 0..=`max` and to fit the bytes left at
/// `min_bytes` an item.
fn checked_count(
    r: &TokenReader<'_>,
    at: usize,
    n: i32,
    min_bytes: usize,
    what: &str,
) -> Result<usize> {
    r.count_fits(n, min_bytes).ok_or_else(|| {
        let left = r.rest().len();
        r.err_at(
            at,
            format!("{what} that fits the {left} remaining bytes (got {n})"),
        )
    })
}

/// A count read next, checked as [`checked_count`] checks it.
fn read_checked_count(r: &mut TokenReader<'_>, min_bytes: usize, what: &str) -> Result<usize> {
    let at = r.next_token_pos();
    let n = r.i32()?;
    checked_count(r, at, n, min_bytes, what)
}

fn read_topology_binary(r: &mut TokenReader<'_>) -> Result<Topology> {
    let phones = r.int_vec()?;
    let phone2idx = r.int_vec()?;
    let mut at = r.pos();
    let mut n = r.i32()?;
    let hmm = n != -1;
    if !hmm {
        at = r.pos();
        n = r.i32()?;
    }
    let n = checked_count(r, at, n, 5, "a number of topology entries")?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        let ns = read_checked_count(r, 10, "a number of HMM states")?;
        let mut states = Vec::with_capacity(ns);
        for _ in 0..ns {
            let forward = r.i32()?;
            let self_loop = if hmm { forward } else { r.i32()? };
            let nt = read_checked_count(r, 10, "a number of transitions")?;
            let mut transitions = Vec::with_capacity(nt);
            for _ in 0..nt {
                let dst = r.i32()?;
                let p = r.f32()?;
                transitions.push((dst, p));
            }
            states.push(HmmState {
                forward_pdf_class: forward,
                self_loop_pdf_class: self_loop,
                transitions,
            });
        }
        entries.push(states);
    }
    r.expect_token("</Topology>")?;
    Ok(Topology {
        phones,
        phone2idx,
        entries,
    })
}

fn read_topology_text(r: &mut TokenReader<'_>) -> Result<Topology> {
    let mut topo = Topology::default();
    loop {
        let (at, tok) = r.token_at()?;
        if tok == "</Topology>" {
            break;
        }
        if tok != "<TopologyEntry>" {
            return Err(r.err_at(at, "<TopologyEntry> or </Topology>"));
        }
        r.expect_token("<ForPhones>")?;
        let mut phones = Vec::new();
        loop {
            let (at, tok) = r.token_at()?;
            if tok == "</ForPhones>" {
                break;
            }
            match tok.parse::<i32>() {
                Ok(p) if p > 0 && p < MAX_ID => phones.push((p, at)),
                _ => return Err(r.err_at(at, "a phone id (a positive integer) or </ForPhones>")),
            }
        }
        let mut states: Vec<HmmState> = Vec::new();
        let (mut at, mut tok) = r.token_at()?;
        while tok != "</TopologyEntry>" {
            if tok != "<State>" {
                return Err(r.err_at(at, "<State> or </TopologyEntry>"));
            }
            let at_id = r.next_token_pos();
            let id = r.i32()?;
            if id != states.len() as i32 {
                return Err(r.err_at(
                    at_id,
                    format!("state {} (states in order from 0)", states.len()),
                ));
            }
            (at, tok) = r.token_at()?;
            let (mut forward, mut self_loop) = (-1, -1);
            if tok == "<PdfClass>" {
                forward = r.i32()?;
                self_loop = forward;
                (at, tok) = r.token_at()?;
            } else if tok == "<ForwardPdfClass>" {
                forward = r.i32()?;
                r.expect_token("<SelfLoopPdfClass>")?;
                self_loop = r.i32()?;
                (at, tok) = r.token_at()?;
            }
            let mut transitions = Vec::new();
            while tok == "<Transition>" {
                let dst = r.i32()?;
                let p = r.f32()?;
                transitions.push((dst, p));
                (at, tok) = r.token_at()?;
            }
            if tok != "</State>" {
                return Err(r.err_at(at, "<Transition> or </State>"));
            }
            states.push(HmmState {
                forward_pdf_class: forward,
                self_loop_pdf_class: self_loop,
                transitions,
            });
            (at, tok) = r.token_at()?;
        }
        let idx = topo.entries.len() as i32;
        topo.entries.push(states);
        for (p, at) in phones {
            let p = p as usize;
            if topo.phone2idx.len() <= p {
                topo.phone2idx.resize(p + 1, -1);
            }
            if topo.phone2idx[p] != -1 {
                return Err(r.err_at(at, format!("phone {p} in one topology entry only")));
            }
            topo.phone2idx[p] = idx;
            topo.phones.push(p as i32);
        }
    }
    topo.phones.sort_unstable();
    Ok(topo)
}

/// A transition-state: (phone, HMM state, forward pdf, self-loop pdf), ordered as Kaldi sorts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tuple {
    pub phone: i32,
    pub hmm_state: i32,
    pub forward_pdf: i32,
    pub self_loop_pdf: i32,
}

/// Kaldi's `TransitionModel`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TransitionModel {
    pub topo: Topology,
    /// The transition-states, sorted; transition-state `s` is `tuples[s - 1]`.
    pub tuples: Vec<Tuple>,
    /// Log probability of each transition-id (index 0 unused, 0).
    pub log_probs: Vec<f32>,
    /// First transition-id of each transition-state (index 0 unused; one past the last at
    /// the end).
    state2id: Vec<i32>,
    /// Transition-state of each transition-id (index 0 unused).
    id2state: Vec<i32>,
    /// Pdf-id of each transition-id (index 0: -1).
    id2pdf: Vec<i32>,
    num_pdfs: i32,
}

/// Options of the maximum-likelihood re-estimation (Kaldi's `MleTransitionUpdateConfig`).
#[derive(Clone, Debug)]
pub struct MleConfig {
    /// `--transition-floor`: the least probability a transition gets.
    pub floor: f32,
    /// `--transition-min-count`: a transition-state (or pdf) with less count keeps its
    /// probabilities.
    pub min_count: f32,
    /// `--share-for-pdfs`: pool the counts of all transition-states with the same pdf.
    pub share_for_pdfs: bool,
}

impl Default for MleConfig {
    fn default() -> Self {
        MleConfig {
            floor: 0.01,
            min_count: 5.0,
            share_for_pdfs: false,
        }
    }
}

/// What an update did, for the log.
#[derive(Clone, Debug, Default)]
pub struct MleReport {
    /// Log-likelihood improvement summed over frames.
    pub objf_impr: f32,
    /// Frames counted (over transition-states with more than one transition).
    pub count: f32,
    pub num_floored: usize,
    pub num_skipped: usize,
}

impl TransitionModel {
    /// Builds the model from a topology and its transition-states (sorted and de-duplicated
    /// here), with the topology's probabilities.
    pub fn new(topo: Topology, mut tuples: Vec<Tuple>) -> std::result::Result<Self, String> {
        tuples.sort_unstable();
        tuples.dedup();
        let mut tm = TransitionModel {
            topo,
            tuples,
            ..Default::default()
        };
        tm.compute_derived()?;
        let mut log_probs = vec![0.0f32; tm.num_transition_ids() as usize + 1];
        for (tid, lp) in log_probs.iter_mut().enumerate().skip(1) {
            let (tuple, index) = tm.tuple_and_index(tid as i32);
            let p = tm.state_of(&tuple).transitions[index].1;
            *lp = p.ln();
        }
        tm.log_probs = log_probs;
        Ok(tm)
    }

    /// Number of pdf-ids (largest pdf-id named + 1).
    pub fn num_pdfs(&self) -> i32 {
        self.num_pdfs
    }
    /// Number of transition-ids (they are 1..=this).
    pub fn num_transition_ids(&self) -> i32 {
        self.id2state.len() as i32 - 1
    }
    /// Number of transition-states.
    pub fn num_transition_states(&self) -> i32 {
        self.tuples.len() as i32
    }
    /// Whether `tid` is a transition-id of this model.
    pub fn is_valid_transition_id(&self, tid: i32) -> bool {
        tid >= 1 && tid <= self.num_transition_ids()
    }
    /// The pdf-id of a valid transition-id.
    pub fn transition_id_to_pdf(&self, tid: i32) -> i32 {
        self.id2pdf[tid as usize]
    }

    /// The HMM state a tuple names (valid after `compute_derived`).
    fn state_of(&self, t: &Tuple) -> &HmmState {
        &self
            .topo
            .entry_for(t.phone)
            .expect("checked in compute_derived")[t.hmm_state as usize]
    }
    fn tuple_and_index(&self, tid: i32) -> (Tuple, usize) {
        let s = self.id2state[tid as usize];
        (
            self.tuples[s as usize - 1],
            (tid - self.state2id[s as usize]) as usize,
        )
    }
    fn is_self_loop(&self, tid: i32) -> bool {
        let (t, index) = self.tuple_and_index(tid);
        self.state_of(&t).transitions[index].0 == t.hmm_state
    }

    /// The tables derived from the tuples; a message if a tuple names no HMM state.
    fn compute_derived(&mut self) -> std::result::Result<(), String> {
        let mut next = 1i64;
        let mut state2id = vec![0i32; self.tuples.len() + 2];
        let mut num_pdfs = 0;
        for (i, t) in self.tuples.iter().enumerate() {
            let entry = self.topo.entry_for(t.phone).ok_or_else(|| {
                format!(
                    "transition-state {}: phone {} in the topology",
                    i + 1,
                    t.phone
                )
            })?;
            let state = usize::try_from(t.hmm_state)
                .ok()
                .and_then(|h| entry.get(h))
                .ok_or_else(|| {
                    format!(
                        "transition-state {}: HMM state {} of phone {}",
                        i + 1,
                        t.hmm_state,
                        t.phone
                    )
                })?;
            if t.forward_pdf < 0
                || t.self_loop_pdf < 0
                || t.forward_pdf >= MAX_ID
                || t.self_loop_pdf >= MAX_ID
                || state.forward_pdf_class == -1
            {
                return Err(format!(
                    "transition-state {}: pdf-ids of an emitting state (got {} {})",
                    i + 1,
                    t.forward_pdf,
                    t.self_loop_pdf
                ));
            }
            num_pdfs = num_pdfs.max(t.forward_pdf.max(t.self_loop_pdf) + 1);
            state2id[i + 1] = next as i32;
            next += state.transitions.len() as i64;
        }
        *state2id.last_mut().unwrap() = next as i32;
        let mut id2state = vec![0i32; next as usize];
        for s in 1..=self.tuples.len() {
            for tid in state2id[s]..state2id[s + 1] {
                id2state[tid as usize] = s as i32;
            }
        }
        self.state2id = state2id;
        self.id2state = id2state;
        self.num_pdfs = num_pdfs;
        let mut id2pdf = vec![-1i32; next as usize];
        for tid in 1..next as i32 {
            let (t, _) = self.tuple_and_index(tid);
            id2pdf[tid as usize] = if self.is_self_loop(tid) {
                t.self_loop_pdf
            } else {
                t.forward_pdf
            };
        }
        self.id2pdf = id2pdf;
        Ok(())
    }

    /// Reads `<TransitionModel> ... </TransitionModel>` in the reader's mode.
    pub fn read(r: &mut TokenReader<'_>) -> Result<TransitionModel> {
        let start = r.next_token_pos();
        r.expect_token("<TransitionModel>")?;
        let topo = Topology::read(r)?;
        let at = r.next_token_pos();
        let (close, tuples4) = match r.token()?.as_str() {
            "<Triples>" => ("</Triples>", false),
            "<Tuples>" => ("</Tuples>", true),
            _ => return Err(r.err_at(at, "<Triples> or <Tuples>")),
        };
        let n = read_checked_count(r, if tuples4 { 8 } else { 6 }, "a number of tuples")?;
        let tuples_at = r.next_token_pos();
        let mut tuples = Vec::with_capacity(n);
        for _ in 0..n {
            let phone = r.i32()?;
            let hmm_state = r.i32()?;
            let forward_pdf = r.i32()?;
            let self_loop_pdf = if tuples4 { r.i32()? } else { forward_pdf };
            tuples.push(Tuple {
                phone,
                hmm_state,
                forward_pdf,
                self_loop_pdf,
            });
        }
        if tuples.windows(2).any(|w| w[0] >= w[1]) {
            return Err(r.err_at(tuples_at, "transition-state tuples sorted and distinct"));
        }
        r.expect_token(close)?;
        let mut tm = TransitionModel {
            topo,
            tuples,
            ..Default::default()
        };
        tm.compute_derived().map_err(|m| r.err_at(tuples_at, m))?;
        if tm.tuples.is_empty() || tm.num_transition_ids() == 0 {
            return Err(r.err_at(tuples_at, "at least one transition-state with transitions"));
        }
        r.expect_token("<LogProbs>")?;
        let at = r.next_token_pos();
        let lp = r.vector()?.into_vec();
        if lp.len() != tm.num_transition_ids() as usize + 1 {
            return Err(r.err_at(
                at,
                format!(
                    "{} log-probabilities (one per transition-id and index 0), got {}",
                    tm.num_transition_ids() + 1,
                    lp.len()
                ),
            ));
        }
        if let Some(bad) = lp
            .iter()
            .skip(1)
            .position(|&x| !(x <= 0.0 && x.is_finite()))
        {
            return Err(r.err_at(
                at,
                format!(
                    "finite log-probabilities <= 0 (transition-id {} has {})",
                    bad + 1,
                    lp[bad + 1]
                ),
            ));
        }
        tm.log_probs = lp;
        r.expect_token("</LogProbs>")?;
        r.expect_token("</TransitionModel>")?;
        let _ = start;
        Ok(tm)
    }

    /// Writes the model as Kaldi's `TransitionModel::Write` does (no stream header).
    pub fn write(&self, w: &mut TokenWriter) {
        let hmm = self.topo.is_hmm();
        w.token("<TransitionModel>");
        w.newline_if_text();
        self.topo.write(w);
        w.token(if hmm { "<Triples>" } else { "<Tuples>" });
        w.i32(self.tuples.len() as i32);
        w.newline_if_text();
        for t in &self.tuples {
            w.i32(t.phone);
            w.i32(t.hmm_state);
            w.i32(t.forward_pdf);
            if !hmm {
                w.i32(t.self_loop_pdf);
            }
            w.newline_if_text();
        }
        w.token(if hmm { "</Triples>" } else { "</Tuples>" });
        w.newline_if_text();
        w.token("<LogProbs>");
        w.newline_if_text();
        w.vector(&self.log_probs);
        w.token("</LogProbs>");
        w.newline_if_text();
        w.token("</TransitionModel>");
        w.newline_if_text();
    }

    /// Reads a file that starts with a transition model (a bare one or a `final.mdl`; what
    /// follows it is not read), as Kaldi's `ReadKaldiObject` does.
    pub fn read_file(rxfilename: &str) -> Result<TransitionModel> {
        let (bytes, start, name) = crate::io::table::read_rxfilename(rxfilename)?;
        let mut r = TokenReader::detect(&bytes[start..], name)?;
        TransitionModel::read(&mut r)
    }

    /// Zeroed statistics: one count per transition-id (index 0 unused).
    pub fn init_stats(&self) -> Vec<f64> {
        vec![0.0; self.num_transition_ids() as usize + 1]
    }

    /// Maximum-likelihood re-estimation from counts per transition-id (Kaldi's
    /// `MleUpdate`): per transition-state with more than one transition and at least
    /// `min_count` frames, the relative frequencies, floored and renormalised three times.
    pub fn mle_update(&mut self, stats: &[f64], cfg: &MleConfig) -> MleReport {
        assert_eq!(stats.len(), self.num_transition_ids() as usize + 1);
        // Groups of transition-states that share their probabilities.
        let groups: Vec<Vec<usize>> = if cfg.share_for_pdfs {
            let hmm = self.topo.is_hmm();
            let mut by_pdf: std::collections::BTreeMap<i32, std::collections::BTreeSet<usize>> =
                Default::default();
            for (i, t) in self.tuples.iter().enumerate() {
                by_pdf.entry(t.forward_pdf).or_default().insert(i + 1);
                if !hmm {
                    by_pdf.entry(t.self_loop_pdf).or_default().insert(i + 1);
                }
            }
            by_pdf
                .into_values()
                .map(|s| s.into_iter().collect())
                .collect()
        } else {
            (1..=self.tuples.len()).map(|s| vec![s]).collect()
        };
        let mut rep = MleReport::default();
        let mut count_sum = 0.0f32;
        let mut objf_sum = 0.0f32;
        for group in groups {
            let first = group[0];
            let n = (self.state2id[first + 1] - self.state2id[first]) as usize;
            if n <= 1 {
                continue;
            }
            let mut counts = vec![0.0f64; n];
            for &s in &group {
                let base = self.state2id[s] as usize;
                if self.state2id[s + 1] as usize - base != n {
                    // Kaldi refuses to share over states with different numbers of
                    // transitions; such a group keeps its probabilities.
                    continue;
                }
                for (k, c) in counts.iter_mut().enumerate() {
                    *c += stats[base + k];
                }
            }
            let tot: f64 = counts.iter().sum();
            count_sum = (count_sum as f64 + tot) as f32;
            if tot < cfg.min_count as f64 {
                rep.num_skipped += 1;
                continue;
            }
            let base = self.state2id[first] as usize;
            let old: Vec<f32> = (0..n).map(|k| self.log_probs[base + k].exp()).collect();
            let mut new: Vec<f32> = counts.iter().map(|&c| (c / tot) as f32).collect();
            for _ in 0..3 {
                let scale = (1.0 / sum_f64(&new)) as f32;
                for x in new.iter_mut() {
                    *x = (*x * scale).max(cfg.floor);
                }
            }
            for k in 0..n {
                if new[k] == cfg.floor {
                    rep.num_floored += 1;
                }
                let change = counts[k] * (new[k].ln() - old[k].ln()) as f64;
                objf_sum = (objf_sum as f64 + change) as f32;
            }
            for &s in &group {
                let base = self.state2id[s] as usize;
                if self.state2id[s + 1] as usize - base != n {
                    continue;
                }
                for (k, &p) in new.iter().enumerate() {
                    self.log_probs[base + k] = p.ln();
                }
            }
        }
        rep.objf_impr = objf_sum;
        rep.count = count_sum;
        rep
    }

    /// Checks that `other` has the same structure (topology, tuples) as this model.
    pub fn compatible(&self, other: &TransitionModel) -> bool {
        self.topo == other.topo && self.tuples == other.tuples
    }
}

/// The sum of a float vector as Kaldi's `VectorBase<float>::Sum` gives it (accumulated in
/// double, returned as float).
pub fn kaldi_sum(v: &[f32]) -> f32 {
    v.iter().map(|&x| x as f64).sum::<f64>() as f32
}

/// The sum of a float vector in double, not rounded: what `v.Scale(1.0 / v.Sum())` in
/// Kaldi's binaries divides by (measured: their output matches this, not the float sum).
pub fn sum_f64(v: &[f32]) -> f64 {
    v.iter().map(|&x| x as f64).sum::<f64>()
}

/// An error for a transition-id outside the model, naming where it was read.
pub fn bad_transition_id(what: &str, tid: i32, tm: &TransitionModel) -> Error {
    Error::Compute(format!(
        "{what}: transition-id {tid} is not in the model (it has 1..={})",
        tm.num_transition_ids()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOPO: &str = "<Topology>\n<TopologyEntry>\n<ForPhones>\n1 2\n</ForPhones>\n\
        <State> 0 <PdfClass> 0 <Transition> 0 0.75 <Transition> 1 0.25 </State>\n\
        <State> 1 </State>\n</TopologyEntry>\n</Topology>\n";

    fn model() -> TransitionModel {
        let mut r = TokenReader::new(TOPO.as_bytes(), false, "topo");
        let topo = Topology::read(&mut r).unwrap();
        let tuples = (1..=2)
            .map(|p| Tuple {
                phone: p,
                hmm_state: 0,
                forward_pdf: p - 1,
                self_loop_pdf: p - 1,
            })
            .collect();
        TransitionModel::new(topo, tuples).unwrap()
    }

    #[test]
    fn numbering_and_round_trip() {
        let tm = model();
        assert_eq!(tm.num_transition_ids(), 4);
        assert_eq!(tm.num_pdfs(), 2);
        assert_eq!(
            (1..=4)
                .map(|t| tm.transition_id_to_pdf(t))
                .collect::<Vec<_>>(),
            [0, 0, 1, 1]
        );
        for binary in [false, true] {
            let mut w = TokenWriter::new(binary);
            tm.write(&mut w);
            let bytes = w.into_bytes();
            let mut r = TokenReader::new(&bytes, binary, "tm");
            let back = TransitionModel::read(&mut r).unwrap();
            assert!(r.rest().iter().all(|b| b.is_ascii_whitespace()));
            if binary {
                assert_eq!(back, tm);
            } else {
                // Text keeps Kaldi's printed precision: what it reads back writes the same.
                let mut again = TokenWriter::new(false);
                back.write(&mut again);
                assert_eq!(again.into_bytes(), bytes);
                assert_eq!(back.tuples, tm.tuples);
            }
        }
    }

    #[test]
    fn mle_update_floors_and_skips() {
        let mut tm = model();
        let mut stats = tm.init_stats();
        stats[1] = 9.0; // phone 1: self-loop 9, exit 0 -> the exit is floored
        stats[3] = 1.0; // phone 2: one frame, under the minimum count: kept
        let rep = tm.mle_update(&stats, &MleConfig::default());
        assert_eq!(rep.num_skipped, 1);
        assert_eq!(rep.num_floored, 1);
        assert!((tm.log_probs[2].exp() - 0.01).abs() < 1e-4);
        assert!((tm.log_probs[3] - 0.75f32.ln()).abs() < 1e-7);
    }

    #[test]
    fn damaged_models_are_errors_not_panics() {
        let tm = model();
        let mut w = TokenWriter::new(true);
        tm.write(&mut w);
        let bytes = w.into_bytes();
        for cut in 0..bytes.len() {
            let mut r = TokenReader::new(&bytes[..cut], true, "tm");
            assert!(TransitionModel::read(&mut r).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x55;
            let mut r = TokenReader::new(&b, true, "tm");
            let _ = TransitionModel::read(&mut r);
        }
    }
}
