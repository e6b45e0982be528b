//! compnet's own single-precision GEMM for x86-64 CPUs with AVX2 and FMA (no AVX-512).
//!
//! Blocked the usual way for a cache hierarchy: the k dimension in blocks of at most [`KC`],
//! for each a panel of op(B) (k-block × up to [`NC`] columns) packed once into micro-panels
//! of [`NR`] columns, then op(A) in blocks of [`MC`] rows packed into micro-panels of [`MR`]
//! rows (a block stays in L2), and a register-blocked micro-kernel that multiplies one A
//! micro-panel by one B micro-panel (the B micro-panel, 16 KiB at KC = 256, stays in L1
//! while the kernel walks down the A block). Packing reads the operands through their row
//! and column strides, so every transpose form and any view into a bigger matrix works. A
//! product of at most MC rows with a row-major op(B) reads B's rows in place instead (the
//! packing would cost as much as such a product reads).
//!
//! The kernel keeps a 6 × 16 tile of C in twelve ymm registers: per k step two loads of
//! B, six broadcasts of A, twelve fused multiply-adds. Edge tiles are computed by the same
//! kernel into a scratch tile (the packed panels are zero-padded) and copied out with the
//! same arithmetic, so every element of C is the same sequence of operations wherever its
//! tile lies: `acc = Σ a·b` in k order within a k-block (one FMA per step), then
//! `c = alpha·acc + beta·c` after the first k-block (`alpha·acc` when beta is 0, without
//! reading c) and `c = alpha·acc + c` after each later one. Threads take disjoint row (or
//! column) ranges of C whose bounds are multiples of the tile, so results do not depend on
//! the number of threads.

use std::arch::x86_64::*;
use std::cell::RefCell;

/// Rows of the register tile (micro-panel height of packed A).
const MR: usize = 6;
/// Columns of the register tile (micro-panel width of packed B): two ymm registers.
const NR: usize = 16;
// The few-row product reads packed panels of its own width.
const _: () = assert!(NR == super::few_rows::LANES);
/// Largest k-block: a B micro-panel of KC × NR floats (16 KiB) stays in the 32 KiB L1.
const KC: usize = 256;
/// Rows of A packed per block (a multiple of MR): MC × KC floats (96 KiB) stay in L2
/// (96, 120 and 168 rows measured within noise of each other on a Zen 3 EPYC).
const MC: usize = 96;
/// Columns of B packed per panel (a multiple of NR): KC × NC floats (4 MiB) in L3.
const NC: usize = 4080;

/// Whether this CPU can run the kernel.
pub(super) fn available() -> bool {
    super::simd::has_avx2_fma()
}

/// A read-only strided matrix: element (i, j) at `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(super) struct Strided<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl Strided<'_> {
    /// Whether every element of a rows × cols matrix lies inside `data`.
    fn covers(&self, rows: usize, cols: usize) -> bool {
        rows == 0
            || cols == 0
            || (rows - 1)
                .checked_mul(self.rs)
                .zip((cols - 1).checked_mul(self.cs))
                .and_then(|(r, c)| r.checked_add(c))
                .is_some_and(|last| last < self.data.len())
    }
}

/// `c (m×n, row-major with row stride c_rs) = alpha · a (m×k) · b (k×n) + beta · c`, with
/// `[m, n, k] = shape`, on `parts` threads (rayon) splitting C into disjoint ranges of rows
/// or columns. With `beta == 0` c is never read.
///
/// # Panics
/// If the CPU lacks AVX2 or FMA, or an operand is too short for its shape and strides, or
/// C's rows overlap (`c_rs < n` with more than one row).
#[allow(clippy::too_many_arguments)]
pub(super) fn sgemm(
    shape: [usize; 3],
    alpha: f32,
    a: Strided<'_>,
    b: Strided<'_>,
    beta: f32,
    c: &mut [f32],
    c_rs: usize,
    parts: usize,
) {
    let [m, n, k] = shape;
    assert!(available(), "sgemm: the CPU lacks AVX2 or FMA");
    assert!(
        b.covers(k, n),
        "sgemm: operands too short for {m}x{k} · {k}x{n}"
    );
    let b = (SharedPtr(b.data.as_ptr().cast_mut()), b.rs, b.cs, false);
    run(shape, alpha, a, b, beta, c, c_rs, parts);
}

/// [`sgemm`] with op(B) packed beforehand (`b` was packed for this k × n).
///
/// # Panics
/// As [`sgemm`], and if `b` was packed for another shape.
#[allow(clippy::too_many_arguments)]
pub(super) fn sgemm_packed(
    shape: [usize; 3],
    alpha: f32,
    a: Strided<'_>,
    b: &PackedB,
    beta: f32,
    c: &mut [f32],
    c_rs: usize,
    parts: usize,
) {
    let [_, n, k] = shape;
    assert!(
        (b.k, b.n) == (k, n),
        "sgemm_packed: B packed as {}x{}, used as {k}x{n}",
        b.k,
        b.n
    );
    assert!(available(), "sgemm: the CPU lacks AVX2 or FMA");
    let b = (
        SharedPtr(b.data.as_ptr().cast::<f32>().cast_mut()),
        0,
        0,
        true,
    );
    run(shape, alpha, a, b, beta, c, c_rs, parts);
}

/// The common part of [`sgemm`] and [`sgemm_packed`]: `b` is (pointer, row stride, column
/// stride, packed), already checked to cover k × n (or packed for it).
#[allow(clippy::too_many_arguments)]
fn run(
    shape: [usize; 3],
    alpha: f32,
    a: Strided<'_>,
    b: (SharedPtr, usize, usize, bool),
    beta: f32,
    c: &mut [f32],
    c_rs: usize,
    parts: usize,
) {
    let [m, n, k] = shape;
    let cv = Strided {
        data: c,
        rs: c_rs,
        cs: 1,
    };
    assert!(
        a.covers(m, k) && cv.covers(m, n) && (m <= 1 || c_rs >= n),
        "sgemm: operands too short for {m}x{k} · {k}x{n}"
    );
    if m == 0 || n == 0 {
        return;
    }
    let job = Job {
        alpha,
        beta,
        a: SharedPtr(a.data.as_ptr().cast_mut()),
        a_rs: a.rs,
        a_cs: a.cs,
        b: b.0,
        b_rs: b.1,
        b_cs: b.2,
        b_packed: b.3,
        n_pad: n.next_multiple_of(NR),
        c: SharedPtr(c.as_mut_ptr()),
        c_rs,
        k,
    };
    // Split the longer side of C in whole tiles.
    let (len, tile) = if m >= n { (m, MR) } else { (n, NR) };
    let tiles = len.div_ceil(tile);
    let parts = parts.clamp(1, tiles);
    let per = tiles.div_ceil(parts) * tile;
    let ranges = (0..len).step_by(per).map(|s| (s, per.min(len - s)));
    let run = |(s, l): (usize, usize)| {
        let (r0, rows, c0, cols) = if m >= n { (s, l, 0, n) } else { (0, m, s, l) };
        // SAFETY: the checks above put every element of op(A) (m × k), op(B) (k × n, or its
        // packed copy) and C (m × n, rows not overlapping) inside its slice; rows r0..r0+rows and columns
        // c0..c0+cols lie inside m × n, and the ranges handed to different threads are
        // disjoint row (or column) ranges of C, so no element of C is written by two threads.
        // `c` is a unique borrow, so it overlaps neither input. The CPU has AVX2 and FMA.
        unsafe { job.block(r0, rows, c0, cols) }
    };
    if parts == 1 {
        run((0, len));
    } else {
        rayon::scope(|s| {
            for r in ranges {
                s.spawn(move |_| run(r));
            }
        });
    }
}

/// op(B) (k × n) packed once into the kernel's micro-panels, for a right operand used in
/// many products (an affine layer's Wᵀ in inference): the products skip packing it. Same
/// k-blocks and panels as an unpacked product, so the results are the same to the bit.
pub(super) struct PackedB {
    data: Vec<Line>,
    k: usize,
    n: usize,
}

impl PackedB {
    /// Packs the k × n matrix `b`.
    ///
    /// # Panics
    /// If the CPU lacks AVX2 or FMA, or `b` is too short for k × n.
    pub(super) fn new(k: usize, n: usize, b: Strided<'_>) -> Self {
        assert!(available(), "PackedB: the CPU lacks AVX2 or FMA");
        assert!(b.covers(k, n), "PackedB: operand too short for {k}x{n}");
        let n_pad = n.next_multiple_of(NR);
        let mut data = Vec::new();
        let dst = scratch(&mut data, k * n_pad);
        if n > 0 {
            let kb = k_block(k);
            for pc in (0..k).step_by(kb) {
                let kc = kb.min(k - pc);
                // SAFETY: rows pc..pc+kc of b (k × n, covered) and k-block pc of the
                // buffer: floats pc·n_pad .. (pc+kc)·n_pad ≤ k·n_pad. The CPU has AVX2+FMA.
                unsafe {
                    let src = b.data.as_ptr().add(pc * b.rs);
                    pack_b(kc, n, src, b.rs, b.cs, dst.add(pc * n_pad));
                }
            }
        }
        PackedB { data, k, n }
    }

    /// The packed floats as the few-row product reads them (its layout is this one).
    pub(super) fn panels(&self) -> super::few_rows::Panels<'_> {
        // SAFETY: Line is repr(C), 16 floats without padding, so the Vec's lines are
        // 16·len initialised floats, borrowed as long as self.
        let data = unsafe {
            std::slice::from_raw_parts(self.data.as_ptr().cast::<f32>(), self.data.len() * 16)
        };
        super::few_rows::Panels {
            data,
            kb: if self.k == 0 { 1 } else { k_block(self.k) },
            n_pad: self.n.next_multiple_of(NR),
        }
    }
}

/// A pointer shared between the threads of one product (each writes its own part of C).
#[derive(Clone, Copy)]
struct SharedPtr(*mut f32);
// SAFETY: the threads of one product read A and B and write disjoint parts of C (see sgemm).
unsafe impl Send for SharedPtr {}
// SAFETY: as above.
unsafe impl Sync for SharedPtr {}

/// One product, as raw pointers and strides (checked by [`sgemm`]).
#[derive(Clone, Copy)]
struct Job {
    alpha: f32,
    beta: f32,
    a: SharedPtr,
    a_rs: usize,
    a_cs: usize,
    /// op(B) as given (read through b_rs, b_cs), or already packed ([`PackedB`]).
    b: SharedPtr,
    b_rs: usize,
    b_cs: usize,
    b_packed: bool,
    /// n rounded up to whole micro-panels: the stride between k-blocks of a [`PackedB`].
    n_pad: usize,
    c: SharedPtr,
    c_rs: usize,
    k: usize,
}

/// 64-byte aligned storage for packed panels.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// Grows `buf` to at least `floats` floats (contents unspecified) and returns its start.
fn scratch(buf: &mut Vec<Line>, floats: usize) -> *mut f32 {
    let lines = floats.div_ceil(16);
    if buf.len() < lines {
        buf.resize(lines, Line([0.0; 16]));
    }
    buf.as_mut_ptr().cast()
}

thread_local! {
    /// Packing buffers of this thread (packed A block, packed B panel), reused across calls.
    static BUFFERS: RefCell<(Vec<Line>, Vec<Line>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The k-block size: at most KC, and the blocks of one product as equal as possible (so a
/// k just above KC does not leave a short, slow last block). Depends only on k.
fn k_block(k: usize) -> usize {
    k.div_ceil(k.div_ceil(KC))
}

impl Job {
    /// Computes rows r0..r0+rows, columns c0..c0+cols of C on the calling thread.
    ///
    /// # Safety
    /// As in [`sgemm`]: the pointers and strides address m × k, k × n and m × n elements
    /// inside live allocations, the range lies inside C, no other thread writes it, and the
    /// CPU has AVX2 and FMA.
    unsafe fn block(&self, r0: usize, rows: usize, c0: usize, cols: usize) {
        BUFFERS.with(|cell| {
            let mut fresh = (Vec::new(), Vec::new());
            let mut guard = cell.try_borrow_mut();
            let (abuf, bbuf) = match guard.as_deref_mut() {
                Ok(b) => (&mut b.0, &mut b.1),
                Err(_) => (&mut fresh.0, &mut fresh.1),
            };
            let kb = k_block(self.k);
            let ap = scratch(abuf, MC.min(rows.next_multiple_of(MR)) * kb + SLACK);
            let b_floats = if self.b_packed {
                0
            } else {
                NC.min(cols.next_multiple_of(NR)) * kb
            };
            let bp = scratch(bbuf, b_floats);
            // SAFETY: the buffers hold a packed A block and B panel of these sizes; the rest
            // is the caller's contract.
            unsafe { self.block_with(r0, rows, c0, cols, ap, bp) }
        });
    }

    /// [`block`](Self::block) with packing buffers `ap` (MC × k_block + SLACK floats, or
    /// fewer when `rows` is smaller) and `b_buf` (k_block × NC floats, or fewer when `cols` is smaller;
    /// unused when B is packed already).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn block_with(
        &self,
        r0: usize,
        rows: usize,
        c0: usize,
        cols: usize,
        ap: *mut f32,
        b_buf: *mut f32,
    ) {
        let kb = k_block(self.k);
        let mut tile = [Line([0.0; 16]); MR];
        // Few rows (one A block) and row-major op(B): the kernel reads B's rows in place
        // (16 contiguous floats per step at B's row stride) instead of packing B, which a
        // product of a few rows does not amortise (a layer's input derivative in chunked
        // inference: 16×650→1950 and 50×3000→650 went from 81–86 % of OpenBLAS to 95–100 %);
        // only a last, narrower micro-panel is packed. Same values in the same order, so the
        // same bits as packing.
        let direct = !self.b_packed && self.b_cs == 1 && rows <= MC;
        for jc in (0..cols).step_by(NC) {
            let nc = NC.min(cols - jc);
            // Columns jc..jc + full are whole micro-panels.
            let full = nc / NR * NR;
            for pc in (0..self.k).step_by(kb) {
                let kc = kb.min(self.k - pc);
                // SAFETY: (pc.., c0 + jc..) is inside op(B), k × n; the panel is kc × nc. A
                // packed B holds k-block pc at pc·n_pad (the blocks before it hold pc steps of
                // n_pad floats) and, in it, the micro-panels of columns c0 + jc.. (a multiple
                // of NR) at (c0 + jc)·kc. Read in place, the panel starts at its first element
                // and a narrower last micro-panel (columns full..nc) is packed into `b_buf`.
                let (bp, b_src) = unsafe {
                    let src = self
                        .b
                        .0
                        .add(pc * self.b_rs + (c0 + jc) * self.b_cs)
                        .cast_const();
                    if self.b_packed {
                        (self.b.0.add(pc * self.n_pad + (c0 + jc) * kc), src)
                    } else if direct {
                        if full < nc {
                            pack_b(kc, nc - full, src.add(full), self.b_rs, 1, b_buf);
                        }
                        (b_buf, src)
                    } else {
                        pack_b(kc, nc, src, self.b_rs, self.b_cs, b_buf);
                        (b_buf, src)
                    }
                };
                let beta = if pc == 0 { self.beta } else { 1.0 };
                for ic in (0..rows).step_by(MC) {
                    let mc = MC.min(rows - ic);
                    // SAFETY: (r0 + ic.., pc..) is inside op(A), m × k; the block is mc × kc.
                    unsafe {
                        let src = self
                            .a
                            .0
                            .add((r0 + ic) * self.a_rs + pc * self.a_cs)
                            .cast_const();
                        pack_a(mc, kc, src, self.a_rs, self.a_cs, ap);
                    }
                    for jr in (0..nc).step_by(NR) {
                        let nr = NR.min(nc - jr);
                        for ir in (0..mc).step_by(MR) {
                            let mr = MR.min(mc - ir);
                            // SAFETY: packed micro-panels ir/MR of A and jr/NR of B hold kc
                            // steps each (MR and NR floats per step). The tile's C rows
                            // r0+ic+ir.. (mr of them) and columns c0+jc+jr.. (nr) lie inside
                            // this thread's range of C.
                            unsafe {
                                let a = ap.add(ir * kc).cast_const();
                                let (b, b_step) = if !direct {
                                    (bp.add(jr * kc).cast_const(), NR)
                                } else if jr < full {
                                    (b_src.add(jr), self.b_rs)
                                } else {
                                    (bp.cast_const(), NR)
                                };
                                let c = self.c.0.add((r0 + ic + ir) * self.c_rs + c0 + jc + jr);
                                if mr == MR && nr == NR {
                                    kernel(kc, a, b, b_step, c, self.c_rs, self.alpha, beta);
                                } else {
                                    let t = tile.as_mut_ptr().cast::<f32>();
                                    kernel(kc, a, b, b_step, t, NR, 1.0, 0.0);
                                    store_edge(t, mr, nr, c, self.c_rs, self.alpha, beta);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// How far ahead (in floats) the kernel prefetches the packed A micro-panel.
const PREFETCH_A: usize = 64;

/// Floats a packing routine may write past the end of its packed block ([`pack_a`] stores
/// each 6-float step with an 8-float store); the buffers have this much slack.
const SLACK: usize = 8;

/// Packs op(A)'s mc × kc block at `src` (element (i, p) at `src[i·rs + p·cs]`) into
/// micro-panels of MR rows: panel q holds, for each p, rows qMR..qMR+MR (zero past mc).
///
/// # Safety
/// `src` addresses an mc × kc block with these strides; `dst` has room for
/// mc.next_multiple_of(MR) × kc + SLACK floats.
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_a(mc: usize, kc: usize, src: *const f32, rs: usize, cs: usize, dst: *mut f32) {
    for (q, i0) in (0..mc).step_by(MR).enumerate() {
        let mr = MR.min(mc - i0);
        // SAFETY: panel q spans dst[q·MR·kc .. (q+1)·MR·kc], inside the padded size.
        let panel = unsafe { dst.add(q * MR * kc) };
        let mut p0 = 0;
        if mr == MR && cs == 1 {
            // Row-major A: 8 steps of the 6 rows at a time through an 8 × 8 transpose.
            let zero = _mm256_setzero_ps();
            while p0 + 8 <= kc {
                // SAFETY: rows i0..i0+6 < mc, columns p0..p0+8 ≤ kc of the source (each row
                // contiguous). Step p's store writes panel floats (p0+p)·6 .. +8: the two
                // floats past the step are rewritten by the next step or lie in the next
                // panel (written later) or in the buffer's SLACK.
                unsafe {
                    let row = |i: usize| _mm256_loadu_ps(src.add((i0 + i) * rs + p0));
                    let t =
                        transpose8([row(0), row(1), row(2), row(3), row(4), row(5), zero, zero]);
                    for (p, v) in t.into_iter().enumerate() {
                        _mm256_storeu_ps(panel.add((p0 + p) * MR), v);
                    }
                }
                p0 += 8;
            }
        } else if mr == MR && rs == 1 {
            // Column-major A: each step's 6 rows are contiguous.
            for p in 0..kc {
                // SAFETY: rows i0..i0+6 < mc at column p < kc (contiguous: 4 + 2 floats);
                // the 8-float store at panel p·6 spills two floats as above.
                unsafe {
                    let s = src.add(p * cs + i0);
                    let lo = _mm_loadu_ps(s);
                    let hi = _mm_castpd_ps(_mm_load_sd(s.add(4).cast::<f64>()));
                    _mm256_storeu_ps(panel.add(p * MR), _mm256_set_m128(hi, lo));
                }
            }
            p0 = kc;
        }
        // SAFETY: rows i0..i0+mr ≤ mc (i0 + i at src + (i0 + i)·rs), steps p0..kc (at p·cs).
        unsafe { pack_steps::<MR>(panel, p0..kc, mr, src.add(i0 * rs), rs, cs) };
    }
}

/// The element-by-element part of packing: steps `steps` of a micro-panel `W` wide, whose
/// lane l of step p is `src[l·lane_stride + p·step_stride]` for l < `valid` and zero past it.
///
/// # Safety
/// `panel` has room for `steps.end` × W floats; `src` addresses `valid` lanes × `steps.end`
/// steps with these strides.
#[inline]
unsafe fn pack_steps<const W: usize>(
    panel: *mut f32,
    steps: std::ops::Range<usize>,
    valid: usize,
    src: *const f32,
    lane_stride: usize,
    step_stride: usize,
) {
    for p in steps {
        for l in 0..W {
            // SAFETY: lane l < W of step p < steps.end: panel float p·W + l; source lane
            // l < valid, step p (the caller's contract).
            unsafe {
                *panel.add(p * W + l) = if l < valid {
                    *src.add(l * lane_stride + p * step_stride)
                } else {
                    0.0
                };
            }
        }
    }
}

/// Packs op(B)'s kc × nc panel at `src` (element (p, j) at `src[p·rs + j·cs]`) into
/// micro-panels of NR columns: panel q holds, for each p, columns qNR..qNR+NR (zero past nc).
///
/// # Safety
/// `src` addresses a kc × nc block with these strides; `dst` has room for
/// kc × nc.next_multiple_of(NR) floats.
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_b(kc: usize, nc: usize, src: *const f32, rs: usize, cs: usize, dst: *mut f32) {
    for (q, j0) in (0..nc).step_by(NR).enumerate() {
        let nr = NR.min(nc - j0);
        // SAFETY: panel q spans dst[q·NR·kc .. (q+1)·NR·kc], inside the padded size.
        let panel = unsafe { dst.add(q * NR * kc) };
        let mut p0 = 0;
        if nr == NR && cs == 1 {
            for p in 0..kc {
                // SAFETY: row p < kc, columns j0..j0+16 ≤ nc of the source (contiguous);
                // panel floats p·NR..p·NR+16.
                unsafe {
                    let s = src.add(p * rs + j0);
                    let d = panel.add(p * NR);
                    _mm256_storeu_ps(d, _mm256_loadu_ps(s));
                    _mm256_storeu_ps(d.add(8), _mm256_loadu_ps(s.add(8)));
                }
            }
            continue;
        }
        if nr == NR && rs == 1 {
            // Transposed B (columns contiguous): 8 steps of 8 columns through an 8 × 8
            // transpose, twice per step group.
            while p0 + 8 <= kc {
                for h in 0..2 {
                    // SAFETY: columns j0+8h..j0+8h+8 ≤ nc, rows p0..p0+8 ≤ kc of the source
                    // (each column contiguous); panel floats (p0+p)·16 + 8h .. +8.
                    unsafe {
                        let col = |j: usize| _mm256_loadu_ps(src.add((j0 + 8 * h + j) * cs + p0));
                        let t = transpose8([
                            col(0),
                            col(1),
                            col(2),
                            col(3),
                            col(4),
                            col(5),
                            col(6),
                            col(7),
                        ]);
                        for (p, v) in t.into_iter().enumerate() {
                            _mm256_storeu_ps(panel.add((p0 + p) * NR + 8 * h), v);
                        }
                    }
                }
                p0 += 8;
            }
        }
        // SAFETY: columns j0..j0+nr ≤ nc (j0 + j at src + (j0 + j)·cs), steps p0..kc (p·rs).
        unsafe { pack_steps::<NR>(panel, p0..kc, nr, src.add(j0 * cs), cs, rs) };
    }
}

/// The 8 × 8 transpose: row p of the result holds element p of each input row.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(s0, s4),
        _mm256_permute2f128_ps::<0x20>(s1, s5),
        _mm256_permute2f128_ps::<0x20>(s2, s6),
        _mm256_permute2f128_ps::<0x20>(s3, s7),
        _mm256_permute2f128_ps::<0x31>(s0, s4),
        _mm256_permute2f128_ps::<0x31>(s1, s5),
        _mm256_permute2f128_ps::<0x31>(s2, s6),
        _mm256_permute2f128_ps::<0x31>(s3, s7),
    ]
}

/// The 6 × 16 micro-kernel: `acc = a_panel · b_panel` over kc steps, then
/// `c = alpha·acc + beta·c` (beta 0: `alpha·acc`, c not read; beta 1: `alpha·acc + c`).
///
/// # Safety
/// `a` holds kc × MR floats, `b` kc steps of NR floats `b_step` floats apart (NR when
/// packed), and `c` addresses an MR × NR tile with row stride `c_rs`. The CPU has AVX2 and
/// FMA.
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn kernel(
    kc: usize,
    a: *const f32,
    b: *const f32,
    b_step: usize,
    c: *mut f32,
    c_rs: usize,
    alpha: f32,
    beta: f32,
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    for i in 0..MR {
        // SAFETY: first and last float of row i of the tile (two cache lines unless aligned).
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(c.add(i * c_rs).cast::<i8>());
            _mm_prefetch::<_MM_HINT_T0>(c.add(i * c_rs + NR - 1).cast::<i8>());
        }
    }
    // One k step: two loads of B, six broadcasts of A, twelve FMAs.
    let step = |acc: &mut [[__m256; 2]; MR], a: *const f32, b: *const f32| {
        // SAFETY: the caller passes a step < kc of each panel: floats b..b+16 and a..a+6.
        unsafe {
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm256_broadcast_ss(&*a.add(i));
                row[0] = _mm256_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm256_fmadd_ps(ai, b1, row[1]);
            }
        }
    };
    let (mut a, mut b) = (a, b);
    let mut left = kc;
    while left >= 4 {
        // SAFETY: steps 0..4 of the remaining `left` ≥ 4; the prefetch only hints (any
        // address is allowed).
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(PREFETCH_A).cast::<i8>());
            step(&mut acc, a, b);
            step(&mut acc, a.add(MR), b.add(b_step));
            step(&mut acc, a.add(2 * MR), b.add(2 * b_step));
            step(&mut acc, a.add(3 * MR), b.add(3 * b_step));
            a = a.add(4 * MR);
            b = b.wrapping_add(4 * b_step);
        }
        left -= 4;
    }
    while left > 0 {
        step(&mut acc, a, b);
        // SAFETY: the next step, or one past the panels' ends (not read; `wrapping_add`
        // for B read in place, whose step past the end may lie beyond its allocation).
        unsafe {
            a = a.add(MR);
        }
        b = b.wrapping_add(b_step);
        left -= 1;
    }
    let va = _mm256_set1_ps(alpha);
    let vb = _mm256_set1_ps(beta);
    for (i, row) in acc.iter().enumerate() {
        for (h, &v) in row.iter().enumerate() {
            // SAFETY: floats 8h..8h+8 of row i of the tile.
            unsafe {
                let cp = c.add(i * c_rs + 8 * h);
                let out = if beta == 0.0 {
                    _mm256_mul_ps(va, v)
                } else if beta == 1.0 {
                    _mm256_fmadd_ps(va, v, _mm256_loadu_ps(cp))
                } else {
                    _mm256_fmadd_ps(va, v, _mm256_mul_ps(vb, _mm256_loadu_ps(cp)))
                };
                _mm256_storeu_ps(cp, out);
            }
        }
    }
}

/// Writes the mr × nr corner of a finished tile `t` (row stride NR, `alpha = 1, beta = 0`
/// applied) into C with the kernel's arithmetic.
///
/// # Safety
/// `t` holds MR × NR floats; `c` addresses an mr × nr block with row stride `c_rs`.
#[target_feature(enable = "avx2,fma")]
unsafe fn store_edge(
    t: *const f32,
    mr: usize,
    nr: usize,
    c: *mut f32,
    c_rs: usize,
    alpha: f32,
    beta: f32,
) {
    for i in 0..mr {
        for j in 0..nr {
            // SAFETY: i < mr ≤ MR, j < nr ≤ NR.
            unsafe {
                let v = *t.add(i * NR + j);
                let cp = c.add(i * c_rs + j);
                *cp = if beta == 0.0 {
                    alpha * v
                } else if beta == 1.0 {
                    alpha.mul_add(v, *cp)
                } else {
                    alpha.mul_add(v, beta * *cp)
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values in [-1, 1) from a seeded generator.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        use rand::{Rng, SeedableRng};
        let mut g = rand::rngs::StdRng::seed_from_u64(seed);
        (0..n).map(|_| g.random_range(-1.0f32..1.0)).collect()
    }

    /// A rows × cols operand stored inside a bigger buffer: transposed or not, with a row
    /// (or column) stride `pad` beyond the minimum and an offset of 3 floats.
    struct Operand {
        data: Vec<f32>,
        rs: usize,
        cs: usize,
    }

    const OFFSET: usize = 3;

    impl Operand {
        fn new(rows: usize, cols: usize, trans: bool, pad: usize, seed: u64) -> Self {
            let (rs, cs) = if trans {
                (1, rows + pad)
            } else {
                (cols + pad, 1)
            };
            let len = OFFSET + rows.max(1) * rs.max(1) + cols.max(1) * cs.max(1);
            Operand {
                data: values(len, seed),
                rs,
                cs,
            }
        }
        fn get(&self, i: usize, j: usize) -> f32 {
            self.data[OFFSET + i * self.rs + j * self.cs]
        }
        fn view(&self) -> Strided<'_> {
            Strided {
                data: &self.data[OFFSET..],
                rs: self.rs,
                cs: self.cs,
            }
        }
    }

    /// Runs one product on `parts` threads into a C with row stride n + 5 filled with
    /// `fill`, checks it against an f64 reference (and that the padding is untouched), and
    /// returns C.
    #[allow(clippy::too_many_arguments)]
    fn check(
        [m, n, k]: [usize; 3],
        ta: bool,
        tb: bool,
        alpha: f32,
        beta: f32,
        fill: f32,
        parts: usize,
        seed: u64,
    ) -> Vec<f32> {
        let a = Operand::new(m, k, ta, 2, seed);
        let b = Operand::new(k, n, tb, 1, seed + 1);
        let c_rs = n + 5;
        let mut c: Vec<f32> = if fill.is_nan() {
            vec![fill; m * c_rs]
        } else {
            values(m * c_rs, seed + 2)
        };
        let before = c.clone();
        sgemm(
            [m, n, k],
            alpha,
            a.view(),
            b.view(),
            beta,
            &mut c,
            c_rs,
            parts,
        );
        for i in 0..m {
            for j in 0..c_rs {
                let got = c[i * c_rs + j];
                if j >= n {
                    assert_eq!(got.to_bits(), before[i * c_rs + j].to_bits(), "padding");
                    continue;
                }
                let (mut want, mut size) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let t = f64::from(a.get(i, p)) * f64::from(b.get(p, j));
                    want += t;
                    size += t.abs();
                }
                want *= f64::from(alpha);
                size *= f64::from(alpha).abs();
                if beta != 0.0 {
                    let old = f64::from(before[i * c_rs + j]) * f64::from(beta);
                    want += old;
                    size += old.abs();
                }
                let tol = 4.0 * f64::from(f32::EPSILON) * (size + 1e-30) * (k as f64).sqrt();
                assert!(
                    (f64::from(got) - want).abs() <= tol.max(1e-6 * size),
                    "{m}x{k}x{n} ta {ta} tb {tb} alpha {alpha} beta {beta} parts {parts} \
                     ({i},{j}): {got} vs {want}"
                );
            }
        }
        c
    }

    #[test]
    fn matches_reference_on_edge_shapes_and_all_forms() {
        if !available() {
            return;
        }
        let dims = [1, 2, 5, 6, 7, 15, 16, 17, 33, 100, 171, 257];
        let mut seed = 1;
        for (x, &m) in dims.iter().enumerate() {
            for (y, &n) in dims.iter().enumerate() {
                let k = dims[(x * 5 + y * 7) % dims.len()];
                let form = (x + y) % 4;
                let (alpha, beta) = [(1.0, 0.0), (1.0, 1.0), (-0.75, 0.5), (2.5, 1.0)][y % 4];
                seed += 1;
                check(
                    [m, n, k],
                    form & 1 != 0,
                    form & 2 != 0,
                    alpha,
                    beta,
                    0.0,
                    1,
                    seed,
                );
            }
        }
    }

    /// Several k-blocks, several A blocks, and a B panel wider than NC.
    #[test]
    fn matches_reference_across_blocks() {
        if !available() {
            return;
        }
        check(
            [2 * MC + 7, 37, 2 * KC + 3],
            false,
            true,
            1.0,
            0.5,
            0.0,
            1,
            11,
        );
        check([9, NC + 21, 5], true, false, -1.0, 1.0, 0.0, 1, 12);
        check([13, 19, KC + 1], true, true, 0.5, 0.0, 0.0, 1, 13);
    }

    /// With beta = 0 the destination is not read: NaN there does not reach the result.
    #[test]
    fn beta_zero_ignores_nan_destination() {
        if !available() {
            return;
        }
        for (shape, parts) in [([7, 9, 3], 1), ([40, 35, 300], 2), ([6, 16, 8], 1)] {
            let c = check(shape, false, false, 1.5, 0.0, f32::NAN, parts, 21);
            let n = shape[1];
            assert!(c
                .chunks(n + 5)
                .all(|row| row[..n].iter().all(|v| v.is_finite())));
        }
    }

    /// Every thread count gives the same bits, splitting by rows (m ≥ n) and by columns.
    #[test]
    fn thread_count_does_not_change_bits() {
        if !available() {
            return;
        }
        for shape in [[61, 23, 300], [23, 61, 300], [200, 170, 40]] {
            let one = check(shape, true, false, 0.7, 1.3, 0.0, 1, 31);
            for parts in [2, 3, 5] {
                let many = check(shape, true, false, 0.7, 1.3, 0.0, parts, 31);
                assert!(
                    one.iter()
                        .zip(&many)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{shape:?} on {parts} threads"
                );
            }
        }
    }

    #[test]
    #[should_panic(expected = "operands too short")]
    fn short_operand_is_refused() {
        if !available() {
            panic!("operands too short (no AVX2 here)");
        }
        let a = vec![0.0; 5];
        let b = vec![0.0; 6];
        let mut c = vec![0.0; 4];
        let view = |d| Strided {
            data: d,
            rs: 3,
            cs: 1,
        };
        sgemm([2, 2, 3], 1.0, view(&a), view(&b), 0.0, &mut c, 2, 1);
    }
}
