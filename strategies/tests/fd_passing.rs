//! fd passing: edge cases, leaks, and interoperation with CPython's
//! `multiprocessing.reduction.sendfds` / `recvfds`.

mod support;
#[path = "../../tests/support/test_python.rs"]
mod test_python;

use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use tensorshare_strategies::file_descriptor::{FdSegment, FileDescriptorStrategy};
use tensorshare_strategies::platform::fd_passing::{
    MAX_FDS_PER_MESSAGE, RecvFdsError, SendFdsError, recv_fd_batch, recv_with_fds, send_fd_batch,
    send_with_fds,
};
use tensorshare_strategies::{Segment, SharingStrategy, WritableSegment};
use test_python::test_python;

/// Tests here count this process's fds, so they run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn segment_with(bytes: &[u8]) -> FdSegment {
    let mut segment = FileDescriptorStrategy
        .allocate(bytes.len())
        .expect("allocate");
    segment.as_bytes_mut().copy_from_slice(bytes);
    segment
}

fn send_n(socket: BorrowedFd<'_>, fd: BorrowedFd<'_>, count: usize) {
    let fds = vec![fd; count];
    send_with_fds(socket, b"x", &fds).expect("send");
}

#[test]
fn fds_and_data_round_trip() {
    let _serial = serial();
    let (left, right) = UnixStream::pair().expect("socketpair");
    let segments = [
        segment_with(b"one"),
        segment_with(b"two"),
        segment_with(b"three"),
    ];
    let fds: Vec<BorrowedFd<'_>> = segments.iter().filter_map(FdSegment::fd).collect();
    assert_eq!(send_with_fds(left.as_fd(), b"hello", &fds), Ok(5));
    let mut buf = [0u8; 16];
    let (received, fds) = recv_with_fds(right.as_fd(), &mut buf, 3).expect("receive");
    assert_eq!(&buf[..received], b"hello");
    for (fd, segment) in fds.into_iter().zip(&segments) {
        let len = segment.len();
        let imported = FileDescriptorStrategy.import(fd, len).expect("import");
        assert_eq!(imported.identity(), segment.identity());
        assert_eq!(imported.as_bytes(), segment.as_bytes());
    }
    // Plain data needs no fds on either side.
    assert_eq!(send_with_fds(left.as_fd(), b"plain", &[]), Ok(5));
    let (received, fds) = recv_with_fds(right.as_fd(), &mut buf, 0).expect("receive");
    assert_eq!((&buf[..received], fds.len()), (&b"plain"[..], 0));
}

#[test]
fn surplus_and_truncated_fds_are_all_closed() {
    let _serial = serial();
    let (left, right) = UnixStream::pair().expect("socketpair");
    let segment = segment_with(b"data");
    let before = support::open_fd_count();
    let mut buf = [0u8; 1];

    // A few more than asked fit in the control buffer: counted, then closed.
    send_n(left.as_fd(), segment.fd().expect("own fd"), 2);
    let err = recv_with_fds(right.as_fd(), &mut buf, 1).unwrap_err();
    assert_eq!(err, RecvFdsError::TooManyFds { arrived: 2, max: 1 });
    assert_eq!(support::open_fd_count(), before);

    // Far more than asked: the kernel truncates; what arrived is closed.
    send_n(left.as_fd(), segment.fd().expect("own fd"), 40);
    let err = recv_with_fds(right.as_fd(), &mut buf, 1).unwrap_err();
    assert!(
        matches!(err, RecvFdsError::ControlTruncated { .. }),
        "{err:?}"
    );
    assert_eq!(support::open_fd_count(), before);

    // No room at all.
    send_n(left.as_fd(), segment.fd().expect("own fd"), 1);
    let err = recv_with_fds(right.as_fd(), &mut buf, 0).unwrap_err();
    assert_eq!(err, RecvFdsError::ControlTruncated { arrived: 0 });
    assert_eq!(support::open_fd_count(), before);

    // A count byte that disagrees with the fds.
    send_with_fds(left.as_fd(), &[3], &[segment.fd().expect("own fd")]).expect("send");
    let err = recv_fd_batch(right.as_fd(), 4).unwrap_err();
    assert_eq!(
        err,
        RecvFdsError::BatchCountMismatch {
            announced: 3,
            arrived: 1
        }
    );
    assert_eq!(support::open_fd_count(), before);
}

#[test]
fn batch_errors() {
    let _serial = serial();
    let (left, right) = UnixStream::pair().expect("socketpair");
    let segment = segment_with(b"data");
    assert_eq!(send_fd_batch(left.as_fd(), &[]), Err(SendFdsError::NoFds));
    assert_eq!(
        send_with_fds(left.as_fd(), b"", &[segment.fd().expect("own fd")]),
        Err(SendFdsError::EmptyData)
    );
    let too_many = vec![segment.fd().expect("own fd"); MAX_FDS_PER_MESSAGE + 1];
    assert_eq!(
        send_fd_batch(left.as_fd(), &too_many),
        Err(SendFdsError::TooManyFds {
            count: MAX_FDS_PER_MESSAGE + 1
        })
    );
    let most = vec![segment.fd().expect("own fd"); MAX_FDS_PER_MESSAGE];
    send_fd_batch(left.as_fd(), &most).expect("the largest batch");
    let fds = recv_fd_batch(right.as_fd(), MAX_FDS_PER_MESSAGE).expect("receive");
    assert_eq!(fds.len(), MAX_FDS_PER_MESSAGE);
    drop(fds);

    send_with_fds(left.as_fd(), b"x", &[]).expect("send");
    assert_eq!(
        recv_fd_batch(right.as_fd(), 1).unwrap_err(),
        RecvFdsError::MissingFds
    );
    drop(left);
    assert_eq!(
        recv_fd_batch(right.as_fd(), 1).unwrap_err(),
        RecvFdsError::EndOfStream
    );
    let (peerless, closed) = UnixStream::pair().expect("socketpair");
    drop(closed);
    let err = send_fd_batch(peerless.as_fd(), &[segment.fd().expect("own fd")]).unwrap_err();
    assert!(matches!(err, SendFdsError::PeerClosed { .. }), "{err:?}");
}

/// The Python side of the interop test: receives Rust's fd with `recvfds`,
/// writes into it, and sends fds of its own with `sendfds`.
const PYTHON_PEER: &str = r#"
import mmap, os, socket, sys
from multiprocessing import reduction

sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(sys.argv[1])

(fd,) = reduction.recvfds(sock, 1)
with mmap.mmap(fd, os.fstat(fd).st_size) as m:
    assert m[:9] == b"from rust", bytes(m[:16])
    m[:11] = b"from python"
os.close(fd)

own = os.memfd_create("interop")
os.ftruncate(own, 4096)
os.pwrite(own, b"python memfd", 0)
reduction.sendfds(sock, [own])
reduction.sendfds(sock, [own, own, own])

fds = reduction.recvfds(sock, 2)
assert len(fds) == 2, fds
sizes = sorted(os.fstat(f).st_size for f in fds)
assert sizes == [4096, 8192], sizes
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    # What torch.multiprocessing's rebuild_storage_fd does with a received fd.
    for f in fds:
        size = os.fstat(f).st_size
        storage = torch.UntypedStorage._new_shared_fd_cpu(os.dup(f), size)
        assert storage.nbytes() == size and storage[0] in (ord("f"), 1), storage[:4]
sock.sendall(b"done")
"#;

#[test]
fn interoperates_with_cpython_sendfds_and_recvfds() {
    let Some(python) = test_python("interoperates_with_cpython_sendfds_and_recvfds") else {
        return;
    };
    let _serial = serial();
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("interop.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    listener
        .set_nonblocking(true)
        .expect("nonblocking listener");
    let mut child = Command::new(&python)
        .arg("-c")
        .arg(PYTHON_PEER)
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("run {python}: {err}"));
    let stream = support::wait_for(&mut child, || listener.accept().ok().map(|(s, _)| s));
    stream.set_nonblocking(false).expect("blocking stream");
    // On failure, Python's traceback explains more than the Rust side.
    let exchange = std::panic::catch_unwind(|| exchange_with_python_peer(stream));
    let output = child.wait_with_output().expect("wait for python");
    assert!(
        output.status.success() && exchange.is_ok(),
        "python peer ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The Rust side of [`PYTHON_PEER`].
fn exchange_with_python_peer(mut stream: UnixStream) {
    let mut ours = segment_with(&[0u8; 4096]);
    ours.as_bytes_mut()[..9].copy_from_slice(b"from rust");
    let handle = FileDescriptorStrategy.export(&ours).expect("export");
    send_fd_batch(stream.as_fd(), &[handle.as_fd()]).expect("send to python");

    let fd = single(recv_fd_batch(stream.as_fd(), 1).expect("receive from python"));
    let theirs = FileDescriptorStrategy
        .import(fd, 4096)
        .expect("import python's memfd");
    assert_eq!(&theirs.as_bytes()[..12], b"python memfd");
    assert_eq!(&ours.as_bytes()[..11], b"from python");

    let batch = recv_fd_batch(stream.as_fd(), 3).expect("receive a batch of three");
    for fd in batch {
        let segment = FileDescriptorStrategy.import(fd, 4096).expect("import");
        assert_eq!(segment.identity(), theirs.identity());
    }

    let larger = segment_with(&[1u8; 8192]);
    send_fd_batch(
        stream.as_fd(),
        &[ours.fd().expect("own fd"), larger.fd().expect("own fd")],
    )
    .expect("send two");
    let mut done = Vec::new();
    stream.read_to_end(&mut done).expect("read python's reply");
    assert_eq!(done, b"done");
}

fn single(mut fds: Vec<OwnedFd>) -> OwnedFd {
    assert_eq!(fds.len(), 1);
    fds.pop().expect("one fd")
}
