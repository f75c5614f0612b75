//! The pickle decoder against CPython: golden pickles, memo sharing and
//! cycles, every error code, frames, hostile inputs and arbitrary bytes.

#[path = "decode/errors.rs"]
mod errors;
#[path = "decode/framing.rs"]
mod framing;
#[path = "decode/golden.rs"]
mod golden;
#[path = "decode/hostile.rs"]
mod hostile;
#[path = "decode/not_a_pickle.rs"]
mod not_a_pickle;
#[path = "decode/support.rs"]
mod support;
#[path = "../../tests/support/test_python.rs"]
mod test_python;

use serde_json::{Value, json};
use tensorshare_compat::pickle::{DecodeError, DecodeErrorCode, Limits, Node, decode, decode_all};

use golden::GOLDENS;
use support::{allow_all, decode_err, decode_trusted, golden, render_root};

#[test]
fn goldens_decode_as_cpython_reads_them() {
    for golden in GOLDENS {
        let decoded = decode_all(golden.bytes, &allow_all, &Limits::default())
            .unwrap_or_else(|err| panic!("{}: {err}", golden.name));
        assert_eq!(decoded.consumed, golden.bytes.len(), "{}", golden.name);
        let expected: Value = serde_json::from_str(golden.expected).unwrap();
        assert_eq!(render_root(&decoded.pickle), expected, "{}", golden.name);
    }
}

#[test]
fn goldens_cover_every_protocol() {
    for protocol in 0..=5 {
        let suffix = format!("_p{protocol}");
        let count = GOLDENS
            .iter()
            .filter(|golden| golden.name.ends_with(&suffix))
            .count();
        assert!(count >= 8, "protocol {protocol} has {count} goldens");
    }
}

#[test]
fn one_object_referenced_twice_is_one_node() {
    for protocol in 0..=5 {
        // (s, s, [s]) with s = [1]
        let decoded = decode_trusted(golden(&format!("memo_p{protocol}")));
        let pickle = &decoded.pickle;
        let Node::Tuple(items) = pickle.get(pickle.root().unwrap()).unwrap() else {
            panic!("not a tuple")
        };
        let [first, second, wrapper] = items[..] else {
            panic!("{items:?}")
        };
        assert_eq!(first, second, "protocol {protocol}");
        assert_eq!(
            pickle.get(wrapper).unwrap(),
            &Node::List(vec![first]),
            "protocol {protocol}"
        );
    }
}

#[test]
fn cycles_through_the_memo_are_represented() {
    for protocol in 0..=5 {
        // l = []; l.append(l)
        let decoded = decode_trusted(golden(&format!("cycle_p{protocol}")));
        let pickle = &decoded.pickle;
        let root = pickle.root().unwrap();
        assert_eq!(
            pickle.get(root).unwrap(),
            &Node::List(vec![root]),
            "protocol {protocol}"
        );

        // t = (l,) with l = [t]: POP / POP_MARK then GET
        let decoded = decode_trusted(golden(&format!("recursive_tuple_p{protocol}")));
        let pickle = &decoded.pickle;
        let tuple = pickle.root().unwrap();
        let Node::Tuple(items) = pickle.get(tuple).unwrap() else {
            panic!("not a tuple")
        };
        let [list] = items[..] else {
            panic!("{items:?}")
        };
        assert_eq!(
            pickle.get(list).unwrap(),
            &Node::List(vec![tuple]),
            "protocol {protocol}"
        );
    }
}

#[test]
fn singletons_are_one_node_each() {
    // MARK None None True False () () TUPLE, by hand
    let decoded = decode_trusted(b"\x80\x02(NN\x88\x89\x88))t.");
    assert_eq!(decoded.pickle.len(), 5, "{:?}", decoded.pickle);
    assert_eq!(
        render_root(&decoded.pickle),
        json!({ "tuple": [null, null, true, false, true, { "tuple": [] }, { "tuple": [] }] })
    );
}

#[test]
fn protocol_0_int_booleans_follow_cpython() {
    let decoded = decode_trusted(b"(I01\nI00\nI1\nI0\nI010\nl.");
    assert_eq!(render_root(&decoded.pickle), json!([true, false, 1, 0, 8]));
}

#[test]
fn concatenated_pickles_decode_one_at_a_time() {
    // pickle.dumps([1, 2], protocol=2) twice, then garbage
    let one = b"\x80\x02]q\x00(K\x01K\x02e.";
    let mut stream = [&one[..], &one[..], b"junk"].concat();
    let first = decode(&stream, &allow_all, &Limits::default()).unwrap();
    assert_eq!(first.consumed, one.len());
    let second = decode(&stream[first.consumed..], &allow_all, &Limits::default()).unwrap();
    assert_eq!(second.consumed, one.len());
    assert_eq!(render_root(&second.pickle), json!([1, 2]));

    // The error points at the first pickle's STOP.
    let err = decode_all(&stream, &allow_all, &Limits::default()).unwrap_err();
    assert_eq!(err.offset, one.len() - 1);
    assert_eq!(
        err.code,
        DecodeErrorCode::TrailingBytes {
            count: one.len() + 4
        }
    );
    assert_eq!(
        err.to_string(),
        format!(
            "at byte {}: {} bytes follow the pickle's STOP; a message or file holds exactly one \
             pickle, so it was corrupted or holds something else too (decode() reads one pickle \
             from the front of a buffer, for formats that concatenate them)",
            one.len() - 1,
            one.len() + 4
        )
    );
    stream.truncate(one.len() - 1);
    assert_eq!(
        decode_err(&stream),
        DecodeError {
            offset: one.len() - 1,
            code: DecodeErrorCode::Truncated
        }
    );
}

#[test]
fn disallowed_globals_are_named_with_their_offset() {
    let refuse_all = |_: &str, _: &str| false;
    let cases: &[(&[u8], usize, &str, &str)] = &[
        // pickle.dumps(os.system, protocol=2)
        (b"\x80\x02cposix\nsystem\nq\x00.", 2, "posix", "system"),
        // pickle.dumps(builtins.eval, protocol=4)
        (
            b"\x80\x04\x95\x15\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x04eval\x94\x93\x94.",
            29,
            "builtins",
            "eval",
        ),
        // pickle.dumps(builtins.eval, protocol=0): the filter sees the
        // Python 3 name, as find_class imports it
        (b"c__builtin__\neval\np0\n.", 0, "builtins", "eval"),
        // by hand: the Python 2 name at protocol 4, refused as such
        (b"\x80\x04c__builtin__\neval\n.", 2, "__builtin__", "eval"),
        // INST, by hand
        (b"(iposix\nsystem\n.", 1, "posix", "system"),
    ];
    for &(bytes, offset, module, name) in cases {
        let err = decode(bytes, &refuse_all, &Limits::default()).unwrap_err();
        assert_eq!(err.offset, offset);
        assert_eq!(
            err.code,
            DecodeErrorCode::DisallowedGlobal {
                module: module.into(),
                name: name.into()
            }
        );
        let message = err.to_string();
        let expected = format!("at byte {offset}: global '{module}.{name}' is not allowed");
        assert!(message.starts_with(&expected), "{message}");
    }
    let only_eval = |module: &str, name: &str| (module, name) == ("builtins", "eval");
    let decoded = decode(cases[1].0, &only_eval, &Limits::default()).unwrap();
    assert_eq!(
        render_root(&decoded.pickle),
        json!({ "global": ["builtins", "eval"] })
    );
}
