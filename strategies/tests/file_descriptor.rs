//! `file_descriptor` behaviour beyond the conformance suite: running out of
//! fds.

mod support;

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use tensorshare_strategies::file_descriptor::FileDescriptorStrategy;
use tensorshare_strategies::platform::fd_passing::{RecvFdsError, recv_fd_batch, send_fd_batch};
use tensorshare_strategies::{AllocateError, Errno, Exhausted, ExportError, SharingStrategy};

const ACTIONABLE: &str = "too many open files: raise `ulimit -n` or use the file_system strategy";

#[test]
fn fd_exhaustion_is_a_clean_actionable_error() {
    if !support::is_child() {
        // The fd limit is per process: lower it in a child, not in the harness.
        support::run_self("fd_exhaustion_is_a_clean_actionable_error");
        return;
    }
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    let (sender, receiver) = UnixStream::pair().expect("socketpair");
    let limit = u64::try_from(support::open_fd_count()).expect("count fits") + 8;
    setrlimit(Resource::RLIMIT_NOFILE, limit, hard).expect("lower RLIMIT_NOFILE");

    let strategy = FileDescriptorStrategy;
    let mut held = Vec::new();
    let err = loop {
        match strategy.allocate(4096) {
            Ok(segment) => held.push(segment),
            Err(err) => break err,
        }
        assert!(
            held.len() <= 64,
            "the fd limit of {limit} was never reached"
        );
    };
    assert_eq!(
        err,
        AllocateError::Exhausted {
            nbytes: 4096,
            limit: Exhausted::FileDescriptors(Errno::EMFILE)
        }
    );
    assert!(err.to_string().contains(ACTIONABLE), "{err}");

    let first = held.first().expect("some segments before the limit");
    let err = strategy.export(first).expect_err("export needs a new fd");
    assert_eq!(
        err,
        ExportError::TooManyOpenFiles {
            errno: Errno::EMFILE
        }
    );
    assert!(err.to_string().contains(ACTIONABLE), "{err}");

    // The kernel cannot install a received fd into a full table: it drops it
    // and truncates the control message.
    send_fd_batch(sender.as_fd(), &[first.fd().expect("own fd")]).expect("send");
    let err = recv_fd_batch(receiver.as_fd(), 1).expect_err("receive into a full table");
    assert_eq!(err, RecvFdsError::ControlTruncated { arrived: 0 });
    assert!(err.to_string().contains("raise `ulimit -n`"), "{err}");

    // Releasing gives the fds back.
    drop(held);
    strategy.allocate(4096).expect("allocate after releasing");
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).expect("restore RLIMIT_NOFILE");
    println!("{}", support::CHILD_DONE);
}
