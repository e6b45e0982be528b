//! The natural-gradient preconditioners of a delta network as a checkpoint part of their own,
//! so that `fit --resume` with Kaldi's stepper continues with the same Fisher estimates and
//! gives the same model as an uninterrupted run.
//!
//! Layout (little-endian): `MAGIC`, u64 version, u64 component count; per updatable
//! component its name (zero-ended), u64 slot count, and per slot a presence byte and, if
//! present: u64 rank, u64 update period, f32 num-samples-history, f32 alpha, u64 calls, a byte
//! and an f32 for num-minibatches-history, a byte for the estimate and, if there is one, u64
//! rows, u64 cols, R (rows·cols f32), d (rows f64), ρ (f64).

use crate::error::{Error, Result};
use crate::gradient::natural_gradient::{EstimateSnapshot, NgSnapshot};
use crate::io::le_bytes::ByteReader;
use crate::nnet::Nnet;

const MAGIC: &[u8] = b"COMPNET-NG-STATE\n";
const VERSION: u64 = 1;

/// The updatable components' names and slots, in network order.
fn slots_of(nnet: &mut Nnet) -> Vec<(String, Vec<&mut dyn crate::gradient::NgSlot>)> {
    nnet.components
        .iter_mut()
        .zip(&nnet.component_names)
        .filter_map(|(c, name)| {
            c.as_updatable_mut()
                .map(|u| (name.clone(), u.natural_gradient_slots()))
        })
        .collect()
}

/// Encodes every preconditioner of `delta` (the network the backward pass updates).
pub fn encode(delta: &mut Nnet) -> Result<Vec<u8>> {
    let mut out = MAGIC.to_vec();
    let u64s = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
    u64s(&mut out, VERSION);
    let components = slots_of(delta);
    u64s(&mut out, components.len() as u64);
    for (name, slots) in components {
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        u64s(&mut out, slots.len() as u64);
        for slot in slots {
            let s = slot
                .save()
                .map_err(|e| Error::Compute(format!("component {name}: {e}")))?;
            let Some(s) = s else {
                out.push(0);
                continue;
            };
            if !snapshot_is_finite(&s) {
                return Err(Error::Compute(format!(
                    "the training diverged: the natural-gradient estimate of component {name} \
                     is not finite"
                )));
            }
            out.push(1);
            u64s(&mut out, s.rank as u64);
            u64s(&mut out, s.update_period as u64);
            out.extend_from_slice(&s.num_samples_history.to_le_bytes());
            out.extend_from_slice(&s.alpha.to_le_bytes());
            u64s(&mut out, s.calls as u64);
            out.push(u8::from(s.num_minibatches_history.is_some()));
            out.extend_from_slice(&s.num_minibatches_history.unwrap_or(0.0).to_le_bytes());
            match s.estimate {
                None => out.push(0),
                Some(e) => {
                    out.push(1);
                    u64s(&mut out, e.rows as u64);
                    u64s(&mut out, e.cols as u64);
                    for v in e.r {
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                    for v in e.d {
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                    out.extend_from_slice(&e.rho.to_le_bytes());
                }
            }
        }
    }
    Ok(out)
}

/// Every number of a snapshot finite (what a checkpoint may hold).
fn snapshot_is_finite(s: &NgSnapshot) -> bool {
    s.num_samples_history.is_finite()
        && s.alpha.is_finite()
        && s.num_minibatches_history.is_none_or(f32::is_finite)
        && s.estimate.as_ref().is_none_or(|e| {
            e.rho.is_finite()
                && e.r.iter().all(|x| x.is_finite())
                && e.d.iter().all(|x| x.is_finite())
        })
}

fn byte(r: &mut ByteReader<'_>) -> Result<u8> {
    Ok(r.bytes(1)?[0])
}

fn f32_(r: &mut ByteReader<'_>) -> Result<f32> {
    Ok(r.f32s(1)?[0])
}

fn f64_(r: &mut ByteReader<'_>) -> Result<f64> {
    Ok(f64::from_bits(r.u64()?))
}

/// A count read from the file that must fit in what is left of it (`item` bytes each), checked
/// before anything of that size is allocated.
fn count(r: &mut ByteReader<'_>, item: u64, what: &str) -> Result<usize> {
    let n = r.u64()?;
    let left = r.remaining() as u64;
    if n.checked_mul(item).is_none_or(|b| b > left) {
        return Err(r.err(&format!("{what} of {n}, more than the file holds")));
    }
    Ok(n as usize)
}

fn snapshot(r: &mut ByteReader<'_>) -> Result<NgSnapshot> {
    let rank = r.u64()? as usize;
    let update_period = r.u64()? as usize;
    let num_samples_history = f32_(r)?;
    let alpha = f32_(r)?;
    let calls = r.u64()? as usize;
    let has_nmh = byte(r)?;
    let nmh = f32_(r)?;
    let estimate = match byte(r)? {
        0 => None,
        1 => {
            let rows = count(r, 12, "an estimate of rank")?;
            let cols = r.u64()?;
            let elements = (rows as u64)
                .checked_mul(cols)
                .filter(|&e| e.saturating_mul(4) <= r.remaining() as u64)
                .ok_or_else(|| {
                    r.err(&format!(
                        "an estimate of {rows}x{cols}, more than the file holds"
                    ))
                })?;
            crate::limits::check_elements(elements, 4, "a natural-gradient estimate")
                .map_err(|e| r.err(&e))?;
            let rmat = r.f32s(elements as usize)?;
            let mut d = Vec::with_capacity(rows);
            for _ in 0..rows {
                d.push(f64_(r)?);
            }
            Some(EstimateSnapshot {
                rows,
                cols: cols as usize,
                r: rmat,
                d,
                rho: f64_(r)?,
            })
        }
        b => return Err(r.err(&format!("expected an estimate flag 0 or 1, got {b}"))),
    };
    Ok(NgSnapshot {
        rank,
        update_period,
        num_samples_history,
        alpha,
        calls,
        num_minibatches_history: match has_nmh {
            0 => None,
            1 => Some(nmh),
            b => return Err(r.err(&format!("expected a flag 0 or 1, got {b}"))),
        },
        estimate,
    })
}

/// Restores what [`encode`] wrote into `delta`; a checkpoint of another network (other
/// component names or slot counts) is refused, naming `file`.
pub fn restore(delta: &mut Nnet, bytes: &[u8], file: &str) -> Result<()> {
    let mut r = ByteReader::new(bytes, file);
    if !bytes.starts_with(MAGIC) {
        return Err(r.err("expected the natural-gradient state (COMPNET-NG-STATE)"));
    }
    r.pos = MAGIC.len();
    let version = r.u64()?;
    if version != VERSION {
        return Err(r.err(&format!(
            "natural-gradient state version {version}; this compnet reads version {VERSION}"
        )));
    }
    let mut components = slots_of(delta);
    let n = count(&mut r, 9, "a component count")?;
    if n != components.len() {
        return Err(Error::Usage(format!(
            "{file}: the natural-gradient state has {n} updatable components, this network \
             has {} (a checkpoint of another network)",
            components.len()
        )));
    }
    for (name, slots) in &mut components {
        let at = r.pos;
        let saved = r.cstr()?;
        if saved != *name {
            return Err(Error::Usage(format!(
                "{file}: byte {at}: the natural-gradient state of component {saved} where this \
                 network has {name} (a checkpoint of another network)"
            )));
        }
        let k = count(&mut r, 1, "a slot count")?;
        if k != slots.len() {
            return Err(Error::Usage(format!(
                "{file}: byte {at}: component {name} has {k} natural-gradient slots in the \
                 checkpoint, {} here (a checkpoint of another network)",
                slots.len()
            )));
        }
        for slot in slots.iter_mut() {
            let s = match byte(&mut r)? {
                0 => None,
                1 => {
                    let s = snapshot(&mut r)?;
                    if !snapshot_is_finite(&s) {
                        return Err(r.err(&format!(
                            "the natural-gradient state of component {name} is not finite (a \
                             damaged checkpoint)"
                        )));
                    }
                    Some(s)
                }
                b => return Err(r.err(&format!("expected a slot flag 0 or 1, got {b}"))),
            };
            if !slot.restore(s) {
                return Err(r.err(&format!(
                    "the natural-gradient state of component {name} does not hold together"
                )));
            }
        }
    }
    if r.pos != bytes.len() {
        return Err(r.err("the end of the natural-gradient state"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gradient::natural_gradient::OnlineNaturalGradient;
    use crate::gradient::NgSlot;
    use crate::matrix::Matrix;
    use crate::nnet::component::param_init::gaussian_matrix;

    const NET: &str = "input-node name=input dim=6
component name=a type=NaturalGradientAffineComponent input-dim=6 output-dim=5
component name=b type=NaturalGradientPerElementScaleComponent dim=5
component-node name=a component=a input=input
component-node name=b component=b input=a
output-node name=output input=b objective=quadratic
";

    fn net(text: &str) -> Nnet {
        Nnet::from_config_text(text, "t.config", &mut crate::random::seeded_rng(0)).unwrap()
    }

    /// A preconditioner that has seen a few minibatches.
    fn trained() -> OnlineNaturalGradient {
        let mut p = OnlineNaturalGradient::new(3, 2, 100.0, 4.0);
        let mut rng = crate::random::seeded_rng(3);
        for _ in 0..5 {
            let mut x = gaussian_matrix(8, 5, 0.0, 1.0, &mut rng);
            p.precondition_directions(x.view_mut());
        }
        p
    }

    /// The preconditioner restored from its snapshot gives the same bits on the next
    /// minibatches as the original (so a resumed run continues exactly).
    #[test]
    fn a_restored_preconditioner_continues_bit_for_bit() {
        let mut a = trained();
        let mut slot: Option<OnlineNaturalGradient> = None;
        assert!(slot.restore(Some(a.snapshot())));
        let mut b = slot.unwrap();
        let mut rng = crate::random::seeded_rng(9);
        for _ in 0..6 {
            let mut x = gaussian_matrix(8, 5, 0.0, 1.0, &mut rng);
            let mut y = x.clone();
            let ga = a.precondition_directions(x.view_mut());
            let gb = b.precondition_directions(y.view_mut());
            assert_eq!(ga.to_bits(), gb.to_bits());
            assert_eq!(x.to_vec(), y.to_vec());
        }
        // A fresh preconditioner (what resuming did before) gives other numbers.
        let mut fresh = OnlineNaturalGradient::new(3, 2, 100.0, 4.0);
        let mut x = Matrix::from_vec(8, 5, (0..40).map(|i| (i % 7) as f32).collect());
        let mut y = x.clone();
        fresh.precondition_directions(x.view_mut());
        a.precondition_directions(y.view_mut());
        assert_ne!(x.to_vec(), y.to_vec());
    }

    #[test]
    fn the_part_round_trips_and_another_network_or_damage_is_refused() {
        let mut delta = net(NET);
        // Give component a a trained input-side preconditioner; the rest stay empty.
        {
            let u = delta.components[0].as_updatable_mut().unwrap();
            let mut slots = u.natural_gradient_slots();
            assert_eq!(slots.len(), 2);
            assert!(slots[0].restore(Some(trained().snapshot())));
        }
        let bytes = encode(&mut delta).unwrap();
        let mut back = net(NET);
        restore(&mut back, &bytes, "c.ckpt").unwrap();
        assert_eq!(encode(&mut back).unwrap(), bytes);
        let saved = back.components[0]
            .as_updatable_mut()
            .unwrap()
            .natural_gradient_slots()[0]
            .save()
            .unwrap()
            .unwrap();
        assert_eq!(saved, trained().snapshot());
        // Another network: a renamed component, or one more slot-holding component.
        let mut other = net(&NET
            .replace("name=b ", "name=c ")
            .replace("component=b", "component=c")
            .replace("input=b", "input=c"));
        let e = restore(&mut other, &bytes, "c.ckpt")
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.ckpt") && e.contains("another network"), "{e}");
        let mut other = net("input-node name=input dim=6
component name=a type=NaturalGradientAffineComponent input-dim=6 output-dim=5
component-node name=a component=a input=input
output-node name=output input=a objective=quadratic
");
        let e = restore(&mut other, &bytes, "c.ckpt")
            .unwrap_err()
            .to_string();
        assert!(e.contains("another network"), "{e}");
        // Every truncation is an error naming the file and a byte offset, never a panic.
        for cut in 0..bytes.len() {
            let e = restore(&mut net(NET), &bytes[..cut], "c.ckpt")
                .unwrap_err()
                .to_string();
            assert!(e.contains("c.ckpt: byte"), "{cut}: {e}");
        }
        // A huge estimate size is refused before allocating.
        let mut big = bytes.clone();
        let rows_at = MAGIC.len() + 8 + 8 + 2 + 8 + 1 + 8 + 8 + 4 + 4 + 8 + 1 + 4 + 1;
        big[rows_at..rows_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = restore(&mut net(NET), &big, "c.ckpt")
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than the file holds"), "{e}");
    }
}
