use super::*;

fn bearer(key: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        format!("Bearer {key}").parse().unwrap(),
    );
    headers
}

/// What git and skopeo send is read like Bearer; what they send without credentials gets
/// a message that says how to give them.
#[test]
fn basic_carries_the_key_as_its_password() {
    let basic = |userpass: &str| {
        let mut headers = HeaderMap::new();
        let value = base64::engine::general_purpose::STANDARD.encode(userpass);
        headers.insert(
            header::AUTHORIZATION,
            format!("Basic {value}").parse().unwrap(),
        );
        headers
    };
    assert_eq!(presented_key(&basic("ci:sig_key")).unwrap(), "sig_key");
    assert_eq!(presented_key(&bearer("sig_key")).unwrap(), "sig_key");
    let empty = presented_key(&basic("ci:")).unwrap_err();
    assert!(
        empty.detail.contains("--creds ci:$API_KEY"),
        "{}",
        empty.detail
    );
    let missing = presented_key(&HeaderMap::new()).unwrap_err();
    assert!(missing.detail.contains("HTTP Basic"), "{}", missing.detail);
}

#[test]
fn made_up_ids_never_push_out_the_keys_in_use() {
    let now = Instant::now();
    let mut cache: HashMap<String, (Option<u8>, Instant)> = HashMap::new();
    cache.insert("real".into(), (Some(1), now));
    for i in 0..3 {
        cache.insert(format!("made-up-{i}"), (None, now));
    }
    make_room(&mut cache, 4, Option::is_some);
    assert_eq!(cache.keys().collect::<Vec<_>>(), ["real"]);
    // All in use and fresh: the cache starts over rather than grow.
    let mut full: HashMap<String, (Option<u8>, Instant)> =
        (0..4).map(|i| (i.to_string(), (Some(i), now))).collect();
    make_room(&mut full, 4, Option::is_some);
    assert!(full.is_empty());
}

#[test]
fn internal_keys_work_for_their_org_in_their_process_only() {
    let cache = KeyCache::default();
    let key = cache.internal_key(7);
    let principal = cache.authenticate_internal(&bearer(&key)).unwrap();
    assert_eq!(
        (principal.org_id, principal.key_id.as_str()),
        (7, INTERNAL_PRINCIPAL)
    );
    let other_org = key.replacen("sigint_7_", "sigint_8_", 1);
    assert!(cache.authenticate_internal(&bearer(&other_org)).is_err());
    assert!(
        KeyCache::default()
            .authenticate_internal(&bearer(&key))
            .is_err()
    );
    assert!(cache.authenticate_internal(&bearer("sigapi_x_y")).is_err());
}
