//! How many fds received segments keep open, shared by all of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many fds received [`FdSegment`](super::FdSegment)s may keep open at
/// once, shared by every segment it is given to.
///
/// A mapped segment is read and written through its mapping alone, which
/// keeps the file alive; its fd is needed only to hand the same memory to
/// yet another process. A receiver that keeps every received fd stops at
/// the fd limit (torch then fails with "received 0 items of ancdata"); one
/// that keeps them within a budget holds any number of storages, and one
/// that [gave up its fd](super::FdSegment::keep_fd_within) is sent on as a
/// copy.
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::file_descriptor::{FdBudget, FileDescriptorStrategy};
/// use tensorshare_strategies::{Segment, SharingStrategy};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let budget = FdBudget::new(1);
/// let sent = FileDescriptorStrategy.allocate(8)?;
/// let mut first = FileDescriptorStrategy.import(FileDescriptorStrategy.export(&sent)?, 8)?;
/// let mut second = FileDescriptorStrategy.import(FileDescriptorStrategy.export(&sent)?, 8)?;
/// first.keep_fd_within(&budget);
/// second.keep_fd_within(&budget);
/// assert!(first.fd().is_some() && second.fd().is_none());
/// assert_eq!(second.as_bytes(), sent.as_bytes(), "mapped all the same");
/// drop(first);
/// assert_eq!(budget.held(), 0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FdBudget {
    held: Arc<AtomicUsize>,
    max: usize,
}

impl FdBudget {
    /// A budget of `max` fds.
    pub fn new(max: usize) -> Self {
        Self {
            held: Arc::default(),
            max,
        }
    }

    /// The most fds it lets segments keep.
    pub fn max(&self) -> usize {
        self.max
    }

    /// How many fds segments keep under it now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// One fd's place in the budget, while there is room.
    pub(super) fn take(&self) -> Option<FdSlot> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held < self.max).then_some(held + 1)
            })
            .ok()
            .map(|_| FdSlot(Arc::clone(&self.held)))
    }
}

/// One kept fd's place in an [`FdBudget`], given back when dropped.
#[derive(Debug)]
pub(super) struct FdSlot(Arc<AtomicUsize>);

impl Drop for FdSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_stop_at_the_budget_and_come_back_when_dropped() {
        let budget = FdBudget::new(2);
        let first = budget.take().expect("room");
        let _second = budget.take().expect("room");
        assert!(budget.take().is_none());
        drop(first);
        assert_eq!(budget.held(), 1);
        assert!(budget.take().is_some());
    }
}
