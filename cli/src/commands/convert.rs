//! `tensorshare convert IN OUT [--legacy] [--authkey-file PATH]`: rewrite a torch pickle (any
//! strategy) or a `torch.save` file (zip or legacy) as a `torch.save` file
//! that stock torch loads with `weights_only=True`. `-` reads stdin or
//! writes stdout; the status line goes to stderr, so stdout holds the file
//! and nothing else.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use tensorshare::save::save_torch;
use tensorshare::{Authkey, Registry, SharingContext, Storage, TorchSaveFormat, Value};

use super::authkey::AuthkeyArgs;
use super::inspect::read_input;
use crate::error::CliError;

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// What to read: a pickle of any strategy, or a torch.save file (zip or
    /// legacy); `-` for stdin.
    input: PathBuf,
    /// Where to write the torch.save file; `-` for stdout.
    output: PathBuf,
    /// Write the legacy stream (`_use_new_zipfile_serialization=False`)
    /// instead of a zip.
    #[arg(long)]
    legacy: bool,
    // The sender's `multiprocessing.current_process().authkey`: needed
    // only to fetch the storages of a `file_descriptor` pickle from the
    // process that wrote it (the command's help says so).
    #[command(flatten)]
    authkey: AuthkeyArgs,
}

pub fn run(args: ConvertArgs) -> Result<(), CliError> {
    let authkey = args.authkey.optional("convert")?;
    let input = args.input.display().to_string();
    let bytes = read_input(&args.input)?;
    let value = load_any(&bytes, authkey).map_err(|e| format!("{input}: {e}"))?;
    let format = if args.legacy {
        TorchSaveFormat::Legacy
    } else {
        TorchSaveFormat::Zip
    };
    let file = save_torch(&value, format).map_err(|e| format!("{input}: {e}"))?;
    let written = write_output(&args.output, &file)?;
    eprintln!(
        "wrote {written} ({} torch.save, {} bytes)",
        if args.legacy { "legacy" } else { "zip" },
        file.len()
    );
    if let Some(moved) = moved_to_cpu(&value) {
        eprintln!("{moved}");
    }
    Ok(())
}

/// Says which storages were saved off the CPU, and so are written as CPU
/// storages, as `torch.load(map_location="cpu")` then `torch.save` would.
fn moved_to_cpu(value: &Value) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    let mut locations = std::collections::BTreeMap::<&str, usize>::new();
    for storage in value.distinct().filter_map(Value::storage) {
        let location = storage.saved_location().filter(|l| *l != "cpu");
        if let Some(location) = location.filter(|_| seen.insert(storage.identity())) {
            *locations.entry(location).or_default() += 1;
        }
    }
    if locations.is_empty() {
        return None;
    }
    let counts: Vec<String> = locations
        .iter()
        .map(|(location, n)| format!("{n} saved on {location}"))
        .collect();
    Some(format!(
        "storages read as CPU storages, as torch.load(map_location=\"cpu\") reads them: {}",
        counts.join(", ")
    ))
}

/// Writes `file` to `output`, or to stdout for `-`; returns how to name
/// where it went.
fn write_output(output: &Path, file: &[u8]) -> Result<String, CliError> {
    if output.as_os_str() != "-" {
        std::fs::write(output, file)
            .map_err(|e| CliError::io(format!("writing {}", output.display()), e))?;
        return Ok(output.display().to_string());
    }
    let mut stdout = std::io::stdout().lock();
    if stdout.is_terminal() {
        return Err(CliError::Unsupported(
            "stdout is a terminal, and a torch.save file is binary: redirect stdout to a \
             file or a pipe, or name an output file instead of -"
                .to_owned(),
        ));
    }
    stdout
        .write_all(file)
        .and_then(|()| stdout.flush())
        .map_err(|e| CliError::io("writing stdout", e))?;
    Ok("stdout".to_owned())
}

/// Rebuilds `bytes` with every storage's data at hand: torch.save files and
/// plain pickles carry it; shared storages are attached from the process
/// or file that holds them.
fn load_any(bytes: &[u8], authkey: Option<Authkey>) -> Result<Value, CliError> {
    let registry = Registry::default();
    let detected = tensorshare::inspect::inspect(bytes, &registry)?;
    if first_unreachable(&detected.object).is_none() {
        return Ok(detected.object);
    }
    let authkey = match authkey {
        Some(authkey) => authkey,
        None => Authkey::random()?,
    };
    let sharing = SharingContext::new(authkey);
    let attached = sharing.loads(bytes).map_err(|e| {
        CliError::Unsupported(format!(
            "its storages live in another process or in shared memory and cannot be \
             reached ({e}); convert it while the sending process is alive, and give its \
             authkey (TENSORSHARE_AUTHKEY or --authkey-file) for a file_descriptor pickle"
        ))
    })?;
    if let Some(storage) = first_unreachable(&attached) {
        return Err(CliError::Unsupported(format!(
            "a {} storage of {} bytes cannot be read in this process",
            storage.kind().name(),
            storage.nbytes()
        )));
    }
    Ok(attached)
}

/// The first storage in `value` whose bytes are not in this process.
fn first_unreachable(value: &Value) -> Option<&Storage> {
    value
        .distinct()
        .filter_map(Value::storage)
        .find(|storage| storage.bytes().is_none())
}
