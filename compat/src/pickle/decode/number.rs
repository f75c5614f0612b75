//! Numbers as the text opcodes (`INT`, `LONG`, `FLOAT`, memo keys) and the
//! binary `LONG1`/`LONG4` carry them, parsed the way CPython's C unpickler
//! does.

/// Decimal digits CPython 3.11+ converts by default
/// (`sys.int_info.default_max_str_digits`): decimal conversion is quadratic,
/// so a longer literal would be a cheap way to burn CPU.
const MAX_DECIMAL_DIGITS: usize = 4300;

/// An integer value: small when it fits in 64 bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Int {
    /// Fits in an `i64`.
    Small(i64),
    /// Minimal little-endian two's complement, longer than 8 bytes.
    Big(Vec<u8>),
}

/// What the protocol-0 `INT` opcode yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum IntOpcodeValue {
    /// `I00`/`I01` (and what C's `strtol` reads as 0 or 1 in two bytes).
    Bool(bool),
    /// Any other integer.
    Int(Int),
}

/// Parses the argument of `INT` (the line without its newline) like
/// `_pickle.c`'s `load_int`: C `strtol` with base 0 first, a two-byte
/// literal worth 0 or 1 is a bool (protocol 0 writes `True` as `I01`), and
/// anything `strtol` cannot take whole goes to Python's `int(text, 0)`.
pub(super) fn parse_int_opcode(line: &[u8]) -> Result<IntOpcodeValue, String> {
    if line.is_empty() {
        return Err("empty INT argument".to_owned());
    }
    let text = until_nul(line);
    if let Some(value) = strtol_base0(text) {
        if line.len() == 2 && (value == 0 || value == 1) {
            return Ok(IntOpcodeValue::Bool(value == 1));
        }
        return Ok(IntOpcodeValue::Int(Int::Small(value)));
    }
    parse_python_int(text, Radix::Auto).map(IntOpcodeValue::Int)
}

/// Parses the argument of `LONG` (the line without its newline): an
/// optional trailing `L` (Python 2), then Python's `int(text, 0)`.
pub(super) fn parse_long_opcode(line: &[u8]) -> Result<Int, String> {
    if line.is_empty() {
        return Err("empty LONG argument".to_owned());
    }
    let text = line.strip_suffix(b"L").unwrap_or(line);
    parse_python_int(until_nul(text), Radix::Auto)
}

/// Parses a protocol-0 memo key (`GET`, `PUT`): Python's `int(text, 10)`,
/// which must be non-negative.
pub(super) fn parse_memo_key(line: &[u8]) -> Result<u64, String> {
    match parse_python_int(until_nul(line), Radix::Decimal)? {
        Int::Small(value) => u64::try_from(value).map_err(|_| format!("negative memo key {value}")),
        Int::Big(_) => Err(format!("memo key {} out of range", excerpt(line))),
    }
}

/// Parses the argument of `FLOAT` like `_pickle.c`'s `load_float`
/// (`PyOS_string_to_double`: no surrounding spaces, no underscores, `inf`
/// and `nan` in any case, overflow is an error).
pub(super) fn parse_float(line: &[u8]) -> Result<f64, String> {
    let text = until_nul(line);
    let invalid = || format!("could not convert {} to float", excerpt(line));
    let text = std::str::from_utf8(text).map_err(|_| invalid())?;
    let value: f64 = text.parse().map_err(|_| invalid())?;
    if value.is_infinite() && !text.to_ascii_lowercase().contains("inf") {
        return Err(format!("float {} out of range", excerpt(line)));
    }
    Ok(value)
}

/// An integer from little-endian two's complement bytes (`LONG1`, `LONG4`),
/// normalized: small when it fits in an `i64`, otherwise minimal bytes.
pub(super) fn int_from_le_twos_complement(bytes: &[u8]) -> Int {
    let mut minimal = bytes;
    while let Some((&last, rest)) = minimal.split_last() {
        let redundant = match rest.last() {
            Some(&previous) => {
                (last == 0x00 && previous & 0x80 == 0) || (last == 0xff && previous & 0x80 != 0)
            }
            None => false,
        };
        if !redundant {
            break;
        }
        minimal = rest;
    }
    if minimal.len() > 8 {
        return Int::Big(minimal.to_vec());
    }
    let negative = minimal.last().is_some_and(|&top| top & 0x80 != 0);
    let mut buffer = if negative { [0xff; 8] } else { [0x00; 8] };
    for (slot, &byte) in buffer.iter_mut().zip(minimal) {
        *slot = byte;
    }
    Int::Small(i64::from_le_bytes(buffer))
}

/// How `int(text, base)` picks the base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Radix {
    /// Base 0: `0x`, `0o`, `0b` prefixes, otherwise decimal without leading
    /// zeros.
    Auto,
    /// Base 10, leading zeros allowed.
    Decimal,
}

/// Python's `int(text, base)` for base 0 or 10 (`PyLong_FromString`):
/// surrounding whitespace, a sign, digits with single underscores between
/// them.
pub(super) fn parse_python_int(text: &[u8], radix: Radix) -> Result<Int, String> {
    let invalid = || {
        let base = if radix == Radix::Auto { 0 } else { 10 };
        format!(
            "invalid literal for int() with base {base}: {}",
            excerpt(text)
        )
    };
    let trimmed = trim_c_space_end(trim_c_space_start(text));
    let (negative, unsigned) = match trimmed.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, trimmed),
    };
    let (base, body, after_prefix) = match (radix, unsigned) {
        (Radix::Auto, [b'0', b'x' | b'X', rest @ ..]) => (16, rest, true),
        (Radix::Auto, [b'0', b'o' | b'O', rest @ ..]) => (8, rest, true),
        (Radix::Auto, [b'0', b'b' | b'B', rest @ ..]) => (2, rest, true),
        _ => (10, unsigned, false),
    };
    let digits = digit_values(body, base, after_prefix).ok_or_else(invalid)?;
    if radix == Radix::Auto
        && base == 10
        && digits.first() == Some(&0)
        && digits.iter().any(|&d| d != 0)
    {
        // Python 3 refuses `010`: it would read as octal in Python 2.
        return Err(invalid());
    }
    let magnitude = match base {
        2 => magnitude_from_power_of_two_digits(&digits, 1),
        8 => magnitude_from_power_of_two_digits(&digits, 3),
        16 => magnitude_from_power_of_two_digits(&digits, 4),
        _ => {
            if digits.len() > MAX_DECIMAL_DIGITS {
                return Err(format!(
                    "integer literal of {} decimal digits exceeds CPython's limit of {MAX_DECIMAL_DIGITS}",
                    digits.len()
                ));
            }
            magnitude_from_decimal_digits(&digits)
        }
    };
    Ok(int_from_magnitude(negative, &magnitude))
}

/// The digit values of `body` in `base`, or `None` when it is not a
/// well-formed digit sequence (underscores only between digits, or right
/// after a base prefix).
fn digit_values(body: &[u8], base: u32, after_prefix: bool) -> Option<Vec<u8>> {
    let mut digits = Vec::with_capacity(body.len());
    // An underscore may follow a digit or a base prefix, never another
    // underscore, and may not end the literal.
    let mut underscore_allowed = after_prefix;
    let mut last_was_underscore = false;
    for &byte in body {
        if byte == b'_' {
            if !underscore_allowed {
                return None;
            }
            underscore_allowed = false;
            last_was_underscore = true;
            continue;
        }
        let value = char::from(byte).to_digit(base)?;
        digits.push(u8::try_from(value).ok()?);
        underscore_allowed = true;
        last_was_underscore = false;
    }
    if digits.is_empty() || last_was_underscore {
        return None;
    }
    Some(digits)
}

/// Little-endian 32-bit limbs from most-significant-first digits of a base
/// `2^bits_per_digit`: linear, so hexadecimal literals need no length cap.
fn magnitude_from_power_of_two_digits(digits: &[u8], bits_per_digit: u32) -> Vec<u32> {
    let mut limbs = Vec::with_capacity(digits.len() / 8 + 1);
    let mut accumulator: u64 = 0;
    let mut filled = 0;
    for &digit in digits.iter().rev() {
        accumulator |= u64::from(digit) << filled;
        filled += bits_per_digit;
        if filled >= 32 {
            limbs.push(accumulator as u32);
            accumulator >>= 32;
            filled -= 32;
        }
    }
    if filled > 0 {
        limbs.push(accumulator as u32);
    }
    limbs
}

/// Little-endian 32-bit limbs from decimal digits, nine at a time.
fn magnitude_from_decimal_digits(digits: &[u8]) -> Vec<u32> {
    let mut limbs: Vec<u32> = Vec::with_capacity(digits.len() / 9 + 1);
    for chunk in digits.chunks(9) {
        let mut multiplier: u64 = 1;
        let mut addend: u64 = 0;
        for &digit in chunk {
            multiplier *= 10;
            addend = addend * 10 + u64::from(digit);
        }
        let mut carry = addend;
        for limb in &mut limbs {
            let product = u64::from(*limb) * multiplier + carry;
            *limb = product as u32;
            carry = product >> 32;
        }
        if carry > 0 {
            limbs.push(carry as u32);
        }
    }
    limbs
}

/// A signed integer from a sign and a magnitude in 32-bit limbs.
fn int_from_magnitude(negative: bool, limbs: &[u32]) -> Int {
    let mut bytes: Vec<u8> = limbs.iter().flat_map(|limb| limb.to_le_bytes()).collect();
    // Room for the sign bit, so that the magnitude never reads as negative.
    bytes.push(0);
    if negative {
        let mut carry = true;
        for byte in &mut bytes {
            let (sum, overflow) = (!*byte).overflowing_add(u8::from(carry));
            *byte = sum;
            carry = overflow;
        }
    }
    int_from_le_twos_complement(&bytes)
}

/// C `strtol(text, &end, 0)` accepted only when it reads all of `text` and
/// fits an `i64`: leading whitespace, a sign, then `0x` hexadecimal, `0`
/// octal or decimal.
fn strtol_base0(text: &[u8]) -> Option<i64> {
    let body = trim_c_space_start(text);
    let (negative, unsigned) = match body.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, body),
    };
    let (base, digits) = match unsigned {
        [b'0', b'x' | b'X', next, ..] if next.is_ascii_hexdigit() => (16, unsigned.get(2..)?),
        [b'0', ..] => (8, unsigned),
        _ => (10, unsigned),
    };
    if digits.is_empty() {
        // No conversion: C's `strtol` leaves `end` at the start, which is
        // the end only for an empty string.
        return text.is_empty().then_some(0);
    }
    let mut magnitude: u64 = 0;
    for &byte in digits {
        let digit = char::from(byte).to_digit(base)?;
        magnitude = magnitude
            .checked_mul(u64::from(base))?
            .checked_add(u64::from(digit))?;
    }
    if negative && magnitude == 1 << 63 {
        Some(i64::MIN)
    } else {
        let value = i64::try_from(magnitude).ok()?;
        Some(if negative { -value } else { value })
    }
}

/// Whether C's `isspace` (and CPython's `Py_ISSPACE`) holds: unlike
/// [`u8::is_ascii_whitespace`], this includes vertical tab.
fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn trim_c_space_start(text: &[u8]) -> &[u8] {
    let start = text
        .iter()
        .position(|&b| !is_c_space(b))
        .unwrap_or(text.len());
    text.get(start..).unwrap_or_default()
}

fn trim_c_space_end(text: &[u8]) -> &[u8] {
    let end = text
        .iter()
        .rposition(|&b| !is_c_space(b))
        .map_or(0, |last| last + 1);
    text.get(..end).unwrap_or_default()
}

/// The bytes before the first NUL: C reads the line as a C string.
fn until_nul(line: &[u8]) -> &[u8] {
    line.split(|&byte| byte == 0).next().unwrap_or(line)
}

/// A short printable form of an argument for error messages.
pub(super) fn excerpt(bytes: &[u8]) -> String {
    const MAX: usize = 40;
    let shown: String = bytes
        .iter()
        .take(MAX)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    if bytes.len() > MAX {
        format!("'{shown}...' ({} bytes)", bytes.len())
    } else {
        format!("'{shown}'")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(value: i64) -> Result<Int, String> {
        Ok(Int::Small(value))
    }

    #[test]
    fn int_opcode_follows_the_c_unpickler() {
        use IntOpcodeValue::{Bool, Int as I};
        // Each expectation is what CPython 3.11's pickle.loads(b"I" + text + b"\n.") gives.
        let cases: &[(&[u8], Result<IntOpcodeValue, ()>)] = &[
            (b"01", Ok(Bool(true))),
            (b"00", Ok(Bool(false))),
            (b" 1", Ok(Bool(true))),
            (b"+1", Ok(Bool(true))),
            (b"-0", Ok(Bool(false))),
            (b"1", Ok(I(Int::Small(1)))),
            (b" 00", Ok(I(Int::Small(0)))),
            (b"010", Ok(I(Int::Small(8)))),
            (b"0x10", Ok(I(Int::Small(16)))),
            (b"0b11", Ok(I(Int::Small(3)))),
            (b"1_0", Ok(I(Int::Small(10)))),
            (b"00_0", Ok(I(Int::Small(0)))),
            (b" 5 ", Ok(I(Int::Small(5)))),
            (b"1\0x", Ok(I(Int::Small(1)))),
            (b"-2147483648", Ok(I(Int::Small(-2147483648)))),
            (b"-9223372036854775808", Ok(I(Int::Small(i64::MIN)))),
            (b"0_1", Err(())),
            (b"08", Err(())),
            (b"", Err(())),
            (b" ", Err(())),
            (b"1__0", Err(())),
            (b"1_", Err(())),
            (b"abc", Err(())),
        ];
        for (text, expected) in cases {
            let got = parse_int_opcode(text).map_err(|_| ());
            assert_eq!(&got, expected, "I{}", String::from_utf8_lossy(text));
        }
        // 99999999999999999999 = 0x56bc75e2d630fffff
        assert_eq!(
            parse_int_opcode(b"99999999999999999999"),
            Ok(I(Int::Big(vec![
                0xff, 0xff, 0x0f, 0x63, 0x2d, 0x5e, 0xc7, 0x6b, 0x05
            ])))
        );
    }

    #[test]
    fn long_opcode_strips_the_python2_suffix() {
        assert_eq!(parse_long_opcode(b"5L"), small(5));
        assert_eq!(parse_long_opcode(b"5"), small(5));
        assert_eq!(parse_long_opcode(b"-0x_fL"), small(-15));
        assert!(parse_long_opcode(b"L").is_err());
        assert!(parse_long_opcode(b"").is_err());
        // -2**64
        assert_eq!(
            parse_long_opcode(b"-18446744073709551616L"),
            Ok(Int::Big(vec![0, 0, 0, 0, 0, 0, 0, 0, 0xff]))
        );
        // 2**63
        assert_eq!(
            parse_long_opcode(b"9223372036854775808"),
            Ok(Int::Big(vec![0, 0, 0, 0, 0, 0, 0, 0x80, 0]))
        );
        assert_eq!(parse_long_opcode(b"-9223372036854775808"), small(i64::MIN));
    }

    #[test]
    fn decimal_literals_are_capped_like_cpython() {
        let at_limit = vec![b'7'; MAX_DECIMAL_DIGITS];
        parse_long_opcode(&at_limit).expect("a long at the limit");
        let over = vec![b'7'; MAX_DECIMAL_DIGITS + 1];
        assert!(parse_long_opcode(&over).unwrap_err().contains("4300"));
        // Power-of-two bases convert in linear time and have no cap in CPython either.
        let mut hex = b"0x".to_vec();
        hex.extend(std::iter::repeat_n(b'f', 100_000));
        match parse_long_opcode(&hex) {
            Ok(Int::Big(bytes)) => assert_eq!(bytes.len(), 50_001),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn memo_keys_are_decimal_and_non_negative() {
        assert_eq!(parse_memo_key(b"010"), Ok(10));
        assert_eq!(parse_memo_key(b"7"), Ok(7));
        assert!(parse_memo_key(b"-1").is_err());
        assert!(parse_memo_key(b"0x1").is_err());
        assert!(parse_memo_key(b"99999999999999999999999").is_err());
    }

    #[test]
    fn floats_follow_py_os_string_to_double() {
        assert_eq!(parse_float(b"1.5"), Ok(1.5));
        assert_eq!(parse_float(b"+1.5"), Ok(1.5));
        assert_eq!(parse_float(b".5"), Ok(0.5));
        assert_eq!(parse_float(b"5."), Ok(5.0));
        assert_eq!(parse_float(b"1\0x"), Ok(1.0));
        assert_eq!(parse_float(b"Infinity"), Ok(f64::INFINITY));
        assert_eq!(parse_float(b"-inf"), Ok(f64::NEG_INFINITY));
        assert!(parse_float(b"NaN").is_ok_and(f64::is_nan));
        assert!(parse_float(b"1e500").is_err());
        assert!(parse_float(b"1.5 ").is_err());
        assert!(parse_float(b"1_0").is_err());
        assert!(parse_float(b"").is_err());
    }

    #[test]
    fn twos_complement_is_normalized() {
        assert_eq!(int_from_le_twos_complement(b""), Int::Small(0));
        assert_eq!(int_from_le_twos_complement(&[0xff]), Int::Small(-1));
        assert_eq!(int_from_le_twos_complement(&[0xff, 0x00]), Int::Small(255));
        assert_eq!(int_from_le_twos_complement(&[0x00; 20]), Int::Small(0));
        assert_eq!(int_from_le_twos_complement(&[0xff; 20]), Int::Small(-1));
        assert_eq!(
            int_from_le_twos_complement(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0, 0]),
            Int::Big(vec![0, 0, 0, 0, 0, 0, 0, 0x80, 0])
        );
        assert_eq!(
            int_from_le_twos_complement(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0xff]),
            Int::Small(i64::MIN)
        );
    }
}
