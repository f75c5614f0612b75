//! The unique, unguessable part of every name this crate creates: shared
//! memory segments, `shm_open` fallback objects, memmap files and the
//! manager's private directories.

use std::ops::RangeInclusive;
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

/// What is wrong with a name's `<pid>_<random>_<counter>` part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InvalidUniquePart {
    /// Not the expected number of `_`-separated decimal fields.
    Fields,
    /// The first field is not a process id: 0, or above `i32::MAX`.
    Pid,
}

/// Checks the part of a name after its prefix, `_`-separated decimal
/// fields as [`unique_name_part`] makes them (torch 1.x names have one
/// field fewer: `counts` says how many are accepted), and returns the
/// first, the creator's pid.
pub(crate) fn parse_unique_part(
    part: &[u8],
    counts: RangeInclusive<usize>,
) -> Result<u32, InvalidUniquePart> {
    let fields = || part.split(|b| *b == b'_');
    if !counts.contains(&fields().count())
        || fields().any(|f| f.is_empty() || !f.iter().all(u8::is_ascii_digit))
    {
        return Err(InvalidUniquePart::Fields);
    }
    fields()
        .next()
        .and_then(|field| std::str::from_utf8(field).ok())
        .and_then(|field| field.parse::<u32>().ok())
        .filter(|pid| *pid > 0 && i32::try_from(*pid).is_ok())
        .ok_or(InvalidUniquePart::Pid)
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
