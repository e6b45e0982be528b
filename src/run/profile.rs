//! `COMPNET_PROFILE=1`: wall time per stage (each kind of command the runtime executes, by
//! component type for Propagate and Backprop, and the trainer's steps around them), printed
//! to stderr when a command ends. On a GPU every operation waits for the device, so a
//! stage's time includes its GPU work.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

type Table = Mutex<HashMap<String, (u64, f64)>>;

fn table() -> Option<&'static Table> {
    static T: OnceLock<Option<Table>> = OnceLock::new();
    T.get_or_init(|| {
        (std::env::var("COMPNET_PROFILE").as_deref() == Ok("1")).then(|| Mutex::new(HashMap::new()))
    })
    .as_ref()
}

/// True when stages are being timed.
pub fn enabled() -> bool {
    table().is_some()
}

/// Runs `f`, adding its wall time to stage `key()` when profiling.
pub fn timed<T>(key: impl FnOnce() -> String, f: impl FnOnce() -> T) -> T {
    let Some(t) = table() else {
        return f();
    };
    let start = Instant::now();
    let r = f();
    let secs = start.elapsed().as_secs_f64();
    let mut t = t.lock().expect("profile");
    let e = t.entry(key()).or_default();
    e.0 += 1;
    e.1 += secs;
    r
}

/// The table, when profiling (most time first).
pub fn report() -> Option<String> {
    let t = table()?.lock().expect("profile");
    if t.is_empty() {
        return None;
    }
    let mut rows: Vec<(&String, &(u64, f64))> = t.iter().collect();
    rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
    let mut s = format!(
        "stage profile\n{:<44} {:>9} {:>10}\n",
        "stage", "count", "ms"
    );
    for (k, (n, secs)) in rows {
        s += &format!("{k:<44} {n:>9} {:>10.1}\n", secs * 1e3);
    }
    Some(s)
}
