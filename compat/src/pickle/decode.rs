//! The decoder VM: reads pickles of protocols 0 to 5 into a [`Pickle`]
//! arena and executes nothing. What it accepts, refuses and caps is
//! documented on [`decode`], the entry point (this module is private; its
//! items are re-exported from `pickle`).

mod calls;
mod error;
mod frame;
mod machine;
mod memo;
mod number;
mod ops;
mod start;
mod text;

pub use error::{DecodeError, DecodeErrorCode};

use super::{Global, Pickle, SharedBytes};

/// Decides which globals a pickle may name.
///
/// Implemented for any `Fn(&str, &str) -> bool` taking `(module, name)`.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::pickle::{DecodeErrorCode, Limits, decode};
///
/// let only_ordered_dict = |module: &str, name: &str| {
///     (module, name) == ("collections", "OrderedDict")
/// };
/// // pickle.dumps(os.system, protocol=2) on Linux
/// let err = decode(b"\x80\x02cposix\nsystem\nq\x00.", &only_ordered_dict, &Limits::default())
///     .unwrap_err();
/// assert_eq!(err.to_string().split(';').next(), Some("at byte 2: global 'posix.system' is not allowed"));
/// assert!(matches!(err.code, DecodeErrorCode::DisallowedGlobal { .. }));
/// ```
pub trait GlobalFilter {
    /// Whether `module.name` may become a [`Node::Global`](super::Node::Global).
    ///
    /// Below protocol 3 the decoder asks about the Python 3 name of what
    /// the pickle names (`builtins.set` for `__builtin__.set`); see
    /// [`decode`].
    fn allows(&self, module: &str, name: &str) -> bool;

    /// The [`Global`] a pickle naming `module.name` gets, or `None` to
    /// refuse it.
    ///
    /// The default copies the names when [`allows`](Self::allows) says
    /// yes. A filter that keeps the globals it allows can hand out copies
    /// of its own instead, which cost nothing for `'static` names.
    fn admit(&self, module: &str, name: &str) -> Option<Global> {
        self.allows(module, name)
            .then(|| Global::copied(module, name))
    }

    /// [`admit`](Self::admit), told where: `offset` is the byte of the
    /// opcode naming the global, counted from the start of the input. The
    /// decoder calls this one; a filter that reports the globals it refuses
    /// later, all at once, overrides it to say where each is.
    fn admit_at(&self, module: &str, name: &str, offset: usize) -> Option<Global> {
        let _ = offset;
        self.admit(module, name)
    }
}

impl<F: Fn(&str, &str) -> bool> GlobalFilter for F {
    fn allows(&self, module: &str, name: &str) -> bool {
        self(module, name)
    }
}

/// Caps on what one pickle may build; every field bounds memory or time on
/// hostile input.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::pickle::Limits;
///
/// let strict = Limits { max_nodes: 10_000, ..Limits::default() };
/// assert_eq!(strict.max_depth, 1000);
/// let same = Limits::default().with_max_nodes(10_000);
/// assert_eq!(strict, same);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting of containers and objects (default 1000, which is
    /// deeper than CPython's recursion limit lets its pickler write).
    pub max_depth: usize,
    /// Most values the arena may hold (default 10 million; at most
    /// `u32::MAX` is used whatever is set).
    pub max_nodes: usize,
    /// Most memo entries (default 10 million).
    pub max_memo: usize,
    /// Most stack entries, and separately most pending `MARK`s (default 10
    /// million).
    pub max_stack: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_depth: 1000,
            max_nodes: 10_000_000,
            max_memo: 10_000_000,
            max_stack: 10_000_000,
        }
    }
}

impl Limits {
    /// These limits with `max_depth` replaced.
    #[must_use]
    pub fn with_max_depth(self, max_depth: usize) -> Self {
        Self { max_depth, ..self }
    }

    /// These limits with `max_nodes` replaced.
    #[must_use]
    pub fn with_max_nodes(self, max_nodes: usize) -> Self {
        Self { max_nodes, ..self }
    }

    /// These limits with `max_memo` replaced.
    #[must_use]
    pub fn with_max_memo(self, max_memo: usize) -> Self {
        Self { max_memo, ..self }
    }

    /// These limits with `max_stack` replaced.
    #[must_use]
    pub fn with_max_stack(self, max_stack: usize) -> Self {
        Self { max_stack, ..self }
    }
}

/// One decoded pickle and how many input bytes it took.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded {
    /// The arena; its root is what `pickle.loads` would return.
    pub pickle: Pickle,
    /// Bytes read, up to and including `STOP`.
    pub consumed: usize,
}

/// Decodes the pickle at the start of `input`, stopping at its `STOP`;
/// executes nothing.
///
/// Bytes after `STOP` are left alone and [`Decoded::consumed`] says how
/// many were used: torch's legacy `torch.save` format concatenates pickles
/// and raw data, and the caller continues at `input[decoded.consumed..]`.
/// Use [`decode_all`] when the input is one pickle (a message, a file).
///
/// It runs the stack machine of CPython's `_pickle.c` (every opcode of
/// protocols 0 to 5), with four differences that make it safe on hostile
/// input:
///
/// - Globals (`GLOBAL`, `STACK_GLOBAL`, `INST`) become [`Node::Global`]
///   only when `globals` allows them; anything else is
///   [`DecodeErrorCode::DisallowedGlobal`]. While the protocol in force
///   (set by the last `PROTO`, 0 before any) is below 3, a name is first
///   mapped to its Python 3 name through CPython's `_compat_pickle` tables,
///   exactly as `Unpickler.find_class` does under its default
///   `fix_imports=True`: CPython writes `set`, `frozenset`, `bytearray` and
///   empty `bytes` as `__builtin__.*` at protocols 0-2, so `torch.save`
///   files (protocol 2) name them so. The filter, the node and the error
///   see the mapped name. From protocol 3 on names are kept as sent, and
///   `__builtin__.set` is refused unless allowed as such, as CPython fails
///   to import `__builtin__`.
/// - Calls (`REDUCE`, `NEWOBJ`, `NEWOBJ_EX`, `INST`, `OBJ`) and `BUILD` are
///   recorded in a [`Node::Object`] (`INST` and `OBJ` as
///   [`Construction::Reduce`]); `APPEND(S)` and `SETITEM(S)` on an object
///   fill its `list_items` and `dict_items`.
/// - Everything is capped by [`Limits`], and a length field that claims
///   more bytes than remain is [`DecodeErrorCode::Truncated`] before
///   anything is allocated. Nothing recurses, so no input can overflow the
///   native stack.
/// - Frames (protocol 4's `FRAME`) are checked as CPython's pure-Python
///   unpickler checks them, which `_pickle.c` does not: an opcode or
///   argument that runs past its frame's end is
///   [`DecodeErrorCode::CrossesFrameEnd`], a `FRAME` before the current
///   frame is used up is [`DecodeErrorCode::FrameInsideFrame`]. A read
///   that finds its frame used up continues unframed, which is how
///   `pickle` writes large payloads. So no pickle reads as other opcodes
///   here than in `pickle._Unpickler`.
///
/// Python 2 `str` values (`STRING`, `BINSTRING`, `SHORT_BINSTRING`) decode
/// to [`Node::Str`] and must be ASCII, as with CPython's default
/// `encoding="ASCII"`. Values CPython keeps as singletons (`None`, `True`,
/// `False`, `()`) are one node each however often they occur. Dicts and
/// sets keep their items in pickled order, duplicates included. Refused by
/// design: `EXT1`/`EXT2`/`EXT4` (the copyreg extension registry is state of
/// the sending process) and `NEXT_BUFFER`/`READONLY_BUFFER` (out-of-band
/// buffers).
///
/// # Nesting depth
///
/// A node's depth is 1 + the largest depth of what it holds (0 for scalars
/// and globals), computed when the node is created and raised when it is
/// filled. That bounds every value built in the order a pickler writes
/// (children before the opcode that adds them). A pickle that fills a
/// container after nesting it (possible only through the memo), or that
/// builds a cycle, can hold longer paths: walk decoded pickles iteratively
/// with a visited set.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::pickle::{Limits, Node, decode};
///
/// // pickle.dumps([1, "a"], protocol=2), then the next pickle
/// let bytes = b"\x80\x02]q\x00(K\x01X\x01\x00\x00\x00aq\x01e.\x80\x02N.";
/// let allow_none = |_: &str, _: &str| false;
/// let decoded = decode(bytes, &allow_none, &Limits::default())?;
/// let pickle = &decoded.pickle;
/// let Some(Node::List(items)) = pickle.root_node() else { panic!("not a list") };
/// assert_eq!(pickle.get(items[0]), Some(&Node::Int(1)));
/// assert_eq!(pickle.get(items[1]), Some(&Node::Str("a".into())));
/// assert_eq!(&bytes[decoded.consumed..], b"\x80\x02N.");
/// # Ok::<(), tensorshare_compat::pickle::DecodeError>(())
/// ```
///
/// # Errors
///
/// A [`DecodeError`] with the offset of the offending opcode: a global the
/// filter refuses, a malformed or truncated pickle, a limit exceeded, or an
/// opcode refused by design.
///
/// When the input does not start like a pickle, the error is
/// [`DecodeErrorCode::NotAPickle`], holding what failed and where: for
/// empty input; for a zip archive (what `torch.save` writes); and for a
/// first byte that is neither `PROTO` (which every pickle of protocol 2 and
/// up starts with) nor an opcode a protocol 0 or 1 pickle starts with (one
/// that pushes a value or a `MARK`, a `GLOBAL` or a `PERSID`). Any other
/// input is judged by what fails in it.
///
/// [`Node::Global`]: super::Node::Global
/// [`Node::Object`]: super::Node::Object
/// [`Node::Str`]: super::Node::Str
/// [`Construction::Reduce`]: super::Construction::Reduce
pub fn decode(
    input: &[u8],
    globals: &dyn GlobalFilter,
    limits: &Limits,
) -> Result<Decoded, DecodeError> {
    machine::Machine::new(input, globals, limits).run()
}

/// Decodes `input` as exactly one pickle: a whole message or file.
///
/// Bytes after the pickle's `STOP` are an error, although CPython's
/// `pickle.loads` ignores them: a message or file holds one pickle, so
/// anything after it is corruption, or a second payload that a reader of
/// the whole input would see and this one would not. Use [`decode`] to
/// read one pickle from the front of a buffer and learn how many bytes it
/// took.
///
/// # Errors
///
/// Those of [`decode`], and [`DecodeErrorCode::TrailingBytes`] at the
/// offset of `STOP` when bytes follow it.
pub fn decode_all(
    input: &[u8],
    globals: &dyn GlobalFilter,
    limits: &Limits,
) -> Result<Decoded, DecodeError> {
    whole(decode(input, globals, limits)?, input.len())
}

/// Decodes `input` as exactly one pickle, as [`decode_all`] does, with
/// every `bytes` payload of 64 KiB or more a slice of `input`'s buffer
/// instead of a copy: a message's tensor data is not copied to be decoded.
/// Smaller payloads are copied, so that keeping one does not keep the whole
/// message.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::pickle::{Limits, Node, SharedBytes, decode_all_shared};
///
/// let mut message = vec![0x80, 4, 0x8e];
/// message.extend_from_slice(&(100_000u64).to_le_bytes());
/// message.extend(std::iter::repeat_n(7u8, 100_000));
/// message.push(b'.');
/// let message = SharedBytes::from(message);
/// let decoded = decode_all_shared(&message, &|_: &str, _: &str| false, &Limits::default())?;
/// let Some(Node::Bytes(payload)) = decoded.pickle.root_node() else { panic!() };
/// // The payload is the message's own bytes, not a copy.
/// assert_eq!(payload.chunks()[0].as_ptr(), message[11..].as_ptr());
/// # Ok::<(), tensorshare_compat::pickle::DecodeError>(())
/// ```
///
/// # Errors
///
/// Those of [`decode_all`].
pub fn decode_all_shared(
    input: &SharedBytes,
    globals: &dyn GlobalFilter,
    limits: &Limits,
) -> Result<Decoded, DecodeError> {
    let decoded = machine::Machine::sharing(input, globals, limits).run()?;
    whole(decoded, input.len())
}

/// `decoded`, or [`DecodeErrorCode::TrailingBytes`] when it did not take
/// all `input_len` bytes.
fn whole(decoded: Decoded, input_len: usize) -> Result<Decoded, DecodeError> {
    let count = input_len.saturating_sub(decoded.consumed);
    if count > 0 {
        return Err(DecodeError {
            // `consumed` counts the STOP.
            offset: decoded.consumed.saturating_sub(1),
            code: DecodeErrorCode::TrailingBytes { count },
        });
    }
    Ok(decoded)
}
