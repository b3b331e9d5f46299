//! `engram`: run a node, administer a cluster, read and write memory, verify the audit chain,
//! and run the local failover demo. See `engram --help`.
//!
//! Must not depend on anything but the `engram_cli` library, its command line and the
//! allocator: every behaviour lives there, where the tests can reach it. Errors end the process with a message
//! and the documented exit code, never a panic.

use std::process::ExitCode;

use clap::Parser;
use engram_cli::cli::Cli;
use engram_cli::{commands, output};

/// jemalloc rather than glibc's malloc: under a write load glibc's allocator (its free-list
/// consolidation above all) took about a fifth of the machine; with jemalloc the same build
/// wrote 8-20% more per second with 7-17% less CPU per write (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version are not errors; usage errors exit 1 so that 2 keeps meaning
            // "the audit chain does not verify".
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let json = cli.json;
    // `serve` needs a multi-thread runtime; the client commands are happy with one too.
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // A panic is a bug, but the user still gets one line and exit code 1, not a backtrace;
    // unwinding drops whatever the command owned (the demo's child processes are killed).
    std::panic::set_hook(Box::new(|info| {
        eprintln!("error: internal error (this is a bug in engram): {info}");
    }));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(commands::run(cli))
    }))
    .unwrap_or_else(|_| Err(anyhow::anyhow!("the command panicked")));
    // Dropping the runtime waits for blocking tasks; the work is done, so don't wait long.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader closed the pipe (`engram … | head`): it has what it wanted.
        Err(err) if output::is_stdout_closed(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            if json && !commands::already_reported(&err) {
                let _ = commands::print_json(&commands::error_json(&err));
            }
            ExitCode::from(commands::exit_code(&err))
        }
    }
}
