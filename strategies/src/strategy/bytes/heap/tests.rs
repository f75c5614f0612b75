//! Unit tests of `heap`. Tests that look into a pool use a private one, so
//! they cannot see each other's buffers when run in parallel.
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Barrier;
use std::thread;

use super::*;

const MIB: usize = 1 << 20;

/// A pool of its own for one test; emptied with [`empty`].
fn private_pool(max_buffers: usize, max_bytes: usize) -> &'static HeapPool {
    Box::leak(Box::new(HeapPool::new(max_buffers, max_bytes)))
}

/// Unmaps everything `pool` holds, so a test leaves no memory behind.
fn empty(pool: &HeapPool) {
    drop(std::mem::take(&mut *pool.lock()));
}

/// The start addresses of the pooled mappings, least recently returned
/// first.
fn pooled_starts(pool: &HeapPool) -> Vec<usize> {
    pool.lock()
        .iter()
        .map(|mapping| mapping.map.as_ptr() as usize)
        .collect()
}

fn start(buffer: &HeapBuffer) -> usize {
    buffer.as_ptr() as usize
}

/// `len` bytes that differ from their neighbours and from zero.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i % 251) as u8 ^ seed) | 1).collect()
}

fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&byte| byte == 0)
}

#[test]
fn the_buffer_is_send_and_sync() {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<HeapBuffer>();
}

#[test]
fn sizes_around_the_thresholds() {
    let pool = private_pool(8, 64 * MIB);
    let cases = [
        (0, None),
        (1, None),
        (MIB - 1, None),
        (MIB, Some(2 * MIB)),
        (2 * MIB, Some(2 * MIB)),
        (2 * MIB + 1, Some(4 * MIB)),
    ];
    for (nbytes, mapped) in cases {
        let zeroed = HeapBuffer::zeroed_in(pool, nbytes).expect("zeroed");
        assert_eq!(zeroed.len(), nbytes);
        assert_eq!(zeroed.is_empty(), nbytes == 0);
        assert_eq!(zeroed.mapped_len(), mapped, "zeroed({nbytes})");
        assert!(is_zero(&zeroed), "zeroed({nbytes})");

        let bytes = pattern(nbytes, 0x5a);
        let copy = HeapBuffer::copy_of_in(pool, &bytes).expect("copy_of");
        assert_eq!(copy.mapped_len(), mapped, "copy_of({nbytes})");
        assert_eq!(copy.as_slice(), bytes.as_slice());
    }
    empty(pool);
}

#[test]
fn from_vec_adopts_the_vec_whatever_its_size() {
    let bytes = pattern(2 * MIB, 3);
    let start_of_vec = bytes.as_ptr() as usize;
    let buffer = HeapBuffer::from_vec(bytes);
    assert_eq!(start(&buffer), start_of_vec);
    assert_eq!(buffer.mapped_len(), None);
    assert_eq!(buffer.len(), 2 * MIB);
}

#[test]
fn zeroed_is_zero_when_recycled_from_a_dirty_buffer() {
    let pool = private_pool(8, 64 * MIB);
    let dirty = HeapBuffer::copy_of_in(pool, &pattern(4 * MIB, 0xa5)).expect("copy_of");
    let dirty_start = start(&dirty);
    drop(dirty);

    // The whole mapping, then a shorter buffer of the same rounded length.
    let zeroed = HeapBuffer::zeroed_in(pool, 4 * MIB).expect("zeroed");
    assert_eq!(start(&zeroed), dirty_start, "the pooled mapping is reused");
    assert!(is_zero(&zeroed));
    let mut zeroed = zeroed;
    zeroed.fill(0xff);
    drop(zeroed);

    let shorter = HeapBuffer::zeroed_in(pool, 3 * MIB + 7).expect("zeroed");
    assert_eq!(start(&shorter), dirty_start);
    assert_eq!(shorter.len(), 3 * MIB + 7);
    assert!(is_zero(&shorter));
    drop(shorter);
    empty(pool);
}

#[test]
fn copy_of_matches_in_fresh_and_recycled_mappings() {
    let pool = private_pool(8, 64 * MIB);
    let first = pattern(5 * MIB, 1);
    let fresh = HeapBuffer::copy_of_in(pool, &first).expect("copy_of");
    assert_eq!(fresh.as_slice(), first.as_slice());
    let fresh_start = start(&fresh);
    drop(fresh);

    let second = pattern(5 * MIB + 3, 2);
    let recycled = HeapBuffer::copy_of_in(pool, &second).expect("copy_of");
    assert_eq!(
        start(&recycled),
        fresh_start,
        "the pooled mapping is reused"
    );
    assert_eq!(recycled.as_slice(), second.as_slice());
    drop(recycled);
    empty(pool);
}

#[test]
fn a_returned_buffer_is_reused_for_the_same_rounded_length_only() {
    let pool = private_pool(8, 64 * MIB);
    let first = HeapBuffer::zeroed_in(pool, 3 * MIB).expect("zeroed");
    let first_start = start(&first);
    drop(first);
    assert_eq!(pool.usage(), (1, 4 * MIB));

    // 4 MiB rounds to the same 4 MiB mapping.
    let reused = HeapBuffer::zeroed_in(pool, 4 * MIB).expect("zeroed");
    assert_eq!(start(&reused), first_start);
    assert_eq!(pool.usage(), (0, 0), "taken out of the pool");
    // The pool is empty, so this one is fresh: never the same mapping twice.
    let other = HeapBuffer::zeroed_in(pool, 4 * MIB).expect("zeroed");
    assert_ne!(start(&other), first_start);
    drop(reused);
    drop(other);
    assert_eq!(pool.usage(), (2, 8 * MIB));

    // 6 MiB is another rounded length: nothing pooled fits it.
    let larger = HeapBuffer::zeroed_in(pool, 6 * MIB).expect("zeroed");
    assert_eq!(pool.usage(), (2, 8 * MIB));
    assert!(!pooled_starts(pool).contains(&start(&larger)));
    drop(larger);
    assert_eq!(pool.usage(), (3, 14 * MIB));
    empty(pool);
}

#[test]
fn the_pool_keeps_at_most_its_count_dropping_the_least_recently_returned() {
    let pool = private_pool(3, 64 * MIB);
    let buffers: Vec<HeapBuffer> = (0..4)
        .map(|_| HeapBuffer::zeroed_in(pool, 2 * MIB).expect("zeroed"))
        .collect();
    let starts: Vec<usize> = buffers.iter().map(start).collect();
    for buffer in buffers {
        drop(buffer);
    }
    assert_eq!(pool.usage(), (3, 6 * MIB));
    assert_eq!(pooled_starts(pool), starts[1..]);

    // Taken back most recently returned first.
    let taken = HeapBuffer::zeroed_in(pool, 2 * MIB).expect("zeroed");
    assert_eq!(start(&taken), starts[3]);
    drop(taken);
    empty(pool);
}

#[test]
fn the_pool_keeps_at_most_its_bytes() {
    let pool = private_pool(8, 8 * MIB);
    let small = HeapBuffer::zeroed_in(pool, 2 * MIB).expect("zeroed");
    let first = HeapBuffer::zeroed_in(pool, 4 * MIB).expect("zeroed");
    let second = HeapBuffer::zeroed_in(pool, 4 * MIB).expect("zeroed");
    let starts = [start(&first), start(&second)];
    drop(small);
    drop(first);
    assert_eq!(pool.usage(), (2, 6 * MIB));
    // 10 MiB would be too many: the 2 MiB one, returned first, goes.
    drop(second);
    assert_eq!(pool.usage(), (2, 8 * MIB));
    assert_eq!(pooled_starts(pool), starts);

    // A buffer larger than the whole pool is never kept, nor evicts others.
    drop(HeapBuffer::zeroed_in(pool, 10 * MIB).expect("zeroed"));
    assert_eq!(pool.usage(), (2, 8 * MIB));
    assert_eq!(pooled_starts(pool), starts);
    empty(pool);
}

#[test]
fn the_global_pool_has_the_documented_bounds() {
    // Every 1 MiB storage of a window filling the byte bound comes back.
    assert_eq!(POOL.max_buffers, 256);
    assert_eq!(POOL.max_bytes, 512 * MIB);
}

#[test]
fn a_poisoned_pool_keeps_working() {
    let pool = private_pool(8, 64 * MIB);
    drop(HeapBuffer::zeroed_in(pool, 2 * MIB).expect("zeroed"));
    let panicked = thread::spawn(move || {
        let _held = pool.free.lock();
        panic!("poisoning the pool on purpose");
    })
    .join();
    assert!(panicked.is_err());
    assert!(pool.free.is_poisoned());

    let reused = HeapBuffer::zeroed_in(pool, 2 * MIB).expect("zeroed");
    assert!(is_zero(&reused));
    drop(reused);
    assert_eq!(pool.usage(), (1, 2 * MIB));
    empty(pool);
}

#[test]
fn sizes_past_the_limit_are_errors_not_aborts() {
    let pool = private_pool(8, 64 * MIB);
    let err = HeapBuffer::zeroed_in(pool, MAX_SEGMENT_BYTES + 1).unwrap_err();
    assert_eq!(
        err,
        AllocateError::TooLarge {
            nbytes: MAX_SEGMENT_BYTES + 1
        }
    );
    let err = HeapBuffer::zeroed_in(pool, MAX_SEGMENT_BYTES).unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
    // Half the address space: a mapping length `mmap` refuses.
    let err = HeapBuffer::zeroed_in(pool, 1 << 62).unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
    assert_eq!(pool.usage(), (0, 0));
}

#[test]
fn clone_equality_and_debug() {
    let buffer = HeapBuffer::copy_of(&pattern(3 * MIB, 9)).expect("copy_of");
    let clone = buffer.clone();
    assert_eq!(clone, buffer);
    assert_ne!(start(&clone), start(&buffer));
    assert_ne!(clone, HeapBuffer::default());
    let debug = format!("{buffer:?}");
    assert!(debug.contains("len: 3145728"), "{debug}");
    assert!(debug.len() < 100, "the bytes are not printed: {debug}");
}

#[test]
fn concurrent_allocations_never_share_a_mapping() {
    const THREADS: u8 = 4;
    const ROUNDS: usize = 25;
    const SIZES: [usize; 4] = [MIB, 2 * MIB + 1, 3 * MIB, MIB / 2];
    let pool = private_pool(4, 16 * MIB);
    let barrier = Arc::new(Barrier::new(usize::from(THREADS)));
    let threads: Vec<_> = (0..THREADS)
        .map(|seed| {
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                let sources: Vec<Vec<u8>> = SIZES.iter().map(|&len| pattern(len, seed)).collect();
                barrier.wait();
                for round in 0..ROUNDS {
                    let which = (round + usize::from(seed)) % SIZES.len();
                    let copy = HeapBuffer::copy_of_in(pool, &sources[which]).expect("copy_of");
                    let mut zeroed = HeapBuffer::zeroed_in(pool, SIZES[which]).expect("zeroed");
                    assert!(is_zero(&zeroed));
                    zeroed.fill(seed.wrapping_add(1));
                    thread::yield_now();
                    // Another owner of either mapping would have written its
                    // own seed by now.
                    assert_eq!(copy.as_slice(), sources[which].as_slice());
                    assert!(zeroed.iter().all(|&byte| byte == seed.wrapping_add(1)));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a thread failed");
    }
    let (count, bytes) = pool.usage();
    assert!(
        count <= 4 && bytes <= 16 * MIB,
        "{count} mappings, {bytes} bytes"
    );
    let starts: HashSet<usize> = pooled_starts(pool).into_iter().collect();
    assert_eq!(starts.len(), count, "each pooled mapping is there once");
    empty(pool);
}
