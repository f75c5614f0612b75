//! Writing `torch.save` files: stock torch loads them with
//! `weights_only=True` and sees the same tensors, views, aliasing,
//! Parameters and plain values, and our own reader reads them back
//! identically, in both the zip and the legacy format.

mod support;

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{Value as Json, json};

use tensorshare::model::{Attributes, Storage, TensorView};
use tensorshare::torch_save;
use tensorshare::{DType, Dict, Registry, Tensor, Value};
use tensorshare_compat::torch_save::TorchSaveFormat;

use support::{cases, hex, test_python, torch_describes};

const FORMATS: [TorchSaveFormat; 2] = [TorchSaveFormat::Zip, TorchSaveFormat::Legacy];

/// What `compat/python/describe_saved.py` prints for the same object.
#[derive(Default)]
struct Describer {
    storages: HashMap<usize, usize>,
    next: usize,
    /// Describe untyped storages as `uint8` typed storages, which is what
    /// torch loads them as (and our reader, from a legacy stream).
    untyped_as_uint8: bool,
}

impl Describer {
    fn storage_index(&mut self, storage: &Storage) -> usize {
        let index = if storage.nbytes() == 0 {
            self.next
        } else {
            *self.storages.entry(storage.identity()).or_insert(self.next)
        };
        if index == self.next {
            self.next += 1;
        }
        index
    }

    fn describe(&mut self, value: &Value) -> Json {
        let pairs = |pairs: &[(Value, Value)], this: &mut Self| -> Json {
            pairs
                .iter()
                .map(|(k, v)| json!([this.describe(k), this.describe(v)]))
                .collect()
        };
        match value {
            Value::None => Json::Null,
            Value::Bool(b) => json!(b),
            Value::Int(i) => json!(i),
            Value::Float(f) => json!({ "float": hex(&f.to_le_bytes()) }),
            Value::Str(s) => json!(&**s),
            Value::Bytes(b) => json!({ "bytes": hex(b) }),
            Value::List(items) => {
                json!({ "list": items.iter().map(|v| self.describe(v)).collect::<Vec<_>>() })
            }
            Value::Tuple(items) => {
                json!({ "tuple": items.iter().map(|v| self.describe(v)).collect::<Vec<_>>() })
            }
            Value::Dict(items) => json!({ "dict": pairs(items, self) }),
            Value::OrderedDict(items, attributes) if attributes.iter().len() == 0 => {
                json!({ "ordered_dict": pairs(items, self) })
            }
            Value::OrderedDict(items, attributes) => {
                let set: serde_json::Map<String, Json> = attributes
                    .iter()
                    .map(|(name, value)| (name.to_owned(), self.describe(value)))
                    .collect();
                json!({ "ordered_dict": pairs(items, self), "attributes": set })
            }
            Value::Tensor(t) => json!({ "tensor": {
                "dtype": t.dtype().name(),
                "shape": t.sizes(),
                "stride": t.strides(),
                "offset": t.storage_offset(),
                "requires_grad": t.requires_grad(),
                "parameter": t.is_parameter(),
                "storage": self.storage_index(t.storage()),
                "storage_nbytes": t.storage().nbytes(),
                "hex": hex(&t.to_contiguous_bytes().expect("local tensor")),
            }}),
            Value::TypedStorage(s, dtype) => json!({ "typed_storage": {
                "dtype": dtype.name(),
                "storage": self.storage_index(s),
                "hex": hex(s.bytes().expect("local storage")),
            }}),
            Value::Storage(s) if self.untyped_as_uint8 => {
                self.describe(&Value::TypedStorage(s.clone(), DType::UInt8))
            }
            Value::Storage(s) => json!({ "storage": {
                "storage": self.storage_index(s),
                "hex": hex(s.bytes().expect("local storage")),
            }}),
            other => panic!("no description for {}", other.type_name()),
        }
    }
}

fn describe(value: &Value) -> Json {
    Describer::default().describe(value)
}

/// What torch, or our reader from `format`, loads `value` back as.
fn describe_loaded(value: &Value, format: Option<TorchSaveFormat>) -> Json {
    Describer {
        untyped_as_uint8: format != Some(TorchSaveFormat::Zip),
        ..Describer::default()
    }
    .describe(value)
}

fn tensor(storage: &Storage, dtype: DType, offset: i64, sizes: &[i64], strides: &[i64]) -> Tensor {
    Tensor::new(storage.clone(), cases::view(dtype, offset, sizes, strides)).unwrap()
}

fn with_flags(t: &Tensor, requires_grad: bool, parameter: bool) -> Tensor {
    Tensor::new(
        t.storage().clone(),
        TensorView {
            requires_grad,
            parameter,
            ..t.view()
        },
    )
    .unwrap()
}

fn floats(values: &[f32]) -> Storage {
    Storage::from_vec(values.iter().flat_map(|f| f.to_le_bytes()).collect())
}

fn key(name: &str) -> Value {
    Value::Str(name.into())
}

/// A graph with every kind of value the registry rebuilds from torch.save.
fn sample_graph() -> Value {
    let shared = floats(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let a = tensor(&shared, DType::Float32, 0, &[2, 3], &[3, 1]);
    let column = tensor(&shared, DType::Float32, 1, &[2], &[3]);
    let transposed = tensor(&shared, DType::Float32, 0, &[3, 2], &[1, 3]);
    let weight = with_flags(
        &tensor(
            &floats(&[0.5, -1.5, 2.25, 7.0]),
            DType::Float32,
            0,
            &[2, 2],
            &[2, 1],
        ),
        true,
        true,
    );
    let frozen = with_flags(
        &tensor(&floats(&[9.0, 8.0]), DType::Float32, 0, &[2], &[1]),
        false,
        true,
    );
    let grad = with_flags(
        &tensor(&floats(&[3.5]), DType::Float32, 0, &[1], &[1]),
        true,
        false,
    );
    let u16s = Storage::from_vec(vec![1, 0, 2, 0, 0xff, 0xff]);
    let halves = Storage::from_vec(vec![0x00, 0x3c, 0x00, 0xc0]);
    let longs = Storage::from_vec((0i64..4).flat_map(|i| (i * 10).to_le_bytes()).collect());
    let bools = Storage::from_vec(vec![1, 0, 1]);
    let doubles = Storage::from_vec((0..3).flat_map(|i| f64::from(i).to_le_bytes()).collect());
    let raw = Storage::from_vec(vec![7, 8, 9]);
    let a = Value::Tensor(a);
    Value::Dict(
        vec![
            (key("a"), a.clone()),
            (key("column"), Value::Tensor(column)),
            (key("transposed"), Value::Tensor(transposed)),
            (key("same"), a),
            (key("weight"), Value::Tensor(weight)),
            (key("frozen"), Value::Tensor(frozen)),
            (key("grad"), Value::Tensor(grad)),
            (
                key("uint16"),
                Value::Tensor(tensor(&u16s, DType::UInt16, 0, &[3], &[1])),
            ),
            (
                key("half"),
                Value::Tensor(tensor(&halves, DType::Float16, 0, &[2], &[1])),
            ),
            (
                key("scalar"),
                Value::Tensor(tensor(&longs, DType::Int64, 2, &[], &[])),
            ),
            (
                key("bool"),
                Value::Tensor(tensor(&bools, DType::Bool, 0, &[3], &[1])),
            ),
            (
                key("empty"),
                Value::Tensor(tensor(
                    &Storage::from_vec(Vec::new()),
                    DType::Float32,
                    0,
                    &[0],
                    &[1],
                )),
            ),
            (key("typed"), Value::TypedStorage(doubles, DType::Float64)),
            (key("untyped"), Value::Storage(raw)),
            (
                key("nested"),
                Value::List(
                    vec![
                        Value::Tuple(
                            vec![
                                Value::Int(1 << 40),
                                Value::Str("text".into()),
                                Value::Float(-0.25),
                                Value::None,
                                Value::Bool(true),
                            ]
                            .into(),
                        ),
                        Value::OrderedDict(
                            vec![(
                                key("long_view"),
                                Value::Tensor(tensor(&longs, DType::Int64, 1, &[2], &[2])),
                            )]
                            .into(),
                            // As a state dict's: each module's version.
                            Attributes::from_iter([(
                                "_metadata",
                                Dict::new()
                                    .with("", Dict::new().with("version", 1))
                                    .into_ordered_dict(),
                            )]),
                        ),
                    ]
                    .into(),
                ),
            ),
        ]
        .into(),
    )
}

fn write_temp(bytes: &[u8], dir: &tempfile::TempDir, name: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn our_reader_reads_back_what_we_write() {
    let graph = sample_graph();
    let registry = Registry::default();
    for format in FORMATS {
        let file = torch_save::to_bytes(&graph, format).unwrap();
        let (read_format, loaded) = torch_save::from_bytes_with(&file, &registry).unwrap();
        assert_eq!(read_format, format);
        assert_eq!(
            describe(&loaded),
            describe_loaded(&graph, Some(format)),
            "{format:?}"
        );
    }
}

#[test]
fn one_storage_is_written_once() {
    let shared = floats(&[1.0; 1024]);
    let views: Vec<Value> = (0..8)
        .map(|i| Value::Tensor(tensor(&shared, DType::Float32, i, &[16], &[1])))
        .collect();
    for format in FORMATS {
        let file = torch_save::to_bytes(&Value::List(views.clone().into()), format).unwrap();
        assert!(file.len() < 4096 + 2048, "{format:?}: {} bytes", file.len());
    }
}

#[test]
fn stock_torch_loads_what_we_write_with_weights_only() {
    let Some(python) = test_python("stock_torch_loads_what_we_write_with_weights_only") else {
        return;
    };
    let graph = sample_graph();
    let dir = tempfile::tempdir().unwrap();
    let paths = [
        write_temp(
            &torch_save::to_bytes(&graph, TorchSaveFormat::Zip).unwrap(),
            &dir,
            "zip.pt",
        ),
        write_temp(
            &torch_save::to_bytes(&graph, TorchSaveFormat::Legacy).unwrap(),
            &dir,
            "legacy.pt",
        ),
    ];
    let expected = describe_loaded(&graph, None);
    for (path, seen) in paths.iter().zip(torch_describes(&python, &paths)) {
        assert_eq!(seen, expected, "{}", path.display());
    }
}

#[test]
fn a_storage_viewed_as_two_dtypes_is_refused() {
    let shared = floats(&[1.0, 2.0]);
    let value = Value::List(
        vec![
            Value::Tensor(tensor(&shared, DType::Float32, 0, &[2], &[1])),
            Value::Tensor(tensor(&shared, DType::Int32, 0, &[2], &[1])),
        ]
        .into(),
    );
    for format in FORMATS {
        let error = torch_save::to_bytes(&value, format)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("viewed both as float32 and as int32"),
            "{error}"
        );
    }
}

const DTYPES: [DType; 7] = [
    DType::Float32,
    DType::Float64,
    DType::Int64,
    DType::UInt8,
    DType::BFloat16,
    DType::UInt16,
    DType::Complex64,
];

/// A view: (offset, sizes, strides), in elements.
type ViewSpec = (i64, Vec<i64>, Vec<i64>);

/// A storage and views into it: (dtype, bytes, views).
fn arb_views() -> impl Strategy<Value = (DType, Vec<u8>, Vec<ViewSpec>)> {
    (0..DTYPES.len(), 1usize..48).prop_flat_map(|(dtype, numel)| {
        let dtype = DTYPES[dtype];
        let bytes = proptest::collection::vec(any::<u8>(), numel * dtype.element_size());
        let view = (0..numel as i64).prop_flat_map(move |offset| {
            let room = numel as i64 - offset;
            proptest::collection::vec((1i64..4, 0i64..3), 0..3).prop_map(move |dims| {
                // Shrink each size until the view fits after `offset`.
                let mut sizes: Vec<i64> = dims.iter().map(|d| d.0).collect();
                let strides: Vec<i64> = dims.iter().map(|d| d.1).collect();
                while 1 + sizes
                    .iter()
                    .zip(&strides)
                    .map(|(s, t)| (s - 1) * t)
                    .sum::<i64>()
                    > room
                {
                    let largest = sizes.iter_mut().max().expect("a dimension is too large");
                    *largest -= 1;
                }
                (offset, sizes, strides)
            })
        });
        (Just(dtype), bytes, proptest::collection::vec(view, 1..4))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn views_round_trip_through_our_reader(
        storages in proptest::collection::vec(arb_views(), 1..4),
        legacy in any::<bool>(),
    ) {
        let mut items = Vec::new();
        for (dtype, bytes, views) in storages {
            let storage = Storage::from_vec(bytes);
            for (offset, sizes, strides) in views {
                items.push(Value::Tensor(tensor(&storage, dtype, offset, &sizes, &strides)));
            }
        }
        let graph = Value::List(items.into());
        let format = if legacy { TorchSaveFormat::Legacy } else { TorchSaveFormat::Zip };
        let file = torch_save::to_bytes(&graph, format).unwrap();
        let (_, loaded) = torch_save::from_bytes_with(&file, &Registry::default()).unwrap();
        prop_assert_eq!(describe(&loaded), describe(&graph));
    }
}
