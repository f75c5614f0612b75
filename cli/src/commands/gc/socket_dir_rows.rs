//! The socket directories' part of `tensorshare gc`: what became of each,
//! as text and JSON.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value as Json, json};
use tensorshare_strategies::platform::private_dir::{SocketDirKind, SocketDirName};
use tensorshare_strategies::services::orphans::{
    SocketDirKeepReason, SocketDirOutcome, SocketDirRemoveError, SocketDirReport, SocketDirScan,
};

use super::text::{parents_text, pid_list, plural, write_table};

/// What became of one socket directory.
pub(super) enum DirAction {
    Removed,
    WouldRemove,
    Kept(SocketDirKeepReason),
    Vanished,
    Failed(SocketDirRemoveError),
}

/// One socket directory and what became of it.
pub(super) struct DirRow<'a> {
    dir: &'a SocketDirReport,
    action: DirAction,
}

/// Removes the orphans of `dir_scan` (unless `dry_run`) and says what
/// became of every directory it found.
pub(super) fn dir_rows(dir_scan: &SocketDirScan, dry_run: bool) -> Vec<DirRow<'_>> {
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

pub(super) fn dir_count(n: usize) -> String {
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

/// The socket directories' part of the table.
pub(super) fn dirs_text(text: &mut String, dir_scan: &SocketDirScan, rows: &[DirRow<'_>]) {
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

/// How many of `rows` could not be removed.
pub(super) fn dir_failures(rows: &[DirRow<'_>]) -> usize {
    rows.iter()
        .filter(|row| matches!(row.action, DirAction::Failed(_)))
        .count()
}

/// The socket directories removed, or that would be.
pub(super) fn dir_totals(rows: &[DirRow<'_>]) -> usize {
    rows.iter()
        .filter(|row| matches!(row.action, DirAction::Removed | DirAction::WouldRemove))
        .count()
}

pub(super) fn dir_to_json(row: &DirRow<'_>, min_age: Duration) -> Json {
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
