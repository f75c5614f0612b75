//! Random bytes for authkeys and socket names, from the kernel.

use std::fs::File;
use std::io::{self, Read};

/// Fills `buf` from `/dev/urandom`, which never blocks once the kernel's
/// pool is initialised and needs no unsafe code to read.
pub(crate) fn fill(buf: &mut [u8]) -> io::Result<()> {
    File::open("/dev/urandom")?.read_exact(buf)
}

/// `len` characters from CPython's `tempfile` alphabet, for file names.
pub(crate) fn name_suffix(len: usize) -> io::Result<String> {
    const ALPHABET: &[u8; 37] = b"abcdefghijklmnopqrstuvwxyz0123456789_";
    let mut bytes = vec![0u8; len];
    fill(&mut bytes)?;
    Ok(bytes
        .iter()
        .map(|byte| {
            let index = usize::from(*byte) % ALPHABET.len();
            char::from(ALPHABET.get(index).copied().unwrap_or(b'_'))
        })
        .collect())
}
