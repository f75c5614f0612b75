//! Unit tests of `client`.
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;

use nix::errno::Errno;

use super::*;
use crate::services::shm_manager::pipeline::{PIPELINE_ACK, pipeline_probe};
use crate::services::shm_manager::{ALLOC_INFO_SIZE, AllocInfo};
use nix::unistd::getpid;

fn listener() -> (tempfile::TempDir, ManagerHandle, UnixListener) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.sock");
    let listener = UnixListener::bind(&path).unwrap();
    (dir, ManagerHandle::from_path(&path).unwrap(), listener)
}

#[test]
fn a_manager_that_answers_garbage_breaks_the_connection() {
    let (_dir, handle, listener) = listener();
    let connection = ManagerConnection::open(&handle).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    peer.write_all(b"NO").unwrap();
    let err = connection.register(&SegmentName::fresh()).unwrap_err();
    assert!(
        matches!(&err, ManagerError::UnexpectedReply { reply, .. } if reply == "NO"),
        "{err}"
    );
    assert!(connection.is_broken());
    let again = connection.register(&SegmentName::fresh()).unwrap_err();
    assert!(matches!(again, ManagerError::Broken { .. }), "{again}");
    // Unregistering a broken connection is silent.
    connection.unregister(&SegmentName::fresh());
}

#[test]
fn a_manager_that_hangs_up_is_reported_closed() {
    let (_dir, handle, listener) = listener();
    let connection = ManagerConnection::open(&handle).unwrap();
    let (peer, _) = listener.accept().unwrap();
    let mut received = [0u8; 2 * ALLOC_INFO_SIZE];
    let reader = std::thread::spawn(move || {
        let mut peer = peer;
        peer.read_exact(&mut received).unwrap();
        drop(peer);
        received
    });
    let name = SegmentName::fresh();
    let err = connection.register(&name).unwrap_err();
    assert!(matches!(err, ManagerError::Closed { .. }), "{err}");
    let received = reader.join().unwrap();
    // The first registration follows the probe, in the same send.
    let (probe, registration) = received.split_at(ALLOC_INFO_SIZE);
    assert_eq!(probe, pipeline_probe(getpid().as_raw()));
    let registration: [u8; ALLOC_INFO_SIZE] = registration.try_into().unwrap();
    assert_eq!(
        AllocInfo::decode(&registration),
        Ok(AllocInfo::register(name))
    );
}

#[test]
fn a_late_ok_is_consumed_by_the_next_registration() {
    let (_dir, handle, listener) = listener();
    let connection = ManagerConnection::open(&handle).unwrap();
    connection.lock().link.reply_timeout = Duration::from_millis(100);
    let (mut peer, _) = listener.accept().unwrap();
    let err = connection.register(&SegmentName::fresh()).unwrap_err();
    assert!(matches!(err, ManagerError::ReplyTimeout { .. }), "{err}");
    assert!(!connection.is_broken());
    // The next reply waits on a thread that a loaded machine may be slow to
    // run: time enough.
    connection.lock().link.reply_timeout = Duration::from_secs(10);
    // The late OK and the next one, split across writes.
    peer.write_all(b"OKO").unwrap();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        peer.write_all(b"K").unwrap();
        peer
    });
    connection
        .register(&SegmentName::fresh())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut peer = writer.join().unwrap();
    let mut both = [0u8; 2 * ALLOC_INFO_SIZE];
    peer.read_exact(&mut both).unwrap();
    assert!(!connection.is_broken());
}

#[test]
fn nothing_listening_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let handle = ManagerHandle::from_path(dir.path().join("none.sock")).unwrap();
    let err = ManagerConnection::open(&handle).unwrap_err();
    assert!(
        matches!(
            err,
            ManagerError::Connect {
                errno: Errno::ENOENT,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn connect_keeps_one_connection_per_manager() {
    let (_dir, handle, listener) = listener();
    let a = connect(&handle).unwrap();
    let b = connect(&handle).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    listener.set_nonblocking(true).unwrap();
    let _first = listener.accept().unwrap();
    assert!(listener.accept().is_err(), "a second connection was made");
}

#[test]
fn an_unusable_environment_handle_names_the_variable() {
    let err = handle_from_env(OsStr::new("relative.sock")).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("TENSORSHARE_SHM_MANAGER"), "{message}");
}

/// Reads the probe and the first registration from a hand-made manager.
fn read_probe_and_registration(peer: &mut UnixStream) -> [u8; 2 * ALLOC_INFO_SIZE] {
    let mut both = [0u8; 2 * ALLOC_INFO_SIZE];
    peer.read_exact(&mut both).unwrap();
    assert_eq!(&both[..ALLOC_INFO_SIZE], &pipeline_probe(getpid().as_raw()));
    both
}

#[test]
fn a_manager_that_acks_the_probe_gets_registrations_without_waiting() {
    let (_dir, handle, listener) = listener();
    let connection = ManagerConnection::open(&handle).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    assert!(!connection.pipelines_registrations());
    peer.write_all(&PIPELINE_ACK).unwrap();
    connection.register(&SegmentName::fresh()).unwrap();
    read_probe_and_registration(&mut peer);
    assert!(connection.pipelines_registrations());
    // Nothing will answer these: a wait would time out.
    connection.lock().link.reply_timeout = Duration::from_millis(1);
    let names: Vec<_> = (0..3).map(|_| SegmentName::fresh()).collect();
    for name in &names {
        connection.register(name).unwrap_or_else(|e| panic!("{e}"));
    }
    for name in &names {
        let mut message = [0u8; ALLOC_INFO_SIZE];
        peer.read_exact(&mut message).unwrap();
        assert_eq!(
            AllocInfo::decode(&message),
            Ok(AllocInfo::register(name.clone()))
        );
    }
    assert!(!connection.is_broken());
}

#[test]
fn a_manager_that_answers_ok_keeps_every_registration_answered() {
    let (_dir, handle, listener) = listener();
    let connection = ManagerConnection::open(&handle).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    peer.write_all(b"OK").unwrap();
    connection.register(&SegmentName::fresh()).unwrap();
    read_probe_and_registration(&mut peer);
    assert!(!connection.pipelines_registrations());
    connection.lock().link.reply_timeout = Duration::from_millis(50);
    let err = connection.register(&SegmentName::fresh()).unwrap_err();
    assert!(matches!(err, ManagerError::ReplyTimeout { .. }), "{err}");
    // Only the first answer may be the ack.
    peer.write_all(&PIPELINE_ACK).unwrap();
    let err = connection.register(&SegmentName::fresh()).unwrap_err();
    assert!(matches!(err, ManagerError::UnexpectedReply { .. }), "{err}");
    assert!(connection.is_broken());
}

#[test]
fn a_late_ack_settles_the_next_registration() {
    let (_dir, handle, listener) = listener();
    let connection = ManagerConnection::open(&handle).unwrap();
    connection.lock().link.reply_timeout = Duration::from_millis(50);
    let (mut peer, _) = listener.accept().unwrap();
    let err = connection.register(&SegmentName::fresh()).unwrap_err();
    assert!(matches!(err, ManagerError::ReplyTimeout { .. }), "{err}");
    assert!(!connection.pipelines_registrations());
    read_probe_and_registration(&mut peer);
    // Until the answer comes, no registration is sent: which kind it would
    // be is not known.
    peer.set_nonblocking(true).unwrap();
    let err = connection.register(&SegmentName::fresh()).unwrap_err();
    assert!(matches!(err, ManagerError::ReplyTimeout { .. }), "{err}");
    let mut nothing = [0u8; 1];
    let read = peer.read(&mut nothing).unwrap_err();
    assert_eq!(read.kind(), std::io::ErrorKind::WouldBlock);
    peer.set_nonblocking(false).unwrap();

    peer.write_all(&PIPELINE_ACK).unwrap();
    let name = SegmentName::fresh();
    connection.register(&name).unwrap_or_else(|e| panic!("{e}"));
    assert!(connection.pipelines_registrations());
    let mut message = [0u8; ALLOC_INFO_SIZE];
    peer.read_exact(&mut message).unwrap();
    assert_eq!(AllocInfo::decode(&message), Ok(AllocInfo::register(name)));
}

#[test]
fn frees_go_out_with_the_next_registration_or_at_close() {
    let (_dir, handle, listener) = listener();
    let connection = ManagerConnection::open(&handle).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    peer.write_all(&PIPELINE_ACK).unwrap();
    let first = SegmentName::fresh();
    connection.register(&first).unwrap();
    read_probe_and_registration(&mut peer);
    connection.unregister(&first);
    let next = SegmentName::fresh();
    connection.register(&next).unwrap();
    let mut messages = [0u8; 2 * ALLOC_INFO_SIZE];
    peer.read_exact(&mut messages).unwrap();
    let (free, registration) = messages.split_at(ALLOC_INFO_SIZE);
    let decode = |bytes: &[u8]| AllocInfo::decode(bytes.try_into().unwrap()).unwrap();
    assert_eq!(decode(free), AllocInfo::free(first));
    assert_eq!(decode(registration), AllocInfo::register(next.clone()));

    connection.unregister(&next);
    drop(connection);
    let mut rest = Vec::new();
    peer.read_to_end(&mut rest).unwrap();
    assert_eq!(decode(&rest), AllocInfo::free(next));
}

#[test]
fn a_connection_let_go_lingers_before_it_closes() {
    let (_dir, handle, listener) = listener();
    listener.set_nonblocking(true).unwrap();
    let first = connect(&handle).unwrap();
    let (mut accepted, _) = listener.accept().unwrap();
    drop(first);
    // Within the linger, the same connection: no second accept.
    let again = connect(&handle).unwrap();
    assert!(listener.accept().is_err(), "a second connection was made");
    drop(again);
    // Once idle for the linger, it closes: the manager reads the end.
    accepted.set_read_timeout(Some(linger::LINGER * 5)).unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(accepted.read(&mut byte).unwrap(), 0);
}
