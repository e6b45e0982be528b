//! Log lines in Kaldi's shape, so its python drivers can parse ours: `LOG (<program>) <text>`
//! on stderr, numbers as C++ streams print them (6 significant digits, `%g` style).

/// `x` as C++'s default `ostream << x` prints a float or double: at most 6 significant
/// digits, trailing zeros dropped, scientific form for exponents below -4 or from 6 up.
pub fn fmt_g(x: f64) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // The exponent after rounding to 6 significant digits decides the form.
    let sci = format!("{x:.5e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let m = trim_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (5 - exp).max(0) as usize;
        trim_zeros(&format!("{x:.decimals$}")).to_string()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// Prints `LOG (<program>) <text>` on stderr.
pub fn log(program: &str, text: &str) {
    eprintln!("LOG ({program}) {text}");
}

/// Prints `WARNING (<program>) <text>` on stderr.
pub fn warn(program: &str, text: &str) {
    eprintln!("WARNING ({program}) {text}");
}

#[cfg(test)]
mod tests {
    use super::fmt_g;

    #[test]
    fn formats_like_a_cpp_stream() {
        for (x, want) in [
            (-3.34665f64, "-3.34665"),
            (-2.7681249, "-2.76812"),
            (160.0, "160"),
            (0.1875, "0.1875"),
            (1.1e-5, "1.1e-05"),
            (0.000453, "0.000453"),
            (1234567.0, "1.23457e+06"),
            (123456.4, "123456"),
            (-0.5, "-0.5"),
            (100.0, "100"),
            (99.99999, "100"),
            (113.3568, "113.357"),
        ] {
            assert_eq!(fmt_g(x), want, "{x}");
        }
    }
}
