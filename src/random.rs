//! Random numbers: seeded generators (`--srand`) and Gaussian samples.

use rand::{Rng, RngCore};

/// A standard normal sample (Box–Muller).
pub fn rand_gauss(rng: &mut dyn RngCore) -> f32 {
    loop {
        let u1: f64 = rng.random::<f64>();
        let u2: f64 = rng.random::<f64>();
        if u1 > 1e-300 {
            return ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32;
        }
    }
}

/// A seeded random generator (`--srand`).
pub fn seeded_rng(seed: u64) -> rand::rngs::StdRng {
    use rand::SeedableRng;
    rand::rngs::StdRng::seed_from_u64(seed)
}
