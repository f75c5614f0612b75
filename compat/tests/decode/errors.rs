//! Every error code, with the offset CPython's layout puts it at.

use serde_json::{Value, json};
use tensorshare_compat::pickle::{DecodeError, DecodeErrorCode};

use super::support::{code, decode_err, decode_trusted, render_root};

#[test]
fn truncated_inputs() {
    use DecodeErrorCode::Truncated;
    assert_eq!(
        decode_err(b"\x80\x02"),
        DecodeError {
            offset: 2,
            code: Truncated
        }
    );
    assert_eq!(
        decode_err(b"\x80"),
        DecodeError {
            offset: 0,
            code: Truncated
        }
    );
    assert_eq!(
        decode_err(b"J\x01\x02."),
        DecodeError {
            offset: 0,
            code: Truncated
        }
    );
    assert_eq!(
        decode_err(b"X\x05\x00\x00\x00ab."),
        DecodeError {
            offset: 0,
            code: Truncated
        }
    );
    assert_eq!(
        decode_err(b"I12"),
        DecodeError {
            offset: 0,
            code: Truncated
        }
    );
    assert_eq!(
        decode_err(b"cposix\nsystem"),
        DecodeError {
            offset: 0,
            code: Truncated
        }
    );
    // FRAME announcing more than remains.
    assert_eq!(
        decode_err(b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00N."),
        DecodeError {
            offset: 2,
            code: Truncated
        }
    );
}

#[test]
fn stack_and_mark_errors() {
    use DecodeErrorCode::{MarkMissing, StackUnderflow};
    assert_eq!(
        decode_err(b"\x80\x02."),
        DecodeError {
            offset: 2,
            code: StackUnderflow
        }
    );
    // Values below the last MARK are out of reach, as in _pickle.c.
    assert_eq!(
        decode_err(b"](a."),
        DecodeError {
            offset: 2,
            code: StackUnderflow
        }
    );
    assert_eq!(
        decode_err(b"N(."),
        DecodeError {
            offset: 2,
            code: StackUnderflow
        }
    );
    assert_eq!(code(b"\x80\x02N\x86."), StackUnderflow);
    assert_eq!(code(b"\x80\x02NR."), StackUnderflow);
    assert_eq!(code(b"(o."), StackUnderflow);
    assert_eq!(code(b"\x80\x020."), StackUnderflow);
    assert_eq!(
        decode_err(b"Nt."),
        DecodeError {
            offset: 1,
            code: MarkMissing
        }
    );
    assert_eq!(code(b"N1."), MarkMissing);
    assert_eq!(code(b"]Ne."), MarkMissing);
    // POP takes the MARK when nothing was pushed since it.
    assert_eq!(render_root(&decode_trusted(b"N(0.").pickle), Value::Null);
    // An empty APPENDS/SETITEMS/ADDITEMS does not look at its target, as in _pickle.c.
    assert_eq!(
        render_root(&decode_trusted(b"K\x01(e(u(\x90.").pickle),
        json!(1)
    );
}

#[test]
fn memo_errors() {
    assert_eq!(
        decode_err(b"\x80\x02h\x05."),
        DecodeError {
            offset: 2,
            code: DecodeErrorCode::MemoMissing(5)
        }
    );
    assert_eq!(
        code(b"\x80\x02j\x00\x01\x00\x00."),
        DecodeErrorCode::MemoMissing(256)
    );
    assert_eq!(code(b"Ng7\n."), DecodeErrorCode::MemoMissing(7));
    assert!(matches!(
        code(b"Np-1\n."),
        DecodeErrorCode::InvalidLiteral(_)
    ));
    assert!(matches!(
        code(b"Nga\n."),
        DecodeErrorCode::InvalidLiteral(_)
    ));
    assert_eq!(code(b"\x80\x04\x94."), DecodeErrorCode::StackUnderflow);
}

#[test]
fn protocol_and_opcode_errors() {
    assert_eq!(
        decode_err(b"\x80\x06N."),
        DecodeError {
            offset: 0,
            code: DecodeErrorCode::UnsupportedProtocol(6)
        }
    );
    assert_eq!(
        decode_err(b"N\xff."),
        DecodeError {
            offset: 1,
            code: DecodeErrorCode::UnknownOpcode(0xff)
        }
    );
    assert_eq!(code(b"\x80\x02\x00"), DecodeErrorCode::UnknownOpcode(0));
    // PROTO may appear anywhere, as in CPython.
    assert_eq!(
        render_root(&decode_trusted(b"N\x80\x05.").pickle),
        Value::Null
    );
}

#[test]
fn refused_by_design() {
    use DecodeErrorCode::Unsupported;
    let cases: &[(&[u8], usize, &str)] = &[
        // copyreg.add_extension('__main__', 'Plain', 1); pickle.dumps(Plain, protocol=2)
        (b"\x80\x02\x82\x01.", 2, "EXT1"),
        // ... with code 300
        (b"\x80\x02\x83,\x01.", 2, "EXT2"),
        // ... with code 70000
        (b"\x80\x02\x84p\x11\x01\x00.", 2, "EXT4"),
        // pickle.dumps(pickle.PickleBuffer(bytearray(b'ab')), protocol=5, buffer_callback=lambda b: False)
        (b"\x80\x05\x97.", 2, "NEXT_BUFFER"),
        // READONLY_BUFFER after a buffer from the memo, by hand
        (b"\x80\x05C\x02ab\x94\x98.", 7, "READONLY_BUFFER"),
    ];
    for &(bytes, offset, opcode) in cases {
        let err = decode_err(bytes);
        assert_eq!(
            err,
            DecodeError {
                offset,
                code: Unsupported { opcode }
            }
        );
        assert!(
            err.to_string()
                .contains(&format!("opcode {opcode} is not supported: ")),
            "{err}"
        );
    }
    assert!(
        decode_err(b"\x80\x02\x82\x01.")
            .to_string()
            .contains("copyreg")
    );
}

#[test]
fn text_errors() {
    use DecodeErrorCode::{InvalidLiteral, InvalidUtf8, NotAscii};
    assert_eq!(code(b"X\x01\x00\x00\x00\xff."), InvalidUtf8);
    // A lone surrogate, which CPython's surrogatepass lets through.
    assert_eq!(code(b"\x80\x04\x8c\x03\xed\xa0\x80."), InvalidUtf8);
    assert_eq!(code(b"Vab\\ud800\n."), InvalidUtf8);
    assert_eq!(code(b"cmod\xff\nname\n."), InvalidUtf8);
    assert_eq!(
        code(b"U\x01\xe9."),
        NotAscii {
            opcode: "SHORT_BINSTRING"
        }
    );
    assert_eq!(
        code(b"T\x01\x00\x00\x00\xe9."),
        NotAscii {
            opcode: "BINSTRING"
        }
    );
    assert_eq!(code(b"S'\\xe9'\n."), NotAscii { opcode: "STRING" });
    assert_eq!(code(b"P\xe9\n."), NotAscii { opcode: "PERSID" });
    assert_eq!(code(b"(i\xe9\nC\n."), NotAscii { opcode: "INST" });
    for bytes in [
        &b"Iabc\n."[..],
        b"I\n.",
        b"F1e500\n.",
        b"F1.5 \n.",
        b"L\n.",
        b"S'abc\n.",
        b"S'\\x4'\n.",
        b"V\\u12\n.",
        b"T\xff\xff\xff\xff.",
        b"\x80\x02\x8b\xff\xff\xff\xff.",
    ] {
        assert!(
            matches!(code(bytes), InvalidLiteral(_)),
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
    let err = decode_err(b"\x80\x02\x8b\xff\xff\xff\xff.");
    assert_eq!(
        err.to_string(),
        "at byte 2: invalid literal: LONG4 has a negative byte count (-1)"
    );
}

#[test]
fn wrong_types_and_item_counts() {
    use DecodeErrorCode::{OddItemCount, StateAlreadySet, WrongType};
    assert_eq!(code(b"(K\x01d."), OddItemCount { opcode: "DICT" });
    assert_eq!(code(b"}(K\x01u."), OddItemCount { opcode: "SETITEMS" });
    let wrong = |opcode, expected, found| WrongType {
        opcode,
        expected,
        found,
    };
    // BUILD on a global
    let err = decode_err(b"\x80\x02cmod\nname\n}b.");
    assert_eq!(
        err,
        DecodeError {
            offset: 13,
            code: wrong("BUILD", "an object", "a global")
        }
    );
    assert_eq!(
        err.to_string(),
        "at byte 13: BUILD expects an object, found a global"
    );
    assert_eq!(
        code(b"\x80\x02)K\x01a."),
        wrong("APPEND", "a list", "a tuple")
    );
    assert_eq!(
        code(b"\x80\x02](K\x01K\x02u."),
        wrong("SETITEMS", "a dict", "a list")
    );
    assert_eq!(
        code(b"\x80\x02NK\x01K\x02s."),
        wrong("SETITEM", "a dict", "None")
    );
    assert_eq!(
        code(b"\x80\x04](K\x01\x90."),
        wrong("ADDITEMS", "a set", "a list")
    );
    assert_eq!(
        code(b"\x80\x02cmod\nname\n]R."),
        wrong("REDUCE", "a tuple of arguments", "a list")
    );
    assert_eq!(
        code(b"\x80\x02cmod\nname\nN\x81."),
        wrong("NEWOBJ", "a tuple of arguments", "None")
    );
    assert_eq!(
        code(b"\x80\x04cmod\nname\n)]\x92."),
        wrong("NEWOBJ_EX", "a dict of keyword arguments", "a list")
    );
    assert_eq!(
        code(b"\x80\x04K\x01\x8c\x01a\x93."),
        wrong("STACK_GLOBAL", "a str", "an int")
    );
    assert_eq!(
        code(b"\x80\x04\x8c\x01aN\x93."),
        wrong("STACK_GLOBAL", "a str", "None")
    );
    // An object built by REDUCE takes no ADDITEMS, and one BUILD.
    assert_eq!(
        code(b"\x80\x04cmod\nname\n)R(K\x01\x90."),
        wrong("ADDITEMS", "a set", "an object")
    );
    assert_eq!(code(b"\x80\x02cmod\nname\n)R}b}b."), StateAlreadySet);
}

#[test]
fn objects_record_the_call() {
    // INST and OBJ with arguments, NEWOBJ_EX, APPENDS and SETITEMS on objects, BUILD.
    let decoded = decode_trusted(b"\x80\x04(cmod\nname\nK\x01o(K\x02e(K\x03K\x04u}b.");
    assert_eq!(
        render_root(&decoded.pickle),
        json!({
            "call": { "global": ["mod", "name"] },
            "how": "reduce",
            "args": { "tuple": [1] },
            "list_items": [2],
            "dict_items": [[3, 4]],
            "state": { "dict": [] },
        })
    );
    let decoded = decode_trusted(b"\x80\x04cmod\nname\nK\x01\x85}\x92.");
    assert_eq!(
        render_root(&decoded.pickle),
        json!({
            "call": { "global": ["mod", "name"] },
            "how": "newobj_ex",
            "args": { "tuple": [1] },
            "kwargs": { "dict": [] },
        })
    );
}

#[test]
fn display_names_offset_and_action() {
    let err = DecodeError {
        offset: 2,
        code: DecodeErrorCode::DisallowedGlobal {
            module: "posix".into(),
            name: "system".into(),
        },
    };
    assert_eq!(
        err.to_string(),
        "at byte 2: global 'posix.system' is not allowed; nothing was executed. If you trust \
         the sender, register a rebuilder for it (tensorshare's Registry::register_rebuilder), \
         or look at what the pickle would call with `tensorshare inspect --opaque`"
    );
}
