//! The random numbers Kaldi's example tools draw: glibc's `rand()` in its default state
//! (seed 1, the additive-feedback generator) and Kaldi's `RandInt` on top of it. Kaldi's
//! binaries never seed it, so the same stream reproduces their random choices (chunk order,
//! gap placement, which iVector row an example gets) and lets our egs match theirs byte for byte.

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
        min + self.rand() % (max - min + 1)
    }

    /// libstdc++'s `std::random_shuffle` driven by `rand()`.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in 1..v.len() {
            let j = self.rand() as usize % (i + 1);
            v.swap(i, j);
        }
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
}
