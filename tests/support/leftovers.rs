//! What a kill trial left, whose it is, and what `tensorshare gc` made of
//! it.
//!
//! Ours is what a tensorshare process made: `/dev/shm` segments named with
//! its pid, files in the trial's memmap directory, `tensorshare-*` socket
//! files and directories in its `TMPDIR`, managers still alive, fds a
//! surviving tensorshare server kept. Torch's is what a torch process made:
//! segments named with its pid (a torch process whose `torch_shm_manager`
//! was killed leaks its own, and one killed between creating and unlinking
//! a `file_descriptor` segment leaves that one); CPython's `pymp-*` and
//! torch's `torch-shm-dir-*` in `TMPDIR` are not counted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tensorshare_strategies::file_system::SegmentName;
use tensorshare_strategies::memmap::MemmapFileName;
use tensorshare_strategies::platform::private_dir::SocketDirName;

use super::{segments_of, tree};

/// How long `tensorshare gc` may take.
const GC_LIMIT: Duration = Duration::from_secs(60);

/// What one trial left behind, by kind and owner.
#[derive(Clone, Debug, Default)]
pub struct Leaks {
    /// `/dev/shm` entries a tensorshare process of the trial created.
    pub shm: Vec<String>,
    /// Files in the trial's memmap directory.
    pub memmap_files: Vec<PathBuf>,
    /// Socket files of ours in the trial's `TMPDIR`.
    pub sockets: Vec<PathBuf>,
    /// Other entries of ours in the trial's `TMPDIR`.
    pub tmp_files: Vec<PathBuf>,
    /// Pids of shared-memory managers still alive.
    pub managers: Vec<u32>,
    /// Fds a surviving tensorshare server held above its start.
    pub fds: usize,
    /// `/dev/shm` entries a torch process of the trial created.
    pub torch_shm: Vec<String>,
    /// What of ours was still there after `tensorshare gc`.
    pub ours_after_gc: Vec<String>,
    /// What of torch's was still there after `tensorshare gc`.
    pub torch_after_gc: Vec<String>,
    /// Whether the trial killed a process together with everything that
    /// could clean up after it (its manager, or a memmap file's receivers,
    /// whom no one can ask), so that its objects are left for gc.
    pub left_for_gc: bool,
}

impl Leaks {
    /// Whether the survivors left anything of ours.
    pub fn ours_left(&self) -> bool {
        !(self.shm.is_empty()
            && self.memmap_files.is_empty()
            && self.sockets.is_empty()
            && self.tmp_files.is_empty())
    }

    /// Whether any of it is ours to answer for: anything gc cannot
    /// reclaim, a manager or fd kept, or what survivors should have
    /// removed themselves.
    pub fn is_ours(&self) -> bool {
        !self.ours_after_gc.is_empty()
            || !self.managers.is_empty()
            || self.fds > 0
            || (self.ours_left() && !self.left_for_gc)
    }
}

/// The trial's processes and where their objects go.
pub struct TrialPlaces<'a> {
    /// Pids of the tensorshare processes.
    pub ours: &'a [u32],
    /// Pids of the torch processes.
    pub torch: &'a [u32],
    pub tmp: &'a Path,
    pub memmap_dir: &'a Path,
    /// Whether a torch process takes part: its `TMPDIR` entries that are
    /// not tensorshare's are its own.
    pub torch_peer: bool,
}

impl TrialPlaces<'_> {
    /// Fills in what is left now, but for managers and fds.
    pub fn look(&self, leaks: &mut Leaks) {
        leaks.shm = self.ours.iter().flat_map(|&pid| segments_of(pid)).collect();
        leaks.torch_shm = self
            .torch
            .iter()
            .flat_map(|&pid| segments_of(pid))
            .collect();
        leaks.memmap_files = tree(self.memmap_dir);
        let (sockets, files): (Vec<PathBuf>, Vec<PathBuf>) = tree(self.tmp)
            .into_iter()
            .filter(|path| !self.torch_peer || is_ours_in_tmp(self.tmp, path))
            .partition(|path| is_socket(path));
        leaks.sockets = sockets;
        leaks.tmp_files = files;
    }

    /// Runs `tensorshare gc` over what the trial left, once its processes
    /// are gone, and notes what is still there.
    pub fn reclaim(&self, leaks: &mut Leaks) {
        // Only names gc takes: one it refuses would fail the whole run.
        let mut only: Vec<String> = leaks
            .shm
            .iter()
            .chain(&leaks.torch_shm)
            .filter(|name| SegmentName::parse(format!("/{name}").as_bytes()).is_ok())
            .cloned()
            .collect();
        only.extend(
            leaks
                .memmap_files
                .iter()
                .filter_map(|path| path.file_name()?.to_str())
                .filter(|name| MemmapFileName::parse(name).is_ok())
                .map(str::to_owned),
        );
        only.extend(
            std::fs::read_dir(self.tmp)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
                .filter(|name| SocketDirName::parse(name).is_ok()),
        );
        if !only.is_empty() {
            self.run_gc(&only);
        }
        let mut after = Leaks::default();
        self.look(&mut after);
        leaks.ours_after_gc = after
            .shm
            .into_iter()
            .chain(
                after
                    .memmap_files
                    .iter()
                    .chain(&after.sockets)
                    .chain(&after.tmp_files)
                    .map(|path| path.display().to_string()),
            )
            .collect();
        leaks.torch_after_gc = after.torch_shm;
    }

    fn run_gc(&self, only: &[String]) {
        let mut command = Command::new(super::tensorshare_exe());
        command
            .args(["gc", "--min-age", "0", "--socket-dir"])
            .arg(self.tmp)
            .arg("--memmap-dir")
            .arg(self.memmap_dir)
            .env("TMPDIR", self.tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for name in only {
            command.arg("--only").arg(name);
        }
        let Ok(mut child) = command.spawn() else {
            return;
        };
        if super::exit_within(&mut child, GC_LIMIT).is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Whether `path`, in `tmp`, is under an entry of tensorshare's.
fn is_ours_in_tmp(tmp: &Path, path: &Path) -> bool {
    path.strip_prefix(tmp)
        .ok()
        .and_then(|inside| inside.components().next())
        .is_some_and(|first| {
            first
                .as_os_str()
                .to_string_lossy()
                .starts_with("tensorshare")
        })
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_socket())
}
