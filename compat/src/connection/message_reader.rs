//! One message read in as many steps as the stream needs: a non-blocking
//! socket gives what has arrived and `WouldBlock`, and the read goes on
//! from there once more arrives.

use std::io::{ErrorKind, Read};

use super::framing::{FramePart, FramingError, INITIAL_RESERVE_MAX, LONG_FORM_MARKER};

/// A message being read: how much of its header and payload has arrived.
///
/// [`read`](Self::read) reads until the message is whole or the stream
/// fails. An error of kind [`ErrorKind::WouldBlock`] (or `TimedOut`, a
/// blocking socket's read timeout) keeps what arrived: call `read` again
/// with the same buffer when the stream has more. Any other error ends the
/// message, and the stream is out of step.
///
/// [`read_message_reusing`](super::read_message_reusing) is one `read` on
/// a blocking stream.
///
/// # Examples
///
/// A message that arrives a byte at a time:
///
/// ```
/// use std::io::{self, Read};
/// use tensorshare_compat::connection::MessageReader;
///
/// /// Gives one byte per call, and `WouldBlock` in between.
/// struct Trickle<'a> { bytes: &'a [u8], ready: bool }
/// impl Read for Trickle<'_> {
///     fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
///         self.ready = !self.ready;
///         if !self.ready {
///             return Err(io::ErrorKind::WouldBlock.into());
///         }
///         let n = self.bytes.len().min(buf.len()).min(1);
///         buf[..n].copy_from_slice(&self.bytes[..n]);
///         self.bytes = &self.bytes[n..];
///         Ok(n)
///     }
/// }
///
/// let mut wire = Trickle { bytes: &[0, 0, 0, 2, b'h', b'i'], ready: false };
/// let mut message = MessageReader::new(1024);
/// let mut buf = Vec::new();
/// let len = loop {
///     match message.read(&mut wire, &mut buf) {
///         Ok(len) => break len,
///         Err(error) if error.is_would_block() => continue, // wait for readiness here
///         Err(error) => return Err(error.into()),
///     }
/// };
/// assert_eq!(&buf[..len], b"hi");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct MessageReader {
    max_len: usize,
    /// The header as far as it arrived: 4 bytes, or 12 for the long form.
    header: [u8; 12],
    header_filled: usize,
    /// The payload length, once the header is whole.
    payload_len: Option<usize>,
    /// Payload bytes at the front of the buffer.
    filled: usize,
}

impl MessageReader {
    /// A message not yet begun, of at most `max_len` payload bytes.
    pub fn new(max_len: usize) -> Self {
        Self {
            max_len,
            header: [0; 12],
            header_filled: 0,
            payload_len: None,
            filled: 0,
        }
    }

    /// Whether any byte of the message has arrived: a stream that ends now
    /// ends inside a message, not between two.
    pub fn is_started(&self) -> bool {
        self.header_filled > 0
    }

    /// How many payload bytes have arrived.
    pub(super) fn payload_received(&self) -> usize {
        self.filled
    }

    /// Reads the rest of the message into the front of `buf` and returns its
    /// length: the message is `buf[..len]`. `buf` only ever grows, and only
    /// as payload bytes arrive; what lies past the message is left from
    /// earlier ones. Pass the same `buf` to every call for one message.
    ///
    /// # Errors
    ///
    /// [`FramingError::Io`] of kind `WouldBlock` or `TimedOut` when the
    /// stream has nothing more for now ([`FramingError::is_would_block`]):
    /// the progress is kept. Otherwise as
    /// [`read_message`](super::read_message): [`FramingError::TooLarge`]
    /// above the limit, [`FramingError::Closed`] at a clean end of stream
    /// before the message, [`FramingError::Truncated`] inside it,
    /// [`FramingError::NegativeLength`] for a bad header.
    pub fn read<R: Read + ?Sized>(
        &mut self,
        reader: &mut R,
        buf: &mut Vec<u8>,
    ) -> Result<usize, FramingError> {
        let payload_len = match self.payload_len {
            Some(len) => len,
            None => {
                let len = self.read_header(reader)?;
                self.payload_len = Some(len);
                len
            }
        };
        while self.filled < payload_len {
            if buf.len() <= self.filled {
                let grown = self
                    .filled
                    .saturating_mul(2)
                    .max(INITIAL_RESERVE_MAX)
                    .min(payload_len);
                buf.resize(grown, 0);
            }
            let end = payload_len.min(buf.len());
            let room = buf.get_mut(self.filled..end).unwrap_or_default();
            match read_some(reader, room)? {
                0 => return Err(truncated(FramePart::Payload, payload_len, self.filled)),
                n => self.filled += n,
            }
        }
        Ok(payload_len)
    }

    /// Reads the rest of the header; returns the payload length it
    /// announces, checked against the limit.
    pub(super) fn read_header<R: Read + ?Sized>(
        &mut self,
        reader: &mut R,
    ) -> Result<usize, FramingError> {
        while self.header_filled < 4 {
            match read_some(reader, &mut self.header[self.header_filled..4])? {
                0 if self.header_filled == 0 => return Err(FramingError::Closed),
                0 => return Err(truncated(FramePart::Header, 4, self.header_filled)),
                n => self.header_filled += n,
            }
        }
        let short = i32::from_be_bytes([
            self.header[0],
            self.header[1],
            self.header[2],
            self.header[3],
        ]);
        let claimed = match short {
            LONG_FORM_MARKER => {
                while self.header_filled < 12 {
                    match read_some(reader, &mut self.header[self.header_filled..12])? {
                        0 => {
                            return Err(truncated(
                                FramePart::LongLength,
                                8,
                                self.header_filled - 4,
                            ));
                        }
                        n => self.header_filled += n,
                    }
                }
                let mut long = [0u8; 8];
                long.copy_from_slice(&self.header[4..12]);
                u64::from_be_bytes(long)
            }
            negative if negative < 0 => return Err(FramingError::NegativeLength(negative)),
            length => u64::from(length.unsigned_abs()),
        };
        let limit = u64::try_from(self.max_len).unwrap_or(u64::MAX);
        match usize::try_from(claimed) {
            Ok(len) if claimed <= limit => Ok(len),
            _ => Err(FramingError::TooLarge { claimed, limit }),
        }
    }
}

/// One read, retried when a signal interrupts it; 0 at end of stream.
fn read_some<R: Read + ?Sized>(reader: &mut R, buf: &mut [u8]) -> Result<usize, FramingError> {
    loop {
        match reader.read(buf) {
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            result => return Ok(result?),
        }
    }
}

fn truncated(part: FramePart, expected: usize, received: usize) -> FramingError {
    FramingError::Truncated {
        part,
        expected: u64::try_from(expected).unwrap_or(u64::MAX),
        received: u64::try_from(received).unwrap_or(u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;
    use crate::connection::write_message;

    /// Gives at most `step` bytes per call, with `WouldBlock` before each.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
        ready: bool,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.ready = !self.ready;
            if !self.ready {
                return Err(ErrorKind::WouldBlock.into());
            }
            let n = self.bytes.len().min(buf.len()).min(self.step);
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    /// Reads one message from `wire` `step` bytes at a time.
    fn read_trickled(wire: &[u8], step: usize, max_len: usize) -> Result<Vec<u8>, FramingError> {
        let mut reader = Trickle {
            bytes: wire,
            step,
            ready: false,
        };
        let mut message = MessageReader::new(max_len);
        let mut buf = Vec::new();
        loop {
            match message.read(&mut reader, &mut buf) {
                Ok(len) => return Ok(buf[..len].to_vec()),
                Err(error) if error.is_would_block() => {
                    assert!(message.is_started() || buf.is_empty())
                }
                Err(error) => return Err(error),
            }
        }
    }

    #[test]
    fn a_message_read_in_steps_is_the_message_sent() {
        for len in [0, 1, 3, 4, 5, 4096, INITIAL_RESERVE_MAX + 7] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut wire = Vec::new();
            write_message(&mut wire, &payload).expect("framed");
            for step in [1, 3, 4096] {
                if len > 4096 && step < 4096 {
                    continue; // a megabyte a byte at a time proves nothing more
                }
                assert_eq!(
                    read_trickled(&wire, step, usize::MAX).expect("read"),
                    payload,
                    "{len} by {step}"
                );
            }
        }
    }

    #[test]
    fn the_long_form_is_read_in_steps() {
        let wire = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 2, b'h', b'i'];
        assert_eq!(read_trickled(&wire, 1, 1024).expect("read"), b"hi");
    }

    #[test]
    fn a_step_read_fails_as_a_whole_read_does() {
        let cases: [(&[u8], &str); 5] = [
            (&[], "Closed"),
            (
                &[0, 0],
                "Truncated { part: Header, expected: 4, received: 2 }",
            ),
            (
                &[0xff, 0xff, 0xff, 0xff, 0, 0],
                "Truncated { part: LongLength, expected: 8, received: 2 }",
            ),
            (
                &[0, 0, 0, 5, b'a'],
                "Truncated { part: Payload, expected: 5, received: 1 }",
            ),
            (&[0xff, 0xff, 0xff, 0xfe], "NegativeLength(-2)"),
        ];
        for (wire, expected) in cases {
            let error = read_trickled(wire, 1, 1024).expect_err("refused");
            assert_eq!(format!("{error:?}"), expected);
            let whole = crate::connection::read_message(&mut &wire[..], 1024).expect_err("refused");
            assert_eq!(format!("{whole:?}"), expected);
        }
        let error = read_trickled(&[0, 0, 4, 0], 1, 1023).expect_err("too large");
        assert!(
            matches!(
                error,
                FramingError::TooLarge {
                    claimed: 1024,
                    limit: 1023
                }
            ),
            "{error:?}"
        );
    }
}
