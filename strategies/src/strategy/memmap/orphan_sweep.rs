//! Reclaiming the files of memmap senders that were killed: once per
//! directory and process, when a strategy first creates a file there.
//!
//! A sender removes the files it created as it lets go of them; one that
//! is killed removes nothing, and its receivers never say when they are
//! done. The next sender in the directory reclaims what such a sender left
//! once no process has it open or mapped, by the rules `tensorshare gc`
//! follows ([`crate::services::orphans`]), so that a directory does not fill up with
//! the files of crashed processes between runs of `gc`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::platform::memmap_file_name::MemmapFileName;
use crate::services::orphans::{self, KeepReason, ScanOptions};

/// The directories swept by this process, or being swept.
static SWEPT: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// Reclaims the orphaned files of `dir` on a thread of its own, the first
/// time this process asks for `dir`. Allocation does not wait: the scan
/// reads every process's fds and mappings in `/proc`.
pub(super) fn sweep_once(dir: &Path) {
    {
        let mut swept = SWEPT.lock().unwrap_or_else(PoisonError::into_inner);
        let swept = swept.get_or_insert_with(HashSet::new);
        // Looked up first: every allocation passes here, and only the first
        // in a directory needs the path copied.
        if swept.contains(dir) {
            return;
        }
        swept.insert(dir.to_path_buf());
    }
    let dir = dir.to_path_buf();
    // Without the thread (the spawn failed), `tensorshare gc` still
    // reclaims them.
    let _ = std::thread::Builder::new()
        .name("tensorshare-memmap-sweep".into())
        .spawn(move || sweep(&dir));
}

/// How many times a sweep looks again at files of dead creators that were
/// still within the grace for fresh files.
const MAX_ROUNDS: usize = 3;

/// Removes the orphaned memmap files of `dir`; what cannot be removed is
/// left for `tensorshare gc`, which says why. Files of a dead creator that
/// were too fresh are looked at again once the grace has passed: a sender
/// that starts right after another was killed is the common case. Files
/// its sender marked as still awaited by a receiver are not waited for
/// (the mark lasts minutes, and the thread would outstay its work): the
/// next sender's sweep or `tensorshare gc` takes them once it has passed.
fn sweep(dir: &Path) {
    let options: ScanOptions<MemmapFileName> = ScanOptions::memmap_dir(dir);
    for _ in 0..MAX_ROUNDS {
        let Ok(scan) = orphans::scan(&options) else {
            return;
        };
        let _ = scan.remove_orphans();
        let min_age = options.min_age_value();
        let next_look = scan
            .segments()
            .iter()
            .filter(|file| !file.creator_alive)
            .filter_map(|file| match file.keep {
                Some(KeepReason::Recent { age }) => Some(min_age.saturating_sub(age)),
                _ => None,
            })
            .min();
        let Some(wait) = next_look else {
            return;
        };
        std::thread::sleep(wait + RECHECK_MARGIN);
    }
}

/// Added to the wait for a fresh file, so that the next look finds it past
/// the grace.
const RECHECK_MARGIN: Duration = Duration::from_millis(100);
