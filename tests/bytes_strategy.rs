//! The `bytes` strategy end to end: storages travel inline as `bytearray`s
//! that `torch.frombuffer` wraps (a protocol 5 pickle stock torch rebuilds
//! with one copy), `tensorshare echo --strategy bytes` answers stock torch
//! and Rust peers with copies, and views and aliasing survive.

mod support;

use std::os::unix::net::UnixStream;

use tensorshare::connection::{self, ConnectionOptions};
use tensorshare::model::SharedBytes;
use tensorshare::{Authkey, Connection, DType, SharingContext, StrategyKind, Value};

use support::{Server, cases, test_python};

fn bytes_context(authkey: &Authkey) -> SharingContext {
    SharingContext::new(authkey.clone()).with_strategy(StrategyKind::Bytes)
}

#[test]
fn a_bytes_pickle_carries_its_storages_inline() {
    let sharing = bytes_context(&Authkey::random().unwrap());
    let whole = cases::contiguous(DType::Float32, &[4, 4], 3, false);
    let value =
        Value::List(vec![Value::Tensor(whole.clone()), Value::Tensor(whole.clone())].into());
    let pickle = sharing.dumps(&value).unwrap();
    let text = String::from_utf8_lossy(&pickle);
    assert_eq!(pickle[..2], [0x80, 5], "protocol 5, for BYTEARRAY8");
    for name in ["frombuffer", "Tensor.untyped_storage", "rebuild_tensor"] {
        assert!(text.contains(name), "{name}: {text}");
    }
    assert!(!text.contains("_load_from_bytes"), "{text}");
    assert!(!text.contains("rebuild_storage_fd"), "{text}");
    // One storage, written once although two tensors name it.
    assert!(pickle.len() < 64 + 1024, "{} bytes", pickle.len());

    let back = sharing.loads(&pickle).unwrap();
    cases::check_echo(&value, &back).unwrap();
    let tensors = back.tensors();
    assert_eq!(tensors.len(), 1, "one tensor sent twice is one tensor");
    assert!(
        !tensors[0].storage().same_as(whole.storage()),
        "the rebuilt storage is a copy"
    );
}

#[test]
fn what_a_message_gave_survives_the_messages_after_it() {
    // The receiver reads every message into one buffer it reuses, and large
    // `bytes` are decoded as slices of it: neither a storage nor a kept
    // `bytes` value may change when the next message arrives.
    let sharing = bytes_context(&Authkey::random().unwrap());
    let (tx, rx) = UnixStream::pair().unwrap();
    let options = ConnectionOptions::default();
    let mut sender = Connection::new(connection::Connection::from_stream(tx, options), &sharing)
        .expect("bind the sender's end");
    let mut receiver = Connection::new(connection::Connection::from_stream(rx, options), &sharing)
        .expect("bind the receiver's end");
    let message = |seed: u8| {
        Value::Tuple(
            vec![
                Value::Tensor(cases::contiguous(DType::Float32, &[512, 512], seed, false)),
                Value::Bytes(SharedBytes::from(vec![seed; 100_000])),
                Value::Bytes(SharedBytes::from(vec![seed; 10])),
            ]
            .into(),
        )
    };
    let sent: Vec<Value> = (1..=4).map(message).collect();
    let received: Vec<Value> = std::thread::scope(|scope| {
        scope.spawn(|| {
            for value in &sent {
                sender.send(value).unwrap();
            }
        });
        sent.iter().map(|_| receiver.recv().unwrap()).collect()
    });
    for (sent, received) in sent.iter().zip(&received) {
        cases::check_echo(sent, received).unwrap();
    }
}

#[test]
fn a_storage_not_in_this_process_is_refused() {
    let sharing = bytes_context(&Authkey::random().unwrap());
    let gone = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("compat/fixtures/torch-2.15.0/aliasing.fs.pkl");
    let remote = tensorshare::Registry::default()
        .loads(&std::fs::read(gone).unwrap())
        .unwrap();
    let error = sharing.dumps(&remote).unwrap_err().to_string();
    assert!(error.contains("not at hand"), "{error}");
}

#[test]
fn every_case_comes_back_intact_as_a_copy() {
    let authkey = Authkey::random().unwrap();
    let mut server = Server::echo(&authkey, "bytes");
    for sender in [StrategyKind::FileDescriptor, StrategyKind::Bytes] {
        let sharing = SharingContext::new(authkey.clone()).with_strategy(sender);
        let mut connection = server.connect(&sharing);
        support::assert_echoes_intact(&mut server, &mut connection, &sender.to_string());
        let sent = cases::contiguous(DType::Int64, &[8, 8], 9, true);
        let value =
            Value::List(vec![Value::Tensor(sent.clone()), Value::Tensor(sent.clone())].into());
        connection.send(&value).unwrap();
        let echoed = connection.recv().unwrap();
        cases::check_echo(&value, &echoed).unwrap();
        let tensors = echoed.tensors();
        assert_eq!(tensors.len(), 1, "{sender}: aliasing kept");
        let storage = tensors[0].storage();
        assert!(!storage.same_as(sent.storage()), "{sender}: a copy");
        assert_eq!(
            storage.local_kind(),
            Some(StrategyKind::Bytes),
            "{sender}: private memory, not a shared segment"
        );
        assert_eq!(storage.bytes(), sent.storage().bytes());
    }
}

#[test]
fn stock_torch_drives_tensorshare_echo() {
    let Some(python) = test_python("bytes_strategy::stock_torch_drives_tensorshare_echo") else {
        return;
    };
    let authkey = Authkey::random().unwrap();
    let mut server = Server::echo(&authkey, "bytes");
    let stdout = support::torch_drives(
        &python,
        &mut server,
        &authkey,
        &["--strategy", "bytes", "--hostile", "--repeat", "500"],
    );
    assert!(stdout.contains("ok zero_copy"), "{stdout}");
}

#[test]
fn tensorshare_sends_bytes_to_a_stock_torch_echo() {
    let Some(python) = test_python("bytes_strategy::tensorshare_sends_bytes_to_a_stock_torch_echo")
    else {
        return;
    };
    let authkey = Authkey::random().unwrap();
    let mut server = Server::torch_echo(&python, &authkey, "file_descriptor");
    let sharing = bytes_context(&authkey);
    let mut connection = server.connect(&sharing);
    // torch rebuilds our plain pickles and answers by file_descriptor.
    support::assert_echoes_intact(&mut server, &mut connection, "torch echo");
}

/// A 2 MiB uint8 tensor of `byte`, pickled with the bytes strategy, and
/// where its raw bytes start in the pickle (after `BYTEARRAY8`'s 8-byte
/// count).
fn large_bytes_pickle(sharing: &SharingContext, byte: u8) -> (Vec<u8>, usize) {
    const LEN: usize = 2 << 20;
    let storage = tensorshare::model::Storage::from_vec(vec![byte; LEN]);
    let tensor = tensorshare::Tensor::new(
        storage,
        tensorshare::model::TensorView::contiguous(DType::UInt8, &[LEN]),
    )
    .unwrap();
    let pickle = sharing.dumps(&Value::Tensor(tensor)).unwrap();
    let start = pickle
        .windows(64)
        .position(|w| w.iter().all(|b| *b == byte))
        .expect("the raw bytes are in the pickle");
    assert_eq!(
        pickle[start - 8..start],
        (LEN as u64).to_le_bytes(),
        "the count before the raw bytes"
    );
    (pickle, start)
}

#[test]
fn large_storages_received_are_intact_while_held_and_after_others_are_dropped() {
    // A large storage that is most of its message keeps the message's
    // buffer rather than a copy; the next message must land elsewhere, and
    // a dropped storage's buffer may serve a later message.
    let sharing = bytes_context(&Authkey::random().unwrap());
    let (mut sender, mut receiver) = support::connection_pair(&sharing, &sharing);
    let pickles: Vec<Vec<u8>> = (1..=6).map(|i| large_bytes_pickle(&sharing, i).0).collect();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for pickle in &pickles {
                sender.get_mut().send_bytes(pickle).unwrap();
            }
        });
        let mut held = Vec::new();
        for (index, expected) in (1..=6u8).enumerate() {
            let value = receiver.recv().unwrap();
            let tensor = value.as_tensor().unwrap().clone();
            let bytes = tensor.storage().bytes().unwrap();
            assert_eq!(bytes.len(), 2 << 20);
            assert!(bytes.iter().all(|b| *b == expected), "message {index}");
            // Every other one is kept while the rest arrive.
            if index % 2 == 0 {
                held.push((expected, tensor));
            }
        }
        for (expected, tensor) in held {
            let bytes = tensor.storage().bytes().unwrap();
            assert!(bytes.iter().all(|b| *b == expected), "held {expected}");
        }
    });
}

#[test]
fn a_large_storage_whose_count_lies_or_whose_message_is_cut_short_is_refused() {
    let sharing = bytes_context(&Authkey::random().unwrap());
    let (pickle, start) = large_bytes_pickle(&sharing, 0x5a);
    // The stream's count says one byte more than the stream holds, or
    // more than memory could: refused without allocating it.
    for count in [(2u64 << 20) + 1, u64::MAX, 1 << 62] {
        let mut lying = pickle.clone();
        lying[start - 8..start].copy_from_slice(&count.to_le_bytes());
        let (mut sender, mut receiver) = support::connection_pair(&sharing, &sharing);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                sender.get_mut().send_bytes(&lying).unwrap();
                sender.get_mut().send_bytes(&pickle).unwrap();
            });
            let error = receiver.recv().unwrap_err().to_string();
            assert!(
                error.contains("bytes") || error.contains("pickle refused"),
                "{count}: {error}"
            );
            // The connection serves the next message, a good one.
            let value = receiver.recv().unwrap();
            let bytes = value.as_tensor().unwrap().storage().bytes().unwrap();
            assert!(bytes.iter().all(|b| *b == 0x5a));
        });
    }
    // A frame that promises the whole pickle and ends halfway.
    let (sender, mut receiver) = support::connection_pair(&sharing, &sharing);
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let mut stream = sender.into_inner().into_stream();
        let len = i32::try_from(pickle.len()).unwrap();
        stream.write_all(&len.to_be_bytes()).unwrap();
        stream.write_all(&pickle[..pickle.len() / 2]).unwrap();
    });
    let error = receiver.recv().unwrap_err().to_string();
    writer.join().unwrap();
    assert!(
        error.contains("closed") || error.contains("short") || error.contains("bytes"),
        "{error}"
    );
}
