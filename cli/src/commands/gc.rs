//! `tensorshare gc [--dry-run] [--json] [--min-age SECONDS] [--only NAME]... [--shm-dir DIR]
//! [--socket-dir DIR]... [--memmap-dir DIR]...`: find the shared-memory
//! segments, the socket directories and the memmap files left by processes
//! that are gone, show them and remove them. The rules are
//! `tensorshare_strategies::services::orphans`'.

mod file_rows;
mod socket_dir_rows;
mod text;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde_json::{Value as Json, json};
use tensorshare::resource_sharer::SharerSocket;
use tensorshare_cli::error::CliError;
use tensorshare_cli::format;
use tensorshare_strategies::file_system::SegmentName;
use tensorshare_strategies::memmap::MemmapFileName;
use tensorshare_strategies::platform::private_dir::SocketDirName;
use tensorshare_strategies::services::orphans::{
    self, DEFAULT_MIN_AGE, DEFAULT_SHM_DIR, OrphanScan, ScanOptions, SocketDirScan,
    SocketDirScanOptions,
};

use file_rows::{Row, Words};
use socket_dir_rows::DirRow;
use text::plural;

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Show what would be removed; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Keep segments and files changed less than this many seconds ago; 0
    /// for none. The manager removes its clients' segments within 2 s of
    /// the last one leaving, and those a message still counts after its
    /// in-flight wait (5 minutes).
    #[arg(
        long,
        value_name = "SECONDS",
        value_parser = parse_seconds,
        default_value_t = DEFAULT_MIN_AGE.as_secs_f64()
    )]
    min_age: f64,
    /// Look at this segment only, as `ls /dev/shm` shows it (with or
    /// without the leading /), at this socket directory only, as `ls
    /// $TMPDIR` shows it (tensorshare-sharer-<pid>-XXXXXXXX,
    /// tensorshare-shm-XXXXXX), or at this memmap file only
    /// (tensorshare_<pid>_<random>_<counter>.mmap); repeat for more.
    /// Everything else is left alone, whatever state it is in.
    #[arg(long, value_name = "NAME", value_parser = parse_only_name)]
    only: Vec<OnlyName>,
    /// The directory that holds POSIX shared memory.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_SHM_DIR)]
    shm_dir: PathBuf,
    /// Look for tensorshare's socket directories directly in DIR; repeat
    /// for more. Default: $TMPDIR, /tmp and $TENSORSHARE_SHARER_DIR, those
    /// that exist.
    #[arg(long, value_name = "DIR")]
    socket_dir: Vec<PathBuf>,
    /// Look for memmap files directly in DIR (where senders created them:
    /// their `--memmap-dir`); repeat for more. Default: $TMPDIR and /tmp,
    /// those that exist. Files created to be kept (`--keep-files`) are
    /// never looked at.
    #[arg(long, value_name = "DIR")]
    memmap_dir: Vec<PathBuf>,
}

/// A name given to `--only`.
#[derive(Clone, Debug)]
enum OnlyName {
    Segment(SegmentName),
    SocketDir(SocketDirName),
    MemmapFile(MemmapFileName),
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|seconds| seconds.is_finite() && *seconds >= 0.0 && *seconds < 1e9)
        .ok_or_else(|| format!("{text:?} is not a number of seconds like 5 or 0.5"))
}

fn parse_only_name(text: &str) -> Result<OnlyName, String> {
    if text.starts_with("tensorshare-") {
        return SocketDirName::parse(text)
            .map(OnlyName::SocketDir)
            .map_err(|e| format!("not a socket directory name: {}", e.reason));
    }
    if text.starts_with("tensorshare_") {
        return MemmapFileName::parse(text)
            .map(OnlyName::MemmapFile)
            .map_err(|e| format!("not a memmap file name: {}", e.reason));
    }
    let with_slash = if text.starts_with('/') {
        text.to_owned()
    } else {
        format!("/{text}")
    };
    SegmentName::parse(with_slash.as_bytes())
        .map(OnlyName::Segment)
        .map_err(|e| {
            format!(
                "{}; name a segment (torch_<pid>_<random>_<counter>), a socket directory \
                 (tensorshare-sharer-<pid>-XXXXXXXX, tensorshare-shm-XXXXXX) or a memmap file \
                 (tensorshare_<pid>_<random>_<counter>.mmap)",
                e.reason
            )
        })
}

/// Where socket directories are looked for unless `--socket-dir` says:
/// where this process would make them (`$TMPDIR`, `/tmp`, which
/// [`socket_parent_dir`](tensorshare_strategies::platform::private_dir::socket_parent_dir)
/// falls back to) and the directory `TENSORSHARE_SHARER_DIR` moves resource
/// sharers to ([`SharerSocket::from_env`]; a value no sharer would accept
/// names no directory of theirs); those that exist, each directory once.
fn default_socket_parents() -> Vec<PathBuf> {
    let mut candidates = vec![std::env::temp_dir(), PathBuf::from("/tmp")];
    if let Ok(SharerSocket::PathIn(dir)) = SharerSocket::from_env() {
        candidates.push(dir);
    }
    existing_once(candidates)
}

/// Where memmap files are looked for unless `--memmap-dir` says: where a
/// sender makes them unless told otherwise (`$TMPDIR`, else `/tmp`) and
/// `/tmp`; those that exist, each directory once.
fn default_memmap_dirs() -> Vec<PathBuf> {
    existing_once(vec![std::env::temp_dir(), PathBuf::from("/tmp")])
}

/// The absolute directories of `candidates` that exist, each once.
fn existing_once(candidates: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = BTreeSet::new();
    candidates
        .into_iter()
        .filter(|dir| dir.is_absolute() && dir.is_dir())
        .filter(|dir| seen.insert(dir.canonicalize().unwrap_or_else(|_| dir.clone())))
        .collect()
}

const SEGMENTS: Words = Words {
    one: "segment",
    none_of_them: "torch_* segments",
};

const MEMMAP_FILES: Words = Words {
    one: "memmap file",
    none_of_them: "tensorshare_*.mmap files",
};

/// What one run found and did.
struct Report<'a> {
    segments: (&'a OrphanScan, Vec<Row<'a, SegmentName>>),
    memmap: Vec<(&'a OrphanScan<MemmapFileName>, Vec<Row<'a, MemmapFileName>>)>,
    socket_dirs: Option<(&'a SocketDirScan, Vec<DirRow<'a>>)>,
    dry_run: bool,
}

pub fn run(args: GcArgs) -> Result<(), CliError> {
    let min_age = Duration::from_secs_f64(args.min_age);
    let mut only_segments = Vec::new();
    let mut only_dirs = Vec::new();
    let mut only_files = Vec::new();
    for name in &args.only {
        match name {
            OnlyName::Segment(name) => only_segments.push(name.clone()),
            OnlyName::SocketDir(name) => only_dirs.push(name.clone()),
            OnlyName::MemmapFile(name) => only_files.push(name.clone()),
        }
    }
    let restricted = !args.only.is_empty();
    let mut options = ScanOptions::new().shm_dir(&args.shm_dir).min_age(min_age);
    if restricted {
        options = options.only(only_segments);
    }
    let scan = orphans::scan(&options)?;
    // With --only, socket directories and memmap files are looked at only
    // when it names some.
    let dir_scan = if !restricted || !only_dirs.is_empty() {
        let parents = if args.socket_dir.is_empty() {
            default_socket_parents()
        } else {
            args.socket_dir.clone()
        };
        let mut dir_options = parents
            .into_iter()
            .fold(SocketDirScanOptions::new(), SocketDirScanOptions::parent)
            .min_age(min_age);
        if !only_dirs.is_empty() {
            dir_options = dir_options.only(only_dirs);
        }
        Some(orphans::scan_socket_dirs(&dir_options)?)
    } else {
        None
    };
    let memmap_dirs = match (
        restricted && only_files.is_empty(),
        args.memmap_dir.is_empty(),
    ) {
        (true, _) => Vec::new(),
        (false, true) => default_memmap_dirs(),
        (false, false) => args.memmap_dir.clone(),
    };
    let mut memmap_scans = Vec::with_capacity(memmap_dirs.len());
    for dir in memmap_dirs {
        let mut options = ScanOptions::memmap_dir(dir).min_age(min_age);
        if restricted {
            options = options.only(only_files.iter().cloned());
        }
        memmap_scans.push(orphans::scan(&options)?);
    }
    let mut memmap = Vec::with_capacity(memmap_scans.len());
    for memmap_scan in &memmap_scans {
        memmap.push((memmap_scan, file_rows::rows(memmap_scan, args.dry_run)?));
    }
    let report = Report {
        segments: (&scan, file_rows::rows(&scan, args.dry_run)?),
        memmap,
        socket_dirs: dir_scan
            .as_ref()
            .map(|dir_scan| (dir_scan, socket_dir_rows::dir_rows(dir_scan, args.dry_run))),
        dry_run: args.dry_run,
    };
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&to_json(&report))?;
        text.push('\n');
        text
    } else {
        to_text(&report)
    };
    format::print_report(&text)?;
    failures_error(&report)
}

/// `Err` saying what could not be removed, if anything.
fn failures_error(report: &Report<'_>) -> Result<(), CliError> {
    let segments = file_rows::failures(&report.segments.1);
    let files: usize = report
        .memmap
        .iter()
        .map(|(_, rows)| file_rows::failures(rows))
        .sum();
    let dirs = report
        .socket_dirs
        .as_ref()
        .map_or(0, |(_, rows)| socket_dir_rows::dir_failures(rows));
    let mut parts = Vec::new();
    if segments > 0 {
        parts.push(format!("{segments} segment{}", plural(segments)));
    }
    if files > 0 {
        parts.push(format!("{files} memmap file{}", plural(files)));
    }
    if dirs > 0 {
        parts.push(socket_dir_rows::dir_count(dirs));
    }
    if parts.is_empty() {
        return Ok(());
    }
    Err(format!("could not remove {}: see why above", parts.join(" and ")).into())
}

fn to_text(report: &Report<'_>) -> String {
    let mut text = String::new();
    let (scan, rows) = &report.segments;
    file_rows::files_text(&mut text, scan, rows, &SEGMENTS);
    for (memmap_scan, rows) in &report.memmap {
        file_rows::files_text(&mut text, memmap_scan, rows, &MEMMAP_FILES);
    }
    if let Some((dir_scan, dir_rows)) = &report.socket_dirs {
        socket_dir_rows::dirs_text(&mut text, dir_scan, dir_rows);
    }
    let done = if report.dry_run {
        "would be removed (dry run)"
    } else {
        "removed"
    };
    let _ = writeln!(text, "{}", file_rows::total_text(rows, &SEGMENTS, done));
    if !report.memmap.is_empty() {
        let rows = report.memmap.iter().flat_map(|(_, rows)| rows);
        let _ = writeln!(text, "{}", file_rows::total_text(rows, &MEMMAP_FILES, done));
    }
    if let Some((_, dir_rows)) = &report.socket_dirs {
        let count = socket_dir_rows::dir_totals(dir_rows);
        let _ = writeln!(text, "{} {done}", socket_dir_rows::dir_count(count));
    }
    text
}

fn to_json(report: &Report<'_>) -> Json {
    let (scan, rows) = &report.segments;
    let (count, bytes) = file_rows::totals(rows);
    let min_age = scan.options().min_age_value();
    let (socket_dirs, socket_parents, skipped_dirs, missing_dirs, dir_count) =
        match &report.socket_dirs {
            Some((dir_scan, dir_rows)) => (
                dir_rows
                    .iter()
                    .map(|row| socket_dir_rows::dir_to_json(row, min_age))
                    .collect(),
                dir_scan
                    .options()
                    .parent_paths()
                    .iter()
                    .map(|path| path_text(path))
                    .collect(),
                dir_scan
                    .skipped()
                    .iter()
                    .map(|skipped| {
                        json!({
                            "path": path_text(&skipped.parent.join(skipped.name.as_str())),
                            "reason": skipped.reason.to_string(),
                        })
                    })
                    .collect(),
                dir_scan
                    .missing()
                    .iter()
                    .map(|name| name.as_str().to_owned())
                    .collect(),
                socket_dir_rows::dir_totals(dir_rows),
            ),
            None => (Vec::new(), Vec::new(), Vec::new(), Vec::<String>::new(), 0),
        };
    let mut memmap_files = Vec::new();
    let mut skipped_files = Vec::new();
    let mut missing_files = Vec::new();
    let (mut file_count, mut file_bytes) = (0, 0);
    for (memmap_scan, rows) in &report.memmap {
        let dir = path_text(memmap_scan.options().dir_path());
        for mut entry in file_rows::files_json(memmap_scan, rows) {
            entry["dir"] = json!(dir);
            memmap_files.push(entry);
        }
        for mut entry in file_rows::skipped_json(memmap_scan) {
            entry["dir"] = json!(dir);
            skipped_files.push(entry);
        }
        for name in memmap_scan.missing() {
            missing_files.push(json!({ "dir": dir, "name": name.to_string() }));
        }
        let (count, bytes) = file_rows::totals(rows);
        file_count += count;
        file_bytes += bytes;
    }
    json!({
        "shm_dir": scan.options().shm_dir_path().display().to_string(),
        "dry_run": report.dry_run,
        "min_age_seconds": min_age.as_secs_f64(),
        "segments": file_rows::files_json(scan, rows),
        "skipped": file_rows::skipped_json(scan),
        "not_found": scan.missing().iter().map(SegmentName::as_str).collect::<Vec<_>>(),
        "unreadable_pids": scan.unreadable_processes(),
        "proc_hides_processes": scan.proc_hides_processes(),
        "socket_parents": socket_parents,
        "socket_dirs": socket_dirs,
        "skipped_socket_dirs": skipped_dirs,
        "socket_dirs_not_found": missing_dirs,
        "memmap_dirs": report
            .memmap
            .iter()
            .map(|(memmap_scan, _)| path_text(memmap_scan.options().dir_path()))
            .collect::<Vec<_>>(),
        "memmap_files": memmap_files,
        "skipped_memmap_files": skipped_files,
        "memmap_files_not_found": missing_files,
        "totals": {
            "segments": count,
            "bytes": bytes,
            "socket_dirs": dir_count,
            "memmap_files": file_count,
            "memmap_bytes": file_bytes,
            "action": if report.dry_run { "would_remove" } else { "removed" },
        },
    })
}

fn path_text(path: &Path) -> String {
    path.display().to_string()
}
