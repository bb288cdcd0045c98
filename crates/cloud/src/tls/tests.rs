use super::*;

/// A client certificate named `cn` signed by `ca` (as enrollment makes them).
fn client_cert(ca: &LocalCa, cn: &str) -> CertificateDer<'static> {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.signed_by(&key, &ca.issuer).unwrap().der().clone()
}

#[test]
fn the_ca_knows_its_own_signature_and_leaf_certificates_are_named() {
    let (ca_pem, ca_key) = LocalCa::generate().unwrap();
    let ca = LocalCa::from_pem(&ca_pem, &ca_key).unwrap();
    let (leaf_pem, _) = ca.issue_server(&["localhost"]).unwrap();
    let der = |pem: &str| CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
    let subjects = non_ca_subjects(&[der(&ca_pem), der(&leaf_pem)]);
    assert_eq!(subjects.len(), 1, "{subjects:?}");
    assert!(!subjects[0].contains("local CA"), "{subjects:?}");
    assert!(ca.issued(&client_cert(&ca, "1:dc1")));
    // Another deployment's CA has the same name and another key.
    let (other_pem, other_key) = LocalCa::generate().unwrap();
    let other = LocalCa::from_pem(&other_pem, &other_key).unwrap();
    assert!(!ca.issued(&client_cert(&other, "1:dc1")));
}
