//! Probing for API key ids learns nothing from timing: an id found to have no key is
//! remembered like a found one, so a repeat is answered without the database, as a wrong
//! secret for a known id is. Shown by taking the keys table away after the first probe.

use reqwest::StatusCode;
use testkit::{Backend, Cloud, on_both_backends};

on_both_backends!(unknown_key_ids_are_answered_from_the_cache_like_known_ones);

async fn unknown_key_ids_are_answered_from_the_cache_like_known_ones(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let secret = "0".repeat(64);
    let unknown = format!("sigapi_0123456789abcdef_{secret}");
    let (known_id, _) = t.api_key.rsplit_once('_').unwrap();
    let wrong_secret = format!("{known_id}_{secret}");
    assert_eq!(
        cloud.events_status(&unknown).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        cloud.events_status(&wrong_secret).await,
        StatusCode::UNAUTHORIZED
    );
    cloud.exec_sql("ALTER TABLE api_keys RENAME TO api_keys_gone");
    // Both repeats are answered from the cache: neither asks the (now broken) database.
    assert_eq!(
        cloud.events_status(&unknown).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        cloud.events_status(&wrong_secret).await,
        StatusCode::UNAUTHORIZED
    );
    // A new id does need the database: proof that the table really is gone.
    let fresh = format!("sigapi_fedcba9876543210_{secret}");
    assert_eq!(
        cloud.events_status(&fresh).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
}
