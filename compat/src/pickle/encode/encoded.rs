//! An encoded pickle whose large `bytes` payloads stay where they are.

use std::io::IoSlice;

use crate::pickle::SharedBytes;

/// The bytes of an encoded pickle, in pieces: the opcodes in one buffer and
/// each large `bytes` payload left in its own buffer, uncopied, at its
/// place between them. Write it with vectored I/O
/// ([`io_slices`](Self::io_slices)); join it with
/// [`into_vec`](Self::into_vec) only where one buffer is needed.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::pickle::{
///     ByteChunks, EncodeOptions, Node, Pickle, SharedBytes, encode, encode_vectored,
/// };
///
/// let storage = SharedBytes::from(vec![9u8; 1 << 20]);
/// let mut pickle = Pickle::new();
/// let payload = pickle.push(Node::Bytes(ByteChunks::from(storage.clone())));
/// pickle.set_root(payload);
/// let encoded = encode_vectored(&pickle, &EncodeOptions::new())?;
/// // The megabyte is written from where it is, not copied into the pickle.
/// assert!(encoded.io_slices().iter().any(|slice| slice.as_ptr() == storage.as_ptr()));
/// // The same bytes as `encode` writes in one buffer.
/// assert_eq!(encoded.into_vec(), encode(&pickle, &EncodeOptions::new())?);
/// # Ok::<(), tensorshare_compat::pickle::EncodeError>(())
/// ```
#[derive(Clone, Debug)]
pub struct EncodedPickle {
    inline: Vec<u8>,
    /// Payloads written from their own buffers, each before `inline[at]`,
    /// in ascending `at`.
    out_of_line: Vec<(usize, SharedBytes)>,
}

impl EncodedPickle {
    /// Nothing encoded yet, after the bytes of `prefix`.
    pub(super) fn after(prefix: Vec<u8>) -> Self {
        Self {
            inline: prefix,
            out_of_line: Vec::new(),
        }
    }

    /// Appends bytes to the opcode buffer.
    pub(super) fn extend(&mut self, bytes: &[u8]) {
        self.inline.extend_from_slice(bytes);
    }

    /// Places `payload` here, uncopied.
    pub(super) fn push_out_of_line(&mut self, payload: SharedBytes) {
        self.out_of_line.push((self.inline.len(), payload));
    }

    /// Length of the opcode buffer: frames are kept by offsets into it.
    pub(super) fn inline_len(&self) -> usize {
        self.inline.len()
    }

    /// The opcode buffer, for the frame bookkeeping that patches it.
    pub(super) fn inline_mut(&mut self) -> &mut Vec<u8> {
        &mut self.inline
    }

    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.inline.len()
            + self
                .out_of_line
                .iter()
                .map(|(_, payload)| payload.len())
                .sum::<usize>()
    }

    /// Whether nothing was encoded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pieces in order, for `write_vectored`; empty pieces are left out.
    pub fn io_slices(&self) -> Vec<IoSlice<'_>> {
        let mut slices = Vec::with_capacity(2 * self.out_of_line.len() + 1);
        let mut done = 0;
        for (at, payload) in &self.out_of_line {
            slices.push(IoSlice::new(self.inline.get(done..*at).unwrap_or_default()));
            slices.push(IoSlice::new(payload));
            done = *at;
        }
        slices.push(IoSlice::new(self.inline.get(done..).unwrap_or_default()));
        slices.retain(|slice| !slice.is_empty());
        slices
    }

    /// The pickle in one buffer: the opcode buffer itself when nothing was
    /// left out of line, else everything copied together.
    pub fn into_vec(self) -> Vec<u8> {
        if self.out_of_line.is_empty() {
            return self.inline;
        }
        let mut joined = Vec::with_capacity(self.len());
        for slice in self.io_slices() {
            joined.extend_from_slice(&slice);
        }
        joined
    }
}
