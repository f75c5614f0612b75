//! Hostile inputs: huge length fields, deep nesting, exhausted limits,
//! arbitrary bytes.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use tensorshare_compat::pickle::{
    DecodeError, DecodeErrorCode, Limits, Node, Pickle, decode, decode_all,
};

use super::golden::GOLDENS;
use super::support::{allow_all, code, decode_err, decode_err_with, decode_trusted};

#[test]
fn huge_length_fields_fail_before_allocating() {
    let start = Instant::now();
    // BINBYTES8, BINUNICODE8, BYTEARRAY8 claiming 2^63 and 2^64 - 1 bytes.
    for opcode in [0x8e_u8, 0x8d, 0x96] {
        for len in [1u64 << 63, u64::MAX] {
            let mut bytes = vec![0x80, 0x05, opcode];
            bytes.extend(len.to_le_bytes());
            bytes.extend(b"abc.");
            assert_eq!(
                decode_err(&bytes),
                DecodeError {
                    offset: 2,
                    code: DecodeErrorCode::Truncated
                }
            );
        }
    }
    // BINBYTES, BINUNICODE, LONG4, BINSTRING claiming 2^31 - 1 bytes.
    for opcode in [b'B', b'X', 0x8b, b'T'] {
        let bytes = [
            &[0x80, 0x03, opcode][..],
            &0x7fff_ffff_u32.to_le_bytes(),
            b".",
        ]
        .concat();
        assert_eq!(
            decode_err(&bytes),
            DecodeError {
                offset: 2,
                code: DecodeErrorCode::Truncated
            }
        );
    }
    // A memo key of 2^32 - 1 costs one map entry, not a 4-billion-slot table.
    let decoded = decode_trusted(b"\x80\x02Nr\xff\xff\xff\xff0j\xff\xff\xff\xff.");
    assert_eq!(
        decoded.pickle.get(decoded.pickle.root().unwrap()).unwrap(),
        &Node::None
    );
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn deep_nesting_fails_fast() {
    const DEPTH: usize = 200_000;
    let cases: Vec<Vec<u8>> = vec![
        // b'\x80\x04' + b']' * n + b'a' * (n - 1) + b'.'
        [&b"\x80\x04"[..], &[b']'; DEPTH], &[b'a'; DEPTH - 1], b"."].concat(),
        // b'(' * n + b'l' * n + b'.'
        [&[b'('; DEPTH][..], &[b'l'; DEPTH], b"."].concat(),
        // b'\x80\x02' + b')' + b'\x85' * n + b'.'
        [&b"\x80\x02)"[..], &[0x85; DEPTH], b"."].concat(),
        // b'\x80\x02' + b'N' + b'Q' * n + b'.' (persistent ids of persistent ids)
        [&b"\x80\x02N"[..], &[b'Q'; DEPTH], b"."].concat(),
    ];
    for bytes in cases {
        let start = Instant::now();
        let err = decode_err(&bytes);
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "took {:?}",
            start.elapsed()
        );
        assert_eq!(err.code, DecodeErrorCode::NestingTooDeep { limit: 1000 });
        assert!(
            err.to_string().contains("nesting deeper than 1000"),
            "{err}"
        );
    }

    // Exactly at the limit is fine; one more is not.
    let nested = |depth: usize| {
        [
            &b"\x80\x04"[..],
            &vec![b']'; depth],
            &vec![b'a'; depth - 1],
            b".",
        ]
        .concat()
    };
    let limits = Limits::default().with_max_depth(10);
    decode_all(&nested(10), &allow_all, &limits).expect("10 levels are within the limit");
    let err = decode_err_with(&nested(11), &limits);
    assert_eq!(
        err,
        DecodeError {
            offset: 2 + 11 + 9,
            code: DecodeErrorCode::NestingTooDeep { limit: 10 }
        }
    );
}

#[test]
fn depth_of_a_cycle_is_computed_without_looping() {
    // l = []; memoize; then append l to itself n times.
    let self_appends = |n: usize| [&b"\x80\x04]\x94"[..], &b"h\x00a".repeat(n), b"."].concat();
    let decoded = decode_trusted(&self_appends(500));
    let root = decoded.pickle.root().unwrap();
    assert_eq!(
        decoded.pickle.get(root).unwrap(),
        &Node::List(vec![root; 500])
    );
    assert_eq!(
        code(&self_appends(1000)),
        DecodeErrorCode::NestingTooDeep { limit: 1000 }
    );
}

#[test]
fn node_memo_and_stack_limits() {
    let list_of_five = b"\x80\x02](K\x01K\x02K\x03K\x04K\x05e.";
    let err = decode_err_with(list_of_five, &Limits::default().with_max_nodes(3));
    assert_eq!(
        err,
        DecodeError {
            offset: 8,
            code: DecodeErrorCode::TooManyNodes { limit: 3 }
        }
    );
    assert!(err.to_string().contains("raise Limits::max_nodes"));

    let err = decode_err_with(list_of_five, &Limits::default().with_max_stack(4));
    assert_eq!(
        err,
        DecodeError {
            offset: 10,
            code: DecodeErrorCode::StackTooLarge { limit: 4 }
        }
    );
    let err = decode_err_with(b"(((N.", &Limits::default().with_max_stack(2));
    assert_eq!(
        err,
        DecodeError {
            offset: 2,
            code: DecodeErrorCode::StackTooLarge { limit: 2 }
        }
    );

    // Storing under an existing key does not grow the memo.
    let limits = Limits::default().with_max_memo(1);
    decode_all(b"Nq\x01q\x01.", &allow_all, &limits).expect("a memo slot written twice");
    let err = decode_err_with(b"Nq\x01q\x02.", &limits);
    assert_eq!(
        err,
        DecodeError {
            offset: 3,
            code: DecodeErrorCode::TooManyMemoEntries { limit: 1 }
        }
    );
}

/// Opcodes with plausible arguments, so that generated programs get past
/// the first byte.
fn opcode_program() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"(".to_vec()),
        Just(b".".to_vec()),
        Just(b"0".to_vec()),
        Just(b"1".to_vec()),
        Just(b"2".to_vec()),
        Just(b"N".to_vec()),
        Just(b"]".to_vec()),
        Just(b"}".to_vec()),
        Just(b")".to_vec()),
        Just(b"\x8f".to_vec()),
        Just(b"a".to_vec()),
        Just(b"e".to_vec()),
        Just(b"s".to_vec()),
        Just(b"u".to_vec()),
        Just(b"\x90".to_vec()),
        Just(b"b".to_vec()),
        Just(b"t".to_vec()),
        Just(b"l".to_vec()),
        Just(b"d".to_vec()),
        Just(b"\x91".to_vec()),
        Just(b"\x85".to_vec()),
        Just(b"\x86".to_vec()),
        Just(b"\x87".to_vec()),
        Just(b"R".to_vec()),
        Just(b"\x81".to_vec()),
        Just(b"\x92".to_vec()),
        Just(b"\x93".to_vec()),
        Just(b"o".to_vec()),
        Just(b"Q".to_vec()),
        Just(b"\x94".to_vec()),
        Just(b"cmod\nname\n".to_vec()),
        Just(b"imod\nname\n".to_vec()),
        Just(b"\x8c\x03mod".to_vec()),
        Just(b"Pid\n".to_vec()),
        Just(b"I01\n".to_vec()),
        Just(b"L12345678901234567890L\n".to_vec()),
        Just(b"F1.5\n".to_vec()),
        Just(b"S'a\\x41'\n".to_vec()),
        Just(b"Va\\u0041\n".to_vec()),
        any::<u8>().prop_map(|n| vec![b'K', n]),
        any::<u8>().prop_map(|n| vec![b'h', n % 8]),
        any::<u8>().prop_map(|n| vec![b'q', n % 8]),
        any::<u8>().prop_map(|n| vec![0x8a, 1, n]),
        any::<u8>().prop_map(|n| vec![b'C', n % 4, b'x', b'y', b'z']),
        any::<u8>().prop_map(|n| vec![0x80, n % 8]),
    ];
    prop::collection::vec(piece, 0..64).prop_map(|pieces| pieces.concat())
}

/// Walks every node reachable from the root iteratively, checking that each
/// id is in the arena, as a consumer would.
fn walk(pickle: &Pickle) {
    let mut seen = vec![false; pickle.len()];
    let mut todo = vec![pickle.root().unwrap()];
    while let Some(id) = todo.pop() {
        let node = pickle.get(id).expect("node id in range");
        if std::mem::replace(&mut seen[id.index()], true) {
            continue;
        }
        todo.extend(node.children());
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let limits = Limits::default();
        if let Ok(decoded) = decode(&bytes, &allow_all, &limits) {
            prop_assert!(decoded.consumed <= bytes.len());
            walk(&decoded.pickle);
        }
    }

    #[test]
    fn opcode_programs_never_panic(program in opcode_program()) {
        let limits = Limits { max_depth: 8, max_nodes: 64, max_memo: 4, max_stack: 16 };
        for limits in [Limits::default(), limits] {
            match decode(&program, &allow_all, &limits) {
                Ok(decoded) => {
                    prop_assert!(decoded.consumed <= program.len());
                    walk(&decoded.pickle);
                }
                Err(err) => prop_assert!(err.offset <= program.len()),
            }
        }
    }

    #[test]
    fn truncating_a_golden_is_an_error_never_a_panic(index in 0..GOLDENS.len(), cut in 0usize..100_000) {
        let bytes = GOLDENS[index].bytes;
        let cut = cut % bytes.len();
        let err = decode(&bytes[..cut], &allow_all, &Limits::default()).unwrap_err();
        prop_assert!(err.offset <= cut);
    }
}
