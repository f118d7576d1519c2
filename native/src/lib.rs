//! The strict-JSON shape check of symfonic-stream's decoder, in one pass over the bytes.
//!
//! `scan` answers, for one record value, the questions `models/decoding.py` asks before
//! pydantic validates: is it strict JSON as orjson reads it (no NaN, no Infinity, valid
//! UTF-8, no lone surrogate, at most 1,024 levels), is it an object, and can the project
//! carry it (nesting within `max_depth`, integers within `±max_integer`, no key twice in an
//! object). It builds nothing: the Python reference (`check_shape` after `orjson.loads`)
//! builds a tree and walks it, this reads the bytes once (`json_scan.rs`, without recursion), so
//! pydantic can then validate straight from them. The verdicts are the reference's, in the
//! reference's precedence; `tests/unit/test_native_scan.py` holds the two against each
//! other.
//!
//! The crate's other half, `batch`, builds a transaction's Kafka record batches.

mod batch;
mod json_scan;

use pyo3::prelude::*;

/// Read `value` once; `None` when it is a document the project can carry: with `object`
/// (the decoder's records) a JSON object, without (`parse_json`) any JSON document, with
/// the same checks of depth, integers and keys either way.
#[pyfunction]
#[pyo3(signature = (value, max_depth, max_integer, object = true))]
fn scan(
    value: &[u8],
    max_depth: usize,
    max_integer: u64,
    object: bool,
) -> Option<json_scan::Verdict> {
    json_scan::scan(value, max_depth, max_integer, object)
}

#[pymodule(name = "_native")]
fn symfonic_scan(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(scan, module)?)?;
    module.add_function(wrap_pyfunction!(batch::partition_for_key, module)?)?;
    module.add_class::<batch::RecordBatch>()?;
    module.add_class::<batch::RecordBatches>()
}

#[cfg(test)]
mod edge_cases;
