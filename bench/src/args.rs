//! The small argument parsing the single-purpose bench binaries share (the larger ones use
//! clap).

/// The next argument as a positive whole number (`_` separators allowed), or an error naming
/// the flag `name` it belongs to, with the binary's `usage`.
pub fn positive(args: &mut impl Iterator<Item = String>, name: &str, usage: &str) -> Result<u64, String> {
    args.next()
        .and_then(|v| v.replace('_', "").parse().ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{name} needs a positive number\n{usage}"))
}
