//! Unit tests of `client`.
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;

use nix::errno::Errno;

use super::*;
use crate::services::shm_manager::{ALLOC_INFO_SIZE, AllocInfo};

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
    let mut received = [0u8; ALLOC_INFO_SIZE];
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
    assert_eq!(AllocInfo::decode(&received), Ok(AllocInfo::register(name)));
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
