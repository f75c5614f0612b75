//! Builds the message an [`Input`] describes with the project's own pickle
//! builder, encoder and torch.save writer, and what a reader must rebuild
//! from it when nothing in the input strays from what torch writes.

use std::io::{Cursor, Read, Write};

use tensorshare::reduce::PickleBuilder;
use tensorshare::{DType, TensorView};
use tensorshare_compat::pickle::{
    ByteChunks, Construction, EncodeOptions, Global, Node, NodeId, Object, Pickle, encode,
};
use tensorshare_compat::torch_save::{self, SavedStorage, TorchSaveFormat};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use crate::mutate::{self, Layer};
use crate::{
    Address, BogusGlobal, ClassChoice, Container, Input, MAX_STORAGES, MAX_TENSORS, Num, Rebuild,
    RootForm, Sharing, StorageSpec, StorageTweak, TensorSpec, TensorTweak, ViewSpec, WrapChoice,
};

const REDUCTIONS: &str = "torch.multiprocessing.reductions";
const UTILS: &str = "torch._utils";

/// A tensor as a reader must rebuild it.
#[derive(Debug)]
pub struct ExpectedTensor {
    /// Its dtype, offset, sizes, strides, `requires_grad` and whether it
    /// is a `Parameter`.
    pub view: TensorView,
    pub storage_nbytes: usize,
    /// The storage's bytes, when the message carries them.
    pub data: Option<Vec<u8>>,
}

/// The bytes to feed the readers, and, when the input kept to what torch
/// writes and nothing was mutated, the tensors they must rebuild in order.
pub struct Built {
    pub bytes: Vec<u8>,
    pub expected: Option<Vec<ExpectedTensor>>,
}

pub fn dtype_at(index: u8) -> DType {
    DType::ALL[usize::from(index) % DType::ALL.len()]
}

impl Container {
    /// The torch.save format of the file, for the torch.save containers.
    fn torch_save_format(self) -> Option<TorchSaveFormat> {
        match self {
            Container::Forking | Container::Plain => None,
            Container::TorchSaveZip => Some(TorchSaveFormat::Zip),
            Container::TorchSaveLegacy => Some(TorchSaveFormat::Legacy),
        }
    }
}

struct Builder<'i> {
    input: &'i Input,
    outer: PickleBuilder,
    /// Cleared as soon as anything strays from what torch writes.
    canonical: bool,
    storages: Vec<BuiltStorage>,
    records: Vec<Record>,
}

pub fn build(input: &Input) -> Option<Built> {
    let specs = &input.tensors[..input.tensors.len().min(MAX_TENSORS)];
    if specs.is_empty() {
        return None;
    }
    let mut builder = Builder {
        input,
        outer: PickleBuilder::default(),
        canonical: input.bogus_globals.is_empty() && input.mutations.is_empty(),
        storages: Vec::new(),
        records: Vec::new(),
    };
    let storage_specs = &input.storages[..input.storages.len().min(MAX_STORAGES)];
    let default_storage = [StorageSpec::default()];
    let storage_specs = if storage_specs.is_empty() {
        &default_storage[..]
    } else {
        storage_specs
    };
    for (index, spec) in storage_specs.iter().enumerate() {
        let storage = builder.storage(index, spec);
        builder.storages.push(storage);
    }

    let included = match input.root {
        RootForm::Single => &specs[..1],
        _ => specs,
    };
    let mut tensors = Vec::new();
    let mut expected = Vec::new();
    let mut used = vec![false; builder.storages.len()];
    for spec in included {
        let index = usize::from(spec.storage) % builder.storages.len();
        used[index] = true;
        let (node, tensor) = builder.tensor(index, spec);
        tensors.push(node);
        expected.push(tensor);
    }
    let root = builder.root(&tensors);
    let mut outer = std::mem::take(&mut builder.outer).finish(root);
    replace_globals(&mut outer, &input.bogus_globals, Layer::Outer);

    let mut bytes = match input.container.torch_save_format() {
        None => {
            let protocol = 2 + input.protocol % 4;
            let encoded = encode(&outer, &EncodeOptions::new().with_protocol(protocol));
            assert!(
                encoded.is_ok() || !builder.canonical,
                "a torch pickle does not encode: {encoded:?}"
            );
            encoded.ok()?
        }
        Some(format) => {
            // Only the storages the object names: a legacy stream's key
            // list must match its persistent ids.
            let saved: Vec<SavedStorage<'_>> = builder
                .records
                .iter()
                .zip(&used)
                .filter(|(_, used)| **used)
                .map(|(record, _)| SavedStorage::new(&record.key, Some(record.dtype), &record.data))
                .collect();
            let written = torch_save::write_to_vec(format, &outer, &saved);
            assert!(
                written.is_ok() || !builder.canonical,
                "a torch.save file does not write: {written:?}"
            );
            let mut file = written.ok()?;
            if format == TorchSaveFormat::Zip && has_layer(input, Layer::Inner) {
                file = rezip_with(&file, |pickle| {
                    mutate::apply(pickle, &input.mutations, Layer::Inner)
                })?;
            }
            file
        }
    };
    mutate::apply(&mut bytes, &input.mutations, Layer::Outer);
    Some(Built {
        bytes,
        expected: builder.canonical.then_some(expected),
    })
}

fn has_layer(input: &Input, layer: Layer) -> bool {
    input.mutations.iter().any(|m| m.layer == layer)
}

/// Replaces globals of `pickle` as the bogus globals of `layer` ask.
fn replace_globals(pickle: &mut Pickle, bogus: &[BogusGlobal], layer: Layer) {
    for replacement in bogus.iter().filter(|b| b.layer == layer) {
        let globals: Vec<NodeId> = pickle
            .iter()
            .filter(|(_, node)| matches!(node, Node::Global(_)))
            .map(|(id, _)| id)
            .collect();
        if globals.is_empty() {
            return;
        }
        let id = globals[usize::from(replacement.nth) % globals.len()];
        *pickle.node_mut(id) = Node::Global(replacement.global.global());
    }
}

/// The zip with its `data.pkl` replaced by `edit`ed bytes, every other
/// entry copied as it is.
fn rezip_with(file: &[u8], edit: impl FnOnce(&mut Vec<u8>)) -> Option<Vec<u8>> {
    let mut archive = ZipArchive::new(Cursor::new(file)).ok()?;
    let mut out = ZipWriter::new(Cursor::new(Vec::new()));
    let mut edit = Some(edit);
    for index in 0..archive.len() {
        let is_pickle = archive
            .by_index_raw(index)
            .ok()?
            .name()
            .ends_with("/data.pkl");
        if is_pickle {
            let mut entry = archive.by_index(index).ok()?;
            let name = entry.name().to_owned();
            let mut pickle = Vec::new();
            entry.read_to_end(&mut pickle).ok()?;
            if let Some(edit) = edit.take() {
                edit(&mut pickle);
            }
            let stored = SimpleFileOptions::default().compression_method(CompressionMethod::Stored);
            out.start_file(name, stored).ok()?;
            out.write_all(&pickle).ok()?;
        } else {
            out.raw_copy_file(archive.by_index_raw(index).ok()?).ok()?;
        }
    }
    Some(out.finish().ok()?.into_inner())
}

impl Builder<'_> {
    fn dtype_global(&mut self, dtype: DType) -> NodeId {
        self.outer.global("torch", dtype.name())
    }

    /// `torch.<Class>Storage` for a dtype with a legacy storage class, else
    /// `torch.TypedStorage`.
    fn legacy_class_global(&mut self, dtype: DType) -> NodeId {
        let class = dtype.legacy_storage_class().unwrap_or("TypedStorage");
        self.outer.global("torch", class)
    }

    fn int(&mut self, value: i64) -> NodeId {
        self.outer.push(Node::Int(value))
    }

    fn str(&mut self, value: &str) -> NodeId {
        self.outer.push(Node::Str(value.to_owned()))
    }

    fn bytes(&mut self, value: Vec<u8>) -> NodeId {
        self.outer.push(Node::Bytes(ByteChunks::from(value)))
    }

    fn ints(&mut self, values: &[i64]) -> NodeId {
        let items = values.iter().map(|&v| self.int(v)).collect();
        self.outer.tuple(items)
    }

    fn call_global(
        &mut self,
        module: &'static str,
        name: &'static str,
        args: Vec<NodeId>,
    ) -> NodeId {
        let callable = self.outer.global(module, name);
        self.outer.call(callable, args)
    }

    fn ordered_dict(&mut self, items: Vec<(NodeId, NodeId)>) -> NodeId {
        let callable = self.outer.global("collections", "OrderedDict");
        let args = self.outer.tuple(Vec::new());
        self.outer.push(Node::Object(Object {
            callable,
            construction: Construction::Reduce { args },
            state: None,
            list_items: Vec::new(),
            dict_items: items,
        }))
    }

    /// Marks the message as straying from what torch writes, and passes
    /// `value` through.
    fn stray<T>(&mut self, value: T) -> T {
        self.canonical = false;
        value
    }

    fn root(&mut self, tensors: &[NodeId]) -> NodeId {
        match self.input.root {
            RootForm::Single => tensors[0],
            RootForm::Tuple => self.outer.tuple(tensors.to_vec()),
            RootForm::List => self.outer.push(Node::List(tensors.to_vec())),
            RootForm::Dict => {
                let items = tensors
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| (self.str(&format!("t{i}")), t))
                    .collect();
                self.outer.push(Node::Dict(items))
            }
            RootForm::StateDict => {
                let items = tensors
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| (self.str(&format!("layer{i}.weight")), t))
                    .collect();
                self.ordered_dict(items)
            }
        }
    }
}

/// A storage as built into the outer pickle.
struct BuiltStorage {
    node: NodeId,
    /// Set when the node rebuilds a typed storage, whose dtype the tensor
    /// then takes.
    typed: Option<DType>,
    /// The dtype the storage's bytes were made for.
    own: DType,
    nbytes: usize,
    /// The bytes, when the rebuilt storage holds them.
    data: Option<Vec<u8>>,
}

/// A storage a torch.save file carries as a record.
struct Record {
    key: String,
    dtype: DType,
    data: Vec<u8>,
}

/// `pattern(seed)`: the bytes of a storage, different for each seed and
/// position so that a view reading the wrong element shows.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (usize::from(seed) + i * 31 + i / 251) as u8)
        .collect()
}

impl Builder<'_> {
    fn storage(&mut self, index: usize, spec: &StorageSpec) -> BuiltStorage {
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
        let Node::PersistentId(tuple) = *pickle.node(pid) else {
            unreachable!("push_storage_pid returns a persistent id");
        };
        let Node::Tuple(mut items) = pickle.node(tuple).clone() else {
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
        *pickle.node_mut(tuple) = Node::Tuple(items);
        pid
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

impl Builder<'_> {
    fn tensor(&mut self, storage: usize, spec: &TensorSpec) -> (NodeId, ExpectedTensor) {
        if !spec.tweaks.is_empty() {
            self.canonical = false;
        }
        let BuiltStorage {
            node: storage_node,
            typed,
            own,
            nbytes,
            ..
        } = self.storages[storage];
        let forking = matches!(self.input.container, Container::Forking);
        let (storage_arg, dtype) = if forking {
            self.forking_storage_arg(storage, spec)
        } else {
            // The storage's own dtype: through its class when it has a
            // legacy one (`_rebuild_tensor_v2`), else named
            // (`_rebuild_tensor_v3`).
            (storage_node, own)
        };
        let view = self.view(spec, dtype, nbytes);
        let node = if forking {
            self.rebuild_tensor(storage_arg, &view)
        } else {
            self.rebuild_tensor_v2(storage_arg, typed, &view)
        };
        let node = self.tweak_tensor(node, spec);
        let expected = ExpectedTensor {
            view,
            storage_nbytes: nbytes,
            data: self.storages[storage].data.clone(),
        };
        (node, expected)
    }

    /// The view's numbers: a view that fits its storage, or whatever the
    /// input says.
    fn view(&mut self, spec: &TensorSpec, dtype: DType, nbytes: usize) -> TensorView {
        let mut view = match &spec.view {
            ViewSpec::Fitting {
                offset,
                sizes,
                transpose,
                expand,
            } => {
                let ndim = sizes.len().min(4);
                let capacity = nbytes / dtype.element_size();
                let (offset, sizes) = if capacity == 0 {
                    (0, vec![0usize; ndim.max(1)])
                } else {
                    let offset = usize::from(*offset) % capacity;
                    let room = capacity - offset;
                    let mut product = 1usize;
                    let mut fitted = Vec::with_capacity(ndim);
                    for &size in &sizes[..ndim] {
                        let wanted = usize::from(size % 6);
                        // After a zero size, anything fits.
                        let size = room
                            .checked_div(product)
                            .map_or(wanted, |fits| wanted.min(fits));
                        product *= size;
                        fitted.push(size);
                    }
                    (offset, fitted)
                };
                let mut view = TensorView::contiguous(dtype, &sizes);
                view.storage_offset = offset as i64;
                if *transpose && sizes.len() >= 2 {
                    view.sizes.swap(0, 1);
                    view.strides.swap(0, 1);
                }
                if *expand && !view.strides.is_empty() {
                    view.strides[0] = 0;
                }
                view
            }
            ViewSpec::Free {
                offset,
                sizes,
                strides,
            } => {
                self.canonical = false;
                let dims = |values: &[Num]| values.iter().take(8).map(|n| n.0).collect();
                TensorView {
                    dtype,
                    storage_offset: offset.0,
                    sizes: dims(sizes),
                    strides: dims(strides),
                    requires_grad: false,
                    parameter: false,
                }
            }
        };
        view.requires_grad = spec.requires_grad;
        view.parameter = spec.parameter;
        view
    }

    /// `ForkingPickler`'s storage argument and the dtype the tensor takes:
    /// an untyped storage wrapped with the tensor's dtype, as torch 2.x
    /// does; a typed one as it is, with its own; or the wrapper a tweak
    /// asks for.
    fn forking_storage_arg(&mut self, storage: usize, spec: &TensorSpec) -> (NodeId, DType) {
        let BuiltStorage { node, typed, .. } = self.storages[storage];
        match (self.wrap_tweak(storage), typed) {
            (None, Some(dtype)) => (node, dtype),
            (None, None) => {
                let dtype = dtype_at(spec.dtype);
                (self.typed_storage(node, dtype), dtype)
            }
            (Some(wrap), _) => self.wrapped(node, wrap, spec),
        }
    }

    /// The last typed-wrapper tweak of the storage's spec, if any.
    fn wrap_tweak(&self, storage: usize) -> Option<WrapChoice> {
        let specs = &self.input.storages;
        specs.get(storage).and_then(|spec| {
            spec.tweaks.iter().rev().find_map(|t| match t {
                StorageTweak::Wrap(wrap) => Some(*wrap),
                _ => None,
            })
        })
    }

    /// A typed wrapper other than the one torch writes.
    fn wrapped(&mut self, storage: NodeId, wrap: WrapChoice, spec: &TensorSpec) -> (NodeId, DType) {
        match wrap {
            WrapChoice::None => (storage, dtype_at(spec.dtype)),
            WrapChoice::Typed(index) => {
                let dtype = dtype_at(index);
                (self.typed_storage(storage, dtype), dtype)
            }
            WrapChoice::Child(index) => {
                let dtype = dtype_at(index);
                let class = self.legacy_class_global(dtype);
                let node = self.call_global(
                    REDUCTIONS,
                    "rebuild_typed_storage_child",
                    vec![storage, class],
                );
                (node, dtype)
            }
        }
    }

    /// `rebuild_typed_storage(storage, torch.<dtype>)`.
    fn typed_storage(&mut self, storage: NodeId, dtype: DType) -> NodeId {
        let dtype = self.dtype_global(dtype);
        self.call_global(REDUCTIONS, "rebuild_typed_storage", vec![storage, dtype])
    }

    /// `rebuild_tensor(cls, storage, (storage_offset, torch.Size(sizes),
    /// strides, requires_grad))`, as torch's `reduce_tensor` writes it.
    fn rebuild_tensor(&mut self, storage: NodeId, view: &TensorView) -> NodeId {
        let cls = if view.parameter {
            self.outer.global("torch.nn.parameter", "Parameter")
        } else {
            self.outer.global("torch._tensor", "Tensor")
        };
        let offset = self.int(view.storage_offset);
        let dims = self.ints(&view.sizes);
        let size = self.call_global("torch", "Size", vec![dims]);
        let stride = self.ints(&view.strides);
        let requires_grad = self.outer.push(Node::Bool(view.requires_grad));
        let metadata = self.outer.tuple(vec![offset, size, stride, requires_grad]);
        self.call_global(REDUCTIONS, "rebuild_tensor", vec![cls, storage, metadata])
    }

    /// `_rebuild_tensor_v2(storage, storage_offset, sizes, strides,
    /// requires_grad, OrderedDict())`, or `_v3` with the dtype appended
    /// when the storage's class does not give it; a `Parameter` inside
    /// `_rebuild_parameter`, as `pickle.dumps` and torch.save write them.
    fn rebuild_tensor_v2(
        &mut self,
        storage: NodeId,
        typed: Option<DType>,
        view: &TensorView,
    ) -> NodeId {
        let offset = self.int(view.storage_offset);
        let size = self.ints(&view.sizes);
        let stride = self.ints(&view.strides);
        let requires_grad = self
            .outer
            .push(Node::Bool(view.requires_grad && !view.parameter));
        let hooks = self.ordered_dict(Vec::new());
        let mut args = vec![storage, offset, size, stride, requires_grad, hooks];
        let v3 = typed != Some(view.dtype);
        if v3 {
            args.push(self.dtype_global(view.dtype));
        }
        let name = if v3 {
            "_rebuild_tensor_v3"
        } else {
            "_rebuild_tensor_v2"
        };
        let node = self.call_global(UTILS, name, args);
        if view.parameter {
            self.rebuild_parameter(node, view.requires_grad)
        } else {
            node
        }
    }

    /// `_rebuild_parameter(tensor, requires_grad, OrderedDict())`.
    fn rebuild_parameter(&mut self, tensor: NodeId, requires_grad: bool) -> NodeId {
        let requires_grad = self.outer.push(Node::Bool(requires_grad));
        let hooks = self.ordered_dict(Vec::new());
        self.call_global(
            UTILS,
            "_rebuild_parameter",
            vec![tensor, requires_grad, hooks],
        )
    }

    /// Applies a tensor's tweaks to its rebuild call.
    fn tweak_tensor(&mut self, mut node: NodeId, spec: &TensorSpec) -> NodeId {
        for tweak in &spec.tweaks {
            let Node::Object(object) = self.outer.pickle_mut().node(node).clone() else {
                return node;
            };
            let Construction::Reduce { args } = object.construction else {
                return node;
            };
            let Node::Tuple(mut items) = self.outer.pickle_mut().node(args).clone() else {
                return node;
            };
            match tweak {
                TensorTweak::Rebuild(rebuild) => {
                    let (module, name) = rebuild.global();
                    let callable = self.outer.global(module, name);
                    node = self.outer.call(callable, items);
                    continue;
                }
                TensorTweak::DropArg(at) => {
                    if !items.is_empty() {
                        items.remove(usize::from(*at) % items.len());
                    }
                }
                TensorTweak::ExtraArg(value) => items.push(self.int(value.0)),
                TensorTweak::ReplaceArg { at, value } => {
                    if !items.is_empty() {
                        let at = usize::from(*at) % items.len();
                        items[at] = self.int(value.0);
                    }
                }
                TensorTweak::ArgAsList(at) => {
                    if !items.is_empty() {
                        let at = usize::from(*at) % items.len();
                        if let Node::Tuple(inner) = self.outer.pickle_mut().node(items[at]).clone()
                        {
                            items[at] = self.outer.push(Node::List(inner));
                        }
                    }
                }
                TensorTweak::Wrap(times) => {
                    // The tensor as the argument of further rebuilds.
                    for _ in 0..usize::from(*times % 4) {
                        node = self.rebuild_parameter(node, true);
                    }
                    continue;
                }
            }
            node = self.outer.call(object.callable, items);
        }
        node
    }
}

impl Rebuild {
    fn global(self) -> (&'static str, &'static str) {
        match self {
            Rebuild::RebuildTensor => (REDUCTIONS, "rebuild_tensor"),
            Rebuild::V1 => (UTILS, "_rebuild_tensor"),
            Rebuild::V2 => (UTILS, "_rebuild_tensor_v2"),
            Rebuild::V3 => (UTILS, "_rebuild_tensor_v3"),
            Rebuild::Parameter => (UTILS, "_rebuild_parameter"),
            Rebuild::ParameterWithState => (UTILS, "_rebuild_parameter_with_state"),
            Rebuild::Cuda => (REDUCTIONS, "rebuild_cuda_tensor"),
        }
    }
}
