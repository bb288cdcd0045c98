use super::*;

/// An entry without login or extra hosts.
pub(super) fn registry() -> RegistryKind {
    RegistryKind::new(Registry {
        name: "reg".into(),
        url: "https://registry.internal".parse().unwrap(),
        auth: None,
        token_hosts: Vec::new(),
        redirect_hosts: Vec::new(),
        allow_push: false,
        allow: Vec::new(),
        max_connections: None,
        tls_ca_file: None,
    })
}

#[test]
fn pulls_pass_and_everything_else_is_refused() {
    let r = registry();
    assert!(
        r.admit(&Method::GET, "/v2/team/app/manifests/1.0", None)
            .is_ok()
    );
    assert!(
        r.admit(&Method::HEAD, "/v2/team/app/blobs/sha256:ab", None)
            .is_ok()
    );
    let push = r
        .admit(&Method::PUT, "/v2/team/app/manifests/1.0", None)
        .unwrap_err();
    assert_eq!(push.status, StatusCode::FORBIDDEN);
    let outside = r.admit(&Method::GET, "/metrics", None).unwrap_err();
    assert_eq!(outside.status, StatusCode::NOT_FOUND);
}
