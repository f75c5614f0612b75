//! Human-readable figures for tables, sizes read from a command line, and
//! reports written to stdout.

pub use tensorshare_strategies::human_bytes as bytes;

/// A size on the command line: `4096`, `4KiB`, `1MiB`, `64MiB`, `1GiB`
/// (also `K`, `M`, `G`), as `tensorshare doctor` and the benchmarks take
/// them.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: usize = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 4KiB"))?;
    let scale = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" | "k" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        other => return Err(format!("unknown unit {other:?}: use B, KiB, MiB or GiB")),
    };
    number
        .checked_mul(scale)
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{text:?} is not a positive size that fits in memory"))
}

/// `seconds` in ns, µs, ms or s, three significant figures.
pub fn duration(seconds: f64) -> String {
    let (value, unit) = if seconds < 1e-6 {
        (seconds * 1e9, "ns")
    } else if seconds < 1e-3 {
        (seconds * 1e6, "µs")
    } else if seconds < 1.0 {
        (seconds * 1e3, "ms")
    } else {
        (seconds, "s")
    };
    let decimals = if value < 10.0 {
        2
    } else if value < 100.0 {
        1
    } else {
        0
    };
    format!("{value:.decimals$} {unit}")
}

/// Writes `text` to stdout; a closed pipe (`| head`) is not an error worth
/// reporting.
pub fn print_report(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    ignore_broken_pipe(
        stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush()),
    )
}

/// `written`, with a closed pipe (`| head`) taken as done.
pub fn ignore_broken_pipe(written: std::io::Result<()>) -> std::io::Result<()> {
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e),
        _ => Ok(()),
    }
}
