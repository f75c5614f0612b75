//! Values a Rust program builds and reads: every `From` through a pickle
//! and back, typed reads of what arrives, tensors written from typed data
//! and (under the `ndarray` feature) from arrays, and stock torch reading
//! them. The torch tests need the pinned torch in `TENSORSHARE_TEST_PYTHON`;
//! `scripts/test` makes it a hard requirement.

mod support;

use std::collections::{BTreeMap, HashMap};

use tensorshare::half::{bf16, f16};
use tensorshare::model::{SharedBytes, TensorView, ValueAccessError};
use tensorshare::num_complex::Complex;
use tensorshare::{Authkey, DType, Dict, Error, SharingContext, StrategyKind, Tensor, Value};

use support::test_python;

/// The strategies a context in this process can use without the
/// `tensorshare` command (which `file_system` starts as its manager) or a
/// directory of its own (`memmap`).
const STRATEGIES: [StrategyKind; 2] = [StrategyKind::FileDescriptor, StrategyKind::Bytes];

fn context(strategy: StrategyKind) -> SharingContext {
    SharingContext::new(Authkey::new(*b"values test key")).with_strategy(strategy)
}

/// `value` pickled by `sharing` and rebuilt by a second context of the same
/// process, as a receiver rebuilds it.
fn round_trip(sharing: &SharingContext, value: impl Into<Value>) -> Value {
    let pickle = sharing.dumps(&value.into()).expect("pickle the value");
    let receiver = SharingContext::new(Authkey::new(*b"values test key"));
    receiver.loads(&pickle).expect("rebuild the value")
}

/// `value` through a pickle, read back as a `T`.
fn again<T>(sharing: &SharingContext, value: impl Into<Value>) -> T
where
    T: TryFrom<Value, Error = ValueAccessError>,
{
    T::try_from(round_trip(sharing, value)).expect("the type sent")
}

#[test]
fn every_scalar_comes_back_as_it_was_sent() {
    let sharing = context(StrategyKind::Bytes);
    assert!(again::<bool>(&sharing, true));
    assert_eq!(again::<i8>(&sharing, i8::MIN), i8::MIN);
    assert_eq!(again::<i16>(&sharing, i16::MIN), i16::MIN);
    assert_eq!(again::<i32>(&sharing, i32::MIN), i32::MIN);
    assert_eq!(again::<i64>(&sharing, i64::MIN), i64::MIN);
    assert_eq!(again::<isize>(&sharing, -7isize), -7);
    assert_eq!(again::<u8>(&sharing, u8::MAX), u8::MAX);
    assert_eq!(again::<u16>(&sharing, u16::MAX), u16::MAX);
    assert_eq!(again::<u32>(&sharing, u32::MAX), u32::MAX);
    // Past i64: a Python int of 9 bytes, LONG1 on the wire.
    assert_eq!(again::<u64>(&sharing, u64::MAX), u64::MAX);
    assert_eq!(again::<u64>(&sharing, 1u64 << 63), 1 << 63);
    assert_eq!(again::<usize>(&sharing, usize::MAX), usize::MAX);
    assert_eq!(again::<f64>(&sharing, -0.1), -0.1);
    assert_eq!(again::<f32>(&sharing, 0.1f32), 0.1f32);
    assert_eq!(again::<String>(&sharing, "snow ❄"), "snow ❄");
    assert_eq!(again::<String>(&sharing, String::from("owned")), "owned");
    assert_eq!(
        again::<String>(&sharing, &String::from("borrowed")),
        "borrowed"
    );
    assert_eq!(again::<DType>(&sharing, DType::BFloat16), DType::BFloat16);
    assert!(round_trip(&sharing, ()).is_none());
    assert!(round_trip(&sharing, None::<i64>).is_none());
    assert_eq!(again::<i64>(&sharing, Some(5)), 5);
    let bytes = round_trip(&sharing, SharedBytes::from(&b"\x00\xffraw"[..]));
    assert_eq!(bytes.as_bytes(), Some(&b"\x00\xffraw"[..]));
}

#[test]
fn containers_come_back_in_order_with_their_python_types() {
    let sharing = context(StrategyKind::Bytes);
    let list = round_trip(&sharing, vec![1, 2, 3]);
    assert_eq!(list.type_name(), "list");
    assert_eq!(Vec::<i64>::try_from(&list), Ok(vec![1, 2, 3]));
    assert_eq!(
        Vec::<f64>::try_from(&round_trip(&sharing, [0.5, 1.5])),
        Ok(vec![0.5, 1.5])
    );
    assert_eq!(
        Vec::<String>::try_from(&round_trip(&sharing, &["a", "b"][..])),
        Ok(vec!["a".into(), "b".into()])
    );
    let collected: Value = (0..4).map(|i| i * i).collect();
    assert_eq!(
        Vec::<u8>::try_from(&round_trip(&sharing, collected)),
        Ok(vec![0, 1, 4, 9])
    );

    let tuple = round_trip(&sharing, (1, "two", 3.0, (true, ())));
    assert_eq!(tuple.type_name(), "tuple");
    let (one, two, three, (yes, nothing)): (u8, &str, f64, (bool, &Value)) =
        (&tuple).try_into().unwrap();
    assert_eq!((one, two, three, yes), (1, "two", 3.0, true));
    assert!(nothing.is_none());
    let twelve = round_trip(&sharing, (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11));
    let items: (u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8) = (&twelve).try_into().unwrap();
    assert_eq!(items, (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11));

    let sorted = round_trip(&sharing, BTreeMap::from([("b", 2), ("a", 1)]));
    let keys: Vec<&str> = sorted
        .as_dict()
        .unwrap()
        .iter()
        .filter_map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(keys, ["a", "b"]);
    let hashed = round_trip(&sharing, HashMap::from([(1, "one"), (2, "two")]));
    let map: HashMap<u8, String> = (&hashed).try_into().unwrap();
    assert_eq!(map, HashMap::from([(1, "one".into()), (2, "two".into())]));

    let dict = round_trip(
        &sharing,
        Dict::new().with("z", 0).with("a", 1).with("m", vec![2]),
    );
    assert_eq!(dict.type_name(), "dict");
    let keys: Vec<&str> = dict
        .as_dict()
        .unwrap()
        .iter()
        .filter_map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(keys, ["z", "a", "m"], "insertion order");
    assert_eq!(dict.try_get::<Vec<i64>>("m"), Ok(vec![2]));
    let ordered = round_trip(&sharing, Dict::new().with("w", 1.0).into_ordered_dict());
    assert_eq!(ordered.type_name(), "OrderedDict");
    assert_eq!(ordered.try_get::<f64>("w"), Ok(1.0));
}

#[test]
fn a_message_of_tensors_is_built_and_read_by_name() {
    for strategy in STRATEGIES {
        let sharing = context(strategy);
        let image = Tensor::from_slice(&sharing, &[0.25f32; 12], &[3, 2, 2]).unwrap();
        let labels = Tensor::from_slice(&sharing, &[3i64, 1, 4], &[3]).unwrap();
        assert_eq!(image.storage().local_kind(), Some(strategy));
        let message = Dict::new()
            .with("image", &image)
            .with("labels", labels)
            .with("image again", &image)
            .with("epoch", 2);
        let received = round_trip(&sharing, message);

        let image_back: &Tensor = received.try_get("image").unwrap();
        assert_eq!(image_back.sizes(), [3, 2, 2]);
        assert_eq!(image_back.as_slice::<f32>().unwrap(), [0.25; 12]);
        assert!(
            image_back.same_as(received.try_get::<&Tensor>("image again").unwrap()),
            "one tensor sent twice is one tensor"
        );
        assert_eq!(
            received
                .try_get::<Tensor>("labels")
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            [3, 1, 4]
        );
        assert_eq!(received.try_get::<u32>("epoch"), Ok(2));

        // What went wrong, and where, through the facade error.
        let error: Error = received.try_get::<&Tensor>("epoch").unwrap_err().into();
        assert!(matches!(error, Error::Value(_)), "{error:?}");
        assert_eq!(
            error.to_string(),
            "expected a Tensor at ['epoch'], found an int"
        );
        let error: Error = image_back.as_slice::<i64>().unwrap_err().into();
        assert!(matches!(error, Error::Element(_)), "{error:?}");
        assert_eq!(
            error.to_string(),
            "the tensor holds float32 elements, not int64 (i64)"
        );
    }
}

#[test]
fn a_transposed_offset_view_arrives_as_a_view_and_copies_in_logical_order() {
    for strategy in STRATEGIES {
        let sharing = context(strategy);
        let base = Tensor::from_slice(&sharing, &(0..12).collect::<Vec<i32>>(), &[3, 4]).unwrap();
        // base[1:, 1:].t(): sizes [3, 2], strides [1, 4], offset 5.
        let view = TensorView {
            sizes: vec![3, 2],
            strides: vec![1, 4],
            storage_offset: 5,
            ..base.view()
        };
        let transposed = Tensor::new(base.storage().clone(), view).unwrap();
        let received = round_trip(&sharing, (&base, &transposed));
        let (base_back, view_back): (&Tensor, &Tensor) = (&received).try_into().unwrap();
        assert_eq!(
            (
                view_back.sizes(),
                view_back.strides(),
                view_back.storage_offset()
            ),
            (&[3, 2][..], &[1, 4][..], 5)
        );
        assert!(view_back.storage().same_as(base_back.storage()));
        assert_eq!(view_back.to_vec::<i32>().unwrap(), [5, 9, 6, 10, 7, 11]);
        assert!(matches!(
            view_back.as_slice::<i32>(),
            Err(tensorshare::model::ElementError::NotContiguous { .. })
        ));
        assert_eq!(
            base_back.as_slice::<i32>().unwrap(),
            (0..12).collect::<Vec<_>>()
        );
    }
}

#[test]
fn half_precision_bool_and_complex_tensors_round_trip() {
    for strategy in STRATEGIES {
        let sharing = context(strategy);
        let halves: Vec<f16> = [0.5, -2.0, 65504.0].map(f16::from_f32).to_vec();
        let bfloats: Vec<bf16> = [1.5, -3.0e38, 1.0e-3].map(bf16::from_f32).to_vec();
        let mask = [true, false, false, true];
        let complex = [Complex::new(1.0f64, -1.0)];
        let message = (
            Tensor::from_slice(&sharing, &halves, &[3]).unwrap(),
            Tensor::from_slice(&sharing, &bfloats, &[3]).unwrap(),
            Tensor::from_slice(&sharing, &mask, &[2, 2]).unwrap(),
            Tensor::from_slice(&sharing, &complex, &[]).unwrap(),
        );
        let received = round_trip(&sharing, message);
        let (h, b, m, c): (&Tensor, &Tensor, &Tensor, &Tensor) = (&received).try_into().unwrap();
        assert_eq!(
            (h.dtype(), b.dtype(), m.dtype(), c.dtype()),
            (
                DType::Float16,
                DType::BFloat16,
                DType::Bool,
                DType::Complex128
            )
        );
        assert_eq!(h.as_slice::<f16>().unwrap(), halves);
        assert_eq!(b.to_vec::<bf16>().unwrap(), bfloats);
        assert_eq!(m.to_vec::<bool>().unwrap(), mask);
        assert_eq!(m.as_slice::<u8>().unwrap(), [1, 0, 0, 1]);
        assert_eq!(c.as_slice::<Complex<f64>>().unwrap(), complex);
    }
}

#[test]
fn a_writer_fills_shared_memory_that_arrives_unchanged() {
    let sharing = context(StrategyKind::FileDescriptor);
    let mut writer = sharing.allocate(64 * size_of::<u16>()).unwrap();
    for (i, x) in writer.as_mut_slice::<u16>().unwrap().iter_mut().enumerate() {
        *x = (i * 1000) as u16;
    }
    let tensor = writer.into_tensor::<u16>(&[8, 8]).unwrap();
    let received = round_trip(&sharing, &tensor);
    let back: &Tensor = (&received).try_into().unwrap();
    assert_eq!(back.dtype(), DType::UInt16);
    assert_eq!(
        back.as_slice::<u16>().unwrap(),
        tensor.as_slice::<u16>().unwrap()
    );
}

/// Reads a pickle from stdin, rebuilds it with stock torch, and prints
/// `ok NAME` or `FAIL NAME: what torch saw` per check of what Rust built.
const TORCH_CHECKS_MESSAGE: &str = r#"
import collections, multiprocessing, pickle, sys
import torch, torch.multiprocessing
multiprocessing.current_process().authkey = bytes.fromhex(sys.argv[1])
msg = pickle.loads(sys.stdin.buffer.read())
checks = {
    "dict": (type(msg) is dict, type(msg)),
    "keys": (list(msg) == ["image", "half", "bfloat", "mask", "label", "name", "boxes", "big", "none", "state"], list(msg)),
    "image": (torch.equal(msg["image"], torch.arange(6, dtype=torch.float32).reshape(2, 3)), msg["image"]),
    "half": (torch.equal(msg["half"], torch.tensor([0.5, -2.0, float("inf")], dtype=torch.float16)), msg["half"]),
    "bfloat": (torch.equal(msg["bfloat"], torch.tensor([1.5, -3.0], dtype=torch.bfloat16)), msg["bfloat"]),
    "mask": (torch.equal(msg["mask"], torch.tensor([[True, False], [False, True]])), msg["mask"]),
    "label": (msg["label"] == 7 and type(msg["label"]) is int, msg["label"]),
    "name": (msg["name"] == "cat", msg["name"]),
    "boxes": (msg["boxes"] == [(1, 2.5), (3, 4.5)], msg["boxes"]),
    "big": (msg["big"] == 2**64 - 1, msg["big"]),
    "none": (msg["none"] is None, msg["none"]),
    "state": (type(msg["state"]) is collections.OrderedDict and list(msg["state"]) == ["weight"]
              and torch.equal(msg["state"]["weight"], torch.tensor([1, 2], dtype=torch.int64)), msg["state"]),
}
for name, (ok, seen) in checks.items():
    print(f"ok {name}" if ok else f"FAIL {name}: {seen!r}", flush=True)
"#;

/// What stock torch prints for `script` run on `value` pickled by `sharing`.
fn torch_reads(python: &str, script: &str, sharing: &SharingContext, value: &Value) -> String {
    let pickle = sharing.dumps(value).unwrap();
    let key = Authkey::new(*b"values test key").to_hex();
    support::python_output_for(
        python,
        script,
        &[&key],
        &pickle,
        "torch loading the message",
    )
}

/// Every line is `ok ...`, and there are `count` of them.
fn assert_all_ok(stdout: &str, count: usize) {
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.len() == count && lines.iter().all(|line| line.starts_with("ok ")),
        "{stdout}"
    );
}

#[test]
fn stock_torch_reads_a_message_built_from_rust_values() {
    let Some(python) = test_python("values::stock_torch_reads_a_message_built_from_rust_values")
    else {
        return;
    };
    for strategy in STRATEGIES {
        let sharing = context(strategy);
        let message = Dict::new()
            .with(
                "image",
                Tensor::from_slice(&sharing, &[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3]).unwrap(),
            )
            .with(
                "half",
                Tensor::from_slice(
                    &sharing,
                    &[0.5, -2.0, f32::INFINITY].map(f16::from_f32),
                    &[3],
                )
                .unwrap(),
            )
            .with(
                "bfloat",
                Tensor::from_slice(&sharing, &[1.5, -3.0].map(bf16::from_f32), &[2]).unwrap(),
            )
            .with(
                "mask",
                Tensor::from_slice(&sharing, &[true, false, false, true], &[2, 2]).unwrap(),
            )
            .with("label", 7u8)
            .with("name", "cat")
            .with("boxes", vec![(1, 2.5), (3, 4.5)])
            .with("big", u64::MAX)
            .with("none", ())
            .with(
                "state",
                Dict::new()
                    .with(
                        "weight",
                        Tensor::from_slice(&sharing, &[1i64, 2], &[2]).unwrap(),
                    )
                    .into_ordered_dict(),
            );
        let stdout = torch_reads(&python, TORCH_CHECKS_MESSAGE, &sharing, &message.into());
        assert_all_ok(&stdout, 12);
    }
}

#[cfg(feature = "ndarray")]
mod arrays {
    use tensorshare::ndarray::{Array, ArrayD, Axis, s};

    use super::*;

    /// Reads a pickle of `(image, columns)` and checks them against what
    /// torch computes itself.
    const TORCH_CHECKS_ARRAYS: &str = r#"
import multiprocessing, pickle, sys
import torch, torch.multiprocessing
multiprocessing.current_process().authkey = bytes.fromhex(sys.argv[1])
image, columns = pickle.loads(sys.stdin.buffer.read())
base = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4)
checks = {
    "image": torch.equal(image, base.permute(2, 0, 1)) and image.is_contiguous(),
    "columns": torch.equal(columns, base[:, 1:, ::2]) and columns.dtype == torch.float64,
}
for name, ok in checks.items():
    print(f"ok {name}" if ok else f"FAIL {name}: {image!r} {columns!r}", flush=True)
"#;

    fn arange() -> ArrayD<f64> {
        Array::from_iter((0..24).map(f64::from))
            .into_shape_with_order(vec![2, 3, 4])
            .unwrap()
    }

    #[test]
    fn stock_torch_reads_tensors_built_from_arrays() {
        let Some(python) =
            test_python("values::arrays::stock_torch_reads_tensors_built_from_arrays")
        else {
            return;
        };
        for strategy in STRATEGIES {
            let sharing = context(strategy);
            let array = arange();
            let image =
                Tensor::from_array(&sharing, array.view().permuted_axes(vec![2, 0, 1])).unwrap();
            let columns = Tensor::from_array(&sharing, array.slice(s![.., 1.., ..;2])).unwrap();
            assert_eq!(image.storage().local_kind(), Some(strategy));
            let message = Value::from((image, columns));
            assert_all_ok(
                &torch_reads(&python, TORCH_CHECKS_ARRAYS, &sharing, &message),
                2,
            );
        }
    }

    #[test]
    fn a_received_strided_view_is_an_array_view_equal_to_its_copy() {
        for strategy in STRATEGIES {
            let sharing = context(strategy);
            let base = Tensor::from_array(&sharing, &arange()).unwrap();
            // base[:, 1:, ::2].transpose(0, 2): sizes [2, 2, 2], strides [2, 4, 12], offset 4.
            let view = TensorView {
                sizes: vec![2, 2, 2],
                strides: vec![2, 4, 12],
                storage_offset: 4,
                ..base.view()
            };
            let strided = Tensor::new(base.storage().clone(), view).unwrap();
            let received = round_trip(&sharing, &strided);
            let back: &Tensor = (&received).try_into().unwrap();
            let array = back.as_array_view::<f64>().unwrap();
            assert_eq!(array.shape(), [2, 2, 2]);
            assert_eq!(array.strides(), [2, 4, 12]);
            assert_eq!(
                array.iter().copied().collect::<Vec<_>>(),
                back.to_vec::<f64>().unwrap()
            );
            let expected = arange();
            let expected = expected.slice(s![.., 1.., ..;2]).into_dyn();
            assert_eq!(array, expected.permuted_axes(vec![2, 1, 0]));
            assert_eq!(array.index_axis(Axis(0), 1)[[0, 1]], 18.0);
        }
    }

    #[test]
    fn a_writer_filled_through_an_array_view_arrives_unchanged() {
        let sharing = context(StrategyKind::FileDescriptor);
        let mut writer = sharing.allocate(2 * 3 * 4 * size_of::<f64>()).unwrap();
        writer
            .as_array_view_mut::<f64>(&[2, 3, 4])
            .unwrap()
            .assign(&arange());
        let tensor = writer.into_tensor::<f64>(&[2, 3, 4]).unwrap();
        let received = round_trip(&sharing, tensor);
        let back: Tensor = received.try_into().unwrap();
        assert_eq!(back.as_array_view::<f64>().unwrap(), arange());
    }
}
