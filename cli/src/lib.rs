#![doc = include_str!("../README.md")]
//! # This crate's library
//!
//! The parts of the `tensorshare` command that are more than command-line
//! handling, in a library so that their doctests run and the fuzz targets
//! (`fuzz/`) reach them: [`inspect_report`], how `tensorshare inspect`
//! prints a decoded file.
//!
//! The runtime a program embeds is the `tensorshare` crate; this one adds
//! the command's dependencies (serde_json here; clap, indicatif and
//! signal-hook for the binary) on top of it.

pub mod inspect_report;
