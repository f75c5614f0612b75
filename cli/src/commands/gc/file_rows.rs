//! The segments' and memmap files' parts of `tensorshare gc`: what became
//! of each file a scan found, as text and JSON. Both follow the rules of
//! `tensorshare_strategies::services::orphans`; `N` is the kind of name.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use serde_json::{Value as Json, json};
use tensorshare_cli::format;
use tensorshare_strategies::UnixUser;
use tensorshare_strategies::services::orphans::{
    KeepReason, OrphanName, OrphanScan, RemovalOutcome, RemoveError, ScanError, SegmentReport,
};

use super::text::{pid_list, plural, write_table};

/// What became of one file.
pub(super) enum Action<N> {
    Removed,
    WouldRemove,
    Kept(KeepReason),
    /// Gone before it could be removed: the manager, its creator's
    /// successor or another gc was quicker.
    Vanished,
    Failed(RemoveError<N>),
}

/// One file and what became of it.
pub(super) struct Row<'a, N> {
    pub(super) file: &'a SegmentReport<N>,
    pub(super) action: Action<N>,
}

/// How the files of one kind are called in the report.
pub(super) struct Words {
    /// The table's first column, and the unit of the totals: `segment`.
    pub(super) one: &'static str,
    /// What the directory holds when no such file is there:
    /// `torch_* segments`.
    pub(super) none_of_them: &'static str,
}

/// Removes the orphans of `scan` (unless `dry_run`) and says what became of
/// every file it found.
pub(super) fn rows<N: OrphanName>(
    scan: &OrphanScan<N>,
    dry_run: bool,
) -> Result<Vec<Row<'_, N>>, ScanError> {
    let mut outcomes: HashMap<N, RemovalOutcome<N>> = if dry_run {
        HashMap::new()
    } else {
        scan.remove_orphans()?
            .into_iter()
            .map(|removal| (removal.name, removal.outcome))
            .collect()
    };
    Ok(scan
        .segments()
        .iter()
        .map(|file| {
            let action = match (&file.keep, outcomes.remove(&file.name)) {
                (Some(reason), _) => Action::Kept(*reason),
                (None, _) if dry_run => Action::WouldRemove,
                (None, Some(RemovalOutcome::Removed)) => Action::Removed,
                (None, Some(RemovalOutcome::Kept(reason))) => Action::Kept(reason),
                (None, Some(RemovalOutcome::Failed(error))) => Action::Failed(error),
                // Vanished, or an outcome this version does not know of.
                (None, _) => Action::Vanished,
            };
            Row { file, action }
        })
        .collect())
}

/// How many of `rows` could not be removed.
pub(super) fn failures<N>(rows: &[Row<'_, N>]) -> usize {
    rows.iter()
        .filter(|row| matches!(row.action, Action::Failed(_)))
        .count()
}

/// The files removed, or that would be, and their bytes.
pub(super) fn totals<'a, N: 'a>(rows: impl IntoIterator<Item = &'a Row<'a, N>>) -> (usize, u64) {
    rows.into_iter()
        .filter(|row| matches!(row.action, Action::Removed | Action::WouldRemove))
        .fold((0, 0), |(count, bytes), row| {
            (count + 1, bytes + row.file.size)
        })
}

fn action_text<N: OrphanName>(row: &Row<'_, N>, scan: &OrphanScan<N>) -> String {
    match &row.action {
        Action::Removed => "removed".to_owned(),
        Action::WouldRemove => "would remove".to_owned(),
        Action::Vanished => "gone: removed meanwhile by another process".to_owned(),
        Action::Failed(error) => format!("failed: {error}"),
        Action::Kept(reason) => format!("kept: {}", keep_text(reason, row.file, scan)),
    }
}

fn keep_text<N: OrphanName>(
    reason: &KeepReason,
    file: &SegmentReport<N>,
    scan: &OrphanScan<N>,
) -> String {
    match reason {
        KeepReason::OtherUser { uid } => format!(
            "it belongs to {}: gc removes only its own user's files; run gc as that user",
            UnixUser::of(*uid)
        ),
        KeepReason::CreatorAlive => "its creator is alive".to_owned(),
        KeepReason::Held => {
            let pids = &file.holders;
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
             processes cannot be inspected; run as root or as the file's owner (uid {})",
            file.owner_uid
        ),
        KeepReason::Replaced => "another file took its name during the scan".to_owned(),
        KeepReason::AwaitingReceivers { left } => format!(
            "its sender marked it as named by a message a receiver may still open, for {:.0} s \
             more; --min-age 0 removes it anyway",
            left.as_secs_f64()
        ),
        other => other.to_string(),
    }
}

/// The table of `rows`, or says the directory holds none; then what was
/// kept for live processes, skipped, and not found.
pub(super) fn files_text<N: OrphanName>(
    text: &mut String,
    scan: &OrphanScan<N>,
    rows: &[Row<'_, N>],
    words: &Words,
) {
    let dir = scan.options().dir_path().display();
    let (listed, alive): (Vec<&Row<'_, N>>, Vec<&Row<'_, N>>) = rows
        .iter()
        .partition(|row| !matches!(row.action, Action::Kept(KeepReason::CreatorAlive)));
    if !listed.is_empty() {
        let cells: Vec<[String; 4]> = listed
            .iter()
            .map(|row| {
                let state = if row.file.creator_alive {
                    "alive"
                } else {
                    "gone"
                };
                [
                    row.file.name.to_string(),
                    format::bytes(row.file.size),
                    format!("{} ({state})", row.file.creator_pid()),
                    action_text(row, scan),
                ]
            })
            .collect();
        write_table(text, [words.one, "size", "creator pid", "action"], cells);
    } else if alive.is_empty() {
        let _ = writeln!(text, "no {} in {dir}", words.none_of_them);
    }
    if !alive.is_empty() {
        let processes: Vec<u32> = alive
            .iter()
            .map(|row| row.file.creator_pid())
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .collect();
        let bytes: u64 = alive.iter().map(|row| row.file.size).sum();
        let _ = writeln!(
            text,
            "kept {} {}{} ({}) of live processes: pid{} {}",
            alive.len(),
            words.one,
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
        let _ = writeln!(text, "not found in {dir}: {missing}");
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
}

/// `N segments, B bytes (1.2 KiB) removed`.
pub(super) fn total_text<'a, N: 'a>(
    rows: impl IntoIterator<Item = &'a Row<'a, N>>,
    words: &Words,
    done: &str,
) -> String {
    let (count, bytes) = totals(rows);
    format!(
        "{count} {}{}, {bytes} bytes ({}) {done}",
        words.one,
        plural(count),
        format::bytes(bytes),
    )
}

/// One JSON entry per row.
pub(super) fn files_json<N: OrphanName>(scan: &OrphanScan<N>, rows: &[Row<'_, N>]) -> Vec<Json> {
    rows.iter()
        .map(|row| {
            let file = row.file;
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
                "name": file.name.to_string(),
                "size": file.size,
                "creator_pid": file.creator_pid(),
                "creator_alive": file.creator_alive,
                "holders": file.holders,
                "owner_uid": file.owner_uid,
                "age_seconds": file.age.as_secs_f64(),
                "action": action,
                "reason": reason,
                "message": message,
            })
        })
        .collect()
}

/// The entries `scan` skipped, as JSON.
pub(super) fn skipped_json<N: OrphanName>(scan: &OrphanScan<N>) -> Vec<Json> {
    scan.skipped()
        .iter()
        .map(|skipped| {
            json!({
                "name": skipped.name.to_string(),
                "reason": skipped.reason.to_string(),
            })
        })
        .collect()
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
        KeepReason::AwaitingReceivers { .. } => "awaiting_receivers",
        _ => "other",
    }
}
