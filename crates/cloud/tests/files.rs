//! What `cloud serve` leaves on disk: the database (events, the internal CA's key) private
//! whatever the umask, the CA certificate readable, and a CA with a lifetime an auditor takes.

#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use testkit::{Backend, Cloud, seed_event};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_is_private_and_the_ca_certificate_is_not() {
    let mut cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let res = cloud
        .client()
        .post(format!("{}/v1/signals/{}", cloud.http, t.signal_key))
        .bearer_auth(&t.api_key)
        .json(&seed_event())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let dir = cloud.data_dir.path().to_path_buf();
    for file in [
        "signals.db",
        "signals.db-wal",
        "signals.db-shm",
        "signals.db.serve-lock",
        "ca-key.pem",
    ] {
        assert_eq!(mode(&dir.join(file)), 0o600, "{file}");
    }
    assert_eq!(
        mode(&dir.join("ca.pem")),
        0o644,
        "clients are told to trust ca.pem"
    );

    // A database made readable by others (an old release, a careless copy) is made private
    // at the next start, with one warning naming its files.
    for file in [
        "signals.db",
        "signals.db-wal",
        "signals.db-shm",
        "ca-key.pem",
    ] {
        std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(0o604)).unwrap();
    }
    cloud.kill_and_restart();
    assert_eq!(mode(&dir.join("signals.db")), 0o600);
    assert_eq!(mode(&dir.join("signals.db-wal")), 0o600);
    let warned = cloud.wait_log_line("the database was readable by other users");
    assert!(
        warned.contains("signals.db (mode 604)") && warned.contains("signals.db-wal (mode 604)"),
        "{warned}"
    );
    let warnings = cloud
        .log_text()
        .matches("the database was readable")
        .count();
    assert_eq!(warnings, 1, "{}", cloud.log_text());
    assert_eq!(mode(&dir.join("ca-key.pem")), 0o600);
    cloud.wait_log_line("the internal CA's key was readable by other users");
}

#[test]
fn the_internal_ca_lives_ten_years() {
    let cloud = Cloud::start(Backend::Sqlite);
    let pem = std::fs::read(cloud.ca_path()).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
    let cert = pem.parse_x509().unwrap();
    let validity = cert.validity();
    let days = (validity.not_after.timestamp() - validity.not_before.timestamp()) / 86_400;
    assert!((3650..=3651).contains(&days), "{days} days");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(validity.not_before.timestamp() <= now && now - validity.not_before.timestamp() < 7200);
}
