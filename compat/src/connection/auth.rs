//! The authkey handshake of `multiprocessing.connection`: `deliver_challenge`
//! and `answer_challenge`, in both the CPython <= 3.11 (HMAC-MD5) and the
//! CPython >= 3.12 (`{sha256}`-prefixed) forms.

use std::fmt;
use std::io::{Read, Write};

use super::digest::{HmacDigest, LEGACY_CHALLENGE_LEN, create_response, verify_response};
use super::framing::{FramingError, read_message, write_message};

/// The prefix of a challenge message.
pub const CHALLENGE: &[u8] = b"#CHALLENGE#";
/// The reply to a correct response.
pub const WELCOME: &[u8] = b"#WELCOME#";
/// The reply to a wrong response.
pub const FAILURE: &[u8] = b"#FAILURE#";

/// The longest handshake message either side accepts, as CPython's
/// `recv_bytes(256)`: a hostile peer cannot make the handshake allocate.
pub const HANDSHAKE_MAX_MESSAGE_LEN: usize = 256;

/// Random bytes in a CPython >= 3.12 challenge (`MESSAGE_LENGTH`).
pub const MODERN_CHALLENGE_LEN: usize = 40;

/// Which challenge the delivering side sends. The answering side follows
/// whatever it receives, and the delivering side accepts any response CPython
/// 3.12 accepts, so the choice matters only to mimic a given CPython.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// CPython <= 3.11: `#CHALLENGE#` + 20 random bytes, answered with a raw
    /// HMAC-MD5. Every CPython client answers it (3.12+ falls back to MD5).
    Legacy,
    /// CPython >= 3.12: `#CHALLENGE#{sha256}` + 40 random bytes, answered
    /// with `{sha256}` + HMAC-SHA256 over the whole `{sha256}...` payload.
    /// CPython <= 3.11 clients answer it with a raw HMAC-MD5 over the same
    /// payload, which is accepted, so this works with every CPython.
    #[default]
    Modern,
}

/// Whose check failed when the authkeys differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rejection {
    /// The peer answered our challenge with a wrong digest (CPython's
    /// "digest received was wrong").
    PeerDigestWrong,
    /// The peer replied `#FAILURE#` to our answer (CPython's "digest sent was
    /// rejected").
    PeerRejectedOurDigest,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::PeerDigestWrong => "the peer's answer to our challenge was wrong",
            Self::PeerRejectedOurDigest => "the peer rejected our answer to its challenge",
        })
    }
}

/// Why the handshake failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The two sides hold different authkeys.
    #[error(
        "authentication failed: the authkeys differ ({0}); both sides must use the same key, \
         e.g. multiprocessing.current_process().authkey"
    )]
    WrongAuthkey(Rejection),
    /// The peer sent something the handshake does not allow.
    #[error("authentication handshake protocol error: {0}")]
    Protocol(String),
    /// The peer asked for a digest CPython allows but this implementation
    /// does not compute.
    #[error(
        "authentication failed: the peer asked for the {0} digest, which is not supported \
         (supported: md5, sha256, sha384); let the peer use the default sha256"
    )]
    UnsupportedDigest(String),
    /// The operating system's random source failed while making a challenge.
    #[error("could not draw random bytes for the authentication challenge: {0}")]
    RandomSource(String),
    /// A handshake message could not be read or written.
    #[error("authentication handshake failed: {0}")]
    Io(FramingError),
}

// By hand rather than `#[from]`, which would also make the framing error
// the `source()`: the message above already includes it (see the crate
// docs on errors).
impl From<FramingError> for AuthError {
    fn from(error: FramingError) -> Self {
        Self::Io(error)
    }
}

impl From<std::io::Error> for AuthError {
    fn from(error: std::io::Error) -> Self {
        Self::Io(FramingError::Io(error))
    }
}

/// What each side answered with, for logging and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NegotiatedDigests {
    /// The digest the peer used to answer our challenge.
    pub peer_answered_with: HmacDigest,
    /// The digest we used to answer the peer's challenge.
    pub we_answered_with: HmacDigest,
}

/// Sends a challenge, checks the peer's answer, and replies `#WELCOME#` or
/// `#FAILURE#`; returns the digest the peer answered with.
///
/// # Errors
///
/// [`AuthError::WrongAuthkey`] if the answer is wrong, [`AuthError::Protocol`]
/// or [`AuthError::UnsupportedDigest`] for an answer CPython would refuse
/// (after `#FAILURE#` has been sent, as CPython does), [`AuthError::Io`] if
/// the stream fails or closes, [`AuthError::RandomSource`] if no random
/// bytes could be drawn.
pub fn deliver_challenge<S: Read + Write + ?Sized>(
    stream: &mut S,
    authkey: &[u8],
    dialect: Dialect,
) -> Result<HmacDigest, AuthError> {
    deliver_challenge_noting_refusal(stream, authkey, dialect, |_| {})
}

/// As [`deliver_challenge`], calling `before_refusing` with the refusal
/// before `#FAILURE#` is sent.
///
/// A server that counts refusals counts each one there, so that the count
/// already holds it when the refused peer hears `#FAILURE#` and acts on it
/// (for example by breaking another connection to the server's process).
///
/// # Errors
///
/// As [`deliver_challenge`].
pub fn deliver_challenge_noting_refusal<S, F>(
    stream: &mut S,
    authkey: &[u8],
    dialect: Dialect,
    before_refusing: F,
) -> Result<HmacDigest, AuthError>
where
    S: Read + Write + ?Sized,
    F: FnOnce(&AuthError),
{
    let challenge = new_challenge(dialect)?;
    let mut message = Vec::with_capacity(CHALLENGE.len() + challenge.len());
    message.extend_from_slice(CHALLENGE);
    message.extend_from_slice(&challenge);
    send(stream, &message)?;
    let response = receive(stream)?;
    match verify_response(authkey, &challenge, &response) {
        Ok(digest) => {
            send(stream, WELCOME)?;
            Ok(digest)
        }
        Err(refusal) => {
            before_refusing(&refusal);
            // The refusal is what the caller needs to see; a peer that has
            // already gone away cannot be told.
            let _ = send(stream, FAILURE);
            Err(refusal)
        }
    }
}

/// Receives a challenge, answers it with the digest it asks for, and waits
/// for `#WELCOME#`; returns the digest we answered with.
///
/// # Errors
///
/// [`AuthError::WrongAuthkey`] on `#FAILURE#`, [`AuthError::Protocol`] for a
/// message that is not a valid challenge or reply, [`AuthError::UnsupportedDigest`]
/// for a challenge naming a digest this implementation lacks,
/// [`AuthError::Io`] if the stream fails or closes.
pub fn answer_challenge<S: Read + Write + ?Sized>(
    stream: &mut S,
    authkey: &[u8],
) -> Result<HmacDigest, AuthError> {
    let message = receive(stream)?;
    let Some(challenge) = message.strip_prefix(CHALLENGE) else {
        return Err(AuthError::Protocol(format!(
            "expected a #CHALLENGE# message, got {}; the peer is not a \
             multiprocessing.connection endpoint with an authkey",
            escaped_excerpt(&message)
        )));
    };
    if challenge.len() < LEGACY_CHALLENGE_LEN {
        return Err(AuthError::Protocol(format!(
            "challenge too short: {} bytes, CPython sends at least {LEGACY_CHALLENGE_LEN}",
            challenge.len()
        )));
    }
    let (digest, response) = create_response(authkey, challenge)?;
    send(stream, &response)?;
    let verdict = receive(stream)?;
    if verdict == WELCOME {
        Ok(digest)
    } else if verdict == FAILURE {
        Err(AuthError::WrongAuthkey(Rejection::PeerRejectedOurDigest))
    } else {
        Err(AuthError::Protocol(format!(
            "expected #WELCOME# or #FAILURE#, got {}",
            escaped_excerpt(&verdict)
        )))
    }
}

/// The listening side's handshake, as `Listener.accept`: deliver our
/// challenge, then answer the peer's.
///
/// # Errors
///
/// As [`deliver_challenge`] and [`answer_challenge`].
///
/// # Examples
///
/// ```
/// use std::os::unix::net::UnixStream;
/// use tensorshare_compat::connection::{client_handshake, server_handshake, Dialect};
///
/// let (mut server, mut client) = UnixStream::pair()?;
/// let peer = std::thread::spawn(move || client_handshake(&mut client, b"key", Dialect::Modern));
/// server_handshake(&mut server, b"key", Dialect::Modern)?;
/// peer.join().expect("client thread")?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn server_handshake<S: Read + Write + ?Sized>(
    stream: &mut S,
    authkey: &[u8],
    dialect: Dialect,
) -> Result<NegotiatedDigests, AuthError> {
    server_handshake_noting_refusal(stream, authkey, dialect, |_| {})
}

/// As [`server_handshake`], calling `before_refusing` with the refusal
/// before the peer is sent `#FAILURE#` (see
/// [`deliver_challenge_noting_refusal`]).
///
/// # Errors
///
/// As [`server_handshake`].
pub fn server_handshake_noting_refusal<S, F>(
    stream: &mut S,
    authkey: &[u8],
    dialect: Dialect,
    before_refusing: F,
) -> Result<NegotiatedDigests, AuthError>
where
    S: Read + Write + ?Sized,
    F: FnOnce(&AuthError),
{
    let peer_answered_with =
        deliver_challenge_noting_refusal(stream, authkey, dialect, before_refusing)?;
    let we_answered_with = answer_challenge(stream, authkey)?;
    Ok(NegotiatedDigests {
        peer_answered_with,
        we_answered_with,
    })
}

/// The connecting side's handshake, as `multiprocessing.connection.Client`:
/// answer the peer's challenge, then deliver ours.
///
/// # Errors
///
/// As [`answer_challenge`] and [`deliver_challenge`].
pub fn client_handshake<S: Read + Write + ?Sized>(
    stream: &mut S,
    authkey: &[u8],
    dialect: Dialect,
) -> Result<NegotiatedDigests, AuthError> {
    let we_answered_with = answer_challenge(stream, authkey)?;
    let peer_answered_with = deliver_challenge(stream, authkey, dialect)?;
    Ok(NegotiatedDigests {
        peer_answered_with,
        we_answered_with,
    })
}

/// The challenge payload (what follows `#CHALLENGE#`, and what is MACed).
fn new_challenge(dialect: Dialect) -> Result<Vec<u8>, AuthError> {
    let (prefix, random_len): (&[u8], usize) = match dialect {
        Dialect::Legacy => (b"", LEGACY_CHALLENGE_LEN),
        Dialect::Modern => (b"{sha256}", MODERN_CHALLENGE_LEN),
    };
    let mut challenge = vec![0u8; prefix.len() + random_len];
    let (head, random) = challenge.split_at_mut(prefix.len());
    head.copy_from_slice(prefix);
    getrandom::fill(random).map_err(|e| AuthError::RandomSource(e.to_string()))?;
    Ok(challenge)
}

fn send<S: Write + ?Sized>(stream: &mut S, message: &[u8]) -> Result<(), AuthError> {
    write_message(stream, message)?;
    stream.flush()?;
    Ok(())
}

fn receive<S: Read + ?Sized>(stream: &mut S) -> Result<Vec<u8>, AuthError> {
    read_message(stream, HANDSHAKE_MAX_MESSAGE_LEN).map_err(|error| match error {
        FramingError::TooLarge { claimed, limit } => AuthError::Protocol(format!(
            "the peer sent a {claimed}-byte handshake message, CPython never sends more than \
             {limit}; the peer does not speak the multiprocessing.connection handshake"
        )),
        other => AuthError::Io(other),
    })
}

/// A printable excerpt of hostile bytes for error messages.
pub(crate) fn escaped_excerpt(bytes: &[u8]) -> String {
    const SHOWN: usize = 64;
    let shown = bytes.get(..SHOWN).unwrap_or(bytes);
    let ellipsis = if bytes.len() > SHOWN { "..." } else { "" };
    format!(
        "b'{}'{ellipsis} ({} bytes)",
        shown.escape_ascii(),
        bytes.len()
    )
}
