//! In-flight notices: a sender tells this crate's manager which process a
//! message naming a segment is on its way to, so that the manager stops
//! keeping the segment for that message once that process has exited.
//!
//! Every message adds a count to its segment's header that only its
//! receiver takes back, and a manager keeps a segment whose header counts
//! more than its holders account for: a message to it is still to be read
//! (the manager's orphans). A receiver killed with messages unread never
//! takes those counts back, and the manager alone cannot tell it from a
//! slow one, so it kept such a segment for the in-flight wait (5 minutes
//! by default), or as long as its sender lived. The sender knows the
//! receiver: the pid at the other end of the connection (`SO_PEERCRED`).
//! Told it, the manager releases a segment whose every receiver has
//! exited as soon as nothing maps it.
//!
//! A notice is libshm's `AllocInfo` with [`IN_FLIGHT_FLAG`] in the `free`
//! byte and the receiver's pid in the `pid` field, and is not answered. It
//! is sent only to a manager that answered the pipeline probe (this
//! crate's); libshm's manager would take it for a free of a name that
//! exists, which it ignores.

use super::alloc_info::{ALLOC_INFO_SIZE, FREE_OFFSET, encode_fields};
use crate::platform::segment_name::SegmentName;

/// The `free` byte of a notice: neither libshm's 0 (register) nor its 1
/// (free).
const IN_FLIGHT_FLAG: u8 = b'>';

/// The notice that a message naming `name` is on its way to process
/// `receiver`.
pub(super) fn in_flight_notice(receiver: u32, name: &SegmentName) -> [u8; ALLOC_INFO_SIZE] {
    // A pid is at most `pid_t`'s: one that is not counts as no process.
    let pid = i32::try_from(receiver).unwrap_or(-1);
    encode_fields(pid, IN_FLIGHT_FLAG, name.as_str().as_bytes())
}

/// Whether a message is a notice (its name is decoded as any message's).
pub(super) fn is_in_flight_notice(message: &[u8; ALLOC_INFO_SIZE]) -> bool {
    message[FREE_OFFSET] == IN_FLIGHT_FLAG
}

/// The receiver a notice names; `None` for a pid no process has.
pub(super) fn notice_receiver(message: &[u8; ALLOC_INFO_SIZE]) -> Option<u32> {
    let mut pid = [0u8; FREE_OFFSET];
    pid.copy_from_slice(&message[..FREE_OFFSET]);
    u32::try_from(i32::from_ne_bytes(pid))
        .ok()
        .filter(|&pid| pid > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::shm_manager::AllocInfo;

    #[test]
    fn a_notice_names_its_receiver_and_segment_and_nothing_else_is_one() {
        let name = SegmentName::fresh();
        let notice = in_flight_notice(4242, &name);
        assert!(is_in_flight_notice(&notice));
        assert_eq!(notice_receiver(&notice), Some(4242));
        // Its name decodes as any message's.
        assert_eq!(
            AllocInfo::decode(&notice).map(|info| info.name),
            Ok(name.clone())
        );
        assert!(!is_in_flight_notice(
            &AllocInfo::free(name.clone()).encode()
        ));
        assert!(!is_in_flight_notice(
            &AllocInfo::register(name.clone()).encode()
        ));
        // A pid no process can have is no receiver.
        assert_eq!(notice_receiver(&in_flight_notice(u32::MAX, &name)), None);
    }
}
