//! Schema as data: attribute declarations are transactions, stored twice over — as datoms on
//! one schema entity per attribute (`:db/ident`, `:db/valueType`, ...), so the schema has a
//! history, shows in reads and is hashed into the audit chain like any fact; and as the
//! attribute's schema row (`S`), the list of its declarations by transaction, so apply and
//! as-of reads find the declaration in force at any tx in one lookup.
//!
//! A namespace starts **open**: an attribute's type is fixed by its first assertion and
//! nothing else is checked. The first declaration makes it **strict**: from then on an
//! attribute nobody declared (and nobody used before) is refused. Migrations are forward-only:
//! planning checks each declaration against the one in force (`plan::check_migration`).

use engram_storage::{ReadView, Space, prefix_end};
use engram_types::{
    Attribute, AttributeDef, Cardinality, Datom, EntityId, Namespace, TxId, Unique, Value, ValueType,
};
use serde::{Deserialize, Serialize};

use crate::rows::decode_row;
use crate::{CoreError, keys};

/// One declaration of an attribute, as of the transaction that made it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchemaVersion {
    pub tx: TxId,
    /// The namespace's schema version this declaration introduced (0: typed by first use).
    pub version: u64,
    pub def: AttributeDef,
}

/// The `S` row of one attribute.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchemaRow {
    /// The entity carrying the attribute's `:db/*` datoms; `None` until it is declared.
    pub entity: Option<EntityId>,
    /// Oldest first; never empty.
    pub versions: Vec<SchemaVersion>,
}

impl SchemaRow {
    /// The declaration in force as of `as_of` (`None`: now).
    pub fn at(&self, as_of: Option<TxId>) -> Option<&SchemaVersion> {
        self.versions
            .iter()
            .rev()
            .find(|v| as_of.is_none_or(|t| v.tx <= t))
    }

    pub fn declared(&self) -> bool {
        self.entity.is_some()
    }
}

/// The `Q` row of a namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NamespaceSchema {
    /// Bumped by every schema transaction.
    pub version: u64,
    /// Whether attributes must be declared before use (set by the first declaration).
    pub strict: bool,
}

/// The definition an attribute gets from its first assertion in an open namespace: its
/// type, cardinality one, indexed by value (as every attribute was before it is declared).
/// Strings and vectors are searchable, so recall works before any schema is written; a
/// vector's dimension is the first value's, and it has no value index.
pub fn implicit_def(attr: &Attribute, first: &Value) -> AttributeDef {
    let mut def = AttributeDef::new(attr.clone(), first.value_type());
    match first {
        Value::Vector(v) => {
            def.dimension = u32::try_from(v.len()).unwrap_or(u32::MAX);
            def.searchable = true;
        }
        Value::String(_) => {
            def.indexed = true;
            def.searchable = true;
        }
        _ => def.indexed = true,
    }
    def
}

/// The built-in definitions of the reserved `:db` attributes the engine itself writes.
pub fn builtin(attr: &Attribute) -> Option<AttributeDef> {
    let ty = match attr.as_str() {
        IDENT | VALUE_TYPE | CARDINALITY | UNIQUE | BRANCH_STATE => ValueType::Keyword,
        INDEX | COMPONENT | DEPRECATED | SEARCHABLE => ValueType::Bool,
        DOC | BRANCH_NAME => ValueType::String,
        SCHEMA_VERSION | BRANCH_FORK | DIMENSION => ValueType::I64,
        _ => return None,
    };
    Some(AttributeDef::new(attr.clone(), ty))
}

pub const IDENT: &str = ":db/ident";
pub const VALUE_TYPE: &str = ":db/valueType";
pub const CARDINALITY: &str = ":db/cardinality";
pub const UNIQUE: &str = ":db/unique";
pub const INDEX: &str = ":db/index";
pub const COMPONENT: &str = ":db/isComponent";
pub const DOC: &str = ":db/doc";
pub const DEPRECATED: &str = ":db/deprecated";
pub const SEARCHABLE: &str = ":db/searchable";
pub const DIMENSION: &str = ":db/dimension";
pub const SCHEMA_VERSION: &str = ":db/schemaVersion";
pub const BRANCH_NAME: &str = ":db.branch/name";
pub const BRANCH_FORK: &str = ":db.branch/fork";
pub const BRANCH_STATE: &str = ":db.branch/state";

pub(crate) fn reserved(name: &str) -> Attribute {
    // The constants above are valid keywords; a failure is a typo in this file.
    Attribute::new(name).expect("built-in attribute names are valid")
}

fn keyword(k: String) -> Value {
    Value::Keyword(k)
}

pub fn type_keyword(t: ValueType) -> Value {
    keyword(format!(":db.type/{}", t.name()))
}

pub fn cardinality_keyword(c: Cardinality) -> Value {
    keyword(
        match c {
            Cardinality::One => ":db.cardinality/one",
            Cardinality::Many => ":db.cardinality/many",
        }
        .into(),
    )
}

pub fn unique_keyword(u: Unique) -> Value {
    keyword(
        match u {
            Unique::Identity => ":db.unique/identity",
            Unique::Value => ":db.unique/value",
        }
        .into(),
    )
}

/// The `:db/*` facts that take an attribute from `old` to `new` (every field when `old` is
/// `None`): (attribute, value, assert?) triples, then the schema version.
pub fn def_facts(
    old: Option<&AttributeDef>,
    new: &AttributeDef,
    version: u64,
) -> Vec<(Attribute, Value, bool)> {
    let mut out = Vec::new();
    let changed = |f: &dyn Fn(&AttributeDef) -> Value| old.is_none_or(|o| f(o) != f(new));
    let mut field = |name: &str, f: &dyn Fn(&AttributeDef) -> Value| {
        if changed(f) {
            out.push((reserved(name), f(new), true));
        }
    };
    field(IDENT, &|d| keyword(d.ident.as_str().to_string()));
    field(VALUE_TYPE, &|d| type_keyword(d.value_type));
    field(CARDINALITY, &|d| cardinality_keyword(d.cardinality));
    field(INDEX, &|d| Value::Bool(d.indexed));
    field(COMPONENT, &|d| Value::Bool(d.component));
    field(DEPRECATED, &|d| Value::Bool(d.deprecated));
    if !new.doc.is_empty() || old.is_some_and(|o| !o.doc.is_empty()) {
        field(DOC, &|d| Value::String(d.doc.clone()));
    }
    // Written once set, like the doc: a schema that never used them has the facts it always had.
    if new.searchable || old.is_some_and(|o| o.searchable) {
        field(SEARCHABLE, &|d| Value::Bool(d.searchable));
    }
    if new.dimension != 0 {
        field(DIMENSION, &|d| Value::I64(i64::from(d.dimension)));
    }
    match (old.and_then(|o| o.unique), new.unique) {
        (a, Some(b)) if a != Some(b) => out.push((reserved(UNIQUE), unique_keyword(b), true)),
        (Some(a), None) => out.push((reserved(UNIQUE), unique_keyword(a), false)),
        _ => {}
    }
    let version = i64::try_from(version).unwrap_or(i64::MAX);
    out.push((reserved(SCHEMA_VERSION), Value::I64(version), true));
    out
}

pub fn namespace_schema(store: &dyn ReadView, ns: &Namespace) -> Result<NamespaceSchema, CoreError> {
    match store.get(Space::State, &keys::ns_schema(ns))? {
        Some(bytes) => decode_row("namespace schema row", &bytes),
        None => Ok(NamespaceSchema::default()),
    }
}

pub fn row(store: &dyn ReadView, ns: &Namespace, attr: &Attribute) -> Result<Option<SchemaRow>, CoreError> {
    match store.get(Space::State, &keys::schema(ns, attr))? {
        Some(bytes) => Ok(Some(decode_row(&format!("schema row of {attr}"), &bytes)?)),
        None => Ok(None),
    }
}

/// The definition of `attr` in `ns` as of `as_of` (`None`: now): built-in for the reserved
/// attributes, else the schema row's declaration in force then.
pub fn def_at(
    store: &dyn ReadView,
    ns: &Namespace,
    attr: &Attribute,
    as_of: Option<TxId>,
) -> Result<Option<AttributeDef>, CoreError> {
    Ok(def_in(attr, row(store, ns, attr)?.as_ref(), as_of))
}

/// The definition of `attr` as of `as_of`: built-in for the reserved attributes, else the one
/// `row` (its schema row) holds then.
fn def_in(attr: &Attribute, row: Option<&SchemaRow>, as_of: Option<TxId>) -> Option<AttributeDef> {
    builtin(attr).or_else(|| row?.at(as_of).map(|v| v.def.clone()))
}

/// [`def_at`] over one read view for a caller that asks about many transactions of the same
/// attributes: each schema row is read and decoded once. Use one per view; a later view may
/// hold newer rows.
#[derive(Default)]
pub struct DefsAt {
    rows: std::collections::HashMap<Namespace, std::collections::HashMap<Attribute, Option<SchemaRow>>>,
}

impl DefsAt {
    pub fn def_at(
        &mut self,
        store: &dyn ReadView,
        ns: &Namespace,
        attr: &Attribute,
        as_of: Option<TxId>,
    ) -> Result<Option<AttributeDef>, CoreError> {
        if !self.rows.get(ns).is_some_and(|rows| rows.contains_key(attr)) {
            let read = row(store, ns, attr)?;
            self.rows
                .entry(ns.clone())
                .or_default()
                .insert(attr.clone(), read);
        }
        let row = self
            .rows
            .get(ns)
            .and_then(|rows| rows.get(attr))
            .and_then(Option::as_ref);
        Ok(def_in(attr, row, as_of))
    }
}

/// Cardinality of `attr` as of `as_of`; attributes with no definition then are cardinality one.
pub fn cardinality_at(
    store: &dyn ReadView,
    ns: &Namespace,
    attr: &Attribute,
    as_of: Option<TxId>,
) -> Result<Cardinality, CoreError> {
    Ok(def_at(store, ns, attr, as_of)?.map_or(Cardinality::One, |d| d.cardinality))
}

/// A namespace's schema as of a transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct SchemaView {
    pub version: u64,
    pub strict: bool,
    /// Per attribute, by name: the declaration in force, the schema entity (declared ones)
    /// and the tx that made the declaration.
    pub attributes: Vec<(SchemaVersion, Option<EntityId>)>,
}

/// The namespace's schema as of `as_of` (`None`: now).
pub fn view(store: &dyn ReadView, ns: &Namespace, as_of: Option<TxId>) -> Result<SchemaView, CoreError> {
    let prefix = keys::schema_prefix(ns);
    let rows = store.scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), usize::MAX)?;
    let mut attributes = Vec::new();
    let mut version = 0;
    for (key, bytes) in rows {
        let row: SchemaRow = decode_row("schema row", &bytes)?;
        if let Some(v) = row.at(as_of) {
            version = version.max(v.version);
            // A declaration whose schema entity came later was an implicit type then.
            let entity = row.entity.filter(|_| v.version > 0);
            attributes.push((v.clone(), entity));
        }
        let _ = key;
    }
    let now = namespace_schema(store, ns)?;
    let (version, strict) = match as_of {
        None => (now.version, now.strict),
        Some(_) => (version, version > 0),
    };
    Ok(SchemaView {
        version,
        strict,
        attributes,
    })
}

/// The AVET rows an index added to `attr` needs: one per datom already recorded.
pub fn backfill_value_index(
    store: &dyn ReadView,
    ns: &Namespace,
    attr: &Attribute,
) -> Result<Vec<Vec<u8>>, CoreError> {
    let prefix = keys::aevt_attr(ns, attr);
    let mut out = Vec::new();
    for (k, _) in store.scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), usize::MAX)? {
        let (e, tx, seq) = keys::trailing_entity_tx_seq(&k)
            .ok_or_else(|| CoreError::corrupt("AEVT row", "shorter than entity, tx and seq"))?;
        let eavt = keys::eavt(ns, e, attr, tx, seq);
        let bytes = store
            .get(Space::State, &eavt)?
            .ok_or_else(|| CoreError::corrupt("AEVT row", "points at a missing datom"))?;
        let datom = Datom::decode(&bytes).map_err(|err| CoreError::corrupt("datom row", err))?;
        out.push(keys::avet(ns, attr, &datom.value, e, tx, seq));
    }
    Ok(out)
}
