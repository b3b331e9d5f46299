//! An agent's key file: the principal it acts as and its Ed25519 secret.
//!
//! Text, two lines: `agent <name>` and `secret <64 hex characters>`. The file is created with
//! mode 0600 and never overwritten.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use engram_audit::{NodeKey, PublicKey};

use crate::Principal;

#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("agent key file {path}: {reason}")]
    Invalid { path: String, reason: String },
    #[error("agent key file {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// An agent's signing key and the principal it signs as.
pub struct AgentKey {
    pub principal: Principal,
    key: NodeKey,
}

impl std::fmt::Debug for AgentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AgentKey({}, {})", self.principal, self.key.key_id())
    }
}

impl AgentKey {
    /// The key from a 32-byte secret seed (the caller draws it from the OS RNG).
    pub fn from_seed(principal: Principal, seed: [u8; 32]) -> AgentKey {
        AgentKey {
            principal,
            key: NodeKey::from_seed(seed),
        }
    }

    pub fn public(&self) -> PublicKey {
        self.key.public()
    }

    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message)
    }

    /// Reads a key file.
    pub fn load(path: &Path) -> Result<AgentKey, KeyFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| KeyFileError::Io {
            path: shown.clone(),
            source,
        })?;
        let invalid = |reason: String| KeyFileError::Invalid {
            path: shown.clone(),
            reason,
        };
        let mut principal = None;
        let mut seed = None;
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            match line.split_once(char::is_whitespace) {
                Some(("agent", name)) => {
                    principal = Some(Principal::new(name.trim()).map_err(|e| invalid(e.to_string()))?)
                }
                Some(("secret", hex_seed)) => {
                    let raw =
                        hex::decode(hex_seed.trim()).map_err(|_| invalid("secret is not hex".into()))?;
                    let bytes: [u8; 32] = raw
                        .as_slice()
                        .try_into()
                        .map_err(|_| invalid(format!("secret is {} bytes, expected 32", raw.len())))?;
                    seed = Some(bytes);
                }
                _ => {
                    return Err(invalid(
                        "expected the lines `agent <name>` and `secret <hex>`".into(),
                    ));
                }
            }
        }
        match (principal, seed) {
            (Some(principal), Some(seed)) => Ok(AgentKey::from_seed(principal, seed)),
            (None, _) => Err(invalid("no `agent <name>` line".into())),
            (_, None) => Err(invalid("no `secret <hex>` line".into())),
        }
    }

    /// A fresh key for `principal` from the OS's randomness, written to `path` (see
    /// [`AgentKey::save`]).
    pub fn create(principal: Principal, path: &Path) -> Result<AgentKey, KeyFileError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| KeyFileError::Invalid {
            path: path.display().to_string(),
            reason: format!("no OS randomness for a key: {e}"),
        })?;
        let key = AgentKey::from_seed(principal, seed);
        key.save(path)?;
        Ok(key)
    }

    /// Writes a new key file (mode 0600); an existing file is never overwritten.
    pub fn save(&self, path: &Path) -> Result<(), KeyFileError> {
        let io = |source| KeyFileError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io)?;
        let text = format!(
            "# Engram agent key: keep it secret\nagent {}\nsecret {}\n",
            self.principal,
            hex::encode(self.key.seed())
        );
        file.write_all(text.as_bytes())
            .and_then(|_| file.sync_all())
            .map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_round_trips_and_is_never_overwritten() {
        let dir = std::env::temp_dir().join(format!("engram-agent-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("alice.key");
        let _ = std::fs::remove_file(&path);
        let key = AgentKey::from_seed(Principal::new("alice").unwrap(), [3; 32]);
        key.save(&path).unwrap();
        let back = AgentKey::load(&path).unwrap();
        assert_eq!(back.principal.as_str(), "alice");
        assert_eq!(back.public(), key.public());
        assert!(matches!(key.save(&path), Err(KeyFileError::Io { .. })));
        std::fs::write(dir.join("bad.key"), "agent alice\nsecret zz\n").unwrap();
        let err = AgentKey::load(&dir.join("bad.key")).unwrap_err().to_string();
        assert!(err.contains("not hex"), "{err}");
        std::fs::write(dir.join("nameless.key"), format!("secret {}\n", "00".repeat(32))).unwrap();
        assert!(
            AgentKey::load(&dir.join("nameless.key"))
                .unwrap_err()
                .to_string()
                .contains("agent")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
