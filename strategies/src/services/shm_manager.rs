//! The shared-memory manager: libshm's protocol, server and client.
//!
//! `file_system` segments are named POSIX shared-memory objects, and a name
//! outlives every process that maps it: if the last process using a segment
//! is killed before it unlinks the name, the memory stays taken until
//! reboot. Torch answers with a manager daemon (`torch_shm_manager`), and so
//! does this module, on the same wire protocol, so each side works with the
//! other's:
//!
//! - A process that creates segments starts its own manager once
//!   ([`own_manager`]): a separate process, which prints its socket path
//!   (the *manager handle*) and forks into the background. It must be a
//!   process, not a thread: it has to outlive a client that is SIGKILLed.
//!   It is the program's own executable run again: a constructor of this
//!   crate's, run before `main` in every program that links it, serves as
//!   the manager when, and only when, its launcher marked it so, and exits
//!   without returning to `main`. So a program needs nothing beyond the
//!   crate; `tensorshare manager --daemon` runs the same manager, and is
//!   what [`EXE_ENV`] (`TENSORSHARE_EXE`) asks for.
//! - Every process that maps a segment registers its name with the
//!   creator's manager, whose handle travels in the pickle
//!   (`rebuild_storage_filename(cls, manager_handle, name, nbytes)`), over a
//!   connection kept open while anything registered through it is in use
//!   ([`connect`]). The
//!   message is libshm's [`AllocInfo`]; the manager answers `OK`. A process
//!   done with a segment sends the same message flagged `free`.
//! - The manager reads a closed connection as a dead process. It unlinks a
//!   name once nobody holds it (after a grace period, in this manager), and
//!   every name still registered when it exits, 2 s after its last client
//!   left; never one some process still has open or mapped.
//! - A manager can die too. The connection to a process's own manager
//!   watches for that, starts a new one, registers there what the dead one
//!   would have unlinked, and removes the dead one's socket directory
//!   ([`ManagerConnection`]).
//!
//! [`ManagerServer`] is the manager itself; `tensorshare manager` runs it.
//!
//! # Example
//!
//! A manager on a thread, for illustration only (a real one is a separate
//! process), and a client registering a name with it:
//!
//! ```
//! use std::time::Duration;
//! use tensorshare_strategies::file_system::SegmentName;
//! use tensorshare_strategies::services::shm_manager::{ManagerConnection, ManagerServer, ServeOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = ManagerServer::bind_in_private_dir()?;
//! let handle = server.handle().clone();
//! let options = ServeOptions::default().with_idle_timeout(Duration::from_millis(200));
//! let manager = std::thread::spawn(move || server.serve(options));
//!
//! let connection = ManagerConnection::open(&handle)?;
//! connection.register(&SegmentName::fresh())?; // answered "OK"
//! drop(connection);
//!
//! let report = manager.join().expect("the manager thread")?;
//! assert_eq!(report.registrations, 1);
//! # Ok(())
//! # }
//! ```

mod alloc_info;
mod client;
mod daemon;
mod error;
mod handle;
mod in_flight;
mod launch;
mod pipeline;
mod self_exec;
mod server;

pub use alloc_info::{ALLOC_INFO_SIZE, AllocInfo, InvalidAllocInfo};
pub use client::{
    MANAGER_ENV, ManagerConnection, REPLY_TIMEOUT, connect, own_manager, set_own_manager,
    settle_own_manager,
};
pub use error::ManagerError;
pub use handle::{MAX_HANDLE_LEN, ManagerHandle};
pub use launch::{EXE_ENV, LAUNCH_TIMEOUT, launch_daemon, manager_executable};
pub use server::{
    DEFAULT_IDLE_TIMEOUT, DEFAULT_IN_FLIGHT_WAIT, IN_FLIGHT_WAIT_ENV, MAX_REGISTERED_NAMES,
    ManagerReport, ManagerServer, ServeOptions, StopReason, in_flight_wait_from_env,
    parse_in_flight_wait,
};
