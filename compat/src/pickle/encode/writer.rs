//! The output buffer, with CPython's protocol 4 framing.
//!
//! Mirrors `_Pickler_Write`, `_Pickler_CommitFrame`, `_Pickler_OpcodeBoundary`
//! and `_Pickler_write_bytes` in CPython's `Modules/_pickle.c`, so that frame
//! boundaries land where `pickle.dumps` puts them.

use super::EncodedPickle;
use crate::pickle::opcodes::FRAME;
use crate::pickle::{FRAME_SIZE_TARGET, SharedBytes};

/// CPython drops a frame header whose frame holds fewer bytes than this: the
/// header would cost more than it saves.
const FRAME_SIZE_MIN: usize = 4;

/// `FRAME` plus its 8-byte length.
const FRAME_HEADER_SIZE: usize = 9;

/// Appends opcodes to an [`EncodedPickle`], opening and closing frames.
pub(super) struct FramedWriter {
    out: EncodedPickle,
    /// Whether large `bytes` payloads stay out of line.
    out_of_line: bool,
    framing: bool,
    /// Where the header of the open frame starts, if a frame is open.
    frame_start: Option<usize>,
}

impl FramedWriter {
    /// A writer appending to `prefix`; framing starts off. With
    /// `out_of_line`, `bytes` chunks of [`FRAME_SIZE_TARGET`] or more are
    /// not copied.
    pub(super) fn new(prefix: Vec<u8>, out_of_line: bool) -> Self {
        Self {
            out: EncodedPickle::after(prefix),
            out_of_line,
            framing: false,
            frame_start: None,
        }
    }

    /// Turns framing on (protocol 4 and up, after the `PROTO` opcode).
    pub(super) fn start_framing(&mut self) {
        self.framing = true;
    }

    /// What was written.
    pub(super) fn finish(self) -> EncodedPickle {
        self.out
    }

    /// Writes bytes, opening a frame first when framing and none is open.
    pub(super) fn write(&mut self, bytes: &[u8]) {
        if self.framing && self.frame_start.is_none() {
            self.frame_start = Some(self.out.inline_len());
            self.out.extend(&[0; FRAME_HEADER_SIZE]);
        }
        self.out.extend(bytes);
    }

    /// Writes an opcode header and its payload; payloads of
    /// [`FRAME_SIZE_TARGET`] or more go outside any frame, as CPython writes
    /// them, so that a reader can copy them straight into place.
    pub(super) fn write_payload(&mut self, header: &[u8], payload: &[u8]) {
        self.write_sized_payload(header, payload.len(), |writer| writer.write(payload));
    }

    /// Writes an opcode header and a payload in chunks, as
    /// [`write_payload`](Self::write_payload) writes it joined; large chunks
    /// go out of line, uncopied.
    pub(super) fn write_chunked_payload(&mut self, header: &[u8], chunks: &[SharedBytes]) {
        let len = chunks.iter().map(|chunk| chunk.len()).sum();
        self.write_sized_payload(header, len, |writer| {
            for chunk in chunks {
                // A chunk this large makes the payload unframed, so no frame
                // header ever needs patching across it.
                if writer.out_of_line && chunk.len() >= FRAME_SIZE_TARGET {
                    writer.out.push_out_of_line(chunk.clone());
                } else {
                    writer.write(chunk);
                }
            }
        });
    }

    /// Writes `header`, then the `len`-byte payload `write_body` writes,
    /// outside any frame from [`FRAME_SIZE_TARGET`] bytes on.
    fn write_sized_payload(
        &mut self,
        header: &[u8],
        len: usize,
        write_body: impl FnOnce(&mut Self),
    ) {
        let framing = self.framing;
        if len >= FRAME_SIZE_TARGET {
            self.commit_frame();
            self.framing = false;
        }
        self.write(header);
        write_body(self);
        self.framing = framing;
    }

    /// Closes the open frame once it has reached the target size; called
    /// where CPython calls it, before saving each object.
    pub(super) fn opcode_boundary(&mut self) {
        if self
            .open_frame_len()
            .is_some_and(|len| len >= FRAME_SIZE_TARGET)
        {
            self.commit_frame();
        }
    }

    /// Closes the open frame: fills in its header, or removes the header of
    /// a frame too small to be worth one.
    pub(super) fn commit_frame(&mut self) {
        let (Some(start), Some(len)) = (self.frame_start, self.open_frame_len()) else {
            return;
        };
        self.frame_start = None;
        if len >= FRAME_SIZE_MIN {
            let mut header = [0u8; FRAME_HEADER_SIZE];
            header[0] = FRAME;
            header[1..].copy_from_slice(&(len as u64).to_le_bytes());
            // A frame holds no out-of-line payload: they are written with
            // the frame closed, so its header is all in the opcode buffer.
            self.out.inline_mut()[start..start + FRAME_HEADER_SIZE].copy_from_slice(&header);
        } else {
            self.out
                .inline_mut()
                .drain(start..start + FRAME_HEADER_SIZE);
        }
    }

    /// Bytes written into the open frame so far.
    fn open_frame_len(&self) -> Option<usize> {
        self.frame_start
            .map(|start| self.out.inline_len() - start - FRAME_HEADER_SIZE)
    }
}
