//! Length-prefixed messages as CPython's `Connection._send_bytes` and
//! `_recv_bytes` write and read them on sockets and pipes.
//!
//! A message is a 4-byte big-endian signed length and the payload. Payloads
//! longer than `0x7fffffff` bytes carry `-1` in those 4 bytes, then an 8-byte
//! big-endian unsigned length (`struct.pack("!Q", n)`).

use std::fmt;
use std::io::{self, ErrorKind, IoSlice, Read, Write};

use super::{MessageReader, MessageWriter};

/// The longest payload announced by the 4-byte header alone; longer ones use
/// the `-1` marker and an 8-byte length.
pub const SHORT_FORM_MAX_LEN: u64 = 0x7fff_ffff;

/// The 4-byte header value that announces an 8-byte length after it.
pub const LONG_FORM_MARKER: i32 = -1;

/// Payloads up to this size go out in one write together with their header.
///
/// CPython concatenates header and payload below this size so that a TCP
/// socket does not hold the payload back behind the header (Nagle's
/// algorithm), and so a 0-byte payload is never written on its own.
pub const SINGLE_WRITE_MAX_LEN: usize = 16 * 1024;

/// How much payload space is reserved before any payload byte has arrived.
///
/// A peer's length claim alone must not make us allocate: beyond this, the
/// buffer grows only as bytes actually arrive.
pub(super) const INITIAL_RESERVE_MAX: usize = 1 << 20;

/// The encoded header of one message: 4 bytes, or 12 for the long form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    bytes: [u8; 12],
    encoded_len: usize,
    payload_len: u64,
}

impl FrameHeader {
    /// The header CPython writes in front of a payload of `payload_len` bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare_compat::connection::FrameHeader;
    ///
    /// assert_eq!(FrameHeader::new(5).as_bytes(), [0, 0, 0, 5]);
    /// assert_eq!(
    ///     FrameHeader::new(0x8000_0000).as_bytes(),
    ///     [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0x80, 0, 0, 0]
    /// );
    /// ```
    pub fn new(payload_len: u64) -> Self {
        let mut bytes = [0u8; 12];
        let encoded_len = match i32::try_from(payload_len) {
            Ok(short) => {
                bytes[..4].copy_from_slice(&short.to_be_bytes());
                4
            }
            Err(_) => {
                bytes[..4].copy_from_slice(&LONG_FORM_MARKER.to_be_bytes());
                bytes[4..].copy_from_slice(&payload_len.to_be_bytes());
                12
            }
        };
        Self {
            bytes,
            encoded_len,
            payload_len,
        }
    }

    /// The header bytes as they go on the wire.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.encoded_len).unwrap_or(&self.bytes)
    }

    /// The payload length this header announces.
    pub fn payload_len(&self) -> u64 {
        self.payload_len
    }

    /// Whether this is the 12-byte form (`-1` then an 8-byte length).
    pub fn is_long_form(&self) -> bool {
        self.encoded_len == 12
    }
}

/// The part of a message that was being read when the stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FramePart {
    /// The 4-byte length header.
    Header,
    /// The 8-byte length after a `-1` header.
    LongLength,
    /// The payload.
    Payload,
}

impl fmt::Display for FramePart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Header => "4-byte length header",
            Self::LongLength => "8-byte length after the -1 marker",
            Self::Payload => "payload",
        })
    }
}

/// Why a message could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FramingError {
    /// The stream ended cleanly between two messages: the peer closed the
    /// connection. CPython raises `EOFError` here.
    #[error("the peer closed the connection")]
    Closed,
    /// The stream ended inside a message.
    #[error(
        "the connection ended in the middle of a message: its {part} needed {expected} bytes \
         but only {received} arrived; the peer died or does not speak \
         multiprocessing.connection framing"
    )]
    Truncated {
        /// What was being read.
        part: FramePart,
        /// How many bytes that part needed.
        expected: u64,
        /// How many arrived before the end of the stream.
        received: u64,
    },
    /// The header announced more bytes than the receiver accepts. Nothing was
    /// allocated for it, and the payload is still unread, so the connection
    /// is no longer usable.
    #[error(
        "the peer announced a {claimed}-byte message, above this receiver's limit of {limit} \
         bytes; raise the maximum message length (the max_len argument) if messages that \
         large are expected"
    )]
    TooLarge {
        /// The length in the header.
        claimed: u64,
        /// The receiver's limit.
        limit: u64,
    },
    /// The 4-byte header held a negative length other than the `-1` marker.
    #[error(
        "invalid message header: length {0} is negative and not the -1 marker of the 8-byte \
         form; the peer does not speak multiprocessing.connection framing"
    )]
    NegativeLength(i32),
    /// The stream failed.
    #[error("connection I/O failed: {0}")]
    Io(io::Error),
}

impl FramingError {
    /// Whether the stream had nothing more for now (`WouldBlock`, or
    /// `TimedOut` from a read timeout) rather than failing: a
    /// [`MessageReader`] goes on from where it stopped.
    pub fn is_would_block(&self) -> bool {
        matches!(self, Self::Io(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
    }
}

// By hand rather than `#[from]`, which would also make the OS error the
// `source()`: the message above already includes it (see the crate docs on
// errors).
impl From<io::Error> for FramingError {
    fn from(error: io::Error) -> Self {
        Self::Io(error)
    }
}

/// Writes one message: header and payload.
///
/// Payloads up to [`SINGLE_WRITE_MAX_LEN`] go out in a single `write_all`
/// together with their header, as CPython does; longer ones as header and
/// payload in vectored writes. Nothing is flushed: wrap the
/// stream in a `BufWriter` only if you flush it yourself.
///
/// # Errors
///
/// Whatever the stream's `write_all` returns.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::connection::write_message;
///
/// let mut wire = Vec::new();
/// write_message(&mut wire, b"hi")?;
/// assert_eq!(wire, [0, 0, 0, 2, b'h', b'i']);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn write_message<W: Write + ?Sized>(writer: &mut W, payload: &[u8]) -> io::Result<()> {
    write_message_vectored(writer, &[IoSlice::new(payload)])
}

/// Writes one message whose payload is `payload`'s slices back to back, as
/// [`write_message`] writes the joined payload; large payloads go out with
/// vectored writes, so that pieces in other buffers (a tensor's storage)
/// are not copied first.
///
/// # Errors
///
/// Whatever the stream's writes return; [`ErrorKind::WriteZero`] when it
/// stops taking bytes.
///
/// # Examples
///
/// ```
/// use std::io::IoSlice;
/// use tensorshare_compat::connection::write_message_vectored;
///
/// let mut wire = Vec::new();
/// write_message_vectored(&mut wire, &[IoSlice::new(b"h"), IoSlice::new(b"i")])?;
/// assert_eq!(wire, [0, 0, 0, 2, b'h', b'i']);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn write_message_vectored<W: Write + ?Sized>(
    writer: &mut W,
    payload: &[IoSlice<'_>],
) -> io::Result<()> {
    let payload_len: usize = payload.iter().map(|slice| slice.len()).sum();
    MessageWriter::new(payload_len).write(writer, payload)
}

/// Reads one header and returns the payload length it announces.
///
/// The payload itself is left in the stream, for callers that put it
/// somewhere other than a `Vec` (for example straight into shared memory).
/// No limit is applied here: compare the result with yours.
///
/// # Errors
///
/// [`FramingError::Closed`] if the stream ends before the first header byte,
/// [`FramingError::Truncated`] if it ends inside the header,
/// [`FramingError::NegativeLength`] for a negative length other than `-1`,
/// [`FramingError::Io`] if the stream fails.
pub fn read_header<R: Read + ?Sized>(reader: &mut R) -> Result<u64, FramingError> {
    let len = MessageReader::new(usize::MAX).read_header(reader)?;
    Ok(len as u64)
}

/// Reads one message and returns its payload.
///
/// A header claiming more than `max_len` bytes is refused before anything is
/// allocated for it; below the limit, memory grows only as payload bytes
/// arrive, so a peer that lies about the length cannot make us allocate
/// more than about twice what it really sent.
///
/// # Errors
///
/// [`FramingError::TooLarge`] above `max_len`, [`FramingError::Closed`] at
/// a clean end of stream before the message, [`FramingError::Truncated`]
/// inside it, [`FramingError::NegativeLength`] for a bad header, and
/// [`FramingError::Io`] if the stream fails.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::connection::{read_message, FramingError};
///
/// let mut wire: &[u8] = &[0, 0, 0, 2, b'h', b'i'];
/// assert_eq!(read_message(&mut wire, 1024)?, b"hi");
/// assert!(matches!(read_message(&mut wire, 1024), Err(FramingError::Closed)));
/// # Ok::<(), FramingError>(())
/// ```
pub fn read_message<R: Read + ?Sized>(
    reader: &mut R,
    max_len: usize,
) -> Result<Vec<u8>, FramingError> {
    let mut payload = Vec::new();
    read_message_into(reader, &mut payload, max_len)?;
    Ok(payload)
}

/// Reads one message into `buf`, replacing its contents and reusing its
/// capacity; returns the payload length.
///
/// # Errors
///
/// As [`read_message`]. On error `buf` holds whatever part of the payload
/// arrived.
pub fn read_message_into<R: Read + ?Sized>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max_len: usize,
) -> Result<usize, FramingError> {
    buf.clear();
    let mut message = MessageReader::new(max_len);
    let read = message.read(reader, buf);
    buf.truncate(message.payload_received());
    read
}

/// Reads one message into the front of `buf` and returns its length: the
/// message is `buf[..len]`. `buf` only ever grows, and only as payload
/// bytes arrive; what lies past the message is left from earlier ones. A
/// buffer kept from message to message is therefore written in place,
/// without the cost of zeroing or first-touching fresh memory every time.
///
/// # Errors
///
/// As [`read_message`]. On error `buf` holds whatever part of the payload
/// arrived at its front.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::connection::read_message_reusing;
///
/// let mut buf = Vec::new();
/// let mut wire: &[u8] = &[0, 0, 0, 3, b'o', b'n', b'e', 0, 0, 0, 1, b'2'];
/// let len = read_message_reusing(&mut wire, &mut buf, 1024)?;
/// assert_eq!(&buf[..len], b"one");
/// let len = read_message_reusing(&mut wire, &mut buf, 1024)?;
/// assert_eq!(&buf[..len], b"2");
/// assert_eq!(buf, b"2ne");
/// # Ok::<(), tensorshare_compat::connection::FramingError>(())
/// ```
pub fn read_message_reusing<R: Read + ?Sized>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max_len: usize,
) -> Result<usize, FramingError> {
    MessageReader::new(max_len).read(reader, buf)
}
