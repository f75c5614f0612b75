//! The manager's side of pipelined registrations: the probe answered only
//! as a session's first message, registrations after it unanswered but
//! kept, even from a client that dies at once.

use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

use super::tests::{Running, TestSegment, eventually, message, read_ok};
use crate::services::shm_manager::ManagerConnection;
use crate::services::shm_manager::pipeline::{PIPELINE_ACK, pipeline_probe};

#[test]
fn the_probe_is_acked_and_registrations_after_it_are_not_answered() {
    let manager = Running::start(Duration::from_millis(300));
    let segment = TestSegment::create();
    let mut stream = manager.raw_client();
    let mut batch = pipeline_probe(4242).to_vec();
    for _ in 0..3 {
        batch.extend_from_slice(&message(false, &segment.0));
    }
    stream.write_all(&batch).unwrap();
    let mut ack = [0u8; 2];
    stream.read_exact(&mut ack).unwrap();
    assert_eq!(ack, PIPELINE_ACK);
    stream.write_all(&message(false, &segment.0)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut more = [0u8; 1];
    let silent = stream.read(&mut more).unwrap_err();
    assert!(
        matches!(silent.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{silent}"
    );
    drop(stream);
    let report = manager.finish();
    assert_eq!(report.registrations, 4);
    assert_eq!(report.rejected_clients, 0);
}

#[test]
fn a_probe_after_the_first_message_is_a_free_of_nothing() {
    let manager = Running::start(Duration::from_millis(300));
    let segment = TestSegment::create();
    let mut stream = manager.raw_client();
    stream.write_all(&message(false, &segment.0)).unwrap();
    read_ok(&mut stream);
    let mut batch = pipeline_probe(4242).to_vec();
    batch.extend_from_slice(&message(false, &segment.0));
    stream.write_all(&batch).unwrap();
    // libshm's answer: `OK` for the registration, nothing for the "free".
    read_ok(&mut stream);
    drop(stream);
    let report = manager.finish();
    assert_eq!(report.registrations, 2);
    assert_eq!(report.rejected_clients, 0);
}

#[test]
fn a_client_that_dies_right_after_sending_still_has_its_names_unlinked() {
    let manager = Running::start(Duration::from_millis(300));
    let keeper = ManagerConnection::open(&manager.handle).unwrap();
    let segments: Vec<_> = (0..8).map(|_| TestSegment::create()).collect();
    let client = ManagerConnection::open(&manager.handle).unwrap();
    for segment in &segments {
        client.register(&segment.0).unwrap();
    }
    assert!(client.pipelines_registrations());
    // Closed with nothing waited for since the first registration: what
    // was sent is in the manager's queue before the end of the stream.
    drop(client);
    for segment in &segments {
        assert!(
            eventually(Duration::from_secs(5), || !segment.exists()),
            "{} outlived its only registrant",
            segment.0
        );
    }
    drop(keeper);
    let report = manager.finish();
    assert_eq!(report.registrations, 8);
}

#[test]
fn our_client_pipelines_with_our_manager() {
    let manager = Running::start(Duration::from_millis(300));
    let segment = TestSegment::create();
    let connection = ManagerConnection::open(&manager.handle).unwrap();
    assert!(!connection.pipelines_registrations());
    connection.register(&segment.0).unwrap();
    assert!(connection.pipelines_registrations());
    connection.unregister(&segment.0);
    drop(connection);
    assert_eq!(manager.finish().registrations, 1);
}
