//! The `multiprocessing.connection` authkey handshake against a scripted
//! peer, in both dialects (CPython <= 3.11's raw HMAC-MD5 and 3.12's
//! `{digest}` prefixes) and from both sides: the side that reads a
//! challenge and a `#WELCOME#`/`#FAILURE#` verdict (`answer_challenge`) and
//! the side that reads an answer (`deliver_challenge`), alone and chained
//! as the listener and client handshakes.
//!
//! The peer's messages are built from the input: raw bytes, framed bytes,
//! challenges with any `{digest}` prefix, answers to the challenge we sent
//! (computed here with the right or a wrong key, then possibly corrupted),
//! verdicts. Nothing may panic. What we send must be well-formed frames.
//! Our answer to a challenge must be the HMAC CPython 3.12's
//! `_create_response` computes, checked against an HMAC computed here; we
//! must accept an answer exactly when it is the right one for our
//! challenge, and refuse every other with `#FAILURE#`.
#![no_main]

use std::collections::VecDeque;
use std::io::{self, Read, Write};

use arbitrary::Arbitrary;
use hmac::{Hmac, KeyInit, Mac};
use libfuzzer_sys::fuzz_target;
use tensorshare_compat::connection::{
    AuthError, CHALLENGE, Dialect, FAILURE, FramingError, HANDSHAKE_MAX_MESSAGE_LEN, HmacDigest,
    LEGACY_CHALLENGE_LEN, MODERN_CHALLENGE_LEN, Rejection, WELCOME, answer_challenge,
    client_handshake, deliver_challenge, read_message, server_handshake, write_message,
};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Side {
    /// We deliver a challenge and read the peer's answer.
    Deliver(DialectChoice),
    /// We read the peer's challenge, answer it and read its verdict.
    Answer,
    /// `Listener.accept`: deliver, then answer.
    Server(DialectChoice),
    /// `Client`: answer, then deliver.
    Client(DialectChoice),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum DialectChoice {
    Legacy,
    Modern,
}

impl From<DialectChoice> for Dialect {
    fn from(choice: DialectChoice) -> Self {
        match choice {
            DialectChoice::Legacy => Dialect::Legacy,
            DialectChoice::Modern => Dialect::Modern,
        }
    }
}

/// A digest CPython 3.12 may name in a `{...}` prefix.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum DigestName {
    Md5,
    Sha256,
    Sha384,
    Sha3_256,
    Sha3_384,
}

impl DigestName {
    fn name(self) -> &'static [u8] {
        match self {
            Self::Md5 => b"md5",
            Self::Sha256 => b"sha256",
            Self::Sha384 => b"sha384",
            Self::Sha3_256 => b"sha3_256",
            Self::Sha3_384 => b"sha3_384",
        }
    }
}

#[derive(Arbitrary, Debug)]
enum ChallengePrefix {
    /// CPython <= 3.11: random bytes straight after `#CHALLENGE#`.
    None,
    /// `{name}`, as CPython 3.12 writes `{sha256}`.
    Named(DigestName),
    /// Braces around anything.
    Braced(Vec<u8>),
}

/// How the peer answers our challenge.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum AnswerForm {
    /// A raw HMAC-MD5 tag, as CPython <= 3.11 answers any challenge.
    RawMd5,
    /// `{md5}`, `{sha256}` or `{sha384}` and the tag.
    Md5,
    Sha256,
    Sha384,
}

#[derive(Arbitrary, Debug)]
enum PeerMessage {
    /// Bytes on the wire as they are: bad or partial headers.
    Raw(Vec<u8>),
    /// These bytes as one message.
    Framed(Vec<u8>),
    /// These bytes as one message with the 12-byte header CPython accepts
    /// for any length.
    LongFramed(Vec<u8>),
    /// `#CHALLENGE#`, a prefix, and the random part.
    Challenge {
        prefix: ChallengePrefix,
        random: Vec<u8>,
    },
    /// The answer to the last challenge we sent, under our key or another,
    /// with one byte flipped when `corrupt` asks (and the flip changes it).
    Answer {
        form: AnswerForm,
        same_key: bool,
        corrupt: Option<(u8, u8)>,
    },
    Welcome,
    Failure,
}

#[derive(Arbitrary, Debug)]
struct Input {
    side: Side,
    authkey: Vec<u8>,
    /// The most bytes one read returns; 0 for no limit.
    chunk: u8,
    peer: Vec<PeerMessage>,
}

/// The peer: serves the scripted messages as they are asked for, rendering
/// answers against what we have sent so far, and keeps what we send.
struct ScriptedPeer {
    script: VecDeque<PeerMessage>,
    authkey: Vec<u8>,
    chunk: usize,
    /// Everything the peer has put on the wire, in order.
    wire: Vec<u8>,
    read: usize,
    /// Everything we sent.
    sent: Vec<u8>,
    /// For each answer the peer rendered: whether it is the right one.
    answers: Vec<bool>,
}

impl ScriptedPeer {
    fn render(&mut self, message: PeerMessage) {
        match message {
            PeerMessage::Raw(bytes) => self.wire.extend_from_slice(&bytes),
            PeerMessage::Framed(bytes) => frame(&mut self.wire, &bytes),
            PeerMessage::LongFramed(bytes) => {
                self.wire.extend_from_slice(&(-1i32).to_be_bytes());
                self.wire
                    .extend_from_slice(&(bytes.len() as u64).to_be_bytes());
                self.wire.extend_from_slice(&bytes);
            }
            PeerMessage::Challenge { prefix, random } => {
                let mut message = CHALLENGE.to_vec();
                match prefix {
                    ChallengePrefix::None => {}
                    ChallengePrefix::Named(name) => {
                        message.push(b'{');
                        message.extend_from_slice(name.name());
                        message.push(b'}');
                    }
                    ChallengePrefix::Braced(inside) => {
                        message.push(b'{');
                        message.extend_from_slice(&inside);
                        message.push(b'}');
                    }
                }
                message.extend_from_slice(&random);
                frame(&mut self.wire, &message);
            }
            PeerMessage::Answer {
                form,
                same_key,
                corrupt,
            } => {
                let challenge = last_challenge(&self.sent);
                let key = if same_key {
                    self.authkey.clone()
                } else {
                    other_key(&self.authkey)
                };
                let mut answer = match form {
                    AnswerForm::RawMd5 => tag(HmacDigest::Md5, &key, &challenge),
                    AnswerForm::Md5 => prefixed(HmacDigest::Md5, &key, &challenge),
                    AnswerForm::Sha256 => prefixed(HmacDigest::Sha256, &key, &challenge),
                    AnswerForm::Sha384 => prefixed(HmacDigest::Sha384, &key, &challenge),
                };
                let mut corrupted = false;
                if let Some((at, xor)) = corrupt {
                    let at = usize::from(at) % answer.len();
                    answer[at] ^= xor;
                    corrupted = xor != 0;
                }
                self.answers.push(same_key && !corrupted);
                frame(&mut self.wire, &answer);
            }
            PeerMessage::Welcome => frame(&mut self.wire, WELCOME),
            PeerMessage::Failure => frame(&mut self.wire, FAILURE),
        }
    }
}

impl Read for ScriptedPeer {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.read == self.wire.len() {
            let Some(message) = self.script.pop_front() else {
                return Ok(0);
            };
            self.render(message);
        }
        let n = (self.wire.len() - self.read).min(buf.len()).min(self.chunk);
        buf[..n].copy_from_slice(&self.wire[self.read..self.read + n]);
        self.read += n;
        Ok(n)
    }
}

impl Write for ScriptedPeer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sent.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn frame(wire: &mut Vec<u8>, payload: &[u8]) {
    write_message(wire, payload).expect("writing to a Vec");
}

/// The messages in `wire`, up to the first that does not read.
fn frames(wire: &[u8]) -> (Vec<Vec<u8>>, Result<(), FramingError>) {
    let mut reader = wire;
    let mut messages = Vec::new();
    loop {
        match read_message(&mut reader, HANDSHAKE_MAX_MESSAGE_LEN) {
            Ok(message) => messages.push(message),
            Err(FramingError::Closed) => return (messages, Ok(())),
            Err(error) => return (messages, Err(error)),
        }
    }
}

/// The payload of the last challenge we sent (empty if none).
fn last_challenge(sent: &[u8]) -> Vec<u8> {
    frames(sent)
        .0
        .iter()
        .rev()
        .find_map(|message| message.strip_prefix(CHALLENGE))
        .unwrap_or_default()
        .to_vec()
}

/// A key whose HMACs differ from `key`'s: HMAC pads short keys with zeros,
/// so appending a zero would not do.
fn other_key(key: &[u8]) -> Vec<u8> {
    let mut other = key.to_vec();
    match other.first_mut() {
        Some(first) => *first ^= 1,
        None => other.push(1),
    }
    other
}

fn tag(digest: HmacDigest, key: &[u8], message: &[u8]) -> Vec<u8> {
    fn mac<M: Mac + KeyInit>(key: &[u8], message: &[u8]) -> Vec<u8> {
        let mut mac = <M as KeyInit>::new_from_slice(key).expect("HMAC takes any key");
        mac.update(message);
        mac.finalize().into_bytes().to_vec()
    }
    match digest {
        HmacDigest::Md5 => mac::<Hmac<md5::Md5>>(key, message),
        HmacDigest::Sha256 => mac::<Hmac<sha2::Sha256>>(key, message),
        HmacDigest::Sha384 => mac::<Hmac<sha2::Sha384>>(key, message),
        other => panic!("no such digest in this target: {other:?}"),
    }
}

fn prefixed(digest: HmacDigest, key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut answer = format!("{{{}}}", digest.name()).into_bytes();
    answer.extend_from_slice(&tag(digest, key, message));
    answer
}

/// What CPython 3.12's `_create_response` sends for a challenge payload,
/// or `None` where it raises: 20 bytes (or 16) are a legacy challenge,
/// answered with a raw HMAC-MD5; otherwise a `{name}` prefix, its `}`
/// within the first 10 bytes, names the digest, and the answer is the
/// prefix and the HMAC of the whole payload.
fn cpython_response(key: &[u8], payload: &[u8]) -> Option<(HmacDigest, Vec<u8>)> {
    if payload.len() == LEGACY_CHALLENGE_LEN || payload.len() == 16 {
        return Some((HmacDigest::Md5, tag(HmacDigest::Md5, key, payload)));
    }
    let after_brace = payload.strip_prefix(b"{")?;
    let window = &after_brace[..after_brace.len().min(9)];
    let close = window.iter().position(|&b| b == b'}')?;
    let digest = match &after_brace[..close] {
        b"md5" => HmacDigest::Md5,
        b"sha256" => HmacDigest::Sha256,
        b"sha384" => HmacDigest::Sha384,
        // sha3_256 and sha3_384 are CPython's too, but not ours: refused.
        _ => return None,
    };
    Some((digest, prefixed(digest, key, payload)))
}

fuzz_target!(|input: Input| {
    let Input {
        side,
        authkey,
        chunk,
        peer,
    } = input;
    let mut stream = ScriptedPeer {
        script: peer.into(),
        authkey: authkey.clone(),
        chunk: if chunk == 0 {
            usize::MAX
        } else {
            usize::from(chunk)
        },
        wire: Vec::new(),
        read: 0,
        sent: Vec::new(),
        answers: Vec::new(),
    };
    match side {
        Side::Deliver(dialect) => {
            let result = deliver_challenge(&mut stream, &authkey, dialect.into());
            check_deliver(&stream, dialect, &result);
        }
        Side::Answer => {
            let result = answer_challenge(&mut stream, &authkey);
            check_answer(&stream, &authkey, &result);
        }
        Side::Server(dialect) => {
            let result = server_handshake(&mut stream, &authkey, dialect.into());
            let (sent, _) = frames(&stream.sent);
            if result.is_ok() {
                assert_eq!(sent.get(1).map(Vec::as_slice), Some(WELCOME));
                assert!(stream.answers.first().copied().unwrap_or(false));
            }
        }
        Side::Client(dialect) => {
            let result = client_handshake(&mut stream, &authkey, dialect.into());
            let (sent, _) = frames(&stream.sent);
            if result.is_ok() {
                assert_eq!(sent.last().map(Vec::as_slice), Some(WELCOME));
                assert!(stream.answers.iter().any(|&right| right));
            }
        }
    }
    // Whatever happened, what we sent is whole messages CPython reads.
    let (_, end) = frames(&stream.sent);
    assert!(end.is_ok(), "we sent a malformed message: {end:?}");
});

/// `deliver_challenge`: the challenge has the dialect's form; the verdict
/// follows the answer; `#WELCOME#` only for the right answer.
fn check_deliver(
    stream: &ScriptedPeer,
    dialect: DialectChoice,
    result: &Result<HmacDigest, AuthError>,
) {
    let (sent, _) = frames(&stream.sent);
    let challenge = sent
        .first()
        .and_then(|message| message.strip_prefix(CHALLENGE))
        .expect("a challenge goes out first");
    match dialect {
        DialectChoice::Legacy => assert_eq!(challenge.len(), LEGACY_CHALLENGE_LEN),
        DialectChoice::Modern => {
            let random = challenge
                .strip_prefix(b"{sha256}")
                .expect("a {sha256} challenge");
            assert_eq!(random.len(), MODERN_CHALLENGE_LEN);
        }
    }
    let verdict = sent.get(1).map(Vec::as_slice);
    assert!(sent.len() <= 2);
    // The answer we read is the peer's first message when the script
    // starts with one; a forged answer cannot be right by chance.
    let first_answer = stream.answers.first().copied();
    match result {
        Ok(_) => {
            assert_eq!(verdict, Some(WELCOME));
            assert_eq!(first_answer, Some(true), "accepted a wrong answer");
        }
        Err(AuthError::Io(_)) => assert_ne!(verdict, Some(WELCOME)),
        Err(AuthError::WrongAuthkey(rejection)) => {
            assert_eq!(*rejection, Rejection::PeerDigestWrong);
            assert_eq!(verdict, Some(FAILURE));
        }
        // An answer longer than any CPython sends is refused before it is
        // read, without a verdict, as CPython's `recv_bytes(256)` raises.
        Err(AuthError::Protocol(_)) => assert!(verdict.is_none() || verdict == Some(FAILURE)),
        Err(_) => assert_eq!(verdict, Some(FAILURE)),
    }
}

/// `answer_challenge`, replayed from the peer's bytes: the challenge read,
/// our answer against CPython's, and the verdict's outcome.
fn check_answer(stream: &ScriptedPeer, authkey: &[u8], result: &Result<HmacDigest, AuthError>) {
    let (sent, _) = frames(&stream.sent);
    let mut peer = &stream.wire[..];
    let challenge = match read_message(&mut peer, HANDSHAKE_MAX_MESSAGE_LEN) {
        Ok(message) => message,
        Err(_) => {
            assert!(result.is_err() && sent.is_empty());
            return;
        }
    };
    let expected = challenge
        .strip_prefix(CHALLENGE)
        .filter(|payload| payload.len() >= LEGACY_CHALLENGE_LEN)
        .and_then(|payload| cpython_response(authkey, payload));
    let Some((digest, response)) = expected else {
        assert!(
            matches!(
                result,
                Err(AuthError::Protocol(_) | AuthError::UnsupportedDigest(_))
            ),
            "{challenge:?} gave {result:?}"
        );
        assert!(sent.is_empty(), "answered a challenge CPython refuses");
        return;
    };
    assert_eq!(sent, [response], "our answer is not CPython's");
    match (read_message(&mut peer, HANDSHAKE_MAX_MESSAGE_LEN), result) {
        (Ok(verdict), Ok(ours)) => {
            assert_eq!(verdict, WELCOME);
            assert_eq!(*ours, digest);
        }
        (Ok(verdict), Err(AuthError::WrongAuthkey(Rejection::PeerRejectedOurDigest))) => {
            assert_eq!(verdict, FAILURE)
        }
        (Ok(verdict), Err(AuthError::Protocol(_))) => {
            assert!(verdict != WELCOME && verdict != FAILURE)
        }
        (Err(FramingError::TooLarge { .. }), Err(AuthError::Protocol(_))) => {}
        (Err(_), Err(AuthError::Io(_))) => {}
        (verdict, result) => panic!("the verdict {verdict:?} gave {result:?}"),
    }
}
