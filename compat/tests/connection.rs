//! Framing and handshake of `multiprocessing.connection`, Rust against Rust.

use std::io::{self, IoSlice, Read, Write};
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::Duration;

use tensorshare_compat::connection::{
    AuthError, CHALLENGE, Dialect, FAILURE, FrameHeader, FramePart, FramingError,
    HANDSHAKE_MAX_MESSAGE_LEN, HmacDigest, Rejection, SINGLE_WRITE_MAX_LEN, WELCOME,
    answer_challenge, client_handshake, deliver_challenge, read_header, read_message,
    read_message_into, read_message_reusing, server_handshake, server_handshake_noting_refusal,
    write_message, write_message_vectored,
};

/// Records each `write` call, to check how many writes a message takes.
#[derive(Default)]
struct WriteLog {
    writes: Vec<Vec<u8>>,
}

impl Write for WriteLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writes.push(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn framed(payload: &[u8]) -> Vec<u8> {
    let mut wire = Vec::new();
    write_message(&mut wire, payload).unwrap();
    wire
}

#[test]
fn short_header_is_four_big_endian_bytes() {
    assert_eq!(framed(b""), [0, 0, 0, 0]);
    assert_eq!(framed(b"abc"), [0, 0, 0, 3, b'a', b'b', b'c']);
    let header = FrameHeader::new(0x7fff_ffff);
    assert_eq!(header.as_bytes(), [0x7f, 0xff, 0xff, 0xff]);
    assert!(!header.is_long_form());
}

#[test]
fn long_header_is_minus_one_then_eight_bytes() {
    let header = FrameHeader::new(0x8000_0000);
    assert!(header.is_long_form());
    assert_eq!(
        header.as_bytes(),
        [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0x80, 0, 0, 0]
    );
    let huge = FrameHeader::new(u64::MAX);
    assert_eq!(&huge.as_bytes()[4..], [0xff; 8]);
    assert_eq!(huge.payload_len(), u64::MAX);
}

#[test]
fn long_header_reads_back() {
    let header = FrameHeader::new(0x1_2345_6789);
    let mut wire = header.as_bytes();
    assert_eq!(read_header(&mut wire).unwrap(), 0x1_2345_6789);
    // CPython accepts the long form for any length, small ones included.
    let mut small: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 2, b'o', b'k'];
    assert_eq!(read_message(&mut small, 16).unwrap(), b"ok");
}

#[test]
fn small_messages_go_out_in_one_write() {
    for len in [0, 1, 100, SINGLE_WRITE_MAX_LEN] {
        let mut log = WriteLog::default();
        write_message(&mut log, &vec![9u8; len]).unwrap();
        assert_eq!(log.writes.len(), 1, "{len}-byte message");
        assert_eq!(log.writes[0].len(), 4 + len);
    }
    let mut log = WriteLog::default();
    write_message(&mut log, &vec![9u8; SINGLE_WRITE_MAX_LEN + 1]).unwrap();
    assert_eq!(log.writes.len(), 2);
    assert_eq!(
        log.writes[0],
        (SINGLE_WRITE_MAX_LEN as u32 + 1).to_be_bytes()
    );
}

#[test]
fn round_trips_over_a_socket() {
    let (mut a, mut b) = UnixStream::pair().unwrap();
    let payloads: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"x".to_vec(),
        (0..=255u8).collect(),
        (0..3 << 20).map(|i| (i % 251) as u8).collect(),
    ];
    let sent = payloads.clone();
    let writer = thread::spawn(move || {
        for payload in &sent {
            write_message(&mut a, payload).unwrap();
        }
    });
    let mut reused = Vec::new();
    for (i, payload) in payloads.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(&read_message(&mut b, 4 << 20).unwrap(), payload);
        } else {
            let len = read_message_into(&mut b, &mut reused, 4 << 20).unwrap();
            assert_eq!(len, payload.len());
            assert_eq!(&reused, payload);
        }
    }
    writer.join().unwrap();
    assert!(matches!(
        read_message(&mut b, 16),
        Err(FramingError::Closed)
    ));
}

#[test]
fn oversized_claim_is_refused_before_reading_the_payload() {
    let mut wire: &[u8] = &[0x7f, 0xff, 0xff, 0xff];
    let error = read_message(&mut wire, 1024).unwrap_err();
    assert!(
        matches!(
            error,
            FramingError::TooLarge {
                claimed: 0x7fff_ffff,
                limit: 1024
            }
        ),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(text.contains("2147483647") && text.contains("1024") && text.contains("max_len"));

    let mut long: &[u8] = &[0xff; 12];
    let error = read_message(&mut long, 1 << 40).unwrap_err();
    assert!(
        matches!(
            error,
            FramingError::TooLarge {
                claimed: u64::MAX,
                limit: 0x100_0000_0000
            }
        ),
        "{error:?}"
    );
}

#[test]
fn lying_length_does_not_allocate_the_claim() {
    // 1 GiB claimed, 3 bytes sent: the read fails as truncated, having
    // allocated only a bounded reserve, whichever way it reads.
    type ReadInto = fn(&mut &[u8], &mut Vec<u8>) -> Result<usize, FramingError>;
    let reads: [ReadInto; 2] = [
        |wire, buf| read_message_into(wire, buf, usize::MAX),
        |wire, buf| read_message_reusing(wire, buf, usize::MAX),
    ];
    for read in reads {
        let mut wire: &[u8] = &[0x40, 0, 0, 0, 1, 2, 3];
        let mut buf = Vec::new();
        let error = read(&mut wire, &mut buf).unwrap_err();
        assert!(
            matches!(
                error,
                FramingError::Truncated {
                    part: FramePart::Payload,
                    expected: 0x4000_0000,
                    received: 3
                }
            ),
            "{error:?}"
        );
        assert!(buf.capacity() <= 2 << 20, "capacity {}", buf.capacity());
    }
}

#[test]
fn message_of_exactly_the_limit_is_accepted() {
    let wire = framed(&[5u8; 256]);
    assert_eq!(read_message(&mut wire.as_slice(), 256).unwrap().len(), 256);
    assert!(matches!(
        read_message(&mut wire.as_slice(), 255),
        Err(FramingError::TooLarge {
            claimed: 256,
            limit: 255
        })
    ));
}

#[test]
fn negative_length_other_than_minus_one_is_refused() {
    let mut wire: &[u8] = &(-2i32).to_be_bytes();
    assert!(matches!(
        read_message(&mut wire, 16),
        Err(FramingError::NegativeLength(-2))
    ));
}

#[test]
fn end_of_stream_is_closed_at_a_boundary_and_truncated_inside() {
    let mut empty: &[u8] = &[];
    assert!(matches!(
        read_message(&mut empty, 16),
        Err(FramingError::Closed)
    ));

    let mut half_header: &[u8] = &[0, 0];
    assert!(matches!(
        read_message(&mut half_header, 16),
        Err(FramingError::Truncated {
            part: FramePart::Header,
            expected: 4,
            received: 2
        })
    ));

    let mut half_long: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0, 0, 0];
    assert!(matches!(
        read_message(&mut half_long, 16),
        Err(FramingError::Truncated {
            part: FramePart::LongLength,
            expected: 8,
            received: 3
        })
    ));

    let wire = framed(b"hello");
    let mut cut = &wire[..wire.len() - 2];
    assert!(matches!(
        read_message(&mut cut, 16),
        Err(FramingError::Truncated {
            part: FramePart::Payload,
            expected: 5,
            received: 3
        })
    ));
}

#[test]
fn vectored_messages_are_the_joined_messages() {
    let pieces: Vec<Vec<u8>> = (0..3000u32).map(|i| vec![(i % 251) as u8; 100]).collect();
    let joined = pieces.concat();
    let slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
    // More slices than one writev takes, through a real socket.
    let (mut tx, mut rx) = socket_pair();
    let reader = thread::spawn(move || read_message(&mut rx, usize::MAX).unwrap());
    write_message_vectored(&mut tx, &slices).unwrap();
    assert_eq!(reader.join().unwrap(), joined);

    let mut wire = Vec::new();
    write_message_vectored(&mut wire, &slices).unwrap();
    assert_eq!(wire, framed(&joined));

    // Small ones still go out in one write with their header.
    let mut log = WriteLog::default();
    let small = [IoSlice::new(b"ab"), IoSlice::new(&[]), IoSlice::new(b"c")];
    write_message_vectored(&mut log, &small).unwrap();
    assert_eq!(log.writes, [framed(b"abc")]);
}

#[test]
fn reusing_reads_write_in_place_and_grow_only_as_bytes_arrive() {
    let mut wire = framed(&[1u8; 5000]);
    wire.extend(framed(b"xy"));
    wire.extend(framed(&[3u8; 4000]));
    let mut reader = wire.as_slice();
    let mut buf = Vec::new();
    assert_eq!(
        read_message_reusing(&mut reader, &mut buf, 1 << 20).unwrap(),
        5000
    );
    assert_eq!(buf, [1u8; 5000]);
    let pointer = buf.as_ptr();
    assert_eq!(
        read_message_reusing(&mut reader, &mut buf, 1 << 20).unwrap(),
        2
    );
    assert_eq!(&buf[..3], b"xy\x01");
    assert_eq!(
        read_message_reusing(&mut reader, &mut buf, 1 << 20).unwrap(),
        4000
    );
    assert_eq!(&buf[..4000], &[3u8; 4000][..]);
    assert_eq!(
        (buf.as_ptr(), buf.len()),
        (pointer, 5000),
        "not reallocated"
    );
    assert!(matches!(
        read_message_reusing(&mut reader, &mut buf, 1 << 20),
        Err(FramingError::Closed)
    ));

    let mut buf = Vec::new();
    let mut big: &[u8] = &[0, 0, 1, 0];
    assert!(matches!(
        read_message_reusing(&mut big, &mut buf, 255),
        Err(FramingError::TooLarge {
            claimed: 256,
            limit: 255
        })
    ));
    // Messages past the initial reserve grow the buffer as they arrive.
    let large: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
    let wire = framed(&large);
    let mut trickle = Trickle {
        bytes: &wire[..40],
        interrupt_next: false,
    };
    let mut head = Vec::new();
    assert!(read_message_reusing(&mut trickle, &mut head, usize::MAX).is_err());
    let mut buf = Vec::new();
    let len = read_message_reusing(&mut wire.as_slice(), &mut buf, usize::MAX).unwrap();
    assert_eq!(&buf[..len], &large[..]);
}

/// Reads from a byte sequence delivered one byte per `read`, with an
/// `Interrupted` error before each.
struct Trickle<'a> {
    bytes: &'a [u8],
    interrupt_next: bool,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.interrupt_next = !self.interrupt_next;
        if self.interrupt_next {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let Some((&first, rest)) = self.bytes.split_first() else {
            return Ok(0);
        };
        if buf.is_empty() {
            return Ok(0);
        }
        buf[0] = first;
        self.bytes = rest;
        Ok(1)
    }
}

#[test]
fn short_reads_and_interrupts_are_retried() {
    let mut wire = framed(b"first");
    wire.extend(framed(&[7u8; 300]));
    let mut reader = Trickle {
        bytes: &wire,
        interrupt_next: false,
    };
    assert_eq!(read_message(&mut reader, 1024).unwrap(), b"first");
    assert_eq!(read_message(&mut reader, 1024).unwrap(), vec![7u8; 300]);
    assert!(matches!(
        read_message(&mut reader, 1024),
        Err(FramingError::Closed)
    ));
}

fn socket_pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    for s in [&a, &b] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    (a, b)
}

#[test]
fn handshake_succeeds_in_every_dialect_pair() {
    for server_dialect in [Dialect::Legacy, Dialect::Modern] {
        for client_dialect in [Dialect::Legacy, Dialect::Modern] {
            let (mut server, mut client) = socket_pair();
            let peer = thread::spawn(move || {
                let digests = client_handshake(&mut client, b"shared key", client_dialect)?;
                write_message(&mut client, b"after auth")?;
                Ok::<_, AuthError>(digests)
            });
            let on_server = server_handshake(&mut server, b"shared key", server_dialect).unwrap();
            let on_client = peer.join().unwrap().unwrap();
            let expect = |dialect| match dialect {
                Dialect::Legacy => HmacDigest::Md5,
                Dialect::Modern => HmacDigest::Sha256,
            };
            assert_eq!(on_server.peer_answered_with, expect(server_dialect));
            assert_eq!(on_server.we_answered_with, expect(client_dialect));
            assert_eq!(on_client.we_answered_with, expect(server_dialect));
            assert_eq!(on_client.peer_answered_with, expect(client_dialect));
            assert_eq!(read_message(&mut server, 64).unwrap(), b"after auth");
        }
    }
}

#[test]
fn empty_authkey_works_when_both_sides_use_it() {
    let (mut server, mut client) = socket_pair();
    let peer = thread::spawn(move || client_handshake(&mut client, b"", Dialect::Modern));
    server_handshake(&mut server, b"", Dialect::Modern).unwrap();
    peer.join().unwrap().unwrap();
}

#[test]
fn wrong_authkey_is_refused_on_both_sides() {
    for dialect in [Dialect::Legacy, Dialect::Modern] {
        let (mut server, mut client) = socket_pair();
        let peer = thread::spawn(move || client_handshake(&mut client, b"client key", dialect));
        let server_error = server_handshake(&mut server, b"server key", dialect).unwrap_err();
        let client_error = peer.join().unwrap().unwrap_err();
        assert!(
            matches!(
                server_error,
                AuthError::WrongAuthkey(Rejection::PeerDigestWrong)
            ),
            "{server_error:?}"
        );
        assert!(
            matches!(
                client_error,
                AuthError::WrongAuthkey(Rejection::PeerRejectedOurDigest)
            ),
            "{client_error:?}"
        );
        for error in [server_error, client_error] {
            let text = error.to_string();
            assert!(
                text.contains("authentication failed: the authkeys differ"),
                "{text}"
            );
            assert!(
                text.contains("multiprocessing.current_process().authkey"),
                "{text}"
            );
        }
    }
}

#[test]
fn a_refusal_is_noted_before_the_peer_hears_of_it() {
    let (mut server, mut client) = socket_pair();
    let peer = thread::spawn(move || client_handshake(&mut client, b"client key", Dialect::Modern));
    let mut noted = None;
    let error =
        server_handshake_noting_refusal(&mut server, b"server key", Dialect::Modern, |refusal| {
            // Long enough for a peer already told `#FAILURE#` to have returned.
            thread::sleep(Duration::from_millis(100));
            noted = Some((refusal.to_string(), peer.is_finished()));
        })
        .unwrap_err();
    let (noted, peer_had_returned) = noted.expect("the refusal was noted");
    assert_eq!(noted, error.to_string());
    assert!(!peer_had_returned, "the peer heard of the refusal first");
    assert!(matches!(
        peer.join().unwrap().unwrap_err(),
        AuthError::WrongAuthkey(Rejection::PeerRejectedOurDigest)
    ));

    // Nothing is noted when the keys agree.
    let (mut server, mut client) = socket_pair();
    let peer = thread::spawn(move || client_handshake(&mut client, b"key", Dialect::Modern));
    server_handshake_noting_refusal(&mut server, b"key", Dialect::Modern, |refusal| {
        panic!("noted {refusal}")
    })
    .unwrap();
    peer.join().unwrap().unwrap();
}

/// Plays a scripted peer: sends `to_send` frames in order, after reading one
/// frame before each except the first.
fn scripted_peer(
    mut stream: UnixStream,
    to_send: Vec<Vec<u8>>,
) -> thread::JoinHandle<Vec<Vec<u8>>> {
    thread::spawn(move || {
        let mut received = Vec::new();
        for (i, frame) in to_send.iter().enumerate() {
            if i > 0 {
                match read_message(&mut stream, 1024) {
                    Ok(message) => received.push(message),
                    Err(_) => return received,
                }
            }
            if stream.write_all(frame).is_err() {
                return received;
            }
        }
        while let Ok(message) = read_message(&mut stream, 1024) {
            received.push(message);
        }
        received
    })
}

fn challenge_frame(payload: &[u8]) -> Vec<u8> {
    let mut message = CHALLENGE.to_vec();
    message.extend_from_slice(payload);
    framed(&message)
}

#[test]
fn answering_side_refuses_bad_challenges() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            framed(b"hello there, no challenge"),
            "expected a #CHALLENGE#",
        ),
        (challenge_frame(&[1; 19]), "challenge too short: 19 bytes"),
        (
            challenge_frame(b"{sha1}0123456789012345678901234567890123456789"),
            "unsupported",
        ),
        (
            framed(&[b'#'; HANDSHAKE_MAX_MESSAGE_LEN + 1]),
            "257-byte handshake message",
        ),
    ];
    for (frame, expected) in cases {
        let (mut ours, theirs) = socket_pair();
        let peer = scripted_peer(theirs, vec![frame]);
        let error = answer_challenge(&mut ours, b"key").unwrap_err();
        assert!(matches!(error, AuthError::Protocol(_)), "{error:?}");
        assert!(error.to_string().contains(expected), "{error}");
        drop(ours);
        peer.join().unwrap();
    }
}

#[test]
fn sha3_challenge_is_an_unsupported_digest() {
    let (mut ours, theirs) = socket_pair();
    let peer = scripted_peer(
        theirs,
        vec![challenge_frame(
            &[b"{sha3_256}".as_slice(), &[0; 40]].concat(),
        )],
    );
    let error = answer_challenge(&mut ours, b"key").unwrap_err();
    assert!(
        matches!(&error, AuthError::UnsupportedDigest(name) if name == "sha3_256"),
        "{error:?}"
    );
    drop(ours);
    peer.join().unwrap();
}

#[test]
fn answering_side_refuses_an_unknown_verdict() {
    let (mut ours, theirs) = socket_pair();
    let peer = scripted_peer(theirs, vec![challenge_frame(&[3; 20]), framed(b"#MAYBE#")]);
    let error = answer_challenge(&mut ours, b"key").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("expected #WELCOME# or #FAILURE#"),
        "{error}"
    );
    drop(ours);
    let received = peer.join().unwrap();
    assert_eq!(
        received[0].len(),
        16,
        "legacy challenge answered with raw HMAC-MD5"
    );
}

#[test]
fn answer_to_a_modern_challenge_is_prefixed_sha256() {
    let (mut ours, theirs) = socket_pair();
    let payload = [b"{sha256}".as_slice(), &[4; 40]].concat();
    let peer = scripted_peer(theirs, vec![challenge_frame(&payload), framed(WELCOME)]);
    assert_eq!(
        answer_challenge(&mut ours, b"key").unwrap(),
        HmacDigest::Sha256
    );
    drop(ours);
    let received = peer.join().unwrap();
    assert_eq!(&received[0][..8], b"{sha256}");
    assert_eq!(received[0].len(), 8 + 32);
}

#[test]
fn delivering_side_sends_failure_for_a_malformed_answer() {
    for (dialect, prefix) in [(Dialect::Legacy, &b""[..]), (Dialect::Modern, b"{sha256}")] {
        let (mut ours, mut theirs) = socket_pair();
        let peer = thread::spawn(move || {
            let challenge = read_message(&mut theirs, 1024).unwrap();
            // A sha256 tag cut short: a protocol error, refused like CPython.
            write_message(&mut theirs, b"{sha256}too short for sha256").unwrap();
            let verdict = read_message(&mut theirs, 1024).unwrap();
            (challenge, verdict)
        });
        let error = deliver_challenge(&mut ours, b"key", dialect).unwrap_err();
        assert!(matches!(error, AuthError::Protocol(_)), "{error:?}");
        let (challenge, verdict) = peer.join().unwrap();
        assert_eq!(verdict, FAILURE);
        let payload = challenge.strip_prefix(CHALLENGE).unwrap();
        assert!(payload.starts_with(prefix));
        let random_len = match dialect {
            Dialect::Legacy => 20,
            Dialect::Modern => 40,
        };
        assert_eq!(payload.len(), prefix.len() + random_len);
    }
}

#[test]
fn closed_peer_during_handshake_is_an_io_error() {
    let (mut ours, theirs) = socket_pair();
    drop(theirs);
    let error = client_handshake(&mut ours, b"key", Dialect::Modern).unwrap_err();
    assert!(
        matches!(error, AuthError::Io(FramingError::Closed)),
        "{error:?}"
    );
}
