//! The conformance suite for [`SharingStrategy`], written once and run
//! against every implementation through [`conformance_tests!`].
//!
//! Every test is a generic function; the macro instantiates one `#[test]`
//! per function for a strategy. Tests that need a clean process (fd and
//! mapping counts) or a second process re-run this test binary as a child.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;

use tensorshare_strategies::{
    AllocateError, ImportError, MAX_SEGMENT_BYTES, Segment, SharingStrategy, WritableSegment,
    allocate_writable,
};

use crate::support;

/// A strategy under test: how to make one, and how to move its handle to a
/// child process (the runtime's own transports are not part of this crate).
pub trait ConformanceStrategy: SharingStrategy + Sized {
    /// A strategy instance for tests.
    fn for_test() -> Self;
    /// Sends `handle` over `stream` to a process running [`Self::recv_handle`].
    fn send_handle(stream: &UnixStream, handle: Self::Handle);
    /// Receives a handle sent by [`Self::send_handle`].
    fn recv_handle(stream: &UnixStream) -> Self::Handle;
}

/// Instantiates the suite for `$strategy` in a module `$module`, which must
/// sit at the test crate's root (the child-process tests name themselves by
/// path).
macro_rules! conformance_tests {
    ($module:ident, $strategy:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn allocation_is_zero_filled() {
                $crate::conformance::allocation_is_zero_filled::<$strategy>();
            }

            #[test]
            fn round_trip_in_one_process() {
                $crate::conformance::round_trip_in_one_process::<$strategy>();
            }

            #[test]
            fn round_trip_through_a_child_process() {
                $crate::conformance::round_trip_through_a_child_process::<$strategy>(concat!(
                    stringify!($module),
                    "::round_trip_through_a_child_process"
                ));
            }

            #[test]
            fn import_beyond_the_object_is_an_error() {
                $crate::conformance::import_beyond_the_object_is_an_error::<$strategy>();
            }

            #[test]
            fn release_leaks_nothing() {
                $crate::conformance::release_leaks_nothing::<$strategy>(concat!(
                    stringify!($module),
                    "::release_leaks_nothing"
                ));
            }

            #[test]
            fn keys_name_the_shared_object() {
                $crate::conformance::keys_name_the_shared_object::<$strategy>();
            }

            #[test]
            fn a_handle_joins_the_segment_holding_its_object() {
                $crate::conformance::a_handle_joins_the_segment_holding_its_object::<$strategy>();
            }

            #[test]
            fn a_dormant_mapping_maps_its_object_again() {
                $crate::conformance::a_dormant_mapping_maps_its_object_again::<$strategy>();
            }

            #[test]
            fn impossible_sizes_fail_cleanly() {
                $crate::conformance::impossible_sizes_fail_cleanly::<$strategy>();
            }

            #[test]
            fn frozen_segment_reads_from_many_threads() {
                $crate::conformance::frozen_segment_reads_from_many_threads::<$strategy>();
            }
        }
    };
}

/// Sizes every strategy must handle, up to 64 MiB + 1.
const SIZES: [usize; 4] = [0, 1, 4096, (64 << 20) + 1];
/// Sizes sent to the child process.
const CHILD_SIZES: [usize; 3] = [0, 1, 3 * 4096 + 5];
const PARENT_SEED: u8 = 17;
const CHILD_SEED: u8 = 101;
const SOCKET_ENV: &str = "TENSORSHARE_TEST_CONFORMANCE_SOCKET";

/// A prime-length block, so the pattern does not repeat at page boundaries.
fn pattern_block(seed: u8) -> [u8; 251] {
    std::array::from_fn(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
}

fn fill(bytes: &mut [u8], seed: u8) {
    let block = pattern_block(seed);
    for chunk in bytes.chunks_mut(block.len()) {
        chunk.copy_from_slice(&block[..chunk.len()]);
    }
}

fn has_pattern(bytes: &[u8], seed: u8) -> bool {
    let block = pattern_block(seed);
    bytes
        .chunks(block.len())
        .all(|chunk| chunk == &block[..chunk.len()])
}

fn is_zero(bytes: &[u8]) -> bool {
    let zeros = [0u8; 4096];
    bytes
        .chunks(zeros.len())
        .all(|chunk| chunk == &zeros[..chunk.len()])
}

pub fn allocation_is_zero_filled<S: ConformanceStrategy>() {
    let strategy = S::for_test();
    for nbytes in SIZES {
        let segment = strategy.allocate(nbytes).expect("allocate");
        assert_eq!(segment.len(), nbytes);
        assert_eq!(segment.as_bytes().len(), nbytes);
        assert_eq!(segment.is_empty(), nbytes == 0);
        assert_eq!(segment.kind(), S::KIND);
        assert!(
            is_zero(segment.as_bytes()),
            "{nbytes}-byte segment not zeroed"
        );
    }
    // The type-erased door gives the same.
    match allocate_writable(S::KIND, 4096) {
        Ok(segment) => {
            assert_eq!((segment.len(), segment.kind()), (4096, S::KIND));
            assert!(is_zero(segment.as_bytes()));
        }
        Err(err) => panic!("allocate_writable: {err}"),
    }
}

pub fn round_trip_in_one_process<S: ConformanceStrategy>() {
    let strategy = S::for_test();
    for nbytes in SIZES {
        let mut segment = strategy.allocate(nbytes).expect("allocate");
        fill(segment.as_bytes_mut(), PARENT_SEED);
        let handle = strategy.export(&segment).expect("export");
        let mut imported = strategy.import(handle, nbytes).expect("import");
        assert_eq!(imported.len(), nbytes);
        assert!(has_pattern(imported.as_bytes(), PARENT_SEED));
        if let Some(last) = nbytes.checked_sub(1) {
            imported.as_bytes_mut()[last] ^= 0xff;
            let seen = segment.as_bytes()[last] != imported.as_bytes()[last];
            assert_eq!(seen, !S::KIND.shares_memory(), "write through the import");
            // A handle to a larger object imports as its prefix.
            let prefix = strategy.export(&segment).expect("export");
            let prefix = strategy.import(prefix, last).expect("import a prefix");
            assert_eq!(prefix.as_bytes(), &segment.as_bytes()[..last]);
        }
    }
}

pub fn round_trip_through_a_child_process<S: ConformanceStrategy>(test_name: &str) {
    if support::is_child() {
        child_round_trip::<S>();
        println!("{}", support::CHILD_DONE);
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("handles.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    listener
        .set_nonblocking(true)
        .expect("nonblocking listener");
    let path = path.to_str().expect("UTF-8 temporary path");
    let mut child = support::spawn_self(test_name, &[(SOCKET_ENV, path)]);
    let mut stream = support::wait_for(&mut child, || listener.accept().ok().map(|(s, _)| s));
    stream.set_nonblocking(false).expect("blocking stream");

    let strategy = S::for_test();
    for nbytes in CHILD_SIZES {
        let mut segment = strategy.allocate(nbytes).expect("allocate");
        fill(segment.as_bytes_mut(), PARENT_SEED);
        S::send_handle(&stream, strategy.export(&segment).expect("export"));
        let mut reply = [0u8; 1];
        let replied = stream.read(&mut reply).expect("read the child's reply");
        if replied == 0 {
            support::expect_child_success(child);
            panic!("the child closed the connection early");
        }
        assert_eq!(&reply, b"K");
        // The child has imported, written (where memory is shared) and
        // released its segment; ours is intact.
        let seed = if S::KIND.shares_memory() {
            CHILD_SEED
        } else {
            PARENT_SEED
        };
        assert!(
            has_pattern(segment.as_bytes(), seed),
            "{nbytes} bytes after the child"
        );
    }
    support::expect_child_success(child);
}

fn child_round_trip<S: ConformanceStrategy>() {
    let path = std::env::var(SOCKET_ENV).expect("socket path from the parent");
    let mut stream = UnixStream::connect(path).expect("connect to the parent");
    let strategy = S::for_test();
    for nbytes in CHILD_SIZES {
        let handle = S::recv_handle(&stream);
        let mut segment = strategy
            .import(handle, nbytes)
            .expect("import in the child");
        assert_eq!(segment.len(), nbytes);
        assert!(
            has_pattern(segment.as_bytes(), PARENT_SEED),
            "child sees the bytes"
        );
        if S::KIND.shares_memory() {
            fill(segment.as_bytes_mut(), CHILD_SEED);
        }
        drop(segment);
        stream.write_all(b"K").expect("reply to the parent");
    }
}

pub fn import_beyond_the_object_is_an_error<S: ConformanceStrategy>() {
    let strategy = S::for_test();
    for (object, asked) in [(0, 1), (4096, 4097), (1, 64 << 20)] {
        let segment = strategy.allocate(object).expect("allocate");
        let handle = strategy.export(&segment).expect("export");
        let err = strategy
            .import(handle, asked)
            .expect_err("import past the end");
        match err {
            ImportError::HandleTooSmall { nbytes, available } => {
                assert_eq!((nbytes, available), (asked, object as u64));
            }
            other => panic!("expected HandleTooSmall, got {other:?}"),
        }
        assert!(err.to_string().contains("reject the message"), "{err}");
    }
}

/// Allocate, write, export four times: import once, join the import with
/// the second handle, map the third through the import's dormant mapping
/// (where the strategy keeps one), drop the fourth unimported, drop
/// everything.
fn share_and_release<S: ConformanceStrategy>(strategy: &S, cycles: usize) {
    for cycle in 0..cycles {
        let nbytes = 4096 + cycle % 3;
        let mut segment = strategy.allocate(nbytes).expect("allocate");
        fill(segment.as_bytes_mut(), PARENT_SEED);
        let unused = strategy.export(&segment).expect("export");
        let imported = strategy
            .import(strategy.export(&segment).expect("export"), nbytes)
            .expect("import");
        assert!(has_pattern(imported.as_bytes(), PARENT_SEED));
        let again = open_export(strategy, &segment);
        strategy.join_held(&imported, again).expect("join");
        let dormant = strategy.keep_dormant(imported);
        let remapped = strategy
            .map_received(open_export(strategy, &segment), nbytes, dormant)
            .expect("map again");
        assert!(has_pattern(remapped.as_bytes(), PARENT_SEED));
        drop((unused, remapped, segment));
    }
}

/// A handle of `segment`, as a receiver opens it.
fn open_export<S: ConformanceStrategy>(strategy: &S, segment: &S::Segment) -> S::Received {
    let handle = strategy.export(segment).expect("export");
    strategy.open(handle).expect("open")
}

/// Every handle exported from one segment opens to the segment's own key,
/// and another segment has another: a receiver finds what it holds of an
/// object by it. A strategy that shares no object has no keys.
pub fn keys_name_the_shared_object<S: ConformanceStrategy>() {
    let strategy = S::for_test();
    let segment = strategy.allocate(4096).expect("allocate");
    let other = strategy.allocate(4096).expect("allocate");
    let key = S::segment_key(&segment);
    assert_eq!(key.is_some(), S::KIND.shares_memory(), "{key:?}");
    for _ in 0..2 {
        assert_eq!(S::received_key(&open_export(&strategy, &segment)), key);
    }
    let imported = strategy
        .import(strategy.export(&segment).expect("export"), 4096)
        .expect("import");
    assert_eq!(S::segment_key(&imported), key, "an import is its object");
    if key.is_some() {
        assert_ne!(S::segment_key(&other), key);
    }
}

/// A receiver holding an object takes later handles of it into the segment
/// it holds: the segment keeps reading the object, writes still reach it,
/// and once everything is dropped the object can be gone (the release test
/// counts what is left).
pub fn a_handle_joins_the_segment_holding_its_object<S: ConformanceStrategy>() {
    let strategy = S::for_test();
    let mut segment = strategy.allocate(8192).expect("allocate");
    fill(segment.as_bytes_mut(), PARENT_SEED);
    let held = strategy
        .import(strategy.export(&segment).expect("export"), 8192)
        .expect("import");
    for _ in 0..3 {
        let received = open_export(&strategy, &segment);
        strategy.join_held(&held, received).expect("join");
    }
    assert!(has_pattern(held.as_bytes(), PARENT_SEED));
    segment.as_bytes_mut()[0] ^= 0xff;
    let seen = held.as_bytes()[0] != pattern_block(PARENT_SEED)[0];
    assert_eq!(seen, S::KIND.shares_memory(), "a write after joining");
}

/// A mapping kept dormant maps its object again, seeing the object's
/// current bytes; offered for another object, it is not used.
pub fn a_dormant_mapping_maps_its_object_again<S: ConformanceStrategy>() {
    let strategy = S::for_test();
    let mut segment = strategy.allocate(8192).expect("allocate");
    let mut other = strategy.allocate(8192).expect("allocate");
    fill(segment.as_bytes_mut(), PARENT_SEED);
    fill(other.as_bytes_mut(), CHILD_SEED);
    let dormant_of = |segment: &S::Segment| {
        let imported = strategy
            .import(strategy.export(segment).expect("export"), 8192)
            .expect("import");
        strategy.keep_dormant(imported)
    };

    let dormant = dormant_of(&segment);
    segment.as_bytes_mut()[1] ^= 0xff;
    let again = strategy
        .map_received(open_export(&strategy, &segment), 8192, dormant)
        .expect("map again");
    assert_eq!(again.as_bytes(), segment.as_bytes());

    let wrong = strategy
        .map_received(open_export(&strategy, &other), 8192, dormant_of(&segment))
        .expect("map another object");
    assert!(has_pattern(wrong.as_bytes(), CHILD_SEED));
    // A dormant mapping of another length is not taken either.
    let shorter = strategy
        .map_received(open_export(&strategy, &segment), 4096, dormant_of(&segment))
        .expect("map a prefix");
    assert_eq!(shorter.as_bytes(), &segment.as_bytes()[..4096]);
}

pub fn release_leaks_nothing<S: ConformanceStrategy>(test_name: &str) {
    if !support::is_child() {
        // Counting fds and mappings needs a process where nothing else runs.
        support::run_self(test_name);
        return;
    }
    let strategy = S::for_test();
    // Warm up lazily initialised state before counting.
    share_and_release(&strategy, 10);
    support::wait_for_background_threads();
    let (fds, maps) = (support::open_fd_count(), support::mapping_count());
    share_and_release(&strategy, 1000);
    // Threads that let go of what was released end by themselves; their
    // stacks are not leaks.
    support::wait_for_background_threads();
    assert_eq!(support::open_fd_count(), fds, "fds leaked");
    assert_eq!(support::mapping_count(), maps, "mappings leaked");
    println!("{}", support::CHILD_DONE);
}

pub fn impossible_sizes_fail_cleanly<S: ConformanceStrategy>() {
    let strategy = S::for_test();
    for nbytes in [usize::MAX, MAX_SEGMENT_BYTES + 1] {
        match strategy.allocate(nbytes) {
            Err(err @ AllocateError::TooLarge { .. }) => {
                assert!(err.to_string().contains(&nbytes.to_string()), "{err}");
            }
            other => panic!("allocate({nbytes}): expected TooLarge, got {other:?}"),
        }
        let segment = strategy.allocate(8).expect("allocate");
        let handle = strategy.export(&segment).expect("export");
        let err = strategy
            .import(handle, nbytes)
            .expect_err("import an impossible size");
        assert!(matches!(err, ImportError::TooLarge { .. }), "{err:?}");
    }
    let segment = strategy.allocate(8).expect("allocate");
    let handle = strategy.export(&segment).expect("export");
    let err = strategy
        .import(handle, MAX_SEGMENT_BYTES)
        .expect_err("import");
    assert!(matches!(err, ImportError::HandleTooSmall { .. }), "{err:?}");
}

pub fn frozen_segment_reads_from_many_threads<S: ConformanceStrategy>() {
    let strategy = S::for_test();
    let mut segment = strategy.allocate(10_000).expect("allocate");
    fill(segment.as_bytes_mut(), PARENT_SEED);
    let boxed: Box<dyn WritableSegment> = Box::new(segment);
    let frozen: Arc<dyn Segment> = boxed.into_shared();
    assert_eq!((frozen.len(), frozen.kind()), (10_000, S::KIND));
    assert!(S::local(frozen.as_ref()).is_some());
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let frozen = Arc::clone(&frozen);
            scope.spawn(move || assert!(has_pattern(frozen.as_bytes(), PARENT_SEED)));
        }
    });
}
