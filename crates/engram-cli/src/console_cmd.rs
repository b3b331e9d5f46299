//! `engram console`: binds the operator console (`engram_console`) and prints the address to
//! open, then serves it until Ctrl-C.

use anyhow::Result;
use engram_client::Client;
use serde_json::json;

use crate::cli::ConsoleArgs;
use crate::output::{outln, print_json};

pub async fn console(client: Client, args: ConsoleArgs, json: bool) -> Result<()> {
    let endpoints = client.endpoints();
    let console = engram_console::Console::bind(args.listen, client).await?;
    let url = console.url();
    if json {
        print_json(&json!({ "url": url, "endpoints": endpoints }))?;
    } else {
        outln!("Engram console for {}: open {url}", endpoints.join(", "))?;
        outln!("(read-only; the address carries the page's token; Ctrl-C stops it)")?;
    }
    console
        .serve(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
