//! What a sender keeps alive for its receivers, each until a receiver takes
//! it or its deadline passes: the fds registered with the resource sharer
//! and not yet fetched ([`unfetched`]), and the leases of the `memmap`
//! files sent ([`sent_files`]). Both expire on a thread of their own while
//! nothing is sent
//! ([`Expiring`](crate::sync::expiry::Expiring)).

mod sent_files;
mod unfetched;

pub(crate) use sent_files::{DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, RetentionLimits, SentFiles};
pub(crate) use unfetched::UnfetchedFds;
