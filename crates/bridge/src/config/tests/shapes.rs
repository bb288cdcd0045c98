//! How the file's shape is read: unknown keys, wrong types, YAML mistakes, every problem at once.

use super::*;

#[test]
fn unknown_keys_are_errors_with_line_and_column() {
    let text = failure("token: t\nname: n\nheartbeat: 30\n", &MapEnv::new());
    assert!(
        text.starts_with("bridge.yaml:3:1: unknown field `heartbeat`"),
        "{text}"
    );

    let yaml =
        "token: t\nname: n\napis:\n  - name: a\n    url: https://a\n    auht:\n      username: u\n";
    let text = failure(yaml, &MapEnv::new());
    assert!(
        text.starts_with("bridge.yaml:6:5: apis[0]: unknown field `auht`"),
        "{text}"
    );
    assert!(text.ends_with("; did you mean `auth`?"), "{text}");
    assert!(!text.contains('\n'), "one line: {text}");
}

/// The cloud's URL takes no credentials (the bridge signs in with its token), and no URL
/// takes port 0, which nothing can connect to.
#[test]
fn urls_with_credentials_or_port_0_say_what_to_give() {
    let yaml = "token: t\nname: n\napi_url: https://u:p@cloud.example\napis:\n  - name: a\n    url: http://127.0.0.1:0\n";
    let text = failure(yaml, &MapEnv::new());
    assert!(
        text.contains("bridge.yaml:3:10: api_url: the cloud's URL takes no credentials: the bridge signs in with its token"),
        "{text}"
    );
    assert!(
        text.contains("bridge.yaml:6:10: apis[0].url: port 0 is no port to connect to"),
        "{text}"
    );
    assert!(!text.contains("u:p"), "{text}");
}

/// A second `sources:` does not add to the first: the error says to put every entry under one.
#[test]
fn a_resource_list_given_twice_says_to_list_its_entries_once() {
    let yaml = "token: t\nname: n\nsources:\n  - name: a\n    url: https://a\nsources:\n  - name: b\n    url: https://b\n";
    let text = failure(yaml, &MapEnv::new());
    assert!(
        text.starts_with("bridge.yaml:6:1: duplicate mapping key `sources`"),
        "{text}"
    );
    assert!(
        text.ends_with("; list every entry under one `sources:` (each entry a `- name: …` item)"),
        "{text}"
    );
    let text = failure("token: t\nname: n\nname: m\n", &MapEnv::new());
    assert!(
        text.ends_with("; give `name` once in this mapping"),
        "{text}"
    );
}

/// An item whose only key is unknown is said so, with what the item then lacks, not as an item
/// that is no mapping.
#[test]
fn an_items_only_key_unknown_is_said_with_what_it_lacks() {
    let yaml = "name: dc1\ntoken: x\napis:\n  - urll: x\n    # a comment\nsources:\n  - urll: y\n  - url: http://h\n    nme: z\nregistries:\n  - nme: r\n    urll: u\n  -\n    nme: s\n  - # the third\n    urll: t\n";
    let text = failure(yaml, &MapEnv::new());
    for want in [
        "bridge.yaml:4:5: apis[0]: unknown field `urll`",
        "apis[0].url: required",
        "bridge.yaml:7:5: sources[0]: unknown field `urll`",
        "sources[0].url: required",
        "bridge.yaml:9:5: sources[1]: unknown field `nme`",
        "bridge.yaml:11:5: registries[0]: unknown field `nme`",
        "bridge.yaml:12:5: registries[0]: unknown field `urll`",
        "registries[0].url: required",
        "bridge.yaml:14:5: registries[1]: unknown field `nme`",
        "registries[1].url: required",
        "bridge.yaml:16:5: registries[2]: unknown field `urll`",
        "registries[2].url: required",
    ] {
        assert!(text.contains(want), "expected {want:?} in:\n{text}");
    }
    assert!(!text.contains("expected a mapping"), "{text}");

    // An empty item is said as such, and a key further left below it is no key of its.
    let yaml = "name: dc1\ntoken: x\nregistries:\n  - url: http://r\n  -\nnme: x\n";
    let text = failure(yaml, &MapEnv::new());
    assert!(
        text.contains("bridge.yaml:5:4: expected a mapping"),
        "{text}"
    );
    assert!(
        text.contains("bridge.yaml:6:1: unknown field `nme`"),
        "{text}"
    );
}

/// A typo inside a `{…}` mapping (the `auth:` style the docs use) is one problem: the keys
/// after it are read as written, and the rest of the file's problems are still listed.
#[test]
fn an_unknown_key_inside_braces_hides_nothing_after_it() {
    let yaml = "name: dc1\ntoken: x\napis:\n  - name: internal\n    url: http://127.0.0.1:9000\n    auth: {type: basic, usernme: svc, password: x}\n    allow: [{method: GET, path: \"/*\", bogus: 1}]\nsources:\n  - url: http://127.0.0.1:9001\n    auth: {type: token, tokn: \"a,}b\"}\n";
    let text = failure(yaml, &MapEnv::new());
    let expected = [
        "bridge.yaml:6:25: apis[0].auth: unknown field `usernme`",
        "bridge.yaml:7:39: apis[0].allow[0]: unknown field `bogus`",
        "bridge.yaml:10:25: sources[0].auth: unknown field `tokn`",
    ];
    for want in expected {
        assert!(text.contains(want), "expected {want:?} in:\n{text}");
    }
    assert!(text.contains("apis[0].auth.username: required"), "{text}");
    assert!(text.contains("sources[0].auth.token: required"), "{text}");
    assert_eq!(text.lines().count(), 5, "{text}");
    for wrongly in ["`allow`", "`sources`", "`password`"] {
        assert!(
            !text.contains(wrongly),
            "{wrongly} called unknown in:\n{text}"
        );
    }
}

#[test]
fn every_unknown_key_is_listed_at_once_beside_the_other_problems() {
    let yaml = "token: t\nname: n\nheartbeat: 30\napis:\n  - name: a\n    url: https://a\n    auht:\n      username: u\n      password: p\n  - bogus: 1\n    url: ftp://x\nlog_levle: info\nmax_connections: 0\n";
    let err = load(yaml, &MapEnv::new()).unwrap_err();
    let text = err.to_string();
    let expected = [
        "bridge.yaml:3:1: unknown field `heartbeat`",
        "bridge.yaml:7:5: apis[0]: unknown field `auht`",
        "bridge.yaml:10:5: apis[1]: unknown field `bogus`",
        "bridge.yaml:11:10: apis[1].url: expected an absolute http or https URL",
        "bridge.yaml:12:1: unknown field `log_levle`",
        "bridge.yaml:13:18: max_connections: expected a whole number from 1 to 10000, got 0",
    ];
    for (got, want) in text.lines().zip(expected) {
        assert!(
            got.starts_with(want),
            "expected {want:?}, got {got:?} in:\n{text}"
        );
    }
    assert_eq!(text.lines().count(), expected.len(), "{text}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let yaml = r#"
name: "not valid!"
api_url: ftp://cloud.example
heartbeat_interval: 0
reconnect_delay: -1
log_level: loud
log_format: xml
max_connections: 0
health_check_port: 70000
tls_cert_file: /etc/bridge/cert.pem
sources:
  - type: svn
    url: https://user:pw@git.example
apis:
  - name: dup
    url: not a url
  - name: dup
    url: https://b.example
    allow:
      - method: "GET /x"
        path: relative
      - method: GET
        path: /a?b=c
  - name: open
    url: https://c.example
    allow: []
  - name: commented
    url: https://d.example
    allow:
    # - {method: GET, path: /public/*}
databases:
  - host: db
    port: 0
"#;
    let err = load(yaml, &MapEnv::new()).unwrap_err();
    let text = err.to_string();
    let expected = [
        "bridge.yaml: token: required: set `token` in the file or SERVICE_BRIDGE_TOKEN",
        "bridge.yaml:2:7: name: expected 1 to 63 lowercase letters",
        "bridge.yaml:3:10: api_url: expected an absolute https URL, got scheme \"ftp\"",
        "bridge.yaml:4:21: heartbeat_interval: expected whole seconds from 1 to 3600, got 0",
        "bridge.yaml:5:18: reconnect_delay: expected whole seconds from 1 to 3600, got -1",
        "bridge.yaml:6:12: log_level: expected one of debug, info, warn, error, got \"loud\"",
        "bridge.yaml:7:13: log_format: expected json or text, got \"xml\"",
        "bridge.yaml:8:18: max_connections: expected a whole number from 1 to 10000, got 0",
        "bridge.yaml:9:20: health_check_port: expected a port from 0 to 65535 (0: any free port, logged at start), got 70000",
        "bridge.yaml:10:16: tls_key_file: required when tls_cert_file is set",
        "bridge.yaml:12:11: sources[0].type: expected git, got \"svn\"",
        "bridge.yaml:13:10: sources[0].url: credentials belong in `auth`, not in the URL",
        "bridge.yaml:16:10: apis[0].url: expected an absolute http or https URL",
        "bridge.yaml:17:11: apis[1].name: \"dup\" is already the name of apis[0]",
        "bridge.yaml:20:17: apis[1].allow[0].method: expected an HTTP method",
        "bridge.yaml:21:15: apis[1].allow[0].path: expected a path pattern starting with / or *",
        "bridge.yaml:23:15: apis[1].allow[1].path: expected a path pattern without ?query",
        "bridge.yaml:24:5: apis[2].allow: an empty list (or the key with nothing under it) is refused: it reads as admitting no request",
        "bridge.yaml:27:5: apis[3].allow: an empty list (or the key with nothing under it) is refused: it reads as admitting no request",
        "bridge.yaml:32:5: databases[0].database: required",
        "bridge.yaml:32:5: databases[0].credentials: required",
        "bridge.yaml:33:11: databases[0].port: expected a port from 1 to 65535, got 0",
    ];
    // In file order (problems without a place first), one per line.
    for (got, want) in text.lines().zip(expected) {
        assert!(
            got.starts_with(want),
            "expected {want:?}, got {got:?} in:\n{text}"
        );
    }
    assert_eq!(err.problems().len(), expected.len(), "{text}");
    assert_eq!(text.lines().count(), expected.len());
    assert!(
        !text.contains("pw@"),
        "URL credentials must not be echoed: {text}"
    );
}

#[test]
fn a_value_of_the_wrong_type_is_named_by_its_key_path() {
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\napis:\n  - name: a\n    url: http://a\n    max_connections: lots\n";
    let err = failure(yaml, &MapEnv::default());
    assert!(
        err.contains("bridge.yaml:7:22: apis[0].max_connections: expected a whole number"),
        "{err}"
    );
    let err = failure("name: dc1\ntls_verify: maybe\n", &MapEnv::default());
    assert!(
        err.contains("bridge.yaml:2:13: tls_verify: expected true or false"),
        "{err}"
    );
}

#[test]
fn wrong_types_are_listed_at_once_with_the_other_problems() {
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\napis:\n  - name: a\n    url: http://a\n    max_connections: lots\n  - name: b\n    url: ftp://b\n    max_conections: 2\nsources:\n  - name: code\n    url: https://git.internal\n    allow_push: maybe\n";
    let err = failure(yaml, &MapEnv::default());
    let expected = [
        "bridge.yaml:7:22: apis[0].max_connections: expected a whole number",
        "bridge.yaml:9:10: apis[1].url: expected an absolute http or https URL",
        "bridge.yaml:10:5: apis[1]: unknown field `max_conections`",
        "bridge.yaml:14:17: sources[0].allow_push: expected true or false",
    ];
    for want in expected {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    assert_eq!(err.lines().count(), expected.len(), "{err}");
}

#[test]
fn a_mapping_where_a_list_belongs_is_one_problem_named_by_its_key() {
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\napis:\n  name: a\n  url: http://a\nlog_levle: info\n";
    let expected = [
        "bridge.yaml:4:1: apis: expected a list (lines starting with `- `)",
        "bridge.yaml:7:1: unknown field `log_levle`",
    ];
    // The same with the line endings of Windows, or of old Macs (a lone CR).
    for text in [
        yaml.to_string(),
        yaml.replace('\n', "\r\n"),
        yaml.replace('\n', "\r"),
    ] {
        let err = failure(&text, &MapEnv::default());
        for want in expected {
            assert!(err.contains(want), "missing {want:?} in:\n{err}");
        }
        assert_eq!(err.lines().count(), expected.len(), "{err}");
    }
    // A wrong value inside a flow mapping is its own problem, not its list's.
    let flow = "name: dc1\ntoken: t\napi_url: https://cloud.example\napis:\n  - {name: a, url: http://a, max_connections: lots}\n";
    let err = failure(flow, &MapEnv::default());
    assert!(
        err.contains("bridge.yaml:5:47: apis[0].max_connections: expected a whole number"),
        "{err}"
    );
    assert!(!err.contains(": apis: "), "{err}");
}

/// The docs' own `auth: {…}` and `allow: [{…}]` forms: a wrong value inside them is named by
/// its whole key path, as one in block form is.
#[test]
fn a_wrong_value_inside_a_flow_mapping_is_named_by_its_key_path() {
    let yaml = "name: dc1\ntoken: t\napis:\n  - {name: a, url: http://a, max_connections: lots}\n  - name: b\n    url: http://b\n    allow: [{method: GET, path: [x]}]\n    auth: {type: basic, username: {u: 1}, password: p}\n";
    let err = failure(yaml, &MapEnv::default());
    let expected = [
        "bridge.yaml:4:47: apis[0].max_connections: expected a whole number",
        "bridge.yaml:7:33: apis[1].allow[0].path: expected text",
        "bridge.yaml:8:35: apis[1].auth.username: expected text",
    ];
    for want in expected {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
}

#[test]
fn a_list_or_mapping_where_text_belongs_is_named_and_the_reading_goes_on() {
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\napis:\n  - name: [a, b]\n    url: http://a\n  - name: b\n    url:\n      host: b\n      port: 80\n  - {name: c, url: {x: 1}, max_connections: 2}\n  - name: d\n    url: http://d\n    max_connections: lots\n";
    let err = failure(yaml, &MapEnv::default());
    let expected = [
        "bridge.yaml:5:11: apis[0].name: expected text, not a list or a mapping",
        "bridge.yaml:8:5: apis[1].url: expected text, not a list or a mapping",
        "bridge.yaml:11:20: apis[2].url: expected text, not a list or a mapping",
        "bridge.yaml:14:22: apis[3].max_connections: expected a whole number",
    ];
    for want in expected {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    // Each said once: the values read as empty text raise nothing more.
    assert_eq!(err.lines().count(), expected.len(), "{err}");
}

#[test]
fn a_list_or_mapping_as_an_item_of_a_text_list_is_named_by_its_index() {
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\nsources:\n  - name: code\n    url: https://git.example\n    repositories:\n      - team/*\n      - name: team/lib\n      - [a, b]\n    max_connections: lots\n";
    let err = failure(yaml, &MapEnv::default());
    let expected = [
        "bridge.yaml:9:9: sources[0].repositories[1]: expected text, not a list or a mapping",
        "bridge.yaml:10:9: sources[0].repositories[2]: expected text, not a list or a mapping",
        "bridge.yaml:11:22: sources[0].max_connections: expected a whole number",
    ];
    for want in expected {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    assert_eq!(err.lines().count(), expected.len(), "{err}");
    // An unknown first key of an entry hides none of the entry's own problems.
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\ndatabases:\n  - hots: db\n    port: 5432\n";
    let err = failure(yaml, &MapEnv::default());
    assert!(err.contains("unknown field `hots`"), "{err}");
    assert!(err.contains("databases[0].database"), "{err}");
    // A list or a scalar where a mapping belongs is said once, not also as "required", and
    // the rest of the file is still read.
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\ndatabases:\n  - name: a\n    host: db\n    database: d\n    credentials: [alice, s3cret]\nmax_connections: lots\n";
    let err = failure(yaml, &MapEnv::default());
    assert!(
        err.contains("databases[0].credentials: expected a mapping"),
        "{err}"
    );
    assert!(
        err.contains("max_connections: expected a whole number"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

/// A typo in the second mapping of a flow list is named by its index.
#[test]
fn an_unknown_key_in_a_later_flow_item_names_that_item() {
    let yaml = "name: dc1\ntoken: x\napis:\n  - name: internal\n    url: http://127.0.0.1:9000\n    allow: [{method: GET, path: \"/a,b\"}, {method: GET, bogus: 1}]\n";
    let text = failure(yaml, &MapEnv::new());
    assert!(
        text.contains("apis[0].allow[1]: unknown field `bogus`"),
        "{text}"
    );
}

/// A list at the top of the file is said once, not as every key it lacks.
#[test]
fn a_list_at_the_top_is_one_problem() {
    let text = failure("# bridge\n- name: dc1\n- token: x\n", &MapEnv::new());
    assert_eq!(
        text.trim(),
        "bridge.yaml:2:1: the file's top level must be `key: value` lines (name:, token:, apis:, …), not a list",
        "{text}"
    );
}

/// A tab in the indentation is named at its line (the YAML reader's own message names another).
#[test]
fn a_tab_in_the_indentation_is_named_at_its_line() {
    let text = failure("name: dc1\ntoken: x\napis:\n\t- name: a\n", &MapEnv::new());
    assert_eq!(
        text.trim(),
        "bridge.yaml:4:1: a tab in the indentation: YAML indents with spaces only",
        "{text}"
    );
}

/// A list where a number belongs is said as such, and hides none of the file's other problems.
#[test]
fn a_list_for_a_number_hides_nothing_after_it() {
    let yaml = "name: dc1\ntoken: x\nmax_connections: [1]\nheartbeat_interval: 0\napis:\n  - name: x\n    urll: http://h\n    max_connections: abc\n";
    let text = failure(yaml, &MapEnv::new());
    for want in [
        "bridge.yaml:3:18: max_connections: expected a single value, not a list or a mapping",
        "bridge.yaml:4:21: heartbeat_interval: expected whole seconds from 1 to 3600, got 0",
        "unknown field `urll`",
        "bridge.yaml:8:22: apis[0].max_connections: expected a whole number",
    ] {
        assert!(text.contains(want), "expected {want:?} in:\n{text}");
    }
}

/// Broken syntax after an unknown key is said too, after it.
#[test]
fn broken_syntax_after_an_unknown_key_is_said_too() {
    let text = failure(
        "name: dc1\ntoken: x\nfoo: 1\nlog_level: \"abc\n",
        &MapEnv::new(),
    );
    assert!(
        text.contains("bridge.yaml:3:1: unknown field `foo`"),
        "{text}"
    );
    assert!(text.contains("bridge.yaml:4:12: unclosed quote"), "{text}");
}

#[test]
fn an_unquoted_variable_in_a_flow_mapping_is_explained() {
    let yaml = "name: n\napis:\n  - {name: a, url: http://a, auth: {type: bearer, token: ${T}}}\n";
    let err = load(yaml, &MapEnv::new().with("T", "x")).unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.contains("a ${VAR} inside { … } must be quoted"),
        "{shown}"
    );
    let quoted =
        "name: n\napis:\n  - {name: a, url: http://a, auth: {type: bearer, token: \"${T}\"}}\n";
    let err = load(quoted, &MapEnv::new().with("T", "x"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(!err.contains("must be quoted"), "{err}");
}

#[test]
fn a_variable_where_a_number_belongs_is_told_it_is_not_expanded_there() {
    let yaml = "name: dc1\ntoken: t\nmax_connections: ${MAX}\nheartbeat_interval: \"${BEAT}\"\napis:\n  - {name: a, url: http://a, max_connections: lots}\n  - {name: b, url: http://b, max_connections: \"${MAX}\"}\n";
    let env = MapEnv::new().with("MAX", "10").with("BEAT", "5");
    let err = failure(yaml, &env);
    assert!(
        err.contains("bridge.yaml:3:18: max_connections: expected a whole number (`${NAME}` is expanded in text values only)"),
        "{err}"
    );
    assert!(
        err.contains("heartbeat_interval: expected a whole number (`${NAME}`"),
        "{err}"
    );
    assert!(
        err.contains("apis[1].max_connections: expected a whole number (`${NAME}`"),
        "{err}"
    );
    // A plain wrong number gets no word about variables.
    assert!(
        err.contains("expected a whole number\n") || err.ends_with("expected a whole number"),
        "{err}"
    );
}

#[test]
fn an_api_url_with_a_path_is_refused() {
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example/signals/\n";
    let text = load(yaml, &MapEnv::new()).unwrap_err().to_string();
    assert!(
        text.starts_with("bridge.yaml:3:10: api_url: expected the cloud's address without a path"),
        "{text}"
    );
    let root = "name: dc1\ntoken: t\napi_url: https://cloud.example/\n";
    assert!(load(root, &MapEnv::new()).is_ok());
}
