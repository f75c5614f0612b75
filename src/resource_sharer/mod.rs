//! `multiprocessing.resource_sharer` on Unix: hand an fd to another process
//! that asks for it by key.
//!
//! This is how PyTorch's `file_descriptor` strategy moves a storage's fd. The
//! sender registers a duplicate of the fd with its process's resource sharer
//! and pickles a `multiprocessing.resource_sharer.DupFd` whose state is
//! `{'_id': (address, key)}`. The receiver's `DupFd.detach()` connects to
//! `address`, passes the `multiprocessing.connection` authkey handshake with
//! its process authkey, sends the pickled `(key, pid)`, and receives the fd by
//! `SCM_RIGHTS` (`multiprocessing.reduction.recv_handle`). Each key is served
//! once; the sharer closes its copy after sending it.
//!
//! A [`SharingContext`](crate::SharingContext) runs both sides: it starts
//! this process's sharer when it first sends an fd (in the abstract
//! namespace, or where [`SHARER_DIR_ENV`] or
//! [`SharingContext::with_sharer_socket`](crate::SharingContext::with_sharer_socket)
//! say: [`SharerSocket`]), registers each storage's fd there,
//! and fetches the fds a received message names from the sender's sharer.
//! What it did shows in [`SharerStats`]
//! ([`SharingContext::sharer_stats`](crate::SharingContext::sharer_stats));
//! what went wrong in [`SharerError`] (starting), [`RegisterError`] (offering
//! an fd) and [`FetchError`] (fetching one). Stock CPython fetches from our
//! sharer, and we from CPython's: the `(key, pid)` request both sides
//! exchange is
//! [`DupFdRequest`](tensorshare_compat::resource_sharer::DupFdRequest).
//!
//! tensorshare adds two requests, which CPython's side of the protocol never
//! sees: a tensorshare sender also attaches each fd to the message that
//! names it (see [`Connection::send`](crate::Connection::send)), and a
//! tensorshare receiver that got it that way tells the sender's sharer to
//! close its copy
//! ([`ReleaseRequest`](tensorshare_compat::resource_sharer::ReleaseRequest)),
//! and, once it unmapped the storage, that the memory may be reused
//! ([`UnmappedRequest`](tensorshare_compat::resource_sharer::UnmappedRequest)).
//!
//! The wire behaviour is that of CPython 3.8 to 3.13, whose
//! `resource_sharer.py` and `reduction.send_handle` / `recv_handle` have not
//! changed (3.13 only raises the listen backlog).
//!
//! The sharer's own server and client (`ResourceSharer`, `fetch_fd`) are
//! the crate's, tested beside them (`tests.rs`).

mod client;
mod options;
mod registration;
mod serve;
mod server;
mod stats;

pub use client::{FetchError, FetchStage};
pub(crate) use client::{release_fds, report_unmapped};
pub use options::{SHARER_DIR_ENV, SharerSocket};
pub(crate) use server::{KeyReports, join_within};
pub use server::{RegisterError, SharerError};
pub use stats::SharerStats;
pub use tensorshare_strategies::platform::fd_passing::RecvFdsError;
// The sharer's own server and client, which a `SharingContext` runs and
// the unit tests beside them (`tests.rs`) drive directly.
pub(crate) use client::fetch_fd;
pub(crate) use options::SharerOptions;
pub(crate) use registration::Registration;
pub(crate) use server::ResourceSharer;

#[cfg(test)]
mod tests;
