//! Unit tests of `fault_guard`.
use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::memfd::{MFdFlags, memfd_create};
use nix::unistd::ftruncate;

use super::*;
use crate::platform::mapping::SharedMapping;

/// A memfd of `len` bytes made without `MFD_ALLOW_SEALING`: it cannot
/// be sealed, so anyone holding it may shrink it.
fn unsealable_file(len: usize) -> OwnedFd {
    let fd = memfd_create("fault-guard-test", MFdFlags::MFD_CLOEXEC).expect("memfd_create");
    ftruncate(&fd, i64::try_from(len).expect("small")).expect("ftruncate");
    fd
}

fn guarded(fd: &OwnedFd, len: usize) -> SharedMapping {
    // SAFETY: the file was just sized to at least `len` bytes; its
    // shrinking is what the guard is for.
    unsafe { SharedMapping::map_guarded(fd.as_fd(), len) }.expect("map")
}

/// `mapping` guarded by a registration held apart from it, so the test
/// can see the slot; drop the guard first.
fn register_apart(mapping: &SharedMapping) -> GuardedRange {
    let start = NonNull::from(mapping.as_slice()).cast::<u8>();
    let len = NonZeroUsize::new(mapping.len()).expect("not empty");
    // SAFETY: `mapping` is a live mapping from `mmap`, and callers drop
    // the guard before the mapping.
    unsafe { GuardedRange::register(start, len) }.expect("register")
}

fn unguarded(fd: &OwnedFd, len: usize) -> SharedMapping {
    // SAFETY: the file was just sized to at least `len` bytes and the
    // tests that use this mapping do not shrink it while it lives
    // unguarded.
    unsafe { SharedMapping::map(fd.as_fd(), len) }.expect("map")
}

fn page_size() -> usize {
    install().expect("install the handler");
    PAGE_SIZE.load(Ordering::Relaxed)
}

/// Slots claimed, by the chunks' counts and by the slots' tags.
fn claimed_counts() -> (usize, usize) {
    let chunks = || (0..MAX_CHUNKS).map_while(chunk);
    let counted = chunks()
        .map(|chunk| chunk.claimed.load(Ordering::SeqCst))
        .sum();
    let tagged = chunks()
        .flat_map(|chunk| chunk.slots.iter())
        .filter(|slot| slot.state.load(Ordering::SeqCst) & TAG_MASK != TAG_FREE)
        .count();
    (counted, tagged)
}

fn allocated_slots() -> usize {
    (0..MAX_CHUNKS)
        .map_while(chunk)
        .map(|chunk| chunk.slots.len())
        .sum()
}

#[test]
fn slot_indices_round_trip() {
    for index in [0, 1, 63, 64, 65, 191, 192, 193, 1000, 1 << 20] {
        let (chunk_index, offset) = locate(index);
        assert!(offset < FIRST_CHUNK_SLOTS << chunk_index, "{index}");
        assert_eq!(slot_index(chunk_index, offset), index);
    }
    assert_eq!(locate(0), (0, 0));
    assert_eq!(locate(64), (1, 0));
    assert_eq!(locate(192), (2, 0));
}

#[test]
fn slot_state_follows_claim_publish_release() {
    let slot = Slot::new();
    assert!(!slot.covers(0x1000));
    assert!(slot.try_claim());
    assert!(!slot.try_claim(), "a claimed slot is not free");
    assert!(!slot.covers(0x1000), "not matched before it is published");
    slot.publish(0x1000, 0x3000);
    assert!(slot.covers(0x1000) && slot.covers(0x2fff));
    assert!(!slot.covers(0xfff) && !slot.covers(0x3000));
    let generation = slot.state.load(Ordering::Relaxed) & !TAG_MASK;
    slot.release();
    assert!(!slot.covers(0x1000), "not matched once released");
    assert!(slot.try_claim());
    let next = slot.state.load(Ordering::Relaxed) & !TAG_MASK;
    assert_eq!(
        next,
        generation + GENERATION_STEP,
        "a claim starts a generation"
    );
}

#[test]
fn truncated_pages_read_as_zeros_and_the_rest_stays_shared() {
    let page = page_size();
    let len = 4 * page + 100;
    let fd = unsealable_file(len);
    let mut mapping = guarded(&fd, len);
    mapping.as_mut_slice().fill(7);
    ftruncate(&fd, i64::try_from(2 * page).expect("small")).expect("shrink");
    let bytes = mapping.as_slice();
    assert!(bytes[..2 * page].iter().all(|&b| b == 7), "kept pages");
    assert!(bytes[2 * page..].iter().all(|&b| b == 0), "lost pages");
    assert!(mapping.was_truncated());
}

#[test]
fn unregistered_range_is_not_matched() {
    let page = page_size();
    let fd = unsealable_file(page);
    // Registered apart from a mapping that stays in place, so that no
    // other test's mapping can take the address once the guard is gone.
    let mapping = unguarded(&fd, page);
    let guard = register_apart(&mapping);
    let address = mapping.as_slice().as_ptr().addr();
    assert!(find(address).is_some());
    drop(guard);
    assert!(find(address).is_none(), "the slot is cleared on drop");
}

/// Many threads register and unregister while others fault on
/// truncated mappings: every live range is matched to its own slot, no
/// slot is handed to two ranges, and freed slots are reused.
#[test]
fn concurrent_registration_while_faulting() {
    const REGISTERING_THREADS: usize = 4;
    const FAULTING_THREADS: usize = 2;
    const LIVE_PER_THREAD: usize = 16;
    const ROUNDS: usize = 400;
    let page = page_size();
    let owned: Mutex<HashSet<usize>> = Mutex::new(HashSet::new());
    let baseline = allocated_slots();
    std::thread::scope(|scope| {
        for _ in 0..REGISTERING_THREADS {
            scope.spawn(|| {
                let fd = unsealable_file(page);
                for _ in 0..ROUNDS {
                    let mappings: Vec<(GuardedRange, SharedMapping)> = (0..LIVE_PER_THREAD)
                        .map(|_| {
                            let mapping = unguarded(&fd, page);
                            (register_apart(&mapping), mapping)
                        })
                        .collect();
                    for (guard, mapping) in &mappings {
                        let slot = std::ptr::from_ref(guard.slot).addr();
                        let address = mapping.as_slice().as_ptr().addr();
                        let found = find(address).map(|slot| std::ptr::from_ref(slot).addr());
                        assert_eq!(found, Some(slot), "a live range has its own slot");
                        let fresh = owned.lock().expect("set").insert(slot);
                        assert!(fresh, "slot {slot:#x} handed to two ranges");
                    }
                    for (guard, mapping) in mappings {
                        let slot = std::ptr::from_ref(guard.slot).addr();
                        owned.lock().expect("set").remove(&slot);
                        drop(guard);
                        drop(mapping);
                    }
                }
            });
        }
        for _ in 0..FAULTING_THREADS {
            scope.spawn(|| {
                for _ in 0..ROUNDS / 4 {
                    let fd = unsealable_file(8 * page);
                    let mut mapping = guarded(&fd, 8 * page);
                    mapping.as_mut_slice().fill(1);
                    ftruncate(&fd, 0).expect("shrink");
                    assert!(mapping.as_slice().iter().all(|&b| b == 0));
                    assert!(mapping.was_truncated());
                }
            });
        }
    });
    let peak = (REGISTERING_THREADS * LIVE_PER_THREAD) + FAULTING_THREADS;
    let grown = allocated_slots().saturating_sub(baseline);
    assert!(
        grown <= 2 * peak + FIRST_CHUNK_SLOTS,
        "{grown} slots allocated for at most {peak} live ranges: freed slots are not reused"
    );
    // Other tests of this process may be registering right now: wait for
    // a quiet moment in which the counts agree.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (counted, tagged) = claimed_counts();
        if counted == tagged {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "chunk counts say {counted} claimed, slots say {tagged}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
