//! `tensorshare gc`.

use clap::Args;

#[derive(Debug, Args)]
pub struct GcArgs {}

pub fn run(_args: GcArgs) -> Result<(), Box<dyn std::error::Error>> {
    Err("not built yet".into())
}
