//! `audit-verify`: how fast an audit chain is verified, part by part.
//!
//! Builds a synthetic, valid chain (genesis trusting three keys, then empty transactions
//! attested by the keys in turn) and measures, over all of it:
//!
//! * links: `ChainVerifier` in deferred mode, which is every per-entry check (index,
//!   `prev_hash`, tx order and time, key validity) and no signature;
//! * signatures one by one with `verify_strict` on one thread, what an inline check pays;
//! * signatures through `ChainVerifier::verify_deferred` (batched), on one thread and on all;
//! * `verify_export` end to end over an in-memory export of the chain: decoding, links,
//!   Merkle tree, datoms records and the batched signatures together.
//!
//! Usage: `audit-verify [--entries N] [--json]`. See docs/benchmarks.md for the targets.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use ed25519_dalek::{Signature, VerifyingKey};
use engram_audit::{
    Attestation, AuditEntry, ChainVerifier, Checkpoint, EntryKind, GENESIS_PREV_HASH, KeyId, NodeKey,
    SignedEntry, tx_content_hash,
};
use engram_types::{Hash, TxId};
use engram_verify::{ExportWriter, Record, VerifyOptions, verify_export};
use serde_json::json;

const DEFAULT_ENTRIES: u64 = 1_000_000;
const TARGET_LINKS_PER_S: f64 = 1_000_000.0;
const TARGET_SIGNATURES_PER_S: f64 = 40_000.0;

struct Args {
    entries: u64,
    json: bool,
}

const USAGE: &str = "usage: audit-verify [--entries N] [--json]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        entries: DEFAULT_ENTRIES,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (flag, inline_value) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
            None => (arg, None),
        };
        match flag.as_str() {
            "--entries" => {
                let value = inline_value
                    .or_else(|| it.next())
                    .ok_or_else(|| format!("--entries needs a number\n{USAGE}"))?;
                args.entries = value
                    .replace('_', "")
                    .parse()
                    .map_err(|e| format!("--entries {value}: {e}\n{USAGE}"))?;
                if args.entries < 2 {
                    return Err("--entries must be at least 2 (genesis and one transaction)".into());
                }
            }
            "--json" => args.json = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(args)
}

/// The synthetic chain and what it cost to make.
struct Chain {
    entries: Vec<SignedEntry>,
    hashes: Vec<Hash>,
    hashing: Duration,
    signing: Duration,
}

/// Entry hashes are computed in order, since each names the one before; the signatures, the
/// expensive part, are then made on every thread.
fn build_chain(len: u64, keys: &[NodeKey; 3], threads: usize) -> Chain {
    let started = Instant::now();
    let mut entries = Vec::with_capacity(len as usize);
    let mut hashes = Vec::with_capacity(len as usize);
    let mut prev = GENESIS_PREV_HASH;
    for index in 1..=len {
        let genesis = index == 1;
        let entry = AuditEntry {
            index,
            tx: TxId(index),
            tx_time_ns: 1_000 * index as i64,
            namespace: if genesis { String::new() } else { "bench".into() },
            kind: if genesis {
                EntryKind::Membership {
                    members: keys.iter().zip(1..).map(|(k, id)| (id, k.public())).collect(),
                }
            } else {
                // No datoms, so the export needs no datom bytes and its datoms check is cheap:
                // the figures are about the chain.
                EntryKind::Transaction {
                    content_hash: tx_content_hash(&[]),
                    datoms: 0,
                    author: None,
                }
            },
            prev_hash: prev,
            state_root: None,
        };
        prev = entry.hash();
        hashes.push(prev);
        entries.push(entry);
    }
    let hashing = started.elapsed();

    let started = Instant::now();
    let chunk = hashes.len().div_ceil(threads.max(1));
    let signatures: Vec<[u8; 64]> = std::thread::scope(|scope| {
        let workers: Vec<_> = hashes
            .chunks(chunk)
            .enumerate()
            .map(|(n, part)| {
                scope.spawn(move || {
                    part.iter()
                        .enumerate()
                        .map(|(i, hash)| signer(keys, (n * chunk + i) as u64 + 1).sign(hash.as_bytes()))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| match worker.join() {
                Ok(part) => part,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    let entries = entries
        .into_iter()
        .zip(signatures)
        .map(|(entry, signature)| SignedEntry {
            attestation: Some(Attestation {
                key_id: signer(keys, entry.index).key_id(),
                signature,
            }),
            entry,
        })
        .collect();
    Chain {
        entries,
        hashes,
        hashing,
        signing: started.elapsed(),
    }
}

/// Who attests entry `index`: the keys in turn.
fn signer(keys: &[NodeKey; 3], index: u64) -> &NodeKey {
    &keys[(index % 3) as usize]
}

fn export(chain: &Chain) -> std::io::Result<Vec<u8>> {
    let len = chain.entries.len() as u64;
    // About 200 bytes an entry and 17 for its empty datoms record.
    let mut w = ExportWriter::new(Vec::with_capacity(chain.entries.len() * 224))?;
    w.write(&Record::Header {
        origin: Checkpoint::origin_for(&chain.hashes[0]),
        node_id: 1,
        head_index: len,
    })?;
    for signed in &chain.entries {
        w.write(&Record::Entry(signed.encode()))?;
        if matches!(signed.entry.kind, EntryKind::Transaction { .. }) {
            w.write(&Record::Datoms {
                index: signed.entry.index,
                datoms: Vec::new(),
            })?;
        }
    }
    w.write(&Record::End {
        entries: len,
        checkpoints: 0,
    })?;
    w.into_inner()
}

/// Pushes the whole chain into a deferred verifier: the link checks, with every signature left
/// queued.
fn push_links(chain: &Chain) -> Result<(ChainVerifier, Duration), String> {
    let mut v = ChainVerifier::new().with_deferred_signatures();
    let started = Instant::now();
    for signed in &chain.entries {
        v.push(signed)
            .map_err(|e| format!("the synthetic chain does not link: {e}"))?;
    }
    Ok((v, started.elapsed()))
}

fn verify_queue(mut v: ChainVerifier, threads: usize) -> Result<Duration, String> {
    let started = Instant::now();
    let errors = v.verify_deferred(threads);
    let elapsed = started.elapsed();
    match errors.first() {
        Some(e) => Err(format!("a signature of the synthetic chain does not verify: {e}")),
        None => Ok(elapsed),
    }
}

fn verify_one_by_one(chain: &Chain, keys: &[NodeKey; 3]) -> Result<Duration, String> {
    // Keys decoded once, as the batch does, so that the comparison is of the signature checks.
    let decoded: Vec<(KeyId, VerifyingKey)> = keys
        .iter()
        .map(|k| {
            VerifyingKey::from_bytes(&k.public().0)
                .map(|vk| (k.key_id(), vk))
                .map_err(|e| format!("key {}: {e}", k.key_id()))
        })
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    for (signed, hash) in chain.entries.iter().zip(&chain.hashes) {
        let Some(attestation) = &signed.attestation else {
            return Err(format!("entry {}: no attestation", signed.entry.index));
        };
        let Some((_, key)) = decoded.iter().find(|(id, _)| *id == attestation.key_id) else {
            return Err(format!("entry {}: unknown signer", signed.entry.index));
        };
        key.verify_strict(hash.as_bytes(), &Signature::from_bytes(&attestation.signature))
            .map_err(|e| format!("entry {}: {e}", signed.entry.index))?;
    }
    Ok(started.elapsed())
}

fn rate(count: u64, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(1e-9)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The 1-minute load average: other work on the machine lowers every figure.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn run(args: &Args) -> Result<(), String> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load_at_start = load_average();
    let keys = [11u8, 12, 13].map(|seed| NodeKey::from_seed([seed; 32]));
    let n = args.entries;
    if !args.json {
        eprintln!("building a chain of {n} entries on {threads} threads...");
    }
    let chain = build_chain(n, &keys, threads);

    if !args.json {
        eprintln!("links...");
    }
    let (verifier, links) = push_links(&chain)?;
    if !args.json {
        eprintln!("signatures, batched, {threads} threads...");
    }
    let batched = verify_queue(verifier, threads)?;
    if !args.json {
        eprintln!("signatures, batched, 1 thread...");
    }
    let batched_one = verify_queue(push_links(&chain)?.0, 1)?;
    if !args.json {
        eprintln!("signatures, verify_strict one by one...");
    }
    let single = verify_one_by_one(&chain, &keys)?;

    let bytes = export(&chain).map_err(|e| format!("writing the export: {e}"))?;
    if !args.json {
        eprintln!("verify_export over {} MB...", bytes.len() >> 20);
    }
    let started = Instant::now();
    let report = verify_export(&bytes[..], &VerifyOptions::default(), |_, _| {})
        .map_err(|e| format!("verify_export: {e}"))?;
    let end_to_end = started.elapsed();
    if !report.ok() || report.entries != n {
        return Err(format!(
            "verify_export refused the synthetic export ({} entries): {:?}",
            report.entries,
            report.failures.first()
        ));
    }
    let load_at_end = load_average();

    let links_per_s = rate(n, links);
    let batched_per_s = rate(n, batched);
    let figures = json!({
        "benchmark": "audit-verify",
        "entries": n,
        "machine": {
            "cores": threads,
            "cpu": cpu_model(),
            "load_average_at_start": load_at_start,
            "load_average_at_end": load_at_end,
        },
        "build": {
            "hashing_s": chain.hashing.as_secs_f64(),
            "signing_s": chain.signing.as_secs_f64(),
            "signing_threads": threads,
        },
        "links_per_s": links_per_s,
        "signatures_per_s_strict_1_thread": rate(n, single),
        "signatures_per_s_batched_1_thread": rate(n, batched_one),
        "signatures_per_s_batched": batched_per_s,
        "batched_threads": threads,
        "verify_export_entries_per_s": rate(n, end_to_end),
        "verify_export_mib_per_s": rate(bytes.len() as u64, end_to_end) / f64::from(1u32 << 20),
        "verify_export_s": end_to_end.as_secs_f64(),
        "export_bytes": bytes.len(),
        "targets": {
            "links_per_s": TARGET_LINKS_PER_S,
            "links_met": links_per_s >= TARGET_LINKS_PER_S,
            "signatures_per_s": TARGET_SIGNATURES_PER_S,
            "signatures_met": batched_per_s >= TARGET_SIGNATURES_PER_S,
        },
    });
    if args.json {
        println!("{figures}");
        return Ok(());
    }
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    println!(
        "audit-verify: {n} entries on {threads} cores ({}), load average {} at start, {} at end",
        cpu_model(),
        load_at_start.map_or("unknown".into(), |l| format!("{l:.2}")),
        load_at_end.map_or("unknown".into(), |l| format!("{l:.2}")),
    );
    println!(
        "  chain built: hashes {:.2} s (sequential), signatures {:.2} s ({threads} threads)",
        chain.hashing.as_secs_f64(),
        chain.signing.as_secs_f64()
    );
    println!(
        "  links (no signatures)                {:>12.0} entries/s  (target {:.0}: {})",
        links_per_s,
        TARGET_LINKS_PER_S,
        met(links_per_s >= TARGET_LINKS_PER_S)
    );
    println!(
        "  signatures, verify_strict, 1 thread  {:>12.0} /s",
        rate(n, single)
    );
    println!(
        "  signatures, batched, 1 thread        {:>12.0} /s",
        rate(n, batched_one)
    );
    println!(
        "  signatures, batched, {threads} threads       {:>12.0} /s  (target {:.0}: {})",
        batched_per_s,
        TARGET_SIGNATURES_PER_S,
        met(batched_per_s >= TARGET_SIGNATURES_PER_S)
    );
    println!(
        "  verify_export end to end             {:>12.0} entries/s  ({:.1} MiB/s, {:.2} s for {} MiB)",
        rate(n, end_to_end),
        rate(bytes.len() as u64, end_to_end) / f64::from(1u32 << 20),
        end_to_end.as_secs_f64(),
        bytes.len() >> 20
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("audit-verify: {message}");
            ExitCode::FAILURE
        }
    }
}
