//! Receiver to sender: what a tensorshare receiver tells the sharer of the
//! process it received from, on a connection of its own
//! ([`releases`]): the keys of fds that arrived attached, which the sender
//! may close, and the keys of storages no longer mapped here, whose memory
//! the sender may reuse ([`board`]).

mod board;
mod releases;

use std::sync::Arc;

use tensorshare_strategies::file_descriptor::{
    DormantMapping, FdBudget, FdSegment, FileDescriptorStrategy, FileIdentity,
};

use board::NoticeBoard;
use releases::Releases;

use super::pools::Landing;
use crate::model::{DupFdRef, Storage};

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

    /// Marks the received storage `identity` as sent on: its sender hears
    /// nothing of it any more.
    pub(crate) fn sent_on(&self, identity: FileIdentity) {
        self.board.sent_on(identity);
    }
}

/// A received memfd: it keeps its fd within `budget`; its sender hears
/// when it is unmapped here if it came `attached` to its message under
/// that `DupFd`'s key; and its mapping is kept dormant after its storage
/// dies, should the sender send it again.
pub(crate) struct FdLanding<'a> {
    pub(crate) notices: &'a Notices,
    pub(crate) budget: &'a FdBudget,
    pub(crate) attached: Option<&'a DupFdRef>,
}

impl Landing<FileDescriptorStrategy> for FdLanding<'_> {
    fn take_dormant(&self, identity: &FileIdentity) -> Option<DormantMapping> {
        self.notices.board.take_dormant(*identity)
    }

    fn storage_of(&self, mut segment: FdSegment) -> Storage {
        segment.keep_fd_within(self.budget);
        match self.attached {
            Some(dup_fd) => {
                let noticed = self
                    .notices
                    .board
                    .noticed(segment, &dup_fd.address, dup_fd.key);
                Storage::from_segment(Arc::new(noticed))
            }
            None => Storage::from_segment(Arc::new(segment)),
        }
    }

    /// A memfd held here that arrived attached again: its sender hears of
    /// this key too when it is unmapped.
    fn joined(&self, held: &FdSegment) {
        if let Some(dup_fd) = self.attached {
            self.notices
                .board
                .arrived_again(held.identity(), &dup_fd.address, dup_fd.key);
        }
    }
}
