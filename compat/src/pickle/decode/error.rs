//! What can go wrong decoding a pickle, with the byte offset where it did.

/// A pickle the decoder refused, and where.
///
/// `offset` is the position of the opcode being executed (for a stream that
/// ends before `STOP`, the length of the input; for
/// [`DecodeErrorCode::TrailingBytes`], the `STOP`; for
/// [`DecodeErrorCode::NotAPickle`], that of its cause).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("at byte {offset}: {code}")]
pub struct DecodeError {
    /// Byte offset into the input.
    pub offset: usize,
    /// What went wrong.
    pub code: DecodeErrorCode,
}

/// Why a pickle was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeErrorCode {
    /// The input ends before `STOP`, or a length field claims more bytes than
    /// remain.
    #[error(
        "pickle truncated: the input ends before the pickle does; the file or message is incomplete"
    )]
    Truncated,
    /// A byte that is no pickle opcode.
    #[error("unknown opcode 0x{0:02x}: not a pickle, or a corrupted one")]
    UnknownOpcode(u8),
    /// `PROTO` names a protocol above 5.
    #[error("unsupported pickle protocol {0}: protocols 0 to 5 are supported")]
    UnsupportedProtocol(u8),
    /// `GLOBAL`, `STACK_GLOBAL` or `INST` names a global the filter refuses.
    #[error(
        "global '{module}.{name}' is not allowed; nothing was executed. If you trust the \
         sender, register a rebuilder for it (tensorshare's Registry::register_rebuilder), \
         or look at what the pickle would call with `tensorshare inspect --opaque`"
    )]
    DisallowedGlobal {
        /// The module, as the filter was asked about it: as sent, or its
        /// Python 3 name below protocol 3.
        module: String,
        /// The qualified name, as the filter was asked about it.
        name: String,
    },
    /// A dotted name (`Tensor.untyped_storage`) below protocol 4, where
    /// CPython's unpickler looks it up as one attribute and fails.
    #[error(
        "global '{module}.{name}' is a dotted name, which CPython resolves only from protocol 4 \
         on, and this pickle is protocol {protocol}"
    )]
    DottedNameBelowProtocol4 {
        /// The module.
        module: String,
        /// The dotted qualified name.
        name: String,
        /// The protocol the pickle declared.
        protocol: u8,
    },
    /// An opcode needs more values than the stack holds above the last
    /// `MARK`.
    #[error("stack underflow: an opcode needs more values than were pushed since the last MARK")]
    StackUnderflow,
    /// An opcode that collects items since the last `MARK` found none.
    #[error("could not find MARK: an opcode collects items since a MARK that was never pushed")]
    MarkMissing,
    /// `GET`, `BINGET` or `LONG_BINGET` names a memo key never stored.
    #[error("memo key {0} was never stored")]
    MemoMissing(u64),
    /// Containers or objects nest deeper than [`Limits::max_depth`](super::Limits::max_depth).
    #[error("nesting deeper than {limit}; raise Limits::max_depth if the pickle is trusted")]
    NestingTooDeep {
        /// The limit in force.
        limit: usize,
    },
    /// The pickle builds more than [`Limits::max_nodes`](super::Limits::max_nodes) values.
    #[error("more than {limit} values; raise Limits::max_nodes if the pickle is trusted")]
    TooManyNodes {
        /// The limit in force.
        limit: usize,
    },
    /// The memo grows past [`Limits::max_memo`](super::Limits::max_memo) entries.
    #[error("more than {limit} memo entries; raise Limits::max_memo if the pickle is trusted")]
    TooManyMemoEntries {
        /// The limit in force.
        limit: usize,
    },
    /// The stack (or the mark stack) grows past [`Limits::max_stack`](super::Limits::max_stack).
    #[error("stack deeper than {limit} entries; raise Limits::max_stack if the pickle is trusted")]
    StackTooLarge {
        /// The limit in force.
        limit: usize,
    },
    /// A `str` or a global name is not valid UTF-8. CPython accepts lone
    /// surrogates (`surrogatepass`) that no Rust string can hold: they land
    /// here too.
    #[error("invalid UTF-8 in a str (or a lone surrogate, which has no Rust form)")]
    InvalidUtf8,
    /// A Python 2 `str` (`STRING`, `BINSTRING`, `SHORT_BINSTRING`), a
    /// protocol-0 persistent id or an `INST` name is not ASCII, which is
    /// what CPython's default `encoding="ASCII"` requires too.
    #[error("{opcode} argument is not ASCII (CPython's default encoding='ASCII' refuses it too)")]
    NotAscii {
        /// The opcode's name.
        opcode: &'static str,
    },
    /// A text argument (`INT`, `LONG`, `FLOAT`, `STRING`, `UNICODE`, memo
    /// keys) or a length field does not parse.
    #[error("invalid literal: {0}")]
    InvalidLiteral(String),
    /// `DICT` or `SETITEMS` got an odd number of items since the `MARK`.
    #[error("odd number of items for {opcode}: keys and values must pair up")]
    OddItemCount {
        /// The opcode's name.
        opcode: &'static str,
    },
    /// An opcode found a value of the wrong kind on the stack.
    #[error("{opcode} expects {expected}, found {found}")]
    WrongType {
        /// The opcode's name.
        opcode: &'static str,
        /// What it needs.
        expected: &'static str,
        /// What it found.
        found: &'static str,
    },
    /// `BUILD` applied to an object that already has a state.
    #[error("BUILD applied twice to one object; the decoder keeps one state per object")]
    StateAlreadySet,
    /// An opcode the decoder refuses by design.
    #[error("opcode {opcode} is not supported: {}", unsupported_reason(opcode))]
    Unsupported {
        /// The opcode's name.
        opcode: &'static str,
    },
    /// [`decode_all`](super::decode_all) found bytes after the pickle's
    /// `STOP` (at the error's offset).
    #[error(
        "{count} bytes follow the pickle's STOP; a message or file holds exactly one pickle, so \
         it was corrupted or holds something else too (decode() reads one pickle from the front \
         of a buffer, for formats that concatenate them)"
    )]
    TrailingBytes {
        /// How many bytes follow `STOP`.
        count: usize,
    },
    /// Inside a `FRAME`, an opcode or its argument runs past the frame's
    /// end. CPython's pure-Python unpickler refuses it ("pickle exhausted
    /// before end of frame"); its C unpickler does not look, so the two
    /// could read different opcodes from one pickle.
    #[error(
        "an opcode runs past the end of its frame at byte {frame_end}; CPython's pickle \
         refuses it too ('pickle exhausted before end of frame'): the pickle is corrupted or \
         crafted"
    )]
    CrossesFrameEnd {
        /// Offset one past the frame's last byte.
        frame_end: usize,
    },
    /// `FRAME` starts a new frame before the current one is used up.
    /// CPython's pure-Python unpickler refuses it ("beginning of a new frame
    /// before end of current frame").
    #[error(
        "FRAME starts a new frame before the current frame ends at byte {frame_end}; CPython's \
         pickle refuses it too ('beginning of a new frame before end of current frame'): the \
         pickle is corrupted or crafted"
    )]
    FrameInsideFrame {
        /// Offset one past the current frame's last byte.
        frame_end: usize,
    },
    /// Decoding failed on input that does not start like a pickle: it is
    /// empty, starts with a zip archive's signature (`torch.save`'s file
    /// format), or its first byte is neither `PROTO` nor an opcode that
    /// begins a protocol 0 or 1 pickle (see [`decode`](super::decode)).
    #[error("{}", not_a_pickle(head, cause))]
    NotAPickle {
        /// The input's first bytes (up to 8).
        head: Vec<u8>,
        /// What decoding met at the error's offset.
        cause: Box<DecodeErrorCode>,
    },
}

/// Why an opcode is refused, and what the sender can do instead.
fn unsupported_reason(opcode: &str) -> &'static str {
    match opcode {
        "EXT1" | "EXT2" | "EXT4" => {
            "it names a global through the copyreg extension registry, which is state local to \
             the sending process; pickle without copyreg.add_extension"
        }
        "NEXT_BUFFER" | "READONLY_BUFFER" => {
            "out-of-band buffers need the sender's buffer list; pickle without buffer_callback"
        }
        _ => "the decoder does not implement it",
    }
}

/// What a non-pickle is, and what to do with it.
fn not_a_pickle(head: &[u8], cause: &DecodeErrorCode) -> String {
    let head_text = head.escape_ascii();
    match head.first() {
        None => "the input is empty: there is no pickle to decode".to_owned(),
        Some(_) if super::start::is_zip(head) => format!(
            "not a pickle but a zip archive (starts with b\"{head_text}\"), as torch.save \
             writes: read it as a torch.save file (as a pickle, decoding stopped here: {cause})"
        ),
        Some(first) => format!(
            "not a pickle: the input starts with byte 0x{first:02x} (b\"{head_text}\"), and a \
             pickle starts with PROTO (0x80) or, at protocols 0 and 1, with an opcode that pushes \
             a value or a MARK; check what was sent (decoding stopped here: {cause})"
        ),
    }
}
