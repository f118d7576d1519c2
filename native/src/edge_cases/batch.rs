//! The record batches at their edges, driven through the classes `engine/batches.py`
//! uses: a batch filled to exactly its limit, a record bigger than the limit, the order
//! batches are handed over in, the v2 header and its CRC-32C, and Kafka's partitioner.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyModule};

/// The crate's Python module, built in an embedded interpreter.
fn module(py: Python<'_>) -> Bound<'_, PyModule> {
    let module = PyModule::new(py, "symfonic_scan").expect("a module");
    crate::symfonic_scan(&module).expect("the module's contents");
    module
}

/// A transaction's `RecordBatches`, as `engine/batches.py` makes one.
fn new_batches<'py>(
    m: &Bound<'py, PyModule>,
    max_bytes: usize,
    timestamp_ms: i64,
) -> Bound<'py, PyAny> {
    m.getattr("RecordBatches")
        .unwrap()
        .call1((max_bytes, timestamp_ms))
        .unwrap()
}

/// One keyless record of `value` without headers, on `partition` of topic `t`.
fn add_value(batches: &Bound<'_, PyAny>, partition: i32, value: &[u8]) {
    let py = batches.py();
    batches
        .call_method1(
            "add",
            (
                "t",
                partition,
                py.None(),
                PyBytes::new(py, value),
                PyList::empty(py),
            ),
        )
        .unwrap();
}

fn with_module<T>(body: impl for<'py> FnOnce(Python<'py>, Bound<'py, PyModule>) -> T) -> T {
    Python::initialize();
    Python::attach(|py| body(py, module(py)))
}

/// `(topic, partition, bytes)` of every batch `take()` hands over, each built with the
/// producer state (7, 2, 100).
fn taken(batches: &Bound<'_, PyAny>) -> Vec<(String, i32, Vec<u8>)> {
    let list: Vec<(String, i32, Bound<'_, PyAny>)> =
        batches.call_method0("take").unwrap().extract().unwrap();
    list.into_iter()
        .map(|(topic, partition, batch)| {
            batch
                .call_method1("_set_producer_state", (7i64, 2i16, 100i32))
                .unwrap();
            let built = batch.call_method0("_build").unwrap();
            let bytes = built.cast::<PyBytes>().unwrap().as_bytes().to_vec();
            (topic, partition, bytes)
        })
        .collect()
}

fn be_i32(data: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(data[at..at + 4].try_into().unwrap())
}

fn be_i64(data: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(data[at..at + 8].try_into().unwrap())
}

/// Kafka's zig-zag varint at `at`: (value, next position).
fn varint(data: &[u8], mut at: usize) -> (i64, usize) {
    let (mut raw, mut shift) = (0u64, 0);
    loop {
        let byte = data[at];
        at += 1;
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    (((raw >> 1) as i64) ^ -((raw & 1) as i64), at)
}

fn bytes_at(data: &[u8], at: usize) -> (Option<Vec<u8>>, usize) {
    let (len, at) = varint(data, at);
    if len < 0 {
        return (None, at);
    }
    let end = at + len as usize;
    (Some(data[at..end].to_vec()), end)
}

type Header = (Vec<u8>, Option<Vec<u8>>);
type Read = (i64, Option<Vec<u8>>, Option<Vec<u8>>, Vec<Header>);

/// A v2 batch read back from its bytes, its header checked: (offset delta, key, value,
/// headers) of each record.
fn read_batch(data: &[u8]) -> Vec<Read> {
    assert_eq!(be_i64(data, 0), 0, "base offset");
    assert_eq!(be_i32(data, 8) as usize, data.len() - 12, "batch length");
    assert_eq!(data[16], 2, "magic");
    let crc = u32::from_be_bytes(data[17..21].try_into().unwrap());
    assert_eq!(
        crc,
        crc32c::crc32c(&data[21..]),
        "CRC-32C of everything after it"
    );
    assert_eq!(
        i16::from_be_bytes([data[21], data[22]]),
        0x10,
        "transactional, no codec"
    );
    let count = be_i32(data, 57);
    assert_eq!(be_i32(data, 23), count - 1, "last offset delta");
    assert_eq!(
        be_i64(data, 27),
        be_i64(data, 35),
        "one timestamp per batch"
    );
    assert_eq!(be_i64(data, 43), 7, "producer id");
    assert_eq!(
        i16::from_be_bytes([data[51], data[52]]),
        2,
        "producer epoch"
    );
    assert_eq!(be_i32(data, 53), 100, "base sequence");
    let mut at = 61;
    let mut records = Vec::new();
    for _ in 0..count {
        let (length, start) = varint(data, at);
        let end = start + length as usize;
        assert_eq!(data[start], 0, "record attributes");
        let (timestamp_delta, next) = varint(data, start + 1);
        assert_eq!(timestamp_delta, 0);
        let (offset_delta, next) = varint(data, next);
        let (key, next) = bytes_at(data, next);
        let (value, next) = bytes_at(data, next);
        let (header_count, mut next) = varint(data, next);
        let mut headers = Vec::new();
        for _ in 0..header_count {
            let (name, after) = bytes_at(data, next);
            let (value, after) = bytes_at(data, after);
            headers.push((name.unwrap(), value));
            next = after;
        }
        assert_eq!(next, end, "the record's length covers exactly its fields");
        records.push((offset_delta, key, value, headers));
        at = end;
    }
    assert_eq!(at, data.len(), "nothing after the last record");
    records
}

#[test]
fn murmur2_and_the_partition_are_kafkas() {
    // Kafka's own vectors (clients' UtilsTest.testMurmur2).
    for (key, hash) in [
        ("21", -973_932_308),
        ("foobar", -790_332_482),
        ("a-little-bit-long-string", -985_981_536),
        ("a-little-bit-longer-string", -1_486_304_829),
        (
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        ),
        ("abc", 479_470_107),
    ] {
        assert_eq!(crate::batch::murmur2(key.as_bytes()), hash, "{key}");
        let expected = (hash & 0x7fff_ffff) % 7;
        assert_eq!(
            crate::batch::partition_for_key(key.as_bytes(), 7).unwrap(),
            expected
        );
    }
    assert_eq!(crate::batch::partition_for_key(b"", 1).unwrap(), 0);
    assert!(crate::batch::partition_for_key(b"k", 0).is_err());
    assert!(crate::batch::partition_for_key(b"k", -3).is_err());
}

#[test]
fn records_read_back_as_they_were_added_nulls_and_headers_included() {
    with_module(|py, m| {
        let batches = new_batches(&m, 1 << 20, 5);
        let headers = PyList::new(
            py,
            [
                ("h", Some(PyBytes::new(py, b"v"))),
                ("null", None),
                ("empty", Some(PyBytes::new(py, b""))),
            ],
        )
        .unwrap();
        let none = py.None();
        let empty = PyList::empty(py);
        batches
            .call_method1(
                "add",
                (
                    "t",
                    0,
                    PyBytes::new(py, b"k"),
                    PyBytes::new(py, b"v"),
                    &headers,
                ),
            )
            .unwrap();
        batches
            .call_method1("add", ("t", 0, &none, PyBytes::new(py, b"v2"), &empty))
            .unwrap();
        batches
            .call_method1("add", ("t", 0, PyBytes::new(py, b"k3"), &none, &empty))
            .unwrap();
        batches
            .call_method1("add", ("t", 0, &none, &none, &empty))
            .unwrap(); // sent as ""
        assert_eq!(batches.len().unwrap(), 4);
        let [(topic, partition, data)]: [_; 1] = taken(&batches).try_into().unwrap();
        assert_eq!((topic.as_str(), partition), ("t", 0));
        let records = read_batch(&data);
        let expected_headers: Vec<Header> = vec![
            (b"h".to_vec(), Some(b"v".to_vec())),
            (b"null".to_vec(), None),
            (b"empty".to_vec(), Some(Vec::new())),
        ];
        assert_eq!(
            records,
            vec![
                (
                    0,
                    Some(b"k".to_vec()),
                    Some(b"v".to_vec()),
                    expected_headers
                ),
                (1, None, Some(b"v2".to_vec()), vec![]),
                (2, Some(b"k3".to_vec()), None, vec![]),
                (3, None, Some(Vec::new()), vec![]),
            ]
        );
        assert_eq!(batches.len().unwrap(), 0, "take() empties the set");
    });
}

/// (records, bytes) of each batch when `n` records of `value_len` bytes go to one
/// partition with a limit of `max_bytes`.
fn split(n: usize, value_len: usize, max_bytes: usize) -> Vec<(usize, usize)> {
    with_module(|_, m| {
        let batches = new_batches(&m, max_bytes, 0);
        for _ in 0..n {
            add_value(&batches, 0, &vec![b'x'; value_len]);
        }
        taken(&batches)
            .iter()
            .map(|(_, _, data)| (read_batch(data).len(), data.len()))
            .collect()
    })
}

/// How many records each batch holds (see `split`).
fn counts(n: usize, value_len: usize, max_bytes: usize) -> Vec<usize> {
    split(n, value_len, max_bytes)
        .into_iter()
        .map(|(count, _)| count)
        .collect()
}

/// The size of one batch of `n` records of `value_len` bytes.
fn batch_size(n: usize, value_len: usize) -> usize {
    let [(_, bytes)]: [_; 1] = split(n, value_len, 1 << 20).try_into().unwrap();
    bytes
}

#[test]
fn a_batch_fills_to_exactly_its_limit_and_one_byte_less_starts_another() {
    let three = batch_size(3, 50);
    assert_eq!(counts(3, 50, three), vec![3]);
    assert_eq!(counts(3, 50, three - 1), vec![2, 1]);
    assert_eq!(counts(7, 50, three), vec![3, 3, 1]);
}

#[test]
fn a_record_bigger_than_the_limit_goes_alone_in_its_batch() {
    assert_eq!(counts(3, 5000, 1024), vec![1, 1, 1]);
    assert_eq!(counts(1, 5000, 1024), vec![1]);
}

#[test]
fn full_batches_are_handed_over_first_each_partitions_records_in_order() {
    with_module(|_, m| {
        let size = batch_size(2, 10);
        let batches = new_batches(&m, size, 0);
        let add = |partition: i32, n: u8| add_value(&batches, partition, &[b'0' + n; 10]);
        add(0, 0); // partition 0's first batch, opened first
        add(1, 1); // partition 1's only batch
        add(0, 2);
        add(0, 3); // partition 0's first batch is full: it goes before every open one
        let got: Vec<(i32, Vec<u8>)> = taken(&batches)
            .iter()
            .map(|(_, partition, data)| {
                let firsts = read_batch(data)
                    .iter()
                    .map(|r| r.2.as_ref().unwrap()[0])
                    .collect();
                (*partition, firsts)
            })
            .collect();
        assert_eq!(
            got,
            vec![(0, b"02".to_vec()), (0, b"3".to_vec()), (1, b"1".to_vec())]
        );
    });
}

#[test]
fn outputs_go_to_their_keys_partition_and_keyless_ones_to_the_given_one() {
    with_module(|py, m| {
        let batches = new_batches(&m, 1 << 20, 0);
        let counts = PyDict::new(py);
        counts.set_item("out", 7).unwrap();
        let record = |key: Option<&str>, value: &str| {
            (
                "out",
                key.map(|k| PyBytes::new(py, k.as_bytes())),
                PyBytes::new(py, value.as_bytes()),
                "t",
                py.None(),
                PyList::empty(py),
            )
        };
        let records = PyList::new(
            py,
            [
                record(Some("foobar"), "a"),
                record(None, "b"),
                record(Some("abc"), "c"),
            ],
        )
        .unwrap();
        batches
            .call_method1("add_outputs", (records, &counts, 9))
            .unwrap();
        let mut got: Vec<(i32, usize)> = taken(&batches)
            .iter()
            .map(|(_, partition, data)| (*partition, read_batch(data).len()))
            .collect();
        got.sort();
        // Kafka's hashes of "foobar" and "abc" (above), made positive, modulo 7; keyless 9 % 7.
        let mut expected = vec![
            ((-790_332_482i32 & 0x7fff_ffff) % 7, 1),
            ((479_470_107 & 0x7fff_ffff) % 7, 1),
            (9 % 7, 1),
        ];
        expected.sort();
        assert_eq!(got, expected);
        // A topic whose partition count was never learnt is an error, not partition 0.
        let unknown = PyList::new(
            py,
            [(
                "other",
                py.None(),
                PyBytes::new(py, b"x"),
                "t",
                py.None(),
                PyList::empty(py),
            )],
        )
        .unwrap();
        assert!(batches
            .call_method1("add_outputs", (unknown, &counts, 0))
            .is_err());
    });
}

#[test]
fn state_changes_carry_their_prefix_and_tombstones() {
    with_module(|py, m| {
        let batches = new_batches(&m, 1 << 20, 0);
        let changes = PyDict::new(py);
        changes
            .set_item(PyBytes::new(py, b"r1"), PyBytes::new(py, b"s"))
            .unwrap();
        changes
            .set_item(PyBytes::new(py, b"r2"), py.None())
            .unwrap();
        batches
            .call_method1("add_state", ("log", 3, PyBytes::new(py, b"run/"), changes))
            .unwrap();
        let [(topic, partition, data)]: [_; 1] = taken(&batches).try_into().unwrap();
        assert_eq!((topic.as_str(), partition), ("log", 3));
        let records: Vec<_> = read_batch(&data).into_iter().map(|r| (r.1, r.2)).collect();
        assert_eq!(
            records,
            vec![
                (Some(b"run/r1".to_vec()), Some(b"s".to_vec())),
                (Some(b"run/r2".to_vec()), None)
            ]
        );
    });
}
