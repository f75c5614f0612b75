//! The limits shared memory runs into, checked before they bite: the size
//! of `/dev/shm`, the open-file limit, `vm.max_map_count`, logind's
//! `RemoveIPC`, inotify's limits, the temporary directory, running
//! managers and leaked segments. [`check`] looks at this process's user
//! and the machine; [`check_with`] also says which limit a
//! [`PlannedLoad`] would hit first.
//!
//! Nothing here changes anything: leaked segments and files are counted
//! by the same dry-run scan `tensorshare gc` runs, and left in place.
//!
//! # Examples
//!
//! An embedding program logs what would bite at start:
//!
//! ```
//! for finding in tensorshare::doctor::check() {
//!     if finding.status != tensorshare::doctor::Status::Ok {
//!         eprintln!("{finding}");
//!     }
//! }
//! ```

mod machine;
mod planned;

use std::fmt;
use std::path::PathBuf;

pub use planned::PlannedLoad;
use tensorshare_strategies::services::orphans::DEFAULT_SHM_DIR;

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Nothing to do.
    Ok,
    /// Works now, and will fail under load or in time.
    Warn,
    /// Sharing fails, or a planned load will not fit.
    Fail,
}

impl fmt::Display for Status {
    /// `ok`, `warn` or `fail`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        })
    }
}

/// One check's outcome: what was looked at, what was found, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What was checked, e.g. `dev_shm`, `open_files`, `max_map_count`.
    pub check: &'static str,
    /// Whether it is fine.
    pub status: Status,
    /// What was found, in a sentence.
    pub detail: String,
    /// What to do about it; `None` when the status is [`Status::Ok`].
    pub fix: Option<String>,
}

impl Finding {
    fn ok(check: &'static str, detail: impl Into<String>) -> Self {
        Finding {
            check,
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    fn warn(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            check,
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn fail(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            check,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

impl fmt::Display for Finding {
    /// `warn open_files: ... fix: ...`, on one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<4} {}: {}", self.status, self.check, self.detail)?;
        if let Some(fix) = &self.fix {
            write!(f, "; fix: {fix}")?;
        }
        Ok(())
    }
}

/// Where the checks look. [`DoctorOptions::from_env`] gives the machine's
/// own places; a test points them at a root of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorOptions {
    root: PathBuf,
    shm_dir: PathBuf,
    temp_dir: PathBuf,
}

/// Names the directory under which logind's configuration
/// (`etc/systemd/logind.conf`, `logind.conf.d`) and lingering users
/// (`var/lib/systemd/linger`) are read; `/` when unset.
pub(crate) const ROOT_ENV: &str = "TENSORSHARE_DOCTOR_ROOT";

impl DoctorOptions {
    /// The machine's places: logind's files under `/` (or under
    /// `$TENSORSHARE_DOCTOR_ROOT`), `/dev/shm`, and `$TMPDIR` (else `/tmp`)
    /// as the temporary and memmap directory.
    pub fn from_env() -> Self {
        DoctorOptions {
            root: std::env::var_os(ROOT_ENV).map_or_else(|| PathBuf::from("/"), PathBuf::from),
            shm_dir: PathBuf::from(DEFAULT_SHM_DIR),
            temp_dir: std::env::temp_dir(),
        }
    }

    /// Reads logind's configuration and lingering users under `root`
    /// instead of `/`.
    pub fn root(mut self, root: impl Into<PathBuf>) -> Self {
        self.root = root.into();
        self
    }

    /// Checks `dir` as the directory of POSIX shared memory.
    pub fn shm_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.shm_dir = dir.into();
        self
    }

    /// Checks `dir` as the temporary and memmap directory.
    pub fn temp_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.temp_dir = dir.into();
        self
    }
}

/// Every check, for this process's user and the machine, at the places
/// [`DoctorOptions::from_env`] names.
pub fn check() -> Vec<Finding> {
    check_with(&DoctorOptions::from_env(), None)
}

/// Every check at the places `options` names; with a `load`, one more
/// finding (`planned_load`) names the limit it would hit first.
pub fn check_with(options: &DoctorOptions, load: Option<&PlannedLoad>) -> Vec<Finding> {
    let mut findings = machine::findings(options);
    if let Some(load) = load {
        findings.push(planned::finding(options, load));
    }
    findings
}
