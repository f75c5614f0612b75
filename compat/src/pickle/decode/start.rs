//! How a pickle begins: what tells input that is no pickle at all from a
//! pickle that is broken, so that the error can say which.
//!
//! Every pickler since Python 2.3 writes `PROTO` first at protocol 2 and
//! up. At protocols 0 and 1 there is no header: the first opcode is the
//! first thing `save` writes, a value, a `MARK` (tuples, lists and dicts at
//! protocol 0, `INST`), a global (`GLOBAL`, also for `REDUCE`'s callable)
//! or a persistent id. Any other first byte can only fail; a file whose
//! first byte is one of these is reported by what failed in it, except a
//! zip archive, which is what `torch.save` writes and the likeliest
//! non-pickle to reach a pickle decoder.

use super::error::{DecodeError, DecodeErrorCode};
use crate::pickle::opcodes::*;

/// The opcodes a pickle's first byte can be.
const FIRST_OPCODES: &[u8] = &[
    PROTO,
    MARK,
    NONE,
    INT,
    BININT,
    BININT1,
    BININT2,
    LONG,
    FLOAT,
    BINFLOAT,
    STRING,
    BINSTRING,
    SHORT_BINSTRING,
    UNICODE,
    BINUNICODE,
    EMPTY_TUPLE,
    EMPTY_LIST,
    EMPTY_DICT,
    GLOBAL,
    PERSID,
];

/// How many of the input's first bytes the error shows.
const HEAD_LEN: usize = 8;

/// Whether `head` starts with a zip signature: a local file header, or the
/// end record of an empty archive.
pub(super) fn is_zip(head: &[u8]) -> bool {
    head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06")
}

/// `err`, from decoding `input`, as [`DecodeErrorCode::NotAPickle`] when
/// `input` does not start like a pickle; the offset stays `err`'s.
pub(super) fn explain(input: &[u8], err: DecodeError) -> DecodeError {
    let head = input.get(..HEAD_LEN).unwrap_or(input);
    let starts_like_a_pickle = head
        .first()
        .is_some_and(|first| FIRST_OPCODES.contains(first))
        && !is_zip(head);
    if starts_like_a_pickle {
        return err;
    }
    DecodeError {
        offset: err.offset,
        code: DecodeErrorCode::NotAPickle {
            head: head.to_vec(),
            cause: Box::new(err.code),
        },
    }
}
