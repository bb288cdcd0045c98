use super::*;

#[test]
fn log_output_becomes_commits_with_their_files() {
    let out = "\x1eaaa\x1fAda\x1f2026-01-02T03:04:05+00:00\x1fFix: payments\n\npayments/a.rs\nREADME.md\n\x1ebbb\x1fBob\x1f2026-01-01T00:00:00+00:00\x1fEmpty\n";
    let commits = parse_log(out);
    assert_eq!(commits.len(), 2);
    assert_eq!(commits[0].sha, "aaa");
    assert_eq!(commits[0].author, "Ada");
    assert_eq!(commits[0].subject, "Fix: payments");
    assert_eq!(commits[0].files, ["payments/a.rs", "README.md"]);
    assert!(commits[1].files.is_empty());
}

#[test]
fn only_old_leftovers_of_first_clones_are_swept() {
    let root = tempfile::tempdir().unwrap();
    let org = root.path().join("7");
    for name in ["old.partial-4242", "new.partial-4243", "kept.git"] {
        std::fs::create_dir_all(org.join(name).join("objects")).unwrap();
    }
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    for name in ["old.partial-4242", "kept.git"] {
        std::fs::File::open(org.join(name))
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
    }
    let swept = stale_partials(root.path(), Duration::from_secs(900));
    assert_eq!(swept, [org.join("old.partial-4242")]);
    let mut left: Vec<String> = std::fs::read_dir(&org)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["kept.git", "new.partial-4243"]);
}

#[test]
fn only_hex_ids_reach_git() {
    assert!(is_commit_id("0123abc"));
    assert!(is_commit_id(&"a".repeat(40)));
    assert!(is_commit_id(&"a".repeat(64)));
    assert!(!is_commit_id(&"a".repeat(41)));
    assert!(!is_commit_id("--upload-pack=x"));
    assert!(!is_commit_id("abc"));
    assert!(!is_commit_id("main"));
}

#[test]
fn a_missing_commit_is_told_from_a_failed_fetch() {
    let failed = |message: &str| GitError::Failed {
        step: "fetch",
        message: message.into(),
    };
    // What git prints for a commit the server lacks, protocol v2 and v0.
    assert!(names_a_missing_object(&failed(
        "fatal: remote error: upload-pack: not our ref 1234567890123456789012345678901234567890"
    )));
    assert!(names_a_missing_object(&failed(
        "error: Server does not allow request for unadvertised object 1234"
    )));
    // The tunnel or the server failing is not the caller's data.
    assert!(!names_a_missing_object(&failed(
        "fatal: unable to access 'http://127.0.0.1/…': The requested URL returned error: 502"
    )));
    assert!(!names_a_missing_object(&GitError::Http {
        status: 503,
        said: String::new()
    }));
}
