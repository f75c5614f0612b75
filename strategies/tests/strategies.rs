//! The conformance suite run against every strategy.
//!
//! To add a strategy: implement `ConformanceStrategy` for it below and add
//! one `conformance_tests!` line.

#[macro_use]
mod conformance;
mod support;

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use conformance::ConformanceStrategy;
use tensorshare_strategies::bytes::BytesStrategy;
use tensorshare_strategies::file_descriptor::{FileDescriptorStrategy, FileIdentity};
use tensorshare_strategies::file_system::{FileSystemStrategy, SegmentHandle, SegmentName};
use tensorshare_strategies::memmap::{MemmapHandle, MemmapStrategy};
use tensorshare_strategies::platform::fd_passing::{recv_fd_batch, send_fd_batch};
use tensorshare_strategies::services::shm_manager::ManagerHandle;

conformance_tests!(file_descriptor, FileDescriptorStrategy);
conformance_tests!(bytes, BytesStrategy);
conformance_tests!(file_system, FileSystemStrategy);
conformance_tests!(memmap, MemmapStrategy);
#[cfg(tensorshare_tmpfile)]
conformance_tests!(tmpfile, TmpfileStrategy);

impl ConformanceStrategy for FileDescriptorStrategy {
    fn for_test() -> Self {
        FileDescriptorStrategy
    }

    fn send_handle(stream: &UnixStream, fd: OwnedFd) {
        send_fd_batch(stream.as_fd(), &[fd.as_fd()]).expect("send the fd");
    }

    fn recv_handle(stream: &UnixStream) -> OwnedFd {
        let mut fds = recv_fd_batch(stream.as_fd(), 1).expect("receive the fd");
        fds.pop().expect("one fd")
    }
}

impl ConformanceStrategy for BytesStrategy {
    fn for_test() -> Self {
        BytesStrategy
    }

    fn send_handle(stream: &UnixStream, bytes: Vec<u8>) {
        send_part(stream, &bytes);
    }

    fn recv_handle(stream: &UnixStream) -> Vec<u8> {
        recv_part(stream)
    }
}

impl ConformanceStrategy for FileSystemStrategy {
    fn for_test() -> Self {
        support::file_system_strategy()
    }

    fn send_handle(stream: &UnixStream, handle: SegmentHandle) {
        let (manager, name) = handle.into_parts();
        send_part(stream, manager.as_bytes());
        send_part(stream, name.as_str().as_bytes());
    }

    fn recv_handle(stream: &UnixStream) -> SegmentHandle {
        let manager = ManagerHandle::from_bytes(&recv_part(stream)).expect("a manager handle");
        let name = SegmentName::parse(&recv_part(stream)).expect("a segment name");
        SegmentHandle::received(manager, name)
    }
}

impl ConformanceStrategy for MemmapStrategy {
    /// Files in the default directory, as the type-erased door makes them.
    fn for_test() -> Self {
        MemmapStrategy::default()
    }

    fn send_handle(stream: &UnixStream, handle: MemmapHandle) {
        send_part(stream, handle.path_str().expect("UTF-8 path").as_bytes());
        let identity = handle
            .identity()
            .expect("an exported handle knows its file");
        send_u64(stream, identity.dev);
        send_u64(stream, identity.ino);
    }

    fn recv_handle(stream: &UnixStream) -> MemmapHandle {
        let path = String::from_utf8(recv_part(stream)).expect("UTF-8 path");
        let identity = FileIdentity {
            dev: recv_u64(stream),
            ino: recv_u64(stream),
        };
        MemmapHandle::received(path).with_identity(identity)
    }
}

#[cfg(tensorshare_tmpfile)]
use tensorshare_strategies::tmpfile::TmpfileStrategy;

#[cfg(tensorshare_tmpfile)]
impl ConformanceStrategy for TmpfileStrategy {
    fn for_test() -> Self {
        TmpfileStrategy::default()
    }

    fn send_handle(stream: &UnixStream, fd: OwnedFd) {
        FileDescriptorStrategy::send_handle(stream, fd);
    }

    fn recv_handle(stream: &UnixStream) -> OwnedFd {
        FileDescriptorStrategy::recv_handle(stream)
    }
}

fn send_u64(mut stream: &UnixStream, value: u64) {
    stream
        .write_all(&value.to_le_bytes())
        .expect("send a number");
}

fn recv_u64(mut stream: &UnixStream) -> u64 {
    let mut bytes = [0u8; 8];
    stream.read_exact(&mut bytes).expect("receive a number");
    u64::from_le_bytes(bytes)
}

/// Sends `bytes` after their length, for [`recv_part`].
fn send_part(mut stream: &UnixStream, bytes: &[u8]) {
    send_u64(stream, u64::try_from(bytes.len()).expect("length fits u64"));
    stream.write_all(bytes).expect("send the bytes");
}

fn recv_part(mut stream: &UnixStream) -> Vec<u8> {
    let len = usize::try_from(recv_u64(stream)).expect("length fits usize");
    assert!(len <= 1 << 20, "test handles are small");
    let mut bytes = vec![0u8; len];
    stream.read_exact(&mut bytes).expect("receive the bytes");
    bytes
}
