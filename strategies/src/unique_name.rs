//! The unique, unguessable part of every name this crate creates: shared
//! memory segments, `shm_open` fallback objects, memmap files and the
//! manager's private directories.

use std::sync::atomic::{AtomicU64, Ordering};

/// `<pid>_<random>_<counter>`: the part of every name this crate creates
/// (segments, shm fallback objects, memmap files) that makes it unique, by
/// the counter within this process and by the pid across processes, and
/// unguessable, by 64 random bits.
pub(crate) fn unique_name_part() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}_{}_{counter}", std::process::id(), random_u64())
}

/// 64 bits from the OS's random source, for the unguessable part of the
/// names this crate creates.
pub(crate) fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // getrandom only fails when the OS has no random source at all; a
    // per-process hash seed is then the best there is, and O_EXCL still
    // keeps names unique.
    if getrandom::fill(&mut bytes).is_err() {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        return hasher.finish();
    }
    u64::from_ne_bytes(bytes)
}
