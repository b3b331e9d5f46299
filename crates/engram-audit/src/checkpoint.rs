//! Signed checkpoints: a cluster's statement that its audit log had `size` entries with Merkle
//! root `root` at transaction time `tx_time_ns`, written as a C2SP tlog-checkpoint inside a
//! C2SP signed-note, so that off-the-shelf transparency tooling (witnesses, monitors, the Go
//! `sumdb/note` and `transparency-dev` libraries) can read, cosign and check it:
//!
//! ```text
//! engram/<16 bytes of the genesis entry hash, hex>
//! <size>
//! <base64 root>
//! tx-time-ns <i64>
//!
//! — engram-<key id hex> <base64(4-byte key hash || 64-byte Ed25519 signature)>
//! ```
//!
//! The first four lines are the signed text. Parsing is strict and canonical: every note that
//! parses prints back byte for byte, so a checkpoint has exactly one text and two parties
//! comparing texts compare statements.

use std::collections::HashSet;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use engram_types::Hash;
use sha2::{Digest, Sha256};

use crate::keys::{NodeKey, PublicKey};

/// The signed-note signature-type byte for Ed25519; part of the key hash so that the same key
/// used for another signature type gets a different key hash.
const ED25519_SIGNATURE_TYPE: u8 = 0x01;
const SIGNATURE_PREFIX: &str = "— ";
const TX_TIME_PREFIX: &str = "tx-time-ns ";
/// The signed-note spec asks verifiers to cap the signatures they read (and to accept at least
/// 16); 100 leaves room for a large witness set while bounding the work a note can demand.
const MAX_SIGNATURES: usize = 100;
const BLANK_LINE: usize = 5;
const FIRST_SIGNATURE_LINE: usize = 6;

/// What a cluster's audit log looked like at one transaction time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Names the log. Must be non-empty, contain no control character and have no leading or
    /// trailing whitespace; otherwise the signed text will not parse back.
    pub origin: String,
    pub size: u64,
    pub root: Hash,
    pub tx_time_ns: i64,
}

impl Checkpoint {
    /// The origin of a cluster's log. The genesis entry hash is fixed for the cluster's whole
    /// life and differs between clusters, so it names the log without a registry; 16 bytes
    /// keep the line short while leaving collisions out of reach.
    pub fn origin_for(genesis_hash: &Hash) -> String {
        format!("engram/{}", hex::encode(&genesis_hash.as_bytes()[..16]))
    }

    /// The four lines that are signed, each ending in `\n`.
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\n{TX_TIME_PREFIX}{}\n",
            self.origin,
            self.size,
            STANDARD.encode(self.root.as_bytes()),
            self.tx_time_ns
        )
    }

    pub fn sign(&self, key: &NodeKey) -> SignedCheckpoint {
        SignedCheckpoint {
            checkpoint: self.clone(),
            signatures: vec![note_signature(&self.body(), key)],
        }
    }
}

/// One signature line of a note. Lines from keys Engram does not know (witness cosignatures,
/// other signature types) are kept as they are so that the note prints back unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteSignature {
    pub name: String,
    pub key_hash: [u8; 4],
    /// The bytes after the key hash: 64 for an Ed25519 signature, anything for other types.
    pub signature: Vec<u8>,
}

/// A checkpoint and the signature lines of its note, in note order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedCheckpoint {
    pub checkpoint: Checkpoint,
    pub signatures: Vec<NoteSignature>,
}

impl SignedCheckpoint {
    /// Notes arrive from peers and witnesses; anything larger than this is refused before any
    /// parsing work is done.
    pub const MAX_NOTE_BYTES: usize = 64 * 1024;

    pub fn to_text(&self) -> String {
        let mut text = self.checkpoint.body();
        text.push('\n');
        for sig in &self.signatures {
            let mut blob = Vec::with_capacity(4 + sig.signature.len());
            blob.extend_from_slice(&sig.key_hash);
            blob.extend_from_slice(&sig.signature);
            text.push_str(SIGNATURE_PREFIX);
            text.push_str(&sig.name);
            text.push(' ');
            text.push_str(&STANDARD.encode(&blob));
            text.push('\n');
        }
        text
    }

    pub fn parse_bytes(bytes: &[u8]) -> Result<SignedCheckpoint, CheckpointError> {
        if bytes.len() > Self::MAX_NOTE_BYTES {
            return Err(CheckpointError::TooLarge {
                len: bytes.len(),
                max: Self::MAX_NOTE_BYTES,
            });
        }
        let text = std::str::from_utf8(bytes).map_err(|e| {
            let before = bytes.get(..e.valid_up_to()).unwrap_or(bytes);
            CheckpointError::NotUtf8 {
                line: line_count(before) + 1,
            }
        })?;
        Self::parse(text)
    }

    pub fn parse(text: &str) -> Result<SignedCheckpoint, CheckpointError> {
        if text.len() > Self::MAX_NOTE_BYTES {
            return Err(CheckpointError::TooLarge {
                len: text.len(),
                max: Self::MAX_NOTE_BYTES,
            });
        }
        if text.is_empty() {
            return Err(CheckpointError::Empty);
        }
        check_characters(text.as_bytes())?;
        let Some(content) = text.strip_suffix('\n') else {
            return Err(CheckpointError::MissingTrailingNewline {
                line: line_count(text.as_bytes()) + 1,
            });
        };
        let mut lines = content.split('\n');

        let origin = lines.next().unwrap_or_default();
        if origin.is_empty() {
            return Err(CheckpointError::EmptyOrigin { line: 1 });
        }
        if origin.starts_with(char::is_whitespace) || origin.ends_with(char::is_whitespace) {
            return Err(CheckpointError::OriginWhitespace { line: 1 });
        }
        let size_line = body_line(lines.next(), 2)?;
        let root_line = body_line(lines.next(), 3)?;
        let tx_time_line = body_line(lines.next(), 4)?;

        let size = size_line
            .parse::<u64>()
            .ok()
            .filter(|n| n.to_string() == size_line)
            .ok_or(CheckpointError::BadSize { line: 2 })?;
        let root_bytes = STANDARD
            .decode(root_line)
            .map_err(|_| CheckpointError::BadRootBase64 { line: 3 })?;
        let root = Hash::from_slice(&root_bytes).ok_or(CheckpointError::BadRootLength {
            line: 3,
            len: root_bytes.len(),
        })?;
        let tx_time_text = tx_time_line
            .strip_prefix(TX_TIME_PREFIX)
            .ok_or(CheckpointError::MissingTxTime { line: 4 })?;
        let tx_time_ns = tx_time_text
            .parse::<i64>()
            .ok()
            .filter(|n| n.to_string() == tx_time_text)
            .ok_or(CheckpointError::BadTxTime { line: 4 })?;

        match lines.next() {
            Some("") => {}
            Some(line) if !line.starts_with(SIGNATURE_PREFIX) => {
                return Err(CheckpointError::ExtraExtension { line: BLANK_LINE });
            }
            _ => return Err(CheckpointError::MissingBlankLine { line: BLANK_LINE }),
        }

        let mut signatures = Vec::new();
        for (i, line) in lines.enumerate() {
            let number = FIRST_SIGNATURE_LINE + i;
            if i >= MAX_SIGNATURES {
                return Err(CheckpointError::TooManySignatures {
                    line: number,
                    max: MAX_SIGNATURES,
                });
            }
            signatures.push(parse_signature_line(line, number)?);
        }
        if signatures.is_empty() {
            return Err(CheckpointError::NoSignatures {
                line: FIRST_SIGNATURE_LINE,
            });
        }

        Ok(SignedCheckpoint {
            checkpoint: Checkpoint {
                origin: origin.to_owned(),
                size,
                root,
                tx_time_ns,
            },
            signatures,
        })
    }

    /// Adds `key`'s signature unless the note already carries a valid one from it, so that a
    /// checkpoint passed around a cluster can be cosigned by each node without growing.
    pub fn cosign(&mut self, key: &NodeKey) {
        if self.verify_by(&key.public()) {
            return;
        }
        let sig = note_signature(&self.checkpoint.body(), key);
        self.signatures.push(sig);
    }

    /// Whether the note carries a valid signature by `key`. Lines are matched on both name and
    /// key hash, as the signed-note spec requires; lines of unknown keys are skipped.
    pub fn verify_by(&self, key: &PublicKey) -> bool {
        self.verified_by(self.checkpoint.body().as_bytes(), key)
    }

    /// The keys among `keys` that signed this note, in input order, each once: a quorum check
    /// counts distinct signers, not signature lines.
    pub fn signers<'a>(&self, keys: impl IntoIterator<Item = &'a PublicKey>) -> Vec<PublicKey> {
        let body = self.checkpoint.body();
        let mut seen = HashSet::new();
        keys.into_iter()
            .filter(|key| seen.insert(**key))
            .filter(|key| self.verified_by(body.as_bytes(), key))
            .copied()
            .collect()
    }

    fn verified_by(&self, body: &[u8], key: &PublicKey) -> bool {
        let name = note_key_name(key);
        let key_hash = note_key_hash(&name, key);
        self.signatures
            .iter()
            .filter(|sig| sig.name == name && sig.key_hash == key_hash)
            .filter_map(|sig| <&[u8; 64]>::try_from(sig.signature.as_slice()).ok())
            .any(|signature| key.verify(body, signature))
    }
}

/// The signed-note key name of an Engram node key. The key id makes the name unique per key,
/// which the signed-note spec relies on: a verifier identifies a key by (name, key hash).
pub fn note_key_name(key: &PublicKey) -> String {
    format!("engram-{}", key.key_id())
}

/// The signed-note key hash: SHA-256(name || `\n` || 0x01 || public key), first four bytes.
pub fn note_key_hash(name: &str, key: &PublicKey) -> [u8; 4] {
    let mut hasher = Sha256::new();
    hasher.update(name.as_bytes());
    hasher.update([b'\n', ED25519_SIGNATURE_TYPE]);
    hasher.update(key.0);
    let digest = hasher.finalize();
    [digest[0], digest[1], digest[2], digest[3]]
}

/// The signed-note verifier key string (`<name>+<key hash hex>+<base64(0x01 || key)>`), the
/// form in which witnesses and Go's `sumdb/note` are configured with a key to trust.
pub fn verifier_key(key: &PublicKey) -> String {
    named_verifier_key(&note_key_name(key), key)
}

fn named_verifier_key(name: &str, key: &PublicKey) -> String {
    let mut typed_key = Vec::with_capacity(33);
    typed_key.push(ED25519_SIGNATURE_TYPE);
    typed_key.extend_from_slice(&key.0);
    format!(
        "{name}+{}+{}",
        hex::encode(note_key_hash(name, key)),
        STANDARD.encode(typed_key)
    )
}

fn note_signature(body: &str, key: &NodeKey) -> NoteSignature {
    let public = key.public();
    let name = note_key_name(&public);
    NoteSignature {
        key_hash: note_key_hash(&name, &public),
        signature: key.sign(body.as_bytes()).to_vec(),
        name,
    }
}

fn line_count(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count()
}

/// The signed-note spec forbids every ASCII control character but newline; `\r` gets its own
/// error because a CRLF-converted note is by far the likeliest way to meet one.
fn check_characters(bytes: &[u8]) -> Result<(), CheckpointError> {
    let mut line = 1;
    for &b in bytes {
        match b {
            b'\n' => line += 1,
            b'\r' => return Err(CheckpointError::CarriageReturn { line }),
            0..0x20 => return Err(CheckpointError::ControlCharacter { line, byte: b }),
            _ => {}
        }
    }
    Ok(())
}

fn body_line(line: Option<&str>, number: usize) -> Result<&str, CheckpointError> {
    match line {
        Some(line) if !line.is_empty() => Ok(line),
        _ => Err(CheckpointError::BodyTooShort {
            line: number,
            lines: number - 1,
        }),
    }
}

fn parse_signature_line(line: &str, number: usize) -> Result<NoteSignature, CheckpointError> {
    let rest = line
        .strip_prefix(SIGNATURE_PREFIX)
        .ok_or(CheckpointError::NotASignatureLine { line: number })?;
    let (name, encoded) = rest
        .split_once(' ')
        .ok_or(CheckpointError::MissingSignature { line: number })?;
    if name.is_empty() || name.contains(char::is_whitespace) || name.contains('+') {
        return Err(CheckpointError::BadKeyName { line: number });
    }
    let blob = STANDARD
        .decode(encoded)
        .map_err(|_| CheckpointError::BadSignatureBase64 { line: number })?;
    let Some((key_hash, signature)) = blob.split_first_chunk::<4>().filter(|(_, sig)| !sig.is_empty()) else {
        return Err(CheckpointError::SignatureTooShort {
            line: number,
            len: blob.len(),
        });
    };
    Ok(NoteSignature {
        name: name.to_owned(),
        key_hash: *key_hash,
        signature: signature.to_vec(),
    })
}

/// Why a note is not a well-formed Engram checkpoint. Line numbers are 1-based; the body is
/// lines 1–4, the blank line is line 5 and signatures start at line 6.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("note is {len} bytes, over the limit of {max}; refused before reading line 1")]
    TooLarge { len: usize, max: usize },
    #[error("line 1: note is empty")]
    Empty,
    #[error("line {line}: note is not valid UTF-8")]
    NotUtf8 { line: usize },
    #[error("line {line}: carriage return; note lines end in \\n alone")]
    CarriageReturn { line: usize },
    #[error("line {line}: control character {byte:#04x}; a signed note allows none but \\n")]
    ControlCharacter { line: usize, byte: u8 },
    #[error("line {line}: note does not end in \\n")]
    MissingTrailingNewline { line: usize },
    #[error("line {line}: origin is empty")]
    EmptyOrigin { line: usize },
    #[error("line {line}: origin has leading or trailing whitespace")]
    OriginWhitespace { line: usize },
    #[error(
        "line {line}: body ends after {lines} line(s); a checkpoint body is 4 lines \
         (origin, size, root, tx-time-ns)"
    )]
    BodyTooShort { line: usize, lines: usize },
    #[error("line {line}: size is not a canonical decimal u64 (digits only, no leading zeros)")]
    BadSize { line: usize },
    #[error("line {line}: root is not canonical standard base64")]
    BadRootBase64 { line: usize },
    #[error("line {line}: root decodes to {len} bytes, not 32")]
    BadRootLength { line: usize, len: usize },
    #[error("line {line}: expected the extension line `tx-time-ns <i64>`")]
    MissingTxTime { line: usize },
    #[error("line {line}: tx-time-ns is not a canonical decimal i64 (no '+', no leading zeros)")]
    BadTxTime { line: usize },
    #[error("line {line}: extension line after tx-time-ns; Engram checkpoints carry exactly one")]
    ExtraExtension { line: usize },
    #[error("line {line}: expected the blank line between the body and the signatures")]
    MissingBlankLine { line: usize },
    #[error("line {line}: no signature lines")]
    NoSignatures { line: usize },
    #[error("line {line}: more than {max} signature lines")]
    TooManySignatures { line: usize, max: usize },
    #[error("line {line}: signature line does not start with an em dash (U+2014) and a space")]
    NotASignatureLine { line: usize },
    #[error("line {line}: signature line has no space between the key name and the signature")]
    MissingSignature { line: usize },
    #[error("line {line}: key name is empty or contains whitespace or '+'")]
    BadKeyName { line: usize },
    #[error("line {line}: signature is not canonical standard base64")]
    BadSignatureBase64 { line: usize },
    #[error("line {line}: signature decodes to {len} bytes; it needs a 4-byte key hash and at least 1 more")]
    SignatureTooShort { line: usize, len: usize },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> NodeKey {
        NodeKey::from_seed([n; 32])
    }

    fn checkpoint() -> Checkpoint {
        let genesis = Hash(std::array::from_fn(|i| i as u8));
        Checkpoint {
            origin: Checkpoint::origin_for(&genesis),
            size: 42,
            root: Hash([7; 32]),
            tx_time_ns: 1_700_000_000_123_456_789,
        }
    }

    const BODY: &str = "engram/000102030405060708090a0b0c0d0e0f\n\
                        42\n\
                        BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n\
                        tx-time-ns 1700000000123456789\n";

    #[test]
    fn sign_print_parse_round_trip_and_verify() {
        let signer = key(1);
        let signed = checkpoint().sign(&signer);
        let text = signed.to_text();
        let parsed = SignedCheckpoint::parse(&text).unwrap();
        assert_eq!(parsed, signed);
        assert_eq!(SignedCheckpoint::parse_bytes(text.as_bytes()).unwrap(), signed);
        assert_eq!(parsed.to_text(), text);

        assert!(parsed.verify_by(&signer.public()));
        assert!(!parsed.verify_by(&key(2).public()));

        let mut cosigned = parsed;
        cosigned.cosign(&key(3));
        let keys: Vec<PublicKey> = (1..=4).map(|n| key(n).public()).collect();
        assert_eq!(cosigned.signers(&keys), vec![key(1).public(), key(3).public()]);
        let reversed: Vec<PublicKey> = keys.iter().rev().copied().collect();
        assert_eq!(
            cosigned.signers(&reversed),
            vec![key(3).public(), key(1).public()],
            "input order"
        );
        let repeated = [keys[0], keys[2], keys[0], keys[2]];
        assert_eq!(
            cosigned.signers(&repeated),
            vec![keys[0], keys[2]],
            "deduplicated"
        );
    }

    #[test]
    fn exact_text_layout() {
        let cp = checkpoint();
        assert_eq!(cp.origin, "engram/000102030405060708090a0b0c0d0e0f");
        assert_eq!(cp.body(), BODY);

        let signer = key(9);
        let text = cp.sign(&signer).to_text();
        let sig_line = text.strip_prefix(BODY).unwrap().strip_prefix('\n').unwrap();
        let prefix = format!("— engram-{} ", signer.key_id());
        assert!(sig_line.starts_with(&prefix), "{sig_line:?}");
        assert!(sig_line.starts_with("\u{2014} engram-"));
        assert!(sig_line.ends_with('\n'));
        assert_eq!(sig_line.matches('\n').count(), 1);

        let blob = STANDARD
            .decode(sig_line.strip_prefix(&prefix).unwrap().trim_end_matches('\n'))
            .unwrap();
        assert_eq!(blob.len(), 68);
        let public = signer.public();
        assert_eq!(blob[..4], note_key_hash(&note_key_name(&public), &public));
        assert_eq!(blob[4..], signer.sign(BODY.as_bytes()));

        assert_eq!(
            verifier_key(&public),
            format!(
                "engram-{}+{}+{}",
                signer.key_id(),
                hex::encode(&blob[..4]),
                STANDARD.encode([&[1u8][..], &public.0].concat())
            )
        );
    }

    #[test]
    fn key_hash_matches_hand_computation() {
        let public = key(5).public();
        let name = note_key_name(&public);
        assert_eq!(name, format!("engram-{}", hex::encode(public.key_id().0)));
        assert_eq!(name.len(), "engram-".len() + 16);

        let mut preimage = Vec::new();
        preimage.extend_from_slice(name.as_bytes());
        preimage.push(0x0a);
        preimage.push(0x01);
        preimage.extend_from_slice(&public.0);
        assert_eq!(preimage.len(), name.len() + 2 + 32);
        let digest = Sha256::digest(&preimage);
        assert_eq!(note_key_hash(&name, &public), digest[..4]);
    }

    /// The example of golang.org/x/mod/sumdb/note: an independent implementation's key hash,
    /// verifier key string and signature, reproduced from the same seed.
    #[test]
    fn matches_go_sumdb_note_example() {
        let signer_key = STANDARD
            .decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")
            .unwrap();
        assert_eq!(signer_key[0], 0x01);
        let node = NodeKey::from_seed(signer_key[1..].try_into().unwrap());
        let public = node.public();
        assert_eq!(
            named_verifier_key("PeterNeumann", &public),
            "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
        );
        let text = "If you think cryptography is the answer to your problem,\n\
                    then you don't know what your problem is.\n";
        let mut blob = note_key_hash("PeterNeumann", &public).to_vec();
        blob.extend_from_slice(&node.sign(text.as_bytes()));
        assert_eq!(
            STANDARD.encode(blob),
            "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="
        );
    }

    #[test]
    fn tampering_with_any_field_breaks_verification() {
        let signer = key(1);
        let text = checkpoint().sign(&signer).to_text();
        let root_b64 = STANDARD.encode([7u8; 32]);
        let other_root = STANDARD.encode([8u8; 32]);
        let tampered = [
            text.replacen("\n42\n", "\n43\n", 1),
            text.replacen(&root_b64, &other_root, 1),
            text.replacen("engram/00", "engram/01", 1),
            text.replacen(
                "tx-time-ns 1700000000123456789",
                "tx-time-ns 1700000000123456790",
                1,
            ),
        ];
        for t in &tampered {
            assert_ne!(t, &text);
            let parsed = SignedCheckpoint::parse(t).unwrap();
            assert!(!parsed.verify_by(&signer.public()), "{t}");
            assert!(parsed.signers([&signer.public()]).is_empty());
        }
    }

    #[test]
    fn every_single_byte_flip_is_caught() {
        let signer = key(1);
        let mut signed = checkpoint().sign(&signer);
        signed.cosign(&key(2));
        let bytes = signed.to_text().into_bytes();
        let mut parsed_mutants = 0;
        for i in 0..bytes.len() {
            for mask in [0x01u8, 0x02, 0x20, 0x40, 0x80, 0xff] {
                let mut mutant = bytes.clone();
                mutant[i] ^= mask;
                if let Ok(parsed) = SignedCheckpoint::parse_bytes(&mutant) {
                    parsed_mutants += 1;
                    assert_eq!(parsed.to_text().as_bytes(), mutant, "prints back byte for byte");
                    let both = parsed.verify_by(&signer.public()) && parsed.verify_by(&key(2).public());
                    assert!(!both, "flip {mask:#x} at byte {i} went unnoticed");
                }
            }
        }
        assert!(
            parsed_mutants > 0,
            "the loop exercises verification, not just parsing"
        );
    }

    #[test]
    fn flipped_bytes_of_a_single_signature_note_fail_parse_or_verify() {
        let signer = key(1);
        let bytes = checkpoint().sign(&signer).to_text().into_bytes();
        for i in 0..bytes.len() {
            for mask in [0x01u8, 0x20, 0x80] {
                let mut mutant = bytes.clone();
                mutant[i] ^= mask;
                if let Ok(parsed) = SignedCheckpoint::parse_bytes(&mutant) {
                    assert!(!parsed.verify_by(&signer.public()), "byte {i} mask {mask:#x}");
                }
            }
        }
    }

    #[test]
    fn cosignatures_and_unknown_witness_lines() {
        let (a, b, c) = (key(1), key(2), key(3));
        let mut signed = checkpoint().sign(&a);
        signed.cosign(&b);
        assert_eq!(signed.signatures.len(), 2);
        signed.cosign(&b);
        signed.cosign(&a);
        assert_eq!(signed.signatures.len(), 2, "cosign is idempotent");
        assert!(signed.verify_by(&a.public()));
        assert!(signed.verify_by(&b.public()));

        let witness_blob = STANDARD.encode([0x5au8; 4 + 72]);
        let mut text = signed.to_text();
        text.push_str(&format!("— witness.example/w1 {witness_blob}\n"));
        // Engram's name with a wrong key hash belongs to some other key and must be skipped.
        let impostor = STANDARD.encode([0u8; 68]);
        text.push_str(&format!("— {} {impostor}\n", note_key_name(&c.public())));

        let parsed = SignedCheckpoint::parse(&text).unwrap();
        assert_eq!(parsed.signatures.len(), 4);
        assert_eq!(parsed.signatures[2].name, "witness.example/w1");
        assert_eq!(parsed.signatures[2].key_hash, [0x5a; 4]);
        assert_eq!(parsed.signatures[2].signature.len(), 72);
        assert_eq!(parsed.to_text(), text);
        assert!(parsed.verify_by(&a.public()));
        assert!(parsed.verify_by(&b.public()));
        assert!(!parsed.verify_by(&c.public()));
        assert_eq!(
            parsed.signers([&c.public(), &b.public(), &a.public()]),
            vec![b.public(), a.public()]
        );
    }

    #[test]
    fn duplicate_lines_are_kept_and_counted_once() {
        let a = key(1);
        let mut signed = checkpoint().sign(&a);
        let first = signed.signatures[0].clone();
        // A line with the right name and key hash but a bad signature, then the good one again.
        let mut bogus = first.clone();
        bogus.signature = vec![0; 64];
        signed.signatures.insert(0, bogus);
        signed.signatures.push(first);
        let parsed = SignedCheckpoint::parse(&signed.to_text()).unwrap();
        assert_eq!(parsed.signatures.len(), 3);
        assert!(parsed.verify_by(&a.public()));
        assert_eq!(parsed.signers([&a.public(), &a.public()]), vec![a.public()]);
    }

    #[test]
    fn signature_count_limit() {
        let mut signed = checkpoint().sign(&key(1));
        let line = signed.signatures[0].clone();
        signed.signatures.resize(100, line.clone());
        assert!(SignedCheckpoint::parse(&signed.to_text()).is_ok());
        signed.signatures.push(line);
        assert_eq!(
            SignedCheckpoint::parse(&signed.to_text()),
            Err(CheckpointError::TooManySignatures { line: 106, max: 100 })
        );
    }

    #[test]
    fn malformed_notes_are_refused() {
        use CheckpointError as E;
        let text = checkpoint().sign(&key(1)).to_text();
        let sig_line = text.strip_prefix(BODY).unwrap().strip_prefix('\n').unwrap();
        let sig_b64 = sig_line.trim_end_matches('\n').rsplit_once(' ').unwrap().1;
        let with_body_line = |old: &str, new: &str| text.replacen(old, new, 1);
        let root = "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";

        let cases: Vec<(String, CheckpointError)> = vec![
            (String::new(), E::Empty),
            ("\n".into(), E::EmptyOrigin { line: 1 }),
            (format!("{BODY}{sig_line}"), E::MissingBlankLine { line: 5 }),
            (BODY.into(), E::MissingBlankLine { line: 5 }),
            (
                with_body_line("tx-time-ns 1700000000123456789\n", ""),
                E::BodyTooShort { line: 4, lines: 3 },
            ),
            (
                with_body_line("\n42\n", "\n"),
                E::BodyTooShort { line: 4, lines: 3 },
            ),
            (
                with_body_line("tx-time-ns 1700000000123456789\n", "tx-time-ns 1\nnote 1\n"),
                E::ExtraExtension { line: 5 },
            ),
            (text.replace('\n', "\r\n"), E::CarriageReturn { line: 1 }),
            (with_body_line("\n42\n", "\n042\n"), E::BadSize { line: 2 }),
            (with_body_line("\n42\n", "\n+42\n"), E::BadSize { line: 2 }),
            (with_body_line("\n42\n", "\n-1\n"), E::BadSize { line: 2 }),
            (
                with_body_line("\n42\n", "\n18446744073709551616\n"),
                E::BadSize { line: 2 },
            ),
            (
                with_body_line(root, &STANDARD.encode([7u8; 31])),
                E::BadRootLength { line: 3, len: 31 },
            ),
            (with_body_line(root, "not*base64"), E::BadRootBase64 { line: 3 }),
            (
                with_body_line(root, root.trim_end_matches('=')),
                E::BadRootBase64 { line: 3 },
            ),
            (
                with_body_line("tx-time-ns 1700000000123456789", "tx-time-ns 01"),
                E::BadTxTime { line: 4 },
            ),
            (
                with_body_line("tx-time-ns 1700000000123456789", "tx-time-ns -0"),
                E::BadTxTime { line: 4 },
            ),
            (
                with_body_line("tx-time-ns 1700000000123456789", "tx-time 1"),
                E::MissingTxTime { line: 4 },
            ),
            (
                text.strip_suffix('\n').unwrap().into(),
                E::MissingTrailingNewline { line: 6 },
            ),
            (format!("{BODY}\n"), E::NoSignatures { line: 6 }),
            (format!("{text}\n"), E::NotASignatureLine { line: 7 }),
            (text.replacen("— ", "- ", 1), E::NotASignatureLine { line: 6 }),
            (
                format!("{BODY}\n— bad+name {sig_b64}\n"),
                E::BadKeyName { line: 6 },
            ),
            (
                format!("{BODY}\n— bad\u{a0}name {sig_b64}\n"),
                E::BadKeyName { line: 6 },
            ),
            (format!("{BODY}\n— name-only\n"), E::MissingSignature { line: 6 }),
            (
                format!("{BODY}\n— n AAAA\n"),
                E::SignatureTooShort { line: 6, len: 3 },
            ),
            (
                format!("{BODY}\n— n AAAAAA==\n"),
                E::SignatureTooShort { line: 6, len: 4 },
            ),
            (
                format!("{BODY}\n— n {sig_b64}x\n"),
                E::BadSignatureBase64 { line: 6 },
            ),
            (
                format!("{BODY}\n— n  {sig_b64}\n"),
                E::BadSignatureBase64 { line: 6 },
            ),
            (
                with_body_line("engram/", " engram/"),
                E::OriginWhitespace { line: 1 },
            ),
            (
                with_body_line("\n42\n", "\n4\t2\n"),
                E::ControlCharacter { line: 2, byte: 9 },
            ),
            (
                "a".repeat(SignedCheckpoint::MAX_NOTE_BYTES + 1),
                E::TooLarge {
                    len: SignedCheckpoint::MAX_NOTE_BYTES + 1,
                    max: SignedCheckpoint::MAX_NOTE_BYTES,
                },
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(
                SignedCheckpoint::parse(&input),
                Err(expected.clone()),
                "{input:?}"
            );
            assert_eq!(
                SignedCheckpoint::parse_bytes(input.as_bytes()),
                Err(expected.clone())
            );
            let message = expected.to_string();
            if !matches!(expected, E::TooLarge { .. }) {
                assert!(message.starts_with("line "), "{message}");
            }
        }
    }

    #[test]
    fn invalid_utf8_is_refused_with_its_line() {
        let mut bytes = checkpoint().sign(&key(1)).to_text().into_bytes();
        let second_line = BODY.find('\n').unwrap() + 1;
        bytes[second_line] = 0xff;
        assert_eq!(
            SignedCheckpoint::parse_bytes(&bytes),
            Err(CheckpointError::NotUtf8 { line: 2 })
        );
        let oversize = vec![0xffu8; SignedCheckpoint::MAX_NOTE_BYTES + 1];
        assert!(matches!(
            SignedCheckpoint::parse_bytes(&oversize),
            Err(CheckpointError::TooLarge { .. })
        ));
    }

    #[test]
    fn parsing_arbitrary_prefixes_never_panics() {
        let text = checkpoint().sign(&key(1)).to_text();
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            assert!(
                SignedCheckpoint::parse_bytes(&bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }
}
