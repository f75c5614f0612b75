//! `SharingContext::allocate` reuses a memfd once every process it went to
//! has said it no longer maps it, and never before: not while a receiver
//! holds the storage, not after a receiver sent it on, not when the fd was
//! fetched through the resource sharer as a Python receiver fetches it.

mod support;

use std::time::Duration;

use tensorshare::model::{Storage, TensorView};
use tensorshare::{Authkey, Connection, DType, SharingContext, StrategyKind, Tensor, Value};
use tensorshare_strategies::file_descriptor::{FdSegment, FileIdentity};

use support::{eventually, wait_until};

const NBYTES: usize = 4096;

/// A producer and a consumer sharing one authkey, with a connection from
/// the first to the second.
fn producer_and_consumer() -> (SharingContext, SharingContext, Connection, Connection) {
    let authkey = Authkey::random().unwrap();
    let producer = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let consumer = SharingContext::new(authkey).with_strategy(StrategyKind::FileDescriptor);
    let (tx, rx) = support::connection_pair(&producer, &consumer);
    (producer, consumer, tx, rx)
}

/// Waits until `count` keys were reported unmapped to `sharing`'s sharer.
fn await_unmapped(sharing: &SharingContext, count: u64) {
    eventually("the receivers report their storages unmapped", || {
        sharing
            .sharer_stats()
            .is_some_and(|stats| stats.unmapped == count)
    });
}

/// A storage allocated through `sharing`, checked zero-filled, then every
/// byte `byte`.
fn filled(sharing: &SharingContext, byte: u8) -> Storage {
    support::allocated_filled(sharing, NBYTES, byte)
}

fn identity(storage: &Storage) -> FileIdentity {
    storage
        .local_segment::<FdSegment>()
        .expect("a memfd")
        .identity()
}

/// Sends `storage` as a tensor from `sender` to `receiver`, each through
/// its own context; the storage received.
fn send(storage: &Storage, sender: &mut Connection, receiver: &mut Connection) -> Storage {
    let tensor = Tensor::new(
        storage.clone(),
        TensorView::contiguous(DType::UInt8, &[NBYTES]),
    )
    .expect("tensor");
    sender.send(&Value::Tensor(tensor)).expect("send");
    let received = receiver.recv().expect("recv");
    received.as_tensor().expect("a tensor").storage().clone()
}

/// Whether `sharing` hands out the memfd `identity` again; the storage it
/// handed out is dropped.
fn reuses(sharing: &SharingContext, identity: FileIdentity) -> bool {
    self::identity(&filled(sharing, 0)) == identity
}

#[test]
fn a_memfd_both_ends_dropped_is_allocated_again_zeroed() {
    let (producer, _consumer, mut tx, mut rx) = producer_and_consumer();
    let sent = filled(&producer, 7);
    let first = identity(&sent);
    let received = send(&sent, &mut tx, &mut rx);
    assert_eq!(received.bytes(), Some(&[7; NBYTES][..]));
    drop((sent, received));
    await_unmapped(&producer, 1);
    // Zero-filled and the same memory (`filled` checks the zeros).
    assert!(reuses(&producer, first));
}

#[test]
fn a_memfd_its_receiver_still_holds_is_not_reused() {
    let (producer, _consumer, mut tx, mut rx) = producer_and_consumer();
    let sent = filled(&producer, 1);
    let first = identity(&sent);
    let held = send(&sent, &mut tx, &mut rx);
    drop(sent);
    // Long past the receiver's batching window: nothing to report.
    std::thread::sleep(Duration::from_millis(200));
    let other = filled(&producer, 0);
    assert_ne!(identity(&other), first);
    assert_eq!(held.bytes(), Some(&[1; NBYTES][..]), "its bytes are intact");

    // Once it goes, the memfd comes back.
    drop(held);
    await_unmapped(&producer, 1);
    assert!(reuses(&producer, first));
}

#[test]
fn a_memfd_its_receiver_sent_on_is_not_reused() {
    let authkey = Authkey::random().unwrap();
    let producer = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let relay = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let last = SharingContext::new(authkey).with_strategy(StrategyKind::FileDescriptor);
    let (mut tx, mut rx) = support::connection_pair(&producer, &relay);
    let (mut relay_tx, mut last_rx) = support::connection_pair(&relay, &last);
    let sent = filled(&producer, 2);
    let first = identity(&sent);
    let relayed = send(&sent, &mut tx, &mut rx);
    let at_last = send(&relayed, &mut relay_tx, &mut last_rx);
    drop((sent, relayed));
    // The last receiver reports to the relay, which did not make the memfd;
    // the producer hears nothing however long it waits.
    drop(at_last);
    await_unmapped(&relay, 1);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(producer.sharer_stats().map(|stats| stats.unmapped), Some(0));
    assert!(!reuses(&producer, first));
}

#[test]
fn a_memfd_fetched_through_the_resource_sharer_is_not_reused() {
    // Without attached fds the receiver fetches each one from the sender's
    // resource sharer, as a Python receiver does, and reports nothing.
    let authkey = Authkey::random().unwrap();
    let producer = SharingContext::new(authkey.clone())
        .with_strategy(StrategyKind::FileDescriptor)
        .with_inline_fds(false);
    let consumer = SharingContext::new(authkey);
    let (mut tx, mut rx) = support::connection_pair(&producer, &consumer);
    let sent = filled(&producer, 3);
    let first = identity(&sent);
    let received = send(&sent, &mut tx, &mut rx);
    // The sharer counts a key served once the fd is on its way, which may
    // be after the receiver already has it.
    assert!(wait_until(Duration::from_secs(5), || {
        producer.sharer_stats().map(|stats| stats.served) == Some(1)
    }));
    drop((sent, received));
    assert!(!wait_until(Duration::from_millis(300), || {
        producer
            .sharer_stats()
            .is_some_and(|stats| stats.unmapped > 0)
    }));
    assert!(!reuses(&producer, first));
}

#[test]
fn a_stream_reuses_a_few_memfds_and_every_tensor_arrives_intact() {
    let (producer, _consumer, mut tx, mut rx) = producer_and_consumer();
    let mut memfds = std::collections::HashSet::new();
    for round in 0..20_u8 {
        for index in 0..50_u8 {
            let byte = round.wrapping_mul(50).wrapping_add(index);
            let sent = filled(&producer, byte);
            memfds.insert(identity(&sent));
            let received = send(&sent, &mut tx, &mut rx);
            assert!(
                received
                    .bytes()
                    .is_some_and(|b| b.iter().all(|&x| x == byte)),
                "tensor {byte} arrived changed"
            );
        }
        // Let the reports of this round arrive.
        await_unmapped(&producer, u64::from(round + 1) * 50);
    }
    assert!(
        memfds.len() < 200,
        "1000 tensors took {} memfds",
        memfds.len()
    );
}
