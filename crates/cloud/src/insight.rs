//! What correlation knows, as the features that are not correlation need it: the dashboard's
//! alert and service pages, and the notifier's "strong suspect" webhook. The application
//! implements [`Insight`] over correlation, so neither imports it.

use futures_util::future::BoxFuture;
use serde_json::Value;

/// Suspects and DORA figures, answered as the API answers them.
pub trait Insight: Send + Sync {
    /// `GET /v1/alerts/{id}/suspects`'s answer for the org's alert, or why there is none: a
    /// page shows no suspects for an event that is not an alert, but says storage failed.
    fn suspects<'a>(
        &'a self,
        org_id: i64,
        alert_id: &'a str,
    ) -> BoxFuture<'a, Result<Value, NoSuspects>>;

    /// DORA figures of one service (in one environment, or all) for each of `weeks` weeks
    /// ending now, oldest first, then for the whole span: `GET /v1/dora`'s answers.
    fn weekly_dora<'a>(
        &'a self,
        org_id: i64,
        service: &'a str,
        environment: Option<&'a str>,
        weeks: u32,
    ) -> BoxFuture<'a, Option<(Vec<Value>, Value)>>;

    /// `GET /v1/deployments/{id}/commits`'s answer for the org's deployment, or why there is
    /// none, as a sentence for a person. Waits a bounded time: a first fetch of a large
    /// repository goes on in the background and the answer is ready on a later call.
    fn commits<'a>(
        &'a self,
        org_id: i64,
        deployment_id: &'a str,
    ) -> BoxFuture<'a, Result<Value, String>>;

    /// The org's mapping `old` was removed or replaced (by the dashboard): its repository's
    /// mirror is deleted, in the background, once no mapping reads it.
    fn mapping_dropped(&self, org_id: i64, old: crate::storage::RepositorySource);
}

/// Why [`Insight::suspects`] has no answer.
#[derive(Debug, thiserror::Error)]
pub enum NoSuspects {
    /// The event is not one of the org's alerts (or is gone): nothing to rank.
    #[error("the event is not one of the org's alerts")]
    NotAnAlert,
    /// Storage failed; asking again later may answer.
    #[error("{0}")]
    Unavailable(String),
}
