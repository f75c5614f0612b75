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
use tensorshare_strategies::file_descriptor::{FileDescriptorStrategy, FileIdentity};
use tensorshare_strategies::file_system::{FileSystemStrategy, SegmentHandle, SegmentName};
use tensorshare_strategies::memmap::{MemmapHandle, MemmapStrategy};
use tensorshare_strategies::shm_manager::{self, ManagerHandle, ManagerServer, ServeOptions};

conformance_tests!(file_descriptor, FileDescriptorStrategy);
conformance_tests!(bytes, BytesStrategy);
conformance_tests!(file_system, FileSystemStrategy);
conformance_tests!(memmap, MemmapStrategy);

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

impl ConformanceStrategy for FileSystemStrategy {
    /// Segments registered with a manager serving on a thread of this test
    /// process, at a socket under cargo's per-target scratch directory; it
    /// is this process's own manager for the type-erased door too.
    fn for_test() -> Self {
        static MANAGER: std::sync::Once = std::sync::Once::new();
        MANAGER.call_once(|| {
            let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("manager-{}.sock", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let server = ManagerServer::bind(&path).expect("bind the test manager");
            let handle = server.handle().clone();
            let idle = std::time::Duration::from_secs(3600);
            std::thread::spawn(move || {
                server.serve(ServeOptions::default().with_idle_timeout(idle))
            });
            let connection = shm_manager::connect(&handle).expect("connect to the test manager");
            shm_manager::set_own_manager(connection);
        });
        FileSystemStrategy::default()
    }

    fn send_handle(mut stream: &UnixStream, handle: SegmentHandle) {
        let (manager, name) = handle.into_parts();
        for part in [manager.as_bytes(), name.as_str().as_bytes()] {
            let len = u8::try_from(part.len()).expect("handles are short");
            stream.write_all(&[len]).expect("send a length");
            stream.write_all(part).expect("send a part");
        }
    }

    fn recv_handle(mut stream: &UnixStream) -> SegmentHandle {
        let mut part = || {
            let mut len = [0u8; 1];
            stream.read_exact(&mut len).expect("receive a length");
            let mut bytes = vec![0u8; usize::from(len[0])];
            stream.read_exact(&mut bytes).expect("receive a part");
            bytes
        };
        let manager = ManagerHandle::from_bytes(&part()).expect("a manager handle");
        let name = SegmentName::parse(&part()).expect("a segment name");
        SegmentHandle::received(manager, name)
    }
}

impl ConformanceStrategy for MemmapStrategy {
    /// Files in the default directory, as the type-erased door makes them.
    fn for_test() -> Self {
        MemmapStrategy::default()
    }

    fn send_handle(mut stream: &UnixStream, handle: MemmapHandle) {
        let path = handle.path_str().expect("UTF-8 path").as_bytes();
        let len = u16::try_from(path.len()).expect("paths are short");
        stream.write_all(&len.to_le_bytes()).expect("send a length");
        stream.write_all(path).expect("send the path");
        let identity = handle
            .identity()
            .expect("an exported handle knows its file");
        stream
            .write_all(&identity.dev.to_le_bytes())
            .expect("send st_dev");
        stream
            .write_all(&identity.ino.to_le_bytes())
            .expect("send st_ino");
    }

    fn recv_handle(mut stream: &UnixStream) -> MemmapHandle {
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).expect("receive a length");
        let mut path = vec![0u8; usize::from(u16::from_le_bytes(len))];
        stream.read_exact(&mut path).expect("receive the path");
        let mut number = || {
            let mut bytes = [0u8; 8];
            stream
                .read_exact(&mut bytes)
                .expect("receive an identity part");
            u64::from_le_bytes(bytes)
        };
        let identity = FileIdentity {
            dev: number(),
            ino: number(),
        };
        MemmapHandle::received(String::from_utf8(path).expect("UTF-8 path")).with_identity(identity)
    }
}
