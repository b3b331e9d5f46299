use engram_audit::{ChainError, ChainFault, ChainVerifier, SignedEntry};
use engram_merkle::{Blake3, CompactTree};
use engram_proto::pb::audit_client::AuditClient;
use engram_proto::{methods, pb};
use engram_types::Hash;
use futures::StreamExt;
use tokio::time::Instant;

use crate::{Client, ClientError, Idempotency};

/// The outcome of a successful [`Client::verify_chain`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainReport {
    /// The node whose chain was checked.
    pub endpoint: String,
    /// Entries whose link and signature verified: the whole chain, 1..=`head_index`.
    pub entries_checked: u64,
    /// Index of the last entry (0 for an empty chain).
    pub head_index: u64,
    /// Hash of the last entry; `None` for an empty chain.
    pub head_hash: Option<Hash>,
    /// The Merkle root over the verified entries.
    pub tree_root: Hash,
    /// The cluster's checkpoint origin (`None` for an empty chain).
    pub origin: Option<String>,
    /// The keys the verified chain trusts at its head.
    pub active_keys: Vec<engram_audit::PublicKey>,
}

/// Reported to the progress callback of [`Client::verify_chain`] after each verified entry.
#[derive(Clone, Copy, Debug)]
pub struct VerifyProgress<'a> {
    pub checked: u64,
    /// The head the node reported when verification started; the chain may grow meanwhile.
    pub head_index: u64,
    /// The entry just verified, and its hash.
    pub entry: &'a SignedEntry,
    pub hash: Hash,
}

impl Client {
    /// Streams the whole audit chain from one node and checks it entry by entry with
    /// [`ChainVerifier`]: contiguous indexes, each `prev_hash` linking to the previous entry,
    /// increasing tx ids and times, and every attestation against the keys the chain itself
    /// admits. The readable copy the node sends along (index, hash) must match the signed entry,
    /// and the head the node reported before streaming must be in the chain with that hash.
    ///
    /// The node is the first endpoint that answers; all entries come from it. A stream broken
    /// by a transient failure resumes at the next unchecked index on the same node, within the
    /// retry budget.
    ///
    /// Returns [`ClientError::Chain`] with the exact index and field of the first bad entry, or
    /// [`ClientError::ChainTruncated`] if the node serves fewer entries than its head claims.
    pub async fn verify_chain(
        &self,
        mut progress: impl FnMut(VerifyProgress<'_>),
    ) -> Result<ChainReport, ClientError> {
        let (endpoint, head) = self
            .call_with_endpoint(Idempotency::Safe, |ch, s| async move {
                AuditClient::new(ch)
                    .head(s.sign(methods::HEAD, pb::HeadRequest {}))
                    .await
            })
            .await?;
        let node = self.node_named(&endpoint).unwrap_or_else(|| self.clone());
        let claimed_head = if head.index == 0 {
            None
        } else {
            let hash = Hash::from_slice(&head.hash).ok_or_else(|| ClientError::Protocol {
                endpoint: endpoint.clone(),
                reason: format!("head hash has {} bytes, expected 32", head.hash.len()),
            })?;
            Some((head.index, hash))
        };
        let chain_err = |error: ChainError| ClientError::Chain {
            endpoint: endpoint.clone(),
            error,
        };

        let mut verifier = ChainVerifier::new();
        let mut tree = CompactTree::<Blake3>::new();
        let policy = self.config().retry;
        let item_timeout = self.config().request_timeout;
        let start = Instant::now();
        let mut retry = 0u32;
        'resume: loop {
            let next = verifier.checked() + 1;
            let mut stream = node.audit_entries(next, 0).await?;
            loop {
                let failure = match tokio::time::timeout(item_timeout, stream.next()).await {
                    Ok(None) => break 'resume,
                    Ok(Some(Ok(entry))) => {
                        let (signed, entry_hash) = check_entry(&mut verifier, &entry).map_err(chain_err)?;
                        tree.push(entry_hash.as_bytes());
                        if let Some((index, hash)) = claimed_head
                            && entry.index == index
                            && verifier.head() != Some(hash)
                        {
                            let computed = verifier.head().unwrap_or_default();
                            return Err(chain_err(ChainError {
                                index,
                                fault: ChainFault::StoredHash {
                                    stored: hash,
                                    computed,
                                },
                            }));
                        }
                        progress(VerifyProgress {
                            checked: verifier.checked(),
                            head_index: head.index,
                            entry: &signed,
                            hash: entry_hash,
                        });
                        continue;
                    }
                    Ok(Some(Err(e))) => e,
                    Err(_) => ClientError::Rpc {
                        endpoint: endpoint.clone(),
                        code: tonic::Code::DeadlineExceeded,
                        message: format!("no audit entry within {item_timeout:?}"),
                        attempts: retry + 1,
                        transient: true,
                    },
                };
                let transient = failure.is_transient();
                let delay = policy.backoff(retry);
                if !transient || start.elapsed() + delay >= policy.max_elapsed {
                    return Err(failure);
                }
                tracing::debug!(%endpoint, next = verifier.checked() + 1, "audit stream broke; resuming");
                tokio::time::sleep(delay).await;
                retry += 1;
                continue 'resume;
            }
        }
        verifier.finish().map_err(chain_err)?;
        if let Some((index, _)) = claimed_head
            && verifier.checked() < index
        {
            return Err(ClientError::ChainTruncated {
                endpoint,
                served: verifier.checked(),
                head_index: index,
            });
        }
        Ok(ChainReport {
            endpoint,
            entries_checked: verifier.checked(),
            head_index: verifier.checked(),
            head_hash: verifier.head(),
            tree_root: Hash(tree.root()),
            origin: verifier.origin().map(str::to_string),
            active_keys: verifier.active_keys(),
        })
    }

    pub(crate) fn node_named(&self, name: &str) -> Option<Client> {
        let index = self.endpoints().iter().position(|n| n == name)?;
        self.node(index)
    }
}

/// Checks one streamed entry: its signed form against the chain so far, then the readable copy
/// against the signed form (a mismatch means one of the two was altered).
fn check_entry(
    verifier: &mut ChainVerifier,
    entry: &pb::AuditEntry,
) -> Result<(SignedEntry, Hash), ChainError> {
    let signed = SignedEntry::decode(&entry.signed).map_err(|e| ChainError {
        index: entry.index,
        fault: ChainFault::Decode(e.to_string()),
    })?;
    let hash = verifier.push(&signed)?;
    let index = signed.entry.index;
    if entry.index != index {
        return Err(ChainError {
            index,
            fault: ChainFault::Index {
                expected: index,
                found: entry.index,
            },
        });
    }
    match Hash::from_slice(&entry.hash) {
        Some(stored) if stored == hash => Ok((signed, hash)),
        Some(stored) => Err(ChainError {
            index,
            fault: ChainFault::StoredHash {
                stored,
                computed: hash,
            },
        }),
        None => Err(ChainError {
            index,
            fault: ChainFault::Decode(format!("hash: {} bytes, expected 32", entry.hash.len())),
        }),
    }
}
