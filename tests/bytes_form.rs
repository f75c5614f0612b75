//! The `bytes` strategy's storage form,
//! `torch.Tensor.untyped_storage(functools.partial(torch.frombuffer,
//! dtype=torch.uint8)(bytearray))`: stock torch rebuilds it with one copy
//! of the payload into a writable storage that views of one message share,
//! tensorshare's decoder takes exactly that form and refuses its variations,
//! and any graph of views round-trips.

mod support;

use std::process::Command;

use proptest::prelude::*;
use tensorshare::model::Storage;
use tensorshare::{Authkey, DType, SharingContext, StrategyKind, Tensor, Value};
use tensorshare_compat::pickle::PickleBuilder;
use tensorshare_compat::pickle::{EncodeOptions, Node, NodeId, encode};

use support::{cases, test_python};

fn bytes_context() -> SharingContext {
    SharingContext::new(Authkey::random().expect("a key")).with_strategy(StrategyKind::Bytes)
}

/// The parts of the form, each replaceable by a variation.
#[derive(Clone)]
struct Form {
    partial: (&'static str, &'static str),
    function: (&'static str, &'static str),
    /// The partial's positional arguments beyond the function.
    extra_partial_args: usize,
    /// `Some((keyword, dtype))` for the state's keyword argument; `None`
    /// for no `BUILD` at all.
    keyword: Option<(&'static str, &'static str)>,
    /// The state's `args` tuple holds one int when set.
    state_args: bool,
    /// The payload as `bytes` instead of a `bytearray`.
    payload_as_bytes: bool,
    payload_len: usize,
    /// Arguments of the call of the partial beyond the payload.
    extra_call_args: usize,
    method: (&'static str, &'static str),
    /// The method is given a `rebuild_tensor` result instead of the
    /// partial's.
    method_of_other_tensor: bool,
}

impl Default for Form {
    fn default() -> Self {
        Self {
            partial: ("functools", "partial"),
            function: ("torch", "frombuffer"),
            extra_partial_args: 0,
            keyword: Some(("dtype", "uint8")),
            state_args: false,
            payload_as_bytes: false,
            payload_len: 8,
            extra_call_args: 0,
            method: ("torch", "Tensor.untyped_storage"),
            method_of_other_tensor: false,
        }
    }
}

impl Form {
    /// The storage node, in `out`.
    fn storage(&self, out: &mut PickleBuilder) -> NodeId {
        let partial = out.global(self.partial.0, self.partial.1);
        let function = out.global(self.function.0, self.function.1);
        let mut partial_args = vec![function];
        partial_args.extend((0..self.extra_partial_args).map(|i| out.int(i)));
        let partial_node = out.call(partial, partial_args);
        if let Some((keyword, dtype)) = self.keyword {
            let args: Vec<NodeId> = if self.state_args {
                vec![out.int(4)]
            } else {
                Vec::new()
            };
            let args = out.tuple(args);
            let keyword = out.push(Node::Str(keyword.to_owned()));
            let dtype = out.global("torch", dtype);
            let kwargs = out.push(Node::Dict(vec![(keyword, dtype)]));
            let none = out.push(Node::None);
            let state = out.tuple(vec![function, args, kwargs, none]);
            if let Some(Node::Object(object)) = out.pickle_mut().get_mut(partial_node) {
                object.state = Some(state);
            }
        }
        let bytes: Vec<u8> = (0..self.payload_len).map(|i| i as u8).collect();
        let payload = if self.payload_as_bytes {
            out.push(Node::Bytes(bytes.into()))
        } else {
            out.push(Node::ByteArray(bytes.into()))
        };
        let mut call_args = vec![payload];
        call_args.extend((0..self.extra_call_args).map(|i| out.int(i)));
        let mut tensor = out.call(partial_node, call_args);
        if self.method_of_other_tensor {
            let storage = Self::default().storage(out);
            tensor = uint8_tensor(out, storage, 8);
        }
        let method = out.global(self.method.0, self.method.1);
        out.call(method, vec![tensor])
    }

    /// A protocol 5 pickle of a uint8 tensor over the storage.
    fn pickle(&self) -> Vec<u8> {
        let mut out = PickleBuilder::default();
        let storage = self.storage(&mut out);
        let tensor = uint8_tensor(&mut out, storage, self.payload_len.max(1));
        let pickle = out.finish(tensor);
        encode(&pickle, &EncodeOptions::new().with_protocol(5)).expect("encode")
    }
}

/// `rebuild_tensor(torch.Tensor, rebuild_typed_storage(storage, uint8),
/// (0, torch.Size((len,)), (1,), False))`.
fn uint8_tensor(out: &mut PickleBuilder, storage: NodeId, len: usize) -> NodeId {
    const REDUCTIONS: &str = "torch.multiprocessing.reductions";
    let dtype = out.global("torch", "uint8");
    let rebuild_typed = out.global(REDUCTIONS, "rebuild_typed_storage");
    let typed = out.call(rebuild_typed, vec![storage, dtype]);
    let size = out.global("torch", "Size");
    let len = out.int(len);
    let dims = out.tuple(vec![len]);
    let sizes = out.call(size, vec![dims]);
    let one = out.int(1);
    let strides = out.tuple(vec![one]);
    let offset = out.int(0);
    let requires_grad = out.push(Node::Bool(false));
    let metadata = out.tuple(vec![offset, sizes, strides, requires_grad]);
    let class = out.global("torch", "Tensor");
    let rebuild = out.global(REDUCTIONS, "rebuild_tensor");
    out.call(rebuild, vec![class, typed, metadata])
}

fn refused(pickle: &[u8]) -> String {
    match bytes_context().loads(pickle) {
        Ok(value) => panic!("accepted: {value:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn the_form_as_sent_is_accepted() {
    let value = bytes_context()
        .loads(&Form::default().pickle())
        .expect("the form itself");
    let tensor = value.as_tensor().expect("a tensor");
    assert_eq!(tensor.as_slice::<u8>().unwrap(), [0, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn variations_of_the_form_are_refused_naming_what_is_wrong() {
    let variations: Vec<(&str, Form, &str)> = vec![
        (
            "a partial of another allowed global",
            Form {
                function: ("torch", "Tensor"),
                ..Form::default()
            },
            "functools.partial: only functools.partial(torch.frombuffer, dtype=torch.uint8)",
        ),
        (
            "a partial of a global outside the allowlist",
            Form {
                function: ("os", "system"),
                ..Form::default()
            },
            "os.system",
        ),
        (
            "another class in place of functools.partial",
            Form {
                partial: ("functools", "reduce"),
                ..Form::default()
            },
            "functools.reduce",
        ),
        (
            "a partial with two arguments",
            Form {
                extra_partial_args: 1,
                ..Form::default()
            },
            "expected 1 argument, got 2",
        ),
        (
            "a partial without its state",
            Form {
                keyword: None,
                ..Form::default()
            },
            "expected the state",
        ),
        (
            "another dtype",
            Form {
                keyword: Some(("dtype", "float32")),
                ..Form::default()
            },
            "its state must be",
        ),
        (
            "another keyword",
            Form {
                keyword: Some(("count", "uint8")),
                ..Form::default()
            },
            "its state must be",
        ),
        (
            "positional arguments in the state",
            Form {
                state_args: true,
                ..Form::default()
            },
            "its state must be",
        ),
        (
            "bytes instead of a bytearray",
            Form {
                payload_as_bytes: true,
                ..Form::default()
            },
            "expected (bytearray,)",
        ),
        (
            "an empty bytearray",
            Form {
                payload_len: 0,
                ..Form::default()
            },
            "an empty bytearray",
        ),
        (
            "two arguments to frombuffer",
            Form {
                extra_call_args: 1,
                ..Form::default()
            },
            "expected (bytearray,)",
        ),
        (
            "another method",
            Form {
                method: ("torch", "Tensor.storage"),
                ..Form::default()
            },
            "torch.Tensor.storage",
        ),
        (
            "the storage of a tensor frombuffer did not make",
            Form {
                method_of_other_tensor: true,
                ..Form::default()
            },
            "only the storage of a tensor torch.frombuffer made",
        ),
    ];
    for (what, form, expected) in variations {
        let error = refused(&form.pickle());
        assert!(error.contains(expected), "{what}: {error}");
    }
}

#[test]
fn pythons_own_spellings_of_the_globals_are_refused() {
    // What `pickle` writes for the method and the function by themselves:
    // getattr of their classes, which only memmap's from_file may use.
    for (class, attribute) in [
        (("torch._C", "TensorBase"), "untyped_storage"),
        (("torch._C", "_VariableFunctionsClass"), "frombuffer"),
    ] {
        let mut out = PickleBuilder::default();
        let getattr = out.global("builtins", "getattr");
        let class = out.global(class.0, class.1);
        let attribute = out.push(Node::Str(attribute.to_owned()));
        let looked_up = out.call(getattr, vec![class, attribute]);
        let pickle = encode(&out.finish(looked_up), &EncodeOptions::new()).expect("encode");
        let error = refused(&pickle);
        assert!(
            error.contains("TensorBase") || error.contains("_VariableFunctionsClass"),
            "{error}"
        );
    }
    // torch.frombuffer called straight, which torch refuses too (its dtype
    // is keyword-only).
    let mut out = PickleBuilder::default();
    let function = out.global("torch", "frombuffer");
    let payload = out.push(Node::ByteArray(vec![1u8; 4].into()));
    let call = out.call(function, vec![payload]);
    let pickle = encode(&out.finish(call), &EncodeOptions::new().with_protocol(5)).unwrap();
    assert!(refused(&pickle).contains("not callable"));
}

#[test]
fn the_form_below_protocol_4_is_refused_as_cpython_refuses_it() {
    // `torch.Tensor.untyped_storage` is a dotted name: below protocol 4
    // `pickle` writes it as getattr(torch.Tensor, 'untyped_storage'), as our
    // encoder does, which only memmap's from_file may use; and a GLOBAL
    // naming it whole is looked up by CPython as one attribute, and fails.
    let mut out = PickleBuilder::default();
    let storage = Form::default().storage(&mut out);
    let tensor = uint8_tensor(&mut out, storage, 8);
    let pickle = out.finish(tensor);
    for protocol in [2, 3] {
        let bytes = encode(&pickle, &EncodeOptions::new().with_protocol(protocol)).unwrap();
        let error = refused(&bytes);
        assert!(
            error.contains("not getattr(torch.Tensor, \"untyped_storage\")"),
            "protocol {protocol}: {error}"
        );
    }
    let error = refused(b"\x80\x02ctorch\nTensor.untyped_storage\n.");
    assert!(error.contains("dotted name"), "{error}");
    let bytes = encode(&pickle, &EncodeOptions::new().with_protocol(4)).unwrap();
    bytes_context()
        .loads(&bytes)
        .expect("protocol 4 resolves it (the bytearray as bytearray(bytes))");
}

#[test]
fn one_bytearray_named_twice_is_one_storage() {
    let mut out = PickleBuilder::default();
    let first = Form::default().storage(&mut out);
    // A second partial call over the same bytearray node (BINGET in the pickle).
    let Some(Node::Object(method_call)) = out.pickle_mut().get(first).cloned() else {
        panic!("the method call")
    };
    let args = match method_call.construction {
        tensorshare_compat::pickle::Construction::Reduce { args } => args,
        _ => panic!("a REDUCE"),
    };
    let Some(Node::Tuple(items)) = out.pickle_mut().get(args).cloned() else {
        panic!("the arguments")
    };
    let Some(Node::Object(frombuffer_call)) = out.pickle_mut().get(items[0]).cloned() else {
        panic!("the frombuffer call")
    };
    let again = out.push(Node::Object(frombuffer_call));
    let method = out.global("torch", "Tensor.untyped_storage");
    let second = out.call(method, vec![again]);
    let a = uint8_tensor(&mut out, first, 8);
    let b = uint8_tensor(&mut out, second, 8);
    let pair = out.tuple(vec![a, b]);
    let pickle = encode(&out.finish(pair), &EncodeOptions::new().with_protocol(5)).unwrap();
    let value = bytes_context().loads(&pickle).expect("the pair");
    let tensors = value.tensors();
    assert_eq!(tensors.len(), 2);
    assert!(tensors[0].storage().same_as(tensors[1].storage()));
}

/// A view: (offset, sizes, strides), in elements.
type ViewSpec = (i64, Vec<i64>, Vec<i64>);

fn tensor_of(storage: &Storage, dtype: DType, view: &ViewSpec) -> Tensor {
    Tensor::new(
        storage.clone(),
        cases::view(dtype, view.0, &view.1, &view.2),
    )
    .expect("a view inside its storage")
}

/// A storage of `numel` elements of a dtype and views into it that fit.
fn arb_storage_views() -> impl Strategy<Value = (DType, usize, Vec<ViewSpec>)> {
    let dtypes = cases::sharable_dtypes();
    (0..dtypes.len(), 0usize..40).prop_flat_map(move |(dtype, numel)| {
        let dtype = dtypes[dtype];
        let view = (0..=numel as i64).prop_flat_map(move |offset| {
            let room = numel as i64 - offset;
            proptest::collection::vec((0i64..4, 0i64..3), 0..3).prop_map(move |dims| {
                let mut sizes: Vec<i64> = dims.iter().map(|d| d.0).collect();
                let mut strides: Vec<i64> = dims.iter().map(|d| d.1).collect();
                if sizes.is_empty() && room == 0 {
                    // A 0-d view needs one element: none left, so no elements.
                    (sizes, strides) = (vec![0], vec![1]);
                }
                let reach = |sizes: &[i64]| {
                    if sizes.contains(&0) {
                        return 0;
                    }
                    1 + sizes
                        .iter()
                        .zip(&strides)
                        .map(|(s, t)| (s - 1) * t)
                        .sum::<i64>()
                };
                while reach(&sizes) > room {
                    let largest = sizes.iter_mut().max().expect("a dimension is too large");
                    *largest -= 1;
                }
                (offset, sizes, strides)
            })
        });
        (
            Just(dtype),
            Just(numel),
            proptest::collection::vec(view, 1..4),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn views_round_trip_through_the_bytes_form(
        storages in proptest::collection::vec(arb_storage_views(), 1..4),
        seed in any::<u8>(),
    ) {
        let mut items = Vec::new();
        for (dtype, numel, views) in &storages {
            let storage = cases::patterned_storage(numel * dtype.element_size(), seed, false);
            for view in views {
                items.push(Value::Tensor(tensor_of(&storage, *dtype, view)));
            }
        }
        let sent = Value::List(items.into());
        let sharing = bytes_context();
        let pickle = sharing.dumps(&sent).expect("dumps");
        let back = sharing.loads(&pickle).expect("loads");
        prop_assert!(cases::check_echo(&sent, &back).is_ok(), "{:?}", cases::check_echo(&sent, &back));
    }
}

/// What the torch side checks of a message of the form: see the script.
const TORCH_CHECK: &str = r#"
import pickle, sys, torch

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024

with open(sys.argv[1], "rb") as f:
    views = pickle.loads(f.read())
weight, row0, row1, grad, empty, wide = views
assert type(weight) is torch.nn.parameter.Parameter and weight.requires_grad, weight
assert type(row0) is torch.Tensor and not row0.requires_grad
assert grad.requires_grad and grad.is_leaf
assert (row0.dtype, tuple(row0.shape), row0.stride(), row0.storage_offset()) == (torch.float64, (3,), (1,), 0)
assert (row1.storage_offset(), tuple(row1.shape)) == (3, (3,))
assert type(row0.untyped_storage()) is torch.UntypedStorage
assert row0.untyped_storage().data_ptr() == row1.untyped_storage().data_ptr(), "views apart"
assert row0.untyped_storage().nbytes() == 48
row1[0] = 42.0
whole = torch.empty(0, dtype=torch.float64).set_(row0.untyped_storage(), 0, (6,), (1,))
assert whole[3] == 42.0, whole
assert empty.numel() == 0 and empty.untyped_storage().nbytes() == 0 and empty.dtype == torch.int32
assert wide.dtype == torch.uint16 and wide.tolist() == [1, 2, 3], wide

with open(sys.argv[2], "rb") as f:
    message = f.read()
size = int(sys.argv[3])
# Linux: writing 5 resets the peak resident set size (VmHWM).
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS")
big = pickle.loads(message)
after = status("VmHWM")
assert big.numel() == size // 4 and float(big[-1]) == 7.0
big[0] = 1.0
print(f"grew {after - before} for {size}")
"#;

#[test]
fn stock_torch_rebuilds_the_form_writable_with_views_kept_and_one_copy() {
    let Some(python) = test_python(
        "bytes_form::stock_torch_rebuilds_the_form_writable_with_views_kept_and_one_copy",
    ) else {
        return;
    };
    let sharing = bytes_context();
    let dir = tempfile::tempdir().expect("a scratch directory");

    let mut weight = cases::view(DType::Float32, 0, &[2, 2], &[2, 1]);
    (weight.requires_grad, weight.parameter) = (true, true);
    let weight = Tensor::new(cases::patterned_storage(16, 1, false), weight).unwrap();
    let rows = cases::patterned_storage(48, 2, false);
    let row = |offset| {
        Tensor::new(
            rows.clone(),
            cases::view(DType::Float64, offset, &[3], &[1]),
        )
    };
    let mut grad = cases::view(DType::Float32, 0, &[2], &[1]);
    grad.requires_grad = true;
    let grad = Tensor::new(cases::patterned_storage(8, 3, false), grad).unwrap();
    let empty = Tensor::from_slice(&StrategyKind::Bytes, &[0i32; 0], &[0]).unwrap();
    let wide = Tensor::from_slice(&StrategyKind::Bytes, &[1u16, 2, 3], &[3]).unwrap();
    let views = Value::Tuple(
        vec![
            weight.into(),
            row(0).unwrap().into(),
            row(3).unwrap().into(),
            grad.into(),
            empty.into(),
            wide.into(),
        ]
        .into(),
    );
    let views_path = dir.path().join("views.pkl");
    std::fs::write(&views_path, sharing.dumps(&views).unwrap()).unwrap();

    const SIZE: usize = 64 << 20;
    let big = Tensor::from_slice(&StrategyKind::Bytes, &vec![7.0f32; SIZE / 4], &[SIZE / 4]);
    let big_path = dir.path().join("big.pkl");
    std::fs::write(&big_path, sharing.dumps(&big.unwrap().into()).unwrap()).unwrap();

    let output = Command::new(&python)
        .args(["-c", TORCH_CHECK])
        .arg(&views_path)
        .arg(&big_path)
        .arg(SIZE.to_string())
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // One copy of the payload: the process's peak grows by the storage,
    // where the legacy form's `bytes` object and storage take two (torch's
    // own pickle of the same tensor grows it by 2.0 times its size).
    let grew: usize = stdout
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no growth in {stdout}"));
    assert!(
        grew > SIZE / 2 && grew < SIZE * 3 / 2,
        "peak grew by {grew} bytes rebuilding {SIZE}: {stdout}"
    );
}
