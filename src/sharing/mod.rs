//! Sending and receiving tensors: the registry joined with a sharing
//! strategy, the resource sharer and the caches.
//!
//! A [`SharingContext`] is what a process needs to exchange tensors with
//! torch's `ForkingPickler` format: [`dumps`](SharingContext::dumps) writes
//! a value as torch's reducers would, moving storages into shared memory
//! and handing out their fds through this process's resource sharer;
//! [`loads`](SharingContext::loads) rebuilds a pickle and attaches every
//! storage it names, fetching fds from the sender's resource sharer.
//!
//! Five concerns, each a module that owns its state and is called only
//! through what it exposes; `scripts/check-layers` checks that each
//! imports only those declared before it.

// The layers, bottom to top: each imports only those declared before it.

// The memory a context hands out again: memfds, file_system segments and
// memmap files its storages held, and received segments kept mapped.
mod pools;
// What a sender keeps for its receivers until they take it or a deadline
// passes: unfetched fd registrations, leases of sent memmap files.
mod lifetimes;
// Receiver to sender: the keys of fds that arrived attached, given back,
// and storages no longer mapped here, reported.
mod notices;
// Where the default puts each storage, by one rule.
pub(crate) mod placement;
// SharingContext, the strategies' wire forms, and the receipt of a message.
mod context;

pub use context::SharingContext;
pub(crate) use context::{MessageOrigin, Outgoing};
pub use tensorshare_strategies::{ExportError, ImportError, memmap::InvalidMemmapDir};
