use super::*;
use serde_json::{Value, json};

fn now() -> DateTime<Utc> {
    "2024-01-15T12:00:00Z".parse().unwrap()
}

fn errors(body: Value) -> Vec<FieldError> {
    match parse(body.to_string().as_bytes(), now()) {
        Err(BatchError::Invalid(e)) => e,
        other => panic!("expected invalid, got {other:?}"),
    }
}

/// JSON text nesting `levels` arrays or objects (chosen by `shape`'s bits) around `leaf`.
fn nest(levels: usize, shape: u64, leaf: &str) -> String {
    let mut text = leaf.to_string();
    for level in 0..levels {
        text = if shape >> (level % 64) & 1 == 1 {
            format!(r#"{{"k{level}":{text},"n":{level}}}"#)
        } else {
            format!("[{text},{level}]")
        };
    }
    text
}

proptest::proptest! {
    /// Whatever the nesting, shape and size of a custom event's fields, an event that is
    /// accepted reads back as JSON whole, the way `GET /v1/events` reads it.
    #[test]
    fn every_accepted_event_reads_back(
        levels in 100usize..140,
        shape in proptest::prelude::any::<u64>(),
        width in 0usize..40,
        in_metadata in proptest::prelude::any::<bool>(),
    ) {
        let leaf = format!("\"{}\"", "x".repeat(width));
        let value = nest(levels, shape, &leaf);
        let body = if in_metadata {
            format!(r#"{{"type":"custom","name":"n","extra":{{"deep":{value}}}}}"#)
        } else {
            format!(r#"{{"type":"custom","name":"n","deep":{value}}}"#)
        };
        if let Ok(batch) = parse(body.as_bytes(), now()) {
            let stored = batch.events[0].body();
            proptest::prop_assert!(serde_json::from_str::<Value>(&stored).is_ok());
            let page = format!(r#"{{"events":[{stored}],"nextCursor":null}}"#);
            proptest::prop_assert!(serde_json::from_str::<Value>(&page).is_ok());
        }
        // The boundary itself: a field of 124 levels is accepted, one of 125 is not.
        let top_level = |n| format!(r#"{{"type":"custom","name":"n","deep":{}}}"#, nest(n, shape, &leaf));
        proptest::prop_assert!(parse(top_level(124).as_bytes(), now()).is_ok());
        proptest::prop_assert!(parse(top_level(125).as_bytes(), now()).is_err());
    }
}

#[test]
fn the_seed_deployment_is_valid() {
    let body = json!({
        "type": "deployment", "repository": "org/repo", "service": "api",
        "version": "v1.2.3", "sha": "abc123", "environment": "production",
        "triggeredBy": "ci", "status": "success", "timestamp": "2024-01-15T10:30:00Z",
        "metadata": {"workflow": "deploy", "runId": "1", "runNumber": "7"}
    });
    let text = body.to_string();
    let batch = parse(text.as_bytes(), now()).unwrap();
    assert!(!batch.is_array);
    assert_eq!(
        batch.events[0].get_str("status").as_deref(),
        Some("success")
    );
}

#[test]
fn synonyms_and_offsets_are_normalised() {
    let body = json!([
        {"type": "deployment", "service": "a", "environment": "p", "status": "Succeeded",
         "timestamp": "2024-01-15T12:30:00+02:00"},
        {"type": "alert", "service": "a", "title": "t", "severity": "critical", "status": "firing"},
    ]);
    let text = body.to_string();
    let batch = parse(text.as_bytes(), now()).unwrap();
    assert_eq!(
        batch.events[0].get_str("status").as_deref(),
        Some("success")
    );
    assert_eq!(
        batch.events[0].get_str("timestamp").as_deref(),
        Some("2024-01-15T10:30:00Z")
    );
    assert_eq!(
        batch.events[1].get_str("status").as_deref(),
        Some("triggered")
    );
}

#[test]
fn names_are_stored_without_surrounding_whitespace() {
    let body = json!([
        {"type": "deployment", "service": " api\n", "environment": "production ",
         "status": "success", "version": "1.2\n", "triggeredBy": " ci "},
        {"type": "alert", "service": "\tapi", "title": " Disk full ", "severity": "critical",
         "status": "firing", "dedupKey": "disk "},
    ]);
    let text = body.to_string();
    let batch = parse(text.as_bytes(), now()).unwrap();
    let deployment = &batch.events[0];
    assert_eq!(deployment.get_str("service").as_deref(), Some("api"));
    assert_eq!(
        deployment.get_str("environment").as_deref(),
        Some("production")
    );
    assert_eq!(deployment.get_str("version").as_deref(), Some("1.2"));
    assert_eq!(
        deployment.get_str("triggeredBy").as_deref(),
        Some(" ci "),
        "free text stays as sent"
    );
    let alert = &batch.events[1];
    assert_eq!(alert.get_str("service").as_deref(), Some("api"));
    assert_eq!(alert.get_str("dedupKey").as_deref(), Some("disk"));
    assert_eq!(alert.get_str("title").as_deref(), Some(" Disk full "));
    // The 1,024-byte limit counts the name as stored, not its padding.
    let padded = format!("{}\n", "a".repeat(1024));
    let ok = json!({"type": "deployment", "service": padded, "environment": "production",
        "status": "success"});
    assert!(parse(ok.to_string().as_bytes(), now()).is_ok());
    let long = json!({"type": "deployment", "service": format!(" {}", "a".repeat(1025)),
        "environment": "production", "status": "success"});
    let e = errors(long);
    assert_eq!(e[0].pointer, "/service");
    assert_eq!(e[0].detail, "service is 1025 bytes; at most 1024 allowed");
}

#[test]
fn an_epoch_timestamp_says_what_to_send() {
    let e = errors(json!({"type": "custom", "name": "x", "timestamp": 1705314600}));
    assert_eq!(e[0].pointer, "/timestamp");
    assert!(
        e[0].detail
            .contains("RFC 3339 string such as 2024-01-15T10:30:00Z, not a number"),
        "{}",
        e[0].detail
    );
}

#[test]
fn every_bad_field_is_named() {
    let errs = errors(json!([
        {"type": "deployment", "service": "a", "environment": "p", "status": "success"},
        {"type": "deployment", "service": 3, "status": "exploded"},
    ]));
    let pointers: Vec<_> = errs.iter().map(|e| e.pointer.as_str()).collect();
    assert_eq!(pointers, ["/1/service", "/1/environment", "/1/status"]);
    assert!(errs[2].detail.contains("rolled_back"), "{}", errs[2].detail);
}

#[test]
fn timestamps_without_zone_or_in_future_are_refused() {
    let e = errors(json!({"type": "custom", "name": "x", "timestamp": "2024-01-15T10:30:00"}));
    assert_eq!(e[0].pointer, "/timestamp");
    assert!(e[0].detail.contains("no time zone"));
    let e = errors(json!({"type": "custom", "name": "x", "timestamp": "2024-01-15T12:06:00Z"}));
    assert!(e[0].detail.contains("future"));
    let e = errors(
        json!({"type": "custom", "name": "x", "timestamp": "2024-01-15T10:30:00.1234567891Z"}),
    );
    assert_eq!(e[0].pointer, "/timestamp");
    assert!(
        e[0].detail.contains("10 fractional digits; at most nine"),
        "{}",
        e[0].detail
    );
    let e = errors(json!({"type": "custom", "name": "x", "timestamp": "2016-12-31T23:59:60Z"}));
    assert!(e[0].detail.contains("leap second"), "{}", e[0].detail);
    // Valid as written, but year -1 in UTC: stored, it could not be read back as RFC 3339.
    let e =
        errors(json!({"type": "custom", "name": "x", "timestamp": "0000-01-01T00:00:00+23:59"}));
    assert_eq!(e[0].pointer, "/timestamp");
    assert!(
        e[0].detail.contains("before the year 0000"),
        "{}",
        e[0].detail
    );
    let first = json!({"type": "custom", "name": "x", "timestamp": "0000-01-01T00:00:00Z"});
    assert!(parse(first.to_string().as_bytes(), now()).is_ok());
    let nine =
        json!({"type": "custom", "name": "x", "timestamp": "2024-01-15T10:30:00.123456789+01:00"});
    assert!(parse(nine.to_string().as_bytes(), now()).is_ok());
}

#[test]
fn metadata_limits() {
    let many: serde_json::Map<_, _> = (0..65).map(|i| (format!("k{i}"), json!("v"))).collect();
    let e = errors(json!({"type": "custom", "name": "x", "metadata": many}));
    assert_eq!(e[0].pointer, "/metadata");
    let e = errors(json!({"type": "custom", "name": "x", "metadata": {"a/b": {"nested": 1}}}));
    assert_eq!(e[0].pointer, "/metadata/a~1b");
    assert!(e[0].detail.ends_with("not an object"), "{}", e[0].detail);
    let long = "a".repeat(1025);
    let e = errors(json!({"type": "custom", "name": "x", "metadata": {"k": long}}));
    assert_eq!(e[0].pointer, "/metadata/k");
    assert!(
        e[0].detail
            .starts_with("the value of metadata key \"k\" is longer than 1024 bytes"),
        "{}",
        e[0].detail
    );
    // Keys are names: not blank, no longer than a value.
    for key in [String::new(), " ".into(), "k".repeat(1025)] {
        let e = errors(json!({"type": "custom", "name": "x", "metadata": {key.clone(): 1}}));
        assert_eq!(e[0].pointer, format!("/metadata/{key}"));
        assert!(
            e[0].detail.contains("a key is a name of 1 to 1024 bytes"),
            "{}",
            e[0].detail
        );
    }
}

/// A required field sent misspelt (or in another case) is kept as an extra field;
/// the error about the missing one names it.
#[test]
fn a_missing_field_sent_misspelt_is_named() {
    let e = errors(
        json!({"type": "deployment", "serivce": "api", "environment": "production",
        "status": "success"}),
    );
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].pointer, "/service");
    assert!(
        e[0].detail
            .ends_with("(the event has \"serivce\": did you mean service?)"),
        "{}",
        e[0].detail
    );
    let e = errors(json!({"Type": "change", "service": "api", "summary": "x"}));
    assert!(
        e[0].detail
            .ends_with("(the event has \"Type\": did you mean type?)"),
        "{}",
        e[0].detail
    );
    // A null field is missing, not misspelt; an unrelated extra field is no hint.
    let e = errors(
        json!({"type": "deployment", "service": null, "environment": "production",
        "status": "success", "team": "core"}),
    );
    assert_eq!(e[0].detail, "service is required (a non-empty string)");
}

/// An optional `timestamp` sent misspelt would date the event at its receipt without a word:
/// refused, naming the member; a field that may be the sender's own (`timestamps`,
/// `timestart`, `timestep`) is no hint.
#[test]
fn a_misspelt_timestamp_is_refused_not_ignored() {
    for member in [
        "timestmap",
        "Timestamp",
        "time_stamp",
        "timestap",
        "timestamo",
    ] {
        let mut event = json!({"type": "custom", "name": "x"});
        event[member] = json!("2024-01-15T10:30:00Z");
        let e = errors(event);
        assert_eq!(e.len(), 1, "{member}: {e:?}");
        assert_eq!(e[0].pointer, "/timestamp");
        assert!(
            e[0].detail.starts_with(&format!(
                "the event has {member:?} but no timestamp: did you mean timestamp?"
            )),
            "{}",
            e[0].detail
        );
    }
    for own in ["timestamps", "timestart", "timestep", "lifestamp"] {
        let mut event = json!({"type": "custom", "name": "x"});
        event[own] = json!("2024-01-15T10:30:00Z");
        assert!(parse(event.to_string().as_bytes(), now()).is_ok(), "{own}");
    }
    let both = json!({"type": "custom", "name": "x", "timestamp": "2024-01-15T10:30:00Z",
        "Timestamp": "2024-01-15T10:30:00Z"});
    assert!(parse(both.to_string().as_bytes(), now()).is_ok());
}

/// DORA reads `metadata.commitTimestamp`: a value it could not read is refused with the reason,
/// not stored and left out of the lead time.
#[test]
fn a_commit_timestamp_must_be_an_rfc3339_time() {
    let deployment = |commit: Value| {
        json!({"type": "deployment", "service": "api", "environment": "production",
            "version": "v1", "status": "success", "metadata": {"commitTimestamp": commit}})
    };
    for (commit, want) in [
        (json!(1795000000), "must be an RFC 3339 time as a string"),
        (json!("2026-11-20T09:00:00"), "has no time zone"),
        (json!("yesterday"), "is not an RFC 3339 time"),
    ] {
        let e = errors(deployment(commit));
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].pointer, "/metadata/commitTimestamp");
        assert!(e[0].detail.contains(want), "{}", e[0].detail);
    }
    let good = deployment(json!("2026-11-20T09:00:00+01:00"));
    assert!(parse(good.to_string().as_bytes(), now()).is_ok());
    // DORA reads it of deployments only: another event's is its own business.
    let custom =
        json!({"type": "custom", "name": "x", "metadata": {"commitTimestamp": 1795000000}});
    assert!(parse(custom.to_string().as_bytes(), now()).is_ok());
}

#[test]
fn resolve_by_dedup_key_needs_no_other_fields() {
    let body = json!({"type": "alert", "status": "resolve", "dedupKey": "disk-full"});
    let text = body.to_string();
    let batch = parse(text.as_bytes(), now()).unwrap();
    assert_eq!(batch.events[0].inherit_from.as_deref(), Some("disk-full"));
    let e = errors(json!({"type": "alert", "status": "resolved"}));
    assert_eq!(e.len(), 3, "{e:?}");
}

#[test]
fn sizes_and_shapes() {
    assert!(matches!(
        parse(b"{nope", now()),
        Err(BatchError::Malformed(_))
    ));
    assert!(matches!(parse(b"", now()), Err(BatchError::Malformed(_))));
    let big = json!({"type": "custom", "name": "x", "blob": "a".repeat(70_000)});
    let e = parse(big.to_string().as_bytes(), now()).unwrap_err();
    assert!(matches!(e, BatchError::EventTooLarge { .. }));
    assert!(e.to_string().starts_with("the event is 70"), "{e}");
    let batch = json!([{"type": "custom", "name": "x"}, big]);
    let e = parse(batch.to_string().as_bytes(), now()).unwrap_err();
    assert!(
        e.to_string().starts_with("event /1 of the batch is 70"),
        "{e}"
    );
    let big_and_broken = format!("{{\"blob\": \"{}\"", "a".repeat(70_000));
    assert!(matches!(
        parse(big_and_broken.as_bytes(), now()),
        Err(BatchError::Malformed(_))
    ));
    let e = errors(json!([]));
    assert!(e[0].detail.contains("empty"));
    let e = errors(json!([1]));
    assert_eq!(e[0].pointer, "/0");
}
