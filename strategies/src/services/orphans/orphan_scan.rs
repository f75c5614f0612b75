//! The scan: what it looks at, what it found, and the pass that judges every
//! segment (or memmap file) of the directory.

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;

use super::error::ScanError;
use super::holders::scan_holders;
use super::lease::hold_exclusively;
use super::listing::{FileKey, list_entries};
use super::orphan_name::OrphanName;
use super::report::{SegmentReport, SkippedEntry};
use super::verdict::judge;
use super::{DEFAULT_MIN_AGE, DEFAULT_SHM_DIR};
use crate::platform::memmap_file_name::MemmapFileName;
use crate::platform::segment_name::SegmentName;

#[cfg(doc)]
use super::KeepReason;

/// What [`scan`] looks at: the directory, the grace for fresh files, and
/// optionally a set of names to restrict it to. `N` is the kind of name
/// looked for: segments in `/dev/shm` by default, or memmap files
/// ([`ScanOptions::memmap_dir`]).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tensorshare_strategies::file_system::SegmentName;
/// use tensorshare_strategies::services::orphans::ScanOptions;
///
/// let name = SegmentName::parse(b"/torch_4242_1_0")?;
/// let options = ScanOptions::new()
///     .shm_dir("/run/shm")
///     .min_age(Duration::from_secs(60))
///     .only([name]);
/// assert_eq!(options.min_age_value(), Duration::from_secs(60));
/// # Ok::<(), tensorshare_strategies::file_system::InvalidSegmentName>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanOptions<N = SegmentName> {
    dir: PathBuf,
    min_age: Duration,
    only: Option<BTreeSet<N>>,
}

impl Default for ScanOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl ScanOptions {
    /// Every segment in [`DEFAULT_SHM_DIR`], with the [`DEFAULT_MIN_AGE`] grace.
    pub fn new() -> Self {
        Self {
            dir: PathBuf::from(DEFAULT_SHM_DIR),
            min_age: DEFAULT_MIN_AGE,
            only: None,
        }
    }

    /// Looks in `dir` instead of `/dev/shm`: for systems that keep POSIX
    /// shared memory elsewhere, or a host's `/dev/shm` mounted at another
    /// path (run in the host's pid namespace then: see the module docs).
    /// The directory is named by the operator and trusted: it is opened
    /// following symlinks; its entries are not.
    pub fn shm_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = dir.into();
        self
    }

    /// The directory scanned.
    pub fn shm_dir_path(&self) -> &Path {
        &self.dir
    }
}

impl ScanOptions<MemmapFileName> {
    /// Every memmap file its creator was to remove in `dir`
    /// ([`MemmapFileName`]; kept files are not looked at), with the
    /// [`DEFAULT_MIN_AGE`] grace. The directory is named by the operator
    /// and trusted, as [`ScanOptions::shm_dir`].
    pub fn memmap_dir(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            min_age: DEFAULT_MIN_AGE,
            only: None,
        }
    }
}

impl<N: OrphanName> ScanOptions<N> {
    /// Keeps every segment changed less than `age` ago. `Duration::ZERO`
    /// turns the grace off, for a name known to be finished with.
    pub fn min_age(mut self, age: Duration) -> Self {
        self.min_age = age;
        self
    }

    /// Looks at these names only (added to any given before); every other
    /// entry of the directory is left alone.
    pub fn only(mut self, names: impl IntoIterator<Item = N>) -> Self {
        self.only.get_or_insert_with(BTreeSet::new).extend(names);
        self
    }

    /// The directory scanned.
    pub fn dir_path(&self) -> &Path {
        &self.dir
    }

    /// The grace for fresh segments.
    pub fn min_age_value(&self) -> Duration {
        self.min_age
    }

    /// The names the scan is restricted to, if it is.
    pub fn only_names(&self) -> Option<&BTreeSet<N>> {
        self.only.as_ref()
    }
}

/// What [`scan`] found; [`OrphanScan::remove_orphans`] removes the orphans.
#[derive(Debug)]
pub struct OrphanScan<N = SegmentName> {
    pub(super) dir: OwnedFd,
    pub(super) options: ScanOptions<N>,
    pub(super) segments: Vec<SegmentReport<N>>,
    skipped: Vec<SkippedEntry<N>>,
    missing: Vec<N>,
    unreadable: Vec<u32>,
    proc_hides_processes: bool,
}

impl<N: OrphanName> OrphanScan<N> {
    /// Every segment found, orphans and kept ones, by name.
    pub fn segments(&self) -> &[SegmentReport<N>] {
        &self.segments
    }

    /// The orphans among [`segments`](Self::segments).
    pub fn orphans(&self) -> impl Iterator<Item = &SegmentReport<N>> {
        self.segments.iter().filter(|s| s.is_orphan())
    }

    /// Entries with a segment's name that are not regular files, or could
    /// not be `lstat`ed.
    pub fn skipped(&self) -> &[SkippedEntry<N>] {
        &self.skipped
    }

    /// The names given to [`ScanOptions::only`] that are not in the
    /// directory.
    pub fn missing(&self) -> &[N] {
        &self.missing
    }

    /// The processes whose fds or mappings this user may not read,
    /// ascending; kernel threads are not counted. While there is one, a
    /// segment the kernel cannot be asked about is kept
    /// ([`KeepReason::Unverifiable`]): run as root.
    pub fn unreadable_processes(&self) -> &[u32] {
        &self.unreadable
    }

    /// Whether `/proc` is mounted with `hidepid` and this user is not root,
    /// so other users' processes may be invisible: then a segment the
    /// kernel cannot be asked about is kept.
    pub fn proc_hides_processes(&self) -> bool {
        self.proc_hides_processes
    }

    /// The options the scan ran with.
    pub fn options(&self) -> &ScanOptions<N> {
        &self.options
    }
}

/// Lists the shared-memory directory and judges every segment in it.
///
/// Never removes anything: see [`OrphanScan::remove_orphans`]. The rules are
/// in the [module docs](super).
///
/// # Errors
///
/// [`ScanError`] when the directory cannot be opened or listed, or `/proc`
/// cannot be listed. A process or an entry that vanishes during the scan is
/// not an error; a process that cannot be read makes the scan keep
/// everything ([`KeepReason::Unverifiable`]).
///
/// # Examples
///
/// ```
/// use std::os::unix::fs::OpenOptionsExt;
///
/// use tensorshare_strategies::file_system::SegmentName;
/// use tensorshare_strategies::services::orphans::{self, KeepReason, ScanOptions};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // A segment of this process, which is alive: kept.
/// let name = SegmentName::fresh();
/// let path = std::path::Path::new("/dev/shm").join(name.file_name());
/// let file = std::fs::OpenOptions::new()
///     .write(true)
///     .create_new(true)
///     .mode(0o600)
///     .open(&path)?;
/// file.set_len(4096 + 64)?;
///
/// let scan = orphans::scan(&ScanOptions::new().only([name.clone()]))?;
/// let segment = &scan.segments()[0];
/// assert_eq!(segment.size, 4160);
/// assert_eq!(segment.creator_pid(), std::process::id());
/// assert_eq!(segment.keep, Some(KeepReason::CreatorAlive));
/// assert_eq!(segment.holders, [std::process::id()]); // `file` is open
/// std::fs::remove_file(&path)?;
/// # Ok(())
/// # }
/// ```
pub fn scan<N: OrphanName>(options: &ScanOptions<N>) -> Result<OrphanScan<N>, ScanError> {
    let dir = open(
        &options.dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| N::open_dir_error(options.dir.clone(), errno))?;
    let listing = list_entries(&dir, options)?;
    let targets: Vec<(&str, FileKey)> = listing
        .entries
        .iter()
        .map(|e| (e.name.file_name(), e.file))
        .collect();
    let holders = scan_holders(&targets)?;
    let now = SystemTime::now();
    let segments = listing
        .entries
        .iter()
        .filter_map(|entry| {
            // The verdict drops the probe, and with it any lease taken.
            judge(entry, &options.dir, &holders, options.min_age, now, || {
                hold_exclusively(&dir, entry)
            })
            .into_report(entry)
        })
        .collect();
    Ok(OrphanScan {
        dir,
        options: options.clone(),
        segments,
        skipped: listing.skipped,
        missing: listing.missing,
        unreadable: holders.unreadable.into_iter().collect(),
        proc_hides_processes: holders.proc_hides_processes,
    })
}
