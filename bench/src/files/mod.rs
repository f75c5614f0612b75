//! `--workload files`: checkpoints inspected and converted by the
//! `tensorshare` command and by stock torch, in the same run. torch writes
//! each checkpoint (`compat/python/bench_files.py`, built into this
//! binary) into a private directory just before its rows, and it is
//! removed after them; the directory goes at the end. Every measured
//! operation, ours and torch's, is a process of its own run under the
//! hidden `measure` subcommand, which gives its wall time and peak RSS.

// The layers, bottom to top: each imports only those declared before it,
// and none what this file defines (`scripts/check-layers bench`). One
// comment per layer keeps rustfmt from sorting them.

// The checkpoints, the operations and the rows.
mod checkpoint;
// What the run prints.
mod report;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tensorshare_cli::error::CliError;

use crate::measure::{Measurement, measure};
use crate::median::median;
use crate::spinner::spinner;
use crate::tensorshare_exe::tensorshare_exe;
use crate::torch_peer::has_module;
pub use checkpoint::Options;
use checkpoint::{Case, Operation, Row, cases};

const BENCH_FILES: &str = include_str!("../../../compat/python/bench_files.py");

/// Which side a measurement is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Ours,
    Torch,
}

/// What a run stopped by SIGINT or SIGTERM reports.
const INTERRUPTED: &str = "interrupted: the checkpoints are removed";

/// Makes the checkpoints, measures every operation on each, prints the
/// table and the targets' verdicts, and removes the checkpoints.
pub fn run(options: &Options) -> Result<(), CliError> {
    let interrupted = stop_on_signals()?;
    check_safetensors(options.python)?;
    let tensorshare = tensorshare_exe()?;
    let scratch = match options.dir {
        Some(dir) if !dir.is_dir() => {
            return Err(format!(
                "--dir {} is not a directory: create it, or name one that exists",
                dir.display()
            )
            .into());
        }
        Some(dir) => scratch_dir().tempdir_in(dir),
        None => scratch_dir().tempdir(),
    }
    .map_err(|e| CliError::io("creating the scratch directory for the checkpoints", e))?;
    let ran = run_in(options, tensorshare, scratch.path(), &interrupted);
    // A measured process dies of the terminal's SIGINT too, and its
    // failure would read as a bug.
    if ran.is_err() && interrupted.load(Ordering::Relaxed) {
        return Err(INTERRUPTED.into());
    }
    ran
}

/// A directory only this user can enter, removed with what is in it.
fn scratch_dir() -> tempfile::Builder<'static, 'static> {
    let mut builder = tempfile::Builder::new();
    builder.prefix("tensorshare-bench-files-");
    builder
}

/// [`run`] with its checkpoints in `scratch`, timing the `tensorshare`
/// command at `tensorshare`.
fn run_in(
    options: &Options,
    tensorshare: PathBuf,
    scratch: &Path,
    interrupted: &AtomicBool,
) -> Result<(), CliError> {
    let script = scratch.join("bench_files.py");
    std::fs::write(&script, BENCH_FILES)
        .map_err(|e| CliError::io(format!("writing {}", script.display()), e))?;
    let programs = Programs {
        tensorshare,
        python: options.python,
        script: &script,
    };
    // A command that does nothing shows the floor of every peak RSS: a
    // child's peak counts the pages of the process that started it, up
    // to the exec.
    let floor = measure("`true`", &["true".into()])?;
    let cases = cases(options, scratch);
    report::print_header(options, &cases, floor.peak_rss_bytes);
    let spinner = spinner();
    let mut rows = Vec::new();
    let mut file_sizes = Vec::new();
    // One checkpoint on disk at a time, beside one output: the disk a run
    // needs is about twice --file-size, not four times.
    for case in &cases {
        spinner.set_message(format!("torch is writing the {} checkpoint", case.name));
        make(&programs, case)?;
        let written = std::fs::metadata(&case.path)
            .map_err(|e| CliError::io(format!("reading {}", case.path.display()), e))?;
        file_sizes.push((case.name, written.len()));
        for operation in Operation::ALL {
            spinner.set_message(format!("{} {}", case.name, operation.label()));
            let row = run_row(
                case,
                operation,
                &programs,
                options.rounds,
                scratch,
                interrupted,
            )?;
            spinner.suspend(|| report::print_row(&row, case));
            rows.push(row);
        }
        std::fs::remove_file(&case.path)
            .map_err(|e| CliError::io(format!("removing {}", case.path.display()), e))?;
    }
    spinner.finish_and_clear();
    report::print_file_sizes(&file_sizes);
    report::print_targets(&rows, options.file_size);
    Ok(())
}

/// Fails unless `python` has the safetensors package (torch is checked
/// before): torch's side of the .safetensors conversion needs it.
fn check_safetensors(python: &Path) -> Result<(), CliError> {
    if has_module(python, "safetensors") {
        return Ok(());
    }
    Err(format!(
        "{} cannot import safetensors, which torch's side of the .safetensors conversion \
         uses: install it there (`pip install safetensors`; \
         compat/python/requirements-addons.txt pins the version), or pass --python to a \
         Python that has it",
        python.display()
    )
    .into())
}

/// Has torch write `case`'s checkpoint.
fn make(programs: &Programs, case: &Case) -> Result<(), CliError> {
    let mut command = Command::new(programs.python);
    command
        .arg(programs.script)
        .arg("make")
        .arg(&case.path)
        .args(["--tensors", &case.tensors.to_string()])
        .args(["--elements", &case.elements.to_string()]);
    if case.legacy {
        command.arg("--legacy");
    }
    if let Some(location) = case.location {
        command.args(["--location", location]);
    }
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| CliError::io(format!("starting {}", programs.python.display()), e))?;
    if !output.status.success() {
        return Err(format!(
            "torch could not write the {} checkpoint {} ({}): {}",
            case.name,
            case.path.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    Ok(())
}

/// What runs each side's operations.
struct Programs<'a> {
    /// The `tensorshare` command.
    tensorshare: PathBuf,
    python: &'a Path,
    /// `bench_files.py`.
    script: &'a Path,
}

impl Programs<'_> {
    /// The command line of `side` doing `operation` to `case`, writing
    /// `output` if it converts.
    fn command_line(
        &self,
        side: Side,
        operation: Operation,
        case: &Case,
        output: Option<&Path>,
    ) -> Vec<OsString> {
        let mut line: Vec<OsString> = match (side, operation) {
            (Side::Ours, Operation::Inspect) => {
                vec![
                    self.tensorshare.clone().into(),
                    "inspect".into(),
                    "--json".into(),
                ]
            }
            (Side::Ours, Operation::ToSafetensors | Operation::ToPt) => {
                vec![self.tensorshare.clone().into(), "convert".into()]
            }
            (Side::Torch, _) => {
                let subcommand = match operation {
                    Operation::Inspect => "load",
                    Operation::ToSafetensors => "to-safetensors",
                    Operation::ToPt => "to-pt",
                };
                vec![self.python.into(), self.script.into(), subcommand.into()]
            }
        };
        line.push(case.path.clone().into());
        line.extend(output.map(OsString::from));
        if side == Side::Torch && operation == Operation::Inspect && case.torch_can_mmap() {
            line.push("--mmap".into());
        }
        line
    }
}

/// Measures both sides' `operation` on `case` over `rounds`, taking turns
/// at going first so that neither always finds the page cache as the other
/// left it; each output is removed once made (they are as large as the
/// checkpoint).
fn run_row(
    case: &Case,
    operation: Operation,
    programs: &Programs,
    rounds: usize,
    scratch: &Path,
    interrupted: &AtomicBool,
) -> Result<Row, CliError> {
    let output = operation.output(scratch);
    let mut ours = Vec::with_capacity(rounds);
    let mut theirs = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [Side::Ours, Side::Torch]
        } else {
            [Side::Torch, Side::Ours]
        };
        for side in order {
            if interrupted.load(Ordering::Relaxed) {
                return Err(INTERRUPTED.into());
            }
            let line = programs.command_line(side, operation, case, output.as_deref());
            let who = match side {
                Side::Ours => "tensorshare",
                Side::Torch => "torch",
            };
            let what = format!(
                "{who} {} of the {} checkpoint",
                operation.label(),
                case.name
            );
            let measured = measure(&what, &line)?;
            if let Some(output) = &output {
                take_output(output, &what)?;
            }
            match side {
                Side::Ours => ours.push(measured),
                Side::Torch => theirs.push(measured),
            }
        }
    }
    Ok(Row {
        case: case.name,
        operation,
        ours: medians(&ours),
        torch: medians(&theirs),
    })
}

/// Checks that a conversion wrote something, then removes it.
fn take_output(output: &Path, what: &str) -> Result<(), CliError> {
    let written = std::fs::metadata(output).map(|m| m.len()).unwrap_or(0);
    std::fs::remove_file(output).ok();
    if written == 0 {
        return Err(format!("{what} succeeded but wrote nothing to {}", output.display()).into());
    }
    Ok(())
}

/// The median time and the median peak of `runs`.
fn medians(runs: &[Measurement]) -> Measurement {
    let peaks = runs.iter().map(|m| m.peak_rss_bytes as f64).collect();
    Measurement {
        seconds: median(runs.iter().map(|m| m.seconds).collect()),
        peak_rss_bytes: median(peaks) as u64,
    }
}

/// Makes SIGINT and SIGTERM end the run between two measurements (a
/// measured process gets the terminal's SIGINT itself), so that the
/// checkpoints are removed rather than left on disk.
fn stop_on_signals() -> Result<Arc<AtomicBool>, CliError> {
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&interrupted)).map_err(CliError::Os)?;
    }
    Ok(interrupted)
}
