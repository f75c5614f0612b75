//! `tensorshare convert IN OUT [--legacy] [--authkey HEX]`: rewrite a torch pickle (any
//! strategy) or a `torch.save` file (zip or legacy) as a `torch.save` file
//! that stock torch loads with `weights_only=True`.

use std::path::PathBuf;

use clap::Args;
use tensorshare::save::save_torch;
use tensorshare::{Authkey, Error, Registry, SharingContext, Storage, Value};
use tensorshare_compat::torch_save::TorchSaveFormat;

use super::inspect::read_input;

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// What to read: a pickle of any strategy, or a torch.save file (zip or
    /// legacy); `-` for stdin.
    input: PathBuf,
    /// Where to write the torch.save file.
    output: PathBuf,
    /// Write the legacy stream (`_use_new_zipfile_serialization=False`)
    /// instead of a zip.
    #[arg(long)]
    legacy: bool,
    /// The sender's `multiprocessing.current_process().authkey`, in hex:
    /// needed to fetch the storages of a `file_descriptor` pickle from the
    /// process that wrote it.
    #[arg(long, value_name = "HEX", value_parser = Authkey::from_hex)]
    authkey: Option<Authkey>,
}

pub fn run(args: ConvertArgs) -> Result<(), Box<dyn std::error::Error>> {
    let input = args.input.display().to_string();
    let bytes = read_input(&args.input)?;
    let value = load_any(&bytes, args.authkey).map_err(|e| format!("{input}: {e}"))?;
    let format = if args.legacy {
        TorchSaveFormat::Legacy
    } else {
        TorchSaveFormat::Zip
    };
    let file = save_torch(&value, format).map_err(|e| format!("{input}: {e}"))?;
    std::fs::write(&args.output, &file)
        .map_err(|e| Error::io(format!("writing {}", args.output.display()), e))?;
    println!(
        "wrote {} ({} torch.save, {} bytes)",
        args.output.display(),
        if args.legacy { "legacy" } else { "zip" },
        file.len()
    );
    Ok(())
}

/// Rebuilds `bytes` with every storage's data at hand: torch.save files and
/// plain pickles carry it; shared storages are attached from the process
/// or file that holds them.
fn load_any(bytes: &[u8], authkey: Option<Authkey>) -> Result<Value, Error> {
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
        Error::Unsupported(format!(
            "its storages live in another process or in shared memory and cannot be \
             reached ({e}); convert it while the sending process is alive, and pass its \
             --authkey for a file_descriptor pickle"
        ))
    })?;
    if let Some(storage) = first_unreachable(&attached) {
        return Err(Error::Unsupported(format!(
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
