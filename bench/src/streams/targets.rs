//! The lines under each size of the streams table: each of our paths
//! against what it is measured by, with the verdict at the sizes where a
//! target is set.
//!
//! A line whose paths did not run says which ones it needs, so that a
//! `--paths` run that leaves one out shows why its line is missing.

use tensorshare_cli::format::duration;

use super::route::{Route, Row, fastest, row_of};

/// What one of our paths is measured against.
enum Measure {
    /// At least this many times as fast as the fastest of these torch
    /// paths.
    Faster(&'static [Route]),
    /// At most this many times the cost of another path of ours.
    Within(Route),
    /// At most this many seconds a tensor.
    AtMost,
    /// At most this many times one in-process copy of the size.
    MemcpyTimes,
}

/// One line: our path, its measure, and the target's bound at the sizes
/// where one is set (a ratio, or seconds for [`Measure::AtMost`]).
struct Target {
    name: &'static str,
    ours: Route,
    measure: Measure,
    bounds: &'static [(usize, f64)],
}

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// Torch's sharing strategies, the paths a sharing path is held to.
const TORCH_SHARING: &[Route] = &[Route::TorchFd, Route::TorchFs];

const TARGETS: &[Target] = &[
    // 10x torch's best sharing strategy at 4 KiB, and at least its
    // throughput at 64 MiB.
    Target {
        name: "file_descriptor",
        ours: Route::RustToRust,
        measure: Measure::Faster(TORCH_SHARING),
        bounds: &[(4 * KIB, 10.0), (64 * MIB, 1.0)],
    },
    // A torch consumer fed over file_system pays what a torch producer
    // would make it pay; the Rust producer reuses its segments.
    Target {
        name: "file_system",
        ours: Route::RustToTorchFs,
        measure: Measure::Faster(TORCH_SHARING),
        bounds: &[(MIB, 2.0), (64 * MIB, 2.0)],
    },
    // Between tensorshare peers, the manager's registrations cost no
    // round trip: file_system close to file_descriptor.
    Target {
        name: "file_system",
        ours: Route::RustToRustFs,
        measure: Measure::Within(Route::RustToRust),
        bounds: &[(4 * KIB, 2.0)],
    },
    Target {
        name: "memmap",
        ours: Route::RustToRustMemmap,
        measure: Measure::AtMost,
        bounds: &[(4 * KIB, 50e-6)],
    },
    // 5x torch's plain pickle path at 64 MiB.
    Target {
        name: "bytes",
        ours: Route::RustToRustBytes,
        measure: Measure::Faster(&[Route::TorchPickle]),
        bounds: &[(64 * MIB, 5.0)],
    },
    // A socket needs two kernel copies, and the storage none more.
    Target {
        name: "bytes",
        ours: Route::RustToRustBytes,
        measure: Measure::MemcpyTimes,
        bounds: &[(64 * MIB, 3.0)],
    },
];

/// The lines under a size's rows, `memcpy` being the seconds of one plain
/// copy of `size` bytes, e.g.
/// `file_system: Rust -> torch 325 µs vs torch file_system 6.63 ms = 20.40x (target >= 2x: met)`.
pub fn lines(rows: &[Row], size: usize, memcpy: f64) -> Vec<String> {
    let mut lines: Vec<String> = TARGETS
        .iter()
        .map(|target| line(rows, size, memcpy, target))
        .collect();
    if let Some(floor) = fd_floor(rows) {
        lines.insert(1, floor);
    }
    lines.extend(bytes_floor(rows, memcpy));
    lines.push(format!(
        "memcpy: {:.2} GB/s (one thread)",
        size as f64 / memcpy / 1e9
    ));
    lines
}

fn line(rows: &[Row], size: usize, memcpy: f64, target: &Target) -> String {
    let Some(ours) = row_of(rows, target.ours) else {
        return format!("{}: needs {}", target.name, target.ours.name());
    };
    let bound = target
        .bounds
        .iter()
        .find(|(at, _)| *at == size)
        .map(|(_, bound)| *bound);
    let head = format!(
        "{}: {} {}",
        target.name,
        ours.path.ends(),
        duration(ours.per_tensor)
    );
    let (comparison, verdict) = match target.measure {
        Measure::Faster(theirs) => {
            let Some(best) = fastest(rows, theirs) else {
                let names: Vec<String> = theirs.iter().map(|path| path.name()).collect();
                return format!("{head}: needs {} too", names.join(" or "));
            };
            let ratio = best.per_tensor / ours.per_tensor;
            (
                format!(
                    " vs {} {} = {ratio:.2}x",
                    best.path.short_label(),
                    duration(best.per_tensor)
                ),
                bound.map(|wanted| verdict(format!(">= {wanted}x"), ratio >= wanted)),
            )
        }
        Measure::Within(reference) => {
            let Some(reference) = row_of(rows, reference) else {
                return format!("{head}: needs {} too", reference.name());
            };
            let ratio = ours.per_tensor / reference.per_tensor;
            (
                format!(
                    " = {ratio:.2}x {} {}",
                    reference.path.short_label(),
                    duration(reference.per_tensor)
                ),
                bound.map(|wanted| verdict(format!("<= {wanted}x"), ratio <= wanted)),
            )
        }
        Measure::AtMost => (
            String::new(),
            bound.map(|most| verdict(format!("<= {}", duration(most)), ours.per_tensor <= most)),
        ),
        Measure::MemcpyTimes => {
            let times = ours.per_tensor / memcpy;
            (
                format!(" = {times:.2} memcpy-times"),
                bound.map(|most| verdict(format!("<= {most}"), times <= most)),
            )
        }
    };
    format!("{head}{comparison}{}", verdict.unwrap_or_default())
}

fn verdict(target: String, met: bool) -> String {
    let met = if met { "met" } else { "NOT met" };
    format!(" (target {target}: {met})")
}

/// The line on the `file_descriptor` floor, when its path ran: what the
/// strategy's kernel work alone costs, against torch's best and against
/// the whole path, e.g.
/// `floor: fds, no pickle 14.2 µs = 11.55x torch file_system; rust-to-rust costs 1.85x that`.
fn fd_floor(rows: &[Row]) -> Option<String> {
    floor_line(
        rows,
        "fds",
        Route::RustToRustRawFds,
        Route::RustToRust,
        |floor| {
            fastest(rows, TORCH_SHARING).map_or_else(String::new, |best| {
                format!(
                    " = {:.2}x {}",
                    best.per_tensor / floor,
                    best.path.short_label()
                )
            })
        },
    )
}

/// The line on the `bytes` floor, when its path ran: what the socket's two
/// copies cost with the producer's writes and nothing else, in
/// memcpy-times, and what the whole path costs over it, e.g.
/// `floor: bytes, no pickle 14.9 ms = 2.95 memcpy-times; rust-to-rust-bytes costs 1.06x that`.
fn bytes_floor(rows: &[Row], memcpy: f64) -> Option<String> {
    floor_line(
        rows,
        "bytes",
        Route::RustToRustRawBytes,
        Route::RustToRustBytes,
        |floor| format!(" = {:.2} memcpy-times", floor / memcpy),
    )
}

/// The line on the floor `raw` measures under `over`, when `raw` ran:
/// its cost, what `against` says of it, and `over`'s cost as a multiple.
fn floor_line(
    rows: &[Row],
    what: &str,
    raw: Route,
    over: Route,
    against: impl FnOnce(f64) -> String,
) -> Option<String> {
    let floor = row_of(rows, raw)?.per_tensor;
    let mut line = format!(
        "floor: {what}, no pickle {}{}",
        duration(floor),
        against(floor)
    );
    if let Some(ours) = row_of(rows, over) {
        line += &format!(
            "; {} costs {:.2}x that",
            ours.path.name(),
            ours.per_tensor / floor
        );
    }
    Some(line)
}
