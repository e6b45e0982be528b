//! `COMPNET_GPU_PROFILE=1` (or `2`, products by shape): a table of the GPU backend's calls, printed to stderr when the
//! command ends. For each kernel, cuBLAS product, copy, memset and fresh allocation: how
//! many there were, the wall time from the call to the end of its wait for the GPU, the
//! bytes (or, for products, the flops), and the host time spent since the previous GPU call
//! ended (large where host code, such as an operation without a kernel, ran before it).
//! With `COMPNET_GPU_ASYNC=1` the calls are not waited for, so their times are the launches'
//! alone, and the row "host waits for queued work" counts and times the waits of host code
//! for the queue.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

#[derive(Default, Clone, Copy)]
struct Entry {
    count: u64,
    gpu_secs: f64,
    host_secs_before: f64,
    amount: u64,
}

struct Profile {
    started: Instant,
    last_end: Option<Instant>,
    entries: HashMap<&'static str, Entry>,
}

fn profile() -> Option<&'static Mutex<Profile>> {
    static P: OnceLock<Option<Mutex<Profile>>> = OnceLock::new();
    P.get_or_init(|| {
        matches!(
            std::env::var("COMPNET_GPU_PROFILE").as_deref(),
            Ok("1" | "2")
        )
        .then(|| {
            Mutex::new(Profile {
                started: Instant::now(),
                last_end: None,
                entries: HashMap::new(),
            })
        })
    })
    .as_ref()
}

/// With `COMPNET_GPU_PROFILE=2`, products are listed by shape: the name for one of m×n×k
/// with these transpositions (else the one name all products share).
pub(in crate::matrix) fn product_name(
    m: usize,
    n: usize,
    k: usize,
    ta: bool,
    tb: bool,
) -> &'static str {
    static DETAILED: OnceLock<bool> = OnceLock::new();
    static NAMES: OnceLock<Mutex<HashMap<String, &'static str>>> = OnceLock::new();
    if !*DETAILED.get_or_init(|| std::env::var("COMPNET_GPU_PROFILE").as_deref() == Ok("2")) {
        return "cublas sgemm";
    }
    let key = format!(
        "sgemm {m}x{n}x{k} {}{}",
        if ta { 'T' } else { 'N' },
        if tb { 'T' } else { 'N' }
    );
    let mut names = NAMES.get_or_init(Default::default).lock().expect("profile");
    names
        .entry(key.clone())
        .or_insert_with(|| Box::leak(key.into_boxed_str()))
}

/// True when GPU calls are being timed (each then waits for the GPU, to be timed alone,
/// unless `COMPNET_GPU_ASYNC=1`).
pub(in crate::matrix) fn enabled() -> bool {
    profile().is_some()
}

/// Starts timing a GPU call (`None` when not profiling).
pub(in crate::matrix) fn begin() -> Option<Instant> {
    profile().map(|_| Instant::now())
}

/// Ends the timing that `begin` started: `what` took from `start` until now, and moved
/// `amount` bytes (or flops).
pub(in crate::matrix) fn end(start: Option<Instant>, what: &'static str, amount: u64) {
    let (Some(start), Some(p)) = (start, profile()) else {
        return;
    };
    let now = Instant::now();
    let mut p = p.lock().expect("profile");
    let host = p
        .last_end
        .map_or(0.0, |e| start.saturating_duration_since(e).as_secs_f64());
    p.last_end = Some(now);
    let e = p.entries.entry(what).or_default();
    e.count += 1;
    e.gpu_secs += (now - start).as_secs_f64();
    e.host_secs_before += host;
    e.amount += amount;
}

/// The table, when profiling (most GPU time first).
pub(in crate::matrix) fn report() -> Option<String> {
    let p = profile()?.lock().expect("profile");
    if p.entries.is_empty() {
        return None;
    }
    let total = p.started.elapsed().as_secs_f64();
    let mut rows: Vec<(&str, Entry)> = p.entries.iter().map(|(k, v)| (*k, *v)).collect();
    rows.sort_by(|a, b| b.1.gpu_secs.total_cmp(&a.1.gpu_secs));
    let gpu: f64 = rows.iter().map(|r| r.1.gpu_secs).sum();
    let host: f64 = rows.iter().map(|r| r.1.host_secs_before).sum();
    let mut s = format!(
        "GPU profile: {total:.3} s since the GPU was started; {gpu:.3} s in GPU calls, \
         {host:.3} s of host time between them\n{:<32} {:>9} {:>10} {:>10} {:>12}\n",
        "call", "count", "gpu ms", "host ms", "MB or MFlop"
    );
    for (name, e) in rows {
        s += &format!(
            "{name:<32} {:>9} {:>10.1} {:>10.1} {:>12.1}\n",
            e.count,
            e.gpu_secs * 1e3,
            e.host_secs_before * 1e3,
            e.amount as f64 / 1e6
        );
    }
    Some(s)
}
