//! Files the CLI writes whole or not at all (exports, backups).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use engram_client::ClientError;
use futures::StreamExt;
use futures::stream::BoxStream;
use indicatif::ProgressBar;

/// Writes to `out.partial` and renames when complete, so a failed export or backup never leaves
/// a file that looks whole.
pub struct Staged {
    path: PathBuf,
    partial: PathBuf,
}

impl Staged {
    pub fn create(path: &Path) -> Result<(Staged, BufWriter<File>)> {
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        let file = File::create(&partial).with_context(|| format!("cannot create {}", partial.display()))?;
        Ok((
            Staged {
                path: path.to_path_buf(),
                partial,
            },
            BufWriter::with_capacity(1 << 20, file),
        ))
    }

    pub fn commit(self, writer: BufWriter<File>) -> Result<()> {
        self.commit_checked(writer, |_| Ok(()))
    }

    /// Writes out and syncs the partial file, runs `check` on it, and moves it into place only
    /// if the check passes (a file that fails it is deleted).
    pub fn commit_checked<T>(
        self,
        writer: BufWriter<File>,
        check: impl FnOnce(&Path) -> Result<T>,
    ) -> Result<T> {
        let file = writer
            .into_inner()
            .map_err(|e| anyhow!("writing {}: {}", self.partial.display(), e.error()))?;
        file.sync_all()
            .with_context(|| format!("syncing {}", self.partial.display()))?;
        drop(file);
        let checked = check(&self.partial)?;
        std::fs::rename(&self.partial, &self.path).with_context(|| {
            format!(
                "cannot move {} to {}",
                self.partial.display(),
                self.path.display()
            )
        })?;
        Ok(checked)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.partial);
    }
}

/// Writes every chunk of a streamed file (`what`: "the backup", "the audit export") to
/// `writer`, showing the MiB received on `pb`; returns the bytes received.
pub async fn receive(
    mut stream: BoxStream<'static, Result<Vec<u8>, ClientError>>,
    writer: &mut BufWriter<File>,
    pb: &ProgressBar,
    what: &str,
) -> Result<u64> {
    let mut bytes = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.with_context(|| format!("receiving {what} (the partial file is deleted)"))?;
        writer
            .write_all(&chunk)
            .with_context(|| format!("writing {what}"))?;
        bytes += chunk.len() as u64;
        pb.set_message(format!("receiving {what}: {:.1} MiB", mib(bytes)));
    }
    Ok(bytes)
}

/// Bytes as MiB, for progress and summaries.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}
