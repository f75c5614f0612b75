//! A batch's tensors in one storage (`SharingContext::batch`): views at
//! aligned offsets, one storage per message for every receiver under every
//! strategy (torch's checked by its storages' addresses and the fds it
//! fetched), the bytes a message carries, and the memfd reused once its
//! receiver has dropped every view.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use tensorshare::connection::Address;
use tensorshare::model::{BATCH_ALIGNMENT, Batch};
use tensorshare::{Authkey, Dict, SharingContext, StrategyKind, Tensor, Value};
use tensorshare_strategies::file_descriptor::{FdSegment, FileIdentity};

use support::eventually;

const STRATEGIES: [StrategyKind; 4] = [
    StrategyKind::FileDescriptor,
    StrategyKind::FileSystem,
    StrategyKind::Bytes,
    StrategyKind::Memmap,
];

/// A batch of four dtypes and odd sizes, every element numbered from
/// `first`, so each tensor's place in the storage shows.
fn odd_batch(sharing: &SharingContext, first: u8) -> Batch {
    let mut layout = sharing.batch();
    let image = layout.tensor::<u8>(&[3, 5]).expect("image");
    let weights = layout.tensor::<f32>(&[7]).expect("weights");
    let empty = layout.tensor::<f64>(&[0]).expect("empty");
    let label = layout.tensor::<i64>(&[2]).expect("label");
    let mut writer = layout.allocate().expect("allocate");
    for (i, x) in writer.as_mut_slice(image).unwrap().iter_mut().enumerate() {
        *x = first + i as u8;
    }
    for (i, x) in writer.as_mut_slice(weights).unwrap().iter_mut().enumerate() {
        *x = f32::from(first) + i as f32 / 2.0;
    }
    assert!(writer.as_mut_slice(empty).unwrap().is_empty());
    writer
        .as_mut_slice(label)
        .unwrap()
        .copy_from_slice(&[i64::from(first), -1]);
    writer.freeze()
}

fn message(batch: &Batch) -> Value {
    let [image, weights, empty, label] = batch.tensors() else {
        panic!("four tensors");
    };
    Value::from(
        Dict::new()
            .with("image", image)
            .with("weights", weights)
            .with("empty", empty)
            .with("label", label),
    )
}

fn tensor<'a>(value: &'a Value, key: &str) -> &'a Tensor {
    value
        .get(key)
        .and_then(Value::as_tensor)
        .unwrap_or_else(|| panic!("no tensor {key} in {value:?}"))
}

/// Checks what `odd_batch(_, first)` became at the receiver.
fn check_received(received: &Value, first: u8) {
    let image = tensor(received, "image");
    let weights = tensor(received, "weights");
    let label = tensor(received, "label");
    let storage = image.storage();
    for t in [weights, label, tensor(received, "empty")] {
        assert!(t.storage().same_as(storage), "one storage for the batch");
    }
    let byte_offsets: Vec<usize> = [image, weights, label]
        .iter()
        .map(|t| t.storage_offset() * t.dtype().element_size())
        .collect();
    assert_eq!(byte_offsets, [0, 64, 128]);
    assert!(byte_offsets.iter().all(|o| o % BATCH_ALIGNMENT == 0));
    assert_eq!(
        storage.nbytes(),
        128 + 16,
        "the storage ends with its last tensor"
    );
    let expected: Vec<u8> = (0..15).map(|i| first + i).collect();
    assert_eq!(image.as_slice::<u8>().unwrap(), expected);
    assert_eq!(
        weights.as_slice::<f32>().unwrap()[6],
        f32::from(first) + 3.0
    );
    assert_eq!(label.as_slice::<i64>().unwrap(), [i64::from(first), -1]);
    // The padding between tensors is zero, as allocated.
    let bytes = storage.bytes().expect("bytes at hand");
    assert!(bytes[15..64].iter().all(|&b| b == 0));
}

#[test]
fn a_rust_receiver_gets_one_storage_with_every_view_aligned() {
    support::build_manager_executable();
    for strategy in STRATEGIES {
        let authkey = Authkey::random().unwrap();
        let producer = SharingContext::new(authkey.clone()).with_strategy(strategy);
        let consumer = SharingContext::new(authkey);
        let (mut tx, mut rx) = support::connection_pair(&producer, &consumer);
        let batch = odd_batch(&producer, 10);
        assert_eq!(batch.storage().kind().name(), strategy.name());
        tx.send(&message(&batch)).expect("send");
        let received = rx.recv().expect("recv");
        check_received(&received, 10);
    }
}

#[test]
fn a_bytes_message_carries_the_batch_once() {
    let sharing =
        SharingContext::new(Authkey::random().unwrap()).with_strategy(StrategyKind::Bytes);
    let mut layout = sharing.batch();
    let image = layout.tensor::<u8>(&[8, 3, 64, 64]).unwrap();
    let label = layout.tensor::<i64>(&[8]).unwrap();
    let nbytes = layout.nbytes();
    assert_eq!(nbytes, 8 * 3 * 64 * 64 + 8 * 8);
    let batch = layout.allocate().unwrap().freeze();
    let one = sharing
        .dumps(&Value::from(
            Dict::new()
                .with("image", batch.tensor(image))
                .with("label", batch.tensor(label)),
        ))
        .unwrap();
    assert!(
        (nbytes..nbytes + 1024).contains(&one.len()),
        "{} bytes for a batch of {nbytes}",
        one.len()
    );
    // The same tensors in a storage each: two storages, each with its
    // stream's header.
    let separate = Value::from(
        Dict::new()
            .with(
                "image",
                Tensor::from_slice(&sharing, &vec![0u8; 8 * 3 * 64 * 64], &[8, 3, 64, 64]).unwrap(),
            )
            .with(
                "label",
                Tensor::from_slice(&sharing, &[0i64; 8], &[8]).unwrap(),
            ),
    );
    assert!(sharing.dumps(&separate).unwrap().len() > one.len());
}

/// Receives one message with torch and sends back, for each tensor of the
/// dict, its storage's address and `_cdata`, its byte offset and its
/// elements' sum.
const TORCH_RECEIVER: &str = r#"
import multiprocessing, multiprocessing.connection, os, sys, torch
key = bytes.fromhex(os.environ["TENSORSHARE_AUTHKEY"])
multiprocessing.current_process().authkey = key
address = sys.argv[1]
address = "\0" + address[1:] if address.startswith("@") else address
with multiprocessing.connection.Client(address, family="AF_UNIX", authkey=key) as conn:
    batch = conn.recv()
    storages = {name: t.untyped_storage() for name, t in batch.items()}
    conn.send({
        "data_ptr": sorted({s.data_ptr() for s in storages.values()}),
        "cdata": sorted({s._cdata for s in storages.values()}),
        "nbytes": sorted({s.nbytes() for s in storages.values()}),
        "offsets": {n: t.storage_offset() * t.element_size() for n, t in batch.items()},
        "sums": {n: float(t.double().sum()) for n, t in batch.items()},
    })
    conn.recv()
"#;

fn ints(value: &Value, key: &str) -> Vec<i64> {
    value
        .get(key)
        .and_then(Value::as_list)
        .unwrap_or_else(|| panic!("no list {key} in {value:?}"))
        .iter()
        .map(|v| v.as_int().expect("an int"))
        .collect()
}

fn field(value: &Value, dict: &str, key: &str) -> f64 {
    let entry = value.get(dict).and_then(|d| d.get(key));
    match entry {
        Some(Value::Float(x)) => *x,
        Some(v) => v.as_int().map(|n| n as f64).expect("a number"),
        None => panic!("no {dict}[{key}] in {value:?}"),
    }
}

#[test]
fn a_torch_receiver_rebuilds_one_storage_per_batch() {
    let Some(python) = support::test_python("a_torch_receiver_rebuilds_one_storage_per_batch")
    else {
        return;
    };
    support::build_manager_executable();
    for strategy in STRATEGIES {
        let authkey = Authkey::random().unwrap();
        let sharing = SharingContext::new(authkey.clone()).with_strategy(strategy);
        let listener = sharing
            .listen(&Address::unique_abstract("listener").expect("an abstract name"))
            .expect("listen");
        let mut child = Command::new(&python)
            .args(["-c", TORCH_RECEIVER, &listener.address().to_string()])
            .env("TENSORSHARE_AUTHKEY", authkey.to_hex())
            .stdin(Stdio::null())
            .spawn()
            .expect("start python");
        let mut connection = listener.accept().expect("torch connects");
        let batch = odd_batch(&sharing, 20);
        connection.send(&message(&batch)).expect("send");
        let report = connection.recv().expect("torch's report");
        connection.send(&Value::None).expect("done");
        assert!(child.wait().expect("python exits").success());

        let what = format!("{strategy}: {report:?}");
        assert_eq!(ints(&report, "data_ptr").len(), 1, "one storage: {what}");
        assert_eq!(ints(&report, "cdata").len(), 1, "one storage: {what}");
        assert_eq!(ints(&report, "nbytes"), [144], "{what}");
        for (name, offset) in [
            ("image", 0.0),
            ("weights", 64.0),
            ("empty", 128.0),
            ("label", 128.0),
        ] {
            assert_eq!(field(&report, "offsets", name), offset, "{name}: {what}");
        }
        let image_sum: f64 = (20..35).map(f64::from).sum();
        assert_eq!(field(&report, "sums", "image"), image_sum, "{what}");
        assert_eq!(field(&report, "sums", "label"), 19.0, "{what}");
        if strategy == StrategyKind::FileDescriptor {
            // One fd fetched from the resource sharer for the batch.
            // (Counted once the fd is on its way, which may be after
            // torch has it.)
            eventually("the sharer counts the fd served", || {
                sharing
                    .sharer_stats()
                    .is_some_and(|stats| stats.served >= 1)
            });
            std::thread::sleep(Duration::from_millis(100));
            let served = sharing.sharer_stats().map(|stats| stats.served);
            assert_eq!(served, Some(1), "{what}");
        }
    }
}

fn memfd(batch: &Batch) -> FileIdentity {
    batch
        .storage()
        .local_segment::<FdSegment>()
        .expect("a memfd")
        .identity()
}

#[test]
fn a_batch_memfd_comes_back_once_the_receiver_drops_every_view() {
    let authkey = Authkey::random().unwrap();
    let producer = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let consumer = SharingContext::new(authkey);
    let (mut tx, mut rx) = support::connection_pair(&producer, &consumer);
    let batch = odd_batch(&producer, 1);
    let first = memfd(&batch);
    tx.send(&message(&batch)).expect("send");
    let received = rx.recv().expect("recv");
    drop(batch);

    // The receiver keeps one label: the whole storage stays its.
    let label = tensor(&received, "label").clone();
    drop(received);
    std::thread::sleep(Duration::from_millis(200));
    let other = odd_batch(&producer, 2);
    // Kept, so that the next batch cannot take its memfd instead.
    assert_ne!(
        memfd(&other),
        first,
        "a batch its receiver holds is not reused"
    );
    assert_eq!(label.as_slice::<i64>().unwrap(), [1, -1]);

    drop(label);
    eventually("the receiver reports the batch unmapped", || {
        producer
            .sharer_stats()
            .is_some_and(|stats| stats.unmapped == 1)
    });
    // The next batch of that size takes the memfd back, zeroed: odd_batch
    // checks the empty tensor, the padding is checked here.
    let again = odd_batch(&producer, 3);
    assert_eq!(memfd(&again), first, "the released memfd is reused");
    let bytes = again.storage().bytes().unwrap();
    assert!(bytes[15..64].iter().all(|&b| b == 0), "reused zeroed");
    drop(other);
}
