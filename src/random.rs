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

/// A seeded generator that counts the 32-bit words it has handed out: a checkpoint records
/// the count and a resumed run replays it (the generator's own state cannot be saved). A
/// 64-bit draw always takes two words of the stream, so replaying words one by one lands
/// on the same position.
pub struct CountingRng {
    rng: rand::rngs::StdRng,
    pub words: u64,
}

impl CountingRng {
    pub fn new(seed: u64) -> Self {
        CountingRng {
            rng: seeded_rng(seed),
            words: 0,
        }
    }

    /// The generator of `seed` after `words` words.
    pub fn replayed(seed: u64, words: u64) -> Self {
        let mut r = CountingRng::new(seed);
        for _ in 0..words {
            r.next_u32();
        }
        r
    }
}

impl rand::RngCore for CountingRng {
    fn next_u32(&mut self) -> u32 {
        self.words += 1;
        self.rng.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.words += 2;
        self.rng.next_u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.words += dest.len().div_ceil(4) as u64;
        self.rng.fill_bytes(dest)
    }
}
