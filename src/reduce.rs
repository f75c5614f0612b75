//! Turning rebuilt values back into pickles torch rebuilds: the reducer half
//! of the registry.
//!
//! Tensors and storages are memoized by identity, so a tensor sent twice is
//! one object on the other side and two views of one storage share it, as
//! with torch's own `ForkingPickler`.

use rustc_hash::FxHashMap;

use tensorshare_compat::pickle::{Global, Node, NodeId, Pickle, PickleBuilder};

use crate::DType;
use crate::model::{Storage, Tensor, Value};
use crate::registry::{REDUCTIONS, Reduction, TypeReducers};

// Why a pickle or a torch.save file could not be written, from the format
// crate.
pub use tensorshare_compat::pickle::EncodeError;
pub use tensorshare_compat::torch_save::WriteError;

/// Why a value could not be written as a pickle.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReduceError {
    /// Containers nested deeper than the writer follows.
    #[error("values nested deeper than {0} levels")]
    TooDeep(usize),
    /// A value of a Rust type with no reducer registered for it.
    #[error(
        "no reducer for a {0} value: register one for its Rust type \
         (Registry::register_reducer or register_type), or send its parts as plain values"
    )]
    NoReducer(Global),
    /// A description of what a refused pickle asked for.
    #[error(
        "an {0} is a description of what a refused pickle asked for, not data; it cannot be \
         written"
    )]
    Opaque(&'static str),
    /// A storage whose bytes are in another process (received and not
    /// attached) or not all in its segment.
    #[error(
        "the bytes of a {kind} storage of {nbytes} bytes are not at hand: attach it through a \
         SharingContext before saving it"
    )]
    BytesElsewhere {
        /// Where the storage lives.
        kind: &'static str,
        /// Its size.
        nbytes: usize,
    },
    /// One storage viewed as two dtypes, which torch.save cannot write.
    #[error(
        "one storage is viewed both as {first} and as {second}; torch.save cannot write that: \
         save a copy of one of the views"
    )]
    MixedDtypes {
        /// The dtype it was first viewed as (`untyped` for a storage).
        first: &'static str,
        /// The other.
        second: &'static str,
    },
    /// A storage whose bytes are in another process, sent before it was
    /// attached.
    #[error(
        "a {kind} storage whose bytes are not in this process cannot be sent; receive it with \
         a SharingContext to attach it first"
    )]
    NotInProcess {
        /// Where the storage lives.
        kind: &'static str,
    },
    /// A storage that claims more bytes than its segment holds.
    #[error("the storage claims more bytes than its segment holds")]
    ShortSegment,
    /// A memmap file whose path torch's `from_file` cannot take.
    #[error("memmap path {0:?} is not UTF-8; torch's from_file takes a str")]
    PathNotUtf8(std::path::PathBuf),
    /// A storage's copy for sharing did not land in the strategy's memory:
    /// a broken invariant, reported rather than trusted.
    #[error("the storage did not move into a {0}")]
    NotMoved(&'static str),
    /// The `torch.save` form of a storage could not be written.
    #[error("cannot write a torch.save file: {0}")]
    TorchSaveWrite(WriteError),
}

impl From<WriteError> for ReduceError {
    fn from(error: WriteError) -> Self {
        ReduceError::TorchSaveWrite(error)
    }
}

/// How one storage is written into a pickle: the part that differs per
/// sharing strategy.
pub(crate) trait StorageReducer {
    /// What goes wrong sharing a storage; the writer's own failures convert
    /// into it.
    type Error: From<ReduceError>;

    /// Appends the nodes that rebuild `storage` as a `torch.UntypedStorage`
    /// and returns the node that stands for it.
    ///
    /// # Errors
    ///
    /// When the storage cannot be shared this way (no fds left, not local, ...).
    fn reduce_storage(
        &self,
        storage: &Storage,
        out: &mut PickleBuilder,
    ) -> Result<NodeId, Self::Error>;
}

/// Depth past which a value graph is refused rather than risk the stack.
const MAX_DEPTH: usize = 1000;

/// Writes `value` into a pickle, storages through `storages`, values of
/// the embedder's types through `types`.
pub(crate) fn reduce_value<R: StorageReducer>(
    value: &Value,
    storages: &R,
    types: &TypeReducers,
) -> Result<Pickle, R::Error> {
    let mut leaves = SharingLeaves {
        storages,
        seen_storages: FxHashMap::default(),
    };
    // A tensor message is about 40 nodes: room for them up front saves
    // growing the arena several times per message.
    let mut out = PickleBuilder::with_capacity(48);
    let root = reduce_with(value, &mut leaves, types, &mut out)?;
    Ok(out.finish(root))
}

/// How tensors and storages are written: the part that differs between
/// `torch.multiprocessing` pickles and `torch.save` files. Containers and
/// plain values are written the same way for both.
pub(crate) trait LeafReducer {
    /// What goes wrong writing a leaf; the writer's own failures convert
    /// into it.
    type Error: From<ReduceError>;
    /// Writes a tensor (memoized by the caller).
    fn tensor(&mut self, t: &Tensor, out: &mut PickleBuilder) -> Result<NodeId, Self::Error>;
    /// Writes an untyped storage.
    fn storage(&mut self, s: &Storage, out: &mut PickleBuilder) -> Result<NodeId, Self::Error>;
    /// Writes a typed storage.
    fn typed_storage(
        &mut self,
        s: &Storage,
        dtype: DType,
        out: &mut PickleBuilder,
    ) -> Result<NodeId, Self::Error>;
}

/// Writes `value` into `out` with tensors and storages through `leaves`,
/// values of the embedder's types through `types`, and returns its node.
pub(crate) fn reduce_with<L: LeafReducer>(
    value: &Value,
    leaves: &mut L,
    types: &TypeReducers,
    out: &mut PickleBuilder,
) -> Result<NodeId, L::Error> {
    let mut reducer = Reducer {
        out,
        leaves,
        types,
        written: FxHashMap::default(),
    };
    reducer.value(value, 0)
}

struct Reducer<'a, L> {
    out: &'a mut PickleBuilder,
    leaves: &'a mut L,
    types: &'a TypeReducers,
    /// The node of each shared object already written, by
    /// [`Value::shared_identity`]: an object referenced twice is written
    /// once and memoized, as Python's pickler does, so a pickle's size
    /// follows the graph's, not its expansion's.
    written: FxHashMap<usize, NodeId>,
}

/// The `torch.multiprocessing` form: storages through a strategy's
/// [`StorageReducer`], tensors through `rebuild_tensor`.
struct SharingLeaves<'a, R> {
    storages: &'a R,
    seen_storages: FxHashMap<usize, NodeId>,
}

impl<L: LeafReducer> Reducer<'_, L> {
    fn value(&mut self, value: &Value, depth: usize) -> Result<NodeId, L::Error> {
        if depth > MAX_DEPTH {
            return Err(ReduceError::TooDeep(MAX_DEPTH).into());
        }
        let identity = value.shared_identity();
        if let Some(&node) = identity.and_then(|identity| self.written.get(&identity)) {
            return Ok(node);
        }
        let node = self.value_unwritten(value, depth)?;
        if let Some(identity) = identity {
            self.written.insert(identity, node);
        }
        Ok(node)
    }

    fn value_unwritten(&mut self, value: &Value, depth: usize) -> Result<NodeId, L::Error> {
        let all = |items: &[Value], this: &mut Self| -> Result<Vec<NodeId>, L::Error> {
            items.iter().map(|v| this.value(v, depth + 1)).collect()
        };
        Ok(match value {
            Value::None => self.out.push(Node::None),
            Value::Bool(b) => self.out.push(Node::Bool(*b)),
            Value::Int(i) => self.out.push(Node::Int(*i)),
            Value::BigInt(bytes) => self.out.push(Node::BigInt(bytes.to_vec())),
            Value::Float(f) => self.out.push(Node::Float(*f)),
            Value::Str(s) => self.out.push(Node::Str(s.to_string())),
            Value::Bytes(b) => self.out.push(Node::Bytes(b.clone().into())),
            Value::ByteArray(b) => self.out.push(Node::ByteArray(b.clone().into())),
            Value::Tuple(items) => {
                let items = all(items, self)?;
                self.out.push(Node::Tuple(items))
            }
            Value::List(items) => {
                let items = all(items, self)?;
                self.out.push(Node::List(items))
            }
            Value::Set(items) => {
                let items = all(items, self)?;
                self.out.push(Node::Set(items))
            }
            Value::FrozenSet(items) => {
                let items = all(items, self)?;
                self.out.push(Node::FrozenSet(items))
            }
            Value::Dict(pairs) => {
                let pairs = self.pairs(pairs, depth)?;
                self.out.push(Node::Dict(pairs))
            }
            Value::OrderedDict(pairs, attributes) => {
                let pairs = self.pairs(pairs, depth)?;
                // `OrderedDict.__reduce__`'s state: its `__dict__`, or none.
                let state = if attributes.is_empty() {
                    None
                } else {
                    let set = attributes
                        .iter()
                        .map(|(name, value)| {
                            let name = self.out.push(Node::Str(name.to_owned()));
                            Ok((name, self.value(value, depth + 1)?))
                        })
                        .collect::<Result<_, L::Error>>()?;
                    Some(self.out.push(Node::Dict(set)))
                };
                let class = self.out.global("collections", "OrderedDict");
                let node = self.out.call(class, Vec::new());
                if let Some(Node::Object(object)) = self.out.pickle_mut().get_mut(node) {
                    object.dict_items = pairs;
                    object.state = state;
                }
                node
            }
            Value::Tensor(t) => self.leaves.tensor(t, self.out)?,
            Value::Storage(s) => self.leaves.storage(s, self.out)?,
            Value::TypedStorage(s, dtype) => self.leaves.typed_storage(s, *dtype, self.out)?,
            Value::DType(dtype) => self.out.global("torch", dtype.name()),
            Value::Size(dims) => {
                let dims = dims.iter().map(|&d| self.out.push(Node::Int(d))).collect();
                let dims = self.out.tuple(dims);
                let size = self.out.global("torch", "Size");
                self.out.call(size, vec![dims])
            }
            Value::Global(g) => self.out.push(Node::Global(g.clone())),
            Value::Callable(c) => self.out.push(Node::Global(c.name().clone())),
            Value::Custom(c) => match self.types.reduce(c.value.as_ref()) {
                Some(Reduction::Call { callee, args }) => {
                    let callee = self.out.push(Node::Global(callee));
                    let args = all(&args, self)?;
                    self.out.call(callee, args)
                }
                Some(Reduction::Object { class, state }) => {
                    let class = self.out.push(Node::Global(class));
                    let state = self.value(&state, depth + 1)?;
                    self.out.new_object_with_state(class, state)
                }
                None => return Err(ReduceError::NoReducer(c.global.clone()).into()),
            },
            Value::Opaque(_) => return Err(ReduceError::Opaque(value.type_name()).into()),
        })
    }

    fn pairs(
        &mut self,
        pairs: &[(Value, Value)],
        depth: usize,
    ) -> Result<Vec<(NodeId, NodeId)>, L::Error> {
        pairs
            .iter()
            .map(|(k, v)| Ok((self.value(k, depth + 1)?, self.value(v, depth + 1)?)))
            .collect()
    }
}

impl<R: StorageReducer> LeafReducer for SharingLeaves<'_, R> {
    type Error = R::Error;

    /// `rebuild_tensor(cls, rebuild_typed_storage(storage, dtype),
    /// (storage_offset, torch.Size(sizes), strides, requires_grad))`, as
    /// torch's `reduce_tensor` writes it.
    fn tensor(&mut self, t: &Tensor, out: &mut PickleBuilder) -> Result<NodeId, R::Error> {
        let rebuild = out.global(REDUCTIONS, "rebuild_tensor");
        let class = if t.is_parameter() {
            out.global("torch.nn.parameter", "Parameter")
        } else {
            out.global("torch", "Tensor")
        };
        let typed = self.typed_storage(t.storage(), t.dtype(), out)?;
        let offset = out.int(t.storage_offset());
        let sizes: Vec<NodeId> = t.sizes().iter().map(|&s| out.int(s)).collect();
        let sizes = out.tuple(sizes);
        let size_class = out.global("torch", "Size");
        let size = out.call(size_class, vec![sizes]);
        let strides: Vec<NodeId> = t.strides().iter().map(|&s| out.int(s)).collect();
        let strides = out.tuple(strides);
        let requires_grad = out.push(Node::Bool(t.requires_grad()));
        let metadata = out.tuple(vec![offset, size, strides, requires_grad]);
        Ok(out.call(rebuild, vec![class, typed, metadata]))
    }

    fn storage(&mut self, storage: &Storage, out: &mut PickleBuilder) -> Result<NodeId, R::Error> {
        if let Some(&node) = self.seen_storages.get(&storage.identity()) {
            return Ok(node);
        }
        let node = self.storages.reduce_storage(storage, out)?;
        self.seen_storages.insert(storage.identity(), node);
        Ok(node)
    }

    /// `rebuild_typed_storage(untyped, dtype)`.
    fn typed_storage(
        &mut self,
        storage: &Storage,
        dtype: DType,
        out: &mut PickleBuilder,
    ) -> Result<NodeId, R::Error> {
        let untyped = self.storage(storage, out)?;
        let rebuild = out.global(REDUCTIONS, "rebuild_typed_storage");
        let dtype = out.global("torch", dtype.name());
        Ok(out.call(rebuild, vec![untyped, dtype]))
    }
}
