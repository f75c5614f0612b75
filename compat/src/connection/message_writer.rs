//! One message written in as many steps as the stream takes: a
//! non-blocking socket takes what fits in its buffer and says
//! `WouldBlock`, and the write goes on from there once it has room.

use std::io::{self, ErrorKind, IoSlice, Write};

use super::framing::{FrameHeader, SINGLE_WRITE_MAX_LEN};

/// At most this many slices per `writev`: Linux's `IOV_MAX`.
const MAX_SLICES_PER_WRITE: usize = 1024;

/// A message being written: its header, and how many of its bytes (header
/// and payload) the stream has taken.
///
/// [`write`](Self::write) writes until the message is out or the stream
/// fails. An error of kind [`ErrorKind::WouldBlock`] keeps the progress:
/// call `write` again, with the same payload, when the stream has room.
/// Any other error ends the message, and the stream is out of step.
///
/// [`write_message_vectored`](super::write_message_vectored) is one
/// `write` on a blocking stream.
#[derive(Clone, Copy, Debug)]
pub struct MessageWriter {
    header: FrameHeader,
    payload_len: usize,
    written: usize,
}

impl MessageWriter {
    /// A message of `payload_len` bytes, not yet begun.
    pub fn new(payload_len: usize) -> Self {
        Self {
            header: FrameHeader::new(payload_len as u64),
            payload_len,
            written: 0,
        }
    }

    /// The payload's length in bytes.
    pub fn payload_len(&self) -> usize {
        self.payload_len
    }

    /// Whether the stream has taken any byte of the message: from then on
    /// the rest must follow before anything else is written.
    pub fn is_started(&self) -> bool {
        self.written > 0
    }

    /// Writes the rest of the message whose payload is `payload`'s slices
    /// back to back. A payload up to [`SINGLE_WRITE_MAX_LEN`] goes out in
    /// one write together with its header, as CPython writes it; a longer
    /// one in vectored writes, from where its pieces are.
    ///
    /// # Errors
    ///
    /// Whatever the stream's writes return, `WouldBlock` with the progress
    /// kept; [`ErrorKind::WriteZero`] when the stream stops taking bytes.
    pub fn write<W: Write + ?Sized>(
        &mut self,
        writer: &mut W,
        payload: &[IoSlice<'_>],
    ) -> io::Result<()> {
        if self.written == 0 && self.payload_len <= SINGLE_WRITE_MAX_LEN {
            let mut frame = Vec::with_capacity(self.header.as_bytes().len() + self.payload_len);
            frame.extend_from_slice(self.header.as_bytes());
            for slice in payload {
                frame.extend_from_slice(slice);
            }
            let written = write_some(writer, |writer| writer.write(&frame))?;
            self.written += written;
        }
        let mut slices = Vec::with_capacity(payload.len() + 1);
        slices.push(IoSlice::new(self.header.as_bytes()));
        slices.extend_from_slice(payload);
        let mut rest = &mut slices[..];
        IoSlice::advance_slices(&mut rest, self.written);
        while !rest.is_empty() {
            let batch = rest.get(..MAX_SLICES_PER_WRITE).unwrap_or(rest);
            let written = write_some(writer, |writer| writer.write_vectored(batch))?;
            self.written += written;
            IoSlice::advance_slices(&mut rest, written);
        }
        Ok(())
    }
}

/// One write that took bytes, retried when a signal interrupts it.
fn write_some<W: Write + ?Sized>(
    writer: &mut W,
    mut write: impl FnMut(&mut W) -> io::Result<usize>,
) -> io::Result<usize> {
    loop {
        match write(writer) {
            Ok(0) => {
                return Err(io::Error::new(
                    ErrorKind::WriteZero,
                    "the stream stopped taking bytes in the middle of a message",
                ));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            result => return result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::read_message;

    /// Takes at most `step` bytes per call, with `WouldBlock` before each.
    struct Narrow {
        taken: Vec<u8>,
        step: usize,
        ready: bool,
    }

    impl Write for Narrow {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.ready = !self.ready;
            if !self.ready {
                return Err(ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.step);
            self.taken.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_message_written_in_steps_is_the_message_framed() {
        for len in [
            0,
            1,
            5,
            SINGLE_WRITE_MAX_LEN,
            SINGLE_WRITE_MAX_LEN + 1,
            100_000,
        ] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
            let (head, tail) = payload.split_at(len / 3);
            let slices = [IoSlice::new(head), IoSlice::new(tail)];
            for step in [1, 7, 65_536] {
                if len > 20_000 && step == 1 {
                    continue;
                }
                let mut stream = Narrow {
                    taken: Vec::new(),
                    step,
                    ready: false,
                };
                let mut message = MessageWriter::new(len);
                while let Err(error) = message.write(&mut stream, &slices) {
                    assert_eq!(error.kind(), ErrorKind::WouldBlock, "{len} by {step}");
                }
                let mut framed = FrameHeader::new(len as u64).as_bytes().to_vec();
                framed.extend_from_slice(&payload);
                assert_eq!(stream.taken, framed, "{len} by {step}");
                assert_eq!(
                    read_message(&mut &framed[..], len).expect("reads back"),
                    payload
                );
            }
        }
    }
}
