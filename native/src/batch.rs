//! One transaction's Kafka record batches (message format v2), built in one call per kind
//! of record instead of one Python call per record.
//!
//! `engine/batches.py` hands a transaction's outputs, dead letters and changelog records
//! here; `RecordBatches` places each keyed record on the partition Kafka's default
//! partitioner picks (murmur2, as the Java client), appends it to that partition's open
//! batch, and starts another when a batch is full. Each batch is a `RecordBatch` that
//! aiokafka's sender takes as it takes its own builder: it sets the producer's id, epoch
//! and sequence, then asks for the bytes (`_build`), and the header and its CRC-32C are
//! written then. `tests/unit/test_native_batch.py` holds the bytes against aiokafka's own
//! builder and the partitions against the Python partitioner.

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::collections::HashMap;

/// The v2 batch header: base offset 8, length 4, leader epoch 4, magic 1, CRC 4,
/// attributes 2, last offset delta 4, first and max timestamp 8 + 8, producer id 8,
/// producer epoch 2, base sequence 4, record count 4.
const HEADER_BYTES: usize = 61;
/// Where the CRC goes, and where what it covers starts (the attributes).
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
/// The attributes of a transactional batch without compression.
const TRANSACTIONAL: i16 = 0x10;

/// Kafka's zig-zag varint (`ByteUtils.writeVarlong`).
fn put_varint(out: &mut Vec<u8>, value: i64) {
    let mut rest = ((value << 1) ^ (value >> 63)) as u64;
    while rest >= 0x80 {
        out.push((rest as u8) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// How many bytes `put_varint` writes for `value`.
fn varint_len(value: i64) -> usize {
    let rest = ((value << 1) ^ (value >> 63)) as u64;
    (64 - rest.leading_zeros() as usize).div_ceil(7).max(1)
}

/// `len` of a key, value or header value, or -1 for null, then the bytes.
fn put_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(data) => {
            put_varint(out, data.len() as i64);
            out.extend_from_slice(data);
        }
        None => put_varint(out, -1),
    }
}

/// Kafka's `Utils.murmur2` (seed 0x9747b28c), as the default partitioner hashes a key.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// `toPositive(murmur2(key)) % count`, as the Java client's `partitionForKey` (count ≥ 1).
fn partition_of(key: &[u8], count: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % count
}

/// The partition Kafka's default partitioner picks for `key` among `count`.
#[pyfunction]
pub fn partition_for_key(key: &[u8], count: i32) -> PyResult<i32> {
    if count < 1 {
        return Err(PyRuntimeError::new_err(format!(
            "a topic has at least 1 partition, not {count}"
        )));
    }
    Ok(partition_of(key, count))
}

/// One (topic, partition)'s batch: what aiokafka's `BatchBuilder` is to its sender.
#[pyclass(module = "symfonic_stream._native")]
pub struct RecordBatch {
    /// The header's room, then the records.
    buffer: Vec<u8>,
    count: i32,
    timestamp_ms: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    built: Option<Py<PyBytes>>,
}

impl RecordBatch {
    fn new(timestamp_ms: i64) -> Self {
        let mut buffer = Vec::with_capacity(4096);
        buffer.resize(HEADER_BYTES, 0);
        RecordBatch {
            buffer,
            count: 0,
            timestamp_ms,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            built: None,
        }
    }

    /// Append one record, unless the batch holds something and would grow past
    /// `max_bytes`. `rest`: the record after its attributes and its timestamp and offset
    /// deltas, which are written here (the offset is the batch's own count).
    fn push_record(&mut self, rest: &[u8], max_bytes: usize) -> bool {
        let offset = i64::from(self.count);
        // attributes 0, timestamp delta 0 (one timestamp per batch), offset delta
        let body = 2 + varint_len(offset) + rest.len();
        if self.count > 0 && self.buffer.len() + varint_len(body as i64) + body > max_bytes {
            return false;
        }
        put_varint(&mut self.buffer, body as i64);
        self.buffer.extend_from_slice(&[0, 0]);
        put_varint(&mut self.buffer, offset);
        self.buffer.extend_from_slice(rest);
        self.count += 1;
        true
    }

    fn write_header(&mut self) {
        let length = (self.buffer.len() - 12) as i32;
        let mut header = Vec::with_capacity(HEADER_BYTES);
        header.extend_from_slice(&0i64.to_be_bytes()); // base offset: the broker's
        header.extend_from_slice(&length.to_be_bytes());
        header.extend_from_slice(&(-1i32).to_be_bytes()); // no partition leader epoch
        header.push(2); // magic
        header.extend_from_slice(&0u32.to_be_bytes()); // the CRC, below
        header.extend_from_slice(&TRANSACTIONAL.to_be_bytes());
        header.extend_from_slice(&(self.count - 1).to_be_bytes()); // last offset delta
        header.extend_from_slice(&self.timestamp_ms.to_be_bytes()); // first
        header.extend_from_slice(&self.timestamp_ms.to_be_bytes()); // max
        header.extend_from_slice(&self.producer_id.to_be_bytes());
        header.extend_from_slice(&self.producer_epoch.to_be_bytes());
        header.extend_from_slice(&self.base_sequence.to_be_bytes());
        header.extend_from_slice(&self.count.to_be_bytes());
        self.buffer[..HEADER_BYTES].copy_from_slice(&header);
        let crc = crc32c::crc32c(&self.buffer[ATTRIBUTES_AT..]);
        self.buffer[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    }
}

#[pymethods]
impl RecordBatch {
    /// Set by aiokafka's sender before it asks for the bytes (idempotence, transactions).
    #[pyo3(name = "_set_producer_state")]
    fn set_producer_state(&mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
    }

    /// The batch's bytes, header and CRC written the first time (a retry resends them).
    #[pyo3(name = "_build")]
    fn build(&mut self, py: Python<'_>) -> Py<PyBytes> {
        if let Some(built) = &self.built {
            return built.clone_ref(py);
        }
        self.write_header();
        let built = PyBytes::new(py, &self.buffer).unbind();
        self.built = Some(built.clone_ref(py));
        built
    }

    fn record_count(&self) -> i32 {
        self.count
    }

    fn size(&self) -> usize {
        self.buffer.len()
    }

    /// Always: nothing is appended to a batch once it is handed to aiokafka.
    fn closed(&self) -> bool {
        true
    }

    fn close(&self) {}

    /// aiokafka's ``producer.send`` appends to a tail batch that is open: never this one.
    #[pyo3(signature = (**_kwargs))]
    fn append(&self, _kwargs: Option<&Bound<'_, PyDict>>) -> Option<Py<PyAny>> {
        None
    }
}

/// One transaction's batches, one open per (topic, partition).
#[pyclass(module = "symfonic_stream._native")]
pub struct RecordBatches {
    max_bytes: usize,
    timestamp_ms: i64,
    /// Batches that filled up, in the order they did.
    full: Vec<(String, i32, RecordBatch)>,
    /// Open batches, in the order they were started.
    open: Vec<(String, i32, RecordBatch)>,
    /// topic → partition → index in `open`.
    where_open: HashMap<String, HashMap<i32, usize>>,
    /// topic → its partition count (from the caller's dict, once per topic).
    counts: HashMap<String, i32>,
    /// One record's body, reused.
    scratch: Vec<u8>,
}

impl RecordBatches {
    fn put(&mut self, topic: &str, partition: i32) {
        let at = match self.where_open.get(topic).and_then(|p| p.get(&partition)) {
            Some(&at) => at,
            None => {
                let at = self.open.len();
                self.open.push((
                    topic.to_owned(),
                    partition,
                    RecordBatch::new(self.timestamp_ms),
                ));
                self.where_open
                    .entry(topic.to_owned())
                    .or_default()
                    .insert(partition, at);
                at
            }
        };
        if self.open[at].2.push_record(&self.scratch, self.max_bytes) {
            return;
        }
        // Full: it waits its turn, and the next one starts (a first record always fits).
        let mut next = RecordBatch::new(self.timestamp_ms);
        next.push_record(&self.scratch, self.max_bytes);
        let full = std::mem::replace(&mut self.open[at].2, next);
        self.full.push((topic.to_owned(), partition, full));
    }

    /// The record's key, value and headers into `scratch`, then into its batch.
    fn encode(
        &mut self,
        topic: &str,
        partition: i32,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let scratch = &mut self.scratch;
        scratch.clear();
        // aiokafka refuses a record with neither; Kafka allows it, and it is sent as "".
        let value = if key.is_none() && value.is_none() {
            Some(&b""[..])
        } else {
            value
        };
        put_bytes(scratch, key);
        put_bytes(scratch, value);
        match headers {
            None => put_varint(scratch, 0),
            Some(headers) => {
                let count = headers.len()?;
                put_varint(scratch, count as i64);
                let mut written = 0;
                for header in headers.try_iter()? {
                    written += 1;
                    let pair = header?;
                    let pair = pair.cast::<PyTuple>()?;
                    let name = pair.get_item(0)?;
                    let name = name.cast::<PyString>()?.to_str()?;
                    put_bytes(scratch, Some(name.as_bytes()));
                    let value = pair.get_item(1)?;
                    if value.is_none() {
                        put_bytes(scratch, None);
                    } else {
                        put_bytes(scratch, Some(value.cast::<PyBytes>()?.as_bytes()));
                    }
                }
                if written != count {
                    return Err(PyTypeError::new_err("headers changed length while read"));
                }
            }
        }
        self.put(topic, partition);
        Ok(())
    }

    fn count_of(&mut self, topic: &str, counts: &Bound<'_, PyDict>) -> PyResult<i32> {
        if let Some(&count) = self.counts.get(topic) {
            return Ok(count);
        }
        let count: i32 = counts
            .get_item(topic)?
            .ok_or_else(|| {
                PyRuntimeError::new_err(format!("partition count of {topic:?} not learnt"))
            })?
            .extract()?;
        if count < 1 {
            return Err(PyRuntimeError::new_err(format!(
                "{topic:?} has {count} partitions"
            )));
        }
        self.counts.insert(topic.to_owned(), count);
        Ok(count)
    }
}

fn optional_bytes<'a>(item: &'a Bound<'_, PyAny>) -> PyResult<Option<&'a [u8]>> {
    if item.is_none() {
        return Ok(None);
    }
    Ok(Some(
        item.cast::<PyBytes>()
            .map_err(|_| PyTypeError::new_err("a record's key and value are bytes or None"))?
            .as_bytes(),
    ))
}

#[pymethods]
impl RecordBatches {
    #[new]
    fn py_new(max_bytes: usize, timestamp_ms: i64) -> Self {
        RecordBatches {
            max_bytes,
            timestamp_ms,
            full: Vec::new(),
            open: Vec::new(),
            where_open: HashMap::new(),
            counts: HashMap::new(),
            scratch: Vec::with_capacity(1024),
        }
    }

    /// One record on a given partition.
    fn add(
        &mut self,
        topic: &str,
        partition: i32,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        headers: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.encode(
            topic,
            partition,
            optional_bytes(key)?,
            optional_bytes(value)?,
            Some(headers),
        )
    }

    /// A list of `OutputRecord`s (topic, key, value, record_type, source_ts, headers),
    /// each keyed one on its key's partition (`counts`: topic → partition count), each
    /// keyless one on `keyless` modulo the count.
    fn add_outputs(
        &mut self,
        records: &Bound<'_, PyList>,
        counts: &Bound<'_, PyDict>,
        keyless: i32,
    ) -> PyResult<()> {
        for record in records.iter() {
            let record = record.cast::<PyTuple>()?;
            let topic = record.get_item(0)?;
            let topic = topic.cast::<PyString>()?.to_str()?;
            let key = record.get_item(1)?;
            let key = optional_bytes(&key)?;
            let value = record.get_item(2)?;
            let headers = record.get_item(5)?;
            let count = self.count_of(topic, counts)?;
            let partition = match key {
                Some(key) => partition_of(key, count),
                None => keyless % count,
            };
            let headers = if headers.is_truthy()? {
                Some(&headers)
            } else {
                None
            };
            self.encode(topic, partition, key, optional_bytes(&value)?, headers)?;
        }
        Ok(())
    }

    /// A state store's changes (key → value, None a tombstone) on one changelog
    /// partition, each key after `prefix`.
    fn add_state(
        &mut self,
        topic: &str,
        partition: i32,
        prefix: &[u8],
        changes: &Bound<'_, PyDict>,
    ) -> PyResult<()> {
        let mut key = Vec::with_capacity(prefix.len() + 64);
        for (name, value) in changes.iter() {
            key.clear();
            key.extend_from_slice(prefix);
            key.extend_from_slice(name.cast::<PyBytes>()?.as_bytes());
            self.encode(topic, partition, Some(&key), optional_bytes(&value)?, None)?;
        }
        Ok(())
    }

    /// How many records were added.
    fn __len__(&self) -> usize {
        let count = |batches: &Vec<(String, i32, RecordBatch)>| {
            batches
                .iter()
                .map(|(_, _, b)| b.count as usize)
                .sum::<usize>()
        };
        count(&self.full) + count(&self.open)
    }

    /// Every batch with its topic and partition, in send order (the full ones first, in
    /// the order they filled, then the open ones): per partition, records keep the order
    /// they were added in. Empties this set.
    fn take(&mut self, py: Python<'_>) -> PyResult<Vec<(String, i32, Py<RecordBatch>)>> {
        self.where_open.clear();
        let batches: Vec<_> = self.full.drain(..).chain(self.open.drain(..)).collect();
        batches
            .into_iter()
            .map(|(topic, partition, batch)| Ok((topic, partition, Py::new(py, batch)?)))
            .collect()
    }
}
