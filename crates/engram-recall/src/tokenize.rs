//! Words of a text: what the text index stores and what a query looks up.

/// Longer runs of letters and digits (hashes, base64) are not words anyone searches for, and
/// would only grow the index.
pub const MAX_TOKEN_CHARS: usize = 64;

/// The words of `text`, in order, repeats kept: maximal runs of Unicode letters and digits,
/// lower-cased. Everything else separates words.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut chars = 0usize;
    let mut flush = |word: &mut String, chars: &mut usize| {
        if *chars > 0 && *chars <= MAX_TOKEN_CHARS {
            out.push(std::mem::take(word));
        } else {
            word.clear();
        }
        *chars = 0;
    };
    for c in text.chars() {
        if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
            chars += 1;
        } else {
            flush(&mut word, &mut chars);
        }
    }
    flush(&mut word, &mut chars);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_lower_cased_runs_of_letters_and_digits() {
        assert_eq!(
            tokens("The deploy-key for EU-west2 failed; retry at 03:00."),
            [
                "the", "deploy", "key", "for", "eu", "west2", "failed", "retry", "at", "03", "00"
            ]
        );
    }

    #[test]
    fn letters_beyond_ascii_are_words_too() {
        assert_eq!(
            tokens("Grüße aus Köln — ÉTÉ 東京"),
            ["grüße", "aus", "köln", "été", "東京"]
        );
    }

    #[test]
    fn nothing_to_index_gives_no_words() {
        assert!(tokens("").is_empty());
        assert!(tokens(" -- ... !!").is_empty());
    }

    #[test]
    fn runs_longer_than_a_word_are_dropped() {
        let long = "a".repeat(MAX_TOKEN_CHARS + 1);
        let edge = "b".repeat(MAX_TOKEN_CHARS);
        assert_eq!(
            tokens(&format!("x {long} y {edge}")),
            ["x".to_string(), "y".into(), edge]
        );
    }
}
