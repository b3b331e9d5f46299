//! The Python package `engram`, as the extension module `engram._engram` (built with maturin;
//! the pure-Python part and the type stubs are in `python/engram`).
//!
//! It is a thin layer over `engram-client`: leader discovery, retries with idempotency keys,
//! agent request signing and Merkle-proof checks are the Rust client's, never reimplemented
//! here. What this crate adds is the mapping of Python values and errors.
//!
//! Must not depend on: the server, Raft, storage or the core (it speaks the wire API only).

mod client;
mod convert;
mod errors;
mod types;

use pyo3::prelude::*;

#[pymodule]
fn _engram(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::EngramClient>()?;
    m.add_class::<client::Watch>()?;
    m.add_class::<client::Pages>()?;
    m.add_class::<types::Keyword>()?;
    m.add_class::<types::Vector>()?;
    m.add_class::<types::Ref>()?;
    m.add_class::<types::Lookup>()?;
    m.add_class::<types::Assert>()?;
    m.add_class::<types::Retract>()?;
    m.add_class::<types::Datom>()?;
    m.add_class::<types::Receipt>()?;
    m.add_class::<types::Entity>()?;
    m.add_class::<types::Hit>()?;
    m.add_class::<types::Diff>()?;
    m.add_class::<types::Rows>()?;
    m.add_class::<types::TxEvent>()?;
    m.add_function(wrap_pyfunction!(client::keygen, m)?)?;
    errors::register(m)?;
    Ok(())
}
