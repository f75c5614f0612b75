//! `--workload batches --shm-size SIZE`: the tables in a mount
//! namespace of their own whose `/dev/shm` is a tmpfs of SIZE, as in a
//! container started without `--shm-size` (Docker's and Podman's default
//! is 64 MiB). The bench runs itself again inside one (`unshare`, as
//! root), and the feeds that cannot share there show as failed rows.

use std::process::Command;

use tensorshare_cli::error::CliError;
use tensorshare_cli::format;

/// Set in the bench run inside the namespace: the size its `/dev/shm` has.
const INSIDE_ENV: &str = "TENSORSHARE_BENCH_SHM_SIZE";

/// The size of the private `/dev/shm` this bench runs in, when it runs in
/// one.
pub fn inside() -> Option<String> {
    std::env::var(INSIDE_ENV).ok()
}

/// Runs this command again, with its arguments, in a mount namespace whose
/// `/dev/shm` is a tmpfs of `bytes`; its exit status is this one's.
pub fn run_inside(bytes: usize) -> Result<(), CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::io("finding this program to run it again", e))?;
    let status = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg("mount -t tmpfs -o size=\"$1\" tmpfs /dev/shm && shift && exec \"$@\"")
        .arg("sh")
        .arg(bytes.to_string())
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(INSIDE_ENV, format::bytes(bytes as u64))
        .status()
        .map_err(|e| CliError::io("running `unshare` for --shm-size", e))?;
    if status.success() {
        return Ok(());
    }
    Err(format!(
        "the bench in a private /dev/shm of {} ended with {status}: --shm-size needs root \
         (a mount namespace and a tmpfs mount); run it as root or drop --shm-size",
        format::bytes(bytes as u64)
    )
    .into())
}
