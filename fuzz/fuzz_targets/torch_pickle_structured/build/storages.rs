//! The storages of a message, in every form torch writes them: shared by
//! a `ForkingPickler` strategy, embedded as a legacy stream
//! (`_load_from_bytes`), or a torch.save file's record named by a
//! persistent id; and tensorshare's `bytes` form, a `bytearray` that
//! `torch.frombuffer` wraps.

use tensorshare::DType;
use tensorshare_compat::pickle::{Global, Node, NodeId, Pickle};
use tensorshare_compat::torch_save::{self, SavedStorage, TorchSaveFormat};

use super::{Builder, REDUCTIONS, dtype_at, replace_globals};
use crate::mutate::{self, Layer};
use crate::{Address, ClassChoice, Container, Num, Sharing, StorageSpec, StorageTweak};

/// A storage as built into the outer pickle.
pub(super) struct BuiltStorage {
    pub(super) node: NodeId,
    /// Set when the node rebuilds a typed storage, whose dtype the tensor
    /// then takes.
    pub(super) typed: Option<DType>,
    /// The dtype the storage's bytes were made for.
    pub(super) own: DType,
    pub(super) nbytes: usize,
    /// The bytes, when the rebuilt storage holds them.
    pub(super) data: Option<Vec<u8>>,
}

/// A storage a torch.save file carries as a record.
pub(super) struct Record {
    pub(super) key: String,
    pub(super) dtype: DType,
    pub(super) data: Vec<u8>,
}

/// `pattern(seed)`: the bytes of a storage, different for each seed and
/// position so that a view reading the wrong element shows.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (usize::from(seed) + i * 31 + i / 251) as u8)
        .collect()
}

impl Builder<'_> {
    pub(super) fn storage(&mut self, index: usize, spec: &StorageSpec) -> BuiltStorage {
        if !spec.tweaks.is_empty() {
            self.canonical = false;
        }
        let own = dtype_at(spec.dtype);
        let data = pattern(spec.seed, usize::from(spec.elements) * own.element_size());
        match self.input.container {
            Container::Forking => self.forking_storage(index, spec, own, data),
            Container::Plain => self.load_from_bytes(index, spec, own, data),
            Container::TorchSaveZip => {
                self.saved_storage(index, spec, TorchSaveFormat::Zip, own, data)
            }
            Container::TorchSaveLegacy => {
                self.saved_storage(index, spec, TorchSaveFormat::Legacy, own, data)
            }
        }
    }

    /// The `cls` argument: `UntypedStorage` unless a tweak says otherwise;
    /// the dtype a legacy class counts elements of.
    fn class(&mut self, spec: &StorageSpec) -> (NodeId, Option<DType>) {
        let choice = spec.tweaks.iter().rev().find_map(|t| match t {
            StorageTweak::Class(choice) => Some(choice),
            _ => None,
        });
        match choice {
            None | Some(ClassChoice::Untyped) => {
                (self.outer.global("torch.storage", "UntypedStorage"), None)
            }
            Some(ClassChoice::Legacy(index)) => {
                let dtype = dtype_at(*index);
                let counted = dtype.legacy_storage_class().map(|_| dtype);
                (self.legacy_class_global(dtype), counted)
            }
            Some(ClassChoice::Global(choice)) => {
                let global = choice.global();
                (self.outer.push(Node::Global(global)), None)
            }
            Some(ClassChoice::NotAGlobal(value)) => (self.int(value.0), None),
        }
    }

    fn claimed_size(spec: &StorageSpec, exact: i64) -> i64 {
        spec.tweaks
            .iter()
            .rev()
            .find_map(|t| match t {
                StorageTweak::ClaimedSize(Num(size)) => Some(*size),
                _ => None,
            })
            .unwrap_or(exact)
    }

    fn forking_storage(
        &mut self,
        index: usize,
        spec: &StorageSpec,
        own: DType,
        data: Vec<u8>,
    ) -> BuiltStorage {
        let (cls, class_dtype) = self.class(spec);
        // Sizes count bytes for UntypedStorage, elements for a legacy class.
        let unit = class_dtype.map_or(1, DType::element_size);
        let count = data.len() / unit;
        let size = Self::claimed_size(spec, count as i64);
        let counted_nbytes = count * unit;
        let (node, typed, nbytes) = match &spec.sharing {
            Sharing::Fd { address, key } => {
                let address = match address {
                    None => self.str(&format!("/tmp/pymp-fuzz/listener-{index}")),
                    Some(Address::Path(path)) => self.str(path),
                    Some(Address::Abstract(name)) => {
                        let mut abstract_name = vec![0];
                        abstract_name.extend_from_slice(name);
                        self.bytes(abstract_name)
                    }
                    Some(Address::NotAnAddress(value)) => {
                        let node = self.int(value.0);
                        self.stray(node)
                    }
                };
                let key = self.int(key.0);
                let id = self.outer.tuple(vec![address, key]);
                let id_key = self.str("_id");
                let state = self.outer.push(Node::Dict(vec![(id_key, id)]));
                let dup_fd_class = self
                    .outer
                    .global("multiprocessing.resource_sharer", "DupFd");
                let dup_fd = self.outer.new_object_with_state(dup_fd_class, state);
                let size = self.int(size);
                let node =
                    self.call_global(REDUCTIONS, "rebuild_storage_fd", vec![cls, dup_fd, size]);
                (node, class_dtype, counted_nbytes)
            }
            Sharing::Filename {
                manager,
                name,
                with_dtype,
            } => {
                let manager = match manager {
                    None => b"/tmp/torch-shm-dir-fuzz/manager.sock".to_vec(),
                    Some(manager) => self.stray(manager.clone()),
                };
                let name = match name {
                    // One name per storage: a reader makes one storage of
                    // every reference to a name.
                    None => format!("/torch_4242_{}_{index}", 1000 + index).into_bytes(),
                    Some(name) => self.stray(name.clone()),
                };
                let manager = self.bytes(manager);
                let name = self.bytes(name);
                // torch 2.x's typed form: the size counts elements of the
                // dtype, which the storage takes.
                let typed_form = with_dtype.then_some(own);
                let size = match typed_form {
                    Some(_) => Self::claimed_size(spec, usize::from(spec.elements) as i64),
                    None => size,
                };
                let mut args = vec![cls, manager, name, self.int(size)];
                args.extend(typed_form.map(|dtype| self.dtype_global(dtype)));
                let node = self.call_global(REDUCTIONS, "rebuild_storage_filename", args);
                match typed_form {
                    Some(dtype) => (node, Some(dtype), data.len()),
                    None => (node, class_dtype, counted_nbytes),
                }
            }
            Sharing::Empty => {
                let node = self.call_global(REDUCTIONS, "rebuild_storage_empty", vec![cls]);
                return BuiltStorage {
                    node,
                    typed: class_dtype,
                    own,
                    nbytes: 0,
                    data: Some(Vec::new()),
                };
            }
            Sharing::FromBytes => return self.load_from_bytes(index, spec, own, data),
            Sharing::FromBuffer => return self.from_buffer(own, data),
            Sharing::FromFile { path } => {
                let path = match path {
                    None => format!("/tmp/tensorshare-fuzz/memmap-{index}"),
                    Some(path) => self.stray(path.clone()),
                };
                let class = self.outer.global("torch._C", "StorageBase");
                let attribute = self.str("from_file");
                let from_file = self.call_global("builtins", "getattr", vec![class, attribute]);
                let path = self.str(&path);
                let shared = self.outer.push(Node::Bool(true));
                let nbytes = Self::claimed_size(spec, data.len() as i64);
                let nbytes = self.int(nbytes);
                let node = self.outer.call(from_file, vec![path, shared, nbytes]);
                (node, None, data.len())
            }
        };
        // The bytes are the sender's, not in the message.
        BuiltStorage {
            node,
            typed,
            own,
            nbytes,
            data: None,
        }
    }

    /// The persistent id torch.save writes for a storage, or a tweaked one.
    fn storage_pid(
        pickle: &mut Pickle,
        spec: &StorageSpec,
        format: TorchSaveFormat,
        key: &str,
        own: DType,
        data: &[u8],
    ) -> NodeId {
        let saved = SavedStorage::new(key, Some(own), data);
        let pid = torch_save::push_storage_pid(pickle, format, &saved)
            .expect("whole elements by construction");
        let Node::PersistentId(tuple) = *pickle.get(pid).unwrap() else {
            unreachable!("push_storage_pid returns a persistent id");
        };
        let Node::Tuple(mut items) = pickle.get(tuple).unwrap().clone() else {
            unreachable!("a persistent id is a tuple");
        };
        for tweak in &spec.tweaks {
            // The field a tweak replaces, and with what.
            let replacement = match tweak {
                StorageTweak::Class(choice) => {
                    let class = match choice {
                        ClassChoice::Untyped => {
                            Node::Global(Global::new("torch.storage", "UntypedStorage"))
                        }
                        ClassChoice::Legacy(index) => {
                            let class =
                                dtype_at(*index).legacy_storage_class().unwrap_or("Storage");
                            Node::Global(Global::new("torch", class))
                        }
                        ClassChoice::Global(choice) => Node::Global(choice.global()),
                        ClassChoice::NotAGlobal(value) => Node::Int(value.0),
                    };
                    Some((1, class))
                }
                StorageTweak::Key(other) => Some((2, Node::Str(other.clone()))),
                StorageTweak::Location(location) => Some((3, Node::Str(location.clone()))),
                StorageTweak::ClaimedSize(Num(numel)) => Some((4, Node::Int(*numel))),
                StorageTweak::Tag(tag) => Some((0, Node::Str(tag.clone()))),
                StorageTweak::PidField { at, value } => {
                    Some((usize::from(*at) % 8, Node::Int(value.0)))
                }
                StorageTweak::DropPidField { at } => {
                    if !items.is_empty() {
                        items.remove(usize::from(*at) % items.len());
                    }
                    None
                }
                StorageTweak::ExtraPidField(value) => {
                    items.push(pickle.push(Node::Int(value.0)));
                    None
                }
                StorageTweak::Wrap(_) | StorageTweak::NoRecord => None,
            };
            if let Some((at, node)) = replacement
                && let Some(slot) = items.get_mut(at)
            {
                *slot = pickle.push(node);
            }
        }
        *pickle.get_mut(tuple).unwrap() = Node::Tuple(items);
        pid
    }

    /// `torch.Tensor.untyped_storage(functools.partial(torch.frombuffer,
    /// dtype=torch.uint8)(bytearray(b)))`, tensorshare's `bytes` form, or
    /// `rebuild_storage_empty` for no bytes, as tensorshare sends those.
    fn from_buffer(&mut self, own: DType, data: Vec<u8>) -> BuiltStorage {
        // Below protocol 4 `pickle` spells the dotted method through
        // getattr, which only memmap's from_file may use.
        if 2 + self.input.protocol % 4 < 4 {
            self.canonical = false;
        }
        let node = if data.is_empty() {
            let cls = self.outer.global("torch.storage", "UntypedStorage");
            self.call_global(REDUCTIONS, "rebuild_storage_empty", vec![cls])
        } else {
            let function = self.outer.global("torch", "frombuffer");
            let partial = self.call_global("functools", "partial", vec![function]);
            let args = self.outer.tuple(Vec::new());
            let keyword = self.str("dtype");
            let uint8 = self.outer.global("torch", "uint8");
            let kwargs = self.outer.push(Node::Dict(vec![(keyword, uint8)]));
            let none = self.outer.push(Node::None);
            let state = self.outer.tuple(vec![function, args, kwargs, none]);
            if let Some(Node::Object(object)) = self.outer.pickle_mut().get_mut(partial) {
                object.state = Some(state);
            }
            let payload = self.outer.push(Node::ByteArray(data.clone().into()));
            let tensor = self.outer.call(partial, vec![payload]);
            self.call_global("torch", "Tensor.untyped_storage", vec![tensor])
        };
        BuiltStorage {
            node,
            typed: None,
            own,
            nbytes: data.len(),
            data: Some(data),
        }
    }

    /// `torch.storage._load_from_bytes(b)`, `b` a legacy torch.save stream
    /// holding the storage, as plain `pickle.dumps` writes a storage.
    fn load_from_bytes(
        &mut self,
        index: usize,
        spec: &StorageSpec,
        own: DType,
        data: Vec<u8>,
    ) -> BuiltStorage {
        let key = format!("9384395592411{index}");
        let mut object = Pickle::new();
        let pid = Self::storage_pid(&mut object, spec, TorchSaveFormat::Legacy, &key, own, &data);
        object.set_root(pid);
        replace_globals(&mut object, &self.input.bogus_globals, Layer::Inner);
        let saved = SavedStorage::new(&key, Some(own), &data);
        let typed = saved.class_dtype(TorchSaveFormat::Legacy);
        let mut stream = Vec::new();
        let written = torch_save::write_legacy(&mut stream, &object, &[saved]);
        assert!(
            written.is_ok() || !self.canonical,
            "a legacy stream does not write: {written:?}"
        );
        mutate::apply(&mut stream, &self.input.mutations, Layer::Inner);
        let stream = self.bytes(stream);
        let node = self.call_global("torch.storage", "_load_from_bytes", vec![stream]);
        BuiltStorage {
            node,
            typed,
            own,
            nbytes: data.len(),
            data: Some(data),
        }
    }

    /// A storage of a torch.save file: its persistent id in the object, its
    /// bytes a record.
    fn saved_storage(
        &mut self,
        index: usize,
        spec: &StorageSpec,
        format: TorchSaveFormat,
        own: DType,
        data: Vec<u8>,
    ) -> BuiltStorage {
        let key = index.to_string();
        let node = Self::storage_pid(self.outer.pickle_mut(), spec, format, &key, own, &data);
        let saved = SavedStorage::new(&key, Some(own), &data);
        let typed = saved.class_dtype(format);
        let no_record = spec
            .tweaks
            .iter()
            .any(|t| matches!(t, StorageTweak::NoRecord));
        // Without its record, a stand-in keeps the indices of records and
        // storages in step.
        let (key, record) = if no_record {
            (format!("missing-{index}"), Vec::new())
        } else {
            (key, data.clone())
        };
        self.records.push(Record {
            key,
            dtype: own,
            data: record,
        });
        BuiltStorage {
            node,
            typed,
            own,
            nbytes: data.len(),
            data: Some(data),
        }
    }
}
