//! Private socket directories left by tensorshare processes that are gone:
//! the rules are in the [parent module's docs](super#socket-directories).
//!
//! [`scan_socket_dirs`] lists the parent directories and judges every
//! socket directory in them (`judge`, which asks whether a socket listens
//! through `probe`); the findings are the types of `report`;
//! [`SocketDirScan::remove_orphans`] (`removal`) judges each orphan again
//! and removes it.

mod judge;
mod probe;
mod removal;
mod report;

use std::collections::BTreeSet;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;

use super::DEFAULT_MIN_AGE;
use super::error::ScanError;
use super::listing::read_dir_of;
use crate::platform::errno_of;
use crate::platform::private_dir::SocketDirName;
use judge::{Lookup, judge};
use probe::bound_socket_paths;

#[cfg(test)]
pub(super) use probe::parse_bound_socket_paths;
pub use removal::{SocketDirOutcome, SocketDirRemoval, SocketDirRemoveError};
pub use report::{SkippedSocketDir, SocketDirKeepReason, SocketDirReport};

/// What [`scan_socket_dirs`] looks at: the parent directories, the grace
/// for fresh directories, and optionally a set of names to restrict it to.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tensorshare_strategies::services::orphans::SocketDirScanOptions;
/// use tensorshare_strategies::platform::private_dir::SocketDirName;
///
/// let options = SocketDirScanOptions::new()
///     .parent("/tmp")
///     .min_age(Duration::ZERO)
///     .only([SocketDirName::parse("tensorshare-shm-Ab12cD")?]);
/// assert_eq!(options.parent_paths().len(), 1);
/// # Ok::<(), tensorshare_strategies::platform::private_dir::InvalidSocketDirName>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketDirScanOptions {
    parents: Vec<PathBuf>,
    min_age: Duration,
    only: Option<BTreeSet<SocketDirName>>,
}

impl Default for SocketDirScanOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl SocketDirScanOptions {
    /// No parent directory yet, with the [`DEFAULT_MIN_AGE`] grace.
    pub fn new() -> Self {
        Self {
            parents: Vec::new(),
            min_age: DEFAULT_MIN_AGE,
            only: None,
        }
    }

    /// Also looks directly inside `dir` (`$TMPDIR`, `/tmp`, the
    /// `TENSORSHARE_SHARER_DIR` of the processes to clean up after). The
    /// directory is named by the operator and trusted: it is opened
    /// following symlinks; its entries are not.
    pub fn parent(mut self, dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        if !self.parents.contains(&dir) {
            self.parents.push(dir);
        }
        self
    }

    /// Keeps every directory changed less than `age` ago.
    pub fn min_age(mut self, age: Duration) -> Self {
        self.min_age = age;
        self
    }

    /// Looks at these names only (added to any given before).
    pub fn only(mut self, names: impl IntoIterator<Item = SocketDirName>) -> Self {
        self.only.get_or_insert_with(BTreeSet::new).extend(names);
        self
    }

    /// The parent directories scanned, in order.
    pub fn parent_paths(&self) -> &[PathBuf] {
        &self.parents
    }

    /// The grace for fresh directories.
    pub fn min_age_value(&self) -> Duration {
        self.min_age
    }

    /// The names the scan is restricted to, if it is.
    pub fn only_names(&self) -> Option<&BTreeSet<SocketDirName>> {
        self.only.as_ref()
    }
}
/// What [`scan_socket_dirs`] found; [`SocketDirScan::remove_orphans`]
/// removes the orphans.
#[derive(Debug)]
pub struct SocketDirScan {
    parents: Vec<OwnedFd>,
    options: SocketDirScanOptions,
    dirs: Vec<SocketDirReport>,
    skipped: Vec<SkippedSocketDir>,
    missing: Vec<SocketDirName>,
}

impl SocketDirScan {
    /// Every socket directory found, orphans and kept ones, by parent and
    /// name.
    pub fn dirs(&self) -> &[SocketDirReport] {
        &self.dirs
    }

    /// The orphans among [`dirs`](Self::dirs).
    pub fn orphans(&self) -> impl Iterator<Item = &SocketDirReport> {
        self.dirs.iter().filter(|d| d.is_orphan())
    }

    /// Entries with a socket directory's name that are not directories, or
    /// could not be `lstat`ed.
    pub fn skipped(&self) -> &[SkippedSocketDir] {
        &self.skipped
    }

    /// The names given to [`SocketDirScanOptions::only`] found in no parent.
    pub fn missing(&self) -> &[SocketDirName] {
        &self.missing
    }

    /// The options the scan ran with.
    pub fn options(&self) -> &SocketDirScanOptions {
        &self.options
    }
}

/// Lists each parent directory and judges every socket directory in it.
///
/// Never removes anything: see [`SocketDirScan::remove_orphans`]. The rules
/// are in the [module docs](super#socket-directories).
///
/// # Errors
///
/// [`ScanError::OpenSocketParent`] or [`ScanError::ListSocketParent`] when
/// a parent directory cannot be opened or listed.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tensorshare_strategies::services::orphans::{self, SocketDirScanOptions};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // The directory of a sharer whose process has exited, with its socket.
/// let parent = tempfile::tempdir()?;
/// let mut child = std::process::Command::new("true").spawn()?;
/// child.wait()?;
/// let dir = parent.path().join(format!("tensorshare-sharer-{}-abcd1234", child.id()));
/// std::fs::create_dir(&dir)?;
/// drop(std::os::unix::net::UnixListener::bind(dir.join("listener-abcd1234"))?);
///
/// let options = SocketDirScanOptions::new().parent(parent.path()).min_age(Duration::ZERO);
/// let scan = orphans::scan_socket_dirs(&options)?;
/// assert!(scan.dirs()[0].is_orphan());
/// assert_eq!(scan.dirs()[0].sockets, ["listener-abcd1234"]);
/// scan.remove_orphans();
/// assert!(!dir.exists());
/// # Ok(())
/// # }
/// ```
pub fn scan_socket_dirs(options: &SocketDirScanOptions) -> Result<SocketDirScan, ScanError> {
    let bound = bound_socket_paths();
    let now = SystemTime::now();
    let mut scan = SocketDirScan {
        parents: Vec::with_capacity(options.parents.len()),
        options: options.clone(),
        dirs: Vec::new(),
        skipped: Vec::new(),
        missing: Vec::new(),
    };
    let mut found = BTreeSet::new();
    for path in &options.parents {
        let parent = open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| ScanError::OpenSocketParent {
            path: path.clone(),
            errno,
        })?;
        let names = match options.only_names() {
            Some(only) => only.iter().cloned().collect(),
            None => list_names(&parent, path)?,
        };
        for name in names {
            match judge(&parent, &name, options.min_age, now, &bound) {
                Lookup::Found(judged) => {
                    found.insert(name.clone());
                    scan.dirs.push(judged.into_report(path, name));
                }
                Lookup::Skipped(reason) => {
                    found.insert(name.clone());
                    scan.skipped.push(SkippedSocketDir {
                        parent: path.clone(),
                        name,
                        reason,
                    });
                }
                Lookup::Gone => {}
            }
        }
        scan.parents.push(parent);
    }
    if let Some(only) = options.only_names() {
        scan.missing = only.difference(&found).cloned().collect();
    }
    scan.dirs
        .sort_by(|a, b| (&a.parent, &a.name).cmp(&(&b.parent, &b.name)));
    Ok(scan)
}

/// The entries of `parent` named as socket directories.
fn list_names(parent: &OwnedFd, path: &Path) -> Result<Vec<SocketDirName>, ScanError> {
    let list_error = |e: io::Error| ScanError::ListSocketParent {
        path: path.to_path_buf(),
        errno: errno_of(&e),
    };
    let entries = read_dir_of(parent).map_err(list_error)?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(list_error)?;
        if let Some(name) = entry
            .file_name()
            .to_str()
            .and_then(|name| SocketDirName::parse(name).ok())
        {
            names.push(name);
        }
    }
    Ok(names)
}
