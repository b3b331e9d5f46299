//! The storage conformance suite: every [`Store`] implementation runs [`run_all`] from its own
//! tests with a factory that makes an empty store. Each check panics with a message naming
//! the broken rule.

use crate::{Durability, Space, Store, WriteBatch};

/// Makes a fresh, empty store for one check.
pub type Factory<'a> = dyn Fn() -> Box<dyn Store> + 'a;

pub fn run_all(factory: &Factory<'_>) {
    put_get_delete(&*factory());
    spaces_are_disjoint(&*factory());
    scans_are_ordered_bounded_and_limited(&*factory());
    delete_range_and_clear(&*factory());
    batches_apply_in_order(&*factory());
    for_each_visits_everything_in_order(&*factory());
    binary_keys_and_values(&*factory());
    an_intact_store_verifies_its_checksums(&*factory());
    buffered_writes_are_visible_before_a_sync(&*factory());
}

pub fn buffered_writes_are_visible_before_a_sync(store: &dyn Store) {
    let mut b = WriteBatch::new();
    b.put(Space::Log, b"k".to_vec(), b"v".to_vec());
    store.write(b, Durability::Buffered).expect("buffered write");
    assert_eq!(
        store.get(Space::Log, b"k").expect("get"),
        Some(b"v".to_vec()),
        "a buffered write is readable at once"
    );
    store.sync().expect("sync");
    store.sync().expect("a sync with nothing pending succeeds too");
    assert_eq!(store.get(Space::Log, b"k").expect("get"), Some(b"v".to_vec()));
}

pub fn an_intact_store_verifies_its_checksums(store: &dyn Store) {
    store.verify_checksums().expect("an empty store verifies");
    for space in Space::ALL {
        put(store, space, b"k", b"v");
    }
    store.verify_checksums().expect("an intact store verifies");
}

fn put(store: &dyn Store, space: Space, key: &[u8], value: &[u8]) {
    let mut b = WriteBatch::new();
    b.put(space, key.to_vec(), value.to_vec());
    store.write(b, Durability::Sync).expect("write");
}

fn keys(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<Vec<u8>> {
    pairs.into_iter().map(|(k, _)| k).collect()
}

pub fn put_get_delete(store: &dyn Store) {
    assert_eq!(
        store.get(Space::State, b"k").expect("get"),
        None,
        "a new store is empty"
    );
    put(store, Space::State, b"k", b"v1");
    assert_eq!(store.get(Space::State, b"k").expect("get"), Some(b"v1".to_vec()));
    put(store, Space::State, b"k", b"v2");
    assert_eq!(
        store.get(Space::State, b"k").expect("get"),
        Some(b"v2".to_vec()),
        "put overwrites"
    );
    let mut b = WriteBatch::new();
    b.delete(Space::State, b"k".to_vec());
    store.write(b, Durability::Buffered).expect("write");
    assert_eq!(
        store.get(Space::State, b"k").expect("get"),
        None,
        "delete removes"
    );
}

pub fn spaces_are_disjoint(store: &dyn Store) {
    for (i, space) in Space::ALL.into_iter().enumerate() {
        put(store, space, b"same", &[i as u8]);
    }
    for (i, space) in Space::ALL.into_iter().enumerate() {
        assert_eq!(
            store.get(space, b"same").expect("get"),
            Some(vec![i as u8]),
            "{space:?} leaks"
        );
    }
}

pub fn scans_are_ordered_bounded_and_limited(store: &dyn Store) {
    for k in [b"b", b"d", b"a", b"c", b"e"] {
        put(store, Space::Log, k, b"x");
    }
    let all = keys(store.scan(Space::Log, b"", None, usize::MAX).expect("scan"));
    assert_eq!(
        all,
        vec![
            b"a".to_vec(),
            b"b".to_vec(),
            b"c".to_vec(),
            b"d".to_vec(),
            b"e".to_vec()
        ]
    );
    let mid = keys(
        store
            .scan(Space::Log, b"b", Some(b"d"), usize::MAX)
            .expect("scan"),
    );
    assert_eq!(mid, vec![b"b".to_vec(), b"c".to_vec()], "scan is [start, end)");
    let two = keys(store.scan(Space::Log, b"a", None, 2).expect("scan"));
    assert_eq!(two.len(), 2, "scan honours limit");
    let rev = keys(
        store
            .scan_rev(Space::Log, b"b", Some(b"e"), usize::MAX)
            .expect("scan_rev"),
    );
    assert_eq!(
        rev,
        vec![b"d".to_vec(), b"c".to_vec(), b"b".to_vec()],
        "scan_rev is [start, end) descending"
    );
    let last = keys(store.scan_rev(Space::Log, b"", None, 1).expect("scan_rev"));
    assert_eq!(last, vec![b"e".to_vec()]);
    assert!(
        store
            .scan(Space::Log, b"d", Some(b"b"), 10)
            .expect("scan")
            .is_empty(),
        "empty range"
    );
    assert!(
        store
            .scan_rev(Space::Log, b"d", Some(b"d"), 10)
            .expect("scan")
            .is_empty(),
        "empty range"
    );
}

pub fn delete_range_and_clear(store: &dyn Store) {
    for k in [b"1", b"2", b"3", b"4"] {
        put(store, Space::State, k, b"x");
    }
    put(store, Space::Raft, b"2", b"keep");
    let mut b = WriteBatch::new();
    b.delete_range(Space::State, b"2".to_vec(), b"4".to_vec());
    store.write(b, Durability::Sync).expect("write");
    let left = keys(store.scan(Space::State, b"", None, 10).expect("scan"));
    assert_eq!(
        left,
        vec![b"1".to_vec(), b"4".to_vec()],
        "delete_range is [start, end)"
    );
    let mut b = WriteBatch::new();
    b.clear(Space::State);
    b.put(Space::State, b"new".to_vec(), b"y".to_vec());
    store.write(b, Durability::Sync).expect("write");
    let left = keys(store.scan(Space::State, b"", None, 10).expect("scan"));
    assert_eq!(left, vec![b"new".to_vec()], "clear then put in one batch");
    assert_eq!(
        store.get(Space::Raft, b"2").expect("get"),
        Some(b"keep".to_vec()),
        "clear is per space"
    );
}

pub fn batches_apply_in_order(store: &dyn Store) {
    let mut b = WriteBatch::new();
    b.put(Space::State, b"k".to_vec(), b"first".to_vec());
    b.delete(Space::State, b"k".to_vec());
    b.put(Space::State, b"k".to_vec(), b"last".to_vec());
    b.put(Space::Log, b"other".to_vec(), b"z".to_vec());
    store.write(b, Durability::Sync).expect("write");
    assert_eq!(
        store.get(Space::State, b"k").expect("get"),
        Some(b"last".to_vec()),
        "mutations apply in order"
    );
    assert_eq!(store.get(Space::Log, b"other").expect("get"), Some(b"z".to_vec()));
}

pub fn for_each_visits_everything_in_order(store: &dyn Store) {
    for i in (0u8..50).rev() {
        put(store, Space::State, &[i], &[i, i]);
    }
    let mut seen = Vec::new();
    store
        .for_each(Space::State, &mut |k, v| {
            assert_eq!(v, [k[0], k[0]]);
            seen.push(k[0]);
            Ok(())
        })
        .expect("for_each");
    assert_eq!(seen, (0u8..50).collect::<Vec<_>>());
}

pub fn binary_keys_and_values(store: &dyn Store) {
    let key = [0u8, 0, 1, 0xfe];
    let value: Vec<u8> = (0..=255u8).collect();
    put(store, Space::Log, &key, &value);
    assert_eq!(store.get(Space::Log, &key).expect("get"), Some(value));
    assert_eq!(
        store.get(Space::Log, &[0u8, 0]).expect("get"),
        None,
        "no prefix matching on get"
    );
    let big = vec![7u8; 4 << 20];
    put(store, Space::State, b"big", &big);
    assert_eq!(
        store.get(Space::State, b"big").expect("get").map(|v| v.len()),
        Some(big.len())
    );
}
