//! The torch side of a run: a Python with torch running one of the bench's
//! scripts (`compat/python/bench_peer.py`, `bench_batches.py`), as a peer
//! that connects back or as a whole torch-to-torch run, and its JSON
//! result read back.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tensorshare::Authkey;
use tensorshare::connection::AUTHKEY_ENV;
use tensorshare_cli::error::CliError;
use tensorshare_cli::peer::Peer;

use crate::stream_protocol::Workload;

/// The Python side: an interpreter with torch, the script, and the
/// intra-op threads of each process (`None` for torch's default).
#[derive(Clone)]
pub struct TorchPeer {
    python: PathBuf,
    script: PathBuf,
    threads: Option<usize>,
}

impl TorchPeer {
    /// `python` running `script`, its intra-op threads `threads` (torch's
    /// default when `None`).
    pub fn new(python: PathBuf, script: PathBuf, threads: Option<usize>) -> Self {
        Self {
            python,
            script,
            threads,
        }
    }

    /// The Python it runs.
    pub fn python(&self) -> &Path {
        &self.python
    }

    /// The peer for `consumers` training loops at once: unless threads were
    /// given, the cores shared among them, as `torchrun` sets
    /// `OMP_NUM_THREADS` for several ranks, since N loops of one thread a
    /// core each would spin in each other's way at every parallel op.
    pub fn for_consumers(&self, consumers: usize) -> Self {
        let threads = self.threads.or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            (consumers > 1).then(|| (cores / consumers).max(1))
        });
        Self {
            threads,
            ..self.clone()
        }
    }

    /// The intra-op threads each torch process is started with, when set.
    pub fn threads(&self) -> Option<usize> {
        self.threads
    }

    /// Fails, saying what to do, unless the Python has torch.
    pub fn check(&self) -> Result<(), String> {
        if has_module(&self.python, "torch") {
            return Ok(());
        }
        Err(format!(
            "{} has no torch; pass --python (or set TENSORSHARE_PYTHON) to a Python \
             with torch installed, e.g. the one scripts/python-env prints",
            self.python.display()
        ))
    }

    /// The command running the script with `args`, `workload`'s flags,
    /// and `--address` with the authkey in the environment when it
    /// connects; its stdout and stderr piped.
    pub fn command(
        &self,
        args: &[&str],
        workload: Option<Workload>,
        connect: Option<(&str, &Authkey)>,
    ) -> Command {
        let mut command = Command::new(&self.python);
        command.arg(&self.script).args(args);
        if let Some(threads) = self.threads {
            command.env("OMP_NUM_THREADS", threads.to_string());
        }
        if let Some((address, authkey)) = connect {
            // In the environment: a command line is visible to every user.
            command
                .args(["--address", address])
                .env(AUTHKEY_ENV, authkey.to_hex());
        }
        if let Some(w) = workload {
            for (flag, value) in [
                ("--size", w.size),
                ("--count", w.count),
                ("--rounds", w.rounds),
                ("--warmup", w.warmup),
            ] {
                command.args([flag, &value.to_string()]);
            }
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Starts [`TorchPeer::command`].
    pub fn spawn(
        &self,
        args: &[&str],
        workload: Option<Workload>,
        connect: Option<(&str, &Authkey)>,
    ) -> Result<Peer, String> {
        Peer::spawn(&mut self.command(args, workload, connect))
            .map_err(|e| format!("starting {}: {e}", self.python.display()))
    }

    /// Starts the script with `authkey` in its environment and no
    /// `--address`, for a subcommand that takes the address otherwise.
    pub fn spawn_with_authkey(&self, args: &[&str], authkey: &Authkey) -> Result<Peer, String> {
        Peer::spawn(
            self.command(args, None, None)
                .env(AUTHKEY_ENV, authkey.to_hex()),
        )
        .map_err(|e| format!("starting {}: {e}", self.python.display()))
    }

    /// Runs [`TorchPeer::command`] to its end; its stdout.
    pub fn run(
        &self,
        args: &[&str],
        workload: Option<Workload>,
        connect: Option<(&str, &Authkey)>,
    ) -> Result<String, String> {
        self.spawn(args, workload, connect)?.finish()
    }

    /// The `seconds` list of the script's JSON result.
    pub fn seconds(&self, output: String) -> Result<Vec<f64>, CliError> {
        Ok(Self::result(&output)?.0)
    }

    /// The `seconds` list and the `checked` count of a
    /// `bench_batches.py` result.
    pub fn seconds_and_checked(&self, output: String) -> Result<(Vec<f64>, u64), CliError> {
        let (seconds, result) = Self::result(&output)?;
        let checked = result["checked"]
            .as_u64()
            .ok_or_else(|| format!("bench_batches.py result lacks checked: {result}"))?;
        Ok((seconds, checked))
    }

    fn result(output: &str) -> Result<(Vec<f64>, serde_json::Value), CliError> {
        let line = output.lines().last().unwrap_or_default();
        let result: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("bench_peer.py printed {line:?}: {e}"))?;
        let seconds = result["seconds"]
            .as_array()
            .ok_or_else(|| format!("bench_peer.py result lacks seconds: {line}"))?
            .iter()
            .filter_map(serde_json::Value::as_f64)
            .collect();
        Ok((seconds, result))
    }
}

/// Whether `python` has `module` installed. Found, not imported: importing
/// torch costs a second or two, which every peer the bench starts pays
/// anyway, and a torch that is there but fails to import says why in the
/// first peer's error.
pub fn has_module(python: &Path, module: &str) -> bool {
    Command::new(python)
        .args([
            "-c",
            &format!(
                "import importlib.util, sys; sys.exit(importlib.util.find_spec({module:?}) is None)"
            ),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
