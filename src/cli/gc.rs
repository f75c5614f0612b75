//! `tensorshare gc [--dry-run] [--json] [--min-age SECONDS] [--only NAME]... [--shm-dir DIR]
//! [--socket-dir DIR]...`: find the shared-memory segments and the socket
//! directories left by processes that are gone, show them and remove them.
//! The rules are `tensorshare_strategies::orphans`'.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde_json::{Value as Json, json};
use tensorshare::resource_sharer::SHARER_DIR_ENV;
use tensorshare_strategies::UnixUser;
use tensorshare_strategies::file_system::SegmentName;
use tensorshare_strategies::orphans::{
    self, DEFAULT_MIN_AGE, DEFAULT_SHM_DIR, KeepReason, OrphanScan, RemovalOutcome, RemoveError,
    ScanOptions, SegmentReport, SocketDirKeepReason, SocketDirOutcome, SocketDirRemoveError,
    SocketDirReport, SocketDirScan, SocketDirScanOptions,
};
use tensorshare_strategies::private_dir::{SocketDirKind, SocketDirName};

use super::format;

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Show what would be removed; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Keep segments changed less than this many seconds ago; 0 for none.
    /// The manager removes its clients' segments within 2 s of the last
    /// one leaving.
    #[arg(
        long,
        value_name = "SECONDS",
        value_parser = parse_seconds,
        default_value_t = DEFAULT_MIN_AGE.as_secs_f64()
    )]
    min_age: f64,
    /// Look at this segment only, as `ls /dev/shm` shows it (with or
    /// without the leading /), or at this socket directory only, as `ls
    /// $TMPDIR` shows it (tensorshare-sharer-<pid>-XXXXXXXX,
    /// tensorshare-shm-XXXXXX); repeat for more. Everything else is left
    /// alone, whatever state it is in.
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
}

/// A name given to `--only`.
#[derive(Clone, Debug)]
enum OnlyName {
    Segment(SegmentName),
    SocketDir(SocketDirName),
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
    let with_slash = if text.starts_with('/') {
        text.to_owned()
    } else {
        format!("/{text}")
    };
    SegmentName::parse(with_slash.as_bytes())
        .map(OnlyName::Segment)
        .map_err(|e| {
            format!(
                "{}; name a segment (torch_<pid>_<random>_<counter>) or a socket directory \
                 (tensorshare-sharer-<pid>-XXXXXXXX, tensorshare-shm-XXXXXX)",
                e.reason
            )
        })
}

/// Where socket directories are looked for unless `--socket-dir` says:
/// where this process would make them (`$TMPDIR`, `/tmp`, which
/// [`socket_parent_dir`](tensorshare_strategies::private_dir::socket_parent_dir)
/// falls back to) and `$TENSORSHARE_SHARER_DIR`; those that exist, each
/// directory once.
fn default_socket_parents() -> Vec<PathBuf> {
    let mut candidates = vec![std::env::temp_dir(), PathBuf::from("/tmp")];
    if let Some(dir) = std::env::var_os(SHARER_DIR_ENV).filter(|dir| !dir.is_empty()) {
        candidates.push(PathBuf::from(dir));
    }
    let mut seen = BTreeSet::new();
    candidates
        .into_iter()
        .filter(|dir| dir.is_absolute() && dir.is_dir())
        .filter(|dir| seen.insert(dir.canonicalize().unwrap_or_else(|_| dir.clone())))
        .collect()
}

/// What became of one segment.
enum Action {
    Removed,
    WouldRemove,
    Kept(KeepReason),
    /// Gone before it could be removed: the manager or another gc was
    /// quicker.
    Vanished,
    Failed(RemoveError),
}

/// One segment and what became of it.
struct Row<'a> {
    segment: &'a SegmentReport,
    action: Action,
}

/// What became of one socket directory.
enum DirAction {
    Removed,
    WouldRemove,
    Kept(SocketDirKeepReason),
    Vanished,
    Failed(SocketDirRemoveError),
}

/// One socket directory and what became of it.
struct DirRow<'a> {
    dir: &'a SocketDirReport,
    action: DirAction,
}

pub fn run(args: GcArgs) -> Result<(), Box<dyn std::error::Error>> {
    let min_age = Duration::from_secs_f64(args.min_age);
    let mut options = ScanOptions::new().shm_dir(&args.shm_dir).min_age(min_age);
    let mut only_dirs = Vec::new();
    if !args.only.is_empty() {
        let mut only_segments = Vec::new();
        for name in &args.only {
            match name {
                OnlyName::Segment(name) => only_segments.push(name.clone()),
                OnlyName::SocketDir(name) => only_dirs.push(name.clone()),
            }
        }
        options = options.only(only_segments);
    }
    let scan = orphans::scan(&options)?;
    // With --only, socket directories are looked at only when it names some.
    let dir_scan = if args.only.is_empty() || !only_dirs.is_empty() {
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
    let mut outcomes: HashMap<SegmentName, RemovalOutcome> = if args.dry_run {
        HashMap::new()
    } else {
        scan.remove_orphans()?
            .into_iter()
            .map(|removal| (removal.name, removal.outcome))
            .collect()
    };
    let rows: Vec<Row<'_>> = scan
        .segments()
        .iter()
        .map(|segment| {
            let action = match (&segment.keep, outcomes.remove(&segment.name)) {
                (Some(reason), _) => Action::Kept(*reason),
                (None, _) if args.dry_run => Action::WouldRemove,
                (None, Some(RemovalOutcome::Removed)) => Action::Removed,
                (None, Some(RemovalOutcome::Kept(reason))) => Action::Kept(reason),
                (None, Some(RemovalOutcome::Failed(error))) => Action::Failed(error),
                // Vanished, or an outcome this version does not know of.
                (None, _) => Action::Vanished,
            };
            Row { segment, action }
        })
        .collect();
    let dir_rows = dir_scan
        .as_ref()
        .map(|dir_scan| dir_rows(dir_scan, args.dry_run))
        .unwrap_or_default();
    let dirs = dir_scan.as_ref().map(|dir_scan| (dir_scan, &dir_rows[..]));
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&to_json(&scan, &rows, dirs, args.dry_run))?;
        text.push('\n');
        text
    } else {
        to_text(&scan, &rows, dirs, args.dry_run)
    };
    super::format::print_report(&text)?;
    let failed = rows
        .iter()
        .filter(|row| matches!(row.action, Action::Failed(_)))
        .count();
    let failed_dirs = dir_rows
        .iter()
        .filter(|row| matches!(row.action, DirAction::Failed(_)))
        .count();
    match (failed, failed_dirs) {
        (0, 0) => Ok(()),
        (failed, 0) => Err(format!(
            "could not remove {failed} segment{}: see why above",
            plural(failed)
        )
        .into()),
        (0, dirs) => Err(format!(
            "could not remove {dirs} socket director{}: see why above",
            if dirs == 1 { "y" } else { "ies" }
        )
        .into()),
        (failed, dirs) => Err(format!(
            "could not remove {failed} segment{} and {dirs} socket director{}: see why above",
            plural(failed),
            if dirs == 1 { "y" } else { "ies" }
        )
        .into()),
    }
}

/// Removes the orphans of `dir_scan` (unless `dry_run`) and says what
/// became of every directory it found.
fn dir_rows(dir_scan: &SocketDirScan, dry_run: bool) -> Vec<DirRow<'_>> {
    let mut outcomes: HashMap<(PathBuf, SocketDirName), SocketDirOutcome> = if dry_run {
        HashMap::new()
    } else {
        dir_scan
            .remove_orphans()
            .into_iter()
            .map(|removal| ((removal.parent, removal.name), removal.outcome))
            .collect()
    };
    dir_scan
        .dirs()
        .iter()
        .map(|dir| {
            let outcome = outcomes.remove(&(dir.parent.clone(), dir.name.clone()));
            let action = match (&dir.keep, outcome) {
                (Some(reason), _) => DirAction::Kept(*reason),
                (None, _) if dry_run => DirAction::WouldRemove,
                (None, Some(SocketDirOutcome::Removed)) => DirAction::Removed,
                (None, Some(SocketDirOutcome::Kept(reason))) => DirAction::Kept(reason),
                (None, Some(SocketDirOutcome::Failed(error))) => DirAction::Failed(error),
                (None, _) => DirAction::Vanished,
            };
            DirRow { dir, action }
        })
        .collect()
}

fn dir_count(n: usize) -> String {
    format!("{n} socket director{}", if n == 1 { "y" } else { "ies" })
}

/// Whether a directory is kept because its process lives.
fn of_live_process(row: &DirRow<'_>) -> bool {
    matches!(
        row.action,
        DirAction::Kept(SocketDirKeepReason::CreatorAlive | SocketDirKeepReason::Listening)
    )
}

fn kind_text(kind: SocketDirKind) -> &'static str {
    match kind {
        SocketDirKind::ResourceSharer => "resource sharer",
        SocketDirKind::ShmManager => "shm manager",
        _ => "other",
    }
}

fn dir_action_text(row: &DirRow<'_>, min_age: Duration) -> String {
    match &row.action {
        DirAction::Removed => "removed".to_owned(),
        DirAction::WouldRemove => "would remove".to_owned(),
        DirAction::Vanished => "gone: removed meanwhile by another process".to_owned(),
        DirAction::Failed(error) => format!("failed: {error}"),
        DirAction::Kept(SocketDirKeepReason::Recent { age }) => format!(
            "kept: changed {:.1} s ago, under --min-age {}",
            age.as_secs_f64(),
            min_age.as_secs_f64()
        ),
        DirAction::Kept(SocketDirKeepReason::UnexpectedEntry) => format!(
            "kept: it holds {}, which is not one of its sockets",
            row.dir.unexpected.as_deref().unwrap_or("something")
        ),
        DirAction::Kept(reason) => format!("kept: {reason}"),
    }
}

fn parents_text(parents: &[PathBuf]) -> String {
    parents
        .iter()
        .map(|dir| dir.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The socket directories' part of the table.
fn dirs_text(text: &mut String, dir_scan: &SocketDirScan, rows: &[DirRow<'_>]) {
    let min_age = dir_scan.options().min_age_value();
    let (listed, alive): (Vec<&DirRow<'_>>, Vec<&DirRow<'_>>) =
        rows.iter().partition(|row| !of_live_process(row));
    if !listed.is_empty() {
        let cells: Vec<[String; 4]> = listed
            .iter()
            .map(|row| {
                let creator = match (row.dir.name.creator_pid(), row.dir.creator_alive) {
                    (Some(pid), Some(true)) => format!("{pid} (alive)"),
                    (Some(pid), _) => format!("{pid} (gone)"),
                    (None, _) => "-".to_owned(),
                };
                [
                    row.dir.path().display().to_string(),
                    kind_text(row.dir.name.kind()).to_owned(),
                    creator,
                    dir_action_text(row, min_age),
                ]
            })
            .collect();
        write_table(
            text,
            ["socket directory", "made by", "creator pid", "action"],
            cells,
        );
    } else if alive.is_empty() {
        let _ = writeln!(
            text,
            "no tensorshare socket directories in {}",
            parents_text(dir_scan.options().parent_paths())
        );
    }
    if !alive.is_empty() {
        let pids: Vec<u32> = alive
            .iter()
            .filter_map(|row| row.dir.name.creator_pid())
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .collect();
        let _ = write!(text, "kept {} of live processes", dir_count(alive.len()));
        if !pids.is_empty() {
            let _ = write!(text, ": pid{} {}", plural(pids.len()), pid_list(&pids));
        }
        text.push('\n');
    }
    for skipped in dir_scan.skipped() {
        let _ = writeln!(
            text,
            "skipped {}: {}",
            skipped.parent.join(skipped.name.as_str()).display(),
            skipped.reason
        );
    }
    for missing in dir_scan.missing() {
        let _ = writeln!(
            text,
            "not found in {}: {missing}",
            parents_text(dir_scan.options().parent_paths())
        );
    }
}

/// Writes `header` and `cells` as columns, the last one unpadded.
fn write_table(text: &mut String, header: [&str; 4], cells: Vec<[String; 4]>) {
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

/// The socket directories removed, or that would be.
fn dir_totals(rows: &[DirRow<'_>]) -> usize {
    rows.iter()
        .filter(|row| matches!(row.action, DirAction::Removed | DirAction::WouldRemove))
        .count()
}

fn dir_to_json(row: &DirRow<'_>, min_age: Duration) -> Json {
    let dir = row.dir;
    let (action, reason) = match &row.action {
        DirAction::Removed => ("removed", None),
        DirAction::WouldRemove => ("would_remove", None),
        DirAction::Vanished => ("vanished", None),
        DirAction::Failed(_) => ("failed", None),
        DirAction::Kept(reason) => ("kept", Some(reason.code())),
    };
    let message = match &row.action {
        DirAction::Removed | DirAction::WouldRemove => None,
        _ => Some(dir_action_text(row, min_age)),
    };
    json!({
        "path": dir.path().display().to_string(),
        "parent": dir.parent.display().to_string(),
        "name": dir.name.as_str(),
        "kind": dir.name.kind().as_str(),
        "creator_pid": dir.name.creator_pid(),
        "creator_alive": dir.creator_alive,
        "sockets": dir.sockets,
        "listening": dir.listening,
        "unexpected": dir.unexpected,
        "owner_uid": dir.owner_uid,
        "age_seconds": dir.age.as_secs_f64(),
        "action": action,
        "reason": reason,
        "message": message,
    })
}

fn path_text(path: &Path) -> String {
    path.display().to_string()
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The segments and bytes removed, or that would be.
fn totals(rows: &[Row<'_>]) -> (usize, u64) {
    rows.iter()
        .filter(|row| matches!(row.action, Action::Removed | Action::WouldRemove))
        .fold((0, 0), |(count, bytes), row| {
            (count + 1, bytes + row.segment.size)
        })
}

/// `1, 2, 3` for up to five pids, then `and N more`.
fn pid_list(pids: &[u32]) -> String {
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

fn action_text(row: &Row<'_>, scan: &OrphanScan) -> String {
    match &row.action {
        Action::Removed => "removed".to_owned(),
        Action::WouldRemove => "would remove".to_owned(),
        Action::Vanished => "gone: removed meanwhile by another process".to_owned(),
        Action::Failed(error) => format!("failed: {error}"),
        Action::Kept(reason) => format!("kept: {}", keep_text(reason, row.segment, scan)),
    }
}

fn keep_text(reason: &KeepReason, segment: &SegmentReport, scan: &OrphanScan) -> String {
    match reason {
        KeepReason::OtherUser { uid } => format!(
            "it belongs to {}: gc removes only its own user's segments; run gc as that user",
            UnixUser::of(*uid)
        ),
        KeepReason::CreatorAlive => "its creator is alive".to_owned(),
        KeepReason::Held => {
            let pids = &segment.holders;
            format!("held by pid{} {}", plural(pids.len()), pid_list(pids))
        }
        KeepReason::HeldUnseen => {
            "open or mapped by a process gc cannot inspect (another user's, another pid \
             namespace's, or an fd in flight)"
                .to_owned()
        }
        KeepReason::Recent { age } => format!(
            "changed {:.1} s ago, under --min-age {}",
            age.as_secs_f64(),
            scan.options().min_age_value().as_secs_f64()
        ),
        KeepReason::Unverifiable { errno } => format!(
            "cannot rule out a holder: the kernel's open check failed ({errno}) and some \
             processes cannot be inspected; run as root or as the segment's owner (uid {})",
            segment.owner_uid
        ),
        KeepReason::Replaced => "another file took its name during the scan".to_owned(),
        other => other.to_string(),
    }
}

fn to_text(
    scan: &OrphanScan,
    rows: &[Row<'_>],
    dirs: Option<(&SocketDirScan, &[DirRow<'_>])>,
    dry_run: bool,
) -> String {
    let shm_dir = scan.options().shm_dir_path().display();
    let (listed, alive): (Vec<&Row<'_>>, Vec<&Row<'_>>) = rows
        .iter()
        .partition(|row| !matches!(row.action, Action::Kept(KeepReason::CreatorAlive)));
    let mut text = String::new();
    if !listed.is_empty() {
        let cells: Vec<[String; 4]> = listed
            .iter()
            .map(|row| {
                let state = if row.segment.creator_alive {
                    "alive"
                } else {
                    "gone"
                };
                [
                    row.segment.name.to_string(),
                    format::bytes(row.segment.size),
                    format!("{} ({state})", row.segment.creator_pid()),
                    action_text(row, scan),
                ]
            })
            .collect();
        write_table(
            &mut text,
            ["segment", "size", "creator pid", "action"],
            cells,
        );
    } else if alive.is_empty() {
        let _ = writeln!(text, "no torch_* segments in {shm_dir}");
    }
    if !alive.is_empty() {
        let processes: Vec<u32> = alive
            .iter()
            .map(|row| row.segment.creator_pid())
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .collect();
        let bytes: u64 = alive.iter().map(|row| row.segment.size).sum();
        let _ = writeln!(
            text,
            "kept {} segment{} ({}) of live processes: pid{} {}",
            alive.len(),
            plural(alive.len()),
            format::bytes(bytes),
            plural(processes.len()),
            pid_list(&processes)
        );
    }
    for skipped in scan.skipped() {
        let _ = writeln!(text, "skipped {}: {}", skipped.name, skipped.reason);
    }
    for missing in scan.missing() {
        let _ = writeln!(text, "not found in {shm_dir}: {missing}");
    }
    let unverifiable = rows
        .iter()
        .any(|row| matches!(row.action, Action::Kept(KeepReason::Unverifiable { .. })));
    if unverifiable {
        let unreadable = scan.unreadable_processes();
        if !unreadable.is_empty() {
            let _ = writeln!(
                text,
                "could not inspect {} process{} (pid{} {})",
                unreadable.len(),
                if unreadable.len() == 1 { "" } else { "es" },
                plural(unreadable.len()),
                pid_list(unreadable)
            );
        }
        if scan.proc_hides_processes() {
            let _ = writeln!(
                text,
                "/proc is mounted with hidepid: other users' processes are invisible"
            );
        }
    }
    if let Some((dir_scan, dir_rows)) = dirs {
        dirs_text(&mut text, dir_scan, dir_rows);
    }
    let done = if dry_run {
        "would be removed (dry run)"
    } else {
        "removed"
    };
    let (count, bytes) = totals(rows);
    let _ = writeln!(
        text,
        "{count} segment{}, {bytes} bytes ({}) {done}",
        plural(count),
        format::bytes(bytes),
    );
    if let Some((_, dir_rows)) = dirs {
        let _ = writeln!(text, "{} {done}", dir_count(dir_totals(dir_rows)));
    }
    text
}

fn to_json(
    scan: &OrphanScan,
    rows: &[Row<'_>],
    dirs: Option<(&SocketDirScan, &[DirRow<'_>])>,
    dry_run: bool,
) -> Json {
    let segments: Vec<Json> = rows
        .iter()
        .map(|row| {
            let segment = row.segment;
            let (action, reason) = match &row.action {
                Action::Removed => ("removed", None),
                Action::WouldRemove => ("would_remove", None),
                Action::Vanished => ("vanished", None),
                Action::Failed(_) => ("failed", None),
                Action::Kept(reason) => ("kept", Some(reason_code(reason))),
            };
            let message = match &row.action {
                Action::Kept(_) | Action::Failed(_) | Action::Vanished => {
                    Some(action_text(row, scan))
                }
                Action::Removed | Action::WouldRemove => None,
            };
            json!({
                "name": segment.name.as_str(),
                "size": segment.size,
                "creator_pid": segment.creator_pid(),
                "creator_alive": segment.creator_alive,
                "holders": segment.holders,
                "owner_uid": segment.owner_uid,
                "age_seconds": segment.age.as_secs_f64(),
                "action": action,
                "reason": reason,
                "message": message,
            })
        })
        .collect();
    let (count, bytes) = totals(rows);
    let min_age = scan.options().min_age_value();
    let (socket_dirs, socket_parents, skipped_dirs, missing_dirs, dir_count) = match dirs {
        Some((dir_scan, dir_rows)) => (
            dir_rows
                .iter()
                .map(|row| dir_to_json(row, min_age))
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
            dir_totals(dir_rows),
        ),
        None => (Vec::new(), Vec::new(), Vec::new(), Vec::<String>::new(), 0),
    };
    json!({
        "shm_dir": scan.options().shm_dir_path().display().to_string(),
        "dry_run": dry_run,
        "min_age_seconds": scan.options().min_age_value().as_secs_f64(),
        "segments": segments,
        "skipped": scan.skipped().iter().map(|skipped| json!({
            "name": skipped.name.as_str(),
            "reason": skipped.reason.to_string(),
        })).collect::<Vec<_>>(),
        "not_found": scan.missing().iter().map(SegmentName::as_str).collect::<Vec<_>>(),
        "unreadable_pids": scan.unreadable_processes(),
        "proc_hides_processes": scan.proc_hides_processes(),
        "socket_parents": socket_parents,
        "socket_dirs": socket_dirs,
        "skipped_socket_dirs": skipped_dirs,
        "socket_dirs_not_found": missing_dirs,
        "totals": {
            "segments": count,
            "bytes": bytes,
            "socket_dirs": dir_count,
            "action": if dry_run { "would_remove" } else { "removed" },
        },
    })
}

fn reason_code(reason: &KeepReason) -> &'static str {
    match reason {
        KeepReason::OtherUser { .. } => "other_user",
        KeepReason::CreatorAlive => "creator_alive",
        KeepReason::Held => "held",
        KeepReason::HeldUnseen => "held_unseen",
        KeepReason::Recent { .. } => "recent",
        KeepReason::Unverifiable { .. } => "unverifiable",
        KeepReason::Replaced => "replaced",
        _ => "other",
    }
}
