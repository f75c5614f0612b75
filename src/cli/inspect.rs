//! `tensorshare inspect [--json] FILE|-`.

use std::io::Read;
use std::path::PathBuf;

use clap::Args;
use tensorshare::{Error, Registry};

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Print JSON instead of a text tree.
    #[arg(long)]
    json: bool,
    /// The file to read: a pickle (any strategy), or a torch.save file; `-` for stdin.
    file: PathBuf,
}

pub fn run(args: InspectArgs) -> Result<(), Box<dyn std::error::Error>> {
    let bytes = read_input(&args.file)?;
    let report = tensorshare::inspect::inspect(&bytes, &Registry::default())
        .map_err(|e| format!("{}: {e}", args.file.display()))?;
    let text = if args.json {
        let mut json = serde_json::to_string_pretty(&report.to_json())?;
        json.push('\n');
        json
    } else {
        report.to_text()
    };
    super::format::print_report(&text)?;
    Ok(())
}

/// The bytes of `path`, or of stdin for `-`.
pub(super) fn read_input(path: &PathBuf) -> Result<Vec<u8>, Error> {
    let mut bytes = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .lock()
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("reading stdin", e))?;
    } else {
        bytes =
            std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    }
    Ok(bytes)
}
