//! JSON text written straight into a byte buffer: strings escaped exactly as `serde_json`
//! escapes them (so the bytes are the same), scanning eight bytes at a time, and integers.
//! The webhook writes the resolved-qos annotation and its admission patch with these: the
//! annotation is a JSON document carried inside a JSON string, so every admission escapes a
//! hundred quotes, and serde_json's byte-at-a-time loop was the largest single cost of
//! writing the response (docs/decisions.md, "A borrowed pod view and a hand-written response").

const LANES: usize = 8;
const ONES: u64 = u64::from_ne_bytes([0x01; LANES]);
const HIGHS: u64 = u64::from_ne_bytes([0x80; LANES]);

/// The high bit of every lane of `word` holding a byte below 0x20, a `"` or a `\\`: the bytes
/// serde_json escapes. Exact per lane (no borrow crosses lanes: the sums stay below 0x100),
/// so every flagged lane can be handled from one load.
#[inline]
fn escape_lanes(word: u64) -> u64 {
    const LOW7: u64 = ONES * 0x7f;
    // High bit set where the low seven bits are non-zero / at least 0x20.
    let is_zero = |v: u64| !(((v & LOW7) + LOW7) | v) & HIGHS;
    let below_space = !(((word & LOW7) + ONES * 0x60) | word) & HIGHS;
    below_space
        | is_zero(word ^ (ONES * u64::from(b'"')))
        | is_zero(word ^ (ONES * u64::from(b'\\')))
}

/// The escape serde_json writes for `byte` (one it flagged).
fn write_escape(out: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match byte {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(byte >> 4)],
            HEX[usize::from(byte & 0xf)],
        ]),
    }
}

/// The body of a JSON string (no quotes) for `s`.
///
/// Eight bytes at a time. Every copy is a fixed-size store of a whole word, cut back to the
/// bytes wanted, rather than a `memcpy` call per short run between quotes (an escaped
/// annotation has a quote every few bytes).
pub fn escaped(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    let mut from = 0;
    while let Some(chunk) = bytes.get(from..from + LANES) {
        let mut lanes = [0u8; LANES];
        lanes.copy_from_slice(chunk);
        let word = u64::from_le_bytes(lanes);
        let mut hits = escape_lanes(word);
        let mut done = 0;
        while hits != 0 {
            let at = (hits.trailing_zeros() / 8) as usize;
            // The bytes from `done` up to the escape, then the escape.
            out.extend_from_slice(&(word >> (8 * done)).to_le_bytes());
            out.truncate(out.len() - LANES + (at - done));
            write_escape(out, lanes[at]);
            done = at + 1;
            hits &= hits - 1;
        }
        if done < LANES {
            out.extend_from_slice(&(word >> (8 * done)).to_le_bytes());
            out.truncate(out.len() - done);
        }
        from += LANES;
    }
    for &byte in &bytes[from..] {
        if byte < 0x20 || byte == b'"' || byte == b'\\' {
            write_escape(out, byte);
        } else {
            out.push(byte);
        }
    }
}

/// An integer as serde_json writes it.
#[inline]
pub fn integer(out: &mut Vec<u8>, value: i64) {
    // Most numbers of an annotation are small (0, percentages, flags).
    if let Ok(small) = u8::try_from(value)
        && small < 100
    {
        if small >= 10 {
            out.push(b'0' + small / 10);
        }
        out.push(b'0' + small % 10);
        return;
    }
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[at..]);
}

/// `s` as a quoted JSON string.
pub fn string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    escaped(out, s);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    fn ours(s: &str) -> String {
        let mut out = Vec::new();
        super::string(&mut out, s);
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn every_byte_value_escapes_as_serde_json_does() {
        for c in (0u32..0x100).filter_map(char::from_u32) {
            for s in [
                c.to_string(),
                format!("abcdefgh{c}ij"),
                format!("{c}{c}{c}{c}{c}{c}{c}{c}{c}"),
            ] {
                assert_eq!(ours(&s), serde_json::to_string(&s).expect("json"), "{c:?}");
            }
        }
    }

    #[test]
    fn integers_as_serde_json_writes_them() {
        for v in [
            0,
            1,
            -1,
            9,
            10,
            -10,
            1 << 40,
            i64::MAX,
            i64::MIN,
            23_622_320_128,
        ] {
            let mut out = Vec::new();
            super::integer(&mut out, v);
            assert_eq!(out, serde_json::to_vec(&v).expect("json"), "{v}");
        }
    }

    #[test]
    fn an_annotation_inside_a_string() {
        let doc = r#"{"version":1,"qosClass":"LS","containers":{"a\\b":{"memory.high":"max"}}}"#;
        assert_eq!(ours(doc), serde_json::to_string(doc).expect("json"));
    }

    proptest! {
        #[test]
        fn any_string_escapes_as_serde_json_does(s in any::<String>()) {
            prop_assert_eq!(ours(&s), serde_json::to_string(&s).expect("json"));
        }

        #[test]
        fn any_integer_as_serde_json_writes_it(v in any::<i64>()) {
            let mut out = Vec::new();
            super::integer(&mut out, v);
            prop_assert_eq!(out, serde_json::to_vec(&v).expect("json"));
        }

        #[test]
        fn ascii_with_escapes_escapes_as_serde_json_does(s in "[ -~\"\\\\\t\n\r\u{0}-\u{1f}\u{7f}]{0,64}") {
            prop_assert_eq!(ours(&s), serde_json::to_string(&s).expect("json"));
        }
    }
}
