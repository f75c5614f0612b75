//! Whether logind deletes this user's `/dev/shm` files: with `RemoveIPC=yes`
//! (systemd's default), when a regular user's last session ends, every
//! shared-memory object they own goes, segments in use included, and a
//! receiver that opens one next fails.

use std::path::{Path, PathBuf};

/// What logind does to this user's named segments when their last session
/// ends.
#[derive(Clone, Debug)]
pub(crate) struct SegmentRemoval {
    /// Whether it deletes them.
    pub(crate) removes: bool,
    /// Why, in a line.
    #[cfg_attr(not(feature = "doctor"), expect(dead_code, reason = "doctor's"))]
    pub(crate) detail: String,
    /// The user, by name when they have one.
    #[cfg_attr(not(feature = "doctor"), expect(dead_code, reason = "doctor's"))]
    pub(crate) user: String,
}

/// What logind, configured under `root` (`/` but in tests), does to the
/// segments of this process's user.
pub(crate) fn segment_removal(root: &Path) -> SegmentRemoval {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |user| user.name);
    let kept = |detail: String| SegmentRemoval {
        removes: false,
        detail,
        user: user.clone(),
    };
    if !root.join("run/systemd/system").is_dir() && !root.join("etc/systemd").is_dir() {
        return kept("no systemd: nothing removes /dev/shm at logout".to_owned());
    }
    let (removes, source) = remove_ipc_setting(root);
    let source = source.display();
    if !removes {
        return kept(format!("RemoveIPC=no ({source})"));
    }
    // logind spares root and system users (below `SYS_UID_MAX`, 999 by
    // default, as login.defs ships it).
    if uid.as_raw() < 1000 {
        return kept(format!(
            "RemoveIPC=yes ({source}), but {user} is a system user it spares"
        ));
    }
    if root.join("var/lib/systemd/linger").join(&user).exists() {
        return kept(format!("RemoveIPC=yes ({source}), but {user} lingers"));
    }
    SegmentRemoval {
        removes: true,
        detail: format!(
            "RemoveIPC=yes ({source}): logind deletes {user}'s /dev/shm/torch_* segments when \
             their last session ends"
        ),
        user,
    }
}

/// The last `RemoveIPC=` of logind.conf and its drop-ins, as logind reads
/// them; systemd's default is `yes`.
fn remove_ipc_setting(root: &Path) -> (bool, PathBuf) {
    let systemd = root.join("etc/systemd");
    let mut files = vec![systemd.join("logind.conf")];
    if let Ok(entries) = std::fs::read_dir(systemd.join("logind.conf.d")) {
        let mut drop_ins: Vec<PathBuf> = entries
            .filter_map(|entry| Some(entry.ok()?.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "conf"))
            .collect();
        drop_ins.sort();
        files.extend(drop_ins);
    }
    let mut setting = (true, PathBuf::from("systemd's default"));
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for line in text.lines() {
            let Some((key, value)) = line.trim().split_once('=') else {
                continue;
            };
            if key.trim() == "RemoveIPC" {
                let value = value.trim().to_ascii_lowercase();
                setting = (
                    matches!(value.as_str(), "yes" | "true" | "on" | "1"),
                    file.clone(),
                );
            }
        }
    }
    setting
}
