//! Receiver to sender: what a tensorshare receiver tells the sharer of the
//! process it received from, on a connection of its own
//! ([`releases`]): the keys of fds that arrived attached, which the sender
//! may close, and the keys of storages no longer mapped here, whose memory
//! the sender may reuse ([`board`]).

mod board;
mod releases;

use std::sync::Arc;

use tensorshare_strategies::file_descriptor::{DormantMapping, FdSegment, FileIdentity};

use board::NoticeBoard;
use releases::Releases;

use crate::model::Storage;

/// A context's notices to the senders it received from.
#[derive(Debug)]
pub(crate) struct Notices {
    /// Keys of fds that arrived attached, and of storages no longer mapped
    /// here, on their way to their senders.
    releases: Arc<Releases>,
    /// The received storages whose senders hear when they are unmapped.
    board: Arc<NoticeBoard>,
}

impl Notices {
    /// Notices that authenticate to senders' sharers with `authkey`.
    pub(crate) fn new(authkey: &[u8]) -> Self {
        let releases = Arc::new(Releases::new(authkey));
        Self {
            board: Arc::new(NoticeBoard::new(Arc::downgrade(&releases))),
            releases,
        }
    }

    /// Gives `keys` back to the sharer at `address`: their fds arrived.
    pub(crate) fn release(&self, address: Vec<u8>, keys: Vec<i64>) {
        self.releases.release(address, keys);
    }

    /// The storage of a memfd just mapped from an fd that arrived attached
    /// under `key` from the sharer at `address`: its sender hears when it
    /// is unmapped here.
    pub(crate) fn noticed(&self, segment: FdSegment, address: &[u8], key: i64) -> Storage {
        Storage::from_segment(Arc::new(self.board.noticed(segment, address, key)))
    }

    /// Adds `key` for a storage already mapped here that arrived again.
    pub(crate) fn arrived_again(&self, identity: FileIdentity, address: &[u8], key: i64) {
        self.board.arrived_again(identity, address, key);
    }

    /// Marks the received storage `identity` as sent on: its sender hears
    /// nothing of it any more.
    pub(crate) fn sent_on(&self, identity: FileIdentity) {
        self.board.sent_on(identity);
    }

    /// The dormant mapping of the memfd `identity`, if one is kept.
    pub(crate) fn take_dormant(&self, identity: FileIdentity) -> Option<DormantMapping> {
        self.board.take_dormant(identity)
    }
}
