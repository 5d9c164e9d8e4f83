//! Kubernetes `resource.Quantity` parsing and the two roundings the product needs:
//! [`Quantity::value_ceil`] (bytes, like Go's `q.Value()`) and [`Quantity::milli_ceil`]
//! (milli-cores, like `q.MilliValue()`), both rounded up.

use std::fmt;

/// A parsed quantity: `digits * 10^dec_exp * 1024^bin_exp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    digits: i128,
    dec_exp: i32,
    bin_exp: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a Kubernetes quantity (for example 500m, 2, 1.5Gi, 64Mi, 70k)")]
    Syntax(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

impl Quantity {
    /// Parses the Kubernetes quantity grammar: `<signed decimal><suffix>` where the suffix is a
    /// binary SI (`Ki Mi Gi Ti Pi Ei`), decimal SI (`n u m "" k M G T P E`) or exponent (`e3`).
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        // Nearly every quantity a pod carries is plain (`512Mi`, `2`, `500m`): read those
        // without the general grammar's passes over the text (it was a tenth of an
        // admission's own work).
        match Self::parse_plain(input) {
            Some(q) => Ok(q),
            None => Self::parse_general(input),
        }
    }

    /// The whole grammar.
    fn parse_general(input: &str) -> Result<Self, QuantityError> {
        let s = input.trim();
        let syntax = || QuantityError::Syntax(input.to_owned());
        let (negative, rest) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(syntax());
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        let mut digits: i128 = 0;
        for c in int_part.bytes().chain(frac_part.bytes()) {
            digits = digits
                .checked_mul(10)
                .and_then(|d| d.checked_add(i128::from(c - b'0')))
                .ok_or_else(|| QuantityError::TooLarge(input.to_owned()))?;
        }
        let frac_len = i32::try_from(frac_part.len()).map_err(|_| syntax())?;
        let (dec_exp, bin_exp) = match suffix_exponents(suffix) {
            Some(e) => e,
            None if suffix.starts_with(['e', 'E']) => {
                let e: i32 = suffix[1..].parse().map_err(|_| syntax())?;
                if !(-30..=30).contains(&e) {
                    return Err(QuantityError::TooLarge(input.to_owned()));
                }
                (e, 0)
            }
            None => return Err(syntax()),
        };
        Ok(Quantity {
            digits: if negative { -digits } else { digits },
            dec_exp: dec_exp - frac_len,
            bin_exp,
        })
    }

    /// `<1 to 18 digits><suffix>` (no sign, no fraction, no exponent, no spaces): the same
    /// value [`Quantity::parse`]'s general path gives, or `None` for anything else.
    fn parse_plain(input: &str) -> Option<Self> {
        let bytes = input.as_bytes();
        let end = bytes
            .iter()
            .position(|c| !c.is_ascii_digit())
            .unwrap_or(bytes.len());
        if end == 0 || end > 18 {
            return None;
        }
        // 18 digits fit an i64.
        let digits = bytes[..end]
            .iter()
            .fold(0i64, |n, c| n * 10 + i64::from(c - b'0'));
        let (dec_exp, bin_exp) = suffix_exponents(&input[end..])?;
        Some(Quantity {
            digits: i128::from(digits),
            dec_exp,
            bin_exp,
        })
    }

    /// The value scaled by `10^extra_dec`, rounded up to an integer; `None` past i64.
    fn scaled_ceil(&self, extra_dec: i32) -> Option<i64> {
        let exp = self.dec_exp + extra_dec;
        // The usual quantity fits an i64 all the way: no 128-bit arithmetic (a 128-bit
        // division is a library call).
        if let Ok(digits) = i64::try_from(self.digits)
            && let Some(scaled) = Self::scaled_ceil_i64(digits, self.bin_exp, exp)
        {
            return Some(scaled);
        }
        let mut n = self
            .digits
            .checked_mul(1024i128.checked_pow(self.bin_exp)?)?;
        if exp >= 0 {
            n = n.checked_mul(10i128.checked_pow(u32::try_from(exp).ok()?)?)?;
        } else {
            let div = 10i128.checked_pow(u32::try_from(-exp).ok()?)?;
            n = n.div_euclid(div) + i128::from(n.rem_euclid(div) != 0);
        }
        i64::try_from(n).ok()
    }

    /// [`Quantity::scaled_ceil`] in i64 arithmetic; `None` when a step leaves i64 (the
    /// caller then redoes it in i128, which also decides whether the result fits).
    fn scaled_ceil_i64(digits: i64, bin_exp: u32, exp: i32) -> Option<i64> {
        let n = digits.checked_mul(1024i64.checked_pow(bin_exp)?)?;
        if exp >= 0 {
            n.checked_mul(10i64.checked_pow(u32::try_from(exp).ok()?)?)
        } else {
            let div = 10i64.checked_pow(u32::try_from(-exp).ok()?)?;
            Some(n.div_euclid(div) + i64::from(n.rem_euclid(div) != 0))
        }
    }

    /// The integer value rounded up (bytes for memory), like Go's `q.Value()`.
    pub fn value_ceil(&self) -> Option<i64> {
        self.scaled_ceil(0)
    }

    /// The value in thousandths rounded up (milli-cores for cpu), like Go's `q.MilliValue()`.
    pub fn milli_ceil(&self) -> Option<i64> {
        self.scaled_ceil(3)
    }
}

/// The decimal and binary exponents of a suffix: binary SI (`Ki` .. `Ei`) or decimal SI (`n`
/// .. `E`, or none); `None` for an exponent (`e3`) or anything else.
fn suffix_exponents(suffix: &str) -> Option<(i32, u32)> {
    Some(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 1),
        "Mi" => (0, 2),
        "Gi" => (0, 3),
        "Ti" => (0, 4),
        "Pi" => (0, 5),
        "Ei" => (0, 6),
        _ => return None,
    })
}

/// Parses a quantity and returns its integer value rounded up, with a field-naming error.
pub fn parse_value(s: &str) -> Result<i64, QuantityError> {
    Quantity::parse(s)?
        .value_ceil()
        .ok_or_else(|| QuantityError::TooLarge(s.to_owned()))
}

/// Parses a quantity and returns its milli value rounded up.
pub fn parse_milli(s: &str) -> Result<i64, QuantityError> {
    Quantity::parse(s)?
        .milli_ceil()
        .ok_or_else(|| QuantityError::TooLarge(s.to_owned()))
}

/// Formats an integer in Kubernetes' canonical decimal-SI form, as the apiserver stores it:
/// `1000` -> `1k`, `70000` -> `70k`, `1500` -> `1500`, `2000000` -> `2M`.
pub fn format_decimal_si(value: i64) -> String {
    struct Canonical(i64);
    impl fmt::Display for Canonical {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let mut v = self.0;
            if v == 0 {
                return f.write_str("0");
            }
            let mut suffix = "";
            for s in ["k", "M", "G", "T", "P", "E"] {
                if v % 1000 != 0 {
                    break;
                }
                v /= 1000;
                suffix = s;
            }
            write!(f, "{v}{suffix}")
        }
    }
    Canonical(value).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let cases: &[(&str, Option<i64>, Option<i64>)] = &[
            // input, value_ceil, milli_ceil
            ("500m", Some(1), Some(500)),
            ("2", Some(2), Some(2000)),
            ("1.0001", Some(2), Some(1001)),
            ("0.5", Some(1), Some(500)),
            ("100Mi", Some(104_857_600), Some(104_857_600_000)),
            ("6Gi", Some(6_442_450_944), Some(6_442_450_944_000)),
            ("22Gi", Some(23_622_320_128), Some(23_622_320_128_000)),
            ("70k", Some(70_000), Some(70_000_000)),
            ("1e3", Some(1000), Some(1_000_000)),
            ("1.5Gi", Some(1_610_612_736), Some(1_610_612_736_000)),
            ("128974848", Some(128_974_848), Some(128_974_848_000)),
            ("129M", Some(129_000_000), Some(129_000_000_000)),
            ("1n", Some(1), Some(1)),
            ("0", Some(0), Some(0)),
            ("-1", Some(-1), Some(-1000)),
            ("9Ei", None, None),
        ];
        for (input, value, milli) in cases {
            let q = Quantity::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(q.value_ceil(), *value, "value of {input}");
            assert_eq!(q.milli_ceil(), *milli, "milli of {input}");
        }
    }

    proptest::proptest! {
        /// The i64 shortcut, when it answers, answers as 128-bit arithmetic does.
        #[test]
        fn i64_scaling_as_in_i128(digits in proptest::prelude::any::<i64>(), bin_exp in 0u32..7, exp in -25i32..25) {
            if let Some(fast) = Quantity::scaled_ceil_i64(digits, bin_exp, exp) {
                let n = i128::from(digits) * 1024i128.pow(bin_exp);
                let want = if exp >= 0 {
                    n * 10i128.pow(exp as u32)
                } else {
                    let div = 10i128.pow((-exp) as u32);
                    n.div_euclid(div) + i128::from(n.rem_euclid(div) != 0)
                };
                proptest::prop_assert_eq!(i128::from(fast), want);
            }
        }

        /// The plain-form shortcut gives what the general grammar gives, and declines the rest.
        #[test]
        fn plain_form_as_the_general_grammar_reads_it(
            text in "[+-]?[0-9]{0,20}(\\.[0-9]{0,3})?(|n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e3|Xi| )"
        ) {
            match Quantity::parse_plain(&text) {
                Some(q) => proptest::prop_assert_eq!(Ok(q), Quantity::parse_general(&text)),
                None => proptest::prop_assert!(
                    text.starts_with(['+', '-']) || text.contains(['.', 'e', ' '])
                        || !text.starts_with(|c: char| c.is_ascii_digit())
                        || text.bytes().take_while(u8::is_ascii_digit).count() > 18
                        || text.ends_with("Xi")
                ),
            }
        }
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "abc", "1.2.3", "5Xi", "m", ".", "1e", "1e99", "12 Mi"] {
            assert!(Quantity::parse(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn canonical_decimal() {
        for (v, s) in [
            (0, "0"),
            (500, "500"),
            (1000, "1k"),
            (1500, "1500"),
            (2000, "2k"),
            (70_000, "70k"),
            (2_000_000, "2M"),
        ] {
            assert_eq!(format_decimal_si(v), s);
        }
    }
}
