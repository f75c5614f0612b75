//! The mapping both ways, what it accepts, and its errors with their paths.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::*;
use crate::model::{Storage, TensorView};
use crate::{DType, Tensor};

fn tensor(dtype: DType, sizes: &[usize]) -> Tensor {
    let nbytes = sizes.iter().product::<usize>() * dtype.element_size();
    let bytes = (0..nbytes).map(|i| i as u8).collect();
    Tensor::new(
        Storage::from_vec(bytes),
        TensorView::contiguous(dtype, sizes),
    )
    .unwrap()
}

fn s(text: &str) -> Value {
    Value::Str(text.into())
}

fn dict(pairs: Vec<(&str, Value)>) -> Value {
    Value::Dict(pairs.into_iter().map(|(k, v)| (s(k), v)).collect())
}

fn list(items: Vec<Value>) -> Value {
    Value::List(items.into())
}

fn tuple(items: Vec<Value>) -> Value {
    Value::Tuple(items.into())
}

/// A value as a Python repr, enough to compare shapes of values.
fn repr(value: &Value) -> String {
    let join = |items: &[Value]| items.iter().map(repr).collect::<Vec<_>>().join(", ");
    match value {
        Value::None => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Int(i) => i.to_string(),
        Value::BigInt(le) => format!("bigint{le:?}"),
        Value::Float(f) => format!("{f:?}"),
        Value::Str(s) => format!("'{s}'"),
        Value::Bytes(b) => format!("b{:?}", b.as_slice()),
        Value::List(items) => format!("[{}]", join(items)),
        Value::Tuple(items) if items.len() == 1 => format!("({},)", join(items)),
        Value::Tuple(items) => format!("({})", join(items)),
        Value::Dict(pairs) | Value::OrderedDict(pairs, _) => format!(
            "{{{}}}",
            pairs
                .iter()
                .map(|(k, v)| format!("{}: {}", repr(k), repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Tensor(t) => format!("tensor({}, {:?})", t.dtype().name(), t.sizes()),
        other => other.type_name().into(),
    }
}

#[derive(Serialize, Deserialize, Debug)]
struct Batch {
    image: Tensor,
    label: Tensor,
    epoch: u32,
    names: Vec<String>,
}

#[test]
fn a_struct_is_a_dict_of_its_fields_in_order_and_comes_back() {
    let batch = Batch {
        image: tensor(DType::Float32, &[2, 3]),
        label: tensor(DType::Int64, &[2]),
        epoch: 7,
        names: vec!["a".into(), "b".into()],
    };
    let value = to_value(&batch).unwrap();
    assert_eq!(
        repr(&value),
        "{'image': tensor(float32, [2, 3]), 'label': tensor(int64, [2]), 'epoch': 7, \
         'names': ['a', 'b']}"
    );
    let Value::Dict(pairs) = &value else {
        unreachable!()
    };
    assert!(pairs[0].1.as_tensor().unwrap().same_as(&batch.image));

    let back: Batch = from_value(&value).unwrap();
    assert!(back.image.same_as(&batch.image));
    assert!(back.label.same_as(&batch.label));
    assert_eq!((back.epoch, back.names), (7, batch.names));
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
enum Shape {
    Empty,
    Circle(f64),
    Point(i32, i32),
    Box { w: u8, h: u8 },
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Meter(f32);

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Pair(u8, String);

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Marker;

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Everything {
    flag: bool,
    small: i8,
    big: u64,
    huge: i128,
    ratio: f32,
    letter: char,
    text: String,
    #[serde(with = "serde_bytes")]
    blob: Vec<u8>,
    raw: Vec<u8>,
    maybe: Option<i32>,
    nothing: Option<i32>,
    unit: (),
    marker: Marker,
    meter: Meter,
    pair: Pair,
    point: (i32, String),
    nested: Vec<Vec<u8>>,
    shapes: Vec<Shape>,
    counts: BTreeMap<String, u32>,
    by_id: BTreeMap<i64, bool>,
}

fn everything() -> Everything {
    Everything {
        flag: true,
        small: -3,
        big: u64::MAX,
        huge: -(1 << 70),
        ratio: 0.5,
        letter: 'é',
        text: "hello".into(),
        blob: vec![0, 255],
        raw: vec![1, 2],
        maybe: Some(4),
        nothing: None,
        unit: (),
        marker: Marker,
        meter: Meter(1.5),
        pair: Pair(1, "one".into()),
        point: (3, "x".into()),
        nested: vec![vec![], vec![1]],
        shapes: vec![
            Shape::Empty,
            Shape::Circle(2.0),
            Shape::Point(1, -1),
            Shape::Box { w: 2, h: 3 },
        ],
        counts: [("a".to_owned(), 1), ("b".to_owned(), 2)].into(),
        by_id: [(-1, true), (5, false)].into(),
    }
}

#[test]
fn the_mapping_is_pythons_view_and_round_trips() {
    let original = everything();
    let value = to_value(&original).unwrap();
    assert_eq!(
        repr(&value),
        "{'flag': True, 'small': -3, 'big': bigint[255, 255, 255, 255, 255, 255, 255, 255, 0], \
         'huge': bigint[0, 0, 0, 0, 0, 0, 0, 0, 192], 'ratio': 0.5, 'letter': 'é', \
         'text': 'hello', 'blob': b[0, 255], 'raw': [1, 2], 'maybe': 4, 'nothing': None, \
         'unit': None, 'marker': None, 'meter': 1.5, 'pair': (1, 'one'), 'point': (3, 'x'), \
         'nested': [[], [1]], \
         'shapes': ['Empty', {'Circle': 2.0}, {'Point': (1, -1)}, {'Box': {'w': 2, 'h': 3}}], \
         'counts': {'a': 1, 'b': 2}, 'by_id': {-1: True, 5: False}}"
    );
    let back: Everything = from_value(&value).unwrap();
    assert_eq!(back, original);
}

#[test]
fn python_forms_that_fit_are_accepted() {
    #[derive(Deserialize, Debug, PartialEq)]
    struct Loose {
        from_int: f64,
        from_tuple: Vec<u8>,
        from_set: Vec<String>,
        from_size: Vec<i64>,
        from_bytes: Vec<u8>,
        from_list: (u8, u8),
        ordered: HashMap<String, i64>,
        unit_variant: Shape,
        unit_as_dict: Shape,
    }
    let value = dict(vec![
        ("from_int", Value::Int(3)),
        ("from_tuple", tuple(vec![Value::Int(1), Value::Int(2)])),
        ("from_set", Value::Set(vec![s("x")].into())),
        ("from_size", Value::Size(vec![2, 3].into())),
        (
            "from_bytes",
            Value::Bytes(tensorshare_compat::pickle::SharedBytes::from(&b"ab"[..])),
        ),
        ("from_list", list(vec![Value::Int(1), Value::Int(2)])),
        (
            "ordered",
            Value::OrderedDict(vec![(s("k"), Value::Int(-1))].into(), Default::default()),
        ),
        ("unit_variant", s("Empty")),
        ("unit_as_dict", dict(vec![("Empty", Value::None)])),
        ("ignored", list(vec![Value::None])),
    ]);
    let loose: Loose = from_value(&value).unwrap();
    assert_eq!(
        loose,
        Loose {
            from_int: 3.0,
            from_tuple: vec![1, 2],
            from_set: vec!["x".into()],
            from_size: vec![2, 3],
            from_bytes: b"ab".to_vec(),
            from_list: (1, 2),
            ordered: [("k".to_owned(), -1)].into(),
            unit_variant: Shape::Empty,
            unit_as_dict: Shape::Empty,
        }
    );

    // An OrderedDict for a struct, and a borrowed str.
    #[derive(Deserialize)]
    struct Named<'a> {
        name: &'a str,
    }
    let value = Value::OrderedDict(vec![(s("name"), s("abc"))].into(), Default::default());
    assert_eq!(from_value::<Named<'_>>(&value).unwrap().name, "abc");

    // Ints past 64 bits, both ways.
    assert_eq!(
        from_value::<u128>(&to_value(&u128::MAX).unwrap()).unwrap(),
        u128::MAX
    );
    assert_eq!(
        from_value::<i128>(&to_value(&i128::MIN).unwrap()).unwrap(),
        i128::MIN
    );
    assert_eq!(
        from_value::<u64>(&to_value(&u64::MAX).unwrap()).unwrap(),
        u64::MAX
    );
    // Sign bytes pickle would not write are read through.
    let mut padded = vec![0; 19];
    padded[0] = 5;
    assert_eq!(from_value::<u8>(&Value::BigInt(padded.into())).unwrap(), 5);
    let minus_one = Value::BigInt(vec![0xff; 20].into());
    assert_eq!(from_value::<i64>(&minus_one).unwrap(), -1);
    let mut over_u128 = vec![0; 18];
    over_u128[16] = 1;
    assert_eq!(
        error_of::<u128>(&Value::BigInt(over_u128.into())),
        "expected u128, found int of 144 bits"
    );
    let past_128_bits = Value::BigInt(vec![1; 20].into());
    assert_eq!(
        error_of::<i128>(&past_128_bits),
        "expected i128, found int of 160 bits"
    );
    let whole: Value = from_value(&past_128_bits).unwrap();
    assert!(matches!(whole, Value::BigInt(le) if le.len() == 20));
}

fn error_of<T: for<'de> Deserialize<'de> + std::fmt::Debug>(value: &Value) -> String {
    from_value::<T>(value).unwrap_err().to_string()
}

#[derive(Deserialize, Debug)]
#[expect(dead_code, reason = "only read to fail")]
struct Sample {
    image: Tensor,
    label: i64,
}

#[derive(Deserialize, Debug)]
#[expect(dead_code, reason = "only read to fail")]
struct Epoch {
    batch: Vec<Sample>,
    weights: HashMap<u32, f64>,
}

#[test]
fn errors_name_the_path_and_what_does_not_fit() {
    let image = Value::Tensor(tensor(DType::Float32, &[1]));
    let sample = |label: Value| dict(vec![("image", image.clone()), ("label", label)]);

    assert_eq!(
        error_of::<Sample>(&dict(vec![("image", image.clone())])),
        "missing key 'label' in dict for struct Sample"
    );
    assert_eq!(
        error_of::<Sample>(&dict(vec![
            ("image", s("cat.png")),
            ("label", Value::Int(1))
        ])),
        "image: expected a Tensor, found str 'cat.png'"
    );
    assert_eq!(
        error_of::<Sample>(&dict(vec![
            ("image", image.clone()),
            ("label", image.clone())
        ])),
        "label: expected i64, found Tensor"
    );
    assert_eq!(
        error_of::<Sample>(&list(vec![])),
        "expected struct Sample, found list"
    );

    let batch = (0..5)
        .map(|i| {
            if i == 3 {
                sample(Value::Float(2.5))
            } else {
                sample(Value::Int(i))
            }
        })
        .collect();
    let epoch = dict(vec![("batch", list(batch)), ("weights", dict(vec![]))]);
    assert_eq!(
        error_of::<Epoch>(&epoch),
        "batch[3].label: expected i64, found float 2.5"
    );

    let epoch = dict(vec![
        (
            "batch",
            list(vec![
                sample(Value::Int(0)),
                dict(vec![("image", image.clone())]),
            ]),
        ),
        ("weights", dict(vec![])),
    ]);
    assert_eq!(
        error_of::<Epoch>(&epoch),
        "batch[1]: missing key 'label' in dict for struct Sample"
    );

    let epoch = dict(vec![
        ("batch", list(vec![])),
        ("weights", dict(vec![("a", Value::Float(1.0))])),
    ]);
    assert_eq!(
        error_of::<Epoch>(&epoch),
        "weights key 'a': expected u32, found str 'a'"
    );

    let key_with_space = dict(vec![("a b", dict(vec![("x y", Value::None)]))]);
    assert_eq!(
        error_of::<HashMap<String, HashMap<String, u8>>>(&key_with_space),
        "['a b']['x y']: expected u8, found None"
    );
    let int_keys = Value::Dict(vec![(Value::Int(4), s("no"))].into());
    assert_eq!(
        error_of::<HashMap<i64, u8>>(&int_keys),
        "[4]: expected u8, found str 'no'"
    );
    assert_eq!(
        error_of::<u8>(&Value::Int(300)),
        "expected u8, found int 300"
    );
    assert_eq!(
        error_of::<(u8, u8)>(&tuple(vec![Value::Int(1)])),
        "expected a tuple of size 2, found 1 items"
    );
    assert_eq!(
        error_of::<(u8, u8)>(&tuple(vec![Value::Int(1); 3])),
        "expected a tuple of size 2, found 3 items"
    );
    assert_eq!(
        error_of::<Vec<Shape>>(&list(vec![s("Empty"), s("Square")])),
        "[1]: unknown variant 'Square', expected one of 'Empty', 'Circle', 'Point', 'Box'"
    );
    assert_eq!(
        error_of::<Shape>(&dict(vec![("Box", dict(vec![("w", Value::Int(1))]))])),
        "Box: missing key 'h'"
    );
    assert_eq!(
        error_of::<Shape>(&dict(vec![("Point", tuple(vec![Value::Int(1), s("y")]))])),
        "Point[1]: expected i32, found str 'y'"
    );

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[expect(dead_code, reason = "only read to fail")]
    struct Strict {
        image: Tensor,
        label: i64,
    }
    assert_eq!(
        error_of::<Strict>(&dict(vec![("lable", Value::Int(1))])),
        "unknown key 'lable' in dict for struct Strict, expected one of 'image', 'label'"
    );
}

#[test]
fn error_kinds_can_be_matched() {
    let error = from_value::<Sample>(&dict(vec![])).unwrap_err();
    assert_eq!(
        error.kind(),
        &SerdeErrorKind::MissingKey {
            key: "image",
            owner: Some("Sample")
        }
    );
    assert_eq!(error.path(), "");
    let error = from_value::<Vec<u8>>(&list(vec![Value::Int(0), s("x")])).unwrap_err();
    assert_eq!(error.path(), "[1]");
    assert!(matches!(error.kind(), SerdeErrorKind::Mismatch { .. }));
    assert_eq!(error.to_string(), "[1]: expected u8, found str 'x'");
}

#[test]
fn serializing_refuses_keys_python_cannot_hash() {
    let map: BTreeMap<Vec<u8>, u8> = [(vec![1], 1)].into();
    let error = to_value(&map).unwrap_err();
    assert_eq!(
        error.to_string(),
        "a dict key must be hashable in Python, found list"
    );
    let nested: BTreeMap<&str, BTreeMap<(u8, Vec<u8>), u8>> =
        [("inner", [((1, vec![2]), 3)].into())].into();
    assert_eq!(
        to_value(&nested).unwrap_err().to_string(),
        "inner: a dict key must be hashable in Python, found list"
    );
    // Tuples of hashable items are fine.
    let fine: BTreeMap<(u8, String), u8> = [((1, "a".into()), 2)].into();
    assert_eq!(repr(&to_value(&fine).unwrap()), "{(1, 'a'): 2}");
}

#[test]
fn a_custom_serialize_error_carries_its_path() {
    struct Refuses;
    impl Serialize for Refuses {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("not today"))
        }
    }
    #[derive(Serialize)]
    struct Outer {
        items: Vec<Refuses>,
    }
    let error = to_value(&Outer {
        items: vec![Refuses],
    })
    .unwrap_err();
    assert_eq!(error.to_string(), "items[0]: not today");
}

#[test]
fn tensors_refuse_other_serializers_and_deserializers() {
    #[derive(Serialize, Deserialize, Debug)]
    struct WithTensor {
        image: Tensor,
    }
    let holder = WithTensor {
        image: tensor(DType::UInt8, &[4]),
    };
    let error = serde_json::to_string(&holder).unwrap_err().to_string();
    assert!(
        error.starts_with(
            "a tensorshare Tensor serializes only into a tensorshare Value (tensorshare::to_value)"
        ),
        "{error}"
    );
    let error = serde_json::to_string(&to_value(&holder).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("a tensorshare Value serializes only into"),
        "{error}"
    );
    // Nothing stays armed: the next conversion works.
    to_value(&holder).expect("serializes");

    let error = serde_json::from_str::<WithTensor>(r#"{"image": [1, 2]}"#)
        .unwrap_err()
        .to_string();
    assert!(error.contains("expected a Tensor"), "{error}");
    let error = serde_json::from_str::<WithTensor>(r#"{"image": {"a": 1}}"#)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("a tensorshare Tensor deserializes only from a tensorshare Value"),
        "{error}"
    );
    // Outside from_value, a forged reference finds nothing.
    let forged = format!(r#"{{"image": {{"{}": 0}}}}"#, passed::PASSED_KEY);
    assert!(serde_json::from_str::<WithTensor>(&forged).is_err());
}

#[test]
fn values_and_storages_pass_through_whole() {
    #[derive(Serialize, Deserialize)]
    struct Message {
        kind: String,
        payload: Value,
        storage: Storage,
    }
    let shared = list(vec![Value::Int(1)]);
    let payload = tuple(vec![
        shared.clone(),
        shared.clone(),
        Value::DType(DType::Float16),
    ]);
    let storage = Storage::from_vec(vec![1, 2, 3]);
    let message = Message {
        kind: "k".into(),
        payload: payload.clone(),
        storage: storage.clone(),
    };
    let value = to_value(&message).unwrap();
    assert_eq!(
        repr(&value),
        "{'kind': 'k', 'payload': ([1], [1], dtype), 'storage': UntypedStorage}"
    );
    let back: Message = from_value(&value).unwrap();
    let Value::Tuple(items) = &back.payload else {
        panic!("a tuple stays a tuple: {:?}", back.payload)
    };
    assert_eq!(
        items[0].shared_identity(),
        items[1].shared_identity(),
        "still one list"
    );
    assert!(back.storage.same_as(&storage));

    // A typed storage reads as its bytes.
    let typed = dict(vec![
        ("kind", s("k")),
        ("payload", Value::None),
        ("storage", Value::TypedStorage(storage.clone(), DType::Int8)),
    ]);
    assert!(
        from_value::<Message>(&typed)
            .unwrap()
            .storage
            .same_as(&storage)
    );

    // Any dict, whole.
    let anything: BTreeMap<String, Value> = from_value(&value).unwrap();
    assert_eq!(repr(&anything["payload"]), "([1], [1], dtype)");

    // A Value from another format: its data.
    let from_json: Value = serde_json::from_str(r#"{"a": [1, 2.5, null, "x", true]}"#).unwrap();
    assert_eq!(repr(&from_json), "{'a': [1, 2.5, None, 'x', True]}");
}

#[test]
fn tensors_pass_through_untagged_enums_and_flattened_fields() {
    #[derive(Serialize, Deserialize, Debug)]
    #[serde(untagged)]
    enum Input {
        One(Tensor),
        Many(Vec<Tensor>),
        Label(i64),
    }
    #[derive(Serialize, Deserialize, Debug)]
    struct Common {
        step: u32,
        mask: Tensor,
    }
    #[derive(Serialize, Deserialize, Debug)]
    struct Request {
        input: Input,
        #[serde(flatten)]
        common: Common,
        #[serde(flatten)]
        rest: HashMap<String, Value>,
    }
    let a = tensor(DType::Float32, &[2]);
    let b = tensor(DType::Int32, &[3]);
    let mask = tensor(DType::Bool, &[2]);
    let request = Request {
        input: Input::Many(vec![a.clone(), b.clone()]),
        common: Common {
            step: 9,
            mask: mask.clone(),
        },
        rest: [("extra".to_owned(), tuple(vec![Value::Int(1)]))].into(),
    };
    let value = to_value(&request).unwrap();
    assert_eq!(
        repr(&value),
        "{'input': [tensor(float32, [2]), tensor(int32, [3])], 'step': 9, \
         'mask': tensor(bool, [2]), 'extra': (1,)}"
    );
    let back: Request = from_value(&value).unwrap();
    let Input::Many(tensors) = &back.input else {
        panic!("{:?}", back.input)
    };
    assert!(tensors[0].same_as(&a) && tensors[1].same_as(&b));
    assert!(back.common.mask.same_as(&mask));
    assert_eq!(back.common.step, 9);
    // Through serde's buffer a tuple comes back as a list.
    assert_eq!(repr(&back.rest["extra"]), "[1]");

    let one = dict(vec![
        ("input", Value::Tensor(a.clone())),
        ("step", Value::Int(1)),
        ("mask", Value::Tensor(mask.clone())),
    ]);
    let back: Request = from_value(&one).unwrap();
    assert!(matches!(&back.input, Input::One(t) if t.same_as(&a)));
    let label = dict(vec![
        ("input", Value::Int(4)),
        ("step", Value::Int(1)),
        ("mask", Value::Tensor(mask)),
    ]);
    assert!(matches!(
        from_value::<Request>(&label).unwrap().input,
        Input::Label(4)
    ));
}

#[test]
fn a_peers_dict_cannot_name_a_registered_value() {
    #[derive(Deserialize, Debug)]
    #[expect(dead_code, reason = "only read to fail")]
    struct Flat {
        #[serde(flatten)]
        inner: Inner,
        other: Tensor,
    }
    #[derive(Deserialize, Debug)]
    #[expect(dead_code, reason = "only read to fail")]
    struct Inner {
        image: Tensor,
    }
    let forged = dict(vec![
        ("other", Value::Tensor(tensor(DType::UInt8, &[1]))),
        ("image", dict(vec![(passed::PASSED_KEY, Value::Int(0))])),
    ]);
    let error = error_of::<Flat>(&forged);
    assert!(error.contains("is tensorshare's own"), "{error}");
}

#[test]
fn shared_containers_expand_only_so_far() {
    // Each level a list holding the level below twice: 2**40 leaves.
    let mut value = list(vec![Value::Int(1)]);
    for _ in 0..40 {
        value = list(vec![value.clone(), value]);
    }
    #[derive(Deserialize, Debug)]
    #[serde(untagged)]
    enum Tree {
        Leaf(#[expect(dead_code, reason = "only read")] i64),
        Node(#[expect(dead_code, reason = "only read")] Vec<Tree>),
    }
    let error = from_value::<Tree>(&value).unwrap_err();
    assert!(
        matches!(error.kind(), SerdeErrorKind::TooLarge { limit } if *limit == 1 << 20),
        "{error}"
    );
    // The same graph passes whole as a Value.
    let whole: Value = from_value(&value).unwrap();
    assert_eq!(whole.shared_identity(), value.shared_identity());
}

#[test]
fn nesting_is_followed_only_so_deep() {
    let mut value = Value::Int(1);
    for _ in 0..200 {
        value = list(vec![value]);
    }
    #[derive(Deserialize, Debug)]
    #[serde(untagged)]
    enum Tree {
        Leaf(#[expect(dead_code, reason = "only read")] i64),
        Node(#[expect(dead_code, reason = "only read")] Vec<Tree>),
    }
    let error = from_value::<Tree>(&value).unwrap_err();
    assert!(
        error.to_string().contains("deeper than 128 levels"),
        "{error}"
    );
    let mut shallow = Value::Int(1);
    for _ in 0..100 {
        shallow = list(vec![shallow]);
    }
    from_value::<Tree>(&shallow).unwrap();
}

#[test]
fn struct_keys_of_other_types_are_named() {
    let value = Value::Dict(Arc::new([(Value::Int(3), Value::None)]));
    assert_eq!(
        error_of::<Sample>(&value),
        "key 3: expected field identifier, found int 3"
    );
}
