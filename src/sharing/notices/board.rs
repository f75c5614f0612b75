//! Telling the senders of storages this process received when it no
//! longer maps them, so that they may reuse the memory
//! ([`memfds`](crate::sharing::pools)).
//!
//! Only storages whose fds arrived attached to their message are noticed:
//! only a tensorshare sender attaches fds, and a CPython sharer must never
//! get a tensorshare request (its serving thread would print a traceback).
//!
//! A noticed storage's mapping outlives it for a moment, dormant: its
//! sender reuses the memfd for a later tensor, and when that arrives here
//! it takes over the mapping, with no `mmap` and its pages still mapped.
//! The sender only needs to know that no storage here uses the memory; a
//! dormant mapping is never read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use tensorshare_strategies::SharingStrategy;
use tensorshare_strategies::file_descriptor::{
    DormantMapping, FdSegment, FileDescriptorStrategy, FileIdentity,
};

use super::releases::Releases;
use crate::sharing::pools::DormantMappings;
use crate::sharing::pools::watched::{Watched, Watcher};
use crate::sync::lock;

/// What this process owes the senders of the storages it received with
/// fds attached: the keys to report unmapped once each storage dies here.
#[derive(Debug)]
pub(crate) struct NoticeBoard {
    entries: Mutex<HashMap<FileIdentity, Notice>>,
    dormant: Mutex<DormantMappings<DormantMapping>>,
    releases: Weak<Releases>,
}

#[derive(Debug)]
struct Notice {
    /// The sender's sharer.
    address: Vec<u8>,
    /// The keys the storage arrived under, one per message.
    keys: Vec<i64>,
    /// Mappings of it alive here.
    mapped: usize,
    /// Whether it was sent on: another process may map it now, and only
    /// the sender's own receivers could say when it stops.
    sent_on: bool,
}

impl NoticeBoard {
    pub(crate) fn new(releases: Weak<Releases>) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            dormant: Mutex::new(DormantMappings::default()),
            releases,
        }
    }

    /// The dormant mapping of the file `identity`, if one is kept.
    pub(crate) fn take_dormant(&self, identity: FileIdentity) -> Option<DormantMapping> {
        // The guard goes as the statement ends, before what was evicted.
        let (mapping, evicted) = lock(&self.dormant).take(&identity, Instant::now());
        drop(evicted);
        mapping
    }

    /// Wraps a segment just mapped from an fd that arrived attached under
    /// `key` from the sharer at `address`.
    pub(crate) fn noticed(
        self: &Arc<Self>,
        segment: FdSegment,
        address: &[u8],
        key: i64,
    ) -> Watched<Self> {
        let identity = segment.identity();
        let mut entries = lock(&self.entries);
        let notice = entries.entry(identity).or_insert_with(|| Notice {
            address: address.to_vec(),
            keys: Vec::new(),
            mapped: 0,
            sent_on: false,
        });
        notice.mapped += 1;
        if notice.address == address {
            notice.keys.push(key);
        }
        drop(entries);
        Watched::new(segment, self)
    }

    /// Adds `key` for a storage already mapped here that arrived again.
    pub(crate) fn arrived_again(&self, identity: FileIdentity, address: &[u8], key: i64) {
        if let Some(notice) = lock(&self.entries).get_mut(&identity)
            && notice.address == address
        {
            notice.keys.push(key);
        }
    }

    /// Marks the storage `identity` as sent on: its sender hears nothing.
    pub(crate) fn sent_on(&self, identity: FileIdentity) {
        if let Some(notice) = lock(&self.entries).get_mut(&identity) {
            notice.sent_on = true;
        }
    }

    /// One mapping of `identity` is gone: when it was the last, and the
    /// storage was not sent on, the sharer and keys to report unmapped.
    fn due(&self, identity: FileIdentity) -> Option<(Vec<u8>, Vec<i64>)> {
        let mut entries = lock(&self.entries);
        let notice = entries.get_mut(&identity)?;
        notice.mapped = notice.mapped.saturating_sub(1);
        if notice.mapped > 0 {
            return None;
        }
        let notice = entries.remove(&identity)?;
        (!notice.sent_on).then_some((notice.address, notice.keys))
    }
}

impl Watcher for NoticeBoard {
    type Segment = FdSegment;

    /// Closes the segment's fd and keeps its mapping dormant, or unmaps it,
    /// before the sender hears: it may reuse the memory at once.
    fn ended(&self, segment: FdSegment) {
        let identity = segment.identity();
        let Some((address, keys)) = self.due(identity) else {
            return;
        };
        if let Some(dormant) = FileDescriptorStrategy.keep_dormant(segment) {
            let evicted = lock(&self.dormant).put(dormant, Instant::now());
            drop(evicted);
        }
        if let Some(releases) = self.releases.upgrade() {
            releases.unmapped(address, keys);
        }
    }
}

#[cfg(test)]
mod tests {
    use tensorshare_strategies::file_descriptor::FileDescriptorStrategy;
    use tensorshare_strategies::{Segment, SharingStrategy};

    use super::*;

    #[test]
    fn a_received_segment_is_due_when_its_last_mapping_goes() {
        let board = Arc::new(NoticeBoard::new(Weak::new()));
        let memfd = FileDescriptorStrategy.allocate(4096).expect("memfd");
        let identity = memfd.identity();
        let noticed = board.noticed(memfd, b"\0sharer", 5);
        assert!(noticed.as_any().downcast_ref::<FdSegment>().is_some());
        board.arrived_again(identity, b"\0sharer", 6);
        // Another sharer cannot vouch for this sender's memory.
        board.arrived_again(identity, b"\0elsewhere", 8);
        // A second mapping of the same memory (a longer view of it).
        let second = FileDescriptorStrategy.import(
            noticed
                .as_any()
                .downcast_ref::<FdSegment>()
                .expect("an fd segment")
                .try_clone_fd()
                .expect("dup"),
            4096,
        );
        let second = board.noticed(second.expect("mapped"), b"\0sharer", 7);
        assert_eq!(board.due(identity), None, "one mapping is left");
        assert_eq!(
            board.due(identity),
            Some((b"\0sharer".to_vec(), vec![5, 6, 7]))
        );
        drop((noticed, second));
        assert!(lock(&board.entries).is_empty());
    }

    #[test]
    fn a_reported_segment_stays_mapped_dormant_for_its_next_arrival() {
        let board = Arc::new(NoticeBoard::new(Weak::new()));
        let memfd = FileDescriptorStrategy.allocate(4096).expect("memfd");
        let identity = memfd.identity();
        let fd = memfd.try_clone_fd().expect("dup");
        drop(board.noticed(memfd, b"\0sharer", 1));
        let dormant = board.take_dormant(identity).expect("kept dormant");
        assert_eq!(board.take_dormant(identity).map(|d| d.len()), None);
        let received = FileDescriptorStrategy.open(fd).expect("stat");
        let again = FileDescriptorStrategy
            .map_received(received, 4096, Some(dormant))
            .expect("same file");
        assert_eq!(again.identity(), identity);
    }

    #[test]
    fn a_received_segment_sent_on_is_never_due() {
        let board = Arc::new(NoticeBoard::new(Weak::new()));
        let memfd = FileDescriptorStrategy.allocate(4096).expect("memfd");
        let identity = memfd.identity();
        let noticed = board.noticed(memfd, b"\0sharer", 9);
        board.sent_on(identity);
        assert_eq!(board.due(identity), None);
        drop(noticed);
        assert!(lock(&board.entries).is_empty());
    }
}
