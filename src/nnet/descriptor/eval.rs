//! What a descriptor means for the compiler: dependencies of an Index, computability, and
//! the mapping from output Index to input Cindex.
//!
//! Semantics (Kaldi's `nnet-descriptor.cc`, re-derived from the documented behaviour): a
//! forwarding descriptor first maps the requested Index through its source and then applies
//! its own transformation (so `Offset(Round(x, 2), 1)` at t = 3 reads x at t = 2 + 1).
//! `Switch` picks argument `t mod n` with the remainder made non-negative; `Round` moves t
//! down to the next-lowest multiple of the modulus (toward −∞, also for negative t).

use super::{Descriptor, ForwardingDescriptor, IndexVar, SumDescriptor};
use crate::index::{Cindex, Index};

/// Non-negative remainder of `a` modulo `m` (m ≥ 1); `m ≤ 0` is treated as 1.
fn pos_mod(a: i32, m: i32) -> i32 {
    if m <= 0 {
        return 0;
    }
    a.rem_euclid(m)
}

/// Least common multiple (both ≥ 1; saturating rather than overflowing).
pub fn lcm(a: i32, b: i32) -> i32 {
    fn gcd(mut a: i64, mut b: i64) -> i64 {
        while b != 0 {
            let t = a % b;
            a = b;
            b = t;
        }
        a
    }
    let (a, b) = (a.max(1) as i64, b.max(1) as i64);
    let l = a / gcd(a, b) * b;
    l.min(i32::MAX as i64) as i32
}

impl ForwardingDescriptor {
    /// The input Cindex that the output Index `index` reads.
    pub fn map_to_input(&self, index: &Index) -> Cindex {
        match self {
            ForwardingDescriptor::Simple { node, .. } => (*node, *index),
            ForwardingDescriptor::Offset {
                src,
                t_offset,
                x_offset,
            } => {
                let (n, mut i) = src.map_to_input(index);
                i.t = i.t.wrapping_add(*t_offset);
                i.x = i.x.wrapping_add(*x_offset);
                (n, i)
            }
            ForwardingDescriptor::Switch(v) => {
                if v.is_empty() {
                    // Unreachable for parsed descriptors; map to node 0 rather than panic.
                    return (0, *index);
                }
                let k = pos_mod(index.t, v.len() as i32) as usize;
                v[k.min(v.len() - 1)].map_to_input(index)
            }
            ForwardingDescriptor::Round { src, t_modulus } => {
                let (n, mut i) = src.map_to_input(index);
                i.t -= pos_mod(i.t, *t_modulus);
                (n, i)
            }
            ForwardingDescriptor::ReplaceIndex { src, var, value } => {
                let (n, mut i) = src.map_to_input(index);
                match var {
                    IndexVar::T => i.t = *value,
                    IndexVar::X => i.x = *value,
                }
                (n, i)
            }
        }
    }

    /// The scale of the innermost node term (1 unless `Scale(...)` was used). For `Switch`,
    /// the first argument's scale (see [`ForwardingDescriptor::scale_for_node`]).
    pub fn scale(&self) -> f32 {
        match self {
            ForwardingDescriptor::Simple { scale, .. } => *scale,
            ForwardingDescriptor::Offset { src, .. }
            | ForwardingDescriptor::Round { src, .. }
            | ForwardingDescriptor::ReplaceIndex { src, .. } => src.scale(),
            ForwardingDescriptor::Switch(v) => v.first().map_or(1.0, |d| d.scale()),
        }
    }

    /// The scale with which `node` enters this descriptor, or `None` if it does not appear.
    /// Errors if it appears with two different scales (Kaldi's "Inconsistent value").
    pub fn scale_for_node(&self, node: usize) -> Result<Option<f32>, String> {
        match self {
            ForwardingDescriptor::Simple { node: n, scale } => {
                Ok(if *n == node { Some(*scale) } else { None })
            }
            ForwardingDescriptor::Offset { src, .. }
            | ForwardingDescriptor::Round { src, .. }
            | ForwardingDescriptor::ReplaceIndex { src, .. } => src.scale_for_node(node),
            ForwardingDescriptor::Switch(v) => {
                let mut ans = None;
                for d in v {
                    ans = combine_scales(ans, d.scale_for_node(node)?, node)?;
                }
                Ok(ans)
            }
        }
    }

    /// Modulus: the period in t after which the mapping repeats up to a shift.
    pub fn modulus(&self) -> i32 {
        match self {
            ForwardingDescriptor::Simple { .. } => 1,
            ForwardingDescriptor::Offset { src, .. }
            | ForwardingDescriptor::ReplaceIndex { src, .. } => src.modulus(),
            ForwardingDescriptor::Round { src, t_modulus } => lcm(*t_modulus, src.modulus()),
            ForwardingDescriptor::Switch(v) => v
                .iter()
                .fold(v.len().max(1) as i32, |a, d| lcm(a, d.modulus())),
        }
    }

    /// Every node this descriptor may read.
    pub fn node_dependencies(&self, out: &mut Vec<usize>) {
        match self {
            ForwardingDescriptor::Simple { node, .. } => out.push(*node),
            ForwardingDescriptor::Offset { src, .. }
            | ForwardingDescriptor::Round { src, .. }
            | ForwardingDescriptor::ReplaceIndex { src, .. } => src.node_dependencies(out),
            ForwardingDescriptor::Switch(v) => v.iter().for_each(|d| d.node_dependencies(out)),
        }
    }
}

/// Combines the scales of one node found in two sub-expressions.
fn combine_scales(a: Option<f32>, b: Option<f32>, node: usize) -> Result<Option<f32>, String> {
    match (a, b) {
        (Some(x), Some(y)) if x != y => Err(format!(
            "Inconsistent value for sum descriptor: for node {node}, it can have scales {x} vs. {y} \
             (you have used unsupported combinations of descriptors)"
        )),
        (Some(x), _) => Ok(Some(x)),
        (None, y) => Ok(y),
    }
}

/// Which node a scale is asked for: a real node, or the constant term (Kaldi's node −1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleTarget {
    /// The scale of a node's values.
    Node(usize),
    /// The constant offset contributed by `Const(...)` terms.
    Const,
}

impl SumDescriptor {
    /// Appends every Cindex this part may read for `index`.
    pub fn get_dependencies(&self, index: &Index, deps: &mut Vec<Cindex>) {
        match self {
            SumDescriptor::Simple(f) => deps.push(f.map_to_input(index)),
            SumDescriptor::Optional(s) => s.get_dependencies(index, deps),
            SumDescriptor::Sum(a, b) | SumDescriptor::Failover(a, b) => {
                a.get_dependencies(index, deps);
                b.get_dependencies(index, deps);
            }
            SumDescriptor::Const { .. } => {}
        }
    }

    /// Whether the part is computable for `index` given which Cindexes are available; if so
    /// and `used` is given, appends the Cindexes actually used (nothing is appended when it
    /// returns false).
    pub fn is_computable(
        &self,
        index: &Index,
        available: &dyn Fn(&Cindex) -> bool,
        used: Option<&mut Vec<Cindex>>,
    ) -> bool {
        match self {
            SumDescriptor::Simple(f) => {
                let c = f.map_to_input(index);
                let ok = available(&c);
                if ok {
                    if let Some(u) = used {
                        u.push(c);
                    }
                }
                ok
            }
            SumDescriptor::Optional(s) => {
                s.is_computable(index, available, used);
                true
            }
            SumDescriptor::Sum(a, b) => {
                let mut ua = Vec::new();
                let mut ub = Vec::new();
                let want = used.is_some();
                let ok = a.is_computable(index, available, want.then_some(&mut ua))
                    && b.is_computable(index, available, want.then_some(&mut ub));
                if ok {
                    if let Some(u) = used {
                        u.extend(ua);
                        u.extend(ub);
                    }
                }
                ok
            }
            SumDescriptor::Failover(a, b) => {
                let mut tmp = Vec::new();
                let want = used.is_some();
                let ok = a.is_computable(index, available, want.then_some(&mut tmp))
                    || b.is_computable(index, available, want.then_some(&mut tmp));
                if ok {
                    if let Some(u) = used {
                        u.extend(tmp);
                    }
                }
                ok
            }
            SumDescriptor::Const { .. } => true,
        }
    }

    /// The scale of a node (or of the constant term) in this part, `None` if absent.
    /// Errors as Kaldi does for the same node with two scales, and for a `Const` term
    /// inside `Failover` (its value would depend on computability per row).
    pub fn scale_for(&self, target: ScaleTarget) -> Result<Option<f32>, String> {
        match self {
            SumDescriptor::Simple(f) => match target {
                ScaleTarget::Node(n) => f.scale_for_node(n),
                ScaleTarget::Const => Ok(None),
            },
            SumDescriptor::Optional(s) => s.scale_for(target),
            SumDescriptor::Sum(a, b) => {
                let (x, y) = (a.scale_for(target)?, b.scale_for(target)?);
                match (target, x, y) {
                    // Constant terms add up.
                    (ScaleTarget::Const, Some(x), Some(y)) => Ok(Some(x + y)),
                    (ScaleTarget::Node(n), x, y) => combine_scales(x, y, n),
                    (_, x, y) => Ok(x.or(y)),
                }
            }
            SumDescriptor::Failover(a, b) => {
                let (x, y) = (a.scale_for(target)?, b.scale_for(target)?);
                match target {
                    ScaleTarget::Const if x.is_some() || y.is_some() => Err(
                        "Illegal combination of Failover operation with Const() expression"
                            .to_string(),
                    ),
                    ScaleTarget::Node(n) => combine_scales(x, y, n),
                    ScaleTarget::Const => Ok(None),
                }
            }
            SumDescriptor::Const { value, .. } => match target {
                ScaleTarget::Const => Ok(Some(*value)),
                ScaleTarget::Node(_) => Ok(None),
            },
        }
    }

    /// Checks the Kaldi restrictions on scales and constants for this part.
    pub fn check_scales(&self) -> Result<(), String> {
        let mut nodes = Vec::new();
        self.node_dependencies(&mut nodes);
        nodes.sort_unstable();
        nodes.dedup();
        for n in nodes {
            self.scale_for(ScaleTarget::Node(n))?;
        }
        self.scale_for(ScaleTarget::Const)?;
        Ok(())
    }

    /// Every node this part may read.
    pub fn node_dependencies(&self, out: &mut Vec<usize>) {
        match self {
            SumDescriptor::Simple(f) => f.node_dependencies(out),
            SumDescriptor::Optional(s) => s.node_dependencies(out),
            SumDescriptor::Sum(a, b) | SumDescriptor::Failover(a, b) => {
                a.node_dependencies(out);
                b.node_dependencies(out);
            }
            SumDescriptor::Const { .. } => {}
        }
    }

    /// Modulus of this part (lcm over its forwarding descriptors).
    pub fn modulus(&self) -> i32 {
        match self {
            SumDescriptor::Simple(f) => f.modulus(),
            SumDescriptor::Optional(s) => s.modulus(),
            SumDescriptor::Sum(a, b) | SumDescriptor::Failover(a, b) => {
                lcm(a.modulus(), b.modulus())
            }
            SumDescriptor::Const { .. } => 1,
        }
    }
}

impl Descriptor {
    /// Appends every Cindex the descriptor may read for `index`.
    pub fn get_dependencies(&self, index: &Index, deps: &mut Vec<Cindex>) {
        for p in &self.parts {
            p.get_dependencies(index, deps);
        }
    }

    /// True if every part is computable; `used` receives the Cindexes actually used.
    pub fn is_computable(
        &self,
        index: &Index,
        available: &dyn Fn(&Cindex) -> bool,
        mut used: Option<&mut Vec<Cindex>>,
    ) -> bool {
        for p in &self.parts {
            if !p.is_computable(index, available, used.as_deref_mut()) {
                return false;
            }
        }
        true
    }

    /// Every node this descriptor may read, sorted and without repeats.
    pub fn node_dependencies(&self) -> Vec<usize> {
        let mut v = Vec::new();
        for p in &self.parts {
            p.node_dependencies(&mut v);
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Modulus (lcm over the parts).
    pub fn modulus(&self) -> i32 {
        self.parts.iter().fold(1, |a, p| lcm(a, p.modulus()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn simple(node: usize) -> ForwardingDescriptor {
        ForwardingDescriptor::Simple { node, scale: 1.0 }
    }

    #[test]
    fn round_and_switch_negative_t() {
        let r = ForwardingDescriptor::Round {
            src: Box::new(simple(3)),
            t_modulus: 3,
        };
        assert_eq!(r.map_to_input(&Index::new(0, -1, 0)).1.t, -3);
        assert_eq!(r.map_to_input(&Index::new(0, -3, 0)).1.t, -3);
        assert_eq!(r.map_to_input(&Index::new(0, 5, 0)).1.t, 3);
        let s = ForwardingDescriptor::Switch(vec![simple(1), simple(2), simple(3)]);
        assert_eq!(s.map_to_input(&Index::new(0, -1, 0)).0, 3);
        assert_eq!(s.map_to_input(&Index::new(0, -3, 0)).0, 1);
        assert_eq!(s.map_to_input(&Index::new(0, 4, 0)).0, 2);
        assert_eq!(s.modulus(), 3);
    }

    #[test]
    fn failover_and_optional() {
        let a = SumDescriptor::Simple(ForwardingDescriptor::Offset {
            src: Box::new(simple(1)),
            t_offset: -1,
            x_offset: 0,
        });
        let b = SumDescriptor::Simple(simple(2));
        let f = SumDescriptor::Failover(Box::new(a.clone()), Box::new(b));
        let avail = |c: &Cindex| c.0 == 2 || c.1.t >= 0;
        let mut used = Vec::new();
        assert!(f.is_computable(&Index::new(0, 0, 0), &avail, Some(&mut used)));
        assert_eq!(used, vec![(2, Index::new(0, 0, 0))]);
        used.clear();
        assert!(f.is_computable(&Index::new(0, 1, 0), &avail, Some(&mut used)));
        assert_eq!(used, vec![(1, Index::new(0, 0, 0))]);
        let o = SumDescriptor::Optional(Box::new(a));
        used.clear();
        assert!(o.is_computable(&Index::new(0, 0, 0), &avail, Some(&mut used)));
        assert!(used.is_empty());
    }
}
