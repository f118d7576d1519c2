//! `cargo test` cases of the crate's edges, through the functions Python calls: the
//! scanner's verdicts (`scan`) and the record batches (`RecordBatches`, `RecordBatch`,
//! `partition_for_key`), the batches driven through an embedded interpreter as
//! `engine/batches.py` drives them. Kept apart from the code they test (its internals may
//! change freely); `tests/unit/test_native_scan.py` and `test_native_batch.py` hold the
//! same functions against the Python reference and aiokafka's builder.

mod batch;
mod scan;
