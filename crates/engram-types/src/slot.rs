//! The state commitment's slots (`docs/AUDIT.md`, "State commitment"): the key of a slot
//! (namespace, branch, entity, attribute) in the state map, and the chain its digest is. Here so
//! that apply (`engram_core::commitment`) and the offline verifier compute them alike.
//!
//! A slot key is 16 bytes of the entity's hash then 16 of the attribute's, so an entity's slots
//! share their first [`ENTITY_PREFIX_BITS`] bits. A slot's digest chains the transactions that
//! wrote it: each link hashes the link before, the transaction and the hashes of the datoms it
//! wrote to the slot, in seq order.

use crate::{Attribute, BranchName, EntityId, Hash, Namespace, TxId};

/// Bits of a slot key that name its entity: a prefix proof over them lists the entity's slots.
pub const ENTITY_PREFIX_BITS: u16 = 128;

/// The key of a slot in the map.
pub fn slot_key(ns: &Namespace, branch: Option<&BranchName>, e: EntityId, attr: &Attribute) -> [u8; 32] {
    let mut key = entity_prefix(ns, branch, e);
    let mut h = blake3::Hasher::new();
    h.update(b"engram.slot.attribute.v1");
    h.update(&(attr.as_str().len() as u32).to_be_bytes());
    h.update(attr.as_str().as_bytes());
    key[16..].copy_from_slice(&h.finalize().as_bytes()[..16]);
    key
}

/// The first [`ENTITY_PREFIX_BITS`] of every slot key of an entity (the rest zero).
pub fn entity_prefix(ns: &Namespace, branch: Option<&BranchName>, e: EntityId) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"engram.slot.entity.v1");
    h.update(&(ns.as_str().len() as u32).to_be_bytes());
    h.update(ns.as_str().as_bytes());
    match branch {
        None => {
            h.update(&[0]);
        }
        Some(b) => {
            h.update(&[1]);
            h.update(&(b.as_str().len() as u32).to_be_bytes());
            h.update(b.as_str().as_bytes());
        }
    }
    h.update(&e.0.to_be_bytes());
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(&h.finalize().as_bytes()[..16]);
    key
}

/// A slot's digest after transaction `tx` wrote the datoms hashed `written` (in seq order);
/// `prev` is its digest before (`None`: never written).
pub fn step(prev: Option<&[u8; 32]>, tx: TxId, written: &[Hash]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"engram.slot.v1");
    h.update(prev.unwrap_or(&[0u8; 32]));
    h.update(&tx.0.to_be_bytes());
    h.update(&(written.len() as u32).to_be_bytes());
    for w in written {
        h.update(w.as_bytes());
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entitys_slots_share_its_prefix_and_nothing_else_does() {
        let ns = Namespace::new("team/a").unwrap();
        let title = Attribute::new(":task/title").unwrap();
        let owner = Attribute::new(":task/owner").unwrap();
        let plan = BranchName::new("plan").unwrap();
        let a = slot_key(&ns, None, EntityId(7), &title);
        let b = slot_key(&ns, None, EntityId(7), &owner);
        assert_eq!(a[..16], b[..16]);
        assert_ne!(a[16..], b[16..]);
        assert_eq!(a[..16], entity_prefix(&ns, None, EntityId(7))[..16]);
        assert_eq!(entity_prefix(&ns, None, EntityId(7))[16..], [0u8; 16]);
        for other in [
            slot_key(&ns, None, EntityId(8), &title),
            slot_key(&ns, Some(&plan), EntityId(7), &title),
            slot_key(&Namespace::new("team/b").unwrap(), None, EntityId(7), &title),
        ] {
            assert_ne!(other[..16], a[..16]);
            assert_eq!(
                other[16..],
                a[16..],
                "the attribute half depends on the attribute alone"
            );
        }
    }

    #[test]
    fn a_digest_commits_to_every_link_in_order() {
        let (h1, h2) = (Hash::of(b"one"), Hash::of(b"two"));
        let first = step(None, TxId(3), &[h1]);
        let both = step(Some(&first), TxId(5), &[h2]);
        assert_ne!(both, step(None, TxId(5), &[h2]), "the link before counts");
        assert_ne!(
            both,
            step(Some(&step(None, TxId(3), &[h2])), TxId(5), &[h1]),
            "order counts"
        );
        assert_ne!(first, step(None, TxId(4), &[h1]), "the transaction counts");
        assert_ne!(step(None, TxId(3), &[h1, h2]), step(None, TxId(3), &[h2, h1]));
    }
}
