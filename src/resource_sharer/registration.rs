//! [`Registration`] and [`DupFdId`]: one registered fd, its owner's guard
//! and the name receivers fetch it by.

use std::fmt;
#[cfg(test)]
use std::os::fd::OwnedFd;
use std::sync::Arc;
#[cfg(test)]
use std::time::Duration;

#[cfg(test)]
use super::client::{FetchError, fetch_fd};
use super::server::ResourceSharer;

/// What a receiver needs to fetch one registered fd: the `_id` of a
/// `multiprocessing.resource_sharer.DupFd`, `(address, key)`.
///
/// Pickle it as `DupFd` state `{'_id': (address, key)}`: `address` as a
/// `str`, `key` as an `int`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DupFdId {
    /// The sharer's socket address: a filesystem path, or on Linux an
    /// abstract name starting with NUL.
    pub address: String,
    /// The registration key: positive, increasing per sharer, as CPython's
    /// counter.
    pub key: i64,
}

impl DupFdId {
    /// Fetches the fd from the sharer at [`DupFdId::address`]; see
    /// [`fetch_fd`].
    ///
    /// # Errors
    ///
    /// As [`fetch_fd`].
    #[cfg(test)] // the unit tests use it
    pub fn fetch(&self, authkey: &[u8], timeout: Duration) -> Result<OwnedFd, FetchError> {
        fetch_fd(self.address.as_bytes(), self.key, authkey, timeout)
    }
}

/// One fd registered with a [`ResourceSharer`], and its owner's say over it.
///
/// Dropping the registration withdraws the fd and closes it if no receiver
/// has fetched it yet; once fetched, the sharer has already closed its copy.
/// To leave it registered until fetched or until the sharer shuts down, as
/// CPython does, call [`Registration::keep_until_fetched`]. The registration
/// keeps its sharer running.
#[must_use = "dropping a Registration withdraws the fd before any receiver can fetch it"]
pub struct Registration {
    sharer: Option<Arc<ResourceSharer>>,
    id: DupFdId,
}

impl Registration {
    pub(crate) fn new(sharer: Arc<ResourceSharer>, id: DupFdId) -> Self {
        Self {
            sharer: Some(sharer),
            id,
        }
    }

    /// The `(address, key)` a receiver fetches the fd with.
    pub fn id(&self) -> &DupFdId {
        &self.id
    }

    /// Whether the fd is still waiting to be fetched.
    pub fn is_pending(&self) -> bool {
        self.sharer
            .as_ref()
            .is_some_and(|sharer| sharer.is_registered(self.id.key))
    }

    /// Withdraws the registration and returns the fd if no receiver fetched
    /// it.
    #[cfg(test)] // the unit tests use it
    pub fn withdraw(mut self) -> Option<OwnedFd> {
        self.sharer.take()?.withdraw(self.id.key)
    }

    /// Gives up the owner's say: the fd stays registered until a receiver
    /// fetches it or the sharer shuts down. The sharer is no longer kept
    /// running by this registration.
    #[cfg(test)] // the unit tests use it
    pub fn keep_until_fetched(mut self) -> DupFdId {
        self.sharer = None;
        self.id.clone()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(sharer) = self.sharer.take() {
            drop(sharer.withdraw(self.id.key));
        }
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("id", &self.id)
            .field("pending", &self.is_pending())
            .finish()
    }
}
