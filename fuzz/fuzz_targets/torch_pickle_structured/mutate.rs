//! Structured mutations of encoded bytes: truncation, byte flips and
//! insertions, and edits that keep opcode boundaries (swapped, dropped,
//! duplicated or replaced opcodes, rewritten ints, frames removed).

use arbitrary::Arbitrary;
use tensorshare_compat::pickle::opcodes as op;

use crate::Num;

/// Which bytes a mutation edits.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// What is fed to the readers: the pickle, or the whole torch.save file.
    Outer,
    /// What is inside it: each `_load_from_bytes` stream, or a zip's
    /// `data.pkl`.
    Inner,
}

#[derive(Arbitrary, Debug)]
pub struct Mutation {
    pub layer: Layer,
    pub kind: MutationKind,
}

#[derive(Arbitrary, Debug)]
pub enum MutationKind {
    /// Keep the first `keep` bytes (modulo the length plus one).
    Truncate { keep: u16 },
    /// XOR one byte.
    FlipByte { at: u16, xor: u8 },
    /// Insert bytes before `at`.
    Insert { at: u16, bytes: Vec<u8> },
    /// Swap two opcodes, arguments and all.
    SwapOps { a: u8, b: u8 },
    /// Overwrite the `nth` opcode byte, leaving its argument bytes.
    ReplaceOpcode { nth: u8, with: u8 },
    /// Remove the `nth` opcode and its argument.
    DropOp { nth: u8 },
    /// Repeat the `nth` opcode and its argument.
    DuplicateOp { nth: u8 },
    /// Replace the `nth` integer-pushing opcode with one pushing `value`.
    SetInt { nth: u8, value: Num },
    /// Remove every `FRAME` opcode, so that the other edits do not only
    /// break frame boundaries (protocol 4 pickles are valid unframed).
    Unframe,
}

/// The most bytes one insertion adds.
const MAX_INSERT: usize = 32;

/// Applies the mutations of `layer` to `bytes`, in order.
pub fn apply(bytes: &mut Vec<u8>, mutations: &[Mutation], layer: Layer) {
    for mutation in mutations.iter().filter(|m| m.layer == layer) {
        apply_one(bytes, &mutation.kind);
    }
}

fn apply_one(bytes: &mut Vec<u8>, kind: &MutationKind) {
    match kind {
        MutationKind::Truncate { keep } => {
            bytes.truncate(usize::from(*keep) % (bytes.len() + 1));
        }
        MutationKind::FlipByte { at, xor } => {
            if !bytes.is_empty() {
                let at = usize::from(*at) % bytes.len();
                bytes[at] ^= xor;
            }
        }
        MutationKind::Insert { at, bytes: extra } => {
            let at = usize::from(*at) % (bytes.len() + 1);
            let extra = &extra[..extra.len().min(MAX_INSERT)];
            bytes.splice(at..at, extra.iter().copied());
        }
        MutationKind::SwapOps { a, b } => {
            let spans = op_spans(bytes);
            if spans.len() < 2 {
                return;
            }
            let (mut a, mut b) = (
                spans[usize::from(*a) % spans.len()],
                spans[usize::from(*b) % spans.len()],
            );
            if a.0 > b.0 {
                std::mem::swap(&mut a, &mut b);
            }
            if a == b {
                return;
            }
            let mut out = Vec::with_capacity(bytes.len());
            out.extend_from_slice(&bytes[..a.0]);
            out.extend_from_slice(&bytes[b.0..b.1]);
            out.extend_from_slice(&bytes[a.1..b.0]);
            out.extend_from_slice(&bytes[a.0..a.1]);
            out.extend_from_slice(&bytes[b.1..]);
            *bytes = out;
        }
        MutationKind::ReplaceOpcode { nth, with } => {
            if let Some(&(start, _)) = nth_span(&op_spans(bytes), *nth) {
                bytes[start] = *with;
            }
        }
        MutationKind::DropOp { nth } => {
            if let Some(&(start, end)) = nth_span(&op_spans(bytes), *nth) {
                bytes.drain(start..end);
            }
        }
        MutationKind::DuplicateOp { nth } => {
            if let Some(&(start, end)) = nth_span(&op_spans(bytes), *nth) {
                let copy = bytes[start..end].to_vec();
                bytes.splice(end..end, copy);
            }
        }
        MutationKind::SetInt { nth, value } => {
            let ints: Vec<_> = op_spans(bytes)
                .into_iter()
                .filter(|&(start, _)| {
                    matches!(
                        bytes[start],
                        op::BININT1 | op::BININT2 | op::BININT | op::LONG1 | op::INT | op::LONG
                    )
                })
                .collect();
            if let Some(&(start, end)) = nth_span(&ints, *nth) {
                bytes.splice(start..end, int_op(value.0));
            }
        }
        MutationKind::Unframe => {
            let spans = op_spans(bytes);
            let mut out = Vec::with_capacity(bytes.len());
            let mut copied = 0;
            for (start, end) in spans {
                if bytes[start] == op::FRAME {
                    out.extend_from_slice(&bytes[copied..start]);
                    copied = end;
                }
            }
            out.extend_from_slice(&bytes[copied..]);
            *bytes = out;
        }
    }
}

fn nth_span(spans: &[(usize, usize)], nth: u8) -> Option<&(usize, usize)> {
    if spans.is_empty() {
        None
    } else {
        spans.get(usize::from(nth) % spans.len())
    }
}

/// The shortest opcode pushing `value`, as CPython writes it.
fn int_op(value: i64) -> Vec<u8> {
    if let Ok(small) = u8::try_from(value) {
        vec![op::BININT1, small]
    } else if let Ok(medium) = u16::try_from(value) {
        let [lo, hi] = medium.to_le_bytes();
        vec![op::BININT2, lo, hi]
    } else if let Ok(int) = i32::try_from(value) {
        let mut out = vec![op::BININT];
        out.extend_from_slice(&int.to_le_bytes());
        out
    } else {
        let mut out = vec![op::LONG1, 8];
        out.extend_from_slice(&value.to_le_bytes());
        out
    }
}

/// How an opcode's argument is laid out.
enum Arg {
    /// This many bytes.
    Fixed(usize),
    /// This many newline-terminated lines.
    Lines(usize),
    /// A little-endian length of this many bytes, then that many bytes.
    Counted(usize),
}

fn arg_of(opcode: u8) -> Option<Arg> {
    Some(match opcode {
        op::MARK
        | op::STOP
        | op::POP
        | op::POP_MARK
        | op::DUP
        | op::NONE
        | op::BINPERSID
        | op::REDUCE
        | op::APPEND
        | op::BUILD
        | op::DICT
        | op::EMPTY_DICT
        | op::APPENDS
        | op::LIST
        | op::EMPTY_LIST
        | op::OBJ
        | op::SETITEM
        | op::TUPLE
        | op::EMPTY_TUPLE
        | op::SETITEMS
        | op::NEWOBJ
        | op::TUPLE1
        | op::TUPLE2
        | op::TUPLE3
        | op::NEWTRUE
        | op::NEWFALSE
        | op::EMPTY_SET
        | op::ADDITEMS
        | op::FROZENSET
        | op::NEWOBJ_EX
        | op::STACK_GLOBAL
        | op::MEMOIZE
        | op::NEXT_BUFFER
        | op::READONLY_BUFFER => Arg::Fixed(0),
        op::BININT1 | op::BINGET | op::BINPUT | op::PROTO | op::EXT1 => Arg::Fixed(1),
        op::BININT2 | op::EXT2 => Arg::Fixed(2),
        op::BININT | op::LONG_BINGET | op::LONG_BINPUT | op::EXT4 => Arg::Fixed(4),
        op::BINFLOAT | op::FRAME => Arg::Fixed(8),
        op::FLOAT
        | op::INT
        | op::LONG
        | op::PERSID
        | op::STRING
        | op::UNICODE
        | op::GET
        | op::PUT => Arg::Lines(1),
        op::GLOBAL | op::INST => Arg::Lines(2),
        op::SHORT_BINSTRING | op::SHORT_BINBYTES | op::SHORT_BINUNICODE | op::LONG1 => {
            Arg::Counted(1)
        }
        op::BINSTRING | op::BINUNICODE | op::BINBYTES | op::LONG4 => Arg::Counted(4),
        op::BINUNICODE8 | op::BINBYTES8 | op::BYTEARRAY8 => Arg::Counted(8),
        _ => return None,
    })
}

/// The `(start, end)` of each opcode with its argument, up to the first
/// byte that is not an opcode or an argument that runs past the end. Runs
/// on across `STOP`: a legacy torch.save stream is several pickles.
pub fn op_spans(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut at = 0;
    while let Some(&opcode) = bytes.get(at) {
        let body = at + 1;
        let end = match arg_of(opcode) {
            Some(Arg::Fixed(n)) => body + n,
            Some(Arg::Lines(lines)) => {
                let mut end = body;
                for _ in 0..lines {
                    match bytes
                        .get(end..)
                        .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
                    {
                        Some(newline) => end += newline + 1,
                        None => return spans,
                    }
                }
                end
            }
            Some(Arg::Counted(width)) => {
                let Some(count) = bytes.get(body..body + width) else {
                    return spans;
                };
                let mut le = [0u8; 8];
                le[..width].copy_from_slice(count);
                let Some(end) = usize::try_from(u64::from_le_bytes(le))
                    .ok()
                    .and_then(|n| (body + width).checked_add(n))
                else {
                    return spans;
                };
                end
            }
            None => return spans,
        };
        if end > bytes.len() {
            return spans;
        }
        spans.push((at, end));
        at = end;
    }
    spans
}
