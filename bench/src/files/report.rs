//! What `--workload files` prints: the header naming the machine, the
//! rounds and the checkpoints, a row per checkpoint and operation, and a
//! line per target with its verdict, judged on the large zip checkpoint. The targets are tensorshare's peak RSS (64 MiB to
//! inspect, 256 MiB to convert to either format) and its speed against
//! torch's (2x to .safetensors, 1.5x to .pt).

use tensorshare_cli::format::{bytes, duration};

use super::checkpoint::{Case, Operation, Options, Row};

const MIB: u64 = 1 << 20;

/// A target the checkpoint tools hold themselves to, judged on the large zip checkpoint.
enum Target {
    /// tensorshare's peak RSS at most this many bytes.
    PeakRss(Operation, u64),
    /// tensorshare at least this many times as fast as torch.
    Faster(Operation, f64),
}

/// The case the targets are judged on.
const TARGET_CASE: &str = "zip";

const TARGETS: [Target; 5] = [
    Target::PeakRss(Operation::Inspect, 64 * MIB),
    Target::PeakRss(Operation::ToSafetensors, 256 * MIB),
    Target::PeakRss(Operation::ToPt, 256 * MIB),
    Target::Faster(Operation::ToSafetensors, 2.0),
    Target::Faster(Operation::ToPt, 1.5),
];

/// What the table is: the machine, the rounds, what is measured, and
/// each checkpoint's size; then the column titles.
pub fn print_header(options: &Options, cases: &[Case], rss_floor: u64) {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let rounds = match options.rounds {
        1 => "1 round".to_owned(),
        n => format!("median of {n} rounds"),
    };
    println!(
        "tensorshare bench --workload files: checkpoints inspected and converted by tensorshare \
         and by torch; {cores} cores; {rounds}"
    );
    println!(
        "each operation is a process of its own: its time is the whole process, start-up (and \
         torch's import) included; its peak RSS is the process's max RSS, which is never below \
         {} (what `true` shows: the launcher's pages until the exec)",
        bytes(rss_floor)
    );
    println!("checkpoints, by the bytes of their tensors:");
    for case in cases {
        println!(
            "  {:<7} {:>10}  {}",
            case.name,
            bytes(case.tensor_bytes()),
            case.description
        );
    }
    println!();
    println!(
        "{:25}{:^22}  {:^22}  {:^18}",
        "", "tensorshare", "torch", "torch / tensorshare"
    );
    println!(
        "{:<7} {:<16} {:>10} {:>11}  {:>10} {:>11}  {:>8} {:>9}",
        "case", "operation", "time", "peak RSS", "time", "peak RSS", "time", "peak RSS"
    );
}

pub fn print_row(row: &Row, case: &Case) {
    let mut operation = row.operation.label().to_owned();
    if row.operation == Operation::Inspect && !case.torch_can_mmap() {
        operation.push('*');
    }
    println!(
        "{:<7} {:<16} {:>10} {:>11}  {:>10} {:>11}  {:>7.2}x {:>8.2}x",
        row.case,
        operation,
        duration(row.ours.seconds),
        bytes(row.ours.peak_rss_bytes),
        duration(row.torch.seconds),
        bytes(row.torch.peak_rss_bytes),
        row.torch.seconds / row.ours.seconds,
        row.torch.peak_rss_bytes as f64 / row.ours.peak_rss_bytes.max(1) as f64,
    );
}

/// The size of each checkpoint's file, known once torch has written it.
pub fn print_file_sizes(sizes: &[(&str, u64)]) {
    let sizes: Vec<String> = sizes
        .iter()
        .map(|(name, size)| format!("{name} {}", bytes(*size)))
        .collect();
    println!("checkpoint files: {}", sizes.join(", "));
}

/// The footnote under the rows, then a line per target.
pub fn print_targets(rows: &[Row], file_size: usize) {
    println!(
        "* torch cannot mmap a legacy file: its inspect of one is a plain torch.load, which \
         reads every byte\n"
    );
    for target in &TARGETS {
        println!("{}", target_line(target, rows, file_size));
    }
}

/// `target: zip (2.0 GiB) to .pt: 1.20 s vs torch 2.50 s = 2.08x (target >= 1.5x: met)`.
fn target_line(target: &Target, rows: &[Row], file_size: usize) -> String {
    let operation = match target {
        Target::PeakRss(operation, _) | Target::Faster(operation, _) => *operation,
    };
    let Some(row) = rows
        .iter()
        .find(|row| row.case == TARGET_CASE && row.operation == operation)
    else {
        return format!("target: needs the {TARGET_CASE} {} row", operation.label());
    };
    let head = format!(
        "target: {TARGET_CASE} ({}) {}",
        bytes(file_size as u64),
        operation.label()
    );
    match *target {
        Target::PeakRss(_, most) => {
            let peak = row.ours.peak_rss_bytes;
            format!(
                "{head}: peak RSS {}{}",
                bytes(peak),
                verdict(format!("<= {}", bytes(most)), peak <= most)
            )
        }
        Target::Faster(_, wanted) => {
            let ratio = row.torch.seconds / row.ours.seconds;
            format!(
                "{head}: {} vs torch {} = {ratio:.2}x{}",
                duration(row.ours.seconds),
                duration(row.torch.seconds),
                verdict(format!(">= {wanted}x"), ratio >= wanted)
            )
        }
    }
}

fn verdict(target: String, met: bool) -> String {
    let met = if met { "met" } else { "NOT met" };
    format!(" (target {target}: {met})")
}
