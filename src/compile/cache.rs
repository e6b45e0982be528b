//! Compile once per minibatch shape (Kaldi's `CachingOptimizingCompiler`).
//!
//! Training and chunked decoding ask for a few request shapes over and over, and compiling
//! one costs far more than running it. [`CachingCompiler`] keeps the optimized computations
//! of the most recently used requests, keyed by the whole request.
//!
//! **Shortcut.** When every input and output holds sequences n = 0..N−1 (N > 2) laid out
//! alike, the request is compiled for 2 sequences and the result widened to N
//! ([`expand_computation`]), so a 256-sequence minibatch compiles about as fast as a
//! 2-sequence one. Widening needs to know which sequence each row belongs to: it reads the
//! matrices' debug info (the 2-sequence computation is compiled with it) and checks every
//! row mapping it rewrites. Whatever it cannot map makes it give up, and the request is
//! compiled directly, so the shortcut can cost time but never correctness.

use super::computation::{
    Command, MatrixDebugInfo, MatrixInfo, NnetComputation, PrecomputedIo, SubMatrixInfo,
};
use super::request::{ComputationRequest, IoSpecification};
use super::{compile_computation, optimize_for_request, CompilerOptions, OptimizeOptions};
use crate::error::Result;
use crate::nnet::component::{PrecomputedIndexes, Properties};
use crate::nnet::{Index, Nnet};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Options of the caching compiler (Kaldi's `CachingOptimizingCompilerOptions`, command-line
/// prefix `--compiler.`), plus the compiler and optimizer options every compilation uses.
#[derive(Clone, Debug)]
pub struct CachingCompilerOptions {
    /// `--compiler.use-shortcut`: compile N-sequence requests as 2 sequences and widen.
    pub use_shortcut: bool,
    /// `--compiler.cache-capacity`: how many computations to keep (0: none).
    pub cache_capacity: usize,
    /// Options of each compilation (debug info is added where the shortcut needs it).
    pub compiler: CompilerOptions,
    /// The optimizer passes run after each compilation.
    pub optimize: OptimizeOptions,
}

impl Default for CachingCompilerOptions {
    fn default() -> Self {
        CachingCompilerOptions {
            use_shortcut: true,
            cache_capacity: 64,
            compiler: CompilerOptions::default(),
            optimize: OptimizeOptions::default(),
        }
    }
}

/// What the cache has done so far (the trainer logs it).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CompilerStats {
    /// Requests answered from the cache (the 2-sequence requests of the shortcut included).
    pub hits: u64,
    /// Requests compiled (or widened).
    pub misses: u64,
    /// Misses answered by widening a 2-sequence computation.
    pub shortcuts: u64,
    /// Decomposable requests whose widening gave up, so they were compiled directly.
    pub shortcut_failures: u64,
    /// Total time spent in [`CachingCompiler::compile`].
    pub compile_time: Duration,
}

impl std::fmt::Display for CompilerStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "computation cache: {} hits, {} misses ({} by shortcut, {} shortcut failures), {:.3} s compiling",
            self.hits,
            self.misses,
            self.shortcuts,
            self.shortcut_failures,
            self.compile_time.as_secs_f64()
        )
    }
}

/// The whole request as a hashable key.
#[derive(Clone, PartialEq, Eq, Hash)]
struct RequestKey {
    /// (is an input, name, has_deriv, indexes), inputs first, in request order.
    ios: Vec<(bool, String, bool, Vec<Index>)>,
    need_model_derivative: bool,
    store_component_stats: bool,
    /// The misc info's debug form, so a field added to it later is part of the key too.
    misc: String,
}

impl RequestKey {
    fn new(r: &ComputationRequest) -> Self {
        let io = |is_input: bool, s: &IoSpecification| {
            (is_input, s.name.clone(), s.has_deriv, s.indexes.clone())
        };
        RequestKey {
            ios: r
                .inputs
                .iter()
                .map(|s| io(true, s))
                .chain(r.outputs.iter().map(|s| io(false, s)))
                .collect(),
            need_model_derivative: r.need_model_derivative,
            store_component_stats: r.store_component_stats,
            misc: format!("{:?}", r.misc_info),
        }
    }
}

struct Inner {
    /// Computation and the clock value of its last use.
    entries: HashMap<RequestKey, (Arc<NnetComputation>, u64)>,
    clock: u64,
    stats: CompilerStats,
    /// Of the network the entries were compiled for.
    fingerprint: Option<u64>,
}

/// Compiles requests, remembering the most recently used computations (Kaldi's
/// `CachingOptimizingCompiler`). Safe to share between threads; two threads missing on the
/// same request at once both compile it.
///
/// A cache serves one network structure. Parameter values may change between calls; if the
/// nodes, components' kinds and sizes, or which components are trainable change, the cache
/// notices (a cheap fingerprint) and starts afresh.
pub struct CachingCompiler {
    options: CachingCompilerOptions,
    inner: Mutex<Inner>,
}

impl CachingCompiler {
    pub fn new(options: CachingCompilerOptions) -> Self {
        CachingCompiler {
            options,
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                clock: 0,
                stats: CompilerStats::default(),
                fingerprint: None,
            }),
        }
    }

    pub fn options(&self) -> &CachingCompilerOptions {
        &self.options
    }

    /// The optimized computation of `request` on `nnet`, from the cache or compiled now.
    pub fn compile(
        &self,
        nnet: &Nnet,
        request: &ComputationRequest,
    ) -> Result<Arc<NnetComputation>> {
        let start = Instant::now();
        let fp = network_fingerprint(nnet);
        {
            let mut inner = self.lock();
            if inner.fingerprint != Some(fp) {
                inner.entries.clear();
                inner.fingerprint = Some(fp);
            }
        }
        let result = self.get_or_compile(nnet, request, false);
        self.lock().stats.compile_time += start.elapsed();
        result
    }

    /// The computation of `request` if the cache holds it, counting no hit or miss.
    pub fn peek(&self, request: &ComputationRequest) -> Option<Arc<NnetComputation>> {
        let key = RequestKey::new(request);
        self.lock().entries.get(&key).map(|(c, _)| c.clone())
    }

    /// Hit and miss counts and the time spent compiling.
    pub fn stats(&self) -> CompilerStats {
        self.lock().stats
    }

    /// Number of computations held.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every computation (the statistics stay).
    pub fn clear(&self) {
        self.lock().entries.clear();
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves a consistent map; keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `need_debug`: the computation will be widened, so it must carry matrix debug info.
    fn get_or_compile(
        &self,
        nnet: &Nnet,
        request: &ComputationRequest,
        need_debug: bool,
    ) -> Result<Arc<NnetComputation>> {
        let key = RequestKey::new(request);
        {
            let mut inner = self.lock();
            inner.clock += 1;
            let now = inner.clock;
            if let Some((comp, used)) = inner.entries.get_mut(&key) {
                if !need_debug || has_debug_info(comp) {
                    *used = now;
                    let comp = comp.clone();
                    inner.stats.hits += 1;
                    return Ok(comp);
                }
            }
            inner.stats.misses += 1;
        }
        let comp = Arc::new(self.compile_uncached(nnet, request, need_debug)?);
        let mut inner = self.lock();
        let capacity = self.options.cache_capacity;
        if capacity == 0 {
            return Ok(comp);
        }
        if !inner.entries.contains_key(&key) && inner.entries.len() >= capacity {
            // Evict the least recently used entry.
            let oldest = inner
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                inner.entries.remove(&k);
            }
        }
        let now = inner.clock;
        inner.entries.insert(key, (comp.clone(), now));
        Ok(comp)
    }

    fn compile_uncached(
        &self,
        nnet: &Nnet,
        request: &ComputationRequest,
        need_debug: bool,
    ) -> Result<NnetComputation> {
        if self.options.use_shortcut {
            if let Ok((mini, num_n)) = mini_request(request) {
                // A failing 2-sequence compilation falls through, so the error names the
                // user's request.
                if let Ok(small) = self.get_or_compile(nnet, &mini, true) {
                    let keep_debug = need_debug || self.options.compiler.output_debug_info;
                    match expand_computation(nnet, &small, &mini, num_n, keep_debug) {
                        Ok(c) => {
                            self.lock().stats.shortcuts += 1;
                            return Ok(c);
                        }
                        Err(_) => self.lock().stats.shortcut_failures += 1,
                    }
                }
            }
        }
        let mut opts = self.options.compiler.clone();
        // The derivative-time limits read each row's Index from the debug info.
        opts.output_debug_info |= need_debug || self.options.optimize.limits_deriv_times();
        let mut comp = compile_computation(nnet, request, &opts)?;
        optimize_for_request(nnet, request, &mut comp, &self.options.optimize)?;
        Ok(comp)
    }
}

fn has_debug_info(c: &NnetComputation) -> bool {
    c.matrix_debug_info.len() == c.matrices.len()
}

/// Cheap summary of what a compiled computation depends on besides the request: node names
/// and kinds, component kinds, sizes and trainability.
fn network_fingerprint(nnet: &Nnet) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    nnet.node_names.hash(&mut h);
    for node in &nnet.nodes {
        std::mem::discriminant(node).hash(&mut h);
    }
    for c in &nnet.components {
        c.properties().0.hash(&mut h);
        c.input_dim().hash(&mut h);
        c.output_dim().hash(&mut h);
        if let Some(u) = c.as_updatable() {
            (u.common().learning_rate * u.common().learning_rate_factor != 0.0).hash(&mut h);
        }
    }
    h.finish()
}

/// Compiles `request` with the shortcut alone, without a cache: `Ok(Some(..))` is the
/// widened computation, `Ok(None)` says the request is not decomposable or the widening gave
/// up (with the reason), `Err` that the 2-sequence request does not compile.
pub fn compile_with_shortcut(
    nnet: &Nnet,
    request: &ComputationRequest,
    options: &CachingCompilerOptions,
) -> Result<std::result::Result<NnetComputation, String>> {
    let (mini, num_n) = match mini_request(request) {
        Ok(m) => m,
        Err(why) => return Ok(Err(why)),
    };
    let mut opts = options.compiler.clone();
    opts.output_debug_info = true;
    let mut small = compile_computation(nnet, &mini, &opts)?;
    optimize_for_request(nnet, &mini, &mut small, &options.optimize)?;
    Ok(expand_computation(
        nnet,
        &small,
        &mini,
        num_n,
        options.compiler.output_debug_info,
    ))
}

// ---- Row layouts ----

/// How the rows of a matrix (or an Index list) are spread over sequences: in blocks of
/// `num_n · stride` rows, sequence n owning rows `[n·stride, (n+1)·stride)` of each block,
/// every sequence with the same (t, x) at the same offset. Both t-major order (stride 1) and
/// n-major order (one block) are such layouts. `stride` is 0 for no rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Layout {
    stride: usize,
    /// Rows of the 2-sequence computation.
    rows: usize,
}

/// The stride of `items` as a layout over `num_n` sequences, if it is one.
fn find_stride<T>(
    items: &[T],
    num_n: usize,
    n_of: impl Fn(&T) -> i32,
    same_place: impl Fn(&T, &T) -> bool,
) -> Option<usize> {
    if items.is_empty() {
        return Some(0);
    }
    if n_of(&items[0]) != 0 {
        return None;
    }
    let stride = items.iter().position(|x| n_of(x) == 1)?;
    let block = num_n.checked_mul(stride)?;
    if !items.len().is_multiple_of(block) {
        return None;
    }
    for chunk in items.chunks(block) {
        for n in 0..num_n {
            for i in 0..stride {
                let r = &chunk[n * stride + i];
                if n_of(r) != n as i32 || (n > 0 && !same_place(r, &chunk[i])) {
                    return None;
                }
            }
        }
    }
    Some(stride)
}

fn index_stride(indexes: &[Index], num_n: usize) -> Option<usize> {
    find_stride(indexes, num_n, |i| i.n, |a, b| a.t == b.t && a.x == b.x)
}

impl Layout {
    fn of_indexes(indexes: &[Index]) -> Option<Layout> {
        Some(Layout {
            stride: index_stride(indexes, 2)?,
            rows: indexes.len(),
        })
    }
    /// The sequence (0 or 1) of 2-sequence row `i`.
    fn n_of(&self, i: usize) -> usize {
        (i % (2 * self.stride)) / self.stride
    }
    /// Which 2-sequence row widened row `e` comes from, and its sequence.
    fn narrow(&self, e: usize, num_n: usize) -> (usize, usize) {
        let s = self.stride;
        let rem = e % (num_n * s);
        let n = rem / s;
        ((e / (num_n * s)) * 2 * s + n.min(1) * s + rem % s, n)
    }
    fn widened_rows(&self, num_n: usize) -> usize {
        self.rows / 2 * num_n
    }
    /// For 2-sequence row `i`: its widened row for sequence 0 (sequence n adds
    /// n · stride), and its sequence (0 or 1).
    fn base(&self, i: usize, num_n: usize) -> (usize, usize) {
        let s = self.stride;
        ((i / (2 * s)) * num_n * s + i % s, self.n_of(i))
    }
    /// The widened sequences a 2-sequence row of sequence `k` stands for.
    fn sequences(k: usize, num_n: usize) -> std::ops::Range<usize> {
        if k == 0 {
            0..1
        } else {
            1..num_n
        }
    }
}

// ---- Decomposing the request ----

/// The 2-sequence version of `request` and its number of sequences N, if the request is
/// decomposable: every input and output holds sequences 0..N−1 (N > 2, the same N for all)
/// in a [`Layout`]. The `Err` says why not.
pub fn mini_request(
    request: &ComputationRequest,
) -> std::result::Result<(ComputationRequest, usize), String> {
    let mut num_n = None;
    let specs = request.inputs.iter().chain(&request.outputs);
    for s in specs.clone() {
        let n = match s.indexes.iter().map(|i| i.n).max() {
            Some(m) if m >= 0 => m as usize + 1,
            _ => return Err(format!("'{}' has no rows or a negative n", s.name)),
        };
        if *num_n.get_or_insert(n) != n {
            return Err(format!(
                "'{}' has {n} sequences, another input or output {}",
                s.name,
                num_n.unwrap_or(0)
            ));
        }
    }
    let Some(num_n) = num_n else {
        return Err("no inputs or outputs".into());
    };
    if num_n <= 2 {
        return Err(format!("{num_n} sequences: nothing to gain"));
    }
    for s in specs {
        if index_stride(&s.indexes, num_n).is_none() {
            return Err(format!(
                "the rows of '{}' are not laid out alike for every sequence",
                s.name
            ));
        }
    }
    let shrink = |s: &IoSpecification| IoSpecification {
        name: s.name.clone(),
        indexes: s.indexes.iter().filter(|i| i.n < 2).copied().collect(),
        has_deriv: s.has_deriv,
    };
    Ok((
        ComputationRequest {
            inputs: request.inputs.iter().map(shrink).collect(),
            outputs: request.outputs.iter().map(shrink).collect(),
            need_model_derivative: request.need_model_derivative,
            store_component_stats: request.store_component_stats,
            misc_info: request.misc_info.clone(),
        },
        num_n,
    ))
}

// ---- Widening the computation ----

/// Widens `small`, the optimized computation of the 2-sequence request `mini` (compiled with
/// debug info), to `num_n` sequences: matrix and sub-matrix rows, the row tables of the
/// row commands, and the components' precomputed indexes (recomputed from the widened
/// Indexes). `Err` says why it cannot; nothing is guessed.
pub fn expand_computation(
    nnet: &Nnet,
    small: &NnetComputation,
    mini: &ComputationRequest,
    num_n: usize,
    keep_debug_info: bool,
) -> std::result::Result<NnetComputation, String> {
    Expander::new(nnet, small, mini, num_n)?.run(keep_debug_info)
}

struct Expander<'a> {
    nnet: &'a Nnet,
    small: &'a NnetComputation,
    mini: &'a ComputationRequest,
    num_n: usize,
    /// Per matrix.
    matrix_layout: Vec<Layout>,
    /// Per sub-matrix.
    sub_layout: Vec<Layout>,
    out: NnetComputation,
    /// (old table, dst layout, src layout) → new table, for each kind of table.
    indexes_map: HashMap<(usize, Layout, Layout), usize>,
    multi_map: HashMap<(usize, Layout), usize>,
    ranges_map: HashMap<(usize, Layout, Layout), usize>,
    /// Old precomputed entry → new one.
    precomputed_map: HashMap<usize, usize>,
}

/// The memo of widened tables of one kind (key → index in the list) and that list.
type WidenedSlot<'a, K, T> = (&'a mut HashMap<K, usize>, &'a mut Vec<Vec<T>>);

impl<'a> Expander<'a> {
    fn new(
        nnet: &'a Nnet,
        small: &'a NnetComputation,
        mini: &'a ComputationRequest,
        num_n: usize,
    ) -> std::result::Result<Self, String> {
        if num_n <= 2 {
            return Err("fewer than three sequences".into());
        }
        if !has_debug_info(small) {
            return Err("the 2-sequence computation has no debug info".into());
        }
        let mut matrix_layout = Vec::with_capacity(small.matrices.len());
        for (m, (info, dbg)) in small
            .matrices
            .iter()
            .zip(&small.matrix_debug_info)
            .enumerate()
        {
            if m == 0 {
                matrix_layout.push(Layout { stride: 0, rows: 0 });
                continue;
            }
            if dbg.cindexes.len() != info.num_rows {
                return Err(format!(
                    "matrix m{m}: debug info does not describe every row"
                ));
            }
            let stride = find_stride(
                &dbg.cindexes,
                2,
                |c| c.1.n,
                |a, b| a.0 == b.0 && a.1.t == b.1.t && a.1.x == b.1.x,
            )
            .ok_or_else(|| format!("matrix m{m}: rows are not laid out alike per sequence"))?;
            matrix_layout.push(Layout {
                stride,
                rows: info.num_rows,
            });
        }
        let mut e = Expander {
            nnet,
            small,
            mini,
            num_n,
            matrix_layout,
            sub_layout: Vec::new(),
            out: NnetComputation {
                need_model_derivative: small.need_model_derivative,
                ..Default::default()
            },
            indexes_map: HashMap::new(),
            multi_map: HashMap::new(),
            ranges_map: HashMap::new(),
            precomputed_map: HashMap::new(),
        };
        e.widen_matrices()?;
        Ok(e)
    }

    fn widen_matrices(&mut self) -> std::result::Result<(), String> {
        let n = self.num_n;
        self.out.matrices = self
            .small
            .matrices
            .iter()
            .zip(&self.matrix_layout)
            .map(|(info, l)| MatrixInfo {
                num_rows: l.widened_rows(n),
                num_cols: info.num_cols,
            })
            .collect();
        for (k, s) in self.small.submatrices.iter().enumerate() {
            if k == 0 {
                self.sub_layout.push(Layout { stride: 0, rows: 0 });
                self.out.submatrices.push(*s);
                continue;
            }
            let ml = *self
                .matrix_layout
                .get(s.matrix)
                .ok_or_else(|| format!("sub-matrix {k}: no matrix m{}", s.matrix))?;
            let (layout, row_offset) = if s.num_rows == 0 {
                (Layout { stride: 0, rows: 0 }, 0)
            } else if s.row_offset == 0 && s.num_rows == ml.rows {
                (ml, 0)
            } else if ml.stride > 0
                && s.row_offset.is_multiple_of(2 * ml.stride)
                && s.num_rows.is_multiple_of(2 * ml.stride)
            {
                (
                    Layout {
                        stride: ml.stride,
                        rows: s.num_rows,
                    },
                    s.row_offset / 2 * n,
                )
            } else {
                return Err(format!(
                    "sub-matrix {k}: rows {}..{} split a block of sequences",
                    s.row_offset,
                    s.row_offset + s.num_rows
                ));
            };
            self.sub_layout.push(layout);
            self.out.submatrices.push(SubMatrixInfo {
                row_offset,
                num_rows: layout.widened_rows(n),
                ..*s
            });
        }
        Ok(())
    }

    fn layout(&self, sub: usize) -> std::result::Result<Layout, String> {
        self.sub_layout
            .get(sub)
            .copied()
            .ok_or_else(|| format!("no sub-matrix {sub}"))
    }

    /// Requires the non-zero sub-matrices in `subs` to share one layout (their rows
    /// correspond one to one).
    fn same_layout(&self, subs: &[usize], what: &str) -> std::result::Result<(), String> {
        let mut first = None;
        for &s in subs.iter().filter(|&&s| s != 0) {
            let l = self.layout(s)?;
            if *first.get_or_insert(l) != l {
                return Err(format!(
                    "{what}: row-aligned operands are laid out differently"
                ));
            }
        }
        Ok(())
    }

    /// Checks that row `j` of a sub-matrix laid out as `l` exists and is of sequence `k`;
    /// returns its widened row for sequence 0.
    fn source_base(&self, l: Layout, j: usize, k: usize) -> std::result::Result<usize, String> {
        if j >= l.rows {
            return Err(format!("row {j} out of range"));
        }
        let (base, kj) = l.base(j, self.num_n);
        if kj != k {
            return Err("a row reads from another sequence".into());
        }
        Ok(base)
    }

    /// The index in `out` of a table widened for `key`: the one made before for the same key,
    /// or `widen`'s, added to `out` (`slot` picks the map of keys and the list of tables).
    fn widen_once<K: std::hash::Hash + Eq, T>(
        &mut self,
        key: K,
        slot: fn(&mut Self) -> WidenedSlot<'_, K, T>,
        widen: impl FnOnce(&Self) -> std::result::Result<Vec<T>, String>,
    ) -> std::result::Result<usize, String> {
        if let Some(&k) = slot(self).0.get(&key) {
            return Ok(k);
        }
        let new = widen(self)?;
        let (map, tables) = slot(self);
        tables.push(new);
        map.insert(key, tables.len() - 1);
        Ok(tables.len() - 1)
    }

    /// Widens the 2-sequence `what` table `old` (None: there is no such table), an entry per
    /// row of a sub-matrix laid out as `dl` (the `rows_of` operand): `source(entry, k)`
    /// checks an entry of sequence `k` and gives the widened row it names for sequence 0 and
    /// the stride to the next sequence (None: a blank entry, left `blank`); `at(entry, row)`
    /// is the entry moved to widened row `row`.
    fn widen_table<T: Copy>(
        &self,
        (old, what, rows_of): (Option<&Vec<T>>, &str, &str),
        dl: Layout,
        blank: T,
        source: impl Fn(T, usize) -> std::result::Result<Option<(usize, usize)>, String>,
        at: impl Fn(T, usize) -> T,
    ) -> std::result::Result<Vec<T>, String> {
        let old = old.ok_or_else(|| format!("no such {what} table"))?;
        if old.len() != dl.rows {
            return Err(format!(
                "{what} table length differs from its {rows_of}'s rows"
            ));
        }
        let num_n = self.num_n;
        let mut new = vec![blank; dl.widened_rows(num_n)];
        for (i, &e) in old.iter().enumerate() {
            let (base, k) = dl.base(i, num_n);
            let Some((src_base, stride)) = source(e, k)? else {
                continue;
            };
            for n in Layout::sequences(k, num_n) {
                new[base + n * dl.stride] = at(e, src_base + n * stride);
            }
        }
        Ok(new)
    }

    fn widen_indexes(
        &mut self,
        id: usize,
        dst: usize,
        src: usize,
    ) -> std::result::Result<usize, String> {
        let (dl, sl) = (self.layout(dst)?, self.layout(src)?);
        self.widen_once(
            (id, dl, sl),
            |s| (&mut s.indexes_map, &mut s.out.indexes),
            |s| {
                let old = (s.small.indexes.get(id), "index", "destination");
                s.widen_table(
                    old,
                    dl,
                    -1,
                    |v, k| match v {
                        ..0 => Ok(None),
                        _ => Ok(Some((s.source_base(sl, v as usize, k)?, sl.stride))),
                    },
                    |_, row| row as i32,
                )
            },
        )
    }

    /// `rows_of` is the sub-matrix whose rows index the table (dst, or src for the To
    /// kinds).
    fn widen_multi(&mut self, id: usize, rows_of: usize) -> std::result::Result<usize, String> {
        let dl = self.layout(rows_of)?;
        self.widen_once(
            (id, dl),
            |s| (&mut s.multi_map, &mut s.out.indexes_multi),
            |s| {
                let old = (s.small.indexes_multi.get(id), "multi", "sub-matrix");
                s.widen_table(
                    old,
                    dl,
                    (-1, -1),
                    |(sub, row), k| {
                        if sub < 0 || row < 0 {
                            return Ok(None);
                        }
                        let sl = s.layout(sub as usize)?;
                        Ok(Some((s.source_base(sl, row as usize, k)?, sl.stride)))
                    },
                    |(sub, _), row| (sub, row as i32),
                )
            },
        )
    }

    fn widen_ranges(
        &mut self,
        id: usize,
        dst: usize,
        src: usize,
    ) -> std::result::Result<usize, String> {
        let (dl, sl) = (self.layout(dst)?, self.layout(src)?);
        self.widen_once(
            (id, dl, sl),
            |s| (&mut s.ranges_map, &mut s.out.indexes_ranges),
            |s| {
                let old = (s.small.indexes_ranges.get(id), "range", "destination");
                // Empty ranges add nothing.
                s.widen_table(
                    old,
                    dl,
                    (-1, -1),
                    |(a, b), k| {
                        if b <= a {
                            return Ok(None);
                        }
                        if a < 0 {
                            return Err("negative row range".into());
                        }
                        let (a, last) = (a as usize, b as usize - 1);
                        // One sequence's contiguous rows stay contiguous when widened.
                        if sl.stride == 0 || a / sl.stride != last / sl.stride {
                            return Err("a row range spans sequences".into());
                        }
                        let src_base = s.source_base(sl, a, k)?;
                        s.source_base(sl, last, k)?;
                        Ok(Some((src_base, sl.stride)))
                    },
                    |(a, b), first| (first as i32, first as i32 + (b - a)),
                )
            },
        )
    }

    fn widen_index_list(
        &self,
        list: &[Index],
    ) -> std::result::Result<(Layout, Vec<Index>), String> {
        let l = Layout::of_indexes(list)
            .ok_or("a component's Indexes are not laid out alike per sequence")?;
        let out = (0..l.widened_rows(self.num_n))
            .map(|e| {
                let (i, n) = l.narrow(e, self.num_n);
                Index {
                    n: n as i32,
                    ..list[i]
                }
            })
            .collect();
        Ok((l, out))
    }

    /// The new precomputed-indexes entry for old entry `p` of `component`, checking that
    /// the command's input-side and output-side sub-matrices match what it was made from.
    fn widen_precomputed(
        &mut self,
        component: usize,
        p: usize,
        input_side: &[usize],
        output_side: &[usize],
    ) -> std::result::Result<usize, String> {
        let io: &PrecomputedIo = self
            .small
            .component_precomputed_io
            .get(p)
            .filter(|_| {
                self.small.component_precomputed_io.len()
                    == self.small.component_precomputed_indexes.len()
            })
            .ok_or("precomputed indexes without the Indexes they came from")?;
        let (in_layout, in_idx) = self.widen_index_list(&io.input_indexes)?;
        let (out_layout, out_idx) = self.widen_index_list(&io.output_indexes)?;
        for (subs, l) in [(input_side, in_layout), (output_side, out_layout)] {
            for &s in subs.iter().filter(|&&s| s != 0) {
                if self.layout(s)? != l {
                    return Err("a component's operand is laid out unlike its Indexes".into());
                }
            }
        }
        if let Some(&k) = self.precomputed_map.get(&p) {
            return Ok(k);
        }
        let c = self
            .nnet
            .components
            .get(component)
            .ok_or("no such component")?;
        let pre: Box<dyn PrecomputedIndexes> = c
            .precompute_indexes(&self.mini.misc_info, &in_idx, &out_idx, io.need_backprop)
            .ok_or("the component precomputes nothing for the widened Indexes")?;
        if self.out.component_precomputed_indexes.is_empty() {
            self.out.component_precomputed_indexes.push(None);
            self.out
                .component_precomputed_io
                .push(PrecomputedIo::default());
        }
        self.out.component_precomputed_indexes.push(Some(pre));
        self.out.component_precomputed_io.push(PrecomputedIo {
            input_indexes: in_idx,
            output_indexes: out_idx,
            need_backprop: io.need_backprop,
        });
        let k = self.out.component_precomputed_indexes.len() - 1;
        self.precomputed_map.insert(p, k);
        Ok(k)
    }

    /// Propagate/Backprop: the precomputed entry to use (0 = none).
    fn widen_component_command(
        &mut self,
        component: usize,
        precomputed: usize,
        input_side: &[usize],
        output_side: &[usize],
    ) -> std::result::Result<usize, String> {
        let props = self
            .nnet
            .components
            .get(component)
            .ok_or("no such component")?
            .properties();
        if precomputed != 0 {
            return self.widen_precomputed(component, precomputed, input_side, output_side);
        }
        let all: Vec<usize> = input_side.iter().chain(output_side).copied().collect();
        if props.has(Properties::SIMPLE) {
            self.same_layout(&all, "component")?;
        } else {
            // A general component without precomputed indexes: rows must still pair up,
            // except for an input with no rows at all (a ConstantComponent's).
            let nonempty: Vec<usize> = all
                .into_iter()
                .filter(|&s| self.sub_layout.get(s).is_none_or(|l| l.rows > 0))
                .collect();
            self.same_layout(&nonempty, "component")?;
        }
        Ok(0)
    }

    /// The request's io specification for node `node`'s AcceptInput/ProvideOutput must be
    /// laid out as the sub-matrix `s` (the user's matrix is copied row for row).
    fn check_io(&self, node: usize, s: usize) -> std::result::Result<(), String> {
        let name = self.nnet.node_names.get(node).ok_or("no such node")?;
        let spec = self
            .mini
            .inputs
            .iter()
            .chain(&self.mini.outputs)
            .find(|x| &x.name == name)
            .ok_or_else(|| format!("node '{name}' is not in the request"))?;
        let l = Layout::of_indexes(&spec.indexes)
            .ok_or_else(|| format!("'{name}' is not laid out alike per sequence"))?;
        if self.layout(s)? != l {
            return Err(format!(
                "the matrix of '{name}' is laid out unlike the request"
            ));
        }
        Ok(())
    }

    fn run(mut self, keep_debug_info: bool) -> std::result::Result<NnetComputation, String> {
        let mut commands = Vec::with_capacity(self.small.commands.len());
        // Per matrix: allocated at this command (to tell a storage move from a swap).
        let mut allocated = vec![false; self.small.matrices.len()];
        for c in &self.small.commands {
            match *c {
                Command::AllocMatrix { m } | Command::AllocMatrixUndefined { m } => {
                    if let Some(x) = allocated.get_mut(m) {
                        *x = true;
                    }
                }
                Command::DeallocMatrix { m } => {
                    if let Some(x) = allocated.get_mut(m) {
                        *x = false;
                    }
                }
                _ => {}
            }
            // Commands keep their kind and operands; only the index tables and precomputed
            // indexes they name are replaced by widened ones.
            let mut new = c.clone();
            match &mut new {
                Command::AllocMatrix { .. }
                | Command::AllocMatrixUndefined { .. }
                | Command::DeallocMatrix { .. }
                | Command::NoOperation
                | Command::NoOperationPermanent
                | Command::NoOperationMarker
                | Command::CompressMatrix { .. }
                | Command::DecompressMatrix { .. } => {}
                Command::SwapMatrix { a, b } => {
                    let la = self.matrix_layout.get(*a).ok_or("no such matrix")?;
                    let lb = self.matrix_layout.get(*b).ok_or("no such matrix")?;
                    // allocate-from-other's swap (`a` not allocated) moves storage, not
                    // values: equal widened shapes are enough.
                    let moves = !allocated.get(*a).copied().unwrap_or(true);
                    if la != lb && !(moves && la.rows == lb.rows) {
                        return Err("swap of matrices laid out differently".into());
                    }
                }
                Command::NoOperationLabel | Command::GotoLabel { .. } => {
                    return Err("looped computations are not widened".into())
                }
                Command::SetConst { s, .. } => {
                    self.layout(*s)?;
                }
                Command::Propagate(p) => {
                    p.precomputed = self.widen_component_command(
                        p.component,
                        p.precomputed,
                        &[p.input],
                        &[p.output],
                    )?
                }
                Command::Backprop(b) => {
                    b.precomputed = self.widen_component_command(
                        b.component,
                        b.precomputed,
                        &[b.in_value, b.in_deriv],
                        &[b.out_value, b.out_deriv],
                    )?
                }
                Command::MatrixCopy { dst, src, .. } | Command::MatrixAdd { dst, src, .. } => {
                    self.same_layout(&[*dst, *src], "matrix copy")?;
                }
                Command::CopyRows(r) | Command::AddRows(r) => {
                    r.indexes = self.widen_indexes(r.indexes, r.dst, r.src)?
                }
                // The To kinds' tables are indexed by the rows of their source.
                Command::CopyRowsMulti {
                    dst: rows_of,
                    indexes_multi,
                    ..
                }
                | Command::AddRowsMulti {
                    dst: rows_of,
                    indexes_multi,
                    ..
                }
                | Command::CopyToRowsMulti {
                    src: rows_of,
                    indexes_multi,
                    ..
                }
                | Command::AddToRowsMulti {
                    src: rows_of,
                    indexes_multi,
                    ..
                } => *indexes_multi = self.widen_multi(*indexes_multi, *rows_of)?,
                Command::AddRowRanges(r) => {
                    r.indexes = self.widen_ranges(r.indexes, r.dst, r.src)?
                }
                Command::AcceptInput { s, node } | Command::ProvideOutput { s, node } => {
                    self.check_io(*node, *s)?;
                }
            }
            if let Command::SwapMatrix { a, b } = *c {
                if a < allocated.len() && b < allocated.len() && !allocated[a] {
                    allocated.swap(a, b);
                }
            }
            commands.push(new);
        }
        self.out.commands = commands;
        if self.out.component_precomputed_indexes.is_empty() {
            self.out.component_precomputed_indexes.push(None);
            self.out
                .component_precomputed_io
                .push(PrecomputedIo::default());
        }
        if keep_debug_info {
            let n = self.num_n;
            self.out.matrix_debug_info = self
                .small
                .matrix_debug_info
                .iter()
                .zip(&self.matrix_layout)
                .map(|(d, l)| MatrixDebugInfo {
                    is_deriv: d.is_deriv,
                    cindexes: (0..l.widened_rows(n))
                        .map(|e| {
                            let (i, k) = l.narrow(e, n);
                            let (node, idx) = d.cindexes[i];
                            (node, Index { n: k as i32, ..idx })
                        })
                        .collect(),
                })
                .collect();
        }
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        let t_major: Vec<Index> = (0..3)
            .flat_map(|t| (0..4).map(move |n| Index::new(n, t, 0)))
            .collect();
        assert_eq!(index_stride(&t_major, 4), Some(1));
        let n_major: Vec<Index> = (0..4)
            .flat_map(|n| (0..3).map(move |t| Index::new(n, t, 0)))
            .collect();
        assert_eq!(index_stride(&n_major, 4), Some(3));
        // Sequence 2 lacks a frame.
        let mut ragged = n_major.clone();
        ragged[7] = Index::new(2, 5, 0);
        assert_eq!(index_stride(&ragged, 4), None);
        // n = 1 first.
        assert_eq!(index_stride(&n_major[3..], 3), None);
        let l = Layout { stride: 3, rows: 6 };
        let mut seen = vec![false; l.widened_rows(5)];
        for i in 0..6 {
            let (base, k) = l.base(i, 5);
            for n in Layout::sequences(k, 5) {
                let e = base + n * l.stride;
                assert_eq!(l.narrow(e, 5), (i, n));
                seen[e] = true;
            }
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn mini_requests() {
        let req = ComputationRequest {
            inputs: vec![IoSpecification::from_ranges("input", 0..5, -2..4, true)],
            outputs: vec![IoSpecification::from_ranges("output", 0..5, 0..2, false)],
            ..Default::default()
        };
        let (mini, n) = mini_request(&req).unwrap();
        assert_eq!(n, 5);
        assert_eq!(mini.inputs[0].indexes.len(), 12);
        assert_eq!(mini.outputs[0].indexes.len(), 4);
        assert!(mini.inputs[0].has_deriv);
        let mut two = req.clone();
        two.outputs[0] = IoSpecification::from_ranges("output", 0..2, 0..2, false);
        assert!(mini_request(&two).is_err());
        let mut small = req.clone();
        small.inputs[0] = IoSpecification::from_ranges("input", 0..2, -2..4, false);
        small.outputs[0] = IoSpecification::from_ranges("output", 0..2, 0..2, false);
        assert!(mini_request(&small).is_err());
    }
}
