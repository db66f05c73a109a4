//! Decimal numbers of the `GEN` parameters (`temperature=0.8`, `top_p=0.95`) to `f32`.
//!
//! Written here rather than taken from `core`: `f32::from_str` links about 16 KB of code and
//! power-of-five tables into the firmware (a quarter of its 64 KiB budget) to handle exponents
//! and digits that no sampling parameter needs. This parser takes plain decimals of at most
//! [`MAX_DIGITS`] digits and returns the same correctly rounded `f32` as `f32::from_str` (the
//! tests compare the two), with integer arithmetic only: the firmware's cores have no f64 unit.

/// Most significant digits a decimal may have (leading and trailing zeros not counted), and most
/// places after the point. Nine are enough for every `f32` from 0.1 to below 10^9 as `{}` prints it
/// (the shortest form that reads back to the same value), and for any hand-written parameter.
pub const MAX_DIGITS: u32 = 9;

/// Parses `[digits][.digits]` (at least one digit; no sign, exponent or spaces) to the nearest
/// `f32`, ties to even. `None` for anything else or for more than [`MAX_DIGITS`] digits.
pub fn parse_f32(s: &str) -> Option<f32> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let int = int.trim_start_matches('0');
    let frac = frac.trim_end_matches('0');
    let all_digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if s.is_empty() || s == "." || !all_digits(int) || !all_digits(frac) {
        return None;
    }
    let mut mantissa: u64 = 0;
    let mut digits = 0;
    for b in int.bytes().chain(frac.bytes()) {
        if mantissa == 0 && b == b'0' {
            continue; // leading zeros of the fraction (0.05) carry no precision
        }
        digits += 1;
        if digits > MAX_DIGITS {
            return None;
        }
        mantissa = mantissa * 10 + u64::from(b - b'0');
    }
    // `frac` has at most MAX_DIGITS significant digits but may start with zeros: 0.000000001.
    let scale = u32::try_from(frac.len())
        .ok()
        .filter(|&k| k <= MAX_DIGITS)?;
    Some(round_ratio(mantissa, 10u64.pow(scale)))
}

/// `num / den` rounded to the nearest `f32`, ties to even, for `num < 10^9` and
/// `1 <= den <= 10^9` (both below 2^30, so every shift below stays inside 64 bits).
fn round_ratio(mut num: u64, mut den: u64) -> f32 {
    if num == 0 {
        return 0.0;
    }
    // Scale so that 2^24 <= num / den < 2^25: the quotient is 24 mantissa bits and a round bit.
    let mut exp: i32 = 0; // value = num / den * 2^exp
    while num < den << 24 {
        num <<= 1;
        exp -= 1;
    }
    while num >= den << 25 {
        den <<= 1;
        exp += 1;
    }
    let quotient = num / den;
    let sticky = num % den != 0;
    let mut mantissa = quotient >> 1;
    exp += 1;
    let round_bit = quotient & 1 == 1;
    if round_bit && (sticky || mantissa & 1 == 1) {
        mantissa += 1;
        if mantissa == 1 << 24 {
            mantissa >>= 1;
            exp += 1;
        }
    }
    // mantissa < 2^24 is exact in an f32, and 2^exp (|exp| < 60 for these inputs) is a normal
    // power of two, so the product is exact.
    let power = f32::from_bits(((exp + 127) as u32) << 23);
    mantissa as f32 * power
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;
    use std::string::String;

    fn both(s: &str) -> (Option<f32>, Option<f32>) {
        (parse_f32(s), s.parse::<f32>().ok())
    }

    #[test]
    fn plain_decimals_match_core() {
        for s in [
            "0",
            "0.0",
            "1",
            "1.",
            ".5",
            "0.8",
            "0.95",
            "1.5",
            "2",
            "10",
            "0.1",
            "0.7",
            "0.000000001",
            "999999999",
            "0.123456789",
            "16777217",
            "16777219",
            "0.300000012",
        ] {
            let (ours, core) = both(s);
            assert_eq!(ours.map(f32::to_bits), core.map(f32::to_bits), "{s}");
        }
    }

    #[test]
    fn every_scale_and_many_mantissas_match_core() {
        // A deterministic spread of 9-digit mantissas (an LCG), at every position of the point,
        // plus the halfway cases around 2^24 and 2^25 where ties to even decide.
        let mut x: u64 = 12345;
        let mut mantissas: std::vec::Vec<u64> = (16_777_200..16_777_240)
            .chain(33_554_420..33_554_460)
            .collect();
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            mantissas.push((x >> 33) % 1_000_000_000);
        }
        for m in mantissas {
            let digits = format!("{m}");
            for point in 0..=digits.len() {
                let s = format!("{}.{}", &digits[..point], &digits[point..]);
                let s = if s == "." { String::from("0") } else { s };
                let (ours, core) = both(&s);
                assert_eq!(ours.map(f32::to_bits), core.map(f32::to_bits), "{s}");
            }
        }
    }

    #[test]
    fn the_host_formatting_of_an_f32_parses_back_to_it() {
        // What `loglinear serial` sends: `{}` of the f32 it was given.
        let (lo, hi) = (0.1f32.to_bits(), 1000.0f32.to_bits());
        let mut x: u32 = 7;
        for _ in 0..20_000 {
            x = x.wrapping_mul(1664525).wrapping_add(1013904223);
            let v = f32::from_bits(lo + x % (hi - lo));
            let s = format!("{v}");
            assert_eq!(parse_f32(&s).map(f32::to_bits), Some(v.to_bits()), "{s}");
        }
        for v in [0.8f32, 0.95, 0.9, 1.0, 0.0, 0.7, 1.3, 0.05] {
            assert_eq!(parse_f32(&format!("{v}")), Some(v));
        }
    }

    #[test]
    fn anything_else_is_refused() {
        for s in [
            "",
            ".",
            "-1",
            "+1",
            "1e3",
            "1.5e-3",
            " 1",
            "1 ",
            "0x1",
            "inf",
            "NaN",
            "1..2",
            "1,5",
            "1234567890",
            "0.1234567891",
            "1.00000000001",
            "١",
        ] {
            assert_eq!(parse_f32(s), None, "{s:?}");
        }
        // Zeros that add no digits are not counted.
        assert_eq!(parse_f32("0000000000001.5000000000"), Some(1.5));
    }
}
