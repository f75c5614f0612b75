//! Pipelined registrations: how a client learns that its manager is this
//! crate's, and may stop waiting for each `OK`.
//!
//! libshm answers every registration with `OK`, and its client waits for
//! it: a round trip to another process per segment created and per segment
//! received. The wait buys nothing the socket does not give already. A
//! registration written into a Unix stream socket sits in the manager's
//! receive queue once `send` returns, and the manager reads everything
//! queued before it sees the end of the stream, so a client killed the
//! moment after still has the name registered; only then does the creator
//! create the object, or a receiver count itself in. This crate's manager
//! handles a message that arrives after its sender died exactly as one that
//! arrived before.
//!
//! torch's `torch_shm_manager` cannot be told to skip the reply, and must
//! not be left owing one: it writes `OK` with a blocking `send`, so a
//! client that stops reading stalls it, and a client that exits with
//! replies unread kills it with `SIGPIPE`, after which nothing is unlinked.
//! So a client pipelines only once the manager has said it is ours, asked
//! in a way torch's manager treats as a no-op: the first message on a
//! connection is [`pipeline_probe`], a *free* of a name no segment ever
//! has, sent in the same `send` as the first registration.
//!
//! - torch's manager (libshm `manager.cpp`) handles a free by checking
//!   whether the object exists (`shm_open` read-only) and forgetting the
//!   name if not; it answers nothing, and answers the registration after it
//!   `OK`. The client reads `OK`: registrations stay answered.
//! - This crate's manager answers the probe, as the first message of a
//!   session, with [`PIPELINE_ACK`] instead, and from then on answers no
//!   registration of that client. The client reads the ack in the place of
//!   the registration's `OK`, and from then on only sends.
//! - A torch client never sends the probe (its names are
//!   `/torch_<pid>_<random>_<counter>`), so it is always answered `OK`.
//!
//! The probe's name is not a [`SegmentName`](crate::file_system::SegmentName):
//! the manager recognises its bytes before decoding any message.

use super::alloc_info::{ALLOC_INFO_SIZE, FREE_OFFSET, NAME_OFFSET, encode_fields};

/// The name field of the probe, NUL-terminated: no torch or tensorshare
/// segment is ever called so.
const PROBE_NAME: &[u8] = b"/tensorshare_pipelined_registrations_1\0";

/// The bytes a manager answers [`pipeline_probe`] with when it takes
/// registrations without replies; the same length as `OK`, so a client
/// counts either as the first registration's answer.
pub(super) const PIPELINE_ACK: [u8; 2] = *b"PL";

/// The probe as sent by process `pid`: libshm's `AllocInfo` with the free
/// flag set and [`PROBE_NAME`].
pub(super) fn pipeline_probe(pid: i32) -> [u8; ALLOC_INFO_SIZE] {
    encode_fields(pid, 1, PROBE_NAME)
}

/// Whether a message is the probe, from any pid: a free naming
/// [`PROBE_NAME`] (bytes after its NUL and the padding ignored, as for any
/// message).
pub(super) fn is_pipeline_probe(message: &[u8; ALLOC_INFO_SIZE]) -> bool {
    message[FREE_OFFSET] != 0 && message[NAME_OFFSET..].starts_with(PROBE_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::shm_manager::AllocInfo;

    #[test]
    fn the_probe_is_an_alloc_info_free_that_names_no_segment() {
        let probe = pipeline_probe(4242);
        assert!(is_pipeline_probe(&probe));
        assert_eq!(&probe[..4], &4242_i32.to_ne_bytes());
        // Not a segment name: a client or manager that decodes it refuses it,
        // and no segment can be confused with it.
        assert!(AllocInfo::decode(&probe).is_err());
        assert_eq!(probe.len(), ALLOC_INFO_SIZE);
    }

    #[test]
    fn registrations_and_other_frees_are_not_the_probe() {
        let name = crate::platform::segment_name::SegmentName::fresh();
        assert!(!is_pipeline_probe(&AllocInfo::free(name.clone()).encode()));
        assert!(!is_pipeline_probe(&AllocInfo::register(name).encode()));
        let mut registration = pipeline_probe(1);
        registration[FREE_OFFSET] = 0;
        assert!(!is_pipeline_probe(&registration));
        // A longer name that merely starts like the probe's.
        let mut longer = pipeline_probe(1);
        longer[NAME_OFFSET + PROBE_NAME.len() - 1] = b'x';
        assert!(!is_pipeline_probe(&longer));
    }
}
