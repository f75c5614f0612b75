//! `SharingContext::allocate` hands a `file_system` segment or a `memmap`
//! file out again once nobody else can see it, and never before: not while
//! a receiver, tensorshare or stock torch, maps it, nor while a message
//! naming it waits to be opened. Under `file_system` the count in the
//! segment's header tells; under `memmap` the opens the kernel saw. Reused
//! segments stay registered with the manager, a Rust receiver maps one sent
//! again through the mapping it kept, and neither leaves anything in
//! `/dev/shm` or the memmap directory once its context is gone.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tensorshare::model::{Storage, TensorView};
use tensorshare::{Authkey, Connection, DType, SharingContext, StrategyKind, Tensor, Value};
use tensorshare_strategies::file_system::FileSystemSegment;
use tensorshare_strategies::memmap::MemmapSegment;

use support::{exit_within, test_python};

const NBYTES: usize = 4096;

/// Where the contexts of a test share: `file_system`, or `memmap` files in
/// a directory of the test's own.
struct Shared {
    kind: StrategyKind,
    dir: tempfile::TempDir,
}

impl Shared {
    fn file_system() -> Self {
        support::build_manager_executable();
        Self::new(StrategyKind::FileSystem)
    }

    fn memmap() -> Self {
        Self::new(StrategyKind::Memmap)
    }

    fn new(kind: StrategyKind) -> Self {
        Self {
            kind,
            dir: tempfile::tempdir().expect("a memmap directory"),
        }
    }

    fn context(&self, authkey: &Authkey) -> SharingContext {
        SharingContext::new(authkey.clone())
            .with_strategy(self.kind)
            .with_memmap_dir(self.dir.path())
            .expect("a memmap directory")
    }

    /// Whether the object `name` (a segment name, or a file's path) is
    /// still there.
    fn exists(&self, name: &str) -> bool {
        match self.kind {
            StrategyKind::FileSystem => Path::new("/dev/shm")
                .join(name.trim_start_matches('/'))
                .exists(),
            _ => PathBuf::from(name).exists(),
        }
    }
}

/// A storage allocated through `sharing`, checked zero-filled, then every
/// byte `byte`.
fn filled(sharing: &SharingContext, byte: u8) -> Storage {
    support::allocated_filled(sharing, NBYTES, byte)
}

/// The name of the shared object the storage maps: a `file_system`
/// segment's name, or a `memmap` file's path.
fn name(storage: &Storage) -> String {
    if let Some(segment) = storage.local_segment::<FileSystemSegment>() {
        return segment.name().to_string();
    }
    let file = storage
        .local_segment::<MemmapSegment>()
        .expect("a file_system segment or a memmap file");
    file.path().display().to_string()
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

/// Whether `sharing` hands out the object `name` for the next storage of
/// its size; the storage it handed out is dropped.
fn reuses(sharing: &SharingContext, name: &str) -> bool {
    self::name(&filled(sharing, 0)) == name
}

#[test]
fn a_segment_its_rust_receiver_maps_is_reused_only_once_it_lets_go() {
    let shared = Shared::file_system();
    let held = held_by_a_rust_receiver(&shared);
    assert_eq!(
        held.local_segment::<FileSystemSegment>()
            .expect("a segment")
            .refcount(),
        1,
        "the receiver's count alone: the sender's went with its context"
    );
}

#[test]
fn a_file_its_rust_receiver_maps_is_reused_only_once_it_lets_go() {
    held_by_a_rust_receiver(&Shared::memmap());
}

/// Runs the test of a Rust receiver holding what it received; returns the
/// storage it received last.
fn held_by_a_rust_receiver(shared: &Shared) -> Storage {
    let authkey = Authkey::random().unwrap();
    let (producer, consumer) = (shared.context(&authkey), shared.context(&authkey));
    let (mut tx, mut rx) = support::connection_pair(&producer, &consumer);
    let sent = filled(&producer, 7);
    let first = name(&sent);
    tx.send(&tensor(&sent)).expect("send");
    let held = received_storage(&rx.recv().expect("recv"));
    drop(sent);
    assert!(!reuses(&producer, &first));
    assert_eq!(held.bytes(), Some(&[7; NBYTES][..]), "its bytes are intact");

    drop(held);
    let again = filled(&producer, 8);
    assert_eq!(name(&again), first, "the same object, zeroed");
    // The reused object travels as before.
    tx.send(&tensor(&again)).expect("send");
    let second = received_storage(&rx.recv().expect("recv"));
    assert_eq!(second.bytes(), Some(&[8; NBYTES][..]));
    // The sender's end holds the producer's context too.
    drop((again, tx, producer));
    second
}

/// How many of this process's mappings map `/dev/shm/NAME`.
fn mappings_of(name: &str) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let path = format!("/dev/shm{name}");
    maps.lines().filter(|line| line.ends_with(&path)).count()
}

#[test]
fn a_segment_sent_again_arrives_in_the_mapping_its_receiver_kept() {
    let shared = Shared::file_system();
    let authkey = Authkey::random().unwrap();
    let (producer, consumer) = (shared.context(&authkey), shared.context(&authkey));
    let (mut tx, mut rx) = support::connection_pair(&producer, &consumer);
    let mut send_and_drop = |byte: u8| {
        let sent = filled(&producer, byte);
        tx.send(&tensor(&sent)).expect("send");
        let received = received_storage(&rx.recv().expect("recv"));
        assert_eq!(received.bytes(), Some(&[byte; NBYTES][..]));
        let name = name(&sent);
        let mapped = mappings_of(&name);
        drop((sent, received));
        let kept = mappings_of(&name);
        (name, mapped, kept)
    };
    // The first time, the receiver lets the mapping go: nothing says the
    // segment will come back.
    let (first, mapped, kept) = send_and_drop(5);
    assert_eq!((mapped, kept), (2, 1), "the producer's and the receiver's");
    // It came back: now the receiver keeps its mapping, counting for
    // nothing, so that the segment is still free to reuse.
    let (name, mapped, kept) = send_and_drop(6);
    assert_eq!(name, first);
    assert_eq!((mapped, kept), (2, 2));
    // And the next time it arrives through that mapping.
    let (name, mapped, kept) = send_and_drop(7);
    assert_eq!(name, first);
    assert_eq!((mapped, kept), (2, 2), "mapped through the kept mapping");
    // Shutting the receiver's context down lets its kept mapping go.
    consumer.shutdown();
    assert_eq!(mappings_of(&first), 1, "the producer's alone");
    // The sender's end holds the producer's context too.
    drop((tx, producer));
    assert!(!shared.exists(&first), "{first} left behind");
}

#[test]
fn a_message_not_yet_opened_keeps_its_segment_out_of_reuse() {
    in_flight(&Shared::file_system());
}

#[test]
fn a_message_not_yet_opened_keeps_its_file_out_of_reuse() {
    in_flight(&Shared::memmap());
}

fn in_flight(shared: &Shared) {
    let authkey = Authkey::random().unwrap();
    let (producer, consumer) = (shared.context(&authkey), shared.context(&authkey));
    let (mut tx, mut rx) = support::connection_pair(&producer, &consumer);
    let sent = filled(&producer, 3);
    let first = name(&sent);
    tx.send(&tensor(&sent)).expect("send");
    // Nobody maps it but this process, and the message still counts it.
    drop(sent);
    assert!(!reuses(&producer, &first));
    let received = received_storage(&rx.recv().expect("recv"));
    assert_eq!(received.bytes(), Some(&[3; NBYTES][..]), "what was sent");
    drop(received);
    assert!(reuses(&producer, &first));
}

#[test]
fn a_stream_reuses_a_few_segments_and_leaves_nothing_behind() {
    streamed(&Shared::file_system());
}

#[test]
fn a_stream_reuses_a_few_files_and_leaves_nothing_behind() {
    let shared = Shared::memmap();
    streamed(&shared);
    assert_eq!(support::files_in(shared.dir.path()), Vec::<PathBuf>::new());
}

fn streamed(shared: &Shared) {
    let authkey = Authkey::random().unwrap();
    let (producer, consumer) = (shared.context(&authkey), shared.context(&authkey));
    let (mut tx, mut rx) = support::connection_pair(&producer, &consumer);
    let mut names = std::collections::HashSet::new();
    for index in 0..500_u32 {
        let byte = (index % 251) as u8;
        let sent = filled(&producer, byte);
        names.insert(name(&sent));
        tx.send(&tensor(&sent)).expect("send");
        let received = received_storage(&rx.recv().expect("recv"));
        assert!(
            received
                .bytes()
                .is_some_and(|b| b.iter().all(|&x| x == byte)),
            "tensor {index} arrived changed"
        );
    }
    assert!(names.len() <= 2, "500 tensors took {} objects", names.len());
    // Each end holds its context too.
    drop((tx, rx, producer, consumer));
    for name in &names {
        assert!(!shared.exists(name), "{name} left behind");
    }
}

#[test]
fn a_segment_its_receiver_sent_on_is_reused_only_once_all_let_go() {
    sent_on(&Shared::file_system(), true);
}

#[test]
fn a_file_its_receiver_sent_on_is_never_reused() {
    sent_on(&Shared::memmap(), false);
}

/// A producer's storage goes to a relay, which sends it on and holds it;
/// the last receiver lets go. The producer never hears of the relay's
/// message: under `file_system` the count tells, under `memmap` the mark
/// the relay left on the file does.
fn sent_on(shared: &Shared, reused_in_the_end: bool) {
    let authkey = Authkey::random().unwrap();
    let producer = shared.context(&authkey);
    let relay = shared.context(&authkey);
    let last = shared.context(&authkey);
    let (mut tx, mut rx) = support::connection_pair(&producer, &relay);
    let (mut relay_tx, mut last_rx) = support::connection_pair(&relay, &last);
    let sent = filled(&producer, 4);
    let first = name(&sent);
    tx.send(&tensor(&sent)).expect("send");
    let relayed = received_storage(&rx.recv().expect("recv"));
    relay_tx.send(&tensor(&relayed)).expect("send on");
    let at_last = received_storage(&last_rx.recv().expect("recv"));
    assert_eq!(at_last.bytes(), Some(&[4; NBYTES][..]));
    drop((sent, at_last));
    assert!(!reuses(&producer, &first), "the relay still maps it");
    assert_eq!(
        relayed.bytes(),
        Some(&[4; NBYTES][..]),
        "its bytes are intact"
    );
    drop(relayed);
    assert_eq!(reuses(&producer, &first), reused_in_the_end);
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
fn expect_reply(connection: &mut Connection, expected: &str) {
    let reply = connection.recv().expect("torch answers");
    let shown = match &reply {
        Value::Int(n) => n.to_string(),
        Value::Str(s) => format!("{s:?}"),
        other => format!("{other:?}"),
    };
    assert_eq!(shown, expected);
}

#[test]
fn a_segment_a_torch_receiver_holds_is_reused_only_once_it_lets_go() {
    if let Some(python) =
        test_python("a_segment_a_torch_receiver_holds_is_reused_only_once_it_lets_go")
    {
        held_by_torch(&python, &Shared::file_system());
    }
}

#[test]
fn a_file_a_torch_receiver_holds_is_reused_only_once_it_lets_go() {
    if let Some(python) =
        test_python("a_file_a_torch_receiver_holds_is_reused_only_once_it_lets_go")
    {
        let shared = Shared::memmap();
        held_by_torch(&python, &shared);
        assert_eq!(support::files_in(shared.dir.path()), Vec::<PathBuf>::new());
    }
}

fn held_by_torch(python: &str, shared: &Shared) {
    let authkey = Authkey::random().unwrap();
    let sharing = shared.context(&authkey);
    let listener = sharing.listen_in_private_dir().expect("listen");
    let address = listener
        .address()
        .as_path()
        .expect("a path")
        .to_str()
        .expect("UTF-8")
        .to_string();
    let mut torch = Command::new(python)
        .args(["-c", TORCH_HOLDER, &address, &authkey.to_hex()])
        .stdin(Stdio::null())
        .spawn()
        .expect("start python");
    let mut connection = listener.accept().expect("torch connects");

    let sent = filled(&sharing, 7);
    let first = name(&sent);
    connection.send(&tensor(&sent)).expect("send");
    expect_reply(&mut connection, "7");
    drop(sent);
    // torch maps it: another segment for the next storage.
    let other = filled(&sharing, 5);
    assert_ne!(name(&other), first);

    connection
        .send(&Value::Str("release".into()))
        .expect("send");
    expect_reply(&mut connection, "\"released\"");
    let again = filled(&sharing, 9);
    assert_eq!(name(&again), first, "the object torch let go of, zeroed");
    // torch maps the reused segment anew and sees the new bytes.
    connection.send(&tensor(&again)).expect("send");
    expect_reply(&mut connection, "9");
    drop(again);
    assert!(!reuses(&sharing, &first), "torch holds it again");

    connection
        .send(&Value::Str("release".into()))
        .expect("send");
    expect_reply(&mut connection, "\"released\"");
    assert!(reuses(&sharing, &first));

    connection.send(&Value::Str("exit".into())).expect("send");
    let status = exit_within(&mut torch, Duration::from_secs(30)).expect("torch exits");
    assert!(status.success(), "{status}");
    // The connection and the listener hold the context too.
    drop((other, connection, listener, sharing));
    assert!(!shared.exists(&first), "{first} left behind");
}
