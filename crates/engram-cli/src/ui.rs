//! Progress display on stderr: indicatif bars and spinners on a terminal, plain phase lines
//! when stderr is redirected, nothing at all with `--json` (stdout then carries one document).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

#[derive(Clone, Copy, Debug)]
pub struct Ui {
    /// Animated bars and spinners (stderr is a terminal, no `--json`).
    bars: bool,
    /// Plain progress lines (no `--json`).
    lines: bool,
}

impl Ui {
    pub fn new(json: bool) -> Ui {
        let tty = std::io::stderr().is_terminal();
        Ui {
            bars: !json && tty,
            lines: !json,
        }
    }

    /// Bars on a terminal and nothing otherwise: for commands whose result on stdout says it
    /// all, where progress lines in a redirected stderr would only be noise.
    pub fn bars_only(json: bool) -> Ui {
        Ui {
            lines: false,
            ..Ui::new(json)
        }
    }

    /// A spinner for a phase of unknown length.
    pub fn spinner(&self, message: impl Into<String>) -> ProgressBar {
        let message = message.into();
        if !self.bars {
            if self.lines {
                eprintln!("… {message}");
            }
            return ProgressBar::hidden();
        }
        let pb = ProgressBar::new_spinner().with_message(message);
        pb.set_style(spinner_style());
        pb.enable_steady_tick(Duration::from_millis(100));
        pb
    }

    /// A bar over `len` units, rendered with `template` (indicatif syntax).
    pub fn bar(&self, len: u64, template: &str, message: impl Into<String>) -> ProgressBar {
        let message = message.into();
        if !self.bars {
            if self.lines {
                eprintln!("… {message}");
            }
            return ProgressBar::hidden();
        }
        let pb = ProgressBar::new(len).with_message(message);
        let style = ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        pb.set_style(style);
        pb.enable_steady_tick(Duration::from_millis(100));
        pb
    }

    /// Ends a phase with a final line (kept on screen).
    pub fn done(&self, pb: &ProgressBar, message: impl Into<String>) {
        let message = message.into();
        if self.bars {
            pb.set_style(done_style());
            pb.finish_with_message(message);
        } else if self.lines {
            eprintln!("✓ {message}");
        }
    }

    /// Ends a phase that failed.
    pub fn failed(&self, pb: &ProgressBar, message: impl Into<String>) {
        let message = message.into();
        if self.bars {
            pb.set_style(failed_style());
            pb.finish_with_message(message);
        } else if self.lines {
            eprintln!("✗ {message}");
        }
    }

    /// A line of prose outside any phase.
    pub fn note(&self, message: impl AsRef<str>) {
        if self.lines {
            eprintln!("{}", message.as_ref());
        }
    }
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner:.cyan} {msg} {elapsed:.dim}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

fn done_style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix:.green}✓ {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

fn failed_style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix:.red}✗ {msg}").unwrap_or_else(|_| ProgressStyle::default_spinner())
}
