//! Input that is no pickle: the error says so, keeping the offset and the
//! code of what failed.

use tensorshare_compat::pickle::{DecodeError, DecodeErrorCode, Limits, decode};

use super::support::{allow_all, decode_err};

fn not_a_pickle(offset: usize, head: &[u8], cause: DecodeErrorCode) -> DecodeError {
    DecodeError {
        offset,
        code: DecodeErrorCode::NotAPickle {
            head: head.to_vec(),
            cause: Box::new(cause),
        },
    }
}

#[test]
fn empty_input_is_no_pickle() {
    let err = decode_err(b"");
    assert_eq!(err, not_a_pickle(0, b"", DecodeErrorCode::Truncated));
    assert_eq!(
        err.to_string(),
        "at byte 0: the input is empty: there is no pickle to decode"
    );
}

#[test]
fn text_is_no_pickle() {
    // 'h' would be BINGET of memo key 101 ('e').
    let err = decode_err(b"hello world\nthis is text\n");
    assert_eq!(
        err,
        not_a_pickle(0, b"hello wo", DecodeErrorCode::MemoMissing(101))
    );
    assert_eq!(
        err.to_string(),
        "at byte 0: not a pickle: the input starts with byte 0x68 (b\"hello wo\"), and a pickle \
         starts with PROTO (0x80) or, at protocols 0 and 1, with an opcode that pushes a value or \
         a MARK; check what was sent (decoding stopped here: memo key 101 was never stored)"
    );
    for text in [&b"{\"a\": 1}"[..], b"# a comment\n", b"\xef\xbb\xbfBOM"] {
        let err = decode_err(text);
        assert!(
            matches!(err.code, DecodeErrorCode::NotAPickle { .. }),
            "{err}"
        );
    }
}

#[test]
fn a_png_is_no_pickle() {
    // NEWFALSE, then PERSID 'NG\r', then 0x1a at byte 6: no opcode.
    let png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01";
    let err = decode_err(png);
    assert_eq!(
        err,
        not_a_pickle(6, &png[..8], DecodeErrorCode::UnknownOpcode(0x1a))
    );
    assert!(
        err.to_string()
            .starts_with("at byte 6: not a pickle: the input starts with byte 0x89"),
        "{err}"
    );
}

#[test]
fn a_zip_is_no_pickle_but_perhaps_a_torch_save_file() {
    let torch_save = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/torch_save/zip_empty.pt"
    ))
    .unwrap();
    let empty_zip = [&b"PK\x05\x06"[..], &[0; 18]].concat();
    for bytes in [&torch_save[..], &torch_save[..30], &empty_zip] {
        let err = decode(bytes, &allow_all, &Limits::default()).unwrap_err();
        let DecodeErrorCode::NotAPickle { head, .. } = &err.code else {
            panic!("{err}")
        };
        assert_eq!(head[..], bytes[..8]);
        let expected = format!(
            "not a pickle but a zip archive (starts with b\"{}\"), as torch.save writes: read \
             it as a torch.save file (as a pickle, decoding stopped here: ",
            bytes[..8].escape_ascii()
        );
        assert!(err.to_string().contains(&expected), "{err}");
    }
}

#[test]
fn broken_pickles_keep_their_own_error() {
    use DecodeErrorCode::{DisallowedGlobal, Truncated, UnknownOpcode};
    let refuse_all = |_: &str, _: &str| false;
    let cases: &[(&[u8], DecodeError)] = &[
        // A pickle cut short, at protocols 4 and 0.
        (
            b"\x80\x04\x95",
            DecodeError {
                offset: 2,
                code: Truncated,
            },
        ),
        (
            b"(lp0\nI1\naI2",
            DecodeError {
                offset: 9,
                code: Truncated,
            },
        ),
        // A protocol 0 pickle with a bad byte in it.
        (
            b"(lp0\n\xff",
            DecodeError {
                offset: 5,
                code: UnknownOpcode(0xff),
            },
        ),
        // A hostile global, at protocol 0.
        (
            b"cposix\nsystem\n(S'ls'\ntR.",
            DecodeError {
                offset: 0,
                code: DisallowedGlobal {
                    module: "posix".into(),
                    name: "system".into(),
                },
            },
        ),
    ];
    for (bytes, expected) in cases {
        assert_eq!(
            &decode(bytes, &refuse_all, &Limits::default()).unwrap_err(),
            expected
        );
    }
}
