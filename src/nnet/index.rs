//! Index (n, t, x) and Cindex (node, Index): the unit of the computation graph.
//!
//! n is the sequence within a minibatch, t the frame, x a spare dimension (convolution,
//! DistributeComponent). Indexes sort by t, then x, then n, as Kaldi's do.

/// The value of t that means "no time" (Kaldi's kNoTime).
pub const NO_TIME: i32 = i32::MIN;

/// One row's identity: sequence n, time t, extra index x.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Index {
    pub n: i32,
    pub t: i32,
    pub x: i32,
}

impl Index {
    pub const fn new(n: i32, t: i32, x: i32) -> Self {
        Index { n, t, x }
    }
}

impl PartialOrd for Index {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Index {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.t, self.x, self.n).cmp(&(o.t, o.x, o.n))
    }
}

impl std::ops::Add for Index {
    type Output = Index;
    fn add(self, o: Index) -> Index {
        Index::new(self.n + o.n, self.t + o.t, self.x + o.x)
    }
}

impl std::fmt::Display for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.x == 0 {
            write!(f, "({}, {})", self.n, self.t)
        } else {
            write!(f, "({}, {}, {})", self.n, self.t, self.x)
        }
    }
}

/// A node index plus an Index: one row of one node's output.
pub type Cindex = (usize, Index);
