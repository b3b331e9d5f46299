//! The store check a node runs before it serves (`--verify-on-start`): a node that fails it
//! refuses to start, naming what failed, rather than serve from a damaged store.

use engram_audit::KeyRing;
use engram_core::scrub::{StartCheck, StartCheckError, check_on_start};
use engram_storage::Store;
use tracing::info;

use crate::ServerError;

/// Runs `depth`'s check over `store`; this node's keys (current and staged) may sign entries
/// the chain has not admitted yet (history it is replaying before its own admission).
pub(crate) fn verify_store(store: &dyn Store, depth: StartCheck, keys: &KeyRing) -> Result<(), ServerError> {
    if depth == StartCheck::None {
        return Ok(());
    }
    let mut own = vec![keys.current().key_id()];
    own.extend(keys.staged().iter().map(|k| k.key_id()));
    match check_on_start(store, depth, &own) {
        Ok(summary) => {
            info!(check = %depth, entries = summary.entries, datoms = summary.datoms, "store verified");
            Ok(())
        }
        Err(e) => {
            // The operator reads this on the node's own machine: the damaged file is worth naming
            // (a store finding names it already).
            let file = match &e {
                StartCheckError::Core(engram_core::CoreError::Storage(s)) => s.file().map(str::to_string),
                _ => None,
            };
            Err(ServerError::Startup(format!(
                "the store fails its start-up check (--verify-on-start {depth}): {e}{}; stop here and run `engram audit verify --data-dir`",
                file.map(|f| format!(" (file {f})")).unwrap_or_default()
            )))
        }
    }
}
