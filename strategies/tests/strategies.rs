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
use tensorshare_strategies::fd_passing::{recv_fd_batch, send_fd_batch};
use tensorshare_strategies::file_descriptor::FileDescriptorStrategy;

conformance_tests!(file_descriptor, FileDescriptorStrategy);
conformance_tests!(bytes, BytesStrategy);

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

    fn send_handle(mut stream: &UnixStream, bytes: Vec<u8>) {
        let len = u64::try_from(bytes.len()).expect("length fits u64");
        stream
            .write_all(&len.to_le_bytes())
            .expect("send the length");
        stream.write_all(&bytes).expect("send the bytes");
    }

    fn recv_handle(mut stream: &UnixStream) -> Vec<u8> {
        let mut len = [0u8; 8];
        stream.read_exact(&mut len).expect("receive the length");
        let len = usize::try_from(u64::from_le_bytes(len)).expect("length fits usize");
        assert!(len <= 1 << 20, "test handles are small");
        let mut bytes = vec![0u8; len];
        stream.read_exact(&mut bytes).expect("receive the bytes");
        bytes
    }
}
