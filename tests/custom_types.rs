//! The embedder's own types, registered both ways: a Rust struct travels as
//! the `collections.namedtuple` or dataclass the Python side defines, and
//! what Python sends of those classes comes back as the Rust struct.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use tensorshare::model::{Custom, Global, StorageKind};
use tensorshare::registry::Reduction;
use tensorshare::{Authkey, DType, Registry, SharingContext, StrategyKind, Tensor, Value};

use support::cases;

#[derive(Debug, PartialEq)]
struct Point {
    x: i64,
    y: i64,
}

#[derive(Debug)]
struct Sample {
    image: Tensor,
    label: i64,
}

/// `Point` as a namedtuple and `Sample` as a dataclass, both defined in
/// the peer's `__main__`.
fn registry() -> Registry {
    let mut registry = Registry::default();
    registry.register_type(
        "__main__",
        "Point",
        |p: &Point| Reduction::Call {
            callee: Global::new("__main__", "Point"),
            args: vec![Value::Int(p.x), Value::Int(p.y)],
        },
        |call| match call.args {
            [Value::Int(x), Value::Int(y)] => Ok(Point { x: *x, y: *y }),
            _ => Err(call.wrong_arguments("(x: int, y: int)")),
        },
    );
    registry.register_type(
        "__main__",
        "Sample",
        |s: &Sample| Reduction::Object {
            class: Global::new("__main__", "Sample"),
            state: Value::Dict(
                vec![
                    (Value::Str("image".into()), Value::Tensor(s.image.clone())),
                    (Value::Str("label".into()), Value::Int(s.label)),
                ]
                .into(),
            ),
        },
        |call| {
            let Some(Value::Dict(state)) = call.state else {
                return Err(call.invalid("expected a dataclass's attribute dict"));
            };
            let field = |name: &str| {
                state
                    .iter()
                    .find(|(key, _)| matches!(key, Value::Str(k) if &**k == name))
                    .map(|(_, value)| value)
            };
            match (field("image"), field("label")) {
                (Some(Value::Tensor(image)), Some(Value::Int(label))) => Ok(Sample {
                    image: image.clone(),
                    label: *label,
                }),
                _ => Err(call.invalid("expected image: Tensor and label: int")),
            }
        },
    );
    registry
}

fn custom<T: std::any::Any + Send + Sync>(name: &str, value: T) -> Value {
    Value::Custom(Custom::new(Global::new("__main__", name.to_owned()), value))
}

#[test]
fn a_type_without_a_reducer_says_how_to_register_one() {
    let sharing = SharingContext::new(Authkey::new(b"k".to_vec()));
    let error = sharing
        .dumps(&custom("Point", Point { x: 1, y: 2 }))
        .expect_err("no reducer");
    assert!(
        error.to_string().contains("Registry::register_reducer"),
        "{error}"
    );
}

#[test]
fn registered_types_round_trip_between_rust_processes() {
    // A memfd storage sent by file descriptor comes back as itself.
    let sharing = SharingContext::new(Authkey::new(b"k".to_vec()))
        .with_strategy(StrategyKind::FileDescriptor)
        .with_registry(registry());
    let image = cases::contiguous(DType::Float32, &[2, 3], 4, true);
    let sent = Value::List(
        vec![
            custom("Point", Point { x: 3, y: -4 }),
            custom(
                "Sample",
                Sample {
                    image: image.clone(),
                    label: 7,
                },
            ),
        ]
        .into(),
    );
    let back = sharing
        .loads(&sharing.dumps(&sent).expect("dumps"))
        .expect("loads");
    let [Value::Custom(point), Value::Custom(sample)] = back.as_sequence().expect("a list") else {
        panic!("{back:?}");
    };
    assert_eq!(point.downcast_ref::<Point>(), Some(&Point { x: 3, y: -4 }));
    let sample = sample.downcast_ref::<Sample>().expect("a Sample");
    assert_eq!(sample.label, 7);
    assert!(sample.image.storage().same_as(image.storage()));
}

/// A rebuilder runs before the message's shared storages are attached: it
/// sees each by its handle, and what it returns holds the storage
/// attached, the same storage as every other reference to it.
#[test]
fn a_rebuilder_sees_a_shared_storage_by_its_handle_and_returns_it_attached() {
    #[derive(Debug)]
    struct Seen {
        image: Tensor,
        bytes_here: bool,
        kind: StorageKind,
    }
    let mut registry = Registry::default();
    registry.register_type(
        "__main__",
        "Seen",
        |seen: &Seen| Reduction::Call {
            callee: Global::new("__main__", "Seen"),
            args: vec![Value::Tensor(seen.image.clone())],
        },
        |call| match call.args {
            [Value::Tensor(image)] => Ok(Seen {
                image: image.clone(),
                bytes_here: image.storage().bytes().is_some(),
                kind: image.storage().kind(),
            }),
            _ => Err(call.wrong_arguments("(image: Tensor)")),
        },
    );
    let sharing = SharingContext::new(Authkey::new(b"k".to_vec()))
        .with_strategy(StrategyKind::FileSystem)
        .with_registry(registry);
    let image = Tensor::from_slice(&sharing, &[1.5f32, -2.0, 4.0], &[3]).expect("a tensor");
    let sent = Value::from(vec![
        custom(
            "Seen",
            Seen {
                image: image.clone(),
                bytes_here: true,
                kind: StorageKind::Empty,
            },
        ),
        Value::Tensor(image.clone()),
    ]);
    let back = sharing
        .loads(&sharing.dumps(&sent).expect("dumps"))
        .expect("loads");
    let [Value::Custom(seen), Value::Tensor(plain)] = back.as_sequence().expect("a list") else {
        panic!("{back:?}");
    };
    let seen = seen.downcast_ref::<Seen>().expect("a Seen");
    assert_eq!(
        (seen.bytes_here, seen.kind),
        (false, StorageKind::Strategy(StrategyKind::FileSystem)),
        "the rebuilder saw the storage by its handle"
    );
    assert_eq!(
        seen.image.as_slice::<f32>().expect("attached"),
        [1.5, -2.0, 4.0]
    );
    assert!(seen.image.storage().same_as(image.storage()));
    assert!(seen.image.storage().same_as(plain.storage()));
}

/// Stock Python with torch: it receives a Point and a Sample as its own
/// classes, checks them, and sends back instances it made.
#[test]
fn stock_python_receives_and_sends_its_own_classes() {
    let Some(python) = support::test_python("stock_python_receives_and_sends_its_own_classes")
    else {
        return;
    };
    let sharing = SharingContext::new(Authkey::random().expect("key")).with_registry(registry());
    let listener = sharing.listen_in_private_dir().expect("listen");
    let peer = r#"
import collections, dataclasses, multiprocessing, sys
from multiprocessing.connection import Client
import torch, torch.multiprocessing

Point = collections.namedtuple("Point", "x y")

@dataclasses.dataclass
class Sample:
    image: torch.Tensor
    label: int

multiprocessing.current_process().authkey = bytes.fromhex(sys.argv[2])
conn = Client(sys.argv[1], family="AF_UNIX", authkey=bytes.fromhex(sys.argv[2]))
point, sample = conn.recv()
assert type(point) is Point and point == Point(3, -4), point
assert type(sample) is Sample and sample.label == 7, sample
assert torch.equal(sample.image, torch.arange(6, dtype=torch.float32).reshape(2, 3)), sample
conn.send([Point(x=10, y=20), Sample(image=sample.image * 2, label=8)])
print("ok", flush=True)
assert conn.recv() == "done"
"#;
    let mut child = Command::new(python)
        .args(["-c", peer])
        .arg(listener.address().as_path().expect("a path"))
        .arg(sharing.authkey().to_hex())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the peer");
    let mut connection = listener.accept().expect("accept");

    let pixels: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let image = Tensor::from_slice(&sharing, &pixels, &[2, 3]).expect("image");
    let sent = Value::Tuple(
        vec![
            custom("Point", Point { x: 3, y: -4 }),
            custom("Sample", Sample { image, label: 7 }),
        ]
        .into(),
    );
    connection.send(&sent).expect("send");
    let reply = connection.recv().expect("recv");
    let [Value::Custom(point), Value::Custom(sample)] = reply.as_sequence().expect("a list") else {
        panic!("{reply:?}");
    };
    assert_eq!(point.downcast_ref::<Point>(), Some(&Point { x: 10, y: 20 }));
    let sample = sample.downcast_ref::<Sample>().expect("a Sample");
    assert_eq!(sample.label, 8);
    let doubled: Vec<f32> = pixels.iter().map(|p| 2.0 * p).collect();
    assert_eq!(sample.image.to_vec::<f32>().expect("f32 elements"), doubled);

    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    assert_eq!(line.trim(), "ok");
    connection
        .send(&Value::Str("done".into()))
        .expect("send done");
    assert!(child.wait().expect("peer exits").success());
}
