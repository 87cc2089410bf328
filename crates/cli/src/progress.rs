//! Progress on stderr for long operations, only when stderr is a terminal
//! (so pipes, logs and tests stay quiet).

use std::io::{self, IsTerminal};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A spinner that names the current step, turning into a bar when a step
/// reports how far it is. Does nothing when stderr is not a terminal.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    pub fn start(message: &str) -> Progress {
        if !io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(spinner_style());
        bar.set_message(message.to_string());
        bar.enable_steady_tick(Duration::from_millis(120));
        Progress(Some(bar))
    }

    /// A new step: back to a spinner with this message.
    pub fn step(&self, message: &str) {
        if let Some(bar) = &self.0 {
            bar.set_style(spinner_style());
            bar.unset_length();
            bar.set_position(0);
            bar.set_message(message.to_string());
        }
    }

    /// `done` of `total` units in the current step.
    pub fn position(&self, message: &str, done: u64, total: u64) {
        let Some(bar) = &self.0 else { return };
        if bar.length() != Some(total) {
            bar.set_style(
                ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({eta} left)")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar.set_length(total);
            bar.set_message(message.to_string());
        }
        bar.set_position(done);
    }

    pub fn finish(self) {
        if let Some(bar) = self.0 {
            bar.finish_and_clear();
        }
    }
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}
