//! The two escaped text encodings of protocol 0: Python 2 `str` literals
//! (`STRING`) and `raw-unicode-escape` (`UNICODE`).

use super::error::DecodeErrorCode;
use super::number::excerpt;

/// The argument of `STRING` (the line without its newline): a quoted
/// Python bytes literal, unquoted and unescaped like CPython's
/// `codecs.escape_decode`.
pub(super) fn unquote_string_literal(line: &[u8]) -> Result<Vec<u8>, String> {
    let quoted = match line {
        [first @ (b'\'' | b'"'), inner @ .., last] if first == last => inner,
        _ => {
            return Err(format!(
                "the STRING argument {} must be quoted",
                excerpt(line)
            ));
        }
    };
    escape_decode(quoted)
}

/// Python's `codecs.escape_decode`: backslash escapes of a bytes literal;
/// an unknown escape keeps its backslash, and an octal escape above `\377`
/// wraps to a byte, as CPython 3.11 does.
fn escape_decode(text: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some((&byte, after)) = rest.split_first() {
        rest = after;
        if byte != b'\\' {
            out.push(byte);
            continue;
        }
        let Some((&escape, after)) = rest.split_first() else {
            return Err("trailing \\ in a STRING argument".to_owned());
        };
        let position = text.len().saturating_sub(rest.len() + 1);
        rest = after;
        match escape {
            b'\n' => {}
            b'\\' | b'\'' | b'"' => out.push(escape),
            b'a' => out.push(0x07),
            b'b' => out.push(0x08),
            b't' => out.push(b'\t'),
            b'n' => out.push(b'\n'),
            b'v' => out.push(0x0b),
            b'f' => out.push(0x0c),
            b'r' => out.push(b'\r'),
            b'0'..=b'7' => {
                let mut value = u32::from(escape - b'0');
                for _ in 0..2 {
                    match rest.split_first() {
                        Some((&digit @ b'0'..=b'7', after)) => {
                            value = value * 8 + u32::from(digit - b'0');
                            rest = after;
                        }
                        _ => break,
                    }
                }
                out.push(value.to_le_bytes()[0]);
            }
            b'x' => {
                let high = rest.first().and_then(|&b| char::from(b).to_digit(16));
                let low = rest.get(1).and_then(|&b| char::from(b).to_digit(16));
                let (Some(high), Some(low)) = (high, low) else {
                    return Err(format!(
                        "invalid \\x escape at position {position} of a STRING argument"
                    ));
                };
                out.push(((high << 4) | low).to_le_bytes()[0]);
                rest = rest.get(2..).unwrap_or_default();
            }
            _ => {
                // Unknown escapes stay as written (a DeprecationWarning in
                // CPython); the character after the backslash is ordinary.
                out.push(b'\\');
                out.push(escape);
            }
        }
    }
    Ok(out)
}

/// Python's `raw-unicode-escape` decoding (the `UNICODE` argument): bytes
/// are Latin-1 except `\uXXXX` and `\UXXXXXXXX` after an odd number of
/// backslashes.
pub(super) fn decode_raw_unicode_escape(text: &[u8]) -> Result<String, DecodeErrorCode> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((&byte, after)) = rest.split_first() {
        if byte != b'\\' {
            out.push(char::from(byte));
            rest = after;
            continue;
        }
        let run = rest.iter().take_while(|&&b| b == b'\\').count();
        rest = rest.get(run..).unwrap_or_default();
        let width = match rest.first() {
            Some(b'u') if run % 2 == 1 => 4,
            Some(b'U') if run % 2 == 1 => 8,
            _ => {
                out.extend(std::iter::repeat_n('\\', run));
                continue;
            }
        };
        out.extend(std::iter::repeat_n('\\', run - 1));
        let digits = rest
            .get(1..=width)
            .filter(|digits| digits.iter().all(u8::is_ascii_hexdigit));
        let Some(digits) = digits else {
            let escape = if width == 4 { "\\uXXXX" } else { "\\UXXXXXXXX" };
            return Err(DecodeErrorCode::InvalidLiteral(format!(
                "truncated {escape} escape in a UNICODE argument"
            )));
        };
        let code = digits
            .iter()
            .filter_map(|&b| char::from(b).to_digit(16))
            .fold(0u32, |code, digit| (code << 4) | digit);
        if code > 0x10ffff {
            return Err(DecodeErrorCode::InvalidLiteral(format!(
                "\\U{code:08x} out of range in a UNICODE argument"
            )));
        }
        // Only a surrogate is left that is no `char`: Python allows lone
        // surrogates in a str, Rust does not.
        out.push(char::from_u32(code).ok_or(DecodeErrorCode::InvalidUtf8)?);
        rest = rest.get(1 + width..).unwrap_or_default();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_literals_unescape_like_codecs_escape_decode() {
        // Expectations from CPython 3.11's codecs.escape_decode.
        let cases: &[(&[u8], &[u8])] = &[
            (b"'abc'", b"abc"),
            (b"\"it's\"", b"it's"),
            (br"'\777'", b"\xff"),
            (br"'\400'", b"\x00"),
            (br"'\12x'", b"\nx"),
            (br"'\0'", b"\x00"),
            (br"'\q'", b"\\q"),
            (br"'\8'", b"\\8"),
            (br"'\x41\x4a'", b"AJ"),
            (b"'a\\\nb'", b"ab"),
            (br#"'\a\b\t\n\v\f\r\\\'\"'"#, b"\x07\x08\t\n\x0b\x0c\r\\'\""),
            (b"''", b""),
        ];
        for (input, expected) in cases {
            assert_eq!(
                unquote_string_literal(input).as_deref(),
                Ok(*expected),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
        for bad in [
            &b"abc"[..],
            b"'abc\"",
            b"'",
            b"",
            br"'\x4'",
            br"'\x4g'",
            b"'\\'",
        ] {
            assert!(
                unquote_string_literal(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn raw_unicode_escape_matches_cpython() {
        // Expectations from CPython 3.11's codecs.decode(..., 'raw-unicode-escape').
        let cases: &[(&[u8], &str)] = &[
            (b"abc", "abc"),
            (b"\xe9", "\u{e9}"),
            (br"\u20ac", "\u{20ac}"),
            (br"\U0001f600", "\u{1f600}"),
            (br"\\u0041", "\\\\u0041"),
            (br"\\\u0041", "\\\\A"),
            (br"\x41", "\\x41"),
            (b"\\", "\\"),
            (br"a\u005c\u000a", "a\\\n"),
        ];
        for (input, expected) in cases {
            assert_eq!(
                decode_raw_unicode_escape(input).as_deref(),
                Ok(*expected),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
        assert!(matches!(
            decode_raw_unicode_escape(br"\u004"),
            Err(DecodeErrorCode::InvalidLiteral(_))
        ));
        assert!(matches!(
            decode_raw_unicode_escape(br"\u004g"),
            Err(DecodeErrorCode::InvalidLiteral(_))
        ));
        assert!(matches!(
            decode_raw_unicode_escape(br"\U00110000"),
            Err(DecodeErrorCode::InvalidLiteral(_))
        ));
        assert_eq!(
            decode_raw_unicode_escape(br"\ud800"),
            Err(DecodeErrorCode::InvalidUtf8)
        );
    }
}
