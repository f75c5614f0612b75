//! A fresh segment's pages are populated before its writer touches one
//! (the platform's `populate`), so writing it takes no page faults.

use std::os::fd::AsFd;

use nix::sys::resource::{UsageWho, getrusage};

use nix::sys::memfd::{MFdFlags, memfd_create};

use super::FileDescriptorStrategy;
use crate::platform::mapping::SharedMapping;
use crate::{SharingStrategy, WritableSegment};

const PAGE: usize = 4096;

/// Minor page faults this thread takes writing all of `bytes`.
fn faults_writing(bytes: &mut [u8]) -> i64 {
    let faults = || {
        getrusage(UsageWho::RUSAGE_THREAD)
            .expect("getrusage")
            .minor_page_faults()
    };
    let before = faults();
    bytes.fill(7);
    faults() - before
}

#[test]
fn writing_a_plain_shared_mapping_faults_once_a_page() {
    // The control: without populating, the counter sees the faults.
    let pages = 64;
    let fd = memfd_create("populate-test", MFdFlags::MFD_CLOEXEC).expect("memfd");
    nix::unistd::ftruncate(&fd, (pages * PAGE) as i64).expect("ftruncate");
    // SAFETY: the memfd was just sized to the mapped length, and
    // nothing else holds it to shrink it.
    let mut mapping = unsafe { SharedMapping::map(fd.as_fd(), pages * PAGE) }.expect("map");
    let faults = faults_writing(mapping.as_mut_slice());
    assert!(
        faults >= pages as i64 / 2,
        "{faults} faults for {pages} pages"
    );
}

#[test]
fn a_fresh_segments_writer_takes_no_page_faults() {
    // One page, one thread's worth, and enough for several threads,
    // with a last chunk shorter than the others.
    for nbytes in [PAGE, 1 << 20, (40 << 20) + 3 * PAGE] {
        let mut segment = FileDescriptorStrategy.allocate(nbytes).expect("allocate");
        let faults = faults_writing(segment.as_bytes_mut());
        let pages = nbytes / PAGE;
        assert!(
            faults <= (pages / 100) as i64 + 1,
            "{faults} faults writing {pages} populated pages"
        );
    }
}
