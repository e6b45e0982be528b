//! Kaldi's phonetic decision tree (`ContextDependency`: context width N, central position P
//! and the `ToPdf` event map), read in text or binary, and the transition model it implies
//! with a topology (what `nnet3-am-init <tree> <topo> ...` builds).
//!
//! Event maps: `CE answer` (a leaf), `TE key n ( map... )` (a table over the key's value,
//! `NULL` for holes), `SE key [ yes-set ] { yes no }` (a split) and `NULL`. Keys are context
//! positions 0..N-1 (phones, 0 outside the utterance) and -1 for the pdf-class.

use super::{HmmState, Topology, TransitionModel, Tuple};
use crate::error::Result;
use crate::io::TokenReader;

/// Deepest nesting of event maps accepted (a bound so that damaged input fails cleanly).
const MAX_DEPTH: usize = 1000;
/// Largest table a `TE` may have.
const MAX_TABLE: i32 = 1 << 20;

/// A node of the event map.
#[derive(Clone, Debug, PartialEq)]
pub enum EventMap {
    /// A leaf: the pdf-id.
    Constant(i32),
    /// A table over the key's value; `None` entries map to nothing.
    Table(i32, Vec<Option<EventMap>>),
    /// `yes` for key values in the (sorted) set, `no` otherwise.
    Split(i32, Vec<i32>, Box<EventMap>, Box<EventMap>),
}

/// Kaldi's `ContextDependency`.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextDependency {
    pub context_width: i32,
    pub central_position: i32,
    pub to_pdf: Option<EventMap>,
}

impl ContextDependency {
    /// Reads `ContextDependency N P ToPdf <map> EndContextDependency`.
    pub fn read(r: &mut TokenReader<'_>) -> Result<ContextDependency> {
        r.expect_token("ContextDependency")?;
        let at = r.next_token_pos();
        let n = r.i32()?;
        let p = r.i32()?;
        if !(1..=100).contains(&n) || p < 0 || p >= n {
            return Err(r.err_at(
                at,
                format!(
                    "a context width N in 1..100 and a central position below it (got {n} {p})"
                ),
            ));
        }
        r.expect_token("ToPdf")?;
        let to_pdf = read_map(r, 0)?;
        r.expect_token("EndContextDependency")?;
        Ok(ContextDependency {
            context_width: n,
            central_position: p,
            to_pdf,
        })
    }

    /// Reads a tree file (text or binary, `-` = stdin).
    pub fn read_file(rxfilename: &str) -> Result<ContextDependency> {
        let (bytes, start, name) = crate::io::table::read_rxfilename(rxfilename)?;
        let mut r = TokenReader::detect(&bytes[start..], name)?;
        ContextDependency::read(&mut r)
    }

    /// The transition model of this tree and `topo`: every (phone, HMM state, forward pdf,
    /// self-loop pdf) the tree can produce. For an ordinary HMM topology the pdfs of each
    /// (phone, pdf-class) are all leaves reachable with the other context positions unknown
    /// (Kaldi's `MultiMap`); with separate self-loop classes, the forward and self-loop pdfs
    /// are paired only where one phonetic context gives both.
    pub fn transition_model(&self, topo: Topology) -> std::result::Result<TransitionModel, String> {
        let Some(map) = &self.to_pdf else {
            return Err("a tree with a ToPdf map (got NULL)".into());
        };
        let hmm = topo.is_hmm();
        let mut domain: Vec<i32> = std::iter::once(0)
            .chain(topo.phones.iter().copied())
            .collect();
        domain.sort_unstable();
        domain.dedup();
        let mut tuples = Vec::new();
        for &phone in &topo.phones {
            let entry: &[HmmState] = topo.entry_for(phone).unwrap_or_default();
            for (j, s) in entry.iter().enumerate() {
                if s.forward_pdf_class == -1 {
                    continue;
                }
                let ctx = Context {
                    central: self.central_position,
                    phone,
                    restrict: !hmm,
                };
                let start = Domains::new(self.context_width, &domain);
                let mut fwd = Vec::new();
                walk(map, &ctx, s.forward_pdf_class, start, &mut fwd);
                if fwd.is_empty() {
                    return Err(format!(
                        "the tree maps phone {phone}, pdf-class {} to no pdf",
                        s.forward_pdf_class
                    ));
                }
                for (fpdf, doms) in fwd {
                    if hmm {
                        tuples.push(Tuple {
                            phone,
                            hmm_state: j as i32,
                            forward_pdf: fpdf,
                            self_loop_pdf: fpdf,
                        });
                        continue;
                    }
                    let mut sl = Vec::new();
                    walk(map, &ctx, s.self_loop_pdf_class, doms, &mut sl);
                    for (spdf, _) in sl {
                        tuples.push(Tuple {
                            phone,
                            hmm_state: j as i32,
                            forward_pdf: fpdf,
                            self_loop_pdf: spdf,
                        });
                    }
                }
            }
        }
        TransitionModel::new(topo, tuples)
    }
}

/// The allowed values of each context position while walking the tree.
#[derive(Clone, Debug)]
struct Domains(Vec<Vec<i32>>);

impl Domains {
    fn new(n: i32, values: &[i32]) -> Self {
        Domains((0..n).map(|_| values.to_vec()).collect())
    }
}

struct Context {
    central: i32,
    phone: i32,
    /// Whether unknown positions range over the phones only (pairing forward and self-loop
    /// pdfs), or over every branch of the tree (`MultiMap`).
    restrict: bool,
}

/// Collects (leaf, the domains that reach it) for pdf-class `class`.
fn walk(map: &EventMap, ctx: &Context, class: i32, doms: Domains, out: &mut Vec<(i32, Domains)>) {
    match map {
        EventMap::Constant(a) => {
            if !out.iter().any(|(b, _)| b == a) || ctx.restrict {
                out.push((*a, doms));
            }
        }
        EventMap::Table(key, table) => {
            let known = known_value(*key, ctx, class);
            for (v, child) in table.iter().enumerate() {
                let Some(child) = child else { continue };
                let v = v as i32;
                match known {
                    Some(k) if k != v => continue,
                    Some(_) => walk(child, ctx, class, doms.clone(), out),
                    None => {
                        let mut d = doms.clone();
                        if let Some(dom) = position(&mut d, *key) {
                            if ctx.restrict && !dom.contains(&v) {
                                continue;
                            }
                            *dom = vec![v];
                        }
                        walk(child, ctx, class, d, out);
                    }
                }
            }
        }
        EventMap::Split(key, yes, y, n) => match known_value(*key, ctx, class) {
            Some(v) => {
                let next = if yes.binary_search(&v).is_ok() { y } else { n };
                walk(next, ctx, class, doms, out);
            }
            None => {
                for (branch, inside) in [(y, true), (n, false)] {
                    let mut d = doms.clone();
                    if let Some(dom) = position(&mut d, *key) {
                        dom.retain(|v| yes.binary_search(v).is_ok() == inside);
                        if ctx.restrict && dom.is_empty() {
                            continue;
                        }
                    }
                    walk(branch, ctx, class, d, out);
                }
            }
        },
    }
    if !ctx.restrict {
        out.sort_by_key(|(a, _)| *a);
        out.dedup_by_key(|(a, _)| *a);
    }
}

fn known_value(key: i32, ctx: &Context, class: i32) -> Option<i32> {
    if key == -1 {
        Some(class)
    } else if key == ctx.central {
        Some(ctx.phone)
    } else {
        None
    }
}

fn position(d: &mut Domains, key: i32) -> Option<&mut Vec<i32>> {
    usize::try_from(key).ok().and_then(|k| d.0.get_mut(k))
}

fn read_map(r: &mut TokenReader<'_>, depth: usize) -> Result<Option<EventMap>> {
    let at = r.next_token_pos();
    if depth > MAX_DEPTH {
        return Err(r.err_at(at, format!("an event map nested at most {MAX_DEPTH} deep")));
    }
    let tok = r.token()?;
    Ok(match tok.as_str() {
        "NULL" => None,
        "CE" => Some(EventMap::Constant(r.i32()?)),
        "TE" => {
            let key = r.i32()?;
            let at_n = r.next_token_pos();
            let n = r.i32()?;
            if !(0..=MAX_TABLE).contains(&n) || n as usize > r.rest().len() {
                return Err(r.err_at(at_n, format!("a table size that fits the file (got {n})")));
            }
            r.expect_token("(")?;
            let mut table = Vec::with_capacity(n as usize);
            for _ in 0..n {
                table.push(read_map(r, depth + 1)?);
            }
            r.expect_token(")")?;
            Some(EventMap::Table(key, table))
        }
        "SE" => {
            let key = r.i32()?;
            let at_set = r.next_token_pos();
            let yes = r.int_vec()?;
            if yes.windows(2).any(|w| w[0] >= w[1]) {
                return Err(r.err_at(at_set, "a sorted set of values"));
            }
            r.expect_token("{")?;
            let at_y = r.next_token_pos();
            let y =
                read_map(r, depth + 1)?.ok_or_else(|| r.err_at(at_y, "an event map (not NULL)"))?;
            let at_n = r.next_token_pos();
            let n =
                read_map(r, depth + 1)?.ok_or_else(|| r.err_at(at_n, "an event map (not NULL)"))?;
            r.expect_token("}")?;
            Some(EventMap::Split(key, yes, Box::new(y), Box::new(n)))
        }
        _ => return Err(r.err_at(at, "an event map: CE, TE, SE or NULL")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monophone_tree_gives_one_pdf_per_state() {
        let tree = b"ContextDependency 1 0 ToPdf TE 0 3 ( NULL TE -1 2 ( CE 0 CE 1 ) \
                     TE -1 2 ( CE 2 CE 3 ) ) EndContextDependency ";
        let mut r = TokenReader::new(tree, false, "tree");
        let cd = ContextDependency::read(&mut r).unwrap();
        let topo = b"<Topology> <TopologyEntry> <ForPhones> 1 2 </ForPhones> \
                     <State> 0 <ForwardPdfClass> 0 <SelfLoopPdfClass> 1 <Transition> 0 0.5 \
                     <Transition> 1 0.5 </State> <State> 1 </State> </TopologyEntry> </Topology> ";
        let mut r = TokenReader::new(topo, false, "topo");
        let topo = Topology::read(&mut r).unwrap();
        let tm = cd.transition_model(topo).unwrap();
        assert_eq!(tm.tuples.len(), 2);
        assert_eq!(
            (tm.tuples[1].forward_pdf, tm.tuples[1].self_loop_pdf),
            (2, 3)
        );
    }

    #[test]
    fn damaged_trees_are_errors() {
        for bad in [
            &b"ContextDependency 1 0 ToPdf TE 0 99999999 ( ) EndContextDependency"[..],
            b"ContextDependency 1 0 ToPdf XX EndContextDependency",
            b"ContextDependency 1 5 ToPdf NULL EndContextDependency",
            b"ContextDependency 1 0 ToPdf SE 0 [ 3 1 ] { CE 0 CE 1 } EndContextDependency",
        ] {
            let mut r = TokenReader::new(bad, false, "tree");
            assert!(ContextDependency::read(&mut r).is_err());
        }
    }
}
