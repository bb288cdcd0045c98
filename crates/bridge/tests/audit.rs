//! The audit log in a file: one hash chain across a real restart of the bridge, which
//! `bridge audit verify` checks, and which it refuses once a record is removed.

use std::process::Command;

use testkit::bridge::{Rig, bridge_bin, internal_api_yaml};

fn verify(path: &std::path::Path) -> (Option<i32>, String) {
    verify_with(path, &[])
}

fn verify_with(path: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(bridge_bin())
        .args(["audit", "verify"])
        .arg(path)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chain_in_a_file_continues_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let mut rig = Rig::start_with(|upstream| {
        format!(
            "audit_log: {}\n{}",
            path.display(),
            internal_api_yaml(upstream, "")
        )
    })
    .await;
    for _ in 0..2 {
        assert_eq!(rig.get("/before").await.status(), 200);
    }
    rig.bridge.signal("TERM");
    assert_eq!(rig.bridge.wait(), Some(0));
    let yaml = std::fs::read_to_string(rig.bridge.dir.path().join("bridge.yaml")).unwrap();
    rig.bridge = testkit::bridge::start_connected(&yaml, &rig.token).await;
    for _ in 0..2 {
        assert_eq!(rig.get("/after").await.status(), 200);
    }
    rig.bridge.signal("TERM");
    assert_eq!(rig.bridge.wait(), Some(0));

    let (code, said) = verify(&path);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("4 audit record(s) in 1 chain(s)"), "{said}");
    let head = said
        .split("last record's SHA-256: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no last hash: {said}"))
        .to_string();
    let (code, said) = verify_with(&path, &["--anchor", &head]);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("anchored record is on line 4, unaltered"),
        "{said}"
    );

    // An edit of the last record: the chain alone cannot tell, the anchor can.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let last = lines.len() - 1;
    lines[last] = lines[last].replace("\"status\":200", "\"status\":403");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let (code, said) = verify(&path);
    assert_eq!(code, Some(0), "{said}");
    let (code, said) = verify_with(&path, &["--anchor", &head]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("no audit record has the SHA-256"), "{said}");
    std::fs::write(&path, &text).unwrap();

    // Removing a record breaks the chain, and verify says where.
    let kept: Vec<&str> = text
        .lines()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, l)| l)
        .collect();
    std::fs::write(&path, kept.join("\n") + "\n").unwrap();
    let (code, said) = verify(&path);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("line 2: prev does not match the audit record on line 1"),
        "{said}"
    );
}

/// A file that cannot be read exits 2 (not 1, which says tampered with), naming it once.
#[test]
fn a_missing_audit_log_is_named_once_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nosuch.log");
    let (code, said) = verify(&path);
    assert_eq!(code, Some(2), "{said}");
    assert_eq!(
        said.trim_end(),
        format!(
            "audit log {}: cannot read: No such file or directory (os error 2)",
            path.display()
        )
    );
}
