//! The scan and removal against real segments in `/dev/shm`, and the
//! parsers and rules underneath.

use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;

use super::holders::{fd_link_file_name, is_kernel_thread, maps_line_file};
use super::lease::{Probe, hold_exclusively};
use super::listing::{FileKey, Lookup, stat_entry};
use super::verdict::{Freshness, Verdict, verdict};
use super::*;
use crate::platform::segment_name::SegmentName;

/// A segment file in /dev/shm this test made, unlinked on drop.
struct TestSegment {
    name: SegmentName,
    path: PathBuf,
}

impl TestSegment {
    fn create(creator_pid: u32, len: u64) -> (TestSegment, File) {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("/torch_{creator_pid}_{}{n}_0", std::process::id());
        let name = SegmentName::parse(name.as_bytes()).expect("a valid name");
        let path = Path::new(DEFAULT_SHM_DIR).join(name.file_name());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .expect("create a segment in /dev/shm");
        file.set_len(len).expect("size the segment");
        (TestSegment { name, path }, file)
    }
}

impl Drop for TestSegment {
    fn drop(&mut self) {
        // Already removed by the test under way is fine.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The pid of a process that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawn true");
    child.wait().expect("wait for true");
    child.id()
}

fn scan_only(name: &SegmentName, min_age: Duration) -> OrphanScan {
    scan(&ScanOptions::new().only([name.clone()]).min_age(min_age)).expect("scan /dev/shm")
}

#[test]
fn orphans_are_found_and_removed() {
    let (segment, file) = TestSegment::create(dead_pid(), 4160);
    drop(file);
    let found = scan_only(&segment.name, Duration::ZERO);
    assert_eq!(found.segments().len(), 1);
    let report = &found.segments()[0];
    assert!(report.is_orphan(), "{report:?}");
    assert_eq!(report.size, 4160);
    assert!(!report.creator_alive);
    assert!(report.holders.is_empty());
    let removals = found.remove_orphans().expect("remove");
    assert_eq!(removals.len(), 1);
    assert_eq!(removals[0].outcome, RemovalOutcome::Removed);
    assert_eq!(removals[0].creator_pid, segment.name.creator_pid());
    assert!(!segment.path.exists());
}

#[test]
fn orphans_are_held_by_open_fds() {
    let (segment, file) = TestSegment::create(dead_pid(), 64);
    let found = scan_only(&segment.name, Duration::ZERO);
    let report = &found.segments()[0];
    assert_eq!(report.keep, Some(KeepReason::Held));
    assert_eq!(report.holders, [std::process::id()]);
    assert!(found.remove_orphans().expect("remove").is_empty());
    assert!(segment.path.exists());
    drop(file);
}

#[test]
fn a_live_creator_keeps_its_segment() {
    let (segment, file) = TestSegment::create(std::process::id(), 64);
    drop(file);
    let found = scan_only(&segment.name, Duration::ZERO);
    let report = &found.segments()[0];
    assert!(report.creator_alive);
    assert_eq!(report.keep, Some(KeepReason::CreatorAlive));
}

#[test]
fn fresh_segments_get_the_grace() {
    let (segment, file) = TestSegment::create(dead_pid(), 64);
    drop(file);
    let found = scan_only(&segment.name, Duration::from_secs(3600));
    let report = &found.segments()[0];
    assert!(
        matches!(report.keep, Some(KeepReason::Recent { age }) if age < Duration::from_secs(3600)),
        "{report:?}"
    );
    assert!(found.remove_orphans().expect("remove").is_empty());
    assert!(segment.path.exists());
}

#[test]
fn a_segment_that_vanished_or_was_replaced_is_left() {
    let dead = dead_pid();
    let (vanishing, file) = TestSegment::create(dead, 64);
    drop(file);
    let (replaced, file) = TestSegment::create(dead, 64);
    drop(file);
    let found = scan(
        &ScanOptions::new()
            .only([vanishing.name.clone(), replaced.name.clone()])
            .min_age(Duration::ZERO),
    )
    .expect("scan");
    assert_eq!(found.orphans().count(), 2);

    std::fs::remove_file(&vanishing.path).expect("unlink");
    std::fs::remove_file(&replaced.path).expect("unlink");
    // tmpfs numbers inodes from a counter: the new file gets another.
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&replaced.path)
        .expect("recreate");

    let removals = found.remove_orphans().expect("remove");
    let outcome = |name: &SegmentName| {
        removals
            .iter()
            .find(|r| r.name == *name)
            .map(|r| r.outcome.clone())
    };
    assert_eq!(outcome(&vanishing.name), Some(RemovalOutcome::Vanished));
    assert_eq!(
        outcome(&replaced.name),
        Some(RemovalOutcome::Kept(KeepReason::Replaced))
    );
    assert!(replaced.path.exists());
}

#[test]
fn symlinks_are_skipped_and_never_followed() {
    let dead = dead_pid();
    let (target, file) = TestSegment::create(dead, 64);
    drop(file);
    let link_name =
        SegmentName::parse(format!("/torch_{dead}_{}999_1", std::process::id()).as_bytes())
            .expect("name");
    let link_path = Path::new(DEFAULT_SHM_DIR).join(link_name.file_name());
    std::os::unix::fs::symlink(&target.path, &link_path).expect("symlink");
    let _link = TestSegment {
        name: link_name.clone(),
        path: link_path.clone(),
    };
    let found = scan(
        &ScanOptions::new()
            .only([link_name.clone()])
            .min_age(Duration::ZERO),
    )
    .expect("scan");
    assert!(found.segments().is_empty());
    assert_eq!(
        found.skipped(),
        [SkippedEntry {
            name: link_name,
            reason: SkipReason::NotRegularFile {
                file_type: "symlink"
            }
        }]
    );
    assert!(found.remove_orphans().expect("remove").is_empty());
    assert!(target.path.exists());
    link_path.symlink_metadata().expect("the link is left");
}

#[test]
fn names_asked_for_but_absent_are_reported() {
    let name = SegmentName::parse(format!("/torch_{}_1_404", dead_pid()).as_bytes()).expect("name");
    let found = scan_only(&name, Duration::ZERO);
    assert!(found.segments().is_empty());
    assert_eq!(found.missing(), [name]);
}

#[test]
fn a_missing_directory_says_what_to_do() {
    let err = scan(&ScanOptions::new().shm_dir("/nonexistent/shm")).unwrap_err();
    assert_eq!(
        err,
        ScanError::OpenShmDir {
            path: PathBuf::from("/nonexistent/shm"),
            errno: Errno::ENOENT
        }
    );
    let message = err.to_string();
    assert!(message.contains("/nonexistent/shm"), "{message}");
    assert!(message.contains("ENOENT"), "{message}");
    assert!(message.contains("name the directory"), "{message}");
}

#[test]
fn maps_lines_give_device_and_inode() {
    let line =
        b"7f1c2a000000-7f1c2a001000 rw-s 00000000 00:1a 12345     /dev/shm/torch_1_2_3 (deleted)";
    assert_eq!(
        maps_line_file(line),
        Some(FileKey {
            major: 0,
            minor: 0x1a,
            ino: 12345
        })
    );
    let wide = b"00400000-00452000 r-xp 00000000 103:02 173521 /usr/bin/dbus-daemon";
    assert_eq!(
        maps_line_file(wide),
        Some(FileKey {
            major: 0x103,
            minor: 2,
            ino: 173521
        })
    );
    for line in [
        &b"7ffd5a9e6000-7ffd5aa07000 rw-p 00000000 00:00 0 [stack]"[..],
        b"",
        b"garbage",
        b"a b c zz:1 5",
        b"a b c 1:2 -5",
    ] {
        assert_eq!(
            maps_line_file(line),
            None,
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }
}

#[test]
fn fd_links_give_the_file_name() {
    assert_eq!(
        fd_link_file_name(b"/dev/shm/torch_1_2_3 (deleted)"),
        Some(&b"torch_1_2_3"[..])
    );
    assert_eq!(
        fd_link_file_name(b"socket:[123]"),
        Some(&b"socket:[123]"[..])
    );
}

#[test]
fn kernel_threads_are_recognised() {
    // kthreadd is pid 2 in the initial pid namespace.
    if std::fs::read_to_string("/proc/2/comm").is_ok_and(|comm| comm.trim() == "kthreadd") {
        assert!(is_kernel_thread(2));
    }
    assert!(!is_kernel_thread(std::process::id()));
}

#[test]
fn an_fd_in_flight_keeps_its_segment() {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    let (segment, file) = TestSegment::create(dead_pid(), 64);
    let (sender, _receiver) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .expect("socketpair");
    crate::platform::fd_passing::send_fd_batch(sender.as_fd(), &[file.as_fd()])
        .expect("send the fd");
    // No process has it in its fd table now; the kernel still has it open.
    drop(file);
    let found = scan_only(&segment.name, Duration::ZERO);
    let report = &found.segments()[0];
    assert!(report.holders.is_empty(), "{report:?}");
    assert_eq!(report.keep, Some(KeepReason::HeldUnseen));
    assert!(found.remove_orphans().expect("remove").is_empty());
    assert!(segment.path.exists());
}

#[test]
fn the_rules_apply_in_order() {
    let old = Duration::from_secs(60);
    let min_age = Duration::from_secs(5);
    let free = || Probe::Exclusive(None);
    let unasked = || panic!("the kernel must not be asked");
    let own = nix::unistd::geteuid().as_raw();
    let aged = |age| Freshness {
        age,
        min_age,
        awaited: None,
    };
    let old = || aged(old);
    // Another user's segment is kept whatever else holds, and never opened.
    let other = own.wrapping_add(1);
    assert!(matches!(
        verdict(other, false, false, old(), false, unasked),
        Verdict::Keep(KeepReason::OtherUser { uid }) if uid == other
    ));
    assert!(matches!(
        verdict(own, true, true, old(), false, unasked),
        Verdict::Keep(KeepReason::CreatorAlive)
    ));
    assert!(matches!(
        verdict(own, false, true, old(), false, unasked),
        Verdict::Keep(KeepReason::Held)
    ));
    assert!(matches!(
        verdict(
            own,
            false,
            false,
            aged(Duration::from_secs(1)),
            false,
            unasked
        ),
        Verdict::Keep(KeepReason::Recent { .. })
    ));
    assert!(matches!(
        verdict(own, false, false, old(), true, free),
        Verdict::Orphan
    ));
    assert!(matches!(
        verdict(own, false, false, old(), false, || Probe::InUse),
        Verdict::Keep(KeepReason::HeldUnseen)
    ));
    assert!(matches!(
        verdict(own, false, false, old(), false, || Probe::Replaced),
        Verdict::Keep(KeepReason::Replaced)
    ));
    assert!(matches!(
        verdict(own, false, false, old(), false, || Probe::Gone),
        Verdict::Gone
    ));
    // Without the kernel's answer, only a complete view of /proc decides.
    let unavailable = || Probe::Unavailable(Errno::EINVAL);
    assert!(matches!(
        verdict(own, false, false, old(), false, unavailable),
        Verdict::Orphan
    ));
    assert!(matches!(
        verdict(own, false, false, old(), true, unavailable),
        Verdict::Keep(KeepReason::Unverifiable {
            errno: Errno::EINVAL
        })
    ));
}

#[test]
fn a_lease_is_refused_while_another_fd_is_open() {
    let (segment, file) = TestSegment::create(dead_pid(), 64);
    let dir = open(
        DEFAULT_SHM_DIR,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .expect("open /dev/shm");
    let Ok(Lookup::Found(entry)) = stat_entry(&dir, &segment.name) else {
        panic!("the segment is there");
    };
    assert!(matches!(hold_exclusively(&dir, &entry), Probe::InUse));
    drop(file);
    let Probe::Exclusive(Some(hold)) = hold_exclusively(&dir, &entry) else {
        panic!("nothing else has it open");
    };
    assert!(hold.unbroken());
    // A second prober backs off instead of waiting on the lease...
    assert!(matches!(hold_exclusively(&dir, &entry), Probe::InUse));
    // ...and, its open having started a break, the first one notices.
    assert!(!hold.unbroken());
}

#[test]
fn another_users_orphan_is_kept_and_never_removed() {
    if !nix::unistd::geteuid().is_root() {
        // Through the handle, not eprintln!, so that test capture does not hide it.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: another_users_orphan_is_kept_and_never_removed needs root to chown\n",
        );
        return;
    }
    const NOBODY: u32 = 65534;
    let (theirs, file) = TestSegment::create(dead_pid(), 64);
    std::os::unix::fs::fchown(&file, Some(NOBODY), Some(NOBODY)).expect("chown to nobody");
    drop(file);
    let found = scan_only(&theirs.name, Duration::ZERO);
    assert_eq!(
        found.segments()[0].keep,
        Some(KeepReason::OtherUser { uid: NOBODY })
    );
    assert!(found.remove_orphans().expect("remove").is_empty());
    assert!(theirs.path.exists());

    // Given away between the scan and the removal: the second look keeps it.
    let (given, file) = TestSegment::create(dead_pid(), 64);
    drop(file);
    let found = scan_only(&given.name, Duration::ZERO);
    assert!(found.segments()[0].is_orphan());
    std::os::unix::fs::lchown(&given.path, Some(NOBODY), Some(NOBODY)).expect("chown to nobody");
    let removals = found.remove_orphans().expect("remove");
    assert_eq!(
        removals[0].outcome,
        RemovalOutcome::Kept(KeepReason::OtherUser { uid: NOBODY })
    );
    assert!(given.path.exists());
}

#[test]
fn proc_net_unix_paths_are_read_after_seven_fields() {
    let table = b"Num       RefCount Protocol Flags    Type St Inode Path\n\
0000000000000000: 00000002 00000000 00010000 0001 01 12345 /tmp/tensorshare-shm-Ab12cD/manager.sock\n\
0000000000000000: 00000002 00000000 00010000 0001 01 12346 @tensorshare-sharer-1-abc\n\
0000000000000000: 00000003 00000000 00000000 0001 03 12347\n\
0000000000000000: 00000002 00000000 00010000 0001 01 12348 /tmp/with space/listener-x\n";
    let paths = super::socket_dirs::parse_bound_socket_paths(table);
    let mut paths: Vec<&[u8]> = paths.iter().map(Vec::as_slice).collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            &b"/tmp/tensorshare-shm-Ab12cD/manager.sock"[..],
            b"/tmp/with space/listener-x"
        ]
    );
}

#[test]
fn socket_dirs_of_the_living_and_the_dead() {
    use crate::platform::private_dir::SocketDirName;

    let parent = tempfile::tempdir().expect("tempdir");
    let dead = dead_pid();
    let dead_dir = parent
        .path()
        .join(format!("tensorshare-sharer-{dead}-deaddir1"));
    std::fs::create_dir(&dead_dir).expect("mkdir");
    drop(std::os::unix::net::UnixListener::bind(dead_dir.join("listener-deadsock")).expect("bind"));
    let alive = SocketDirName::fresh_sharer();
    let alive_dir = parent.path().join(alive.as_str());
    std::fs::create_dir(&alive_dir).expect("mkdir");
    std::fs::write(parent.path().join("tensorshare-shm-file01"), b"").expect("a file");

    let options = SocketDirScanOptions::new()
        .parent(parent.path())
        .min_age(Duration::ZERO);
    // A test on another thread that forks while the listener above is
    // open hands its child a copy, which listens until the child execs: a
    // moment, so the scan is asked again until then.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let found = loop {
        let found = scan_socket_dirs(&options).expect("scan");
        let listened = found
            .dirs()
            .iter()
            .any(|d| d.path() == dead_dir && !d.listening.is_empty());
        if !listened || std::time::Instant::now() >= deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(found.dirs().len(), 2, "{found:?}");
    let dead_report = found
        .dirs()
        .iter()
        .find(|d| d.path() == dead_dir)
        .expect("the dead one");
    assert!(dead_report.is_orphan(), "{dead_report:?}");
    assert_eq!(dead_report.creator_alive, Some(false));
    let alive_report = found
        .dirs()
        .iter()
        .find(|d| d.name == alive)
        .expect("the live one");
    assert_eq!(alive_report.keep, Some(SocketDirKeepReason::CreatorAlive));
    assert_eq!(found.skipped().len(), 1);
    assert_eq!(
        found.skipped()[0].reason,
        SkipReason::NotDirectory {
            file_type: "regular file"
        }
    );

    // A socket that comes alive before removal keeps the directory.
    let revived = std::os::unix::net::UnixListener::bind(dead_dir.join("listener-deadsock"));
    assert!(revived.is_err(), "the dead socket file is still there");
    std::fs::remove_file(dead_dir.join("listener-deadsock")).expect("remove");
    let _revived =
        std::os::unix::net::UnixListener::bind(dead_dir.join("listener-deadsock")).expect("bind");
    let removals = found.remove_orphans();
    assert_eq!(removals.len(), 1);
    assert_eq!(
        removals[0].outcome,
        SocketDirOutcome::Kept(SocketDirKeepReason::Listening)
    );
    assert!(dead_dir.exists() && alive_dir.exists());
}
