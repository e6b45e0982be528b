//! Where each node can possibly be computable, in t, for a request: a cheap forward pass over
//! the network that the graph builder uses to skip Cindexes that can never be computed.
//!
//! Why: a statistics-pooling layer with `right-context=10000` (the x-vector recipes) asks for
//! 10,001 inputs per output frame. Without a bound the builder adds every one of them, and the
//! layers below at every one of those t, only to find them not computable: 15 M edges and
//! 400 k dead Cindexes for a 1,500-frame utterance. With it, the window stops where the input
//! stops.
//!
//! The ranges are over-approximations (intervals in t over all n and x): if a Cindex (node, t)
//! is computable then `t` is in the node's range. Skipping a Cindex outside it changes nothing
//! the builder decides, because an absent dependency counts as "not available", which is what
//! the Cindex would have turned out to be. Anything the analysis does not understand gives
//! [`TRange::All`], i.e. no skipping. tests/compile.rs checks on random networks that graphs
//! built with and without the ranges are identical.

use super::request::ComputationRequest;
use crate::nnet::descriptor::{Descriptor, ForwardingDescriptor, IndexVar, SumDescriptor};
use crate::nnet::{NetworkNode, Nnet, TRange};

/// Offsets and spans beyond this are treated as unbounded, so that no i64 interval stands for
/// t values that i32 arithmetic in the descriptors would wrap around.
const LIMIT: i64 = 1 << 30;

/// One t-range per network node (see the module documentation).
pub fn node_t_ranges(nnet: &Nnet, request: &ComputationRequest) -> Vec<TRange> {
    let n = nnet.nodes.len();
    let mut supplied = vec![TRange::Empty; n];
    for spec in &request.inputs {
        if let Some(node) = nnet.node_index(&spec.name) {
            for i in &spec.indexes {
                let t = i.t as i64;
                supplied[node] = supplied[node].union(TRange::Span(t, t));
            }
        }
    }
    let mut ranges: Vec<TRange> = supplied.iter().map(|&r| bounded(r)).collect();
    // Monotone iteration from below; a recurrence that keeps widening a range is cut short by
    // declaring what still changes unbounded (All absorbs, so this terminates).
    let mut sweeps = 0;
    loop {
        let mut changed = Vec::new();
        for node in 0..n {
            let r = bounded(node_range(nnet, node, &ranges).union(supplied[node]));
            if r != ranges[node] {
                ranges[node] = r;
                changed.push(node);
            }
        }
        if changed.is_empty() {
            return ranges;
        }
        sweeps += 1;
        if sweeps > n + 4 {
            for node in changed {
                ranges[node] = TRange::All;
            }
        }
    }
}

/// Spans reaching past ±LIMIT become All.
fn bounded(r: TRange) -> TRange {
    match r {
        TRange::Span(lo, hi) if lo < -LIMIT || hi > LIMIT => TRange::All,
        r => r,
    }
}

/// The range of one node from the current ranges of the nodes it reads.
fn node_range(nnet: &Nnet, node: usize, ranges: &[TRange]) -> TRange {
    match &nnet.nodes[node] {
        // Only what the request supplies (added by the caller).
        NetworkNode::Input { .. } => TRange::Empty,
        NetworkNode::DimRange { input_node, .. } => {
            ranges.get(*input_node).copied().unwrap_or(TRange::Empty)
        }
        NetworkNode::Descriptor { descriptor, .. } => descriptor_range(descriptor, ranges),
        NetworkNode::Component { component } => {
            let input = node
                .checked_sub(1)
                .and_then(|i| ranges.get(i))
                .copied()
                .unwrap_or(TRange::Empty);
            match nnet.components.get(*component) {
                Some(c) => c.output_t_range(input),
                None => TRange::Empty,
            }
        }
    }
}

/// Append needs every part.
fn descriptor_range(d: &Descriptor, ranges: &[TRange]) -> TRange {
    d.parts
        .iter()
        .fold(TRange::All, |acc, p| acc.intersect(sum_range(p, ranges)))
}

fn sum_range(s: &SumDescriptor, ranges: &[TRange]) -> TRange {
    match s {
        SumDescriptor::Simple(f) => preimage(f, ranges, &mut Vec::new()),
        // IfDefined and Const are computable anywhere.
        SumDescriptor::Optional(_) | SumDescriptor::Const { .. } => TRange::All,
        SumDescriptor::Sum(a, b) => sum_range(a, ranges).intersect(sum_range(b, ranges)),
        SumDescriptor::Failover(a, b) => sum_range(a, ranges).union(sum_range(b, ranges)),
    }
}

/// A transform a wrapper applies to t after its source's mapping.
#[derive(Clone, Copy)]
enum TMap {
    Shift(i32),
    Round(i32),
    SetTo(i32),
}

/// The t for which `f` maps to an available t of its node. A wrapper's own transform is applied
/// after its source's, so the transforms met on the way down (`outer`, outermost first) are
/// inverted in that order once the node's range is known.
fn preimage(f: &ForwardingDescriptor, ranges: &[TRange], outer: &mut Vec<TMap>) -> TRange {
    match f {
        ForwardingDescriptor::Simple { node, .. } => {
            let mut r = ranges.get(*node).copied().unwrap_or(TRange::Empty);
            for m in outer.iter() {
                r = match *m {
                    TMap::Shift(o) if (o as i64).abs() > LIMIT => TRange::All,
                    TMap::Shift(o) => r.widen(-(o as i64), -(o as i64)),
                    // t - (t mod m) in [lo, hi] implies t in [lo, hi + m - 1].
                    TMap::Round(m) if m > 0 => r.widen(0, m as i64 - 1),
                    TMap::Round(_) => TRange::All,
                    TMap::SetTo(v) => {
                        if r.contains(v as i64) {
                            TRange::All
                        } else {
                            TRange::Empty
                        }
                    }
                };
            }
            bounded(r)
        }
        ForwardingDescriptor::Offset { src, t_offset, .. } => {
            with(outer, TMap::Shift(*t_offset), |o| preimage(src, ranges, o))
        }
        ForwardingDescriptor::Round { src, t_modulus } => {
            with(outer, TMap::Round(*t_modulus), |o| preimage(src, ranges, o))
        }
        ForwardingDescriptor::ReplaceIndex { src, var, value } => match var {
            IndexVar::T => with(outer, TMap::SetTo(*value), |o| preimage(src, ranges, o)),
            IndexVar::X => preimage(src, ranges, outer),
        },
        // Each t reads one branch; the union over branches covers them all.
        ForwardingDescriptor::Switch(v) => v.iter().fold(TRange::Empty, |acc, b| {
            acc.union(preimage(b, ranges, outer))
        }),
    }
}

/// Runs `f` with `m` pushed on the list of outer transforms.
fn with(outer: &mut Vec<TMap>, m: TMap, f: impl FnOnce(&mut Vec<TMap>) -> TRange) -> TRange {
    outer.push(m);
    let r = f(outer);
    outer.pop();
    r
}
