//! Builds the message an [`Input`] describes with the project's own pickle
//! builder, encoder and torch.save writer, and what a reader must rebuild
//! from it when nothing in the input strays from what torch writes.
//!
//! The storages are built first ([`storages`]), then the tensors over them
//! ([`tensors`]), then the container around them, here.

#[path = "build/storages.rs"]
mod storages;
#[path = "build/tensors.rs"]
mod tensors;

use std::io::{Cursor, Read, Write};

use tensorshare::DType;
use tensorshare::model::TensorView;
use tensorshare_compat::pickle::PickleBuilder;
use tensorshare_compat::pickle::{
    ByteChunks, Construction, EncodeOptions, Node, NodeId, Object, Pickle, encode,
};
use tensorshare_compat::torch_save::{self, SavedStorage, TorchSaveFormat};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use crate::mutate::{self, Layer};
use crate::{BogusGlobal, Container, Input, MAX_STORAGES, MAX_TENSORS, RootForm, StorageSpec};

use storages::{BuiltStorage, Record};

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
        *pickle.get_mut(id).unwrap() = Node::Global(replacement.global.global());
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
        self.outer.push(Node::Object(Box::new(Object {
            callable,
            construction: Construction::Reduce { args },
            state: None,
            list_items: Vec::new(),
            dict_items: items,
        })))
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
