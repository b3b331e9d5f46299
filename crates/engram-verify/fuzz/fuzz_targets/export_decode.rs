//! `verify_export` on arbitrary bytes: it must return a report or a `VerifyError`, never panic,
//! whatever the input, in both stop-at-first-failure and `all` modes.
//!
//! Input: an export file. Random bytes almost never start with the 20-byte magic and version,
//! which would leave the fuzzer stuck at `OpenError::NotAnExport`; so an input that does not
//! start with `MAGIC` gets `MAGIC` and format version 1 prepended and is read as the records
//! that follow the file header. An input that does start with `MAGIC` (the seed exports, and
//! mutations of them) is used as it is, so the header and version checks are fuzzed too.
//!
//! Properties checked beyond "no panic":
//! * with a valid header (magic + version 1) verification never fails to run: the input is a
//!   byte slice, so there is no I/O error, and every damaged record is a `Failure` in the report;
//! * `all: false` reports at most one failure, and the two modes agree on whether the export
//!   is OK and on the first failure (up to it, both modes take the same path);
//! * `progress` sees a non-decreasing byte offset.
//!
//! A third pass anchors the check on the genesis key of the seed exports (`NodeKey::from_seed
//! ([7; 32])`, see `src/bin/make_seeds.rs`) and pins the first checkpoint in the input that
//! parses, which reaches the genesis-key and pin checks.

#![no_main]

use engram_audit::{NodeKey, SignedCheckpoint};
use engram_verify::format::{ExportReader, MAGIC, Next};
use engram_verify::{EXPORT_FORMAT_VERSION, Record, Report, VerifyOptions, verify_export};
use libfuzzer_sys::fuzz_target;

fn with_header(data: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if data.starts_with(MAGIC) {
        data.into()
    } else {
        let mut out = Vec::with_capacity(MAGIC.len() + 2 + data.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&EXPORT_FORMAT_VERSION.to_be_bytes());
        out.extend_from_slice(data);
        out.into()
    }
}

fn run(input: &[u8], options: &VerifyOptions) -> Option<Report> {
    let mut last_offset = 0u64;
    let result = verify_export(input, options, |offset, _entries| {
        assert!(offset >= last_offset, "progress went back from byte {last_offset} to {offset}");
        last_offset = offset;
    });
    let header_ok = input.len() >= MAGIC.len() + 2
        && input[MAGIC.len()..MAGIC.len() + 2] == EXPORT_FORMAT_VERSION.to_be_bytes();
    match result {
        Ok(report) => {
            if !options.all {
                assert!(report.failures.len() <= 1, "all: false reported {:?}", report.failures);
            }
            assert_eq!(report.ok(), report.failures.is_empty());
            Some(report)
        }
        Err(e) => {
            assert!(!header_ok, "an export with a valid header failed to verify at all: {e}");
            None
        }
    }
}

/// The first checkpoint record of the input that parses, to be pinned.
fn first_checkpoint(input: &[u8]) -> Option<SignedCheckpoint> {
    let mut reader = ExportReader::open(input).ok()?;
    while let Ok(Next::Record { record, .. }) = reader.next_record() {
        if let Record::Checkpoint(text) = record
            && let Ok(note) = SignedCheckpoint::parse_bytes(&text)
        {
            return Some(note);
        }
    }
    None
}

fuzz_target!(|data: &[u8]| {
    let input = with_header(data);
    let first = run(&input, &VerifyOptions::default());
    let every = run(
        &input,
        &VerifyOptions {
            all: true,
            ..VerifyOptions::default()
        },
    );
    match (&first, &every) {
        (Some(first), Some(every)) => {
            assert_eq!(
                first.ok(),
                every.ok(),
                "the modes disagree: first {:?}, all {:?}",
                first.failures,
                every.failures
            );
            if first.ok() {
                assert_eq!(first.entries, every.entries);
                assert_eq!(first.tree_root, every.tree_root);
                assert_eq!(first.checkpoints, every.checkpoints);
            }
            // Up to the first failure both modes take the same path, so they must find the
            // same first failure (later ones only `all: true` goes on to look for).
            if let (Some(a), Some(b)) = (first.failures.first(), every.failures.first()) {
                assert_eq!(a, b, "the first failure differs between the modes");
            }
        }
        (None, None) => return,
        _ => panic!("only one mode could open the export"),
    }

    let anchored = VerifyOptions {
        all: true,
        genesis_keys: Some(vec![NodeKey::from_seed([7; 32]).public()]),
        pin: first_checkpoint(&input),
    };
    run(&input, &anchored);
});
