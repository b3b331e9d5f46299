//! The node's Ed25519 signing key: loaded from a file, or generated on first start into the
//! data directory with mode 0600.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use engram_audit::NodeKey;

use crate::ServerError;

/// Reads a key file: 32 raw bytes, or 64 hex characters (white space around is ignored).
pub fn load(path: &Path) -> Result<NodeKey, ServerError> {
    let bytes = std::fs::read(path)
        .map_err(|e| ServerError::Startup(format!("cannot read key file {}: {e}", path.display())))?;
    let seed: [u8; 32] = if bytes.len() == 32 {
        bytes
            .as_slice()
            .try_into()
            .map_err(|_| ServerError::Startup("unreachable length".into()))?
    } else {
        let text = String::from_utf8_lossy(&bytes);
        let raw = hex::decode(text.trim()).map_err(|_| {
            ServerError::Startup(format!(
                "key file {} is neither 32 raw bytes nor 64 hex characters",
                path.display()
            ))
        })?;
        raw.as_slice().try_into().map_err(|_| {
            ServerError::Startup(format!(
                "key file {} holds {} bytes, expected 32",
                path.display(),
                raw.len()
            ))
        })?
    };
    Ok(NodeKey::from_seed(seed))
}

/// Loads `path`, or creates it with a fresh key from the OS RNG if it does not exist.
pub fn load_or_generate(path: &Path) -> Result<NodeKey, ServerError> {
    if path.exists() {
        return load(path);
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| ServerError::Startup(format!("no OS randomness for a key: {e}")))?;
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| ServerError::Startup(format!("cannot create key file {}: {e}", path.display())))?;
    file.write_all(hex::encode(seed).as_bytes())
        .and_then(|_| file.sync_all())
        .map_err(|e| ServerError::Startup(format!("cannot write key file {}: {e}", path.display())))?;
    Ok(NodeKey::from_seed(seed))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn generated_once_then_reloaded_with_private_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        let first = load_or_generate(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let again = load_or_generate(&path).unwrap();
        assert_eq!(first.public(), again.public());
    }

    #[test]
    fn bad_key_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, "not hex").unwrap();
        assert!(
            load(&path)
                .unwrap_err()
                .to_string()
                .contains("neither 32 raw bytes")
        );
        std::fs::write(&path, "abcd").unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("expected 32"));
        assert!(load(&dir.path().join("missing")).is_err());
    }
}
