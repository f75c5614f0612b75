//! `SharingContext::allocate` under `file_system` hands a segment out again
//! once the count in its header is back at the creator's own, and never
//! before: not while a receiver, tensorshare or stock torch, maps it, nor
//! while a message naming it waits to be opened. Reused segments stay
//! registered with the manager and leave nothing in `/dev/shm` once their
//! context is gone.

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use tensorshare::{
    Authkey, Connection, DType, SharingContext, Storage, StrategyKind, Tensor, TensorView, Value,
};
use tensorshare_strategies::file_system::FileSystemSegment;

use support::{exit_within, test_python};

const NBYTES: usize = 4096;

fn fs_context(authkey: &Authkey) -> SharingContext {
    support::build_manager_executable();
    SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileSystem)
}

/// A storage allocated through `sharing`, checked zero-filled, then every
/// byte `byte`.
fn filled(sharing: &SharingContext, byte: u8) -> Storage {
    let mut writer = sharing.allocate(NBYTES).expect("allocate");
    assert!(
        writer.as_bytes_mut().iter().all(|&b| b == 0),
        "allocated bytes are zero"
    );
    writer.as_bytes_mut().fill(byte);
    writer.freeze()
}

fn segment(storage: &Storage) -> &FileSystemSegment {
    storage
        .local_segment::<FileSystemSegment>()
        .expect("a file_system segment")
}

/// The segment's name, e.g. `/torch_1234_..._0`.
fn name(storage: &Storage) -> String {
    segment(storage).name().to_string()
}

fn shm_path(name: &str) -> PathBuf {
    PathBuf::from("/dev/shm").join(name.trim_start_matches('/'))
}

fn tensor(storage: &Storage) -> Value {
    Value::Tensor(
        Tensor::new(
            storage.clone(),
            TensorView::contiguous(DType::UInt8, &[NBYTES]),
        )
        .expect("tensor"),
    )
}

fn received_storage(value: &Value) -> Storage {
    value.as_tensor().expect("a tensor").storage().clone()
}

/// Whether `sharing` hands out the segment `name` for the next storage of
/// its size; the storage it handed out is dropped.
fn reuses(sharing: &SharingContext, name: &str) -> bool {
    self::name(&filled(sharing, 0)) == name
}

#[test]
fn a_segment_its_rust_receiver_maps_is_reused_only_once_it_lets_go() {
    let authkey = Authkey::random().unwrap();
    let (producer, consumer) = (fs_context(&authkey), fs_context(&authkey));
    let (mut tx, mut rx) = support::connection_pair();
    let sent = filled(&producer, 7);
    let first = name(&sent);
    tx.send(&tensor(&sent), &producer).expect("send");
    let held = received_storage(&rx.recv(&consumer).expect("recv"));
    drop(sent);
    assert_eq!(
        segment(&held).refcount(),
        2,
        "the pool's count and the receiver's"
    );
    assert!(!reuses(&producer, &first));
    assert_eq!(held.bytes(), Some(&[7; NBYTES][..]), "its bytes are intact");

    drop(held);
    let again = filled(&producer, 8);
    assert_eq!(name(&again), first, "the same segment, zeroed");
    assert!(shm_path(&first).exists());
    // The reused segment travels as before.
    tx.send(&tensor(&again), &producer).expect("send");
    let second = received_storage(&rx.recv(&consumer).expect("recv"));
    assert_eq!(second.bytes(), Some(&[8; NBYTES][..]));
}

#[test]
fn a_message_not_yet_opened_keeps_its_segment_out_of_reuse() {
    let authkey = Authkey::random().unwrap();
    let (producer, consumer) = (fs_context(&authkey), fs_context(&authkey));
    let (mut tx, mut rx) = support::connection_pair();
    let sent = filled(&producer, 3);
    let first = name(&sent);
    tx.send(&tensor(&sent), &producer).expect("send");
    // Nobody maps it but this process, and the message still counts it.
    drop(sent);
    assert!(!reuses(&producer, &first));
    let received = received_storage(&rx.recv(&consumer).expect("recv"));
    assert_eq!(received.bytes(), Some(&[3; NBYTES][..]), "what was sent");
    drop(received);
    assert!(reuses(&producer, &first));
}

#[test]
fn a_stream_reuses_a_few_segments_and_leaves_nothing_behind() {
    let authkey = Authkey::random().unwrap();
    let (producer, consumer) = (fs_context(&authkey), fs_context(&authkey));
    let (mut tx, mut rx) = support::connection_pair();
    let mut names = std::collections::HashSet::new();
    for index in 0..500_u32 {
        let byte = (index % 251) as u8;
        let sent = filled(&producer, byte);
        names.insert(name(&sent));
        tx.send(&tensor(&sent), &producer).expect("send");
        let received = received_storage(&rx.recv(&consumer).expect("recv"));
        assert!(
            received
                .bytes()
                .is_some_and(|b| b.iter().all(|&x| x == byte)),
            "tensor {index} arrived changed"
        );
    }
    assert!(
        names.len() <= 2,
        "500 tensors took {} segments",
        names.len()
    );
    drop((producer, consumer));
    for name in &names {
        assert!(!shm_path(name).exists(), "{name} left in /dev/shm");
    }
}

/// A stock torch consumer: holds every tensor it receives, answering with
/// its first byte, until told `release`, which drops them all and answers
/// `released`; `exit` ends it.
const TORCH_HOLDER: &str = r#"
import gc, sys
from multiprocessing.connection import Client
import torch, torch.multiprocessing
conn = Client(sys.argv[1], authkey=bytes.fromhex(sys.argv[2]))
held = []
while True:
    message = conn.recv()
    if message == "release":
        held.clear()
        gc.collect()
        conn.send("released")
    elif message == "exit":
        break
    else:
        held.append(message)
        conn.send(int(message[0]))
"#;

/// torch's answer, as Python's `repr` would show it.
fn expect_reply(connection: &mut Connection, sharing: &SharingContext, expected: &str) {
    let reply = connection.recv(sharing).expect("torch answers");
    let shown = match &reply {
        Value::Int(n) => n.to_string(),
        Value::Str(s) => format!("{s:?}"),
        other => format!("{other:?}"),
    };
    assert_eq!(shown, expected);
}

#[test]
fn a_segment_a_torch_receiver_holds_is_reused_only_once_it_lets_go() {
    let Some(python) =
        test_python("a_segment_a_torch_receiver_holds_is_reused_only_once_it_lets_go")
    else {
        return;
    };
    let authkey = Authkey::random().unwrap();
    let sharing = fs_context(&authkey);
    let listener = sharing.listen_in_private_dir().expect("listen");
    let address = listener
        .address()
        .as_path()
        .expect("a path")
        .to_str()
        .expect("UTF-8")
        .to_string();
    let mut torch = Command::new(&python)
        .args(["-c", TORCH_HOLDER, &address, &authkey.to_hex()])
        .stdin(Stdio::null())
        .spawn()
        .expect("start python");
    let mut connection = listener.accept().expect("torch connects");

    let sent = filled(&sharing, 7);
    let first = name(&sent);
    connection.send(&tensor(&sent), &sharing).expect("send");
    expect_reply(&mut connection, &sharing, "7");
    drop(sent);
    // torch maps it: another segment for the next storage.
    let other = filled(&sharing, 5);
    assert_ne!(name(&other), first);

    connection
        .send(&Value::Str("release".into()), &sharing)
        .expect("send");
    expect_reply(&mut connection, &sharing, "\"released\"");
    let again = filled(&sharing, 9);
    assert_eq!(name(&again), first, "the segment torch let go of, zeroed");
    // torch maps the reused segment anew and sees the new bytes.
    connection.send(&tensor(&again), &sharing).expect("send");
    expect_reply(&mut connection, &sharing, "9");
    drop(again);
    assert!(!reuses(&sharing, &first), "torch holds it again");

    connection
        .send(&Value::Str("release".into()), &sharing)
        .expect("send");
    expect_reply(&mut connection, &sharing, "\"released\"");
    assert!(reuses(&sharing, &first));

    connection
        .send(&Value::Str("exit".into()), &sharing)
        .expect("send");
    let status = exit_within(&mut torch, Duration::from_secs(30)).expect("torch exits");
    assert!(status.success(), "{status}");
    drop((other, sharing));
    assert!(!shm_path(&first).exists(), "{first} left in /dev/shm");
}
