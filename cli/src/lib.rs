#![doc = include_str!("../README.md")]
//! # This crate's library
//!
//! The parts of the `tensorshare` command that are more than command-line
//! handling, in a library so that their doctests run, the fuzz targets
//! (`fuzz/`) reach them, and the benchmarks (`tensorshare-bench`, in
//! `bench/`) report and run their peers as the command does:
//!
//! - [`inspect_report`]: how `tensorshare inspect` prints a decoded file;
//! - [`error`]: [`CliError`](error::CliError), why a command failed, and
//!   [`one_line`](error::one_line), the one `error: ` line it prints;
//! - [`format`](mod@format): sizes and durations for tables, sizes read from a command
//!   line (`4KiB`), reports written to stdout;
//! - [`peer`]: the other process of a run (this program again, or a torch
//!   process) that connects back to a listener, killed if the run fails.
//!
//! The runtime a program embeds is the `tensorshare` crate; this one adds
//! the command's dependencies (clap, serde_json and thiserror here;
//! indicatif and signal-hook for the binary) on top of it.

// The layers, bottom to top: each imports only those declared before it,
// which `scripts/check-layers cli` checks. One comment per layer keeps
// rustfmt from sorting them.

// Why a command failed, and the line it prints.
pub mod error;
// Figures for tables and sizes on the command line.
pub mod format;
// The other process of a run.
pub mod peer;
// The report `inspect` prints.
pub mod inspect_report;
