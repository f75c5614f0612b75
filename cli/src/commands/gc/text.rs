//! The words and columns of `gc`'s report, which its rows of files and
//! of socket directories share.

use std::fmt::Write as _;
use std::path::PathBuf;

/// Writes `header` and `cells` as columns, the last one unpadded.
pub fn write_table(text: &mut String, header: [&str; 4], cells: Vec<[String; 4]>) {
    let width = |column: usize| {
        cells
            .iter()
            .map(|row| row[column].chars().count())
            .chain([header[column].len()])
            .max()
            .unwrap_or(0)
    };
    let widths = [width(0), width(1), width(2)];
    for row in std::iter::once(header.map(str::to_owned)).chain(cells) {
        let _ = writeln!(
            text,
            "{:<w0$}  {:<w1$}  {:<w2$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
        );
    }
}

/// `s` unless `n` is 1.
pub fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The directories, comma-separated.
pub fn parents_text(parents: &[PathBuf]) -> String {
    parents
        .iter()
        .map(|dir| dir.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `1, 2, 3` for up to five pids, then `and N more`.
pub fn pid_list(pids: &[u32]) -> String {
    const SHOWN: usize = 5;
    let mut text = pids
        .iter()
        .take(SHOWN)
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if pids.len() > SHOWN {
        let _ = write!(text, " and {} more", pids.len() - SHOWN);
    }
    text
}
