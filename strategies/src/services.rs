//! The services layer: what reclaims the named shared memory and files of
//! processes that are gone, built on the platform layer.
//!
//! - [`shm_manager`]: the shared-memory manager, torch's libshm protocol,
//!   its daemon and its client. Every `file_system` segment is registered
//!   with one, which unlinks it once its holders are gone.
//! - [`orphans`]: the scans behind `tensorshare gc`, for leaked segments,
//!   memmap files and private socket directories. The `memmap` strategy
//!   runs the same scan on its own directory, and the manager's client on
//!   the directory of a manager that died.
//!
//! The strategies use these services; the services know no strategy, only
//! the names of the objects the strategies create (the platform's).

pub mod orphans;
pub mod shm_manager;
