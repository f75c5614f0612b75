//! Valid-looking torch messages, built from a structured input and then
//! bent: tensors with views (sizes, strides and offsets that fit their
//! storage, or any numbers at all) over storages of every form torch writes
//! (`rebuild_storage_fd` with a `DupFd`, `rebuild_storage_filename`,
//! `rebuild_storage_empty`, `UntypedStorage.from_file`,
//! `_load_from_bytes` with an embedded legacy torch.save stream,
//! tensorshare's `bytes` form (a `bytearray` `torch.frombuffer` wraps), and
//! torch.save files, zip and legacy, with their persistent ids), in
//! `ForkingPickler` and plain-pickle form, encoded with the project's own
//! encoder and writers. Then tweaks (other classes, sizes, keys,
//! locations, rebuild functions, arguments), bogus globals in place of
//! real ones, and byte-level mutations (truncation, flips, insertions,
//! swapped, dropped, duplicated or replaced opcodes, rewritten ints,
//! frames removed), outside or inside the embedded stream.
//!
//! Everything goes through `Registry::loads`, `inspect` and the
//! torch.save reader, describing storages only: nothing is attached, no
//! resource sharer is contacted. Nothing may panic. Every tensor rebuilt
//! must lie inside its storage. When the input strays nowhere from what
//! torch writes, the message must load, and rebuild exactly the tensors
//! built into it, with their bytes.
#![no_main]

#[path = "torch_pickle_structured/build.rs"]
mod build;
#[path = "torch_pickle_structured/mutate.rs"]
mod mutate;

use std::sync::LazyLock;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use tensorshare::{Registry, Tensor, Value};
use tensorshare_cli::inspect_report;
use tensorshare_compat::pickle::Global;
use tensorshare_fuzz::{check_torch_save_readers_agree, copy_small};

use build::ExpectedTensor;
use mutate::Mutation;

/// Built once: building it for every input would be most of each run.
static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::default);

/// Caps that keep one input small and fast.
const MAX_STORAGES: usize = 4;
const MAX_TENSORS: usize = 6;

/// An int that is mostly small, sometimes negative, sometimes at an edge.
#[derive(Debug, Clone, Copy)]
pub struct Num(pub i64);

impl<'a> Arbitrary<'a> for Num {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        const EDGES: [i64; 11] = [
            i64::MAX,
            i64::MIN,
            i32::MAX as i64,
            1 << 31,
            u32::MAX as i64,
            1 << 32,
            1 << 40,
            1 << 61,
            1 << 62,
            i64::MAX / 2 + 1,
            i64::MAX / 16,
        ];
        Ok(Num(match u.int_in_range(0u8..=7)? {
            0..=3 => i64::from(u.int_in_range(0u8..=16)?),
            4 => -i64::from(u.int_in_range(1u8..=8)?),
            5 => *u.choose(&EDGES)?,
            _ => u.arbitrary()?,
        }))
    }
}

/// Globals a bogus replacement or a tweak picks from: dangerous ones, and
/// real torch ones in the wrong place.
const KNOWN_GLOBALS: &[(&str, &str)] = &[
    ("posix", "system"),
    ("builtins", "eval"),
    ("builtins", "getattr"),
    ("__builtin__", "getattr"),
    ("builtins", "set"),
    ("builtins", "bytearray"),
    ("_codecs", "encode"),
    ("collections", "OrderedDict"),
    ("torch", "Tensor"),
    ("torch._tensor", "Tensor"),
    ("torch.nn.parameter", "Parameter"),
    ("torch", "Size"),
    ("torch", "float32"),
    ("torch", "bfloat16"),
    ("torch", "uint16"),
    ("torch", "FloatStorage"),
    ("torch", "ByteStorage"),
    ("torch", "TypedStorage"),
    ("torch.storage", "UntypedStorage"),
    ("torch.storage", "TypedStorage"),
    ("torch.storage", "_load_from_bytes"),
    ("functools", "partial"),
    ("torch", "frombuffer"),
    ("torch", "Tensor.untyped_storage"),
    ("torch._C", "StorageBase"),
    ("torch._utils", "_rebuild_tensor"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_tensor_v3"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch._utils", "_rebuild_parameter_with_state"),
    ("torch.multiprocessing.reductions", "rebuild_tensor"),
    ("torch.multiprocessing.reductions", "rebuild_typed_storage"),
    (
        "torch.multiprocessing.reductions",
        "rebuild_typed_storage_child",
    ),
    ("torch.multiprocessing.reductions", "rebuild_storage_fd"),
    (
        "torch.multiprocessing.reductions",
        "rebuild_storage_filename",
    ),
    ("torch.multiprocessing.reductions", "rebuild_storage_empty"),
    ("torch.multiprocessing.reductions", "rebuild_cuda_tensor"),
    ("multiprocessing.resource_sharer", "DupFd"),
];

#[derive(Arbitrary, Debug)]
pub enum GlobalChoice {
    Known(u8),
    Custom(String, String),
}

impl GlobalChoice {
    fn global(&self) -> Global {
        match self {
            GlobalChoice::Known(index) => {
                let (module, name) = KNOWN_GLOBALS[usize::from(*index) % KNOWN_GLOBALS.len()];
                Global::new(module, name)
            }
            GlobalChoice::Custom(module, name) => Global::copied(module, name),
        }
    }
}

/// How the message is packaged.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Container {
    /// `ForkingPickler`: `rebuild_tensor` over the strategies' storages.
    Forking,
    /// `pickle.dumps`: `_rebuild_tensor_v2`/`_v3` over `_load_from_bytes`.
    Plain,
    /// A torch.save zip.
    TorchSaveZip,
    /// A legacy torch.save stream.
    TorchSaveLegacy,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum RootForm {
    Single,
    Tuple,
    List,
    Dict,
    StateDict,
}

/// Where a `DupFd` says its resource sharer listens.
#[derive(Arbitrary, Debug)]
pub enum Address {
    Path(String),
    Abstract(Vec<u8>),
    NotAnAddress(Num),
}

/// How a `ForkingPickler` message shares a storage; `None` fields take
/// valid values unique to the storage.
#[derive(Arbitrary, Debug, Default)]
pub enum Sharing {
    Fd {
        address: Option<Address>,
        key: Num,
    },
    Filename {
        manager: Option<Vec<u8>>,
        name: Option<Vec<u8>>,
        with_dtype: bool,
    },
    #[default]
    Empty,
    FromBytes,
    FromBuffer,
    FromFile {
        path: Option<String>,
    },
}

#[derive(Arbitrary, Debug)]
pub enum ClassChoice {
    Untyped,
    Legacy(u8),
    Global(GlobalChoice),
    NotAGlobal(Num),
}

/// The typed-storage wrapper a `ForkingPickler` tensor puts around its
/// storage.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum WrapChoice {
    None,
    Typed(u8),
    Child(u8),
}

/// Ways a storage strays from what torch writes.
#[derive(Arbitrary, Debug)]
pub enum StorageTweak {
    /// The `cls` argument, or the persistent id's class.
    Class(ClassChoice),
    /// The size the message claims (bytes or elements).
    ClaimedSize(Num),
    /// The typed wrapper (ForkingPickler only).
    Wrap(WrapChoice),
    /// The persistent id's key, naming a record that may not exist.
    Key(String),
    Location(String),
    Tag(String),
    PidField {
        at: u8,
        value: Num,
    },
    DropPidField {
        at: u8,
    },
    ExtraPidField(Num),
    /// A torch.save file without this storage's record.
    NoRecord,
}

#[derive(Arbitrary, Debug, Default)]
pub struct StorageSpec {
    pub sharing: Sharing,
    /// Elements of `dtype`.
    pub elements: u8,
    pub dtype: u8,
    pub seed: u8,
    pub tweaks: Vec<StorageTweak>,
}

#[derive(Arbitrary, Debug)]
pub enum ViewSpec {
    /// A view inside its storage: sizes up to 5 in up to 4 dimensions,
    /// contiguous, maybe transposed or expanded.
    Fitting {
        offset: u8,
        sizes: Vec<u8>,
        transpose: bool,
        expand: bool,
    },
    /// Any numbers.
    Free {
        offset: Num,
        sizes: Vec<Num>,
        strides: Vec<Num>,
    },
}

/// Rebuild functions a tweak may call instead of the right one.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Rebuild {
    RebuildTensor,
    V1,
    V2,
    V3,
    Parameter,
    ParameterWithState,
    Cuda,
}

/// Ways a tensor's rebuild call strays from what torch writes.
#[derive(Arbitrary, Debug)]
pub enum TensorTweak {
    Rebuild(Rebuild),
    DropArg(u8),
    ExtraArg(Num),
    ReplaceArg {
        at: u8,
        value: Num,
    },
    ArgAsList(u8),
    /// Wrapped in `_rebuild_parameter` this many times (modulo 4).
    Wrap(u8),
}

#[derive(Arbitrary, Debug)]
pub struct TensorSpec {
    /// Index into the storages (modulo their count).
    pub storage: u8,
    /// The dtype, where the form lets the tensor choose it.
    pub dtype: u8,
    pub view: ViewSpec,
    pub requires_grad: bool,
    pub parameter: bool,
    pub tweaks: Vec<TensorTweak>,
}

#[derive(Arbitrary, Debug)]
pub struct BogusGlobal {
    pub layer: mutate::Layer,
    /// Which global of the pickle (modulo their count).
    pub nth: u8,
    pub global: GlobalChoice,
}

#[derive(Arbitrary, Debug)]
pub struct Input {
    pub container: Container,
    /// 2 + this modulo 4, for pickles (torch.save writes protocol 2).
    pub protocol: u8,
    pub root: RootForm,
    pub storages: Vec<StorageSpec>,
    pub tensors: Vec<TensorSpec>,
    pub bogus_globals: Vec<BogusGlobal>,
    pub mutations: Vec<Mutation>,
}

fuzz_target!(|input: Input| {
    let Some(built) = build::build(&input) else {
        return;
    };
    let bytes = &built.bytes;

    let loaded = REGISTRY.loads(bytes);
    if let Ok(value) = &loaded {
        check_tensors(value);
    }
    let inspected = tensorshare::inspect::inspect(bytes, &REGISTRY);
    if let Ok(report) = &inspected {
        check_tensors(&report.object);
        let _ = inspect_report::to_json(report);
        let _ = inspect_report::to_text(report);
    }

    check_torch_save_readers_agree(bytes);

    if let Some(expected) = &built.expected {
        let report = inspected.unwrap_or_else(|e| panic!("a torch message was refused: {e}"));
        check_expected(&report.object, expected);
        if matches!(input.container, Container::Forking | Container::Plain) {
            let value = loaded.unwrap_or_else(|e| panic!("a torch pickle was refused: {e}"));
            check_expected(&value, expected);
        }
    }
});

/// What holds for every tensor a reader hands out, whatever the input.
fn check_tensors(value: &Value) {
    for tensor in value.tensors() {
        let sizes = tensor.sizes();
        let strides = tensor.strides();
        assert_eq!(sizes.len(), strides.len());
        let numel = if sizes.contains(&0) {
            0
        } else {
            sizes
                .iter()
                .try_fold(1usize, |n, &s| n.checked_mul(s))
                .expect("the element count fits in usize")
        };
        assert_eq!(numel, tensor.numel());
        let element_size = tensor.dtype().element_size();
        let nbytes = tensor.storage().nbytes();
        if numel > 0 {
            let last: u128 = sizes
                .iter()
                .zip(strides)
                .map(|(&size, &stride)| (size as u128 - 1) * stride as u128)
                .sum();
            let needed = (tensor.storage_offset() as u128 + last + 1) * element_size as u128;
            assert!(
                needed <= nbytes as u128,
                "a view reaching byte {needed} of a {nbytes}-byte storage: {:?}",
                tensor.view()
            );
        }
        if let Some(bytes) = tensor.storage().bytes() {
            assert_eq!(bytes.len(), nbytes);
        }
        // Copied only when small; more bytes than memory can hold must be
        // refused, not attempted.
        if let Some(contents) = copy_small(tensor) {
            assert_eq!(contents.len(), numel * element_size);
        }
    }
}

/// The tensors rebuilt are the ones built, in order, with their bytes.
fn check_expected(value: &Value, expected: &[ExpectedTensor]) {
    let tensors = value.tensors();
    assert_eq!(tensors.len(), expected.len(), "tensors rebuilt");
    for (tensor, expected) in tensors.into_iter().zip(expected) {
        // dtype, offset, sizes, strides, requires_grad and parameter.
        assert_eq!(tensor.view(), expected.view);
        assert_eq!(tensor.storage().nbytes(), expected.storage_nbytes);
        if let Some(data) = &expected.data {
            assert_eq!(tensor.storage().bytes(), Some(data.as_slice()));
            assert_eq!(tensor.to_contiguous_bytes(), Some(gather(data, tensor)));
        }
    }
}

/// The tensor's elements in logical order, gathered from `data` here.
fn gather(data: &[u8], tensor: &Tensor) -> Vec<u8> {
    let element_size = tensor.dtype().element_size();
    let sizes = tensor.sizes();
    let mut out = Vec::new();
    if sizes.contains(&0) {
        return out;
    }
    let mut index = vec![0usize; sizes.len()];
    loop {
        let element = tensor.storage_offset()
            + index
                .iter()
                .zip(tensor.strides())
                .map(|(i, s)| i * s)
                .sum::<usize>();
        out.extend_from_slice(&data[element * element_size..(element + 1) * element_size]);
        let mut dim = sizes.len();
        loop {
            if dim == 0 {
                return out;
            }
            dim -= 1;
            index[dim] += 1;
            if index[dim] < sizes[dim] {
                break;
            }
            index[dim] = 0;
        }
    }
}
