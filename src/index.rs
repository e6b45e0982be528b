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
    /// The same n and x at t + `dt` (wrapping, as an offset from a file may be anything).
    pub const fn with_t_offset(self, dt: i32) -> Self {
        Index::new(self.n, self.t.wrapping_add(dt), self.x)
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

/// A set of `t` values, over-approximated by an interval: what the compiler's t-range
/// analysis (`compile::t_range`) tracks per network node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TRange {
    /// No t at all.
    Empty,
    /// `lo..=hi` (in i64, so shifting by i32 offsets cannot overflow).
    Span(i64, i64),
    /// Any t.
    All,
}

impl TRange {
    /// `lo..=hi`, or Empty when `lo > hi`.
    pub fn span(lo: i64, hi: i64) -> TRange {
        if lo > hi {
            TRange::Empty
        } else {
            TRange::Span(lo, hi)
        }
    }

    /// True if `t` is in the set.
    pub fn contains(self, t: i64) -> bool {
        match self {
            TRange::Empty => false,
            TRange::Span(lo, hi) => lo <= t && t <= hi,
            TRange::All => true,
        }
    }

    /// The smallest interval holding both.
    pub fn union(self, o: TRange) -> TRange {
        match (self, o) {
            (TRange::All, _) | (_, TRange::All) => TRange::All,
            (TRange::Empty, r) | (r, TRange::Empty) => r,
            (TRange::Span(a, b), TRange::Span(c, d)) => TRange::Span(a.min(c), b.max(d)),
        }
    }

    /// The intersection.
    pub fn intersect(self, o: TRange) -> TRange {
        match (self, o) {
            (TRange::Empty, _) | (_, TRange::Empty) => TRange::Empty,
            (TRange::All, r) | (r, TRange::All) => r,
            (TRange::Span(a, b), TRange::Span(c, d)) => TRange::span(a.max(c), b.min(d)),
        }
    }

    /// `{t + lo_shift .. t + hi_shift : t in self}` as an interval: the range widened by
    /// `lo_shift` at the bottom and `hi_shift` at the top (`lo_shift <= hi_shift`).
    pub fn widen(self, lo_shift: i64, hi_shift: i64) -> TRange {
        match self {
            TRange::Span(lo, hi) => TRange::span(lo + lo_shift, hi + hi_shift),
            r => r,
        }
    }
}
