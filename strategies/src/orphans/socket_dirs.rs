//! Private socket directories left by tensorshare processes that are gone:
//! the rules are in the [parent module's docs](super#socket-directories).

use std::collections::{BTreeSet, HashSet};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, open, openat};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, connect, socket};
use nix::sys::stat::{Mode, SFlag, fstat, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::DEFAULT_MIN_AGE;
use super::error::ScanError;
use super::listing::{FileKey, file_type_name, last_change};
use super::report::SkipReason;
use crate::UnixUser;
use crate::error::errno_of;
use crate::mapping::file_type;
use crate::owner::is_own_uid;
use crate::private_dir::{SocketDirKind, SocketDirName};
use crate::process;

/// What [`scan_socket_dirs`] looks at: the parent directories, the grace
/// for fresh directories, and optionally a set of names to restrict it to.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tensorshare_strategies::orphans::SocketDirScanOptions;
/// use tensorshare_strategies::private_dir::SocketDirName;
///
/// let options = SocketDirScanOptions::new()
///     .parent("/tmp")
///     .min_age(Duration::ZERO)
///     .only([SocketDirName::parse("tensorshare-shm-Ab12cD")?]);
/// assert_eq!(options.parent_paths().len(), 1);
/// # Ok::<(), tensorshare_strategies::private_dir::InvalidSocketDirName>(())
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

/// Why a socket directory is not an orphan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SocketDirKeepReason {
    /// Another user owns it: the scan removes only its own user's
    /// directories, root's included, and does not look inside others'.
    OtherUser {
        /// The owner's uid.
        uid: u32,
    },
    /// The process named in it exists (or its pid was recycled).
    CreatorAlive,
    /// A socket in it is listening: its process is alive, perhaps in
    /// another pid namespace, or another process inherited the socket.
    Listening,
    /// It was changed less than [`SocketDirScanOptions::min_age`] ago.
    Recent {
        /// How long ago it was last changed.
        age: Duration,
    },
    /// It holds something other than the sockets its kind binds:
    /// [`SocketDirReport::unexpected`].
    UnexpectedEntry,
    /// This user may not look inside (another user's directory).
    Unreadable {
        /// What opening or listing it failed with.
        errno: Errno,
    },
    /// Whether a socket in it is listening could not be told: connecting
    /// failed with this rather than being refused.
    Unprobed {
        /// What `connect` failed with.
        errno: Errno,
    },
    /// Another directory took its name during the scan.
    Replaced,
}

impl SocketDirKeepReason {
    /// A short code for machine-readable reports: `other_user`,
    /// `creator_alive`, `listening`, `recent`, `unexpected_entry`,
    /// `unreadable`, `unprobed`, `replaced`.
    pub fn code(&self) -> &'static str {
        match self {
            SocketDirKeepReason::OtherUser { .. } => "other_user",
            SocketDirKeepReason::CreatorAlive => "creator_alive",
            SocketDirKeepReason::Listening => "listening",
            SocketDirKeepReason::Recent { .. } => "recent",
            SocketDirKeepReason::UnexpectedEntry => "unexpected_entry",
            SocketDirKeepReason::Unreadable { .. } => "unreadable",
            SocketDirKeepReason::Unprobed { .. } => "unprobed",
            SocketDirKeepReason::Replaced => "replaced",
        }
    }
}

impl std::fmt::Display for SocketDirKeepReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SocketDirKeepReason::OtherUser { uid } => write!(
                f,
                "it belongs to {}: gc removes only its own user's directories; run gc as that \
                 user",
                UnixUser::of(*uid)
            ),
            SocketDirKeepReason::CreatorAlive => f.write_str("its creator is alive"),
            SocketDirKeepReason::Listening => f.write_str("a socket in it is listening"),
            SocketDirKeepReason::Recent { age } => {
                write!(f, "changed {:.1} s ago", age.as_secs_f64())
            }
            SocketDirKeepReason::UnexpectedEntry => {
                f.write_str("it holds something other than its sockets")
            }
            SocketDirKeepReason::Unreadable { errno } => write!(
                f,
                "cannot look inside ({errno}): run as root or as its owner"
            ),
            SocketDirKeepReason::Unprobed { errno } => write!(
                f,
                "cannot tell whether its socket is listening: connecting failed with {errno}"
            ),
            SocketDirKeepReason::Replaced => f.write_str("another directory took its name"),
        }
    }
}

/// One socket directory and what the scan found about it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketDirReport {
    /// The directory it is in.
    pub parent: PathBuf,
    /// Its checked name.
    pub name: SocketDirName,
    /// The user that owns it.
    pub owner_uid: u32,
    /// How long ago it was last changed (the later of mtime and ctime).
    pub age: Duration,
    /// For a resource sharer's directory, whether the process named in it
    /// exists; `None` for a manager's, whose name carries no pid.
    pub creator_alive: Option<bool>,
    /// The sockets found in it, by name, sorted; empty when it was not
    /// looked into.
    pub sockets: Vec<String>,
    /// Those of [`sockets`](Self::sockets) found listening.
    pub listening: Vec<String>,
    /// The first entry found in it that is not one of its sockets.
    pub unexpected: Option<String>,
    /// Why it is kept, or `None` for an orphan.
    pub keep: Option<SocketDirKeepReason>,
    file: FileKey,
}

impl SocketDirReport {
    /// The directory's path.
    pub fn path(&self) -> PathBuf {
        self.parent.join(self.name.as_str())
    }

    /// Whether the scan found it orphaned.
    pub fn is_orphan(&self) -> bool {
        self.keep.is_none()
    }
}

/// An entry with a socket directory's name that the scan did not judge.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedSocketDir {
    /// The directory it is in.
    pub parent: PathBuf,
    /// Its name.
    pub name: SocketDirName,
    /// Why it was skipped.
    pub reason: SkipReason,
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
/// use tensorshare_strategies::orphans::{self, SocketDirScanOptions};
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
    // Through the fd, so that the listing and the `lstat`s see one
    // directory.
    let entries =
        std::fs::read_dir(format!("/proc/self/fd/{}", parent.as_raw_fd())).map_err(list_error)?;
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

/// The paths of the sockets bound in this network namespace, from
/// `/proc/net/unix`; empty when it cannot be read (then connecting tells).
fn bound_socket_paths() -> HashSet<Vec<u8>> {
    std::fs::read("/proc/net/unix")
        .map(|table| parse_bound_socket_paths(&table))
        .unwrap_or_default()
}

/// The socket paths of a `/proc/net/unix` table.
pub(super) fn parse_bound_socket_paths(table: &[u8]) -> HashSet<Vec<u8>> {
    table
        .split(|b| *b == b'\n')
        .skip(1)
        .filter_map(|line| {
            // `Num RefCount Protocol Flags Type St Inode [Path]`: the path
            // is the rest of the line after seven fields.
            let mut rest = line;
            for _ in 0..7 {
                let start = rest.iter().position(|b| *b != b' ')?;
                rest = rest.get(start..)?;
                let end = rest.iter().position(|b| *b == b' ')?;
                rest = rest.get(end..)?;
            }
            let start = rest.iter().position(|b| *b != b' ')?;
            let path = rest.get(start..)?;
            // Abstract names show as `@name`.
            path.starts_with(b"/").then(|| path.to_vec())
        })
        .collect()
}

/// Whether `/proc/net/unix` lists a socket bound at `.../dir/socket`.
/// Matched by the tail: the directory's random name is unique, and the
/// parent may have been named by another path when the socket was bound.
fn is_bound(bound: &HashSet<Vec<u8>>, dir: &SocketDirName, socket: &str) -> bool {
    let tail = format!("/{dir}/{socket}");
    bound.iter().any(|path| path.ends_with(tail.as_bytes()))
}

/// What connecting to a socket file said.
enum Knock {
    /// Nothing listens: the socket's listener is gone.
    Refused,
    /// Something listens (accepted, or its backlog is full).
    Listening,
    /// The file vanished meanwhile.
    Gone,
    Failed(Errno),
}

/// Connects to `socket` in the directory open as `dir`, without blocking
/// and without following the directory's path again.
fn knock(dir: &OwnedFd, socket: &str) -> Knock {
    let path = format!("/proc/self/fd/{}/{socket}", dir.as_raw_fd());
    let Ok(address) = UnixAddr::new(path.as_str()) else {
        return Knock::Failed(Errno::ENAMETOOLONG);
    };
    let stream = match socket_stream() {
        Ok(stream) => stream,
        Err(errno) => return Knock::Failed(errno),
    };
    match connect(stream.as_raw_fd(), &address) {
        Ok(()) | Err(Errno::EAGAIN | Errno::EINPROGRESS) => Knock::Listening,
        Err(Errno::ECONNREFUSED) => Knock::Refused,
        Err(Errno::ENOENT) => Knock::Gone,
        Err(errno) => Knock::Failed(errno),
    }
    // Dropping `stream` closes the connection, if one was made.
}

fn socket_stream() -> Result<OwnedFd, Errno> {
    socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
}

/// What judging one name gave.
enum Lookup {
    Found(Judged),
    Skipped(SkipReason),
    Gone,
}

/// The facts about one directory, the verdict, and the directory opened
/// for its removal.
struct Judged {
    file: FileKey,
    owner_uid: u32,
    age: Duration,
    creator_alive: Option<bool>,
    sockets: Vec<String>,
    listening: Vec<String>,
    unexpected: Option<String>,
    keep: Option<SocketDirKeepReason>,
    opened: Option<OwnedFd>,
}

impl Judged {
    fn into_report(self, parent: &Path, name: SocketDirName) -> SocketDirReport {
        SocketDirReport {
            parent: parent.to_path_buf(),
            name,
            owner_uid: self.owner_uid,
            age: self.age,
            creator_alive: self.creator_alive,
            sockets: self.sockets,
            listening: self.listening,
            unexpected: self.unexpected,
            keep: self.keep,
            file: self.file,
        }
    }
}

/// Judges `name` in `parent` by the rules of the module docs, in their
/// order.
fn judge(
    parent: &OwnedFd,
    name: &SocketDirName,
    min_age: Duration,
    now: SystemTime,
    bound: &HashSet<Vec<u8>>,
) -> Lookup {
    let stat = match fstatat(parent, name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::ENOENT) => return Lookup::Gone,
        Err(errno) => return Lookup::Skipped(SkipReason::Stat { errno }),
    };
    if file_type(&stat) != SFlag::S_IFDIR {
        return Lookup::Skipped(SkipReason::NotDirectory {
            file_type: file_type_name(file_type(&stat)),
        });
    }
    let age = now
        .duration_since(last_change(&stat))
        .unwrap_or(Duration::ZERO);
    let mut judged = Judged {
        file: FileKey::new(stat.st_dev, stat.st_ino),
        owner_uid: stat.st_uid,
        age,
        creator_alive: name.creator_pid().map(process::exists),
        sockets: Vec::new(),
        listening: Vec::new(),
        unexpected: None,
        keep: None,
        opened: None,
    };
    // Root included, before anything inside is looked at: a socket
    // directory of another user's is that user's to reclaim.
    if !is_own_uid(stat.st_uid) {
        judged.keep = Some(SocketDirKeepReason::OtherUser { uid: stat.st_uid });
        return Lookup::Found(judged);
    }
    if judged.creator_alive == Some(true) {
        judged.keep = Some(SocketDirKeepReason::CreatorAlive);
        return Lookup::Found(judged);
    }
    if age < min_age {
        judged.keep = Some(SocketDirKeepReason::Recent { age });
        return Lookup::Found(judged);
    }
    let dir = match openat(
        parent,
        name.as_str(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(dir) => dir,
        Err(Errno::ENOENT) => return Lookup::Gone,
        Err(Errno::ENOTDIR | Errno::ELOOP) => {
            judged.keep = Some(SocketDirKeepReason::Replaced);
            return Lookup::Found(judged);
        }
        Err(errno) => {
            judged.keep = Some(SocketDirKeepReason::Unreadable { errno });
            return Lookup::Found(judged);
        }
    };
    match fstat(&dir) {
        Ok(opened) if FileKey::new(opened.st_dev, opened.st_ino) == judged.file => {}
        Ok(_) => {
            judged.keep = Some(SocketDirKeepReason::Replaced);
            return Lookup::Found(judged);
        }
        Err(errno) => {
            judged.keep = Some(SocketDirKeepReason::Unreadable { errno });
            return Lookup::Found(judged);
        }
    }
    match list_sockets(&dir, name.kind()) {
        Ok(Contents::Sockets(sockets)) => judged.sockets = sockets,
        Ok(Contents::Unexpected(entry)) => {
            judged.unexpected = Some(entry);
            judged.keep = Some(SocketDirKeepReason::UnexpectedEntry);
            return Lookup::Found(judged);
        }
        Err(errno) => {
            judged.keep = Some(SocketDirKeepReason::Unreadable { errno });
            return Lookup::Found(judged);
        }
    }
    let mut vanished = Vec::new();
    for socket in &judged.sockets {
        if is_bound(bound, name, socket) {
            judged.listening.push(socket.clone());
            continue;
        }
        match knock(&dir, socket) {
            Knock::Refused => {}
            Knock::Listening => judged.listening.push(socket.clone()),
            Knock::Gone => vanished.push(socket.clone()),
            Knock::Failed(errno) => {
                judged.keep = Some(SocketDirKeepReason::Unprobed { errno });
            }
        }
    }
    judged.sockets.retain(|socket| !vanished.contains(socket));
    if !judged.listening.is_empty() {
        judged.keep = Some(SocketDirKeepReason::Listening);
    }
    judged.opened = Some(dir);
    Lookup::Found(judged)
}

/// What a socket directory holds.
enum Contents {
    /// Only sockets of the names its kind binds, sorted.
    Sockets(Vec<String>),
    /// This entry, which is not one of them.
    Unexpected(String),
}

fn list_sockets(dir: &OwnedFd, kind: SocketDirKind) -> Result<Contents, Errno> {
    let entries = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .map_err(|e| errno_of(&e))?;
    let mut sockets = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| errno_of(&e))?;
        let file_name = entry.file_name();
        let shown = file_name.to_string_lossy().into_owned();
        if !kind.is_socket_name(file_name.as_bytes()) {
            return Ok(Contents::Unexpected(shown));
        }
        match fstatat(dir, file_name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) if file_type(&stat) == SFlag::S_IFSOCK => sockets.push(shown),
            Ok(_) => return Ok(Contents::Unexpected(shown)),
            Err(Errno::ENOENT) => {}
            Err(errno) => return Err(errno),
        }
    }
    sockets.sort();
    Ok(Contents::Sockets(sockets))
}

/// What [`SocketDirScan::remove_orphans`] did with one orphan.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketDirRemoval {
    /// The directory it was in.
    pub parent: PathBuf,
    /// The directory.
    pub name: SocketDirName,
    /// What happened.
    pub outcome: SocketDirOutcome,
}

/// What happened to one orphaned socket directory at removal.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SocketDirOutcome {
    /// Its sockets and the directory were removed.
    Removed,
    /// The second look found it is not an orphan after all; it was left.
    Kept(SocketDirKeepReason),
    /// It was gone already.
    Vanished,
    /// Removing it failed; what is left of it is still there.
    Failed(SocketDirRemoveError),
}

/// Why an orphaned socket directory could not be removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot remove {path} ({errno}): it is left in place; {}",
    remove_hint(*errno)
)]
#[non_exhaustive]
pub struct SocketDirRemoveError {
    /// The directory, or the socket in it that could not be removed.
    pub path: PathBuf,
    /// What `unlinkat` failed with.
    pub errno: Errno,
}

fn remove_hint(errno: Errno) -> &'static str {
    match errno {
        Errno::EPERM | Errno::EACCES => "run as root or as its owner",
        _ => "check the directory and run again",
    }
}

impl SocketDirScan {
    /// Removes every orphan of this scan, judging each again just before:
    /// a fresh `/proc/net/unix`, `lstat`, `kill(pid, 0)`, listing and
    /// connection to each socket. Then it unlinks the sockets and the
    /// directory. One that is no longer an orphan is kept and reported with
    /// the reason.
    pub fn remove_orphans(&self) -> Vec<SocketDirRemoval> {
        let bound = bound_socket_paths();
        let now = SystemTime::now();
        let mut removals = Vec::new();
        for orphan in self.orphans() {
            let Some((index, _)) = self
                .options
                .parents
                .iter()
                .enumerate()
                .find(|(_, path)| **path == orphan.parent)
            else {
                continue;
            };
            let Some(parent) = self.parents.get(index) else {
                continue;
            };
            let outcome = match judge(parent, &orphan.name, self.options.min_age, now, &bound) {
                Lookup::Gone => SocketDirOutcome::Vanished,
                Lookup::Skipped(_) => SocketDirOutcome::Kept(SocketDirKeepReason::Replaced),
                Lookup::Found(judged) if judged.file != orphan.file => {
                    SocketDirOutcome::Kept(SocketDirKeepReason::Replaced)
                }
                Lookup::Found(Judged {
                    keep: Some(reason), ..
                }) => SocketDirOutcome::Kept(reason),
                Lookup::Found(judged) => remove(parent, orphan, &judged),
            };
            removals.push(SocketDirRemoval {
                parent: orphan.parent.clone(),
                name: orphan.name.clone(),
                outcome,
            });
        }
        removals
    }
}

/// Unlinks the sockets `judged` found, then the directory.
fn remove(parent: &OwnedFd, orphan: &SocketDirReport, judged: &Judged) -> SocketDirOutcome {
    let Some(dir) = &judged.opened else {
        return SocketDirOutcome::Kept(SocketDirKeepReason::Replaced);
    };
    let failed =
        |path: PathBuf, errno| SocketDirOutcome::Failed(SocketDirRemoveError { path, errno });
    for socket in &judged.sockets {
        match unlinkat(dir, socket.as_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(errno) => return failed(orphan.path().join(socket), errno),
        }
    }
    match unlinkat(parent, orphan.name.as_str(), UnlinkatFlags::RemoveDir) {
        Ok(()) => SocketDirOutcome::Removed,
        Err(Errno::ENOENT) => SocketDirOutcome::Vanished,
        // Something was put in it after the check: it is not ours to empty.
        Err(Errno::ENOTEMPTY | Errno::EEXIST) => {
            SocketDirOutcome::Kept(SocketDirKeepReason::UnexpectedEntry)
        }
        Err(errno) => failed(orphan.path(), errno),
    }
}
