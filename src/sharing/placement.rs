//! Where the default puts each storage: the one rule a context without a
//! named strategy follows, from what it can see when it allocates or
//! sends (the crate docs' "The default strategy" gives the measurements
//! behind each threshold).
//!
//! - A new storage goes into a named segment in `/dev/shm` while the
//!   segment leaves a quarter of the mount free, and logind does not
//!   delete this user's segments at logout ([`logind`]); else into a
//!   memfd, which no mount counts. A memfd that finds no fd left falls
//!   back to a segment wherever one still fits.
//! - A batch of at most [`INLINE_MAX_BYTES`] is a hand-off: it is made
//!   in this process's own memory and travels inside the message.
//! - At sending, a storage in shared memory goes in its own form (a
//!   segment by name, a memfd by fd, a `memmap` file by path): whoever
//!   shares it keeps sharing it. A storage in this process's own memory
//!   travels inline when it is at most [`INLINE_MAX_BYTES`], and is
//!   copied into shared memory placed as a new storage is otherwise.

mod logind;

use std::path::Path;

use tensorshare_strategies::StrategyKind;
use tensorshare_strategies::file_system::ShmRoom;

pub(crate) use logind::{SegmentRemoval, segment_removal};

use crate::model::Storage;

/// The largest storage of a process's own memory that travels inside the
/// message rather than in shared memory.
///
/// A stock torch receiver copies an inline storage once more than a shared
/// one; a shared one costs it a mapping: for a segment, opening it,
/// mapping it, registering it with the shared-memory manager, and the
/// same undone when the storage dies. Into a torch training loop on 2
/// cores (the bench's batches, uint8 images of 8 samples, median of 9
/// rounds) a batch took 122 µs inline and 354 µs in a segment at 96 KiB,
/// 420 and 595 µs at 384 KiB, 706 and 792 µs at 768 KiB, and 1.39 and
/// 1.18 ms at 1.5 MiB: the copies catch up with the mapping near 1 MiB.
pub(crate) const INLINE_MAX_BYTES: usize = 1 << 20;

/// The share of `/dev/shm`'s size that new segments leave free: torch's own
/// shared tensors (its `file_descriptor` strategy makes them there too)
/// and the other programs of the machine need room while ours are in
/// flight. In Docker's default 64 MiB, 16 MiB.
const KEPT_FREE_DIVISOR: u64 = 4;

/// What the default placement knows of this process and machine.
#[derive(Clone, Debug)]
pub(crate) struct Placement {
    /// What logind does to this user's segments.
    removal: SegmentRemoval,
}

impl Placement {
    /// The placement for this process, its user and machine as they are.
    pub(crate) fn probe() -> Self {
        Self::probe_under(Path::new("/"))
    }

    /// The placement with logind configured under `root`.
    pub(crate) fn probe_under(root: &Path) -> Self {
        Self {
            removal: segment_removal(root),
        }
    }

    /// Whether named segments outlive this user's sessions.
    pub(crate) fn segments_safe(&self) -> bool {
        !self.removal.removes
    }

    /// Where a new storage of `nbytes` goes: `file_system` or
    /// `file_descriptor`.
    pub(crate) fn for_new(&self, nbytes: usize) -> StrategyKind {
        if self.segment_fits(nbytes, ShmRoom::now(), KEPT_FREE_DIVISOR) {
            StrategyKind::FileSystem
        } else {
            StrategyKind::FileDescriptor
        }
    }

    /// Whether a segment of `nbytes` fits in `/dev/shm` at all, for a
    /// storage no memfd could take.
    pub(crate) fn segment_fits_at_all(&self, nbytes: usize) -> bool {
        self.segment_fits(nbytes, ShmRoom::now(), u64::MAX)
    }

    /// Whether a segment of `nbytes` may be made in `room`, leaving
    /// `1 / kept_free_divisor` of it free.
    fn segment_fits(&self, nbytes: usize, room: Option<ShmRoom>, kept_free_divisor: u64) -> bool {
        let Some(room) = room.filter(|_| self.segments_safe()) else {
            return false;
        };
        room.available
            .checked_sub(ShmRoom::cost(nbytes))
            .is_some_and(|left| left >= room.size / kept_free_divisor)
    }

    /// Whether a hand-off of `nbytes` is made in this process's own memory,
    /// to travel inline.
    pub(crate) fn hand_off_inline(nbytes: usize) -> bool {
        nbytes <= INLINE_MAX_BYTES
    }

    /// The form `storage` is sent in.
    pub(crate) fn form_to_send(&self, storage: &Storage) -> StrategyKind {
        match storage.exportable_kind() {
            Some(kind) if kind.shares_memory() => kind,
            _ if storage.nbytes() <= INLINE_MAX_BYTES => StrategyKind::Bytes,
            _ => self.for_new(storage.nbytes()),
        }
    }

    /// What the default does on this machine now, and why, in a sentence.
    #[cfg(feature = "doctor")]
    pub(crate) fn describe(&self) -> String {
        let inline = format!(
            "batches of at most {} MiB and storages of this process's own memory as small go \
             inline",
            INLINE_MAX_BYTES >> 20
        );
        if !self.segments_safe() {
            return format!(
                "memfds for every storage ({}); {inline}",
                self.removal.detail
            );
        }
        let Some(room) = ShmRoom::now() else {
            return format!("memfds for every storage (/dev/shm cannot be read); {inline}");
        };
        let kept_free = room.size / KEPT_FREE_DIVISOR;
        let for_segments = room.available.saturating_sub(kept_free);
        format!(
            "named segments for the next {} MiB (/dev/shm has {} MiB free of {} MiB, and a \
             quarter is left to others), memfds past that; {inline}",
            for_segments >> 20,
            room.available >> 20,
            room.size >> 20
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn placement(removes: bool) -> Placement {
        Placement {
            removal: SegmentRemoval {
                removes,
                detail: String::new(),
                user: "user".into(),
            },
        }
    }

    fn room(size_mib: u64, available_mib: u64) -> Option<ShmRoom> {
        Some(ShmRoom {
            size: size_mib * MIB,
            available: available_mib * MIB,
        })
    }

    #[test]
    fn segments_while_a_quarter_of_the_mount_stays_free() {
        let placement = placement(false);
        let batch = 16 << 20;
        // Docker's 64 MiB: two batches of 16 MiB; the third's header would
        // cut into the quarter kept free.
        let fits = |available| placement.segment_fits(batch, room(64, available), 4);
        assert!(fits(64) && fits(48));
        assert!(!fits(32));
        assert!(!fits(16) && !fits(0));
        // Larger than the whole mount: never a segment.
        assert!(!placement.segment_fits(128 << 20, room(64, 64), 4));
        // At all: to the last byte.
        assert!(placement.segment_fits(batch, room(64, 17), u64::MAX));
    }

    #[test]
    fn no_segment_where_logind_removes_them_or_dev_shm_is_unreadable() {
        assert!(!placement(true).segment_fits(1, room(1024, 1024), 4));
        assert!(!placement(false).segment_fits(1, None, 4));
    }
}
