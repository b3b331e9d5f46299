//! Cursors: where the next page of a paged read ([`crate::pages`]: History, Find, Diff;
//! [`crate::lists`]: namespaces, entities, referrers, and the lists read whole by key — agents,
//! grants, retention policies, sessions, branches; [`crate::query`]: joins) begins.
//!
//! A cursor is opaque to callers and bound to three things: the kind of read, the query it
//! continues (a fingerprint of namespace, branch, target, filter, value, expiry judgement or
//! lower bound), and the transaction the first page was answered as of, so that every page
//! of one answer reads the same state whatever is written meanwhile and whichever node answers.
//! A cursor from another query, another as-of point or one damaged on the way is refused.
//!
//! A cursor carries no authority: it names a position in an answer the caller asks for again
//! with each page, under the caller's own rights. Its check bytes catch damage and cursors of
//! another query; they are not a secret, and a forged cursor can ask for nothing the caller
//! could not ask for directly.
//!
//! Layout (46 bytes): version 1, kind, query fingerprint (16), as-of tx (8, big-endian),
//! position (8 + 4: the last (tx, seq) of a History or Diff page, the last entity of a Find
//! page and 0),
//! check (the first 8 bytes of `blake3("engram/cursor/v1" || the bytes before)`).
//! A position that is a key (the last namespace listed, the last (attribute, entity) of a
//! referrers page; a join's expiry instant, pinned by its first page) makes version 2: the same fields, then the key (at most [`MAX_KEY`] bytes)
//! before the check. A cursor without a key is written as version 1, byte for byte as before.
//!
//! Must not depend on: the reads it serves (they depend on it), Raft, gRPC or storage engines.

use engram_types::TxId;

const VERSION: u8 = 1;
/// A cursor whose position includes a key.
const VERSION_KEYED: u8 = 2;
const LEN: usize = 46;
/// The fixed fields before the check (and, in version 2, before the key).
const FIXED: usize = LEN - 8;
/// The longest position key a cursor carries (a namespace name, an attribute and an entity id
/// fit with room to spare).
pub const MAX_KEY: usize = 1024;
const CHECK_CONTEXT: &[u8] = b"engram/cursor/v1";

/// The read a cursor continues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CursorKind {
    History,
    Find,
    Diff,
    Namespaces,
    Entities,
    Referrers,
    Query,
    Agents,
    Grants,
    Retention,
    Sessions,
    Branches,
}

impl CursorKind {
    fn tag(self) -> u8 {
        match self {
            CursorKind::History => 1,
            CursorKind::Find => 2,
            CursorKind::Diff => 3,
            CursorKind::Namespaces => 4,
            CursorKind::Entities => 5,
            CursorKind::Referrers => 6,
            CursorKind::Query => 7,
            CursorKind::Agents => 8,
            CursorKind::Grants => 9,
            CursorKind::Retention => 10,
            CursorKind::Sessions => 11,
            CursorKind::Branches => 12,
        }
    }

    fn of_tag(tag: u8) -> Option<CursorKind> {
        match tag {
            1 => Some(CursorKind::History),
            2 => Some(CursorKind::Find),
            3 => Some(CursorKind::Diff),
            4 => Some(CursorKind::Namespaces),
            5 => Some(CursorKind::Entities),
            6 => Some(CursorKind::Referrers),
            7 => Some(CursorKind::Query),
            8 => Some(CursorKind::Agents),
            9 => Some(CursorKind::Grants),
            10 => Some(CursorKind::Retention),
            11 => Some(CursorKind::Sessions),
            12 => Some(CursorKind::Branches),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CursorKind::History => "history",
            CursorKind::Find => "find",
            CursorKind::Diff => "diff",
            CursorKind::Namespaces => "namespaces",
            CursorKind::Entities => "entities",
            CursorKind::Referrers => "referrers",
            CursorKind::Query => "query",
            CursorKind::Agents => "agents",
            CursorKind::Grants => "grants",
            CursorKind::Retention => "retention",
            CursorKind::Sessions => "sessions",
            CursorKind::Branches => "branches",
        }
    }
}

/// A fingerprint of what a paged read asks (everything but the page size and the position):
/// each part is length-prefixed, so no two different part lists hash alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryKey([u8; 16]);

impl QueryKey {
    pub fn of(kind: CursorKind, parts: &[&[u8]]) -> QueryKey {
        let mut h = blake3::Hasher::new();
        h.update(b"engram/query/v1");
        h.update(&[kind.tag()]);
        for part in parts {
            h.update(&(part.len() as u64).to_be_bytes());
            h.update(part);
        }
        let mut key = [0u8; 16];
        key.copy_from_slice(&h.finalize().as_bytes()[..16]);
        QueryKey(key)
    }
}

/// A position in a paged answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub kind: CursorKind,
    pub query: QueryKey,
    /// The transaction every page of the answer is read as of.
    pub as_of: TxId,
    /// The last item of the page before: History's (tx, seq), Find's and an entity list's
    /// (entity id, 0).
    pub after: (u64, u32),
    /// The last item of the page before where it is a key: a namespace's name, a referrers
    /// page's (attribute, entity); empty for the others.
    pub after_key: Vec<u8>,
}

/// Why a cursor was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error(
        "cursor: not a cursor this server issued ({0}); pass the next_cursor of the previous page unchanged"
    )]
    Malformed(&'static str),
    #[error("cursor: issued for a {issued} read, not a {asked} read")]
    OtherKind {
        issued: &'static str,
        asked: &'static str,
    },
    #[error(
        "cursor: issued for another query (its namespace, branch, target, entity, attribute, value, include_expired, as_of_tx, since_tx, valid_at_ns, from_tx or to_tx differ from this request's)"
    )]
    OtherQuery,
    /// The answering node has not applied the transaction the answer is read as of: a node
    /// further behind than the one that answered the first page. Retrying (on the leader, or
    /// later) succeeds.
    #[error(
        "cursor: bound to transaction {as_of}, which this node has not applied yet (it has applied {applied}); retry, or read with linearizable consistency"
    )]
    Ahead { as_of: u64, applied: u64 },
}

impl Cursor {
    /// A cursor at `after`, for the positions that are numbers.
    pub fn at(kind: CursorKind, query: QueryKey, as_of: TxId, after: (u64, u32)) -> Cursor {
        Cursor {
            kind,
            query,
            as_of,
            after,
            after_key: Vec::new(),
        }
    }

    /// The encoding; a key longer than [`MAX_KEY`] is a caller's bug and is cut (the cursor
    /// then fails its check on the way back rather than continuing elsewhere).
    pub fn encode(&self) -> Vec<u8> {
        let key = &self.after_key[..self.after_key.len().min(MAX_KEY)];
        let mut out = Vec::with_capacity(LEN + key.len());
        out.push(if key.is_empty() { VERSION } else { VERSION_KEYED });
        out.push(self.kind.tag());
        out.extend_from_slice(&self.query.0);
        out.extend_from_slice(&self.as_of.0.to_be_bytes());
        out.extend_from_slice(&self.after.0.to_be_bytes());
        out.extend_from_slice(&self.after.1.to_be_bytes());
        out.extend_from_slice(key);
        let check = check(&out);
        out.extend_from_slice(&check);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Cursor, CursorError> {
        if bytes.len() < LEN || bytes.len() > LEN + MAX_KEY {
            return Err(CursorError::Malformed("wrong length"));
        }
        let keyed = match bytes[0] {
            VERSION if bytes.len() == LEN => false,
            VERSION_KEYED if bytes.len() > LEN => true,
            VERSION | VERSION_KEYED => return Err(CursorError::Malformed("wrong length")),
            _ => return Err(CursorError::Malformed("unknown version")),
        };
        let checked = bytes.len() - 8;
        if check(&bytes[..checked]) != bytes[checked..] {
            return Err(CursorError::Malformed("check bytes do not match"));
        }
        let kind = CursorKind::of_tag(bytes[1]).ok_or(CursorError::Malformed("unknown kind"))?;
        let u64_at = |at: usize| {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(&bytes[at..at + 8]);
            u64::from_be_bytes(raw)
        };
        let mut query = [0u8; 16];
        query.copy_from_slice(&bytes[2..18]);
        let mut seq = [0u8; 4];
        seq.copy_from_slice(&bytes[34..38]);
        Ok(Cursor {
            kind,
            query: QueryKey(query),
            as_of: TxId(u64_at(18)),
            after: (u64_at(26), u32::from_be_bytes(seq)),
            after_key: if keyed {
                bytes[FIXED..checked].to_vec()
            } else {
                Vec::new()
            },
        })
    }

    /// Decodes `bytes` (empty: the first page) and checks that the cursor continues `query` of
    /// `kind`.
    pub fn continuing(
        bytes: &[u8],
        kind: CursorKind,
        query: QueryKey,
    ) -> Result<Option<Cursor>, CursorError> {
        if bytes.is_empty() {
            return Ok(None);
        }
        let cursor = Cursor::decode(bytes)?;
        if cursor.kind != kind {
            return Err(CursorError::OtherKind {
                issued: cursor.kind.name(),
                asked: kind.name(),
            });
        }
        if cursor.query != query {
            return Err(CursorError::OtherQuery);
        }
        Ok(Some(cursor))
    }
}

fn check(bytes: &[u8]) -> [u8; 8] {
    let mut h = blake3::Hasher::new();
    h.update(CHECK_CONTEXT);
    h.update(bytes);
    let mut out = [0u8; 8];
    out.copy_from_slice(&h.finalize().as_bytes()[..8]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor() -> Cursor {
        Cursor::at(
            CursorKind::History,
            QueryKey::of(CursorKind::History, &[b"ns", b"attr"]),
            TxId(77),
            (12, 3),
        )
    }

    #[test]
    fn a_cursor_round_trips_and_continues_only_its_own_query() {
        let c = cursor();
        let bytes = c.encode();
        assert_eq!(bytes.len(), LEN);
        assert_eq!(Cursor::decode(&bytes), Ok(c.clone()));
        assert_eq!(
            Cursor::continuing(&bytes, CursorKind::History, c.query),
            Ok(Some(c.clone()))
        );
        assert_eq!(Cursor::continuing(&[], CursorKind::History, c.query), Ok(None));
        let other = QueryKey::of(CursorKind::History, &[b"ns", b"other"]);
        assert_eq!(
            Cursor::continuing(&bytes, CursorKind::History, other),
            Err(CursorError::OtherQuery)
        );
        assert_eq!(
            Cursor::continuing(&bytes, CursorKind::Find, c.query),
            Err(CursorError::OtherKind {
                issued: "history",
                asked: "find"
            })
        );
    }

    #[test]
    fn length_prefixes_keep_different_part_lists_apart() {
        assert_ne!(
            QueryKey::of(CursorKind::Find, &[b"ab", b"c"]),
            QueryKey::of(CursorKind::Find, &[b"a", b"bc"])
        );
        assert_ne!(
            QueryKey::of(CursorKind::Find, &[b"a"]),
            QueryKey::of(CursorKind::History, &[b"a"])
        );
    }

    #[test]
    fn a_damaged_cursor_is_refused_whichever_byte_changed() {
        let bytes = cursor().encode();
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x01;
            assert!(
                matches!(Cursor::decode(&damaged), Err(CursorError::Malformed(_))),
                "byte {at} changed and the cursor was accepted"
            );
        }
        assert_eq!(
            Cursor::decode(&bytes[..LEN - 1]),
            Err(CursorError::Malformed("wrong length"))
        );
        assert_eq!(Cursor::decode(b"x"), Err(CursorError::Malformed("wrong length")));
    }

    #[test]
    fn a_keyed_cursor_round_trips_and_a_keyless_one_stays_version_1() {
        let plain = cursor().encode();
        assert_eq!(
            (plain.len(), plain[0]),
            (LEN, VERSION),
            "unchanged for the reads before keys"
        );
        let keyed = Cursor {
            after_key: b"team/a".to_vec(),
            ..Cursor::at(
                CursorKind::Namespaces,
                QueryKey::of(CursorKind::Namespaces, &[]),
                TxId(9),
                (0, 0),
            )
        };
        let bytes = keyed.encode();
        assert_eq!((bytes.len(), bytes[0]), (LEN + 6, VERSION_KEYED));
        assert_eq!(Cursor::decode(&bytes), Ok(keyed.clone()));
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x01;
            assert!(
                Cursor::decode(&damaged).is_err(),
                "byte {at} changed and was accepted"
            );
        }
        // A key cut off, or a keyed version with no key at all.
        assert!(Cursor::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut empty = plain.clone();
        empty[0] = VERSION_KEYED;
        assert_eq!(
            Cursor::decode(&empty),
            Err(CursorError::Malformed("wrong length"))
        );
        let too_long = vec![VERSION_KEYED; LEN + MAX_KEY + 1];
        assert_eq!(
            Cursor::decode(&too_long),
            Err(CursorError::Malformed("wrong length"))
        );
    }
}
