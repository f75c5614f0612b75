//! Fds attached to the message itself between tensorshare processes: the
//! receiver maps them without a round trip and gives the keys back, and
//! anything that does not pair up falls back to the resource sharer.

mod support;

use std::os::fd::AsFd;

use std::sync::Arc;

use tensorshare::model::Storage;
use tensorshare::{Authkey, Connection, DType, SharingContext, StrategyKind, Value};
use tensorshare_compat::pickle::{EncodeOptions, Node, NodeId, PickleBuilder, encode};
use tensorshare_strategies::file_descriptor::FileDescriptorStrategy;
use tensorshare_strategies::{SharingStrategy, WritableSegment};

use support::refusals::{expect_refused, unknown_global};
use support::{cases, open_fds, settle_unfetched};

/// A connected pair: (`sender`'s end, `receiver`'s end).
fn pair(sender: &SharingContext, receiver: &SharingContext) -> (Connection, Connection) {
    let listener = receiver.listen_in_private_dir().expect("bind listener");
    let address = listener.address().clone();
    let accepting = std::thread::spawn(move || listener.accept().expect("accept"));
    let client = sender.connect(&address).expect("connect");
    (client, accepting.join().expect("accept thread"))
}

fn tensor(seed: u8) -> Value {
    Value::Tensor(cases::contiguous(DType::Float32, &[64, 16], seed, true))
}

#[test]
fn attached_fds_are_mapped_and_their_keys_given_back() {
    let _counts = support::process_counts::making();
    let authkey = Authkey::random().expect("authkey");
    let sender = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let receiver = SharingContext::new(authkey);
    let (mut out, mut inbound) = pair(&sender, &receiver);
    for seed in 0..50 {
        let sent = tensor(seed);
        out.send(&sent).expect("send");
        let got = inbound.recv().expect("recv");
        cases::check_echo(&sent, &got).expect("same tensor");
    }
    assert_eq!(settle_unfetched(&sender), 0, "every key came back");
    // A release is counted once its request is served, which may be after
    // its keys left the table.
    let mut stats = None;
    support::wait_until(std::time::Duration::from_secs(5), || {
        stats = sender.sharer_stats();
        stats.is_some_and(|stats| stats.released == 50)
    });
    let stats = stats.expect("a sharer");
    assert_eq!((stats.served, stats.released), (0, 50), "{stats:?}");
}

/// Every case in one message: nested lists, dicts and tuples, views that
/// share a storage, parameters, a tensor twice. The receiver pairs each
/// attached fd with the `DupFd` its walk meets next, so this holds only
/// while the sender registers storages in that order: were two paired
/// crosswise, the storages being of one size, elements would differ, and
/// were one out of key order, it would be fetched.
#[test]
fn every_fd_of_a_nested_message_pairs_with_its_dup_fd() {
    let _counts = support::process_counts::making();
    let authkey = Authkey::random().expect("authkey");
    let sender = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let receiver = SharingContext::new(authkey);
    let (mut out, mut inbound) = pair(&sender, &receiver);
    let cases = cases::all(&cases::sharable_dtypes());
    let sent = Value::List(cases.into_iter().map(|case| case.value).collect());
    out.send(&sent).expect("send");
    let storages = sender.sharer_stats().expect("a sharer").pending;
    assert!(storages > 20, "{storages} storages in the message");
    let got = inbound.recv().expect("recv");
    cases::check_echo(&sent, &got).expect("every storage as sent");
    let mut stats = None;
    support::wait_until(std::time::Duration::from_secs(5), || {
        stats = sender.sharer_stats();
        stats.is_some_and(|stats| stats.released >= storages as u64)
    });
    let stats = stats.expect("a sharer");
    assert_eq!(stats.served, 0, "none fetched: {stats:?}");
}

#[test]
fn without_attached_fds_every_fd_is_fetched() {
    let _counts = support::process_counts::making();
    let authkey = Authkey::random().expect("authkey");
    let sender = SharingContext::new(authkey.clone())
        .with_strategy(StrategyKind::FileDescriptor)
        .with_inline_fds(false);
    let receiver = SharingContext::new(authkey);
    let (mut out, mut inbound) = pair(&sender, &receiver);
    for seed in 0..20 {
        let sent = tensor(seed);
        out.send(&sent).expect("send");
        let got = inbound.recv().expect("recv");
        cases::check_echo(&sent, &got).expect("same tensor");
    }
    // Each key counts as served once its fd is on the way, which may be
    // after the receiver has it.
    support::wait_until(std::time::Duration::from_secs(5), || {
        sender
            .sharer_stats()
            .is_some_and(|stats| stats.served == 20)
    });
    let stats = sender.sharer_stats().expect("a sharer");
    assert_eq!((stats.served, stats.released), (20, 0), "{stats:?}");
}

#[test]
fn fds_that_do_not_pair_are_closed_and_the_storage_fetched() {
    let _counts = support::process_counts::counting();
    let authkey = Authkey::random().expect("authkey");
    let sender = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let receiver = SharingContext::new(authkey);
    let (mut out, mut inbound) = pair(&sender, &receiver);
    let stray = std::fs::File::open("/proc/self/exe").expect("open");
    // Warm up, so that lazily made threads and sockets are counted.
    out.send(&tensor(0)).expect("send");
    inbound.recv().expect("recv");
    let before = open_fds(std::process::id());
    let rounds = 100;
    for seed in 0..rounds {
        let sent = tensor(seed);
        let pickle = sender.dumps(&sent).expect("dumps");
        // One fd too many, then one unrelated fd in place of the memfd.
        let attached = if seed % 2 == 0 {
            vec![stray.as_fd(), stray.as_fd()]
        } else {
            vec![stray.as_fd()]
        };
        out.get_mut()
            .send_bytes_with_fds(&pickle, &attached)
            .expect("send");
        let got = inbound.recv().expect("recv");
        cases::check_echo(&sent, &got).expect("the sender's tensor, not the stray file");
    }
    support::wait_until(std::time::Duration::from_secs(5), || {
        sender
            .sharer_stats()
            .is_some_and(|stats| stats.served == u64::from(rounds))
    });
    let stats = sender.sharer_stats().expect("a sharer");
    assert_eq!(stats.served, u64::from(rounds), "{stats:?}");
    let after = open_fds(std::process::id());
    assert!(after <= before + 4, "fds grew from {before} to {after}");
}

/// `rebuild_storage_fd(torch.FloatStorage, DupFd, 4)` in `out`, as torch
/// before 1.13 wrote it: the size counts elements of the legacy class.
fn legacy_float_storage(out: &mut PickleBuilder, address: &str, key: i64) -> NodeId {
    let rebuild = out.global("torch.multiprocessing.reductions", "rebuild_storage_fd");
    let class = out.global("torch", "FloatStorage");
    let dup_fd_class = out.global("multiprocessing.resource_sharer", "DupFd");
    let address = out.push(Node::Str(address.into()));
    let key = out.push(Node::Int(key));
    let id = out.tuple(vec![address, key]);
    let id_name = out.push(Node::Str("_id".into()));
    let state = out.push(Node::Dict(vec![(id_name, id)]));
    let dup_fd = out.new_object_with_state(dup_fd_class, state);
    let size = out.int(4);
    out.call(rebuild, vec![class, dup_fd, size])
}

/// `out` with `root` as its result, encoded.
fn encoded(out: PickleBuilder, root: NodeId) -> Vec<u8> {
    encode(&out.finish(root), &EncodeOptions::new()).expect("encode")
}

/// The `(address, key)` of the one `DupFd` in `pickle`, as `sender` wrote
/// it for a storage it shares.
fn dup_fd_id(pickle: &[u8]) -> (String, i64) {
    use tensorshare_compat::pickle::{Limits, Node, decode};

    let decoded = decode(pickle, &|_: &str, _: &str| true, &Limits::default())
        .expect("decode")
        .pickle;
    let ids: Vec<(String, i64)> = decoded
        .iter()
        .filter_map(|(_, node)| match node {
            Node::Dict(pairs) => pairs.iter().find_map(|(name, id)| {
                matches!(decoded.get(*name), Some(Node::Str(name)) if name.as_str() == "_id")
                    .then_some(*id)
            }),
            _ => None,
        })
        .filter_map(|id| match decoded.get(id) {
            Some(Node::Tuple(items)) => match (decoded.get(items[0]), decoded.get(items[1])) {
                (Some(Node::Bytes(address)), Some(Node::Int(key))) => Some((
                    String::from_utf8(address.to_vec()).expect("an ASCII address"),
                    *key,
                )),
                (Some(Node::Str(address)), Some(Node::Int(key))) => {
                    Some((address.as_str().to_owned(), *key))
                }
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 1, "one DupFd: {ids:?}");
    ids.into_iter().next().expect("one")
}

#[test]
fn a_legacy_storage_class_counts_elements_when_attached() {
    let _counts = support::process_counts::making();
    let authkey = Authkey::random().expect("authkey");
    let sender = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let storage = sender.allocate(16).expect("allocate").freeze();
    let (address, key) = dup_fd_id(&sender.dumps(&Value::Storage(storage)).expect("dumps"));
    let receiver = SharingContext::new(authkey);
    // The address goes in as a str: for a sharer in the abstract namespace,
    // one with a leading NUL, which CPython's `Client` takes as well as the
    // bytes that tensorshare and CPython write.
    assert!(address.starts_with('\0'));
    let mut out = PickleBuilder::default();
    let storage = legacy_float_storage(&mut out, &address, key);
    let got = receiver.loads(&encoded(out, storage)).expect("loads");
    match got {
        Value::TypedStorage(storage, DType::Float32) => assert_eq!(storage.nbytes(), 16),
        other => panic!("expected a FloatStorage, got {other:?}"),
    }
}

/// Fds attached in key order pair with their keys whatever order the
/// message names them in: a message naming the later key first gets each
/// storage's own bytes, none fetched, where pairing in the order the
/// rebuild meets them would swap the two.
#[test]
fn attached_fds_pair_by_key_not_by_where_the_message_names_them() {
    let _counts = support::process_counts::making();
    let authkey = Authkey::random().expect("authkey");
    let sender = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let receiver = SharingContext::new(authkey);
    let (mut out, mut inbound) = pair(&sender, &receiver);
    let segments: Vec<_> = [1.0f32, 2.0]
        .into_iter()
        .map(|fill| {
            let mut segment = FileDescriptorStrategy.allocate(16).expect("a memfd");
            let elements: Vec<u8> = [fill; 4].iter().flat_map(|x| x.to_ne_bytes()).collect();
            segment.as_bytes_mut().copy_from_slice(&elements);
            Arc::new(segment)
        })
        .collect();
    // Each registered with the sender's sharer, the first under the
    // smaller key.
    let ids: Vec<(String, i64)> = segments
        .iter()
        .map(|segment| {
            let storage = Storage::from_segment(Arc::clone(segment) as _);
            dup_fd_id(&sender.dumps(&Value::Storage(storage)).expect("dumps"))
        })
        .collect();
    assert!(ids[0].1 < ids[1].1, "{ids:?}");

    let mut message = PickleBuilder::default();
    let later = legacy_float_storage(&mut message, &ids[1].0, ids[1].1);
    let earlier = legacy_float_storage(&mut message, &ids[0].0, ids[0].1);
    let both = message.tuple(vec![later, earlier]);
    let fds: Vec<_> = segments
        .iter()
        .map(|segment| segment.fd().expect("an fd"))
        .collect();
    out.get_mut()
        .send_bytes_with_fds(&encoded(message, both), &fds)
        .expect("send");
    let got = inbound.recv().expect("recv");
    let firsts: Vec<f32> = got
        .as_sequence()
        .expect("a tuple")
        .iter()
        .map(|storage| match storage {
            Value::TypedStorage(storage, DType::Float32) => {
                let bytes = storage.bytes().expect("mapped here");
                f32::from_ne_bytes(bytes[..4].try_into().expect("4 bytes"))
            }
            other => panic!("expected a FloatStorage, got {other:?}"),
        })
        .collect();
    assert_eq!(firsts, [2.0, 1.0], "each storage its own bytes");
    drop(got);
    // Both keys come back once the receipt is done; a fetch would have
    // been served by then.
    let mut stats = None;
    support::wait_until(std::time::Duration::from_secs(5), || {
        stats = sender.sharer_stats();
        stats.is_some_and(|stats| stats.released >= 2)
    });
    let stats = stats.expect("a sharer");
    assert_eq!(stats.served, 0, "none fetched: {stats:?}");
}

/// A message refused for a global its receiver does not allow still gives
/// its fds back to its sender's sharer: attached ones by their keys,
/// others fetched and closed, as if it had been received. A stock torch
/// sender's sharer, which has no deadline, would hold them until it exits.
#[test]
fn a_message_refused_for_a_global_gives_back_its_fds() {
    let _counts = support::process_counts::making();
    for inline in [true, false] {
        let authkey = Authkey::random().expect("authkey");
        let (registry, unknown) = unknown_global();
        let sender = SharingContext::new(authkey.clone())
            .with_strategy(StrategyKind::FileDescriptor)
            .with_inline_fds(inline)
            .with_registry(registry);
        let receiver = SharingContext::new(authkey);
        let (mut out, mut inbound) = pair(&sender, &receiver);
        out.send(&Value::from(vec![tensor(1), unknown, tensor(2)]))
            .expect("send");
        expect_refused(inbound.recv(), "__main__.Unknown");
        let given_back = support::wait_until(std::time::Duration::from_secs(5), || {
            sender
                .sharer_stats()
                .is_some_and(|stats| stats.served + stats.released == 2)
        });
        assert!(
            given_back,
            "inline {inline}: the fds were not given back: {:?}",
            sender.sharer_stats()
        );
        assert_eq!(settle_unfetched(&sender), 0, "inline {inline}");
    }
}
