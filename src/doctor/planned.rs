//! Which limit a planned load hits first: mappings, open files, or room in
//! `/dev/shm` or the memmap directory, whichever it fills the most of.

use nix::sys::resource::{Resource, getrlimit};
use tensorshare_strategies::StrategyKind;

use super::machine::{human, space, sysctl};
use super::{DoctorOptions, Finding};

/// Mappings and fds a process holds before it shares anything: its
/// libraries, stdio, sockets.
const BASELINE: u64 = 256;

/// A load a program means to run: which strategy, how many tensors it holds
/// at once, and how many bytes are in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedLoad {
    /// The strategy the tensors are shared with.
    pub strategy: StrategyKind,
    /// Tensors one process holds at once (each its own storage).
    pub tensors: u64,
    /// Bytes of storage in flight at once.
    pub bytes: u64,
}

/// One limit against what the load needs of it.
struct Need {
    limit: &'static str,
    needed: u64,
    available: u64,
    shown: fn(u64) -> String,
    fix: String,
}

fn count(value: u64) -> String {
    value.to_string()
}

fn needs(options: &DoctorOptions, load: &PlannedLoad) -> Vec<Need> {
    let mut needs = Vec::new();
    let maps_storages = load.strategy != StrategyKind::Bytes;
    if maps_storages && let Some(limit) = sysctl("/proc/sys/vm/max_map_count") {
        let needed = load.tensors.saturating_add(BASELINE);
        needs.push(Need {
            limit: "vm.max_map_count",
            needed,
            available: limit,
            shown: count,
            fix: format!("`sysctl -w vm.max_map_count={}`", needed.saturating_mul(2)),
        });
    }
    if load.strategy == StrategyKind::FileDescriptor
        && let Ok((soft, _)) = getrlimit(Resource::RLIMIT_NOFILE)
    {
        let needed = load.tensors.saturating_add(BASELINE);
        needs.push(Need {
            limit: "open files (`ulimit -n`)",
            needed,
            available: soft,
            shown: count,
            fix: format!("raise `ulimit -n` to at least {needed}, or use file_system"),
        });
    }
    let room_in = match load.strategy {
        StrategyKind::FileSystem => Some(&options.shm_dir),
        StrategyKind::Memmap => Some(&options.temp_dir),
        _ => None,
    };
    if let Some(dir) = room_in
        && let Ok((free, _)) = space(dir)
    {
        let fix = if load.strategy == StrategyKind::FileSystem {
            format!(
                "give {} at least {} (`--shm-size`, or remount with a larger size=)",
                dir.display(),
                human(load.bytes)
            )
        } else {
            format!(
                "point TMPDIR at a filesystem with {} free",
                human(load.bytes)
            )
        };
        needs.push(Need {
            limit: if load.strategy == StrategyKind::FileSystem {
                "free space in /dev/shm"
            } else {
                "free space in the memmap directory"
            },
            needed: load.bytes,
            available: free,
            shown: human,
            fix,
        });
    }
    needs
}

/// The `planned_load` finding: fails when a limit is too small for the
/// load, warns when the load takes more than 80% of one.
pub(super) fn finding(options: &DoctorOptions, load: &PlannedLoad) -> Finding {
    const CHECK: &str = "planned_load";
    let plan = format!(
        "{} tensors, {} in flight over {}",
        load.tensors,
        human(load.bytes),
        load.strategy.name()
    );
    let fullest = needs(options, load).into_iter().max_by(|a, b| {
        let share = |need: &Need| need.needed as f64 / need.available.max(1) as f64;
        share(a).total_cmp(&share(b))
    });
    let Some(need) = fullest else {
        return Finding::ok(CHECK, format!("{plan}: no shared-memory limit applies"));
    };
    let detail = format!(
        "{plan}: hits {} first (needs {}, has {})",
        need.limit,
        (need.shown)(need.needed),
        (need.shown)(need.available)
    );
    if need.needed > need.available {
        Finding::fail(CHECK, detail, need.fix)
    } else if need.needed.saturating_mul(5) > need.available.saturating_mul(4) {
        Finding::warn(CHECK, detail, need.fix)
    } else {
        Finding::ok(CHECK, detail)
    }
}
