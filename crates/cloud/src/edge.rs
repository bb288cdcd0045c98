//! The layer around every route: an HTTP/1.1 request without exactly one `Host` is refused
//! (400, as RFC 9112 §3.2 asks of every server), another site's requests are refused
//! (crate::cross_site), and each answered request's latency is recorded by route
//! (`http_request_duration_seconds`).
//!
//! A plain tower service rather than two `axum::middleware::from_fn` layers: each of those
//! boxes a future and a service per request, a cost the forwarding routes feel
//! (docs/benchmarks.md has the measurement).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::response::{IntoResponse, Response};
use tower::{Layer, Service};

use crate::metrics::Metrics;

/// Wraps each route in an [`Edge`].
#[derive(Clone)]
pub struct EdgeLayer {
    metrics: Metrics,
}

impl EdgeLayer {
    /// Records into `metrics`.
    pub fn new(metrics: Metrics) -> Self {
        EdgeLayer { metrics }
    }
}

impl<S> Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// A route behind the cross-site refusal, timed.
#[derive(Clone)]
pub struct Edge<S> {
    inner: S,
    metrics: Metrics,
}

impl<S> Service<Request> for Edge<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = EdgeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let started = Instant::now();
        let method = method_label(request.method());
        let route = request
            .extensions()
            .get::<MatchedPath>()
            .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
        let refusal = host_refusal(&request).or_else(|| crate::cross_site::refusal(&request));
        let answer = match refusal {
            Some(refused) => Answer::Refused {
                response: Some(refused),
            },
            None => Answer::Route {
                future: self.inner.call(request),
            },
        };
        EdgeFuture {
            answer,
            started,
            method,
            route: Some(route),
            metrics: self.metrics.clone(),
        }
    }
}

/// The 400 for an HTTP/1.1 request with no `Host` or more than one: which site it is meant
/// for is unknown (HTTP/1.0 may omit it; HTTP/2 names it in `:authority`).
fn host_refusal(request: &Request) -> Option<Response> {
    if request.version() != axum::http::Version::HTTP_11 {
        return None;
    }
    let hosts = request
        .headers()
        .get_all(axum::http::header::HOST)
        .iter()
        .count();
    (hosts != 1).then(|| {
        crate::problem::Problem::bad_request(format!(
            "an HTTP/1.1 request must carry exactly one Host header (RFC 9112 §3.2); this one has {hosts}"
        ))
        .into_response()
    })
}

/// The `method` label: the common methods by name, every other as `other` (label values that
/// a client chooses would grow the metrics without limit).
fn method_label(method: &axum::http::Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

pin_project_lite::pin_project! {
    /// The route's answer (or the refusal), recorded when it is ready.
    pub struct EdgeFuture<F> {
        #[pin]
        answer: Answer<F>,
        started: Instant,
        method: &'static str,
        route: Option<String>,
        metrics: Metrics,
    }
}

pin_project_lite::pin_project! {
    #[project = AnswerProj]
    enum Answer<F> {
        Refused { response: Option<Response> },
        Route { #[pin] future: F },
    }
}

impl<F> Future for EdgeFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = match this.answer.project() {
            AnswerProj::Refused { response } => response.take().expect("polled after it was ready"),
            AnswerProj::Route { future } => match ready!(future.poll(cx)) {
                Ok(response) => response,
                Err(never) => match never {},
            },
        };
        let route = this.route.take().unwrap_or_default();
        this.metrics.request(
            this.method,
            route,
            response.status().as_u16(),
            this.started.elapsed(),
        );
        Poll::Ready(Ok(response))
    }
}
