//! CPU cost of one `file_descriptor` tensor message, without the syscalls
//! that move it: pickling (reduce and encode), decoding, and rebuilding.
//!
//! `cargo bench --bench message_cpu`. The end-to-end comparison with torch
//! is `tensorshare-bench`; this isolates the pickle work inside it. Each
//! line gives the median time per message and the heap allocations per
//! message, which unlike the time do not vary from run to run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tensorshare::model::{Storage, TensorView};
use tensorshare::{Authkey, DType, Registry, SharingContext, StrategyKind, Tensor, Value};
use tensorshare_compat::pickle::{EncodeOptions, Limits, decode_all, encode};

/// The system allocator, counting allocations.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const ROUNDS: usize = 7;
const ITERATIONS: usize = 20_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Registrations are dropped at once: nothing fetches them here.
    let sharing = SharingContext::new(Authkey::new(b"bench".to_vec()))
        .with_unfetched_lifetime(Duration::ZERO);
    let mut writer = Storage::allocate(StrategyKind::FileDescriptor, 4096)?;
    writer.as_bytes_mut().fill(7);
    let tensor = Value::Tensor(Tensor::new(
        writer.freeze(),
        TensorView::contiguous(DType::UInt8, &[4096]),
    )?);
    let message = sharing.dumps(&tensor)?;
    let registry = Registry::default();
    let limits = Limits::default();

    println!(
        "one 4 KiB file_descriptor tensor message ({} bytes), median of {ROUNDS} rounds of {ITERATIONS}",
        message.len()
    );
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let report = |name: &str, op: &mut dyn FnMut() -> bool| report(&filters, name, op);
    report("dumps (reduce, register, encode)", &mut || {
        sharing.dumps(black_box(&tensor)).map(black_box).is_ok()
    });
    let decoded = decode_all(&message, &registry, &limits)?.pickle;
    let options = EncodeOptions::new();
    report("encode (the decoded message)", &mut || {
        encode(black_box(&decoded), &options).map(black_box).is_ok()
    });
    report("decode", &mut || {
        decode_all(black_box(&message), &registry, &limits)
            .map(black_box)
            .is_ok()
    });
    report("loads without attaching (decode, rebuild)", &mut || {
        registry.loads(black_box(&message)).map(black_box).is_ok()
    });
    Ok(())
}

/// Runs `op`, which says whether it succeeded, unless `filters` name other
/// cases; a case that fails is not timed.
fn report(filters: &[String], name: &str, op: &mut dyn FnMut() -> bool) {
    if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
        return;
    }
    let allocations_before = ALLOCATIONS.load(Ordering::Relaxed);
    assert!(op(), "{name} failed");
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - allocations_before;
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..ITERATIONS {
                black_box(op());
            }
            start.elapsed().as_secs_f64() / ITERATIONS as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    println!(
        "{name:<44} {:>8.2} µs {allocations:>5} allocations",
        rounds[ROUNDS / 2] * 1e6
    );
}
