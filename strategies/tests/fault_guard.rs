//! A shared object shrunk after it was mapped never kills the process with
//! `SIGBUS`: the lost bytes read as zeros and the segment says so. Any other
//! `SIGBUS` still ends the process as it would have.
//!
//! The tests truncate real objects in `/dev/shm`, fault on real pages and
//! check how child processes die.

mod support;

use std::fs::OpenOptions;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use nix::fcntl::OFlag;
use nix::libc;
use nix::sys::mman::{MapFlags, ProtFlags, mmap, shm_open, shm_unlink};
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::sys::stat::Mode;
use nix::unistd::ftruncate;
use tensorshare_strategies::file_descriptor::{FdSegment, FileDescriptorStrategy};
use tensorshare_strategies::file_system::SegmentHandle;
use tensorshare_strategies::{ImportError, Segment, SharingStrategy, WritableSegment};

/// The page size of every Linux platform this runs on.
const PAGE: usize = 4096;

/// Two fds of one fresh tmpfs object of `len` bytes made by `shm_open`, as
/// PyTorch makes the fds it sends: it refuses seals, so whoever holds the
/// second fd can shrink what the first one maps.
fn unsealable_object(len: usize) -> (OwnedFd, OwnedFd) {
    static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let counter = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!(
        "/tensorshare_fault_guard_test_{}_{counter}",
        std::process::id()
    );
    let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR;
    let mode = Mode::S_IRUSR | Mode::S_IWUSR;
    let first = shm_open(name.as_str(), flags, mode).expect("shm_open");
    let second = shm_open(name.as_str(), OFlag::O_RDWR, mode).expect("shm_open again");
    shm_unlink(name.as_str()).expect("shm_unlink");
    ftruncate(&first, i64::try_from(len).expect("small")).expect("size the object");
    (first, second)
}

/// Imports `fd` as a `file_descriptor` segment of `len` bytes.
fn import_fd(fd: OwnedFd, len: usize) -> FdSegment {
    FileDescriptorStrategy
        .import(fd, len)
        .expect("import the fd")
}

/// Shrinks the object behind `fd` to `len` bytes.
fn shrink(fd: &OwnedFd, len: usize) {
    ftruncate(fd, i64::try_from(len).expect("small")).expect("shrink the object");
}

/// The role of a child that truncates `/dev/shm/<name>` to zero bytes: the
/// holder that shrinks a segment is another process.
#[test]
#[ignore = "a child role: a fault guard test runs it"]
fn child_truncates_a_named_segment() {
    support::expect_child();
    let path = std::env::var("FAULT_GUARD_TRUNCATE").expect("path to truncate");
    let file = OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open the segment by name");
    file.set_len(0).expect("truncate the segment");
    println!("{}", support::CHILD_DONE);
}

#[test]
fn file_system_segment_truncated_by_name_reads_zeros() {
    let strategy = support::file_system_strategy();
    let len = 3 * PAGE + 100;
    let mut created = strategy.allocate(len).expect("allocate");
    created.as_bytes_mut().fill(0x5a);
    let handle = strategy.export(&created).expect("export");
    let (manager, name) = handle.into_parts();
    let imported = strategy
        .import(SegmentHandle::received(manager, name.clone()), len)
        .expect("import");
    assert_eq!(imported.as_bytes()[len - 1], 0x5a);
    assert!(!imported.was_truncated());

    let path = Path::new("/dev/shm").join(name.file_name());
    let path = path.to_str().expect("a UTF-8 path");
    support::expect_child_success(support::spawn_self(
        "child_truncates_a_named_segment",
        &[("FAULT_GUARD_TRUNCATE", path)],
    ));

    assert!(
        imported.as_bytes().iter().all(|&byte| byte == 0),
        "every lost byte reads as zero"
    );
    assert!(imported.was_truncated());
    assert!(
        !created.was_truncated(),
        "a mapping untouched since is not marked"
    );
    assert!(created.as_bytes().iter().all(|&byte| byte == 0));
    assert!(created.was_truncated());
    // The header was lost too: the counts are gone, so nobody unlinks the
    // name on drop. The test does.
    drop((created, imported));
    let _ = std::fs::remove_file(path);
}

#[test]
fn fd_segment_of_an_unsealable_object_truncated_reads_zeros() {
    let len = 4 * PAGE + 100;
    let (mapped, other) = unsealable_object(len);
    let mut segment = import_fd(mapped, len);
    segment.as_bytes_mut().fill(0x11);
    shrink(&other, PAGE + 10);

    // The kernel zeroes the cut page past the new end; the pages after it
    // are lost, and read as zeros too.
    let bytes = segment.as_bytes();
    assert!(
        bytes[..PAGE + 10].iter().all(|&byte| byte == 0x11),
        "the bytes still inside the object keep their values"
    );
    assert!(
        bytes[PAGE + 10..].iter().all(|&byte| byte == 0),
        "the bytes past the new end read as zeros"
    );
    assert!(segment.was_truncated());

    // Writes to the lost pages stay in this process: grown back, the object
    // holds zeros there.
    segment.as_bytes_mut()[3 * PAGE] = 0xab;
    shrink(&other, len);
    let mut shared = [0xffu8; 1];
    let file = std::fs::File::from(other);
    file.read_exact_at(&mut shared, 3 * PAGE as u64)
        .expect("read the object");
    assert_eq!(shared, [0], "a write to a lost page is not shared");
    assert_eq!(segment.as_bytes()[3 * PAGE], 0xab, "but kept here");
}

#[test]
fn fd_segment_of_an_unsealable_object_survives_truncation_to_zero() {
    let len = 8 * PAGE;
    let (mapped, other) = unsealable_object(len);
    let segment = import_fd(mapped, len);
    shrink(&other, 0);
    assert!(segment.as_bytes().iter().all(|&byte| byte == 0));
    assert!(segment.was_truncated());
    // Exported and imported again, the shrunk object is refused.
    let err = FileDescriptorStrategy
        .import(
            FileDescriptorStrategy.export(&segment).expect("export"),
            len,
        )
        .unwrap_err();
    assert_eq!(
        err,
        ImportError::HandleTooSmall {
            nbytes: len,
            available: 0
        }
    );
}

#[test]
fn sealed_segments_cannot_shrink_and_are_never_marked() {
    let segment = FileDescriptorStrategy.allocate(PAGE).expect("allocate");
    let other = segment.try_clone_fd().expect("dup");
    // Where memfds exist the allocation is sealed; in the shm fallback it
    // is guarded instead, and the truncation below is caught.
    if ftruncate(&other, 0).is_ok() {
        assert!(segment.as_bytes().iter().all(|&byte| byte == 0));
        assert!(segment.was_truncated());
    } else {
        assert!(segment.as_bytes().iter().all(|&byte| byte == 0));
        assert!(!segment.was_truncated());
    }
}

/// How a child role meets an unguarded `SIGBUS`: which disposition is in
/// place before the guard installs its handler.
const PREVIOUS_ENV: &str = "FAULT_GUARD_PREVIOUS";

/// The exit status of the `SIGBUS` handler a child installs before the
/// guard.
const OWN_HANDLER_STATUS: i32 = 42;

extern "C" fn exit_from_sigbus(_signal: libc::c_int) {
    // SAFETY: `_exit` is async-signal-safe and ends the process at once.
    unsafe { libc::_exit(OWN_HANDLER_STATUS) }
}

/// The role of a child that guards a segment, then faults on a mapping the
/// guard does not know: it must die as if the guard were not there.
#[test]
#[ignore = "a child role: a fault guard test runs it"]
fn child_faults_outside_every_guarded_range() {
    support::expect_child();
    // No core file for the expected crash.
    setrlimit(Resource::RLIMIT_CORE, 0, 0).expect("disable core dumps");
    let previous = std::env::var(PREVIOUS_ENV).expect("which previous disposition");
    let before = match previous.as_str() {
        // Rust's standard library's own handler, in place in every test.
        "std" => None,
        "default" => Some(SigHandler::SigDfl),
        "ignore" => Some(SigHandler::SigIgn),
        "handler" => Some(SigHandler::Handler(exit_from_sigbus)),
        other => panic!("unknown disposition {other}"),
    };
    if let Some(handler) = before {
        let action = SigAction::new(handler, SaFlags::empty(), SigSet::empty());
        // SAFETY: `exit_from_sigbus` only calls `_exit`; the default action
        // needs no function.
        unsafe { sigaction(Signal::SIGBUS, &action) }.expect("set SIGBUS");
    }

    // A guarded segment, truncated: the guard's handler is installed by
    // the import, and catches this fault (the handler set above never runs).
    let (mapped, other) = unsealable_object(PAGE);
    let segment = import_fd(mapped, PAGE);
    shrink(&other, 0);
    assert_eq!(segment.as_bytes()[0], 0);
    assert!(segment.was_truncated());

    // A mapping the guard knows nothing of, truncated the same way.
    let (scratch, scratch_other) = unsealable_object(PAGE);
    let len = NonZeroUsize::new(PAGE).expect("not zero");
    // SAFETY: a fresh mapping with no address hint; the fault it raises
    // below is the point of this child.
    let mapping = unsafe {
        mmap(
            None,
            len,
            ProtFlags::PROT_READ,
            MapFlags::MAP_SHARED,
            scratch.as_fd(),
            0,
        )
    }
    .expect("map the scratch object");
    shrink(&scratch_other, 0);
    eprintln!("touching an unguarded lost page");
    // SAFETY: the pointer is the start of a live one-page mapping; reading it
    // raises SIGBUS, which must end this process.
    let byte = unsafe { mapping.cast::<u8>().as_ptr().read_volatile() };
    println!("survived an unguarded SIGBUS, read {byte}");
    println!("{}", support::CHILD_DONE);
}

fn run_unguarded_fault(previous: &str) -> std::process::Output {
    let child = support::spawn_self(
        "child_faults_outside_every_guarded_range",
        &[(PREVIOUS_ENV, previous)],
    );
    let output = child.wait_with_output().expect("wait for the child");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("touching an unguarded lost page"),
        "the child did not get to the fault ({}):\n{stderr}",
        output.status
    );
    output
}

fn assert_killed_by_sigbus(output: &std::process::Output) {
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGBUS),
        "{}",
        output.status
    );
}

#[test]
fn unguarded_sigbus_still_kills_through_the_std_handler() {
    assert_killed_by_sigbus(&run_unguarded_fault("std"));
}

#[test]
fn unguarded_sigbus_still_kills_with_the_default_action() {
    assert_killed_by_sigbus(&run_unguarded_fault("default"));
}

#[test]
fn unguarded_sigbus_still_kills_when_ignored() {
    // The kernel cannot ignore a fault: it ends the process all the same.
    assert_killed_by_sigbus(&run_unguarded_fault("ignore"));
}

#[test]
fn unguarded_sigbus_goes_to_the_previous_handler() {
    let output = run_unguarded_fault("handler");
    assert_eq!(
        output.status.code(),
        Some(OWN_HANDLER_STATUS),
        "{}",
        output.status
    );
}

/// The role of a child that imports and drops guarded segments on many
/// threads while others fault on truncated ones, then checks that every
/// mapping is gone.
#[test]
#[ignore = "a child role: a fault guard test runs it"]
fn child_registers_while_others_fault() {
    support::expect_child();
    const IMPORTING_THREADS: usize = 4;
    const FAULTING_THREADS: usize = 2;
    const ROUNDS: usize = 300;
    const LIVE: usize = 8;
    let strategy = support::file_system_strategy();
    // Only shared-memory mappings are counted: thread stacks stay cached.
    let baseline = shared_memory_mappings();
    std::thread::scope(|scope| {
        for thread in 0..IMPORTING_THREADS {
            let strategy = &strategy;
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    let mut live = Vec::new();
                    for index in 0..LIVE {
                        let value = u8::try_from((thread + round + index) % 251).expect("small");
                        if index % 2 == 0 {
                            let (mapped, _other) = unsealable_object(PAGE);
                            let mut segment = import_fd(mapped, PAGE);
                            segment.as_bytes_mut().fill(value);
                            live.push((Box::new(segment) as Box<dyn Segment>, value));
                        } else {
                            let mut created = strategy.allocate(PAGE).expect("allocate");
                            created.as_bytes_mut().fill(value);
                            let (manager, name) =
                                strategy.export(&created).expect("export").into_parts();
                            let imported = strategy
                                .import(SegmentHandle::received(manager, name), PAGE)
                                .expect("import");
                            drop(created);
                            live.push((Box::new(imported) as Box<dyn Segment>, value));
                        }
                    }
                    for (segment, value) in &live {
                        assert!(
                            segment.as_bytes().iter().all(|byte| byte == value),
                            "an untouched segment keeps its bytes"
                        );
                    }
                }
            });
        }
        for _ in 0..FAULTING_THREADS {
            scope.spawn(|| {
                for _ in 0..ROUNDS {
                    let (mapped, other) = unsealable_object(4 * PAGE);
                    let mut segment = import_fd(mapped, 4 * PAGE);
                    segment.as_bytes_mut().fill(3);
                    shrink(&other, PAGE);
                    assert!(segment.as_bytes()[PAGE..].iter().all(|&byte| byte == 0));
                    assert!(segment.as_bytes()[..PAGE].iter().all(|&byte| byte == 3));
                    assert!(segment.was_truncated());
                }
            });
        }
    });
    assert_eq!(
        shared_memory_mappings(),
        baseline,
        "every segment's mapping is gone after the threads"
    );
    println!("{}", support::CHILD_DONE);
}

/// How many of this process's mappings are of files in `/dev/shm`.
fn shared_memory_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("read /proc/self/maps")
        .lines()
        .filter(|line| line.contains("/dev/shm/"))
        .count()
}

#[test]
fn registration_on_many_threads_while_faulting() {
    support::run_self("child_registers_while_others_fault");
}
