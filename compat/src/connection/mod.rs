//! `multiprocessing.connection` on the wire: message framing and the authkey
//! handshake, over any `Read + Write` stream.
//!
//! - [`write_message`] / [`read_message`]: CPython's `send_bytes` /
//!   `recv_bytes` framing on sockets and pipes (4-byte big-endian signed
//!   length, or `-1` and an 8-byte length above `0x7fffffff`). Reads take a
//!   size limit that is checked before anything is allocated.
//!   [`MessageReader`] and [`MessageWriter`] read and write one in steps,
//!   for a non-blocking stream.
//! - [`server_handshake`] / [`client_handshake`]: what `Listener.accept` and
//!   `Client` do when given an authkey, built from [`deliver_challenge`] and
//!   [`answer_challenge`]. Both the CPython <= 3.11 HMAC-MD5 form and the
//!   CPython >= 3.12 `{sha256}` form are spoken ([`Dialect`]). The
//!   `_noting_refusal` forms let a server count a refusal before the peer
//!   hears of it.
//!
//! Nothing here sets timeouts: a peer that stops sending blocks the read, so
//! give sockets a read timeout before the handshake.
//!
//! # Examples
//!
//! ```
//! use tensorshare_compat::connection::{read_message, write_message};
//!
//! let mut wire = Vec::new();
//! write_message(&mut wire, b"payload")?;
//! assert_eq!(read_message(&mut wire.as_slice(), 1 << 20)?, b"payload");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod auth;
mod digest;
mod framing;
mod message_reader;
mod message_writer;

pub use auth::{
    AuthError, CHALLENGE, Dialect, FAILURE, HANDSHAKE_MAX_MESSAGE_LEN, MODERN_CHALLENGE_LEN,
    NegotiatedDigests, Rejection, WELCOME, answer_challenge, client_handshake, deliver_challenge,
    deliver_challenge_noting_refusal, server_handshake, server_handshake_noting_refusal,
};
pub use digest::{HmacDigest, LEGACY_CHALLENGE_LEN};
pub use framing::{
    FrameHeader, FramePart, FramingError, LONG_FORM_MARKER, SHORT_FORM_MAX_LEN,
    SINGLE_WRITE_MAX_LEN, read_header, read_message, read_message_into, read_message_reusing,
    write_message, write_message_vectored,
};
pub use message_reader::MessageReader;
pub use message_writer::MessageWriter;
