use super::*;
use crate::config::{MapEnv, TLS_CA_FILE_VAR};

/// An operator who set the CA by variable (a container's mount) is told the variable, not a
/// key the file may not even have.
#[test]
fn a_bad_ca_names_where_it_was_set() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("ca.pem");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let yaml = format!("token: t\nname: b\ntls_ca_file: {}\n", not_pem.display());
    let message = |env: &MapEnv| {
        let cfg = Config::from_yaml(&yaml, "bridge.yaml", env).unwrap();
        trust(&cfg)
            .err()
            .expect("a file with no certificate")
            .to_string()
    };
    let from_file = message(&MapEnv::new());
    assert!(from_file.contains("tls_ca_file "), "{from_file}");
    assert!(
        from_file.contains("no usable PEM CA certificate"),
        "{from_file}"
    );
    let env = MapEnv::new().with(TLS_CA_FILE_VAR, not_pem.display().to_string());
    let from_env = message(&env);
    assert!(from_env.contains("SERVICE_TLS_CA_FILE "), "{from_env}");
}

#[test]
fn a_5xx_is_said_as_what_is_in_front_of_the_cloud() {
    let gateway = AgentError::Refused {
        status: 502,
        reason: problem_detail(b"<html>\n<h1>502 Bad Gateway</h1>\n</html>\n"),
    };
    let said = gateway.to_string();
    assert!(
        said.starts_with("api_url answered HTTP 502, not the cloud's tunnel: a proxy")
            && !said.contains('\n'),
        "{said}"
    );
    let refused = AgentError::Refused {
        status: 426,
        reason: "upgrade the bridge".into(),
    };
    assert_eq!(
        refused.to_string(),
        "the cloud refused the tunnel (426): upgrade the bridge"
    );
}
