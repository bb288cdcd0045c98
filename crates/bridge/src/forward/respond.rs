//! Phase 4, the response: the kind may replace the internal system's answer
//! ([`Kind::response_filter`](super::Kind::response_filter)); otherwise its head loses one
//! hop's headers and any that echo the injected credentials, and its body streams back, its
//! trailers filtered alike. An answer the bridge cannot get or pass on becomes the bridge's
//! own `502`.

use http::{Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::batch::Batched;
use super::causes::{closed_without_answer, unreadable_head};
use super::kind::Sent;
use super::settle::Finish;
use super::upstream::{HOP, coded_transfer, strip_headers, unforwardable};
use super::{
    Counted, Forwarder, ResBody, Resource, caller_advice, caller_summary, causes, host_port,
};
use crate::config::ResourceKind;

impl Forwarder {
    /// What goes back for the internal system's `answer` to the request `sent` (once the kind
    /// has followed it): the answer, filtered and streaming, or the refusal or `502` that
    /// replaces it.
    pub(super) fn respond(
        &self,
        resource: &Resource,
        sent: &Sent,
        mut finish: Finish,
        (kind, name): (ResourceKind, &str),
        answer: Result<Response<Incoming>, hyper_util::client::legacy::Error>,
    ) -> Response<ResBody> {
        match answer {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                if let Some(refusal) = resource
                    .kind
                    .response_filter(parts.status, &mut parts.headers)
                {
                    return self.refused_answer(finish, resource, (kind, name), refusal);
                }
                resource.echoes.strip(&mut parts.headers, name);
                // An answer without a body (to HEAD; 204, 304) has no coding to lose.
                let bodiless =
                    sent.method == http::Method::HEAD || matches!(parts.status.as_u16(), 204 | 304);
                if !bodiless && let Some(why) = coded_transfer(name, &parts.headers) {
                    tracing::warn!(kind = %kind, resource = %name, cause = %why, "internal resource's answer cannot be forwarded");
                    return bad_gateway(finish, resource, &why);
                }
                // Only a chunked HTTP/1.1 answer or an HTTP/2 one can end in trailers.
                let may_trail = parts.version == http::Version::HTTP_2
                    || parts.headers.contains_key(hyper::header::TRANSFER_ENCODING);
                // Both framings: chunked wins (RFC 9112 §6.3), so the length said is not the
                // body's, and passed on it would break the caller's stream.
                if parts.headers.contains_key(hyper::header::TRANSFER_ENCODING) {
                    parts.headers.remove(hyper::header::CONTENT_LENGTH);
                }
                tunnel::hop::strip_answer(&mut parts.headers, HOP);
                if let Some(why) = unforwardable(name, parts.status, &parts.headers) {
                    tracing::warn!(kind = %kind, resource = %name, cause = %why, "internal resource's answer cannot be forwarded");
                    return bad_gateway(finish, resource, &why);
                }
                if let Some(audit) = finish.audit.as_mut() {
                    audit.status = parts.status.as_u16();
                }
                finish.streaming = true;
                let body = Batched::new(Counted {
                    inner: body,
                    tally: finish,
                });
                // Trailers are header lines too: one hop's go (HTTP/2 refuses to send a
                // `connection` trailer), and an echo of the credentials goes there alike.
                let body = if !may_trail {
                    body.boxed()
                } else {
                    let (echoes, name) = (resource.echoes.clone(), name.to_string());
                    body.map_frame(move |frame| match frame.into_trailers() {
                        Ok(mut trailers) => {
                            strip_headers(&mut trailers, HOP);
                            echoes.strip(&mut trailers, &name);
                            hyper::body::Frame::trailers(trailers)
                        }
                        Err(frame) => frame,
                    })
                    .boxed()
                };
                Response::from_parts(parts, body)
            }
            Err(e) if unreadable_head(&e) => {
                let why = format!(
                    "resource {name:?} answered with a head the bridge cannot read: more than 100 header fields, too large, or malformed HTTP/1.1 ({})",
                    causes(&e)
                );
                tracing::warn!(kind = %kind, resource = %name, cause = %why, "internal resource's answer cannot be forwarded");
                bad_gateway(finish, resource, &why)
            }
            Err(e) if closed_without_answer(&e) => {
                let cause = causes(&e);
                tracing::warn!(kind = %kind, resource = %name, target = %host_port(resource.kind.base_url()), cause = %cause, "internal resource closed the connection without answering");
                self.metrics.refuse("upstream_unavailable");
                bad_gateway(
                    finish,
                    resource,
                    &format!(
                        "resource {name:?} took the bridge's connection and closed or reset it without answering (the bridge's log says more). Check its own log, and that its url's port serves HTTP"
                    ),
                )
            }
            Err(e) => {
                let cause = causes(&e);
                tracing::warn!(kind = %kind, resource = %name, target = %host_port(resource.kind.base_url()), cause = %cause, "internal resource unreachable");
                self.metrics.refuse("upstream_unavailable");
                bad_gateway(
                    finish,
                    resource,
                    &format!(
                        "the bridge cannot reach resource {name:?}: {} (the bridge's log says more). {}",
                        caller_summary(&cause),
                        caller_advice(&cause)
                    ),
                )
            }
        }
    }
}

/// The bridge's own `502` for an allowed request whose answer it could not get or pass on,
/// audited as 502 (the stream's metrics settle as `finish` drops).
fn bad_gateway(mut finish: Finish, resource: &Resource, why: &str) -> Response<ResBody> {
    if let Some(audit) = finish.audit.as_mut() {
        audit.status = 502;
    }
    drop(finish);
    resource.kind.refusal(StatusCode::BAD_GATEWAY, why)
}
