//! `tensorshare gc [--dry-run] [--json] [--min-age SECONDS] [--only NAME]... [--shm-dir DIR]`:
//! find the shared-memory segments left by processes that are gone, show
//! them and remove them. The rules are `tensorshare_strategies::orphans`'.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde_json::{Value as Json, json};
use tensorshare_strategies::UnixUser;
use tensorshare_strategies::file_system::SegmentName;
use tensorshare_strategies::orphans::{
    self, DEFAULT_MIN_AGE, DEFAULT_SHM_DIR, KeepReason, OrphanScan, RemovalOutcome, RemoveError,
    ScanOptions, SegmentReport,
};

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
    /// without the leading /); repeat for more. Every other segment is left
    /// alone, whatever state it is in.
    #[arg(long, value_name = "NAME", value_parser = parse_segment_name)]
    only: Vec<SegmentName>,
    /// The directory that holds POSIX shared memory.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_SHM_DIR)]
    shm_dir: PathBuf,
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|seconds| seconds.is_finite() && *seconds >= 0.0 && *seconds < 1e9)
        .ok_or_else(|| format!("{text:?} is not a number of seconds like 5 or 0.5"))
}

fn parse_segment_name(text: &str) -> Result<SegmentName, String> {
    let with_slash = if text.starts_with('/') {
        text.to_owned()
    } else {
        format!("/{text}")
    };
    SegmentName::parse(with_slash.as_bytes()).map_err(|e| e.reason.to_owned())
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

pub fn run(args: GcArgs) -> Result<(), Box<dyn std::error::Error>> {
    let mut options = ScanOptions::new()
        .shm_dir(&args.shm_dir)
        .min_age(Duration::from_secs_f64(args.min_age));
    if !args.only.is_empty() {
        options = options.only(args.only.iter().cloned());
    }
    let scan = orphans::scan(&options)?;
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
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&to_json(&scan, &rows, args.dry_run))?;
        text.push('\n');
        text
    } else {
        to_text(&scan, &rows, args.dry_run)
    };
    super::format::print_report(&text)?;
    let failed = rows
        .iter()
        .filter(|row| matches!(row.action, Action::Failed(_)))
        .count();
    if failed > 0 {
        return Err(format!(
            "could not remove {failed} segment{}: see why above",
            plural(failed)
        )
        .into());
    }
    Ok(())
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

fn to_text(scan: &OrphanScan, rows: &[Row<'_>], dry_run: bool) -> String {
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
        let header = ["segment", "size", "creator pid", "action"];
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
    let (count, bytes) = totals(rows);
    let _ = writeln!(
        text,
        "{count} segment{}, {bytes} bytes ({}) {}",
        plural(count),
        format::bytes(bytes),
        if dry_run {
            "would be removed (dry run)"
        } else {
            "removed"
        }
    );
    text
}

fn to_json(scan: &OrphanScan, rows: &[Row<'_>], dry_run: bool) -> Json {
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
        "totals": {
            "segments": count,
            "bytes": bytes,
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
