//! The encoder: writes a [`Pickle`] arena as the bytes CPython's
//! `pickle.dumps` writes for the same objects.
//!
//! It follows CPython's C pickler (`Modules/_pickle.c`, 3.11) opcode for
//! opcode: the same integer and string opcodes, the same batches of 1000 for
//! list, dict and set items, the same `__reduce__` forms where a protocol
//! lacks an opcode (`bytes` and `set` in protocol 2, `bytearray` below 5),
//! the same memo (every object CPython memoizes, in the same order, so one
//! node referenced twice is written once and fetched with `BINGET`
//! afterwards, and cycles through lists, dicts, sets and object state
//! round-trip), and the same 64 KiB frames in protocol 4 and up.
//!
//! Identity follows the arena: two nodes are two Python objects, even with
//! equal contents. Globals are the exception: a class is one object in
//! Python, so equal [`Global`](super::Global)s are written once.
//!
//! The graph is walked with an explicit work stack: nesting depth is limited
//! only by memory.

mod atoms;
mod batch;
mod encoded;
mod globals;
mod graph_check;
mod reductions;
mod writer;

use rustc_hash::FxHashMap;

use crate::pickle::opcodes::{
    ADDITEMS, APPEND, APPENDS, BINFLOAT, BINGET, BINPERSID, BINPUT, BYTEARRAY8, EMPTY_DICT,
    EMPTY_LIST, EMPTY_SET, EMPTY_TUPLE, FROZENSET, HIGHEST_PROTOCOL, LONG_BINGET, LONG_BINPUT,
    MARK, MEMOIZE, NEWFALSE, NEWTRUE, NONE, POP, POP_MARK, PROTO, SETITEM, SETITEMS, STOP, TUPLE,
    TUPLE1, TUPLE2, TUPLE3,
};
use crate::pickle::{Node, NodeId, Object, Pickle};
use atoms::sized_header;
use batch::{BatchStyle, Batches, Items};
pub use encoded::EncodedPickle;
use writer::FramedWriter;

/// The lowest protocol the encoder writes: the first with `NEWOBJ`, which
/// torch's reductions rely on.
const LOWEST_PROTOCOL: u8 = 2;

/// CPython's `BATCHSIZE`: items per `APPENDS`/`SETITEMS`/`ADDITEMS`.
const BATCH_SIZE: usize = 1000;

/// How to encode: the protocol, and whether to rename globals for Python 2.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::pickle::{encode, EncodeOptions, Node, Pickle};
///
/// let mut pickle = Pickle::new();
/// let one = pickle.push(Node::Int(1));
/// pickle.set_root(one);
/// let bytes = encode(&pickle, &EncodeOptions::new().with_protocol(2)).unwrap();
/// assert_eq!(bytes, b"\x80\x02K\x01.");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodeOptions {
    protocol: u8,
    fix_imports: bool,
}

impl EncodeOptions {
    /// The default protocol, 4: what torch's `ForkingPickler` writes on
    /// CPython 3.8 and later (it uses `pickle.DEFAULT_PROTOCOL`).
    pub const DEFAULT_PROTOCOL: u8 = 4;

    /// Protocol 4, with CPython's `fix_imports`.
    pub fn new() -> Self {
        Self {
            protocol: Self::DEFAULT_PROTOCOL,
            fix_imports: true,
        }
    }

    /// Sets the protocol, 2 to 5; [`encode`] refuses any other.
    #[must_use]
    pub fn with_protocol(mut self, protocol: u8) -> Self {
        self.protocol = protocol;
        self
    }

    /// Sets whether protocol 2 renames globals to their Python 2 names
    /// (`builtins` to `__builtin__` and so on), as CPython does by default.
    /// Python 3 readers undo the renames; turn it off only to write the
    /// Python 3 names verbatim.
    #[must_use]
    pub fn with_fix_imports(mut self, fix_imports: bool) -> Self {
        self.fix_imports = fix_imports;
        self
    }

    /// The protocol to write.
    pub fn protocol(&self) -> u8 {
        self.protocol
    }

    /// Whether protocol 2 renames globals for Python 2.
    pub fn fix_imports(&self) -> bool {
        self.fix_imports
    }
}

impl Default for EncodeOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// Why an arena could not be encoded.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The protocol is outside 2 to 5.
    #[error(
        "pickle protocol {protocol} is not supported: use 2, 3, 4 or 5 \
         (4 is what torch.multiprocessing writes)"
    )]
    UnsupportedProtocol {
        /// The protocol asked for.
        protocol: u8,
    },
    /// The arena is empty, so it has no root to encode.
    #[error("the pickle is empty: push the object to encode and make it the root with set_root")]
    NoRoot,
    /// A reference points outside the arena.
    #[error(
        "node {} is not in this arena of {len} nodes{}: build every node with \
         Pickle::push on the arena being encoded",
        .id.index(),
        referenced_by(.parent)
    )]
    InvalidNodeId {
        /// The missing node.
        id: NodeId,
        /// The node holding the reference; `None` for the root.
        parent: Option<NodeId>,
        /// How many nodes the arena holds.
        len: usize,
    },
    /// A cycle runs only through nodes that enter the memo after their
    /// children (tuples, frozensets, call arguments, persistent ids, and sets
    /// below protocol 4): Python cannot build it and no pickle expresses it.
    #[error(
        "node {} is on a cycle made only of tuples, frozensets, call arguments or \
         persistent ids, which no pickle can express: route the cycle through a \
         list, dict or object state",
        .node.index()
    )]
    UnencodableCycle {
        /// A node on the cycle.
        node: NodeId,
    },
    /// The value needs an opcode the protocol lacks.
    #[error(
        "{what} needs pickle protocol {required} or higher, not {protocol}: \
         encode with EncodeOptions::with_protocol({required})"
    )]
    ProtocolTooLow {
        /// What could not be written.
        what: &'static str,
        /// The protocol in use.
        protocol: u8,
        /// The lowest protocol that can write it.
        required: u8,
    },
    /// A global's name cannot be written with this protocol.
    #[error("global {module}.{name} cannot be written with protocol {protocol}: {reason}")]
    UnencodableGlobal {
        /// The module of the global.
        module: String,
        /// The qualified name of the global.
        name: String,
        /// The protocol in use.
        protocol: u8,
        /// What is wrong and what to do.
        reason: &'static str,
    },
    /// An [`Object`] whose arguments Python could not call it with.
    #[error("node {}: {what}", .node.index())]
    MalformedObject {
        /// The object node.
        node: NodeId,
        /// What is wrong.
        what: &'static str,
    },
    /// An int whose two's complement takes 2^31 bytes or more, past what
    /// `LONG4` can carry.
    #[error("an int of 2^31 bytes or more cannot be pickled")]
    IntTooLarge,
    /// The memo outgrew the 32-bit indices `LONG_BINGET` can address.
    #[error("more than 2^32 memoized objects: split the data across several pickles")]
    MemoFull,
}

fn referenced_by(parent: &Option<NodeId>) -> String {
    parent
        .map(|p| format!(" (referenced by node {})", p.index()))
        .unwrap_or_default()
}

/// Encodes the arena's root as a pickle.
///
/// # Errors
///
/// [`EncodeError`] when the protocol is not 2 to 5, the arena is empty, a
/// reference points outside the arena, a cycle cannot be expressed, or a
/// value needs a higher protocol. Nothing is returned on error.
///
/// # Panics
///
/// Panics, as [`Pickle::root`] does, if the arena holds nodes but no root
/// was set.
pub fn encode(pickle: &Pickle, options: &EncodeOptions) -> Result<Vec<u8>, EncodeError> {
    encode_new(pickle, options, false).map(EncodedPickle::into_vec)
}

/// Encodes the arena's root as a pickle appended to `out`.
///
/// # Errors
///
/// As [`encode`]; on error `out` is left as it was.
///
/// # Panics
///
/// As [`encode`].
pub fn encode_into(
    pickle: &Pickle,
    options: &EncodeOptions,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let root = checked_root(pickle, options.protocol)?;
    let start = out.len();
    let writer = FramedWriter::new(std::mem::take(out), false);
    let (encoded, result) = encode_root(pickle, root, options, writer);
    // Nothing is out of line: this is `out`'s own buffer back, uncopied.
    *out = encoded.into_vec();
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// Encodes the arena's root as [`encode`] does, leaving every chunk of
/// 64 KiB or more of a large `bytes` node in its own buffer: the bytes on
/// the wire are the same, and a storage travels without being copied into
/// the pickle.
///
/// # Errors
///
/// As [`encode`].
///
/// # Panics
///
/// As [`encode`].
pub fn encode_vectored(
    pickle: &Pickle,
    options: &EncodeOptions,
) -> Result<EncodedPickle, EncodeError> {
    encode_new(pickle, options, true)
}

/// Encodes the arena's root into a new buffer.
fn encode_new(
    pickle: &Pickle,
    options: &EncodeOptions,
    out_of_line: bool,
) -> Result<EncodedPickle, EncodeError> {
    let root = checked_root(pickle, options.protocol)?;
    // Torch's messages take about nine bytes a node; growing from empty
    // would copy the buffer several times over. Past a frame, growth is
    // cheap next to the writing.
    let guess = (16 + pickle.len() * 9).min(crate::pickle::FRAME_SIZE_TARGET);
    let writer = FramedWriter::new(Vec::with_capacity(guess), out_of_line);
    let (encoded, result) = encode_root(pickle, root, options, writer);
    result.map(|()| encoded)
}

/// Encodes `root`, checked by [`checked_root`], after what `out` holds;
/// returns all that was written, and the error that stopped the encoder if
/// one did.
fn encode_root(
    pickle: &Pickle,
    root: NodeId,
    options: &EncodeOptions,
    out: FramedWriter,
) -> (EncodedPickle, Result<(), EncodeError>) {
    let protocol = options.protocol;
    let mut encoder = Encoder {
        pickle,
        protocol,
        fix_imports: options.fix_imports && protocol < 3,
        out,
        node_memo: vec![None; pickle.len()],
        // Globals and their names: about two for every three nodes in
        // torch's messages. One slot per node covers them, and growing the
        // map costs more than the spare slots.
        memo: FxHashMap::with_capacity_and_hasher(pickle.len().min(1024), Default::default()),
        memo_len: 0,
        tasks: Vec::with_capacity(pickle.len().min(1024)),
    };
    let result = encoder.run(root);
    (encoder.out.finish(), result)
}

/// The root to encode, once the protocol and the graph are checked.
fn checked_root(pickle: &Pickle, protocol: u8) -> Result<NodeId, EncodeError> {
    if !(LOWEST_PROTOCOL..=HIGHEST_PROTOCOL).contains(&protocol) {
        return Err(EncodeError::UnsupportedProtocol { protocol });
    }
    let root = pickle
        .root()
        .filter(|&root| pickle.get(root).is_some())
        .ok_or(EncodeError::NoRoot)?;
    graph_check::check_graph(pickle, root, protocol)?;
    Ok(root)
}

/// What a memo slot holds, for finding it again.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum MemoKey<'a> {
    /// A node of the arena.
    Node(NodeId),
    /// A class or function: one object per `(module, qualified name)`.
    Global(&'a str, &'a str),
    /// A string CPython interns (module and qualified names, `'latin1'`).
    InternedStr(&'a str),
    /// A one-character string below U+0100: CPython keeps one of each.
    Latin1Char(u8),
    /// A one-byte `bytes`: CPython keeps one of each.
    SingleByte(u8),
}

/// A step of the walk; the stack of these replaces recursion.
enum Task<'a> {
    /// Save a node, as CPython's `save()`.
    Save(NodeId),
    /// Save a global, as `save_global()`.
    Global { module: &'a str, name: &'a str },
    /// Save a temporary string (a name part CPython splits off).
    TempStr(&'a str),
    /// Write one opcode.
    Op(u8),
    /// Close a tuple whose items are saved.
    EndTuple { id: NodeId, len: usize },
    /// Close a protocol 4 frozenset whose items are saved.
    EndFrozenSet { id: NodeId },
    /// Close a temporary tuple of `len` (1 to 3) items: never re-entered.
    EndTempTuple { len: usize },
    /// After a `REDUCE`/`NEWOBJ`/`NEWOBJ_EX`: memoize, then the object's
    /// items and state.
    EndReduce {
        id: NodeId,
        object: Option<&'a Object>,
    },
    /// Memoize what is on top of the stack under this key.
    MemoPut(MemoKey<'a>),
    /// Write the next batch of a container's items.
    Batches(Batches<'a>),
}

struct Encoder<'a> {
    pickle: &'a Pickle,
    protocol: u8,
    fix_imports: bool,
    out: FramedWriter,
    /// Memo slots of nodes, by node index: every node ends up here.
    node_memo: Vec<Option<u32>>,
    /// Memo slots of everything else.
    /// The values are ours, not a peer's: a fast hash is safe here, where
    /// the decoder's memo, filled by hostile input, keeps SipHash.
    memo: FxHashMap<MemoKey<'a>, u32>,
    memo_len: u32,
    tasks: Vec<Task<'a>>,
}

impl<'a> Encoder<'a> {
    fn run(&mut self, root: NodeId) -> Result<(), EncodeError> {
        self.out.write(&[PROTO, self.protocol]);
        if self.protocol >= 4 {
            self.out.start_framing();
        }
        self.tasks.push(Task::Save(root));
        while let Some(task) = self.tasks.pop() {
            self.step(task)?;
        }
        self.out.write(&[STOP]);
        self.out.commit_frame();
        Ok(())
    }

    fn step(&mut self, task: Task<'a>) -> Result<(), EncodeError> {
        match task {
            Task::Save(id) => self.save(id)?,
            Task::Global { module, name } => {
                self.out.opcode_boundary();
                self.save_global(module, name)?;
            }
            Task::TempStr(text) => self.save_temp_str(text, false)?,
            Task::Op(op) => self.out.write(&[op]),
            Task::EndTuple { id, len } => {
                if let Some(index) = self.memo_index(MemoKey::Node(id)) {
                    // The tuple was saved while its items were (a cycle through
                    // a list or dict): drop the items and fetch that one.
                    if len <= 3 {
                        self.out.write(&[POP].repeat(len));
                    } else {
                        self.out.write(&[POP_MARK]);
                    }
                    self.memo_get(index);
                } else {
                    self.out.write(&[tuple_op(len)]);
                    self.memo_put(Some(MemoKey::Node(id)))?;
                }
            }
            Task::EndFrozenSet { id } => {
                if let Some(index) = self.memo_index(MemoKey::Node(id)) {
                    self.out.write(&[POP_MARK]);
                    self.memo_get(index);
                } else {
                    self.out.write(&[FROZENSET]);
                    self.memo_put(Some(MemoKey::Node(id)))?;
                }
            }
            Task::EndTempTuple { len } => {
                self.out.write(&[tuple_op(len)]);
                self.memo_put(None)?;
            }
            Task::EndReduce { id, object } => self.end_reduce(id, object)?,
            Task::MemoPut(key) => self.memo_put(Some(key))?,
            Task::Batches(batches) => self.next_batch(batches),
        }
        Ok(())
    }

    fn node(&self, id: NodeId) -> Result<&'a Node, EncodeError> {
        self.pickle.get(id).ok_or(EncodeError::InvalidNodeId {
            id,
            parent: None,
            len: self.pickle.len(),
        })
    }

    fn save(&mut self, id: NodeId) -> Result<(), EncodeError> {
        self.out.opcode_boundary();
        let node = self.node(id)?;
        // Atoms are never memoized; a persistent id is written afresh on each
        // reference, as CPython calls `persistent_id` on each.
        match node {
            Node::None => self.out.write(&[NONE]),
            Node::Bool(value) => self.out.write(&[if *value { NEWTRUE } else { NEWFALSE }]),
            Node::Int(value) => self.save_int(*value),
            Node::BigInt(bytes) => self.save_big_int(bytes)?,
            Node::Float(value) => {
                let mut op = [BINFLOAT; 9];
                op[1..].copy_from_slice(&value.to_be_bytes());
                self.out.write(&op);
            }
            Node::PersistentId(pid) => self.tasks.extend([Task::Op(BINPERSID), Task::Save(*pid)]),
            Node::Global(global) => self.save_global(&global.module, &global.name)?,
            _ => return self.save_memoizable(id, node),
        }
        Ok(())
    }

    /// The part of `save()` past the atoms: fetch from the memo, or write.
    fn save_memoizable(&mut self, id: NodeId, node: &'a Node) -> Result<(), EncodeError> {
        if let Some(index) = self.memo_index(MemoKey::Node(id)) {
            self.memo_get(index);
            return Ok(());
        }
        let key = Some(MemoKey::Node(id));
        match node {
            Node::Str(text) => {
                self.write_str(text)?;
                self.memo_put(key)?;
            }
            Node::Bytes(bytes) if self.protocol < 3 => {
                self.save_bytes_protocol2(&bytes.contiguous(), key)?
            }
            Node::Bytes(bytes) => {
                self.write_byte_chunks(bytes)?;
                self.memo_put(key)?;
            }
            Node::ByteArray(bytes) if self.protocol < 5 => {
                self.save_bytearray_reduce(&bytes.contiguous(), id)?
            }
            Node::ByteArray(bytes) => {
                let (header, len) = sized_header(BYTEARRAY8, bytes.len(), 8);
                self.out
                    .write_chunked_payload(&header[..len], bytes.chunks());
                self.memo_put(key)?;
            }
            Node::Tuple(items) if items.is_empty() => self.out.write(&[EMPTY_TUPLE]),
            Node::Tuple(items) => {
                if items.len() > 3 {
                    self.out.write(&[MARK]);
                }
                self.tasks.push(Task::EndTuple {
                    id,
                    len: items.len(),
                });
                self.push_saves(items);
            }
            Node::List(items) => {
                self.out.write(&[EMPTY_LIST]);
                self.memo_put(key)?;
                self.push_batches(Items::Values(items), BatchStyle::ExactList, APPEND, APPENDS);
            }
            Node::Dict(pairs) => {
                self.out.write(&[EMPTY_DICT]);
                self.memo_put(key)?;
                self.push_batches(
                    Items::Pairs(pairs),
                    BatchStyle::ExactDict,
                    SETITEM,
                    SETITEMS,
                );
            }
            Node::Set(items) if self.protocol >= 4 => {
                self.out.write(&[EMPTY_SET]);
                self.memo_put(key)?;
                self.push_batches(Items::Values(items), BatchStyle::Set, ADDITEMS, ADDITEMS);
            }
            Node::FrozenSet(items) if self.protocol >= 4 => {
                self.out.write(&[MARK]);
                self.tasks.push(Task::EndFrozenSet { id });
                self.push_saves(items);
            }
            Node::Set(items) => self.save_set_reduce("set", items, id)?,
            Node::FrozenSet(items) => self.save_set_reduce("frozenset", items, id)?,
            Node::Object(object) => self.save_object(object, id)?,
            Node::None
            | Node::Bool(_)
            | Node::Int(_)
            | Node::BigInt(_)
            | Node::Float(_)
            | Node::PersistentId(_)
            | Node::Global(_) => {}
        }
        Ok(())
    }

    /// Pushes saves of `items` so that the first is saved first.
    fn push_saves(&mut self, items: &[NodeId]) {
        self.tasks
            .extend(items.iter().rev().map(|&item| Task::Save(item)));
    }

    fn memo_get(&mut self, index: u32) {
        match u8::try_from(index) {
            Ok(small) => self.out.write(&[BINGET, small]),
            Err(_) => {
                let mut op = [LONG_BINGET; 5];
                op[1..].copy_from_slice(&index.to_le_bytes());
                self.out.write(&op);
            }
        }
    }

    /// The memo slot holding `key`, if it was memoized.
    fn memo_index(&self, key: MemoKey<'a>) -> Option<u32> {
        match key {
            MemoKey::Node(id) => self.node_memo.get(id.index()).copied().flatten(),
            key => self.memo.get(&key).copied(),
        }
    }

    /// Puts the object just written in the next memo slot; `key` finds it
    /// again, `None` for a temporary that is never fetched.
    fn memo_put(&mut self, key: Option<MemoKey<'a>>) -> Result<(), EncodeError> {
        let index = self.memo_len;
        self.memo_len = index.checked_add(1).ok_or(EncodeError::MemoFull)?;
        match key {
            Some(MemoKey::Node(id)) => {
                if let Some(slot) = self.node_memo.get_mut(id.index()) {
                    *slot = Some(index);
                }
            }
            Some(key) => {
                self.memo.insert(key, index);
            }
            None => {}
        }
        if self.protocol >= 4 {
            self.out.write(&[MEMOIZE]);
        } else if let Ok(small) = u8::try_from(index) {
            self.out.write(&[BINPUT, small]);
        } else {
            let mut op = [LONG_BINPUT; 5];
            op[1..].copy_from_slice(&index.to_le_bytes());
            self.out.write(&op);
        }
        Ok(())
    }
}

fn tuple_op(len: usize) -> u8 {
    match len {
        1 => TUPLE1,
        2 => TUPLE2,
        3 => TUPLE3,
        _ => TUPLE,
    }
}
