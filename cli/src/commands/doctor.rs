//! `tensorshare doctor [--json] [--strategy NAME] [--tensors N] [--bytes SIZE]`:
//! the limits shared memory runs into, one line per check with its fix;
//! exits 1 when a check fails. The checks are `tensorshare::doctor`'s.

use clap::Args;
use serde_json::json;
use tensorshare::StrategyKind;
use tensorshare::doctor::{self, DoctorOptions, PlannedLoad};
use tensorshare_cli::error::CliError;
use tensorshare_cli::format;

use super::strategy::strategy_parser;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print a JSON array of `{check, status, detail, fix}` instead of lines.
    #[arg(long)]
    json: bool,
    /// The strategy of a planned load (file_descriptor, file_system, bytes,
    /// memmap): says which limit it hits first.
    #[arg(long, value_name = "NAME", value_parser = strategy_parser())]
    strategy: Option<StrategyKind>,
    /// Tensors a process of the planned load holds at once.
    #[arg(long, value_name = "N", default_value_t = 0)]
    tensors: u64,
    /// Bytes of storage the planned load has in flight at once: `4096`,
    /// `16MiB`, `3GiB`.
    #[arg(long, value_name = "SIZE", value_parser = format::parse_size)]
    bytes: Option<usize>,
    /// Read logind's configuration and lingering users under DIR instead of
    /// / (also $TENSORSHARE_DOCTOR_ROOT).
    #[arg(long, value_name = "DIR")]
    root: Option<std::path::PathBuf>,
}

pub fn run(args: DoctorArgs) -> Result<(), CliError> {
    let mut options = DoctorOptions::from_env();
    if let Some(root) = args.root {
        options = options.root(root);
    }
    let planned =
        (args.strategy.is_some() || args.tensors > 0 || args.bytes.is_some()).then(|| {
            PlannedLoad {
                strategy: args.strategy.unwrap_or(StrategyKind::FileDescriptor),
                tensors: args.tensors,
                bytes: args.bytes.unwrap_or(0) as u64,
            }
        });
    let findings = doctor::check_with(&options, planned.as_ref());
    if args.json {
        let array: Vec<_> = findings
            .iter()
            .map(|finding| {
                json!({
                    "check": finding.check,
                    "status": finding.status.to_string(),
                    "detail": finding.detail,
                    "fix": finding.fix,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(array));
    } else {
        for finding in &findings {
            println!("{finding}");
        }
    }
    let failed = findings
        .iter()
        .filter(|finding| finding.status == doctor::Status::Fail)
        .count();
    if failed == 0 {
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "{failed} check(s) failed: apply the fixes above"
        )))
    }
}
