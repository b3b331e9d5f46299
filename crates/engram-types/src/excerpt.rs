//! Quoting caller input in error messages.
//!
//! An error message travels back to the caller in a gRPC status, which rides in HTTP/2 headers
//! of a few KiB. Quoting a whole oversize input there makes the error larger than the input
//! and can turn an INVALID_ARGUMENT into a header-size failure, so messages quote a bounded
//! prefix and the input's length instead.

use std::borrow::Cow;
use std::fmt;

/// At most this many bytes of (escaped) caller input are quoted in an error message.
pub const EXCERPT_MAX_BYTES: usize = 64;

/// `input` as an error message quotes it: Rust-string-quoted and escaped, at most
/// [`EXCERPT_MAX_BYTES`] bytes of escaped text, followed by `…(N bytes)` (N the input's whole
/// length) when it was cut.
pub fn excerpt(input: &str) -> Excerpt<'_> {
    Excerpt(input)
}

/// See [`excerpt`].
#[derive(Clone, Copy, Debug)]
pub struct Excerpt<'a>(&'a str);

impl fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `char::escape_debug` is at least as long as what `{:?}` writes for the char inside a
        // string (it also escapes `'`), so the quoted prefix stays within the bound.
        let mut escaped_bytes = 0;
        let mut end = self.0.len();
        for (i, c) in self.0.char_indices() {
            escaped_bytes += c.escape_debug().len();
            if escaped_bytes > EXCERPT_MAX_BYTES {
                end = i;
                break;
            }
        }
        write!(f, "{:?}", &self.0[..end])?;
        if end < self.0.len() {
            write!(f, "…({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

/// `text` cut to at most `max_bytes` bytes at a char boundary, followed by `…(N bytes)` (N the
/// whole length) when it was cut; unchanged when it fits.
pub fn clip(text: &str, max_bytes: usize) -> Cow<'_, str> {
    if text.len() <= max_bytes {
        return Cow::Borrowed(text);
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…({} bytes)", &text[..end], text.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_input_is_quoted_whole() {
        assert_eq!(excerpt("team-a/x").to_string(), "\"team-a/x\"");
        assert_eq!(excerpt("a\nb").to_string(), "\"a\\nb\"");
        assert_eq!(excerpt("").to_string(), "\"\"");
        let exact = "a".repeat(EXCERPT_MAX_BYTES);
        assert_eq!(excerpt(&exact).to_string(), format!("{exact:?}"));
    }

    #[test]
    fn long_input_is_cut_and_its_length_given() {
        let long = "a".repeat(1 << 20);
        let shown = excerpt(&long).to_string();
        assert_eq!(
            shown,
            format!("\"{}\"…(1048576 bytes)", "a".repeat(EXCERPT_MAX_BYTES))
        );
        // Characters that escape to many bytes count by their escaped length.
        let controls = "\u{1}".repeat(1000);
        let shown = excerpt(&controls).to_string();
        assert!(
            shown.len() <= EXCERPT_MAX_BYTES + 2 + "…(1000 bytes)".len(),
            "{shown}"
        );
        assert!(shown.ends_with("…(1000 bytes)"), "{shown}");
        // Multi-byte characters are never split.
        let wide = "ä".repeat(100);
        assert!(excerpt(&wide).to_string().starts_with("\"ää"));
    }

    #[test]
    fn clip_cuts_at_a_char_boundary() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("abcdef", 3), "abc…(6 bytes)");
        // 'ä' is two bytes: a cut at byte 3 would split the second one.
        assert_eq!(clip("äää", 3), "ä…(6 bytes)");
    }
}
