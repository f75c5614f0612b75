//! Counting how often files of one directory are opened, and let go of
//! again, by any process: inotify's `IN_OPEN`, `IN_CLOSE_WRITE` and
//! `IN_CLOSE_NOWRITE`.
//!
//! The kernel queues the events as the calls happen, in the process that
//! makes them, so once [`OpenWatch::refresh`] has drained the queue the
//! counts cover every open made before it. A close event comes when an
//! open file is let go of entirely: its last fd closed *and* its last
//! mapping unmapped (the mapping holds the open file), so "every open let
//! go of" means no process has the file open or mapped through an open
//! counted here. `IN_CLOSE_WRITE` tells an open for writing from a
//! read-only one.
//!
//! Counts can come out short, never long: the kernel merges an event into
//! the one queued before it when both are identical and the first is still
//! unread (two opens of a file in a row count once), and when it drops
//! events (its queue overflowed) or the watch ends (the directory went),
//! the counts of every file tracked then are marked
//! [`lost`](OpenCounts::lost) for good. A rule built on them must only
//! need a count to have reached something.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::Path;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

/// What was seen of one file since it was tracked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenCounts {
    /// Opens of the file, for reading or writing.
    pub opened: u64,
    /// Opens for writing let go of entirely: no fd, no mapping left.
    pub released_writable: u64,
    /// Read-only opens let go of entirely.
    pub released_read_only: u64,
    /// Events about the file were lost: the counts above may be short.
    pub lost: bool,
}

/// The opens and releases of chosen files in one directory.
#[derive(Debug)]
pub struct OpenWatch {
    inotify: Inotify,
    counts: HashMap<OsString, OpenCounts>,
    /// The watch ended: nothing more will be counted.
    ended: bool,
}

impl OpenWatch {
    /// Watches the files directly inside `dir`; none is counted until
    /// [`track`](Self::track)ed.
    ///
    /// # Errors
    ///
    /// The errno of `inotify_init1` (`EMFILE` when the user's
    /// `fs.inotify.max_user_instances` are taken) or of `inotify_add_watch`.
    pub fn new(dir: &Path) -> Result<Self, Errno> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        inotify.add_watch(
            dir,
            AddWatchFlags::IN_OPEN
                | AddWatchFlags::IN_CLOSE_WRITE
                | AddWatchFlags::IN_CLOSE_NOWRITE
                | AddWatchFlags::IN_ONLYDIR,
        )?;
        Ok(Self {
            inotify,
            counts: HashMap::new(),
            ended: false,
        })
    }

    /// Starts counting the file `name` of the directory, with the events
    /// about it the next [`refresh`](Self::refresh) reads: those of calls
    /// made from now on, and those already queued (for a file just created,
    /// its creator's own open; its release comes only once the creator lets
    /// go of the file).
    pub fn track(&mut self, name: &OsStr) {
        let counts = OpenCounts {
            lost: self.ended,
            ..OpenCounts::default()
        };
        self.counts.insert(name.to_owned(), counts);
    }

    /// Stops counting the file `name`.
    pub fn untrack(&mut self, name: &OsStr) {
        self.counts.remove(name);
    }

    /// What was seen of the file `name` up to the last
    /// [`refresh`](Self::refresh), if it is tracked.
    pub fn counts(&self, name: &OsStr) -> Option<OpenCounts> {
        self.counts.get(name).copied()
    }

    /// Applies every event the kernel has queued.
    pub fn refresh(&mut self) {
        loop {
            let events = match self.inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EINTR) => continue,
                // Drained (`EAGAIN`), or the queue cannot be read: what it
                // held is lost then.
                Err(Errno::EAGAIN) => return,
                Err(_) => {
                    self.lose_all();
                    return;
                }
            };
            if events.is_empty() {
                return;
            }
            for event in events {
                if event
                    .mask
                    .intersects(AddWatchFlags::IN_Q_OVERFLOW | AddWatchFlags::IN_IGNORED)
                {
                    if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                        self.ended = true;
                    }
                    self.lose_all();
                    continue;
                }
                let Some(counts) = event.name.and_then(|name| self.counts.get_mut(&name)) else {
                    continue;
                };
                if event.mask.contains(AddWatchFlags::IN_OPEN) {
                    counts.opened += 1;
                }
                if event.mask.contains(AddWatchFlags::IN_CLOSE_WRITE) {
                    counts.released_writable += 1;
                }
                if event.mask.contains(AddWatchFlags::IN_CLOSE_NOWRITE) {
                    counts.released_read_only += 1;
                }
            }
        }
    }

    fn lose_all(&mut self) {
        for counts in self.counts.values_mut() {
            counts.lost = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{File, OpenOptions};

    use super::*;

    #[test]
    fn opens_and_their_releases_are_counted_by_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tracked");
        let untracked = dir.path().join("other");
        File::create(&path).unwrap().set_len(4096).unwrap();
        File::create(&untracked).unwrap();
        let mut watch = OpenWatch::new(dir.path()).unwrap();
        let name = OsStr::new("tracked");
        // Opened before it is tracked, and read after: counted too.
        let early = File::open(&path).unwrap();
        watch.track(name);
        // Another file's event between two opens of this one, which the
        // kernel would otherwise merge.
        drop(File::open(&untracked).unwrap());
        let writable = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        drop(File::open(&untracked).unwrap());
        let read_only = File::open(&path).unwrap();
        watch.refresh();
        let counts = watch.counts(name).unwrap();
        assert_eq!((counts.opened, counts.released_writable), (3, 0));
        drop((early, writable, read_only));
        watch.refresh();
        let counts = watch.counts(name).unwrap();
        assert_eq!(
            (
                counts.opened,
                counts.released_writable,
                counts.released_read_only
            ),
            (3, 1, 2)
        );
        assert!(!counts.lost);
        watch.untrack(name);
        assert_eq!(watch.counts(name), None);
    }

    #[test]
    #[allow(unsafe_code)]
    fn a_mapping_holds_its_open_until_unmapped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mapped");
        File::create(&path).unwrap().set_len(4096).unwrap();
        let mut watch = OpenWatch::new(dir.path()).unwrap();
        let name = OsStr::new("mapped");
        watch.track(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        // SAFETY: the file was sized above and nothing truncates it.
        let mapping = unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap();
        drop(file);
        watch.refresh();
        assert_eq!(watch.counts(name).unwrap().released_writable, 0);
        drop(mapping);
        watch.refresh();
        let counts = watch.counts(name).unwrap();
        assert_eq!((counts.opened, counts.released_writable), (1, 1));
    }
}
