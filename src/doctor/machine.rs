//! The checks of this process's user and the machine, each one finding.

use std::path::Path;

use nix::sys::resource::{Resource, getrlimit};
use nix::sys::statfs::{TMPFS_MAGIC, statfs};
use nix::sys::statvfs::statvfs;
use tensorshare_strategies::memmap::MemmapFileName;
use tensorshare_strategies::services::orphans::{self, ScanOptions};

use super::{DoctorOptions, Finding};
use crate::sharing::placement::{Placement, segment_removal};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// Docker's and Podman's `/dev/shm` unless told otherwise.
const CONTAINER_DEFAULT_SHM: u64 = 64 * MIB;
/// Below this, a DataLoader's few batches in flight already fill `/dev/shm`.
const SHM_ROOMY: u64 = GIB;
/// Open files a process sharing by fd needs: torch's own advice.
pub(super) const OPEN_FILES_WANTED: u64 = 4096;
/// The kernel's default `vm.max_map_count`: below it, someone lowered it.
const MAX_MAP_COUNT_DEFAULT: u64 = 65530;
/// The kernel's default `fs.inotify.max_user_instances`.
const INOTIFY_INSTANCES_DEFAULT: u64 = 128;
/// The kernel's smallest default `fs.inotify.max_user_watches`.
const INOTIFY_WATCHES_DEFAULT: u64 = 8192;
/// More managers than this running at once means they are not exiting.
const MANAGERS_PILING_UP: usize = 8;

/// Every check, in the order the command prints them.
pub(super) fn findings(options: &DoctorOptions) -> Vec<Finding> {
    vec![
        dev_shm(&options.shm_dir),
        open_files(),
        max_map_count(),
        remove_ipc(&options.root),
        default_placement(&options.root),
        inotify(),
        temp_dir(&options.temp_dir),
        managers(),
        leaked_segments(&options.shm_dir),
        leaked_memmap_files(&options.temp_dir),
    ]
}

/// Bytes free and in all of the filesystem holding `dir`.
pub(super) fn space(dir: &Path) -> nix::Result<(u64, u64)> {
    let stats = statvfs(dir)?;
    let block = stats.fragment_size();
    Ok((
        stats.blocks_available().saturating_mul(block),
        stats.blocks().saturating_mul(block),
    ))
}

fn dev_shm(dir: &Path) -> Finding {
    const CHECK: &str = "dev_shm";
    let shown = dir.display();
    let fs = match statfs(dir) {
        Ok(fs) => fs,
        Err(errno) => {
            return Finding::fail(
                CHECK,
                format!("{shown} cannot be read: {errno}"),
                format!("mount a tmpfs there: `mount -t tmpfs -o size=8g tmpfs {shown}`"),
            );
        }
    };
    let Ok((free, total)) = space(dir) else {
        return Finding::fail(
            CHECK,
            format!("{shown} gives no size"),
            format!("mount a tmpfs there: `mount -t tmpfs -o size=8g tmpfs {shown}`"),
        );
    };
    let sizes = format!("{} free of {}", human(free), human(total));
    if fs.filesystem_type() != TMPFS_MAGIC {
        return Finding::warn(
            CHECK,
            format!("{shown} is not a tmpfs ({sizes}): shared tensors go to disk"),
            format!("mount a tmpfs there: `mount -t tmpfs -o size=8g tmpfs {shown}`"),
        );
    }
    let container_fix = "run the container with `--shm-size=8g` or `--ipc=host` \
                         (Kubernetes: an emptyDir with `medium: Memory` on /dev/shm)";
    if total <= CONTAINER_DEFAULT_SHM {
        return Finding::warn(
            CHECK,
            format!(
                "{shown} is a container's default 64 MB tmpfs ({sizes}): workers die of SIGBUS"
            ),
            container_fix,
        );
    }
    if total < SHM_ROOMY {
        return Finding::warn(
            CHECK,
            format!("{shown} is a small tmpfs ({sizes})"),
            container_fix,
        );
    }
    if free < total / 10 {
        return Finding::warn(
            CHECK,
            format!("{shown} is nearly full ({sizes})"),
            "run `tensorshare gc` to remove leaked segments, or give /dev/shm more room",
        );
    }
    Finding::ok(CHECK, format!("{shown} is a tmpfs, {sizes}"))
}

fn open_files() -> Finding {
    const CHECK: &str = "open_files";
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return Finding::warn(
            CHECK,
            "the open-file limit cannot be read",
            "check `ulimit -n`",
        );
    };
    let detail = format!("soft limit {soft}, hard limit {hard}");
    if hard < OPEN_FILES_WANTED {
        return Finding::warn(
            CHECK,
            format!(
                "{detail}: the file_descriptor strategy runs out (\"received 0 items of ancdata\")"
            ),
            format!(
                "raise the hard limit to at least {OPEN_FILES_WANTED} (`nofile` in \
                 /etc/security/limits.conf, `docker run --ulimit nofile={OPEN_FILES_WANTED}`), \
                 or use the file_system strategy"
            ),
        );
    }
    if soft < OPEN_FILES_WANTED {
        return Finding::warn(
            CHECK,
            format!(
                "{detail}: the file_descriptor strategy runs out (\"received 0 items of ancdata\")"
            ),
            format!("raise `ulimit -n` to at least {OPEN_FILES_WANTED}"),
        );
    }
    Finding::ok(CHECK, detail)
}

/// A number from a file under /proc/sys.
pub(super) fn sysctl(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn max_map_count() -> Finding {
    const CHECK: &str = "max_map_count";
    let Some(limit) = sysctl("/proc/sys/vm/max_map_count") else {
        return Finding::ok(CHECK, "vm.max_map_count cannot be read; not Linux?");
    };
    if limit < MAX_MAP_COUNT_DEFAULT {
        return Finding::warn(
            CHECK,
            format!("vm.max_map_count is {limit}: a process holds fewer shared tensors than that"),
            format!("`sysctl -w vm.max_map_count={MAX_MAP_COUNT_DEFAULT}` or more"),
        );
    }
    Finding::ok(
        CHECK,
        format!("vm.max_map_count is {limit}: about that many shared tensors per process"),
    )
}

fn remove_ipc(root: &Path) -> Finding {
    const CHECK: &str = "remove_ipc";
    let removal = segment_removal(root);
    if !removal.removes {
        return Finding::ok(CHECK, removal.detail);
    }
    Finding::warn(
        CHECK,
        format!(
            "{}: the default shares through memfds instead",
            removal.detail
        ),
        format!(
            "set `RemoveIPC=no` in /etc/systemd/logind.conf or `loginctl enable-linger {}`",
            removal.user
        ),
    )
}

/// Where a context's default puts storages on this machine now.
fn default_placement(root: &Path) -> Finding {
    Finding::ok("default_placement", Placement::probe_under(root).describe())
}

fn inotify() -> Finding {
    const CHECK: &str = "inotify";
    let instances = sysctl("/proc/sys/fs/inotify/max_user_instances");
    let watches = sysctl("/proc/sys/fs/inotify/max_user_watches");
    let (Some(instances), Some(watches)) = (instances, watches) else {
        return Finding::ok(CHECK, "inotify limits cannot be read; memmap reuse is off");
    };
    let detail = format!("max_user_instances {instances}, max_user_watches {watches}");
    if instances < INOTIFY_INSTANCES_DEFAULT || watches < INOTIFY_WATCHES_DEFAULT {
        return Finding::warn(
            CHECK,
            format!("{detail}: memmap reuse watches a directory per process"),
            format!(
                "`sysctl -w fs.inotify.max_user_instances={INOTIFY_INSTANCES_DEFAULT} \
                 fs.inotify.max_user_watches=65536`"
            ),
        );
    }
    Finding::ok(CHECK, detail)
}

fn temp_dir(dir: &Path) -> Finding {
    const CHECK: &str = "temp_dir";
    let shown = dir.display();
    let probe = dir.join(format!(".tensorshare-doctor-{}", std::process::id()));
    let writable = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map(|_| std::fs::remove_file(&probe));
    if let Err(err) = writable {
        return Finding::fail(
            CHECK,
            format!("{shown} is not writable: {err}"),
            "set TMPDIR to a writable directory (sockets and memmap files go there)",
        );
    }
    let Ok((free, total)) = space(dir) else {
        return Finding::ok(CHECK, format!("{shown} is writable"));
    };
    let kind = match statfs(dir) {
        Ok(fs) if fs.filesystem_type() == TMPFS_MAGIC => "tmpfs",
        Ok(_) => "disk",
        Err(_) => "unknown filesystem",
    };
    let detail = format!(
        "{shown} ({kind}) is writable, {} free of {}",
        human(free),
        human(total)
    );
    if free < GIB {
        return Finding::warn(
            CHECK,
            detail,
            "point TMPDIR (or the memmap directory) at a filesystem with room",
        );
    }
    Finding::ok(CHECK, detail)
}

/// `torch_shm_manager` and `tensorshare manager` processes, from /proc.
fn count_managers() -> (usize, usize) {
    let (mut torch, mut ours) = (0, 0);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return (0, 0);
    };
    for entry in entries.flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let mut args = cmdline.split(|&b| b == 0);
        let program = args.next().unwrap_or_default();
        let name = program.rsplit(|&b| b == b'/').next().unwrap_or_default();
        if name == b"torch_shm_manager" {
            torch += 1;
        } else if name == b"tensorshare" && args.next() == Some(b"manager".as_slice()) {
            ours += 1;
        }
    }
    (torch, ours)
}

fn managers() -> Finding {
    const CHECK: &str = "managers";
    let (torch, ours) = count_managers();
    let detail = format!("{torch} torch_shm_manager and {ours} tensorshare manager running");
    if torch + ours > MANAGERS_PILING_UP {
        return Finding::warn(
            CHECK,
            format!("{detail}: they are piling up"),
            "a manager exits 2 s after its last client: look for clients that never \
             disconnect, then stop the stale managers",
        );
    }
    Finding::ok(CHECK, detail)
}

fn leaked_segments(shm_dir: &Path) -> Finding {
    const CHECK: &str = "leaked_segments";
    match orphans::scan(&ScanOptions::new().shm_dir(shm_dir)) {
        Ok(scan) => {
            let (count, bytes) = scan.orphans().fold((0, 0), |(count, bytes), report| {
                (count + 1, bytes + report.size)
            });
            if count > 0 {
                return Finding::warn(
                    CHECK,
                    format!("{count} leaked torch_* segments hold {}", human(bytes)),
                    "run `tensorshare gc` (`--dry-run` first to see them)",
                );
            }
            Finding::ok(
                CHECK,
                format!("no leaked segments in {}", shm_dir.display()),
            )
        }
        Err(err) => Finding::ok(
            CHECK,
            format!("{} cannot be scanned: {err}", shm_dir.display()),
        ),
    }
}

fn leaked_memmap_files(dir: &Path) -> Finding {
    const CHECK: &str = "leaked_memmap_files";
    match orphans::scan(&ScanOptions::<MemmapFileName>::memmap_dir(dir)) {
        Ok(scan) => {
            let (count, bytes) = scan.orphans().fold((0, 0), |(count, bytes), report| {
                (count + 1, bytes + report.size)
            });
            if count > 0 {
                return Finding::warn(
                    CHECK,
                    format!(
                        "{count} leaked memmap files hold {} in {}",
                        human(bytes),
                        dir.display()
                    ),
                    format!("run `tensorshare gc --memmap-dir {}`", dir.display()),
                );
            }
            Finding::ok(
                CHECK,
                format!("no leaked memmap files in {}", dir.display()),
            )
        }
        Err(err) => Finding::ok(CHECK, format!("{} cannot be scanned: {err}", dir.display())),
    }
}

/// Bytes as people read them: `64 MiB`, `7.8 GiB`.
pub(super) fn human(bytes: u64) -> String {
    if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{} MiB", bytes / MIB)
    }
}
