//! The `file_system` strategy beyond the conformance suite: whose segments
//! an import accepts, what it leaves behind when it refuses one, and that a
//! dormant mapping is taken only for the object it maps.
//!
//! The tests make real segments in `/dev/shm` laid out as torch's libshm
//! writes them, give them to another user with `fchown` (they need root,
//! which the test machines run as, and say SKIPPED otherwise), and look at
//! the files' bytes afterwards.

mod support;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use tensorshare_strategies::file_system::{HEADER_BYTES, SegmentHandle, SegmentName};
use tensorshare_strategies::services::shm_manager;
use tensorshare_strategies::{ImportError, Segment, SharingStrategy, UnixUser, WritableSegment};

/// The uid that owns the other user's segments: `nobody` on Linux.
const NOBODY: u32 = 65534;

/// Whether this process may give files away; says SKIPPED when not.
fn can_chown(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    // Through the handle, not eprintln!, so that test capture does not hide it.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {test} needs root to give a segment to another user"
    );
    false
}

/// A segment in `/dev/shm` as torch's libshm leaves it after creating it:
/// mode 0600, a 64-byte header whose first four bytes hold the reference
/// count (1, its creator's), the data after it. Removed on drop.
struct TorchSegment {
    name: SegmentName,
    path: PathBuf,
}

impl TorchSegment {
    fn create(name: SegmentName, data: &[u8]) -> (TorchSegment, File) {
        let path = PathBuf::from("/dev/shm").join(name.file_name());
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .expect("create a segment in /dev/shm");
        let mut bytes = vec![0u8; HEADER_BYTES];
        bytes[..4].copy_from_slice(&1i32.to_ne_bytes());
        bytes.extend_from_slice(data);
        file.write_all(&bytes).expect("write the segment");
        (TorchSegment { name, path }, file)
    }

    /// A segment of `data` owned by `uid`.
    fn owned_by(uid: u32, name: SegmentName, data: &[u8]) -> TorchSegment {
        let (segment, file) = TorchSegment::create(name, data);
        std::os::unix::fs::fchown(&file, Some(uid), Some(uid)).expect("give the segment away");
        segment
    }

    /// Header and data, as they are in the file now.
    fn contents(&self) -> Vec<u8> {
        std::fs::read(&self.path).expect("read the segment")
    }

    fn refcount(&self) -> i32 {
        let bytes = self.contents();
        i32::from_ne_bytes(bytes[..4].try_into().expect("a header"))
    }
}

impl Drop for TorchSegment {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

#[test]
fn another_users_segment_is_refused_naming_its_owner_and_left_as_it_was() {
    if !can_chown("another_users_segment_is_refused_naming_its_owner_and_left_as_it_was") {
        return;
    }
    let strategy = support::file_system_strategy();
    let manager = shm_manager::own_manager()
        .expect("the test manager")
        .handle()
        .clone();
    let data = pattern(4096);
    let theirs = TorchSegment::owned_by(NOBODY, SegmentName::fresh(), &data);
    let before = theirs.contents();
    let inode = std::fs::metadata(&theirs.path).expect("stat").ino();

    let err = strategy
        .import(
            SegmentHandle::received(manager, theirs.name.clone()),
            data.len(),
        )
        .expect_err("another user's segment");
    let ImportError::OtherUsersObject {
        object,
        owner,
        this,
    } = &err
    else {
        panic!("expected OtherUsersObject, got {err:?}");
    };
    assert_eq!(object, &format!("shared-memory segment {}", theirs.name));
    assert_eq!(owner, &UnixUser::of(NOBODY));
    assert_eq!(this, &UnixUser::effective());
    let message = err.to_string();
    assert!(message.contains(&owner.to_string()), "{message}");
    if let Some(name) = &owner.name {
        assert!(
            message.contains(&format!("uid {NOBODY} ({name})")),
            "{message}"
        );
    }
    assert!(
        message.contains("share between processes of one user"),
        "{message}"
    );

    // Bytes, count and name exactly as they were.
    assert_eq!(theirs.contents(), before);
    assert_eq!(theirs.refcount(), 1);
    let now = std::fs::metadata(&theirs.path).expect("still linked");
    assert_eq!((now.ino(), now.uid()), (inode, NOBODY));
}

#[test]
fn the_last_holder_leaves_another_object_under_its_name_alone() {
    if !can_chown("the_last_holder_leaves_another_object_under_its_name_alone") {
        return;
    }
    let strategy = support::file_system_strategy();
    let ours = strategy.allocate(16).expect("allocate");
    let name = ours.name().clone();
    // Someone removed our name (the manager, gc) and another user made an
    // object under it: the count reaching 0 here must not unlink theirs.
    nix::sys::mman::shm_unlink(name.as_str()).expect("unlink our segment's name");
    let theirs = TorchSegment::owned_by(NOBODY, name, &pattern(16));
    let before = theirs.contents();

    assert_eq!(ours.refcount(), 1);
    drop(ours);
    assert!(
        theirs.path.exists(),
        "the last holder unlinked another object"
    );
    assert_eq!(theirs.contents(), before);
}

#[test]
fn a_dormant_segment_is_not_taken_for_another_object_under_its_name() {
    let strategy = support::file_system_strategy();
    let mut ours = strategy.allocate(4096).expect("allocate");
    ours.as_bytes_mut().fill(1);
    let received = strategy
        .import(strategy.export(&ours).expect("export"), 4096)
        .expect("import");
    let dormant = strategy.keep_dormant(received).expect("kept dormant");
    assert_eq!(ours.refcount(), 1, "the dormant mapping counts for nothing");
    // The name now opens another object of the same size (the segment's
    // name was removed, and someone made one under it).
    let name = ours.name().clone();
    nix::sys::mman::shm_unlink(name.as_str()).expect("unlink our segment's name");
    let data = pattern(4096);
    let (theirs, _file) = TorchSegment::create(name.clone(), &data);

    let handle = SegmentHandle::received(ours.manager(), name);
    let opened = strategy.open(handle).expect("open");
    let mapped = strategy
        .map_received(opened, 4096, Some(dormant))
        .expect("map the object the name opens");
    assert_eq!(mapped.as_bytes(), &data[..], "the new object's bytes");
    assert_ne!(mapped.identity(), ours.identity());
    assert_eq!(ours.as_bytes(), &[1; 4096][..]);
    // Its creator's count, ours added and the message's taken back.
    assert_eq!(theirs.refcount(), 1);
}
