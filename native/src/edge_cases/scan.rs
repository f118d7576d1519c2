//! The scanner's verdicts at its edges: limits hit exactly and passed by one, duplicate
//! keys around the switch from a linear scan to a hash set, numbers at the edge of a
//! double, and what orjson refuses.

use crate::scan;

const DEPTH: usize = 4;
const BIGGEST: u64 = 1000;

fn verdict(text: &str) -> Option<(&'static str, String)> {
    scan(text.as_bytes(), DEPTH, BIGGEST, true)
}

fn kind(text: &str) -> Option<&'static str> {
    verdict(text).map(|(kind, _)| kind)
}

/// An object of `count` distinct keys `k0`, `k1`, ..., then `extra` members as given.
fn object(count: usize, extra: &[&str]) -> String {
    let mut members: Vec<String> = (0..count).map(|n| format!("\"k{n}\":{n}")).collect();
    members.extend(extra.iter().map(|m| (*m).to_owned()));
    format!("{{{}}}", members.join(","))
}

#[test]
fn an_object_within_every_limit_is_carried() {
    assert_eq!(verdict(r#"{"a":[1,{"b":"c"}],"n":-1000,"m":1000}"#), None);
    assert_eq!(verdict(" \t\r\n{}\n"), None);
}

#[test]
fn a_key_seen_again_after_the_sixteenth_is_a_duplicate() {
    // Up to 16 keys an object's keys are compared one by one; past that they go into a
    // hash set, and every key after the switch must go in too.
    for count in [15, 16, 17, 18, 20, 40] {
        for again in [0, count / 2, count - 2, count - 1] {
            let text = object(count, &[&format!("\"k{again}\":0")]);
            assert_eq!(
                verdict(&text),
                Some(("duplicate_key", format!("k{again}"))),
                "{count} keys, then k{again} again"
            );
        }
        assert_eq!(verdict(&object(count, &[])), None, "{count} distinct keys");
    }
}

#[test]
fn the_smallest_key_seen_twice_is_named() {
    let text = object(20, &["\"k3\":0", "\"k19\":0", "\"k11\":0"]);
    assert_eq!(verdict(&text), Some(("duplicate_key", "k11".to_owned())));
    assert_eq!(
        verdict(r#"{"b":1,"a":2,"b":3,"a":4}"#),
        Some(("duplicate_key", "a".to_owned()))
    );
}

#[test]
fn keys_are_compared_after_their_escapes_are_decoded() {
    assert_eq!(
        verdict(r#"{"a":1,"\u0061":2}"#),
        Some(("duplicate_key", "a".to_owned()))
    );
    let many = object(20, &[r#""\u006b7":0"#]);
    assert_eq!(verdict(&many), Some(("duplicate_key", "k7".to_owned())));
}

#[test]
fn the_same_key_in_another_object_is_no_duplicate() {
    assert_eq!(verdict(r#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#), None);
    let nested = format!(r#"{{"p":{},"k1":1}}"#, object(20, &[]));
    assert_eq!(verdict(&nested), None);
    // The first duplicate in the order the reference meets them: the inner object closes
    // first.
    assert_eq!(
        verdict(r#"{"q":{"z":1,"z":2},"q":1}"#),
        Some(("duplicate_key", "z".to_owned()))
    );
}

#[test]
fn nesting_up_to_the_limit_is_carried_one_more_level_is_not() {
    assert_eq!(verdict(r#"{"a":{"b":[{"c":1}]}}"#), None); // 4 levels
    assert_eq!(kind(r#"{"a":{"b":[{"c":[1]}]}}"#), Some("depth")); // 5
                                                                   // Too deep for orjson itself: not JSON at all, whatever the project's limit.
    let deep = "[".repeat(1025) + &"]".repeat(1025);
    assert_eq!(
        scan(deep.as_bytes(), 2000, BIGGEST, true).map(|v| v.0),
        Some("json")
    );
    let deepest = format!("{{\"a\":{}{}}}", "[".repeat(1023), "]".repeat(1023));
    assert_eq!(scan(deepest.as_bytes(), 2000, BIGGEST, true), None);
}

#[test]
fn integers_at_the_limit_are_carried_one_past_is_not() {
    assert_eq!(verdict(r#"{"n":1000}"#), None);
    assert_eq!(verdict(r#"{"n":-1001}"#), None);
    assert_eq!(
        verdict(r#"{"n":1001}"#),
        Some(("integer", "1001".to_owned()))
    );
    assert_eq!(
        verdict(r#"{"n":-1002}"#),
        Some(("integer", "-1002".to_owned()))
    );
    // Beyond 64 bits: still an integer literal, refused as one.
    let huge = "1".to_owned() + &"0".repeat(30);
    assert_eq!(
        verdict(&format!(r#"{{"n":{huge}}}"#)),
        Some(("integer", huge.clone()))
    );
    assert_eq!(
        scan(br#"{"n":18446744073709551615}"#, DEPTH, u64::MAX, true),
        None
    );
    // A fraction or an exponent is no integer, whatever its value.
    assert_eq!(verdict(r#"{"n":1001.0,"m":5e3}"#), None);
}

#[test]
fn a_fraction_too_big_for_a_double_is_not_json() {
    // 309 digits before the point: the first length that can overflow a double.
    let finite = format!("1{}.5", "0".repeat(308)); // 1e308
    let infinite = format!("{}.5", "9".repeat(309)); // about 1e309
    assert_eq!(verdict(&format!(r#"{{"n":{finite}}}"#)), None);
    assert_eq!(
        verdict(&format!(r#"{{"n":{infinite}}}"#)),
        Some((
            "json",
            format!(
                "number is infinity when parsed as double at byte {}",
                5 + infinite.len()
            )
        ))
    );
    assert_eq!(kind(r#"{"n":-1e400}"#), Some("json"));
    assert_eq!(verdict(r#"{"n":1e-400}"#), None); // underflows to zero: finite
    let long_integer = "9".repeat(400);
    assert_eq!(kind(&format!(r#"{{"n":{long_integer}}}"#)), Some("json"));
}

#[test]
fn what_orjson_refuses_is_not_json() {
    for text in [
        "",
        " ",
        "{",
        r#"{"a":1"#,
        r#"{"a":1}x"#,
        r#"{"a":NaN}"#,
        r#"{"a":Infinity}"#,
        r#"{"a":01}"#,
        r#"{"a":1.}"#,
        r#"{"a":.5}"#,
        r#"{"a":1e}"#,
        r#"{"a":-}"#,
        r#"{"a":+1}"#,
        r#"{"a":tru}"#,
        r#"{a:1}"#,
        r#"{"a" 1}"#,
        r#"{"a":1,}"#,
        r#"{"t":"\ud800"}"#,
        r#"{"t":"\udc00"}"#,
        r#"{"t":"\ud83d\u0041"}"#,
        r#"{"t":"\x"}"#,
        r#"{"t":"\u12"}"#,
        "{\"t\":\"a\u{1f}b\"}",
        "{\"t\":\"a\tb\"}",
    ] {
        assert_eq!(kind(text), Some("json"), "{text:?}");
    }
    assert_eq!(
        scan(b"{\"t\":\"\xff\"}", DEPTH, BIGGEST, true).map(|v| v.0),
        Some("json")
    );
    assert_eq!(
        scan(b"{\"t\":\"\xed\xa0\x80\"}", DEPTH, BIGGEST, true).map(|v| v.0),
        Some("json")
    );
}

#[test]
fn escapes_orjson_reads_are_json() {
    assert_eq!(
        verdict(r#"{"t":"\"\\\/\b\f\n\r\t\u0000\ud83d\ude00"}"#),
        None
    );
    // A string's plain text is read eight bytes at a time: an escape or a quote at each
    // position of such a word must still be seen.
    for at in 0..17 {
        let text = format!(r#"{{"t":"{}\"{}","u":1}}"#, "x".repeat(at), "y".repeat(at));
        assert_eq!(verdict(&text), None, "{text}");
    }
}

#[test]
fn a_document_that_is_no_object_is_named_by_its_type() {
    for (text, name) in [
        ("[]", "array"),
        (r#""x""#, "string"),
        ("1", "number"),
        ("-1.5", "number"),
        ("true", "boolean"),
        ("false", "boolean"),
        ("null", "null"),
        (" [1]", "array"),
    ] {
        assert_eq!(verdict(text), Some(("type", name.to_owned())), "{text}");
    }
}

#[test]
fn strict_json_outranks_the_projects_limits() {
    // Too deep and not JSON: the JSON error wins, as in the reference.
    let text = format!(r#"{{"a":{}1{}"#, "[".repeat(10), "]".repeat(9));
    assert_eq!(kind(&text), Some("json"));
    // Too deep and a duplicate key: depth wins (the reference walks the tree first).
    assert_eq!(kind(r#"{"a":1,"a":[[[[[1]]]]]}"#), Some("depth"));
}
