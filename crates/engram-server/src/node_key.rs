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

/// The file beside `node.key` holding keys staged for a rotation, one hex seed per line.
pub fn staged_path(key_path: &Path) -> std::path::PathBuf {
    let mut name = key_path.as_os_str().to_owned();
    name.push(".staged");
    std::path::PathBuf::from(name)
}

/// The staged keys next to `key_path` (none if the file does not exist).
pub fn load_staged(key_path: &Path) -> Result<Vec<NodeKey>, ServerError> {
    let path = staged_path(key_path);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(ServerError::Startup(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            hex::decode(line.trim())
                .ok()
                .and_then(|raw| <[u8; 32]>::try_from(raw.as_slice()).ok())
                .map(NodeKey::from_seed)
                .ok_or_else(|| {
                    ServerError::Startup(format!(
                        "{} holds a line that is not a 64-hex-digit seed",
                        path.display()
                    ))
                })
        })
        .collect()
}

/// Writes `contents` to `path` through a synced temporary file and a rename, mode 0600, so a
/// crash leaves the old file or the new one, never a torn one.
fn write_atomically(path: &Path, contents: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Persists a key ring: the current key to `key_path`, the staged ones beside it. The staged
/// file is written first, so a key is on disk before any rotation entry names it.
pub fn persist(
    key_path: &Path,
    current: &NodeKey,
    staged: &[std::sync::Arc<NodeKey>],
) -> std::io::Result<()> {
    let staged_file = staged_path(key_path);
    if staged.is_empty() {
        write_atomically(key_path, &hex::encode(current.seed()))?;
        match std::fs::remove_file(&staged_file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        return Ok(());
    }
    let lines: Vec<String> = staged.iter().map(|k| hex::encode(k.seed())).collect();
    write_atomically(&staged_file, &(lines.join("\n") + "\n"))?;
    write_atomically(key_path, &hex::encode(current.seed()))
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
