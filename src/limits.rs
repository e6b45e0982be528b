//! The memory limit on sizes that come from users: config dimensions, descriptor constants,
//! file and archive headers, command-line options. Each such size is checked here, with
//! overflow-safe arithmetic, before anything is allocated, so that a damaged or hostile input
//! gives a clear error instead of an allocation abort.
//!
//! The limit is half of the machine's memory (`MemTotal` in /proc/meminfo; 8 GiB where that is
//! unknown). `COMPNET_MAX_MEMORY` overrides it: a number of bytes with an optional `K`, `M`,
//! `G` or `T` suffix (powers of 1024), e.g. `COMPNET_MAX_MEMORY=64G`.

use std::sync::OnceLock;

/// The environment variable that sets the limit.
pub const ENV_VAR: &str = "COMPNET_MAX_MEMORY";

/// The allocation limit in bytes.
pub fn max_bytes() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var(ENV_VAR)
            .ok()
            .and_then(|v| parse_size(&v))
            .unwrap_or_else(|| machine_memory().map_or(8 << 30, |m| m / 2))
    })
}

/// Parses `123`, `64K`, `512M`, `8G`, `1T` (powers of 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, shift) = match s.chars().last()?.to_ascii_uppercase() {
        'K' => (&s[..s.len() - 1], 10),
        'M' => (&s[..s.len() - 1], 20),
        'G' => (&s[..s.len() - 1], 30),
        'T' => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    let n: u64 = digits.trim().parse().ok()?;
    n.checked_mul(1u64 << shift)
}

fn machine_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// Checks that `count` items of `item_bytes` bytes each fit the limit. The error text names
/// the size asked for, the limit and how to raise it; the caller adds where the size came from.
pub fn check_elements(count: u64, item_bytes: u64, what: &str) -> Result<(), String> {
    check_product(&[count, item_bytes], what)
}

/// Checks that the product of `factors` (a size in bytes) fits the limit, without overflow.
pub fn check_product(factors: &[u64], what: &str) -> Result<(), String> {
    let limit = max_bytes();
    let asked = factors.iter().try_fold(1u64, |acc, &f| acc.checked_mul(f));
    match asked {
        Some(bytes) if bytes <= limit => Ok(()),
        _ => Err(too_big(asked, limit, what)),
    }
}

/// The message for a size over the limit (`asked` is None when it overflowed 64 bits).
pub fn too_big(asked: Option<u64>, limit: u64, what: &str) -> String {
    let asked = asked.map_or_else(|| "more than 2^64 bytes".to_string(), human);
    format!(
        "{what} would need {asked}, over the memory limit of {} (set {ENV_VAR}, e.g. \
         {ENV_VAR}=64G, to raise it)",
        human(limit)
    )
}

/// Bytes in a readable form: `1.5 GiB (1610612736 bytes)`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = "bytes";
    for u in UNITS {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    if unit == "bytes" {
        format!("{bytes} bytes")
    } else {
        format!("{v:.1} {unit} ({bytes} bytes)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("123"), Some(123));
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size("3G"), Some(3 << 30));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("99999999999T"), None);
    }

    #[test]
    fn products_that_overflow_are_over_the_limit() {
        let e = check_product(&[u64::MAX, 2], "a test matrix").unwrap_err();
        assert!(e.contains("more than 2^64 bytes"), "{e}");
        assert!(e.contains(ENV_VAR), "{e}");
        assert!(check_product(&[4, 4], "small").is_ok());
    }
}
