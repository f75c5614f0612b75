//! Human-readable figures for tables.

pub use tensorshare_strategies::human_bytes as bytes;

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
