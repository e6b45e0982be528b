//! The iteration order of libstdc++'s `std::unordered_map`, which decides the order in which
//! Kaldi's `nnet3-merge-egs` flushes its per-structure queues at the end of the input and the
//! order of some log fields. The container is a singly linked list grouped by bucket: a key
//! whose bucket is empty goes to the front of the list, otherwise to the front of its bucket's
//! group; a rehash walks the list and re-inserts every node by the same rule. Bucket counts
//! follow the prime rehash policy (13 buckets on the first insert, then at least doubling).

/// The bucket counts libstdc++ picks from (the start of its prime table, enough for merging).
const PRIMES: &[u64] = &[
    2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97,
    103, 109, 113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257, 277, 293, 313,
    337, 359, 383, 409, 439, 467, 503, 541, 577, 619, 661, 709, 761, 823, 887, 953, 1031, 1109,
    1193, 1289, 1381, 1493, 1613, 1741, 1879, 2029, 2179, 2357, 2549, 2753, 2971, 3209, 3469, 3739,
    4027, 4349, 4703, 5087, 5503, 5953, 6427, 6949, 7517, 8123, 8783, 9497, 10273, 11113, 12011,
    12983, 14033, 15173, 16411, 17749, 19183, 20753, 22447, 24281, 26267, 28411, 30727, 33223,
    35933, 38873, 42043, 45481, 49201, 53201, 57557, 62233, 67307, 72817, 78779, 85229, 92203,
    99733, 107897, 116731, 126271, 136607, 147793, 159871, 172933, 187091, 202409, 218971, 236897,
    256279, 277261, 299951, 324503, 351061, 379787, 410857, 444487, 480881, 520241, 562841, 608903,
    658753, 712697, 771049, 834181, 902483, 976369,
];

/// Keys (by hash) in the order a libstdc++ unordered map would iterate over them.
#[derive(Debug, Clone)]
pub struct StlOrder<K> {
    buckets: u64,
    next_resize: u64,
    /// (key, hash) in list order.
    list: Vec<(K, u64)>,
}

impl<K: PartialEq + Clone> Default for StlOrder<K> {
    fn default() -> Self {
        StlOrder {
            buckets: 1,
            next_resize: 0,
            list: Vec::new(),
        }
    }
}

impl<K: PartialEq + Clone> StlOrder<K> {
    fn next_bucket_count(&mut self, n: u64) -> u64 {
        const FAST: [u64; 14] = [2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13];
        let b = if n < FAST.len() as u64 {
            if n == 0 {
                return 1;
            }
            FAST[n as usize]
        } else {
            // Beyond the table (never reached by merging) fall back to the requested size.
            PRIMES.iter().copied().find(|&p| p >= n).unwrap_or(n)
        };
        self.next_resize = b;
        b
    }

    fn place(list: &mut Vec<(K, u64)>, buckets: u64, item: (K, u64)) {
        let b = item.1 % buckets;
        match list.iter().position(|e| e.1 % buckets == b) {
            Some(i) => list.insert(i, item),
            None => list.insert(0, item),
        }
    }

    /// Inserts a key that is not present.
    pub fn insert(&mut self, key: K, hash: u64) {
        let n = self.list.len() as u64;
        if n + 1 > self.next_resize {
            let min = (n + 1).max(if self.next_resize == 0 { 11 } else { 0 });
            if min >= self.buckets {
                let want = (min + 1).max(self.buckets * 2);
                let nb = self.next_bucket_count(want);
                let old = std::mem::take(&mut self.list);
                for item in old {
                    Self::place(&mut self.list, nb, item);
                }
                self.buckets = nb;
            } else {
                self.next_resize = self.buckets;
            }
        }
        Self::place(&mut self.list, self.buckets, (key, hash));
    }

    /// Removes a key.
    pub fn remove(&mut self, key: &K) {
        if let Some(i) = self.list.iter().position(|e| &e.0 == key) {
            self.list.remove(i);
        }
    }

    /// Whether the key is present.
    pub fn contains(&self, key: &K) -> bool {
        self.list.iter().any(|e| &e.0 == key)
    }

    /// The keys in iteration order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.list.iter().map(|e| &e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_buckets_iterate_newest_first() {
        let mut o = StlOrder::default();
        for k in [4i32, 1] {
            o.insert(k, k as u64);
        }
        assert_eq!(o.keys().copied().collect::<Vec<_>>(), [1, 4]);
        o.insert(17, 17); // same bucket as 4 (mod 13): goes before it
        assert_eq!(o.keys().copied().collect::<Vec<_>>(), [1, 17, 4]);
    }
}
