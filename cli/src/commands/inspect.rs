//! `tensorshare inspect [--json] FILE|-`.

use std::io::{BufWriter, IsTerminal};
use std::path::{Path, PathBuf};

use clap::Args;
use tensorshare::Registry;
use tensorshare::inspect::{Format, HEAD_ELEMENTS, OpaqueSummary, Report};
use tensorshare::registry::{LoadOptions, UnknownGlobals};
use tensorshare::torch_save::TorchSaveFormat;
use tensorshare_cli::error::CliError;
use tensorshare_cli::{format, inspect_report};

use super::input::{has_safetensors_extension, is_torch_save_file, read_input};

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Print JSON instead of a text tree: compact, indented when stdout is
    /// a terminal. Each tensor is described once, in `tensors`, and the
    /// tree refers to it by id.
    #[arg(long)]
    json: bool,
    /// How many elements of each tensor to show, from its start in logical
    /// order; 0 for none.
    #[arg(long, value_name = "N", default_value_t = HEAD_ELEMENTS)]
    head: usize,
    /// With --json, give every tensor every field: `stride`,
    /// `storage_offset`, `requires_grad` and `parameter` are otherwise left
    /// out where a fresh contiguous tensor would have them (row-major
    /// strides, 0, false, false).
    #[arg(long, requires = "json")]
    all_fields: bool,
    /// Show globals outside the allowlist, and every call the pickle would
    /// make with them and with which arguments, as inert nodes instead of
    /// refusing the file. Nothing is executed either way; the command still
    /// fails when the file holds any, because it is not plain data.
    #[arg(long)]
    opaque: bool,
    /// The file to read: a pickle (any strategy), a torch.save file, or a
    /// .safetensors file; `-` for stdin.
    file: PathBuf,
}

pub fn run(args: InspectArgs) -> Result<(), CliError> {
    let unknown_globals = if args.opaque {
        UnknownGlobals::Opaque
    } else {
        UnknownGlobals::Refuse
    };
    let options = LoadOptions::default().with_unknown_globals(unknown_globals);
    let registry = Registry::default().with_options(options);
    let report = if has_safetensors_extension(&args.file) && args.file.as_os_str() != "-" {
        // By its name too: a truncated header does not look like one. Read
        // through a mapping: only the pages shown are read. Its errors name
        // the file, as torch_save::load's do.
        tensorshare::safetensors::load(&args.file).map(|object| Report {
            format: Format::Safetensors,
            object,
        })?
    } else if is_torch_save_file(&args.file) {
        // Through a mapping: the directory, the pickle and the first
        // elements of each tensor are all that is read.
        tensorshare::torch_save::load_with(&args.file, &registry).map(|(format, object)| {
            Report {
                format: match format {
                    TorchSaveFormat::Zip => Format::TorchSaveZip,
                    TorchSaveFormat::Legacy => Format::TorchSaveLegacy,
                },
                object,
            }
        })?
    } else {
        let bytes = read_input(&args.file)?;
        if has_safetensors_extension(&args.file) {
            tensorshare::safetensors::from_bytes(&bytes).map(|object| Report {
                format: Format::Safetensors,
                object,
            })
        } else {
            tensorshare::inspect::inspect(&bytes, &registry)
        }
        .map_err(|e| format!("{}: {e}", args.file.display()))?
    };
    let detail = inspect_report::Detail {
        head: args.head,
        all_fields: args.all_fields,
    };
    if args.json {
        let stdout = std::io::stdout();
        let indented = stdout.is_terminal();
        let written = inspect_report::write_json(
            &report,
            detail,
            BufWriter::with_capacity(1 << 16, stdout.lock()),
            indented,
        );
        format::ignore_broken_pipe(written)?;
    } else {
        format::print_report(&inspect_report::to_text_with(&report, detail))?;
    }
    let opaque = report.opaque_summary();
    if !opaque.is_empty() {
        return Err(not_plain_data(&args.file, &opaque).into());
    }
    Ok(())
}

/// Why a file shown with `--opaque` still fails.
fn not_plain_data(file: &Path, opaque: &OpaqueSummary) -> String {
    let names: Vec<String> = opaque.globals.iter().map(ToString::to_string).collect();
    let mut parts = Vec::new();
    if !names.is_empty() {
        parts.push(format!(
            "names {} global{} outside the allowlist ({})",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            names.join(", ")
        ));
    }
    if opaque.calls > 0 {
        let refused = match opaque.refused {
            0 => String::new(),
            n => format!(", {n} of them refused by an allowlisted rebuilder"),
        };
        parts.push(format!(
            "asks for {} call{}, recorded and not made{refused}",
            opaque.calls,
            if opaque.calls == 1 { "" } else { "s" },
        ));
    }
    format!(
        "{}: not plain data: it {}; nothing was executed",
        file.display(),
        parts.join(" and ")
    )
}
