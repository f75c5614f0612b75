//! `tensorshare gc` against the real /dev/shm, with real processes holding,
//! mapping and leaking segments.
//!
//! Other tests run at the same time and make their own `torch_*` segments,
//! some named for dead processes on purpose: every run that may remove
//! something names its own segments with `--only`, and only the dry run
//! looks at all of /dev/shm.

mod support;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value as Json;

use support::{ChildGuard, has_exited, wait_until};

/// A /dev/shm entry this test made or leaked, unlinked on drop.
struct ShmFile {
    /// With the leading `/`, as gc prints it.
    name: String,
    path: PathBuf,
}

impl ShmFile {
    /// Creates `/dev/shm/torch_<creator_pid>_<unique>_0` of `len` bytes,
    /// as `shm_open(O_CREAT | O_EXCL, 0600)` and `ftruncate` do.
    fn create(creator_pid: u32, len: u64) -> (ShmFile, File) {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let unique = format!(
            "{}{:04}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let shm = ShmFile::adopt(&format!("/torch_{creator_pid}_{unique}_0"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&shm.path)
            .expect("create a segment in /dev/shm");
        file.set_len(len).expect("size the segment");
        (shm, file)
    }

    /// As [`ShmFile::create`], with the file closed at once: a segment no
    /// process holds.
    fn create_closed(creator_pid: u32, len: u64) -> ShmFile {
        ShmFile::create(creator_pid, len).0
    }

    /// Takes charge of a segment something else created.
    fn adopt(name: &str) -> ShmFile {
        let file_name = name.strip_prefix('/').expect("a name with a leading /");
        ShmFile {
            name: name.to_owned(),
            path: PathBuf::from("/dev/shm").join(file_name),
        }
    }

    fn exists(&self) -> bool {
        self.path.symlink_metadata().is_ok()
    }
}

impl Drop for ShmFile {
    fn drop(&mut self) {
        // Removed by the gc under test is the good case.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The pid of a process that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("spawn true");
    child.wait().expect("wait for true");
    child.id()
}

/// A process that holds nothing and lives until dropped.
fn sleeper() -> ChildGuard {
    sleeper_holding(Stdio::null())
}

/// A process whose stdin is `stdin` (a segment, to hold it open), living
/// until dropped. Our copy of the fd is closed once it has started.
fn sleeper_holding(stdin: impl Into<Stdio>) -> ChildGuard {
    ChildGuard(
        Command::new("sleep")
            .arg("600")
            .stdin(stdin)
            .spawn()
            .expect("spawn sleep"),
    )
}

fn gc(args: &[&str]) -> Output {
    Command::new(support::tensorshare_exe())
        .arg("gc")
        .args(args)
        .output()
        .expect("run tensorshare gc")
}

/// `gc --json` with `args` over socket directories alone
/// ([`support::gc_without_segments`]), parsed.
fn gc_sockets_json(args: &[&str]) -> Json {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let stdout =
        support::expect_success(&support::gc_without_segments(all), "tensorshare gc --json");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("gc --json printed {e}:\n{stdout}"))
}

/// `gc --json` with `args`, parsed.
fn gc_json(args: &[&str]) -> Json {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let stdout = support::expect_success(&gc(&all), "tensorshare gc --json");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("gc --json printed {e}:\n{stdout}"))
}

/// The JSON entry of the segment `name`.
fn entry<'a>(report: &'a Json, name: &str) -> &'a Json {
    report["segments"]
        .as_array()
        .expect("a segments array")
        .iter()
        .find(|segment| segment["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not in the report:\n{report:#}"))
}

/// The JSON entry of the segment `name`, checked to be kept as held by
/// exactly `holder`.
fn held_entry<'a>(report: &'a Json, name: &str, holder: u32) -> &'a Json {
    let held = entry(report, name);
    assert_eq!(held["action"], "kept", "{held:#}");
    assert_eq!(held["reason"], "held", "{held:#}");
    assert_eq!(held["holders"], serde_json::json!([holder]), "{held:#}");
    held
}

/// The table row of the segment `name`.
fn row<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find(|line| line.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row for {name}:\n{stdout}"))
}

#[test]
fn an_unheld_segment_of_a_dead_process_is_removed() {
    let creator = dead_pid();
    let segment = ShmFile::create_closed(creator, 4160);
    let output = gc(&["--only", &segment.name, "--min-age", "0"]);
    let stdout = support::expect_success(&output, "tensorshare gc");
    let line = row(&stdout, &segment.name);
    assert!(line.contains("4.1 KiB"), "{line}");
    assert!(line.contains(&format!("{creator} (gone)")), "{line}");
    assert!(line.trim_end().ends_with("removed"), "{line}");
    assert_eq!(
        stdout.lines().last(),
        Some("1 segment, 4160 bytes (4.1 KiB) removed"),
        "{stdout}"
    );
    assert!(!segment.exists(), "{stdout}");
}

#[test]
fn a_segment_held_open_by_a_live_process_is_kept() {
    let (segment, file) = ShmFile::create(dead_pid(), 64);
    // The child's stdin is the segment; ours is closed once it has started.
    let holder = sleeper_holding(file);
    let report = gc_json(&["--only", &segment.name, "--min-age", "0"]);
    let held = held_entry(&report, &segment.name, holder.pid());
    assert_eq!(held["creator_alive"], false, "{held:#}");
    assert_eq!(report["totals"]["segments"], 0, "{report:#}");

    let stdout = support::expect_success(
        &gc(&["--only", &segment.name, "--min-age", "0"]),
        "tensorshare gc",
    );
    let line = row(&stdout, &segment.name);
    assert!(
        line.contains(&format!("kept: held by pid {}", holder.pid())),
        "{line}"
    );
    assert!(segment.exists());
}

/// Maps the file named by its argument, closes the fd, says `ready` and
/// sleeps. Through libc: Python's `mmap` module keeps a dup of the fd.
const MAPPER: &str = "\
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open(sys.argv[1], os.O_RDWR)
PROT_READ, PROT_WRITE, MAP_SHARED = 1, 2, 1
address = libc.mmap(None, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
if address is None or address == ctypes.c_void_p(-1).value:
    sys.exit('mmap failed: ' + os.strerror(ctypes.get_errno()))
os.close(fd)
print('ready', flush=True)
time.sleep(600)
";

#[test]
fn a_segment_mapped_after_its_fd_was_closed_is_kept() {
    let segment = ShmFile::create_closed(dead_pid(), 4096);
    let (mut child, line) = support::spawn_for_first_line(
        Command::new("python3")
            .args(["-c", MAPPER])
            .arg(&segment.path),
        "the mapper",
    );
    if line != "ready" {
        // It exited: what it said is on stderr.
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        assert_eq!(line, "ready", "the mapper: {stderr}");
    }
    let mapper = ChildGuard(child);

    // What the test is about: mapped, and no fd left.
    let file_name = segment.path.file_name().expect("a file name");
    let fds = std::fs::read_dir(format!("/proc/{}/fd", mapper.pid())).expect("read its fds");
    for fd in fds.flatten() {
        if let Ok(target) = std::fs::read_link(fd.path()) {
            assert!(
                !target
                    .to_string_lossy()
                    .contains(&*file_name.to_string_lossy()),
                "the mapper still has an fd on the segment"
            );
        }
    }
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", mapper.pid())).expect("maps");
    assert!(maps.contains(&*file_name.to_string_lossy()), "not mapped");

    let report = gc_json(&["--only", &segment.name, "--min-age", "0"]);
    held_entry(&report, &segment.name, mapper.pid());
    assert!(segment.exists());
}

#[test]
fn a_segment_whose_creator_is_alive_is_kept() {
    let creator = sleeper();
    let segment = ShmFile::create_closed(creator.pid(), 64);
    let report = gc_json(&["--only", &segment.name, "--min-age", "0"]);
    let alive = entry(&report, &segment.name);
    assert_eq!(alive["action"], "kept", "{alive:#}");
    assert_eq!(alive["reason"], "creator_alive", "{alive:#}");
    assert_eq!(alive["creator_alive"], true, "{alive:#}");
    assert_eq!(alive["creator_pid"], creator.pid(), "{alive:#}");
    assert_eq!(alive["holders"], serde_json::json!([]), "{alive:#}");

    // The table sums up segments of live processes in one line.
    let stdout = support::expect_success(
        &gc(&["--only", &segment.name, "--min-age", "0"]),
        "tensorshare gc",
    );
    assert!(
        stdout.contains(&format!(
            "kept 1 segment (64 B) of live processes: pid {}",
            creator.pid()
        )),
        "{stdout}"
    );
    assert!(segment.exists());
}

#[test]
fn a_fresh_segment_is_kept_for_the_grace() {
    // Built first: a build between making the segment and the scan could
    // outlast the grace the test is about.
    support::tensorshare_exe();
    let segment = ShmFile::create_closed(dead_pid(), 64);
    let stdout = support::expect_success(&gc(&["--only", &segment.name]), "tensorshare gc");
    let line = row(&stdout, &segment.name);
    assert!(line.contains("kept: changed"), "{line}");
    assert!(line.contains("under --min-age 5"), "{line}");
    assert!(segment.exists());
}

#[test]
fn dry_run_removes_nothing_and_lists_what_it_would() {
    let dead = dead_pid();
    let first = ShmFile::create_closed(dead, 4160);
    let second = ShmFile::create_closed(dead, 64);
    let only = [
        "--only",
        &first.name,
        "--only",
        &second.name,
        "--min-age",
        "0",
    ];

    let mut args = vec!["--dry-run"];
    args.extend_from_slice(&only);
    let stdout = support::expect_success(&gc(&args), "tensorshare gc --dry-run");
    for segment in [&first, &second] {
        let line = row(&stdout, &segment.name);
        assert!(line.trim_end().ends_with("would remove"), "{line}");
        assert!(line.contains(&format!("{dead} (gone)")), "{line}");
    }
    assert_eq!(
        stdout.lines().last(),
        Some("2 segments, 4224 bytes (4.1 KiB) would be removed (dry run)"),
        "{stdout}"
    );
    assert!(first.exists() && second.exists());

    let report = gc_json(&args);
    assert_eq!(report["dry_run"], true);
    assert_eq!(entry(&report, &first.name)["action"], "would_remove");
    assert_eq!(entry(&report, &second.name)["action"], "would_remove");
    assert_eq!(report["totals"]["segments"], 2);
    assert_eq!(report["totals"]["bytes"], 4224);
    assert_eq!(report["totals"]["action"], "would_remove");
    assert!(first.exists() && second.exists());
}

#[test]
fn json_reports_every_case_of_one_run() {
    let dead = dead_pid();
    let orphan = ShmFile::create_closed(dead, 4160);
    let (held, file) = ShmFile::create(dead, 64);
    let holder = sleeper_holding(file);
    let creator = sleeper();
    let alive = ShmFile::create_closed(creator.pid(), 128);
    let absent = format!("torch_{dead}_1_404");

    let report = gc_json(&[
        "--only",
        &orphan.name,
        "--only",
        &held.name,
        "--only",
        &alive.name,
        // As `ls /dev/shm` shows names: without the slash.
        "--only",
        &absent,
        "--min-age",
        "0",
    ]);
    assert_eq!(report["dry_run"], false);
    assert_eq!(report["shm_dir"], "/dev/shm");
    assert_eq!(report["min_age_seconds"], 0.0);
    assert_eq!(report["segments"].as_array().map(Vec::len), Some(3));

    let removed = entry(&report, &orphan.name);
    assert_eq!(removed["action"], "removed", "{removed:#}");
    assert_eq!(removed["reason"], Json::Null);
    assert_eq!(removed["size"], 4160);
    assert_eq!(removed["creator_pid"], dead);
    assert_eq!(removed["creator_alive"], false);

    let kept = held_entry(&report, &held.name, holder.pid());
    assert!(
        kept["message"]
            .as_str()
            .is_some_and(|m| m.contains("held by pid")),
        "{kept:#}"
    );

    let live = entry(&report, &alive.name);
    assert_eq!(live["action"], "kept", "{live:#}");
    assert_eq!(live["reason"], "creator_alive");

    assert_eq!(
        report["not_found"],
        serde_json::json!([format!("/{absent}")])
    );
    assert_eq!(report["totals"]["segments"], 1);
    assert_eq!(report["totals"]["bytes"], 4160);
    assert_eq!(report["totals"]["action"], "removed");

    assert!(!orphan.exists());
    assert!(held.exists() && alive.exists());
}

#[test]
fn a_dry_run_over_all_of_dev_shm_proposes_only_orphans() {
    // Our own segments among whatever else is there: one of a live
    // creator, one held.
    let alive = ShmFile::create_closed(std::process::id(), 64);
    let (held, held_file) = ShmFile::create(dead_pid(), 64);

    let report = gc_json(&["--dry-run"]);
    for segment in report["segments"].as_array().expect("segments") {
        assert!(
            segment["name"]
                .as_str()
                .is_some_and(|name| name.starts_with("/torch_")),
            "{segment:#}"
        );
        if segment["action"] == "would_remove" {
            assert_eq!(segment["creator_alive"], false, "{segment:#}");
            assert_eq!(segment["holders"], serde_json::json!([]), "{segment:#}");
            assert!(
                segment["age_seconds"]
                    .as_f64()
                    .is_some_and(|age| age >= 5.0),
                "{segment:#}"
            );
        } else {
            assert_eq!(segment["action"], "kept", "{segment:#}");
        }
    }
    assert_eq!(entry(&report, &alive.name)["reason"], "creator_alive");
    // Kept as held, or as fresh, whichever rule comes first.
    assert_eq!(entry(&report, &held.name)["reason"], "held");
    assert!(alive.exists() && held.exists());
    drop(held_file);
}

#[test]
fn names_of_another_form_are_refused() {
    for name in [
        "../etc/passwd",
        "/dev/shm/torch_1_2_3",
        "torch_1_2_x",
        "sem.x",
    ] {
        let output = gc(&["--dry-run", "--only", name]);
        assert_eq!(output.status.code(), Some(2), "{name} was accepted");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("--only"), "{stderr}");
    }
}

/// The pid of `parent`'s child whose command is `comm` (cut to 15 bytes,
/// as the kernel keeps it), waiting up to 10 s for it to appear.
fn find_child(parent: u32, comm: &str) -> Option<u32> {
    let comm = &comm[..comm.len().min(15)];
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        for proc_entry in std::fs::read_dir("/proc").expect("list /proc").flatten() {
            let Ok(pid) = proc_entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // `pid (comm) state ppid ...`
            let Some((head, tail)) = stat.rsplit_once(')') else {
                continue;
            };
            let ppid = tail.split_whitespace().nth(1);
            if head.ends_with(&format!("({comm}")) && ppid == Some(&parent.to_string()) {
                return Some(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// A process found by pid, not our child: SIGKILLed on drop if it is still
/// the process we found.
struct ProcessGuard {
    pid: u32,
    comm: String,
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        let same = std::fs::read_to_string(format!("/proc/{}/comm", self.pid))
            .is_ok_and(|comm| comm.trim_end() == self.comm);
        if same {
            let _ = kill(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
        }
    }
}

const TORCH_SHARER: &str = "\
import time, torch, torch.multiprocessing as mp
mp.set_sharing_strategy('file_system')
t = torch.arange(1024, dtype=torch.float32)
t.share_memory_()
manager, name, size = t.untyped_storage()._share_filename_cpu_()
print(name.decode(), flush=True)
time.sleep(600)
";

#[test]
fn a_segment_torch_leaked_under_sigkill_is_removed() {
    let Some(python) = support::test_python("a_segment_torch_leaked_under_sigkill_is_removed")
    else {
        return;
    };
    let (mut child, name) = support::spawn_for_first_line(
        Command::new(python).args(["-c", TORCH_SHARER]),
        "the torch sharer",
    );
    let mut stderr = child.stderr.take().expect("stderr piped");
    let mut sharer = ChildGuard(child);
    if name.is_empty() {
        let _ = sharer.0.kill();
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        panic!("the torch sharer printed no name:\n{text}");
    }
    let python_pid = sharer.pid();
    assert!(
        name.starts_with(&format!("/torch_{python_pid}_")),
        "{name} is not named for {python_pid}"
    );
    let segment = ShmFile::adopt(&name);
    assert!(segment.exists(), "{name} is not in /dev/shm");

    // torch's manager calls setsid, so it is found by its parent.
    let manager_pid = find_child(python_pid, "torch_shm_manager")
        .expect("torch_shm_manager among the sharer's children");
    let _manager = ProcessGuard {
        pid: manager_pid,
        comm: "torch_shm_manag".to_owned(),
    };
    // The manager first, so that it cannot clean up after its client.
    kill(Pid::from_raw(manager_pid as i32), Signal::SIGKILL).expect("SIGKILL the manager");
    kill(Pid::from_raw(python_pid as i32), Signal::SIGKILL).expect("SIGKILL the sharer");
    sharer.0.wait().expect("reap the sharer");
    assert!(
        wait_until(Duration::from_secs(10), || has_exited(manager_pid)),
        "the manager survived SIGKILL"
    );
    assert!(segment.exists(), "{name} did not leak");

    let stdout =
        support::expect_success(&gc(&["--only", &name, "--min-age", "0"]), "tensorshare gc");
    let line = row(&stdout, &name);
    assert!(line.contains(&format!("{python_pid} (gone)")), "{line}");
    assert!(
        line.contains("4.1 KiB"),
        "4096 bytes and the header: {line}"
    );
    assert!(line.trim_end().ends_with("removed"), "{line}");
    assert_eq!(
        stdout.lines().last(),
        Some("1 segment, 4160 bytes (4.1 KiB) removed"),
        "{stdout}"
    );
    assert!(!segment.exists());
}

#[test]
fn another_users_orphan_is_kept_even_by_root() {
    if !nix::unistd::geteuid().is_root() {
        // Through the handle, not eprintln!, so that test capture does not hide it.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: another_users_orphan_is_kept_even_by_root needs root\n",
        );
        return;
    }
    const NOBODY: u32 = 65534;
    let dead = dead_pid();
    let (theirs, file) = ShmFile::create(dead, 4160);
    std::os::unix::fs::fchown(&file, Some(NOBODY), Some(NOBODY)).expect("chown to nobody");
    drop(file);
    let ours = ShmFile::create_closed(dead, 64);
    let owner = tensorshare_strategies::UnixUser::of(NOBODY);

    let output = gc(&[
        "--only",
        &theirs.name,
        "--only",
        &ours.name,
        "--min-age",
        "0",
    ]);
    let stdout = support::expect_success(&output, "tensorshare gc");
    let line = row(&stdout, &theirs.name);
    assert!(
        line.contains(&format!("kept: it belongs to {owner}")),
        "{line}"
    );
    assert!(line.contains("run gc as that user"), "{line}");
    assert!(theirs.exists(), "gc removed another user's segment");
    assert!(!ours.exists(), "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("1 segment, 64 bytes (64 B) removed"),
        "{stdout}"
    );

    let report = gc_json(&["--only", &theirs.name, "--min-age", "0"]);
    let kept = entry(&report, &theirs.name);
    assert_eq!(kept["action"], "kept", "{kept:#}");
    assert_eq!(kept["reason"], "other_user", "{kept:#}");
    assert_eq!(kept["owner_uid"], NOBODY, "{kept:#}");
    assert!(theirs.exists());
}

#[test]
fn another_user_keeps_roots_segments_and_removes_its_own() {
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists());
    let (true, Some(setpriv)) = (nix::unistd::geteuid().is_root(), setpriv) else {
        // Through the handle, not eprintln!, so that test capture does not hide it.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: another_user_keeps_roots_segments_and_removes_its_own needs root and \
              setpriv\n",
        );
        return;
    };
    const NOBODY: u32 = 65534;
    let dead = dead_pid();
    // Root's: not the other user's to remove.
    let roots = ShmFile::create_closed(dead, 64);
    // The other user's own: the kernel's open check works for its owner.
    let (own, file) = ShmFile::create(dead, 128);
    std::os::unix::fs::fchown(&file, Some(NOBODY), Some(NOBODY)).expect("chown to nobody");
    drop(file);

    let output = Command::new(setpriv)
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            support::tensorshare_exe().to_str().expect("a UTF-8 path"),
            "gc",
            "--json",
            "--only",
            &roots.name,
            "--only",
            &own.name,
            "--min-age",
            "0",
        ])
        .output()
        .expect("run gc as nobody");
    let stdout = support::expect_success(&output, "tensorshare gc as nobody");
    let report: Json = serde_json::from_str(&stdout).expect("JSON");

    let kept = entry(&report, &roots.name);
    assert_eq!(kept["action"], "kept", "{kept:#}");
    assert_eq!(kept["reason"], "other_user", "{kept:#}");
    assert!(
        kept["message"]
            .as_str()
            .is_some_and(|m| m.contains("it belongs to uid 0")),
        "{kept:#}"
    );
    // This test process, root's, is one the other user cannot inspect.
    assert!(
        report["unreadable_pids"]
            .as_array()
            .is_some_and(|pids| pids.contains(&Json::from(std::process::id()))),
        "{report:#}"
    );
    assert!(roots.exists());

    let removed = entry(&report, &own.name);
    assert_eq!(removed["action"], "removed", "{removed:#}");
    assert_eq!(removed["owner_uid"], NOBODY);
    assert!(!own.exists());
}

/// `tensorshare echo --strategy file_descriptor` with its resource sharer on
/// a socket file in a private directory in `sharer_dir`, after it has
/// echoed one tensor (so its sharer is listening); returns the server and
/// that directory.
fn echo_with_sharer_dir(sharer_dir: &std::path::Path) -> (support::Server, PathBuf) {
    let authkey = tensorshare::Authkey::random().expect("authkey");
    let (mut command, address) = support::Server::echo_command(&authkey, "file_descriptor");
    command.env(tensorshare::resource_sharer::SHARER_DIR_ENV, sharer_dir);
    let server = support::Server::start(command, address);
    let sharing = tensorshare::SharingContext::new(authkey);
    let mut connection = server.connect(&sharing);
    let tensor = support::cases::contiguous(tensorshare::DType::Float32, &[16], 1, true);
    connection
        .send(&tensorshare::Value::Tensor(tensor))
        .expect("send a tensor");
    connection.get_mut().recv_bytes().expect("its echo");
    let prefix = format!("tensorshare-sharer-{}-", server.pid());
    let dir = std::fs::read_dir(sharer_dir)
        .expect("list the sharer dir")
        .flatten()
        .find(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {prefix}* in {}", sharer_dir.display()))
        .path();
    (server, dir)
}

fn file_name(path: &std::path::Path) -> String {
    path.file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned()
}

/// The JSON entry of the socket directory `name`.
fn dir_entry<'a>(report: &'a Json, name: &str) -> &'a Json {
    report["socket_dirs"]
        .as_array()
        .expect("a socket_dirs array")
        .iter()
        .find(|dir| dir["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not in the report:\n{report:#}"))
}

#[test]
fn the_socket_dir_of_a_sigkilled_tensorshare_process_is_removed() {
    let parent = tempfile::tempdir().expect("tempdir");
    let (mut server, dir) = echo_with_sharer_dir(parent.path());
    let pid = server.pid();
    let name = file_name(&dir);
    server.child.kill().expect("SIGKILL the echo");
    server.child.wait().expect("reap it");
    assert!(dir.exists(), "SIGKILL left nothing to clean up");

    let parent_arg = parent.path().to_str().expect("utf-8");
    let dry = gc(&["--dry-run", "--socket-dir", parent_arg, "--min-age", "0"]);
    let stdout = support::expect_success(&dry, "tensorshare gc --dry-run");
    let line = row(&stdout, &dir.display().to_string());
    assert!(line.contains("resource sharer"), "{line}");
    assert!(line.contains(&format!("{pid} (gone)")), "{line}");
    assert!(line.trim_end().ends_with("would remove"), "{line}");
    assert_eq!(
        stdout.lines().last(),
        Some("1 socket directory would be removed (dry run)"),
        "{stdout}"
    );
    assert!(dir.exists());

    let report = gc_sockets_json(&["--socket-dir", parent_arg, "--min-age", "0"]);
    let removed = dir_entry(&report, &name);
    assert_eq!(removed["action"], "removed", "{removed:#}");
    assert_eq!(removed["kind"], "resource_sharer");
    assert_eq!(removed["creator_pid"], pid);
    assert_eq!(removed["creator_alive"], false);
    assert_eq!(removed["listening"], serde_json::json!([]));
    let sockets = removed["sockets"].as_array().expect("sockets");
    assert!(
        sockets.len() == 1
            && sockets[0]
                .as_str()
                .is_some_and(|s| s.starts_with("listener-")),
        "{removed:#}"
    );
    assert_eq!(report["totals"]["socket_dirs"], 1);
    assert_eq!(report["socket_parents"], serde_json::json!([parent_arg]));
    assert!(!dir.exists());
    assert_eq!(support::tree(parent.path()), Vec::<PathBuf>::new());
}

/// Registers a memfd with CPython's resource sharer (which makes
/// `$TMPDIR/pymp-*/listener-*`), says `ready` and sleeps.
const CPYTHON_SHARER: &str = "\
import os, time
from multiprocessing.resource_sharer import DupFd
fd = os.memfd_create('gc-test')
d = DupFd(fd)
print('ready', flush=True)
time.sleep(600)
";

#[test]
fn live_foreign_and_unproven_socket_dirs_are_kept() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dead = dead_pid();

    // A live tensorshare process's.
    let (live_server, live_dir) = echo_with_sharer_dir(parent.path());
    // CPython's own, left by a SIGKILLed Python process: not ours.
    let (mut child, line) = support::spawn_for_first_line(
        Command::new("python3")
            .args(["-c", CPYTHON_SHARER])
            .env("TMPDIR", parent.path()),
        "the CPython sharer",
    );
    assert_eq!(line, "ready");
    child.kill().expect("SIGKILL python");
    child.wait().expect("reap python");
    let pymp: Vec<PathBuf> = support::tree(parent.path())
        .into_iter()
        .filter(|path| file_name(path).starts_with("pymp-"))
        .collect();
    assert_eq!(pymp.len(), 1, "CPython left its directory: {pymp:?}");
    // Named as ours, for a dead process, holding something else.
    let cluttered = parent
        .path()
        .join(format!("tensorshare-sharer-{dead}-clutter1"));
    std::fs::create_dir(&cluttered).expect("mkdir");
    std::fs::write(cluttered.join("notes.txt"), b"not a socket").expect("write");
    // Named as ours, for a dead process, with a socket that still listens
    // (another process holds it: here, this one).
    let inherited = parent
        .path()
        .join(format!("tensorshare-sharer-{dead}-listen01"));
    std::fs::create_dir(&inherited).expect("mkdir");
    let _listener =
        std::os::unix::net::UnixListener::bind(inherited.join("listener-abcdefgh")).expect("bind");
    // A manager's, whose manager is gone, and one whose manager listens.
    let dead_manager = parent.path().join("tensorshare-shm-dead01");
    std::fs::create_dir(&dead_manager).expect("mkdir");
    drop(std::os::unix::net::UnixListener::bind(dead_manager.join("manager.sock")).expect("bind"));
    let live_manager = parent.path().join("tensorshare-shm-live01");
    std::fs::create_dir(&live_manager).expect("mkdir");
    let _manager =
        std::os::unix::net::UnixListener::bind(live_manager.join("manager.sock")).expect("bind");
    // A symlink with our name, to a directory that is not ours.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let link = parent
        .path()
        .join(format!("tensorshare-sharer-{dead}-symlink1"));
    std::os::unix::fs::symlink(elsewhere.path(), &link).expect("symlink");

    let parent_arg = parent.path().to_str().expect("utf-8");
    let report = gc_sockets_json(&["--socket-dir", parent_arg, "--min-age", "0"]);
    let dirs = report["socket_dirs"].as_array().expect("socket_dirs");
    assert_eq!(dirs.len(), 5, "{report:#}");
    let kept = |name: &str, reason: &str| {
        let dir = dir_entry(&report, name);
        assert_eq!(dir["action"], "kept", "{dir:#}");
        assert_eq!(dir["reason"], reason, "{dir:#}");
    };
    kept(&file_name(&live_dir), "creator_alive");
    assert_eq!(
        dir_entry(&report, &file_name(&live_dir))["creator_pid"],
        live_server.pid()
    );
    kept(&file_name(&cluttered), "unexpected_entry");
    assert_eq!(
        dir_entry(&report, &file_name(&cluttered))["unexpected"],
        "notes.txt"
    );
    kept(&file_name(&inherited), "listening");
    kept(&file_name(&live_manager), "listening");
    let removed = dir_entry(&report, "tensorshare-shm-dead01");
    assert_eq!(removed["action"], "removed", "{removed:#}");
    assert_eq!(removed["kind"], "shm_manager");
    assert_eq!(removed["creator_pid"], Json::Null);
    assert_eq!(report["totals"]["socket_dirs"], 1);
    let skipped = report["skipped_socket_dirs"].as_array().expect("skipped");
    assert_eq!(skipped.len(), 1, "{report:#}");
    assert!(
        skipped[0]["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("symlink")),
        "{report:#}"
    );

    assert!(live_dir.exists() && cluttered.exists() && inherited.exists());
    assert!(live_manager.exists() && link.exists() && elsewhere.path().exists());
    assert!(!dead_manager.exists());
    for path in &pymp {
        assert!(path.exists(), "{} was touched", path.display());
    }
    assert!(
        support::tree(&pymp[0])
            .iter()
            .any(|path| file_name(path).starts_with("listener-")),
        "CPython's socket was touched"
    );
    drop(live_server);
}

#[test]
fn only_names_socket_dirs_too_and_fresh_ones_wait_for_the_grace() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dead = dead_pid();
    let make = |random: &str| {
        let dir = parent
            .path()
            .join(format!("tensorshare-sharer-{dead}-{random}"));
        std::fs::create_dir(&dir).expect("mkdir");
        drop(std::os::unix::net::UnixListener::bind(dir.join("listener-abcdefgh")).expect("bind"));
        dir
    };
    let named = make("named001");
    let other = make("other001");
    let parent_arg = parent.path().to_str().expect("utf-8");

    // Just made: kept under the default grace.
    let stdout = support::expect_success(
        &gc(&["--socket-dir", parent_arg, "--only", &file_name(&named)]),
        "tensorshare gc",
    );
    let line = row(&stdout, &named.display().to_string());
    assert!(line.contains("kept: changed"), "{line}");
    assert!(line.contains("under --min-age 5"), "{line}");
    assert!(named.exists());

    // --only reaches that directory and nothing else, segments included.
    let report = gc_json(&[
        "--socket-dir",
        parent_arg,
        "--only",
        &file_name(&named),
        "--only",
        "tensorshare-shm-absent",
        "--min-age",
        "0",
    ]);
    assert_eq!(report["segments"], serde_json::json!([]), "{report:#}");
    assert_eq!(report["socket_dirs"].as_array().map(Vec::len), Some(1));
    assert_eq!(dir_entry(&report, &file_name(&named))["action"], "removed");
    assert_eq!(
        report["socket_dirs_not_found"],
        serde_json::json!(["tensorshare-shm-absent"])
    );
    assert!(!named.exists() && other.exists());

    // Names of neither kind are refused.
    let output = gc(&["--dry-run", "--only", "tensorshare-sharer-12-x"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("socket directory"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn another_users_dead_socket_dirs_are_kept_even_by_root() {
    if !nix::unistd::geteuid().is_root() {
        // Through the handle, not eprintln!, so that test capture does not hide it.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: another_users_dead_socket_dirs_are_kept_even_by_root needs root\n",
        );
        return;
    }
    const NOBODY: u32 = 65534;
    let parent = tempfile::tempdir().expect("tempdir");
    let dead = dead_pid();
    // Dead sockets in tensorshare's directories: a resource sharer's and a
    // manager's of nobody's, and a sharer's of ours.
    let make = |name: String, socket: &str, owner: Option<u32>| {
        let dir = parent.path().join(name);
        std::fs::create_dir(&dir).expect("mkdir");
        drop(std::os::unix::net::UnixListener::bind(dir.join(socket)).expect("bind"));
        if let Some(uid) = owner {
            for path in [dir.join(socket), dir.clone()] {
                std::os::unix::fs::lchown(&path, Some(uid), Some(uid)).expect("chown to nobody");
            }
        }
        dir
    };
    let sharer = make(
        format!("tensorshare-sharer-{dead}-nobody01"),
        "listener-abcdefgh",
        Some(NOBODY),
    );
    let manager = make(
        "tensorshare-shm-nobody".into(),
        "manager.sock",
        Some(NOBODY),
    );
    let ours = make(
        format!("tensorshare-sharer-{dead}-ours0001"),
        "listener-abcdefgh",
        None,
    );
    let owner = tensorshare_strategies::UnixUser::of(NOBODY);
    let parent_arg = parent.path().to_str().expect("utf-8");

    let output = support::gc_without_segments(["--socket-dir", parent_arg, "--min-age", "0"]);
    let stdout = support::expect_success(&output, "tensorshare gc");
    for theirs in [&sharer, &manager] {
        let line = row(&stdout, &theirs.display().to_string());
        assert!(
            line.contains(&format!("kept: it belongs to {owner}")),
            "{line}"
        );
        assert!(theirs.exists(), "gc removed another user's directory");
    }
    assert!(!ours.exists(), "{stdout}");

    let report = gc_sockets_json(&["--socket-dir", parent_arg, "--min-age", "0"]);
    let kept = dir_entry(&report, &file_name(&sharer));
    assert_eq!(kept["action"], "kept", "{kept:#}");
    assert_eq!(kept["reason"], "other_user", "{kept:#}");
    assert_eq!(kept["owner_uid"], NOBODY, "{kept:#}");
    assert!(sharer.exists() && manager.exists());
}

#[test]
fn a_killed_sharers_directory_is_found_through_tensorshare_sharer_dir() {
    let parent = tempfile::tempdir().expect("tempdir");
    let (mut server, dir) = echo_with_sharer_dir(parent.path());
    server.child.kill().expect("SIGKILL the echo");
    server.child.wait().expect("reap it");
    let elsewhere = tempfile::tempdir().expect("another TMPDIR");
    // No --socket-dir: the directory the sharer was told to use is one of
    // gc's own, read as the sharer read it.
    let output = Command::new(support::tensorshare_exe())
        .args(["gc", "--min-age", "0", "--only", &file_name(&dir)])
        .env(tensorshare::resource_sharer::SHARER_DIR_ENV, parent.path())
        .env("TMPDIR", elsewhere.path())
        .output()
        .expect("run tensorshare gc");
    let stdout = support::expect_success(&output, "tensorshare gc");
    let line = row(&stdout, &dir.display().to_string());
    assert!(line.trim_end().ends_with("removed"), "{line}");
    assert!(!dir.exists());
}
