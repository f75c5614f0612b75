//! `tensorshare manager`.

use clap::Args;

#[derive(Debug, Args)]
pub struct ManagerArgs {}

pub fn run(_args: ManagerArgs) -> Result<(), Box<dyn std::error::Error>> {
    Err("not built yet".into())
}
