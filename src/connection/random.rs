//! Random bytes for authkeys and socket names, from the kernel.

use std::io;

/// Fills `buf` from the kernel (`getrandom(2)`), as the handshake's
/// challenges are; no file is opened, so it works without `/dev`.
pub(crate) fn fill(buf: &mut [u8]) -> io::Result<()> {
    getrandom::fill(buf).map_err(io::Error::other)
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
