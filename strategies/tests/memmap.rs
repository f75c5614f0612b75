//! The `memmap` strategy beyond the conformance suite: file modes and
//! removal, the checks an import makes on a received path, and truncation
//! under a mapping.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use tensorshare_strategies::memmap::{MemmapHandle, MemmapStrategy};
use tensorshare_strategies::{ImportError, Segment, SharingStrategy, UnixUser, WritableSegment};

fn strategy_in_tempdir() -> (tempfile::TempDir, MemmapStrategy) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let strategy = MemmapStrategy::in_dir(dir.path()).expect("a memmap directory");
    (dir, strategy)
}

fn invalid(err: ImportError) -> String {
    match err {
        ImportError::InvalidHandle { reason } => reason,
        other => panic!("expected InvalidHandle, got {other:?}"),
    }
}

#[test]
fn files_are_private_and_removed_with_their_last_holder() {
    let (dir, strategy) = strategy_in_tempdir();
    let mut segment = strategy.allocate(10).expect("allocate");
    segment.as_bytes_mut().copy_from_slice(b"0123456789");
    let path = segment.path().to_path_buf();
    assert_eq!(path.parent(), Some(dir.path()));
    let meta = fs::metadata(&path).expect("the file exists");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), 10);
    assert_eq!(fs::read(&path).expect("read the file"), b"0123456789");

    // An importer never removes the file; the creator does.
    let imported = strategy
        .import(strategy.export(&segment).expect("export"), 10)
        .expect("import");
    assert!(!imported.removes_file());
    drop(imported);
    assert!(path.exists());
    let frozen = (Box::new(segment) as Box<dyn WritableSegment>).into_shared();
    drop(frozen);
    assert!(!path.exists(), "the last holder removes the file");
}

#[test]
fn kept_files_outlive_their_holders() {
    let (_dir, strategy) = strategy_in_tempdir();
    let strategy = strategy.keep_files(true);
    let segment = strategy.allocate(3).expect("allocate");
    let path = segment.path().to_path_buf();
    drop(segment);
    assert_eq!(fs::read(&path).expect("kept"), [0, 0, 0]);
}

#[test]
fn directories_must_exist() {
    let err = MemmapStrategy::in_dir("/nonexistent/tensorshare").expect_err("missing dir");
    assert!(
        err.to_string().contains("not an existing directory"),
        "{err}"
    );
}

#[test]
fn paths_outside_the_directory_are_refused() {
    let (_dir, strategy) = strategy_in_tempdir();
    let (_other_dir, other) = strategy_in_tempdir();
    let elsewhere = other.allocate(8).expect("allocate elsewhere");
    for path in [
        elsewhere.path().to_path_buf(),
        "relative/file".into(),
        strategy.dir().join("..").join("x"),
        strategy.dir().join(".").join("x"),
        "/etc/passwd".into(),
    ] {
        let err = strategy
            .import(MemmapHandle::received(&path), 8)
            .expect_err("refused");
        let reason = invalid(err);
        assert!(reason.contains("memmap path"), "{path:?}: {reason}");
    }
}

#[test]
fn symlinks_missing_files_and_other_types_are_refused() {
    let (dir, strategy) = strategy_in_tempdir();
    let target = strategy.allocate(8).expect("allocate");
    let link = dir.path().join("link.mmap");
    std::os::unix::fs::symlink(target.path(), &link).expect("symlink");
    let reason = invalid(
        strategy
            .import(MemmapHandle::received(&link), 8)
            .expect_err("a symlink"),
    );
    assert!(reason.contains("symbolic link"), "{reason}");

    let missing = dir.path().join("gone.mmap");
    match strategy.import(MemmapHandle::received(&missing), 8) {
        Err(err @ ImportError::FileMissing { .. }) => {
            assert!(err.to_string().contains("does not exist"), "{err}");
        }
        other => panic!("expected FileMissing, got {other:?}"),
    }

    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let reason = invalid(
        strategy
            .import(MemmapHandle::received(&fifo), 0)
            .expect_err("a fifo"),
    );
    assert!(reason.contains("not a regular file"), "{reason}");
}

#[test]
fn a_replaced_file_is_not_the_identified_one() {
    let (_dir, strategy) = strategy_in_tempdir();
    let segment = strategy.allocate(8).expect("allocate");
    let handle = strategy.export(&segment).expect("export");
    let path = handle.path().to_path_buf();
    fs::remove_file(&path).expect("remove");
    fs::write(&path, [0u8; 8]).expect("replace");
    let reason = invalid(strategy.import(handle, 8).expect_err("replaced"));
    assert!(reason.contains("another file"), "{reason}");
    drop(segment);
    assert!(
        path.exists(),
        "the creator leaves a file that is not its own"
    );
}

#[test]
fn a_too_small_file_is_refused() {
    let (dir, strategy) = strategy_in_tempdir();
    let path = dir.path().join("small.mmap");
    fs::write(&path, [1u8; 100]).expect("write");
    match strategy.import(MemmapHandle::received(&path), 101) {
        Err(ImportError::HandleTooSmall { nbytes, available }) => {
            assert_eq!((nbytes, available), (101, 100));
        }
        other => panic!("expected HandleTooSmall, got {other:?}"),
    }
    let prefix = strategy
        .import(MemmapHandle::received(&path), 99)
        .expect("a prefix");
    assert_eq!(prefix.as_bytes(), &[1u8; 99][..]);
    assert_eq!(fs::metadata(&path).expect("stat").size(), 100);
}

#[test]
fn a_file_truncated_under_the_mapping_reads_zeros() {
    let (_dir, strategy) = strategy_in_tempdir();
    let nbytes = 4 * 4096;
    let mut segment = strategy.allocate(nbytes).expect("allocate");
    segment.as_bytes_mut().fill(7);
    let imported = strategy
        .import(strategy.export(&segment).expect("export"), nbytes)
        .expect("import");
    assert!(!imported.was_truncated());
    OpenOptions::new()
        .write(true)
        .open(segment.path())
        .expect("open")
        .set_len(4096)
        .expect("truncate");
    let bytes = imported.as_bytes();
    assert!(bytes[..4096].iter().all(|&b| b == 7));
    assert!(
        bytes[4096..].iter().all(|&b| b == 0),
        "lost pages read zeros"
    );
    assert!(imported.was_truncated());
}

#[test]
fn another_users_file_is_refused_naming_its_owner_and_left_as_it_was() {
    if !nix::unistd::geteuid().is_root() {
        // Through the handle, not eprintln!, so that test capture does not hide it.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: another_users_file_is_refused_naming_its_owner_and_left_as_it_was needs \
              root to give a file to another user\n",
        );
        return;
    }
    const NOBODY: u32 = 65534;
    let (dir, strategy) = strategy_in_tempdir();
    let path = dir.path().join("tensorshare_1_2_3.mmap");
    fs::write(&path, b"theirs").expect("write the file");
    std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).expect("give the file away");

    let err = strategy
        .import(MemmapHandle::received(&path), 6)
        .expect_err("another user's file");
    let ImportError::OtherUsersObject { object, owner, .. } = &err else {
        panic!("expected OtherUsersObject, got {err:?}");
    };
    assert_eq!(object, &format!("memmap file {path:?}"));
    assert_eq!(owner, &UnixUser::of(NOBODY));
    assert!(
        err.to_string().contains(&format!("belongs to {owner}")),
        "{err}"
    );
    assert!(strategy.open(MemmapHandle::received(&path)).is_err());
    assert_eq!(fs::read(&path).expect("still there"), b"theirs");
}

#[test]
fn a_lease_keeps_the_file_without_the_segment() {
    let (_dir, strategy) = strategy_in_tempdir();
    let mut segment = strategy.allocate(8).expect("allocate");
    segment.as_bytes_mut().copy_from_slice(b"leased!!");
    let lease = std::sync::Arc::clone(segment.lease().expect("our own file has a lease"));
    assert_eq!(
        (lease.path(), lease.identity(), lease.len()),
        (segment.path(), segment.identity(), 8)
    );
    assert!(lease.removes_file());
    let imported = strategy
        .import(strategy.export(&segment).expect("export"), 8)
        .expect("import");
    assert!(imported.lease().is_none(), "an importer holds no lease");
    drop((segment, imported));

    // Unmapped here, still on disk for a receiver that maps it later.
    let path = lease.path().to_path_buf();
    assert_eq!(fs::read(&path).expect("read the file"), b"leased!!");
    drop(lease);
    assert!(!path.exists(), "the last lease removes the file");
}

#[test]
fn a_lease_never_removes_a_file_put_at_its_path_since() {
    let (_dir, strategy) = strategy_in_tempdir();
    // Filesystems give a freed inode number to the next file at once, and
    // stamp birth times from a clock that ticks every few milliseconds:
    // many rounds make the later file look like the first by both.
    for round in 0..200 {
        let segment = strategy.allocate(4).expect("allocate");
        let lease = std::sync::Arc::clone(segment.lease().expect("a lease"));
        let path = segment.path().to_path_buf();
        drop(segment);
        fs::remove_file(&path).expect("remove the file");
        fs::write(&path, b"else").expect("another file at the path");
        drop(lease);
        let left = fs::read(&path).unwrap_or_else(|err| {
            panic!("round {round}: the lease removed the later file at {path:?}: {err}")
        });
        assert_eq!(left, b"else");
        fs::remove_file(&path).expect("remove the later file");
    }
}

#[test]
fn a_kept_file_has_a_lease_that_leaves_it() {
    let (_dir, strategy) = strategy_in_tempdir();
    let strategy = strategy.keep_files(true);
    let segment = strategy.allocate(4).expect("allocate");
    let lease = std::sync::Arc::clone(segment.lease().expect("a lease"));
    assert!(!lease.removes_file());
    let path = segment.path().to_path_buf();
    drop((segment, lease));
    assert!(path.exists());
}
