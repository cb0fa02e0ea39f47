//! The progress bar: the current level, target and repeat, and an ETA.
//!
//! Progress is counted in process-runs (P per run), so a repeat at 80
//! concurrency weighs 80 times one at 1: their wall times differ by about
//! that much once the server is saturated, which keeps the ETA honest on
//! the levels that dominate a full run. It draws on stderr, so stdout
//! carries only the report; `--quiet` hides it and the notes.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The bar, or nothing when quiet.
pub struct Progress {
    bar: ProgressBar,
    quiet: bool,
}

// === impl Progress ===

impl Progress {
    /// A bar for `total` process-runs; hidden when `quiet`.
    pub fn new(total: u64, quiet: bool) -> Progress {
        let bar = if quiet {
            ProgressBar::hidden()
        } else {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] [{bar:30}] {percent:>3}% ETA {eta_precise}  {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        };
        Progress { bar, quiet }
    }

    /// Shows what runs now.
    pub fn running(&self, concurrency: usize, target: &str, repeat: usize, repeats: usize) {
        self.bar.set_message(format!(
            "P={concurrency} {target} repeat {}/{repeats}",
            repeat + 1
        ));
    }

    /// Counts a finished run of `processes` processes.
    pub fn finished(&self, processes: usize) {
        self.bar.inc(processes as u64);
    }

    /// A line above the bar on stderr, unless quiet.
    pub fn note(&self, text: &str) {
        if !self.quiet {
            self.bar.suspend(|| eprintln!("{text}"));
        }
    }

    /// Prints report text on stdout without tearing the bar.
    pub fn print(&self, text: &str) {
        self.bar.suspend(|| print!("{text}"));
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
