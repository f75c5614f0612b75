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
//! - [`ResourceSharer`] is the serving side: [`ResourceSharer::register`]
//!   takes an fd and returns a [`Registration`] naming it with a [`DupFdId`].
//!   Stock CPython and [`fetch_fd`] both fetch from it. It listens in the
//!   abstract namespace, so a killed process leaves no socket file behind,
//!   or where [`SharerSocket`] says.
//! - [`fetch_fd`] is the receiving side; it fetches from a CPython sharer or
//!   from a [`ResourceSharer`].
//! - [`DupFdRequest`](tensorshare_compat::resource_sharer::DupFdRequest) is
//!   the `(key, pid)` message both sides exchange.
//! - [`release_fds`] and
//!   [`ReleaseRequest`](tensorshare_compat::resource_sharer::ReleaseRequest)
//!   are tensorshare's addition: a
//!   tensorshare sender also attaches each fd to the message that names it
//!   (see [`Connection::send`](crate::Connection::send)), and a tensorshare
//!   receiver that got it that way tells the sharer to close its copy.
//!   CPython's side of the protocol is untouched.
//!
//! The wire behaviour is that of CPython 3.8 to 3.13, whose
//! `resource_sharer.py` and `reduction.send_handle` / `recv_handle` have not
//! changed (3.13 only raises the listen backlog).
//!
//! # Examples
//!
//! ```
//! use std::io::{Read, Seek, Write};
//! use std::time::Duration;
//! use tensorshare::resource_sharer::{ResourceSharer, fetch_fd};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let authkey = b"process authkey";
//! let sharer = ResourceSharer::start(authkey)?;
//!
//! let mut file = tempfile::tempfile()?;
//! file.write_all(b"shared bytes")?;
//! let registration = sharer.register(file.into())?;
//! let id = registration.id().clone();
//!
//! // What a receiving process does with the DupFd's `(address, key)`:
//! let timeout = Duration::from_secs(10);
//! let fd = fetch_fd(id.address.as_bytes(), id.key, authkey, timeout)?;
//! let mut received = std::fs::File::from(fd);
//! received.rewind()?;
//! let mut contents = String::new();
//! received.read_to_string(&mut contents)?;
//! assert_eq!(contents, "shared bytes");
//!
//! // Each key is served once.
//! assert!(!registration.is_pending());
//! assert!(id.fetch(authkey, timeout).is_err());
//! # Ok(())
//! # }
//! ```

mod client;
mod options;
mod registration;
mod serve;
mod server;
mod stats;

pub use client::{FetchError, FetchStage, fetch_fd, release_fds, report_unmapped};
pub use options::{SHARER_DIR_ENV, SharerOptions, SharerSocket};
pub use registration::{DupFdId, Registration};
pub(crate) use server::{KeyReports, join_within};
pub use server::{RegisterError, ResourceSharer, SharerError};
pub use stats::SharerStats;
pub use tensorshare_strategies::platform::fd_passing::RecvFdsError;
