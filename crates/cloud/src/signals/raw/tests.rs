use super::*;

#[test]
fn keys_borrow_unless_escaped_and_values_stay_verbatim() {
    let text = r#"{"b": [1, 2], "a\u0041": "x\"y", "plain": "v", "n": 1.50}"#;
    let m = members(text).unwrap();
    let keys: Vec<&str> = m.iter().map(|(k, _)| k.0.as_ref()).collect();
    assert_eq!(keys, ["aA", "b", "n", "plain"]);
    assert!(matches!(m.iter().next().unwrap().0.0, Cow::Owned(_)));
    let get = |k: &str| *m.get(k).unwrap();
    assert_eq!(get("b").get(), "[1, 2]");
    assert_eq!(get("n").get(), "1.50");
    assert_eq!(string(get("aA")).unwrap(), "x\"y");
    assert!(matches!(string(get("plain")), Some(Cow::Borrowed("v"))));
    assert_eq!(string(get("b")), None);
    assert_eq!(Kind::of(get("b")), Kind::Array);
    assert_eq!(Kind::of(get("n")), Kind::Number);
}

#[test]
fn duplicate_keys_keep_the_last_value() {
    let m = members(r#"{"b": 0, "a": 1, "c": 9, "a": 2, "a": 3}"#).unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!(m.get("a").unwrap().get(), "3");
    assert_eq!(m.get("b").unwrap().get(), "0");
    assert_eq!(m.get("c").unwrap().get(), "9");
    assert!(m.get("d").is_none());
}

#[test]
fn what_value_would_refuse_is_refused() {
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    for bad in [
        r#"1e400"#,
        r#""\ud800""#,
        r#"{"a": [1, -1e999]}"#,
        r#""a\u0000b""#,
        r#"{"k\u0000": 1}"#,
        deep.as_str(),
    ] {
        let raw: &RawValue = serde_json::from_str(bad).expect("RawValue takes it");
        assert!(check(raw).is_err(), "{bad:.40}");
    }
    for good in [
        r#"1.5"#,
        r#""a\u00e9\ud83d\ude80""#,
        r#"{"n": [1, {"x": null}]}"#,
        "true",
    ] {
        let raw: &RawValue = serde_json::from_str(good).unwrap();
        assert!(check(raw).is_ok(), "{good}");
    }
}

#[test]
fn a_refusal_says_where_inside_the_value() {
    for (bad, at) in [
        (r#"1e400"#, ""),
        (r#"{"a": [1, -1e999]}"#, "/a/1"),
        (r#"{"a": {"b/c": {"d": "x\u0000"}}}"#, "/a/b~1c/d"),
        (r#"[{"k": 1}, {"o\u006b": [0, 0, "\ud800"]}]"#, "/1/ok/2"),
        (r#"{"a": {"k\u0000": 1}}"#, "/a"),
    ] {
        let raw: &RawValue = serde_json::from_str(bad).expect("RawValue takes it");
        assert_eq!(check(raw).unwrap_err().at, at, "{bad}");
    }
}

#[test]
fn member_nesting_stops_one_level_below_the_readers_limit() {
    let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    let at_limit = nested(MAX_MEMBER_DEPTH);
    let raw: &RawValue = serde_json::from_str(&at_limit).unwrap();
    assert!(check(raw).is_ok());
    // The event around it still reads as a Value.
    let event = format!(r#"{{"type":"custom","name":"x","deep":{at_limit}}}"#);
    assert!(serde_json::from_str::<serde_json::Value>(&event).is_ok());
    let over = nested(MAX_MEMBER_DEPTH + 1);
    let raw: &RawValue = serde_json::from_str(&over).unwrap();
    let err = check(raw).unwrap_err();
    let said = err.error.to_string();
    assert!(said.contains("deeper than 124 levels"), "{said}");
    assert_eq!(err.at, "/0".repeat(MAX_MEMBER_DEPTH));
    // The page around the event at the limit still reads; one level more would not.
    let page = format!(r#"{{"events":[{{"type":"custom","name":"x","deep":{at_limit}}}]}}"#);
    assert!(serde_json::from_str::<serde_json::Value>(&page).is_ok());
    let too_deep = format!(r#"{{"events":[{{"type":"custom","name":"x","deep":{over}}}]}}"#);
    assert!(serde_json::from_str::<serde_json::Value>(&too_deep).is_err());
}

#[test]
fn strings_are_written_escaped() {
    let mut out = Vec::new();
    write_string(&mut out, "a\"b\n");
    assert_eq!(out, br#""a\"b\n""#);
}
