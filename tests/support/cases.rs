//! The object graphs an echo must return intact, and the check that it did:
//! every dtype, views with unusual strides and offsets, Parameter and
//! requires_grad, nested containers with plain values, and aliasing.

use std::collections::HashMap;

use tensorshare::model::{Attributes, Storage, TensorView};
use tensorshare::{Connection, DType, Dict, StrategyKind, Tensor, Value};

/// One message to echo.
pub struct Case {
    pub name: String,
    pub value: Value,
}

/// A storage of `nbytes` with a pattern that differs per `seed`: on the
/// heap, or written straight into shared memory.
pub fn patterned_storage(nbytes: usize, seed: u8, shared: bool) -> Storage {
    let byte = |i: usize| (i as u8).wrapping_mul(31).wrapping_add(seed);
    if shared {
        let mut writer =
            Storage::allocate(StrategyKind::FileDescriptor, nbytes).expect("allocate a memfd");
        for (i, b) in writer.as_bytes_mut().iter_mut().enumerate() {
            *b = byte(i);
        }
        writer.freeze()
    } else {
        Storage::from_vec((0..nbytes).map(byte).collect())
    }
}

/// A view of `dtype` with the given geometry (in elements).
pub fn view(dtype: DType, offset: i64, sizes: &[i64], strides: &[i64]) -> TensorView {
    TensorView {
        dtype,
        storage_offset: offset,
        sizes: sizes.to_vec(),
        strides: strides.to_vec(),
        requires_grad: false,
        parameter: false,
    }
}

fn tensor(storage: Storage, view: TensorView) -> Value {
    Value::Tensor(Tensor::new(storage, view).expect("valid test view"))
}

/// A contiguous tensor of `elements` values of `dtype` (bools kept to 0/1).
pub fn contiguous(dtype: DType, sizes: &[usize], seed: u8, shared: bool) -> Tensor {
    let elements: usize = sizes.iter().product();
    let storage = if dtype == DType::Bool {
        Storage::from_vec(
            (0..elements)
                .map(|i| u8::from((i + seed as usize).is_multiple_of(3)))
                .collect(),
        )
    } else {
        patterned_storage(elements * dtype.element_size(), seed, shared)
    };
    Tensor::new(storage, TensorView::contiguous(dtype, sizes)).expect("valid contiguous view")
}

/// Every case, with tensors of each of `dtypes`.
pub fn all(dtypes: &[DType]) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |name: &str, value: Value| {
        cases.push(Case {
            name: name.to_string(),
            value,
        })
    };
    for (i, &dtype) in dtypes.iter().enumerate() {
        let seed = i as u8;
        add(
            &format!("dtype {}", dtype.name()),
            Value::Tensor(contiguous(dtype, &[3, 4], seed, i % 2 == 0)),
        );
    }

    let f32 = DType::Float32;
    let grid = patterned_storage(6 * 7 * 4, 7, true);
    add(
        "transpose",
        tensor(grid.clone(), view(f32, 0, &[7, 6], &[1, 7])),
    );
    add(
        "stepped slice",
        tensor(grid.clone(), view(f32, 1, &[3, 2], &[14, 3])),
    );
    add(
        "offset view",
        tensor(grid.clone(), view(f32, 3, &[39], &[1])),
    );
    add(
        "expand (stride 0)",
        tensor(
            patterned_storage(12, 3, false),
            view(f32, 0, &[4, 3], &[0, 1]),
        ),
    );
    add("0-d", tensor(grid.clone(), view(f32, 5, &[], &[])));
    add(
        "zero elements, empty storage",
        tensor(Storage::from_vec(Vec::new()), view(f32, 0, &[0], &[1])),
    );
    add(
        "zero elements (3, 0)",
        tensor(
            Storage::from_vec(Vec::new()),
            view(f32, 0, &[3, 0], &[1, 1]),
        ),
    );
    add(
        "zero elements on a storage",
        tensor(grid.clone(), view(f32, 4, &[0, 5], &[5, 1])),
    );
    add(
        "storage bigger than the view",
        tensor(grid, view(f32, 0, &[2], &[1])),
    );

    for (name, requires_grad, parameter) in [
        ("parameter", true, true),
        ("parameter without grad", false, true),
        ("leaf requiring grad", true, false),
    ] {
        let mut v = TensorView::contiguous(DType::Float32, &[2, 2]);
        v.requires_grad = requires_grad;
        v.parameter = parameter;
        add(name, tensor(patterned_storage(16, 9, false), v));
    }

    let t = Value::Tensor(contiguous(DType::Int64, &[5], 11, true));
    add(
        "same tensor twice",
        Value::List(vec![t.clone(), t.clone()].into()),
    );
    let rows = patterned_storage(2 * 3 * 8, 13, false);
    add(
        "two views of one storage",
        Value::List(
            vec![
                tensor(rows.clone(), view(DType::Float64, 0, &[3], &[1])),
                tensor(rows, view(DType::Float64, 3, &[3], &[1])),
            ]
            .into(),
        ),
    );

    let s = |text: &str| Value::Str(text.into());
    // 2**70 + 5, little-endian two's complement, as pickle's LONG1 carries it.
    let big = Value::BigInt(vec![5, 0, 0, 0, 0, 0, 0, 0, 0x40].into());
    add(
        "nested containers",
        Value::Dict(
            vec![
                (s("tensor"), t.clone()),
                (
                    s("list"),
                    Value::List(
                        vec![
                            Value::Int(-3),
                            Value::Float(2.5),
                            Value::Tuple(
                                vec![Value::None, Value::Bool(true), Value::Bool(false), t].into(),
                            ),
                        ]
                        .into(),
                    ),
                ),
                (
                    s("ordered"),
                    Value::OrderedDict(
                        vec![
                            (s("zeta"), Value::Bytes(b"\x00\xffbytes".into())),
                            (
                                s("alpha ✓"),
                                Value::List(
                                    vec![Value::Dict(vec![(Value::Int(1), big)].into())].into(),
                                ),
                            ),
                        ]
                        .into(),
                        // As a state dict's `_metadata`: each module's version.
                        Attributes::from_iter([(
                            "_metadata",
                            Dict::new()
                                .with("", Dict::new().with("version", 1))
                                .with("1", Dict::new().with("version", 2))
                                .into_ordered_dict(),
                        )]),
                    ),
                ),
            ]
            .into(),
        ),
    );
    cases
}

/// Checks that `got` is what an echo of `sent` must be: the same structure
/// and values, tensors with the same metadata and elements, and the same
/// aliasing (each sent tensor and storage maps to exactly one received one).
pub fn check_echo(sent: &Value, got: &Value) -> Result<(), String> {
    Checker::default().value(sent, got, "$")
}

#[derive(Default)]
struct Checker {
    tensors: HashMap<usize, usize>,
    tensors_back: HashMap<usize, usize>,
    storages: HashMap<usize, usize>,
    storages_back: HashMap<usize, usize>,
}

impl Checker {
    fn value(&mut self, sent: &Value, got: &Value, path: &str) -> Result<(), String> {
        match (sent, got) {
            (Value::Tensor(a), Value::Tensor(b)) => self.tensor(a, b, path),
            (Value::List(a), Value::List(b)) | (Value::Tuple(a), Value::Tuple(b)) => {
                if a.len() != b.len() {
                    return Err(format!("{path}: {} items sent, {} back", a.len(), b.len()));
                }
                for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
                    self.value(x, y, &format!("{path}[{i}]"))?;
                }
                Ok(())
            }
            (Value::OrderedDict(a, set_a), Value::OrderedDict(b, set_b)) => {
                let names = |set: &Attributes| {
                    set.iter()
                        .map(|(name, _)| name.to_owned())
                        .collect::<Vec<_>>()
                };
                if names(set_a) != names(set_b) {
                    return Err(format!(
                        "{path}: attributes {:?} sent, {:?} back",
                        names(set_a),
                        names(set_b)
                    ));
                }
                for ((name, x), (_, y)) in set_a.iter().zip(set_b.iter()) {
                    self.value(x, y, &format!("{path}.{name}"))?;
                }
                self.pairs(a, b, path)
            }
            (Value::Dict(a), Value::Dict(b)) => self.pairs(a, b, path),
            (Value::Float(a), Value::Float(b)) if a.to_bits() == b.to_bits() => Ok(()),
            (Value::Float(_), Value::Float(_)) => Err(format!("{path}: {sent:?} became {got:?}")),
            _ if format!("{sent:?}") == format!("{got:?}") => Ok(()),
            _ => Err(format!("{path}: {sent:?} became {got:?}")),
        }
    }

    fn pairs(
        &mut self,
        a: &[(Value, Value)],
        b: &[(Value, Value)],
        path: &str,
    ) -> Result<(), String> {
        if a.len() != b.len() {
            return Err(format!(
                "{path}: {} entries sent, {} back",
                a.len(),
                b.len()
            ));
        }
        for (i, ((k1, v1), (k2, v2))) in a.iter().zip(b.iter()).enumerate() {
            self.value(k1, k2, &format!("{path}.key{i}"))?;
            self.value(v1, v2, &format!("{path}.value{i}"))?;
        }
        Ok(())
    }

    fn tensor(&mut self, a: &Tensor, b: &Tensor, path: &str) -> Result<(), String> {
        same_mapping(
            &mut self.tensors,
            &mut self.tensors_back,
            a.identity(),
            b.identity(),
        )
        .map_err(|e| format!("{path}: tensor aliasing differs: {e}"))?;
        same_mapping(
            &mut self.storages,
            &mut self.storages_back,
            a.storage().identity(),
            b.storage().identity(),
        )
        .map_err(|e| format!("{path}: storage aliasing differs: {e}"))?;
        let meta = |t: &Tensor| {
            (
                t.dtype(),
                t.sizes().to_vec(),
                t.strides().to_vec(),
                t.storage_offset(),
                t.requires_grad(),
                t.is_parameter(),
            )
        };
        if meta(a) != meta(b) {
            return Err(format!("{path}: {:?} came back as {:?}", meta(a), meta(b)));
        }
        let (Some(x), Some(y)) = (a.to_contiguous_bytes(), b.to_contiguous_bytes()) else {
            return Err(format!("{path}: tensor data is not in this process"));
        };
        if x != y {
            return Err(format!("{path}: elements differ"));
        }
        Ok(())
    }
}

fn same_mapping(
    forward: &mut HashMap<usize, usize>,
    back: &mut HashMap<usize, usize>,
    a: usize,
    b: usize,
) -> Result<(), String> {
    let there = *forward.entry(a).or_insert(b);
    let here = *back.entry(b).or_insert(a);
    if there == b && here == a {
        Ok(())
    } else {
        Err("one object on one side is two on the other".into())
    }
}

/// The dtypes torch sends in every form, shared or pickled plainly, and
/// this crate lays out: all but the bit-packed kinds and bcomplex32; the
/// sub-byte integers `uint1` to `int7`, which torch's plain pickle and
/// `torch.save` cannot write (`dtype torch.uint1 is not recognized`); and
/// the quantized dtypes, whose received tensors torch rebuilds with no
/// quantizer and then cannot pickle again (`cannot call qscheme on
/// UnknownQuantizer`). The echo tests send those through torch's
/// shared-memory form, every dtype torch names.
///
/// Of those, only the ones the torch under test names
/// (`TENSORSHARE_TEST_PYTHON`'s): an older torch (`scripts/interop-matrix`)
/// cannot unpickle a dtype it lacks, which says nothing of the rest.
pub fn sharable_dtypes() -> Vec<DType> {
    let torch_has = torch_dtype_names();
    DType::ALL
        .into_iter()
        .filter(|d| !d.name().starts_with("bits") && *d != DType::BComplex32)
        .filter(|d| !is_sub_byte_integer(*d) && !d.name().starts_with("qint"))
        .filter(|d| !d.name().starts_with("quint"))
        .filter(|d| {
            torch_has
                .as_ref()
                .is_none_or(|names| names.contains(d.name()))
        })
        .collect()
}

/// The dtypes the torch of `TENSORSHARE_TEST_PYTHON` names, asked once per
/// interpreter and kept under the build's temporary directory; `None`
/// without a Python (the tests that need one skip or fail on their own).
fn torch_dtype_names() -> Option<std::collections::BTreeSet<String>> {
    use std::hash::{Hash, Hasher};
    static NAMES: std::sync::OnceLock<Option<std::collections::BTreeSet<String>>> =
        std::sync::OnceLock::new();
    NAMES
        .get_or_init(|| {
            let python = std::env::var("TENSORSHARE_TEST_PYTHON").ok().filter(|p| !p.is_empty())?;
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            python.hash(&mut hasher);
            let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("torch-dtypes-{:016x}", hasher.finish()));
            let listed = std::fs::read_to_string(&cache).ok().unwrap_or_else(|| {
                let script = "import torch\nprint(' '.join(sorted({str(v).removeprefix('torch.') for v in vars(torch).values() if isinstance(v, torch.dtype)})))";
                let listed = super::python_output_for(&python, script, &[], b"", "list torch's dtypes");
                // Written whole, then renamed: parallel tests read it whole.
                let partial = cache.with_extension(format!("{}", std::process::id()));
                if std::fs::write(&partial, &listed).is_ok() {
                    let _ = std::fs::rename(&partial, &cache);
                }
                listed
            });
            Some(listed.split_whitespace().map(str::to_owned).collect())
        })
        .clone()
}

/// `torch.uint1` to `torch.uint7` and `torch.int1` to `torch.int7`.
pub fn is_sub_byte_integer(dtype: DType) -> bool {
    let name = dtype.name();
    let bits = name
        .strip_prefix("uint")
        .or_else(|| name.strip_prefix("int"));
    bits.is_some_and(|bits| matches!(bits, "1" | "2" | "3" | "4" | "5" | "6" | "7"))
}

/// Sends every case over `connection` and checks each echo; the cases that
/// did not come back intact, each with why.
pub fn echo_failures(connection: &mut Connection) -> Vec<String> {
    let mut failures = Vec::new();
    for case in all(&sharable_dtypes()) {
        connection.send(&case.value).expect("send");
        let echoed = connection.recv().expect("receive the echo");
        if let Err(why) = check_echo(&case.value, &echoed) {
            failures.push(format!("{}: {why}", case.name));
        }
    }
    failures
}

/// A uint8 tensor of `nbytes` elements over `rebuild_storage_filename`
/// naming `name` at the manager `manager`, as torch's `file_system` reducer
/// writes it; for forging references to segments.
pub fn filename_tensor_pickle(manager: &[u8], name: &[u8], nbytes: usize) -> Vec<u8> {
    use tensorshare_compat::pickle::Node;
    use tensorshare_compat::pickle::PickleBuilder;
    let mut out = PickleBuilder::default();
    let class = out.global("torch.storage", "UntypedStorage");
    let manager = out.push(Node::Bytes(manager.into()));
    let name = out.push(Node::Bytes(name.into()));
    let size = out.int(nbytes);
    let rebuild_storage = out.global(REDUCTIONS, "rebuild_storage_filename");
    let untyped = out.call(rebuild_storage, vec![class, manager, name, size]);
    tensor_over(out, untyped, nbytes)
}

const REDUCTIONS: &str = "torch.multiprocessing.reductions";

/// A uint8 tensor of `nbytes` elements over the untyped storage `storage`
/// built in `out`, as torch's `reduce_tensor` writes it.
pub fn tensor_over(
    mut out: tensorshare_compat::pickle::PickleBuilder,
    storage: tensorshare_compat::pickle::NodeId,
    nbytes: usize,
) -> Vec<u8> {
    use tensorshare_compat::pickle::{EncodeOptions, Node, encode};
    let dtype = out.global("torch", "uint8");
    let rebuild_typed = out.global(REDUCTIONS, "rebuild_typed_storage");
    let typed = out.call(rebuild_typed, vec![storage, dtype]);
    let torch_size = out.global("torch", "Size");
    let length = out.int(nbytes);
    let dims = out.tuple(vec![length]);
    let sizes = out.call(torch_size, vec![dims]);
    let one = out.int(1);
    let strides = out.tuple(vec![one]);
    let offset = out.int(0);
    let requires_grad = out.push(Node::Bool(false));
    let metadata = out.tuple(vec![offset, sizes, strides, requires_grad]);
    let tensor_class = out.global("torch", "Tensor");
    let rebuild_tensor = out.global(REDUCTIONS, "rebuild_tensor");
    let tensor = out.call(rebuild_tensor, vec![tensor_class, typed, metadata]);
    encode(&out.finish(tensor), &EncodeOptions::new()).expect("encode")
}

/// Sends `sent` `times` times and returns the echoes and their storages.
pub fn echo_times(
    connection: &mut Connection,
    sent: &Tensor,
    times: usize,
) -> (Vec<Value>, Vec<Storage>) {
    let mut echoed = Vec::new();
    for _ in 0..times {
        connection.send(&Value::Tensor(sent.clone())).expect("send");
        echoed.push(connection.recv().expect("receive the echo"));
    }
    let storages = echoed
        .iter()
        .map(|value| value.as_tensor().expect("a tensor").storage().clone())
        .collect();
    (echoed, storages)
}

/// Echoes `n` messages that alternate `same`, sent again and again, with
/// fresh 4 KiB storages (in shared memory if `shared`), checking each echo.
pub fn echo_alternating(connection: &mut Connection, same: &Value, n: usize, shared: bool) {
    for i in 0..n {
        let value = if i % 2 == 0 {
            same.clone()
        } else {
            Value::Tensor(contiguous(DType::UInt8, &[4096], i as u8, shared))
        };
        connection.send(&value).expect("send");
        let echoed = connection.recv().expect("receive the echo");
        check_echo(&value, &echoed).unwrap();
    }
}
