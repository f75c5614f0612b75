//! Arbitrary bytes as what a `multiprocessing.connection` peer writes: a
//! run of length-prefixed messages (4-byte big-endian signed length, or -1
//! and an 8-byte length), read with each of the three readers.
//!
//! The first four input bytes set up the reader side: the most bytes one
//! `read` returns (sockets hand out data in pieces), how often a read is
//! interrupted (`EINTR`), and the receiver's size limit; the rest is the
//! stream. Reading must never panic; the three readers must agree message
//! for message; an accepted message must be within the limit, must be
//! exactly the bytes the stream held after its header, and must survive a
//! write and a read unchanged; a lying length must not make the readers
//! allocate for bytes that never came.
#![no_main]

use std::io::{self, IoSlice, Read};

use libfuzzer_sys::fuzz_target;
use tensorshare_compat::connection::{
    FrameHeader, FramingError, LONG_FORM_MARKER, read_message, read_message_into,
    read_message_reusing, write_message, write_message_vectored,
};

/// The readers reserve up to this much before any payload arrives
/// (the framing module's `INITIAL_RESERVE_MAX`).
const INITIAL_RESERVE: usize = 1 << 20;

/// At most this many messages per input: enough to chain every header form.
const MAX_MESSAGES: usize = 64;

/// A stream that returns at most `chunk` bytes per read and fails every
/// `interrupt_every`-th read with `Interrupted`, as a socket may.
struct Trickle<'a> {
    data: &'a [u8],
    consumed: usize,
    chunk: usize,
    interrupt_every: usize,
    reads: usize,
}

impl<'a> Trickle<'a> {
    fn new(data: &'a [u8], chunk: usize, interrupt_every: usize) -> Self {
        Self {
            data,
            consumed: 0,
            chunk,
            interrupt_every,
            reads: 0,
        }
    }
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.reads += 1;
        if self.interrupt_every != 0 && self.reads.is_multiple_of(self.interrupt_every) {
            return Err(io::Error::from(io::ErrorKind::Interrupted));
        }
        let rest = self.data.get(self.consumed..).unwrap_or_default();
        let n = rest.len().min(buf.len()).min(self.chunk);
        buf[..n].copy_from_slice(&rest[..n]);
        self.consumed += n;
        Ok(n)
    }
}

fuzz_target!(|data: &[u8]| {
    let [chunk, interrupt, limit_hi, limit_lo, stream @ ..] = data else {
        return;
    };
    let chunk = if *chunk == 0 {
        usize::MAX
    } else {
        usize::from(*chunk)
    };
    // Every third read or less often; never every read, which would loop.
    let interrupt_every = match interrupt % 8 {
        0 | 1 => 0,
        n => usize::from(n) + 1,
    };
    let max_len = match u16::from_be_bytes([*limit_hi, *limit_lo]) {
        // No limit at all: the length fields alone must not allocate.
        u16::MAX => usize::MAX,
        limit => usize::from(limit),
    };

    let mut plain = Trickle::new(stream, chunk, interrupt_every);
    let mut into = Trickle::new(stream, chunk, interrupt_every);
    let mut reusing = Trickle::new(stream, chunk, interrupt_every);
    let mut into_buf = Vec::new();
    let mut reusing_buf = Vec::new();
    let mut largest_arrived = 0;

    for _ in 0..MAX_MESSAGES {
        let start = plain.consumed;
        let from_plain = read_message(&mut plain, max_len);
        let from_into = read_message_into(&mut into, &mut into_buf, max_len);
        let from_reusing = read_message_reusing(&mut reusing, &mut reusing_buf, max_len);
        assert_eq!(plain.consumed, into.consumed);
        assert_eq!(plain.consumed, reusing.consumed);

        // Whatever arrived, accepted or not, bounds what may be allocated.
        largest_arrived = largest_arrived.max(plain.consumed - start);
        let allowed = INITIAL_RESERVE.max(4 * largest_arrived + 64);
        assert!(
            into_buf.capacity() <= allowed,
            "read_message_into holds {} bytes after {largest_arrived} arrived",
            into_buf.capacity()
        );
        assert!(
            reusing_buf.len() <= allowed,
            "read_message_reusing holds {} bytes after {largest_arrived} arrived",
            reusing_buf.len()
        );

        let payload = match (from_plain, from_into, from_reusing) {
            (Ok(payload), Ok(into_len), Ok(reusing_len)) => {
                assert_eq!(into_buf, payload);
                assert_eq!(reusing_buf.get(..reusing_len), Some(payload.as_slice()));
                assert_eq!(into_len, payload.len());
                payload
            }
            (Err(plain_error), Err(into_error), Err(reusing_error)) => {
                let message = plain_error.to_string();
                assert_eq!(message, into_error.to_string());
                assert_eq!(message, reusing_error.to_string());
                check_refusal(&plain_error, &stream[start..], max_len);
                break;
            }
            (plain_result, into_result, reusing_result) => panic!(
                "the readers disagree: read_message {plain_result:?}, read_message_into \
                 {into_result:?}, read_message_reusing {reusing_result:?}"
            ),
        };

        assert!(payload.len() <= max_len);
        let frame = &stream[start..plain.consumed];
        let header_len = frame.len() - payload.len();
        assert_eq!(&frame[header_len..], payload.as_slice());
        let header = FrameHeader::new(payload.len() as u64);
        assert_eq!(header.payload_len(), payload.len() as u64);
        match header_len {
            // The short form is what we write too: the frame round-trips
            // byte for byte.
            4 => assert_eq!(&frame[..4], header.as_bytes()),
            // The long form, which CPython reads for any length.
            12 => {
                assert_eq!(frame[..4], LONG_FORM_MARKER.to_be_bytes());
                assert_eq!(frame[4..12], (payload.len() as u64).to_be_bytes());
            }
            other => panic!("a {other}-byte header"),
        }
        round_trip(&payload);
    }
});

/// A refused read must say why in a way that matches the bytes.
fn check_refusal(error: &FramingError, rest: &[u8], max_len: usize) {
    match error {
        FramingError::Closed => assert!(rest.is_empty(), "Closed with bytes left"),
        FramingError::TooLarge { claimed, limit } => {
            assert_eq!(*limit, max_len as u64);
            assert!(*claimed > *limit);
        }
        FramingError::NegativeLength(length) => assert!(*length < LONG_FORM_MARKER),
        FramingError::Truncated {
            expected, received, ..
        } => assert!(received < expected),
        other => panic!("an in-memory stream failed: {other}"),
    }
}

/// What we write, we read back: whole and in pieces.
fn round_trip(payload: &[u8]) {
    let mut wire = Vec::new();
    write_message(&mut wire, payload).expect("writing to a Vec");
    let mut pieces = Vec::new();
    let (head, tail) = payload.split_at(payload.len() / 2);
    write_message_vectored(&mut pieces, &[IoSlice::new(head), IoSlice::new(tail)])
        .expect("writing to a Vec");
    assert_eq!(pieces, wire);
    let mut reader = wire.as_slice();
    assert_eq!(
        read_message(&mut reader, payload.len()).expect("our own frame"),
        payload
    );
    assert!(matches!(
        read_message(&mut reader, payload.len()),
        Err(FramingError::Closed)
    ));
}
