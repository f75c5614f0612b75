//! The spinner on stderr saying what runs while a table is measured.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A spinner saying what runs, ticking on its own.
pub fn spinner() -> ProgressBar {
    let spinner = ProgressBar::new_spinner();
    spinner.set_style(
        ProgressStyle::with_template("{spinner} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    spinner.enable_steady_tick(Duration::from_millis(200));
    spinner
}
