//! Numbers, strings and bytes: the opcodes and length headers CPython picks.

use super::{EncodeError, Encoder};
use crate::pickle::ByteChunks;
use crate::pickle::opcodes::{
    BINBYTES, BINBYTES8, BININT, BININT1, BININT2, BINUNICODE, BINUNICODE8, LONG1, LONG4,
    SHORT_BINBYTES, SHORT_BINUNICODE,
};

impl Encoder<'_> {
    /// A `str` in UTF-8: `SHORT_BINUNICODE` only from protocol 4.
    pub(super) fn write_str(&mut self, text: &str) -> Result<(), EncodeError> {
        let data = text.as_bytes();
        let (header, header_len) = match (data.len(), self.protocol) {
            (len @ 0..=0xff, 4..) => sized_header(SHORT_BINUNICODE, len, 1),
            (len @ 0..=0xffff_ffff, _) => sized_header(BINUNICODE, len, 4),
            (len, 4..) => sized_header(BINUNICODE8, len, 8),
            (_, protocol) => {
                return Err(EncodeError::ProtocolTooLow {
                    what: "a str of 4 GiB or more",
                    protocol,
                    required: 4,
                });
            }
        };
        self.out.write_payload(&header[..header_len], data);
        Ok(())
    }

    /// `bytes` in protocol 3 and up.
    pub(super) fn write_bytes(&mut self, data: &[u8]) -> Result<(), EncodeError> {
        let (header, header_len) = self.bytes_header(data.len())?;
        self.out.write_payload(&header[..header_len], data);
        Ok(())
    }

    /// `bytes` in protocol 3 and up, its large chunks written uncopied.
    pub(super) fn write_byte_chunks(&mut self, data: &ByteChunks) -> Result<(), EncodeError> {
        let (header, header_len) = self.bytes_header(data.len())?;
        self.out
            .write_chunked_payload(&header[..header_len], data.chunks());
        Ok(())
    }

    /// The opcode and length of a `bytes` of `len` bytes.
    fn bytes_header(&self, len: usize) -> Result<([u8; 9], usize), EncodeError> {
        Ok(match (len, self.protocol) {
            (len @ 0..=0xff, _) => sized_header(SHORT_BINBYTES, len, 1),
            (len @ 0..=0xffff_ffff, _) => sized_header(BINBYTES, len, 4),
            (len, 4..) => sized_header(BINBYTES8, len, 8),
            (_, protocol) => {
                return Err(EncodeError::ProtocolTooLow {
                    what: "a bytes of 4 GiB or more",
                    protocol,
                    required: 4,
                });
            }
        })
    }

    /// `BININT1`/`BININT2` for small non-negative ints, `BININT` for the
    /// rest of 32 bits, `LONG1` beyond, as CPython's `save_long`.
    pub(super) fn save_int(&mut self, value: i64) {
        match i32::try_from(value) {
            Ok(small @ 0..=0xff) => self.out.write(&[BININT1, small as u8]),
            Ok(small @ 0x100..=0xffff) => {
                let [lo, hi] = (small as u16).to_le_bytes();
                self.out.write(&[BININT2, lo, hi]);
            }
            Ok(small) => {
                let mut op = [BININT; 5];
                op[1..].copy_from_slice(&small.to_le_bytes());
                self.out.write(&op);
            }
            Err(_) => {
                let bytes = value.to_le_bytes();
                let minimal = minimal_twos_complement(&bytes);
                let (header, header_len) = sized_header(LONG1, minimal.len(), 1);
                self.out.write(&header[..header_len]);
                self.out.write(minimal);
            }
        }
    }

    /// An int given as two's complement bytes, however many it uses.
    pub(super) fn save_big_int(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        let minimal = minimal_twos_complement(bytes);
        if minimal.len() <= 8 {
            let fill = if minimal.last().is_some_and(|&b| b & 0x80 != 0) {
                0xff
            } else {
                0
            };
            let mut wide = [fill; 8];
            wide[..minimal.len()].copy_from_slice(minimal);
            self.save_int(i64::from_le_bytes(wide));
            return Ok(());
        }
        self.write_long(minimal)
    }

    /// `LONG1`/`LONG4` with the fewest bytes, as CPython writes them.
    pub(super) fn write_long(&mut self, minimal: &[u8]) -> Result<(), EncodeError> {
        let (header, header_len) = match minimal.len() {
            len @ 0..=0xff => sized_header(LONG1, len, 1),
            // LONG4's length is signed.
            len @ 0..=0x7fff_ffff => sized_header(LONG4, len, 4),
            _ => return Err(EncodeError::IntTooLarge),
        };
        self.out.write(&header[..header_len]);
        self.out.write(minimal);
        Ok(())
    }
}

/// An opcode and a little-endian length of `width` bytes (1, 4 or 8),
/// returned with how many of the nine bytes are used.
pub(super) fn sized_header(op: u8, len: usize, width: usize) -> ([u8; 9], usize) {
    let mut header = [0u8; 9];
    header[0] = op;
    header[1..].copy_from_slice(&(len as u64).to_le_bytes());
    (header, 1 + width)
}

/// Strips the sign-extension bytes a little-endian two's complement integer
/// does not need; zero becomes empty.
pub(super) fn minimal_twos_complement(bytes: &[u8]) -> &[u8] {
    let mut len = bytes.len();
    while len > 0 {
        let top = bytes[len - 1];
        let below_sign = len.checked_sub(2).map(|i| bytes[i] & 0x80 != 0);
        match (top, below_sign) {
            (0x00, Some(false) | None) => len -= 1,
            (0xff, Some(true)) => len -= 1,
            _ => break,
        }
    }
    &bytes[..len]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twos_complement_is_minimal() {
        assert_eq!(minimal_twos_complement(&[]), &[] as &[u8]);
        assert_eq!(minimal_twos_complement(&[0, 0]), &[] as &[u8]);
        assert_eq!(minimal_twos_complement(&[0xff, 0xff]), &[0xff]);
        assert_eq!(minimal_twos_complement(&[0x80, 0xff]), &[0x80]);
        assert_eq!(minimal_twos_complement(&[0x80, 0x00]), &[0x80, 0x00]);
        assert_eq!(minimal_twos_complement(&[0x7f, 0x00, 0x00]), &[0x7f]);
        assert_eq!(minimal_twos_complement(&[0x00, 0x80, 0xff]), &[0x00, 0x80]);
    }
}
