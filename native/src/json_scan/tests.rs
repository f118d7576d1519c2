//! The scan's edge cases in Rust (the verdicts against the Python reference are
//! `tests/unit/test_native_scan.py`'s): depth without recursion, the checks applied to any
//! document when no object is asked for, integers at their limits, keys twice.

use super::{scan, Verdict, ORJSON_MAX_DEPTH};

const MAX_I64: u64 = i64::MAX as u64;

fn nested(open: &str, close: &str, levels: usize, inner: &str) -> Vec<u8> {
    format!("{}{inner}{}", open.repeat(levels), close.repeat(levels)).into_bytes()
}

fn verdict(kind: &'static str, detail: &str) -> Option<Verdict> {
    Some((kind, detail.to_owned()))
}

fn kind_of(found: Option<Verdict>) -> Option<&'static str> {
    found.map(|(kind, _)| kind)
}

#[test]
fn orjsons_depth_is_read_on_a_small_stack() {
    // 64 KiB: the recursive scanner needed 256-384 KiB for 1,024 levels.
    let worker = std::thread::Builder::new().stack_size(64 << 10);
    let outcome = worker
        .spawn(|| {
            let arrays = nested("[", "]", ORJSON_MAX_DEPTH, "");
            let objects = nested("{\"a\":", "}", ORJSON_MAX_DEPTH, "1");
            let mixed = nested("[{\"a\":", "}]", ORJSON_MAX_DEPTH / 2, "1");
            [arrays, objects, mixed].map(|doc| scan(&doc, ORJSON_MAX_DEPTH, MAX_I64, false))
        })
        .expect("a thread")
        .join()
        .expect("no overflow");
    assert_eq!(outcome, [None, None, None]);
}

#[test]
fn one_level_past_orjsons_depth_is_not_json() {
    for doc in [
        nested("[", "]", ORJSON_MAX_DEPTH + 1, ""),
        nested("{\"a\":", "}", ORJSON_MAX_DEPTH + 1, "1"),
    ] {
        assert_eq!(kind_of(scan(&doc, 64, MAX_I64, false)), Some("json"));
    }
    // Unclosed, far deeper: still refused, still no recursion.
    let open = "[".repeat(1 << 20).into_bytes();
    assert_eq!(kind_of(scan(&open, 64, MAX_I64, false)), Some("json"));
}

#[test]
fn depth_is_counted_exactly() {
    assert_eq!(scan(&nested("[", "]", 4, ""), 4, MAX_I64, false), None);
    assert_eq!(
        scan(&nested("[", "]", 5, ""), 4, MAX_I64, false),
        verdict("depth", "")
    );
    let objects = nested("{\"a\":", "}", 5, "1");
    assert_eq!(scan(&objects, 4, MAX_I64, true), verdict("depth", ""));
    assert_eq!(
        scan(&nested("{\"a\":", "}", 4, "1"), 4, MAX_I64, true),
        None
    );
}

#[test]
fn any_document_gets_the_checks_without_object() {
    let deep = nested("[", "]", 70, "");
    assert_eq!(scan(&deep, 64, MAX_I64, true), verdict("type", "array"));
    assert_eq!(scan(&deep, 64, MAX_I64, false), verdict("depth", ""));
    let twice = br#"[{"k":1,"k":2}]"#;
    assert_eq!(
        scan(twice, 64, MAX_I64, false),
        verdict("duplicate_key", "k")
    );
    assert_eq!(scan(b"1001", 64, 1000, false), verdict("integer", "1001"));
    assert_eq!(scan(b"1001", 64, 1000, true), verdict("type", "number"));
    assert_eq!(scan(br#""text""#, 64, 1000, false), None);
    assert_eq!(scan(b" null ", 64, 1000, false), None);
}

#[test]
fn integers_at_their_limits() {
    let at = |text: &str| scan(text.as_bytes(), 64, MAX_I64, false);
    assert_eq!(at("9223372036854775807"), None);
    assert_eq!(at("-9223372036854775808"), None);
    assert_eq!(
        at("9223372036854775808"),
        verdict("integer", "9223372036854775808")
    );
    assert_eq!(
        at("-9223372036854775809"),
        verdict("integer", "-9223372036854775809")
    );
    assert_eq!(
        at("18446744073709551616"),
        verdict("integer", "18446744073709551616")
    );
    assert_eq!(at("1.5e3"), None); // a float, whatever its value
    assert_eq!(kind_of(at(&format!("1{}", "0".repeat(400)))), Some("json"));
    assert_eq!(scan(b"[1000,-1001]", 64, 1000, false), None);
    assert_eq!(
        scan(b"[1000,-1002]", 64, 1000, false),
        verdict("integer", "-1002")
    );
}

#[test]
fn keys_twice_in_many_shapes() {
    // the smallest key seen twice, also past the hash set's threshold and escaped
    let many: Vec<String> = (0..40).map(|n| format!("\"k{n:02}\":{n}")).collect();
    let wide = format!("{{{},\"k39\":0,\"k07\":0}}", many.join(","));
    assert_eq!(
        scan(wide.as_bytes(), 64, MAX_I64, true),
        verdict("duplicate_key", "k07")
    );
    assert_eq!(
        scan(
            r#"{"\u00e9":1,"\u00e9x":2,"é":3}"#.as_bytes(),
            64,
            MAX_I64,
            true
        ),
        verdict("duplicate_key", "é")
    );
    // an inner object closes first: its key is the one the re-parse meets first
    assert_eq!(
        scan(br#"{"q":{"z":1,"z":2},"q":1}"#, 64, MAX_I64, true),
        verdict("duplicate_key", "z")
    );
    // the same key in sibling objects is no duplicate
    assert_eq!(scan(br#"[{"a":1},{"a":2}]"#, 64, MAX_I64, false), None);
    // an integer before the duplicate's object closes wins, as in the re-parse
    assert_eq!(
        scan(br#"{"a":1,"a":99999}"#, 64, 1000, true),
        verdict("integer", "99999")
    );
}

#[test]
fn the_first_problem_in_the_references_order() {
    // depth outranks an earlier integer or key (the walk comes before the re-parse)
    let doc = format!("{{\"n\":99999,\"d\":{}}}", "[".repeat(6) + &"]".repeat(6));
    assert_eq!(scan(doc.as_bytes(), 4, 1000, true), verdict("depth", ""));
    // not JSON outranks everything
    assert_eq!(
        kind_of(scan(b"[[[[[[1,]]]]]]", 4, 1000, false)),
        Some("json")
    );
    assert_eq!(kind_of(scan(b"{\"a\":1}x", 4, 1000, true)), Some("json"));
}
