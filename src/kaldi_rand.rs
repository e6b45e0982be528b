//! The random numbers Kaldi's binaries draw: glibc's `rand()` (the additive-feedback
//! generator) and Kaldi's `RandInt`/`RandUniform` on top of it. The example tools never seed
//! it (seed 1), so the same stream reproduces their random choices (chunk order, gap
//! placement, which iVector row an example gets) and lets our egs match theirs byte for byte;
//! `nnet3-train` seeds it with `--srand`, and the step core keeps that stream so that
//! training samples statistics as Kaldi does. It sits below every room because components
//! draw from it too.

/// glibc's `rand()` from `srand(1)`.
#[derive(Debug, Clone)]
pub struct GlibcRand {
    state: [u32; 34],
    pos: usize,
}

impl Default for GlibcRand {
    fn default() -> Self {
        Self::new(1)
    }
}

impl GlibcRand {
    /// The generator after `srand(seed)`.
    pub fn new(seed: u32) -> Self {
        let mut r = [0u32; 34];
        r[0] = if seed == 0 { 1 } else { seed };
        for i in 1..31 {
            // Park–Miller step, computed as glibc does (Schrage's method, signed).
            let prev = r[i - 1] as i32 as i64;
            let (hi, lo) = (prev / 127_773, prev % 127_773);
            let mut word = 16_807 * lo - 2_836 * hi;
            if word < 0 {
                word += 2_147_483_647;
            }
            r[i] = word as u32;
        }
        for i in 31..34 {
            r[i] = r[i - 31];
        }
        let mut g = GlibcRand { state: r, pos: 0 };
        // glibc discards the first 310 outputs of the feedback sequence.
        for _ in 0..310 {
            g.step();
        }
        g
    }

    /// The generator's whole state (34 words and the position), for a checkpoint.
    pub fn state_words(&self) -> Vec<u32> {
        let mut v = self.state.to_vec();
        v.push(self.pos as u32);
        v
    }

    /// The generator [`Self::state_words`] described; `None` for words that are not one.
    pub fn from_state_words(words: &[u32]) -> Option<Self> {
        let (&pos, state) = words.split_last()?;
        if state.len() != 34 || pos >= 34 {
            return None;
        }
        let mut s = [0u32; 34];
        s.copy_from_slice(state);
        Some(GlibcRand {
            state: s,
            pos: pos as usize,
        })
    }

    fn step(&mut self) -> u32 {
        // A ring over the last 34 values: x[k] = x[k-31] + x[k-3].
        let k = self.pos;
        let v = self.state[(k + 34 - 31) % 34].wrapping_add(self.state[(k + 34 - 3) % 34]);
        self.state[k] = v;
        self.pos = (k + 1) % 34;
        v
    }

    /// The next `rand()` value, in 0..=2^31-1.
    pub fn rand(&mut self) -> i32 {
        (self.step() >> 1) as i32
    }

    /// Kaldi's `RandInt(min, max)`: `min` without drawing when the range has one value.
    pub fn rand_int(&mut self, min: i32, max: i32) -> i32 {
        if max <= min {
            return min;
        }
        // Kaldi computes this in int32; a range wider than that wraps there, here it is
        // computed exactly (never reached with real data).
        let span = max as i64 - min as i64 + 1;
        (min as i64 + self.rand() as i64 % span) as i32
    }

    /// Kaldi's `WithProb`: true with probability `p` (values below about 128 / RAND_MAX are
    /// handled in two steps, as Kaldi does).
    pub fn with_prob(&mut self, p: f32) -> bool {
        const RAND_MAX: i32 = i32::MAX;
        if p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        if p * (RAND_MAX as f32) < 128.0 {
            if self.rand() < RAND_MAX / 128 {
                return self.with_prob(p * 128.0);
            }
            return false;
        }
        (self.rand() as f32) < (RAND_MAX as f32 + 1.0) * p
    }

    /// libstdc++'s `std::random_shuffle` driven by `rand()`.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in 1..v.len() {
            let j = self.rand() as usize % (i + 1);
            v.swap(i, j);
        }
    }
}

/// The Mersenne Twister `std::mt19937`, which `nnet3-shuffle-egs` seeds with `--srand`.
#[derive(Debug, Clone)]
pub struct Mt19937 {
    state: Box<[u32; 624]>,
    pos: usize,
}

impl Mt19937 {
    /// The engine constructed from `seed`.
    pub fn new(seed: u32) -> Self {
        let mut st = Box::new([0u32; 624]);
        st[0] = seed;
        for i in 1..624 {
            let prev = st[i - 1];
            st[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 {
            state: st,
            pos: 624,
        }
    }

    /// The next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.pos >= 624 {
            let st = &mut self.state;
            for i in 0..624 {
                let y = (st[i] & 0x8000_0000) | (st[(i + 1) % 624] & 0x7fff_ffff);
                let mag = if y & 1 == 1 { 0x9908_b0df } else { 0 };
                st[i] = st[(i + 397) % 624] ^ (y >> 1) ^ mag;
            }
            self.pos = 0;
        }
        let mut y = self.state[self.pos];
        self.pos += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// libstdc++'s `uniform_int_distribution` over `0..range` (range >= 1) for a 32-bit
    /// engine: Lemire's multiply-and-reject method.
    fn below(&mut self, range: u64) -> u64 {
        debug_assert!((1..=1 << 32).contains(&range));
        let mut product = self.next_u32() as u64 * range;
        let mut low = product & 0xffff_ffff;
        if low < range {
            let threshold = ((1u64 << 32) - range) % range;
            while low < threshold {
                product = self.next_u32() as u64 * range;
                low = product & 0xffff_ffff;
            }
        }
        product >> 32
    }

    /// libstdc++'s `std::shuffle` with this engine: when two positions fit one draw, it swaps
    /// the elements in pairs from one draw each (after a single first swap when the length is
    /// even); otherwise one draw per element.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        let n = v.len() as u64;
        if n < 2 {
            return;
        }
        if 0xffff_ffff / n >= n {
            let mut i = 1usize;
            if n.is_multiple_of(2) {
                let j = self.below(2) as usize;
                v.swap(i, j);
                i += 1;
            }
            while i < v.len() {
                let range = i as u64 + 1;
                let x = self.below(range * (range + 1));
                v.swap(i, (x / (range + 1)) as usize);
                v.swap(i + 1, (x % (range + 1)) as usize);
                i += 2;
            }
        } else {
            for i in 1..v.len() {
                let j = self.below(i as u64 + 1) as usize;
                v.swap(i, j);
            }
        }
    }
}

/// `rand()` as a generator the components draw from (`next_u32` is one `rand()` value), so
/// that a trainer can hand Kaldi's process-wide stream to the computer: the components that
/// draw with [`kaldi_rand_int`] and [`kaldi_rand_uniform`] then take the values Kaldi's
/// `nnet3-train` takes, in its order.
impl rand::RngCore for GlibcRand {
    fn next_u32(&mut self) -> u32 {
        self.rand() as u32
    }
    fn next_u64(&mut self) -> u64 {
        let hi = self.rand() as u64;
        (hi << 32) | self.rand() as u64
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(4) {
            let v = self.rand().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Kaldi's `RandInt(min, max)` on any generator: one 31-bit draw (`rand()` on a
/// [`GlibcRand`]) reduced modulo the range, no draw when the range has one value.
pub fn kaldi_rand_int(rng: &mut dyn rand::RngCore, min: i32, max: i32) -> i32 {
    if max <= min {
        return min;
    }
    let r = (rng.next_u32() & 0x7fff_ffff) as i64;
    (min as i64 + r % (max as i64 - min as i64 + 1)) as i32
}

/// Kaldi's `WithProb(p)` on any generator (one 31-bit draw, two below about 128 / RAND_MAX).
pub fn kaldi_with_prob(rng: &mut dyn rand::RngCore, p: f32) -> bool {
    const RAND_MAX: i32 = i32::MAX;
    if p == 0.0 {
        return false;
    }
    if p == 1.0 {
        return true;
    }
    if p * (RAND_MAX as f32) < 128.0 {
        if ((rng.next_u32() & 0x7fff_ffff) as i32) < RAND_MAX / 128 {
            return kaldi_with_prob(rng, p * 128.0);
        }
        return false;
    }
    (((rng.next_u32() & 0x7fff_ffff) as i32) as f32) < (RAND_MAX as f32 + 1.0) * p
}

/// Kaldi's `RandUniform()`: `(rand() + 1) / (RAND_MAX + 2)`, in (0, 1).
pub fn kaldi_rand_uniform(rng: &mut dyn rand::RngCore) -> f32 {
    let r = (rng.next_u32() & 0x7fff_ffff) as f64;
    ((r + 1.0) / (i32::MAX as f64 + 2.0)) as f32
}

/// Kaldi's `RandomState`: a private seed for glibc's reentrant `rand_r`, taken from the
/// process stream as `rand() + 27437`. Kaldi's CPU matrix fills (`SetRandn`,
/// `SetRandUniform`, through `CuRand` too) make one per call, so each fill takes one value of
/// the stream and draws the rest from its own state.
#[derive(Debug, Clone)]
pub struct RandomState {
    seed: u32,
}

impl RandomState {
    /// A state seeded from the next value of `stream` (one `rand()` on a [`GlibcRand`]).
    pub fn from_stream(stream: &mut dyn rand::RngCore) -> Self {
        let r = stream.next_u32() & 0x7fff_ffff;
        RandomState {
            seed: r.wrapping_add(27_437),
        }
    }

    /// A state with this seed.
    pub fn with_seed(seed: u32) -> Self {
        RandomState { seed }
    }

    /// glibc's `rand_r`: three steps of the ANSI C congruential generator
    /// (×1103515245 + 12345), whose bits 16.. give 11, 10 and 10 bits of a 31-bit result.
    pub fn rand(&mut self) -> i32 {
        let mut next = self.seed;
        let mut step = |bits: u32| {
            next = next.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (next >> 16) % (1 << bits)
        };
        let mut result = step(11);
        result = (result << 10) ^ step(10);
        result = (result << 10) ^ step(10);
        self.seed = next;
        result as i32
    }

    /// Kaldi's `RandUniform(&state)`, in (0, 1).
    pub fn uniform(&mut self) -> f32 {
        ((self.rand() as f64 + 1.0) / (i32::MAX as f64 + 2.0)) as f32
    }

    /// Kaldi's `RandGauss2` in float: Box–Muller on two uniforms, radius and angle in
    /// float, the angle's product `2π·u` in double.
    pub fn gauss2(&mut self) -> (f32, f32) {
        let u1 = self.uniform();
        let u2 = self.uniform();
        let radius = (-2.0f32 * u1.ln()).sqrt();
        let angle = (2.0 * std::f64::consts::PI * u2 as f64) as f32;
        (radius * angle.cos(), radius * angle.sin())
    }

    /// Kaldi's `RandGauss(&state)`: one Box–Muller value (the radius's uniform first).
    pub fn gauss(&mut self) -> f32 {
        let u1 = self.uniform();
        let radius = (-2.0f32 * u1.ln()).sqrt();
        let u2 = self.uniform();
        radius * ((2.0 * std::f64::consts::PI * u2 as f64) as f32).cos()
    }

    /// Fills `row` as Kaldi's `SetRandn` fills one row: pairs from [`Self::gauss2`], and a
    /// last odd element from [`Self::gauss`].
    pub fn fill_gauss(&mut self, row: &mut [f32]) {
        let mut pairs = row.chunks_exact_mut(2);
        for pair in &mut pairs {
            let (a, b) = self.gauss2();
            pair[0] = a;
            pair[1] = b;
        }
        if let [last] = pairs.into_remainder() {
            *last = self.gauss();
        }
    }
}

/// Kaldi's `SetRandn` of a `rows` × `cols` matrix (or a vector: one row) on the CPU, row-major:
/// one [`RandomState`] from `stream`, each row filled by [`RandomState::fill_gauss`].
pub fn kaldi_randn(rows: usize, cols: usize, stream: &mut dyn rand::RngCore) -> Vec<f32> {
    let mut state = RandomState::from_stream(stream);
    let mut data = vec![0.0f32; rows * cols];
    if cols > 0 {
        for row in data.chunks_exact_mut(cols) {
            state.fill_gauss(row);
        }
    }
    data
}

/// `n` uniform draws as Kaldi's CPU `SetRandUniform` makes them (one [`RandomState`] from
/// `stream`).
pub fn kaldi_uniform(n: usize, stream: &mut dyn rand::RngCore) -> Vec<f32> {
    let mut v = vec![0.0; n];
    kaldi_rand_uniform_fill(&mut v, stream);
    v
}

/// Kaldi's `SetRandUniform` on the CPU: one [`RandomState`] from `stream`, then one
/// `RandUniform` per element in row-major order.
pub fn kaldi_rand_uniform_fill(data: &mut [f32], stream: &mut dyn rand::RngCore) {
    let mut state = RandomState::from_stream(stream);
    for v in data {
        *v = state.uniform();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_values_are_glibcs() {
        let mut g = GlibcRand::default();
        let v: Vec<i32> = (0..3).map(|_| g.rand()).collect();
        assert_eq!(v, [1_804_289_383, 846_930_886, 1_681_692_777]);
    }

    #[test]
    fn random_state_is_glibcs_rand_r_and_kaldis_box_muller() {
        // glibc's rand_r from seed 27438 (= rand() 1 + 27437), and a C program's Box–Muller
        // in float from seed 12345 (values printed with %a).
        let mut s = RandomState::with_seed(27_438);
        let v: Vec<i32> = (0..3).map(|_| s.rand()).collect();
        assert_eq!(v, [1_184_790_395, 717_708_411, 1_063_058_067]);
        let mut t = RandomState::with_seed(12_345);
        let (a, b) = t.gauss2();
        assert_eq!((a.to_bits(), b.to_bits()), (0xbea0_2ac6, 0xbf95_3071));
        // One fill takes one value of the stream.
        let mut stream = GlibcRand::new(1);
        let m = kaldi_randn(2, 3, &mut stream);
        assert_eq!(m.len(), 6);
        let mut fresh = GlibcRand::new(1);
        fresh.rand();
        assert_eq!(stream.rand(), fresh.rand());
    }

    #[test]
    fn mt19937_is_the_standard_one() {
        // The C++ standard's check: the 10000th output of a default-seeded mt19937.
        let mut g = Mt19937::new(5489);
        let v = (0..10_000).map(|_| g.next_u32()).last();
        assert_eq!(v, Some(4_123_659_995));
    }

    #[test]
    fn kaldi_helpers_and_saved_state_follow_the_stream() {
        let mut a = GlibcRand::new(5);
        let mut b = a.clone();
        for _ in 0..50 {
            assert_eq!(kaldi_rand_int(&mut a, 0, 3), b.rand_int(0, 3));
        }
        let r = b.clone().rand();
        let u = kaldi_rand_uniform(&mut b);
        assert_eq!(u, ((r as f64 + 1.0) / (i32::MAX as f64 + 2.0)) as f32);
        let mut c = GlibcRand::from_state_words(&a.state_words()).unwrap();
        assert_eq!(c.rand(), a.rand());
        assert!(GlibcRand::from_state_words(&[0; 3]).is_none());
        let mut w = a.state_words();
        w[34] = 34;
        assert!(GlibcRand::from_state_words(&w).is_none());
    }
}
