//! The package's value classes: what a caller builds (ops, keywords, refs, lookups) and what a
//! call returns (datoms, receipts, entities, diffs). Plain data; the bottom of the crate.

use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// A keyword value such as `:status/open`.
#[pyclass(frozen, eq, hash, module = "engram")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Keyword {
    #[pyo3(get)]
    pub name: String,
}

#[pymethods]
impl Keyword {
    #[new]
    fn new(name: String) -> Keyword {
        Keyword { name }
    }

    fn __repr__(&self) -> String {
        format!("Keyword({:?})", self.name)
    }

    fn __str__(&self) -> String {
        self.name.clone()
    }
}

/// A reference to an entity of the same namespace, as a value (or as an existing entity).
#[pyclass(frozen, eq, hash, module = "engram")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Ref {
    #[pyo3(get)]
    pub id: u64,
}

#[pymethods]
impl Ref {
    #[new]
    fn new(id: u64) -> Ref {
        Ref { id }
    }

    fn __repr__(&self) -> String {
        format!("Ref({})", self.id)
    }

    fn __int__(&self) -> u64 {
        self.id
    }
}

/// An embedding value: finite floats (stored as 32-bit), as many as the attribute's schema
/// dimension. Your model computes it; Engram stores, proves and searches it.
#[pyclass(frozen, eq, module = "engram")]
#[derive(Clone, PartialEq)]
pub struct Vector {
    #[pyo3(get)]
    pub values: Vec<f32>,
}

#[pymethods]
impl Vector {
    #[new]
    fn new(values: Vec<f32>) -> Vector {
        Vector { values }
    }

    fn __repr__(&self) -> String {
        let shown: Vec<String> = self.values.iter().take(4).map(|x| format!("{x}")).collect();
        let more = if self.values.len() > 4 { ", ..." } else { "" };
        format!(
            "Vector([{}{more}]) # {} components",
            shown.join(", "),
            self.values.len()
        )
    }

    fn __len__(&self) -> usize {
        self.values.len()
    }
}

/// The entity whose current value of a unique attribute is `value`.
#[pyclass(frozen, module = "engram")]
pub struct Lookup {
    #[pyo3(get)]
    pub attribute: String,
    #[pyo3(get)]
    pub value: Py<PyAny>,
}

#[pymethods]
impl Lookup {
    #[new]
    fn new(attribute: String, value: Py<PyAny>) -> Lookup {
        Lookup { attribute, value }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Lookup({:?}, {})",
            self.attribute,
            self.value.bind(py).repr()?
        ))
    }
}

/// Assert `value` for `attribute` of `entity`, optionally only over a valid-time interval.
#[pyclass(frozen, module = "engram")]
pub struct Assert {
    #[pyo3(get)]
    pub entity: Py<PyAny>,
    #[pyo3(get)]
    pub attribute: String,
    #[pyo3(get)]
    pub value: Py<PyAny>,
    #[pyo3(get)]
    pub valid_from: Option<Py<PyAny>>,
    #[pyo3(get)]
    pub valid_to: Option<Py<PyAny>>,
}

#[pymethods]
impl Assert {
    #[new]
    #[pyo3(signature = (entity, attribute, value, *, valid_from=None, valid_to=None))]
    fn new(
        entity: Py<PyAny>,
        attribute: String,
        value: Py<PyAny>,
        valid_from: Option<Py<PyAny>>,
        valid_to: Option<Py<PyAny>>,
    ) -> Assert {
        Assert {
            entity,
            attribute,
            value,
            valid_from,
            valid_to,
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Assert({}, {:?}, {})",
            self.entity.bind(py).repr()?,
            self.attribute,
            self.value.bind(py).repr()?
        ))
    }
}

/// Retract `value` of `attribute` of `entity`.
#[pyclass(frozen, module = "engram")]
pub struct Retract {
    #[pyo3(get)]
    pub entity: Py<PyAny>,
    #[pyo3(get)]
    pub attribute: String,
    #[pyo3(get)]
    pub value: Py<PyAny>,
}

#[pymethods]
impl Retract {
    #[new]
    fn new(entity: Py<PyAny>, attribute: String, value: Py<PyAny>) -> Retract {
        Retract {
            entity,
            attribute,
            value,
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Retract({}, {:?}, {})",
            self.entity.bind(py).repr()?,
            self.attribute,
            self.value.bind(py).repr()?
        ))
    }
}

/// One recorded fact: never rewritten, only followed by newer datoms.
#[pyclass(frozen, get_all, module = "engram")]
pub struct Datom {
    pub namespace: String,
    /// The branch it was written on; `None`: main.
    pub branch: Option<String>,
    pub entity: u64,
    pub attribute: String,
    pub value: Py<PyAny>,
    /// `"assert"` or `"retract"`.
    pub op: &'static str,
    pub valid_from_ns: i64,
    pub valid_to_ns: Option<i64>,
    pub tx: u64,
    pub agent: String,
    pub session: String,
    pub source: String,
    pub confidence: f64,
    /// `"candidate"` or `"verified"`.
    pub status: &'static str,
    /// blake3 of the datom's canonical bytes: its leaf in the audit proofs.
    pub hash: Vec<u8>,
    /// Why the value is withheld (`value` is then None): the reader's grants do not cover the
    /// attribute. The hash is the datom's own, so a proof still verifies.
    pub redacted: Option<String>,
}

#[pymethods]
impl Datom {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Datom(e={}, a={:?}, v={}, op={}, tx={}, agent={:?}, status={})",
            self.entity,
            self.attribute,
            self.value.bind(py).repr()?,
            self.op,
            self.tx,
            self.agent,
            self.status
        ))
    }
}

/// What a committed transaction returns.
#[pyclass(frozen, get_all, module = "engram")]
pub struct Receipt {
    /// The transaction's id: reads `as_of_tx` it see it and everything before it.
    pub tx: u64,
    pub tx_time_ns: i64,
    pub audit_index: u64,
    pub audit_hash: Vec<u8>,
    /// The entity id each temporary name was given.
    pub temp_ids: Py<PyDict>,
    pub datom_hashes: Vec<Vec<u8>>,
}

#[pymethods]
impl Receipt {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Receipt(tx={}, audit_index={}, temp_ids={})",
            self.tx,
            self.audit_index,
            self.temp_ids.bind(py).repr()?
        ))
    }
}

/// A fact `search` found: the asserting datom, its fused score, and each signal's rank for it.
#[pyclass(frozen, get_all, module = "engram")]
pub struct Hit {
    pub datom: Py<Datom>,
    /// The fused score; hits come best first.
    pub score: f64,
    /// `(signal, rank)` for each signal that ranked it: "text", "recency", "prior"; rank 1 is
    /// first, and facts a signal cannot tell apart share a rank.
    pub signals: Vec<(String, u32)>,
    /// Another hit of the same answer is another agent's different claim on the same slot.
    pub conflicting: bool,
    /// The datom's position in its transaction.
    pub seq: u32,
    /// With `search(..., current=True)`: whether the fact is still held on main ("current",
    /// "superseded", "unknown", "not-on-main"); None otherwise.
    pub current: Option<String>,
}

#[pymethods]
impl Hit {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let d = self.datom.bind(py).get();
        Ok(format!(
            "Hit(entity={}, attribute={:?}, score={:.4}, signals={:?}{})",
            d.entity,
            d.attribute,
            self.score,
            self.signals,
            if self.conflicting { ", conflicting" } else { "" }
        ))
    }
}

/// An entity's current facts, as of the read's point in time.
#[pyclass(frozen, get_all, module = "engram")]
pub struct Entity {
    pub id: u64,
    /// The chosen fact per attribute (every value, for cardinality many).
    pub datoms: Py<PyList>,
    /// Claims by other agents that disagree with the chosen value.
    pub conflicts: Py<PyList>,
    /// The transaction the answer was read at.
    pub applied_tx: u64,
    /// Whether every datom was checked against a Merkle proof and a signed checkpoint.
    pub proven: bool,
    /// Whether the answer was also proven complete and current (`get(..., complete=True)`).
    pub complete: bool,
    /// With `complete`: attributes whose histories were proven whole but whose live claims were
    /// taken as sent (their values are withheld from this caller, or redacted).
    pub unfolded: Vec<String>,
    /// When the read left the entity out because its `:memory/expires` had passed (ns since
    /// the Unix epoch; `datoms` is then empty); None otherwise.
    pub expired_at_ns: Option<i64>,
}

#[pymethods]
impl Entity {
    /// The value of `attribute`: one value, or a list for an attribute holding several.
    fn __getitem__(&self, py: Python<'_>, attribute: &str) -> PyResult<Py<PyAny>> {
        let mut values = Vec::new();
        for datom in self.datoms.bind(py).iter() {
            let datom = datom.cast::<Datom>()?.get();
            if datom.attribute == attribute {
                values.push(datom.value.clone_ref(py));
            }
        }
        match values.len() {
            0 => Err(PyKeyError::new_err(attribute.to_string())),
            1 => Ok(values.remove(0)),
            _ => Ok(PyList::new(py, values)?.into_any().unbind()),
        }
    }

    fn __contains__(&self, py: Python<'_>, attribute: &str) -> PyResult<bool> {
        for datom in self.datoms.bind(py).iter() {
            if datom.cast::<Datom>()?.get().attribute == attribute {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// `entity[attribute]`, or `default` when the entity has no value for it.
    #[pyo3(signature = (attribute, default=None))]
    fn get(&self, py: Python<'_>, attribute: &str, default: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        match self.__getitem__(py, attribute) {
            Ok(v) => Ok(v),
            Err(e) if e.is_instance_of::<PyKeyError>(py) => Ok(default.unwrap_or_else(|| py.None())),
            Err(e) => Err(e),
        }
    }

    /// Attribute → value (a list for an attribute holding several values).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for datom in self.datoms.bind(py).iter() {
            let attribute = datom.cast::<Datom>()?.get().attribute.clone();
            if !out.contains(&attribute)? {
                out.set_item(&attribute, self.__getitem__(py, &attribute)?)?;
            }
        }
        Ok(out)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("Entity({}, {})", self.id, self.to_dict(py)?.repr()?))
    }
}

/// What changed between two transactions.
#[pyclass(frozen, get_all, module = "engram")]
pub struct Diff {
    pub asserted: Py<PyList>,
    pub retracted: Py<PyList>,
    /// Branch diffs only: what main changed since the fork on the same entity-attribute pairs.
    pub main_changed: Py<PyList>,
    /// The upper bound actually used.
    pub to_tx: u64,
    /// The limit stopped the reading before the end: more changes follow (`diff` reads every
    /// one with `limit=0`).
    pub truncated: bool,
}

/// The answer to a join query: its columns (the `find` variables), its rows (tuples of
/// values in column order; an entity is a `Ref`), the transaction it was read as of, the
/// rows its run read, and the plan (with `explain=True`). Iterating it yields the rows.
#[pyclass(frozen, get_all, module = "engram")]
pub struct Rows {
    pub columns: Vec<String>,
    pub rows: Py<PyList>,
    pub as_of_tx: u64,
    pub rows_read: u64,
    /// One dict per step: `clause`, `access`, `binds`, `uses`, `rows_read`, `rows_out`.
    pub plan: Py<PyList>,
}

#[pymethods]
impl Rows {
    fn __len__(&self, py: Python<'_>) -> usize {
        self.rows.bind(py).len()
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.rows.bind(py).try_iter()?.into_any().unbind())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Rows(columns={:?}, rows={}, as_of_tx={})",
            self.columns,
            self.rows.bind(py).len(),
            self.as_of_tx
        )
    }
}

/// One transaction delivered by a watch.
#[pyclass(frozen, get_all, module = "engram")]
pub struct TxEvent {
    pub tx: u64,
    pub tx_time_ns: i64,
    pub audit_index: u64,
    pub datoms: Py<PyList>,
}

#[pymethods]
impl TxEvent {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!("TxEvent(tx={}, datoms={})", self.tx, self.datoms.bind(py).len())
    }
}
