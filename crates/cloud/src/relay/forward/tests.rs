use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http_body::{Frame, SizeHint};

use super::*;

#[test]
fn an_undeclared_entry_is_said_with_the_names_declared_and_what_was_meant() {
    let git = "/v1/bridges/{bridge}/git/{name}/{*path}";
    let said = |raw: &str, declared: &[&str]| {
        let declared: Vec<String> = declared.iter().map(|d| d.to_string()).collect();
        not_declared(&Target::new(ResourceKind::Git, git, raw), &declared)
    };
    assert_eq!(
        said(
            "/v1/bridges/dc1/git/nope/team/lib.git/info/refs",
            &["code", "lib"]
        ),
        "bridge \"dc1\" declares no Git source named \"nope\" in its `sources` list; it declares code, lib"
    );
    assert!(
        said("/v1/bridges/dc1/git/lib.git/info/refs", &["lib"]).contains("(did you mean \"lib\"?)")
    );
    assert!(
        said("/v1/bridges/dc1/git/info/refs", &["code"])
            .starts_with("the URL names no Git source: give one after /git/")
    );
    assert!(said("/v1/bridges/dc1/git/code/x", &[]).ends_with("its `sources` list is empty"));
}

/// A body of `left` bytes that says its length, one byte every `every`.
struct Trickle {
    left: u64,
    every: Duration,
    next: Pin<Box<tokio::time::Sleep>>,
}

impl HttpBody for Trickle {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        ready!(self.next.as_mut().poll(cx));
        let every = self.every;
        self.next
            .as_mut()
            .reset(tokio::time::Instant::now() + every);
        self.left -= 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }
}

/// A small PUT is held for a retry while the address has room in the bound of bodies read
/// whole; past its share the body streams (sent once) instead of taking more memory.
#[tokio::test]
async fn a_small_body_is_held_only_within_the_memory_bound() {
    let peer: std::net::IpAddr = "198.51.100.7".parse().unwrap();
    let second = std::time::Duration::from_secs(1);
    let (held, reservation) = hold_body(second, &Method::PUT, Some(peer), Body::from("hello"))
        .await
        .unwrap();
    assert!(matches!(held, Outgoing::Held(b) if b == "hello"));
    assert!(reservation.is_some());
    drop(reservation);
    let _share = crate::body_budget::FORWARDED
        .reserve(Some(peer), crate::body_budget::PER_CLIENT)
        .expect("the address's whole share");
    let (streamed, reservation) = hold_body(second, &Method::PUT, Some(peer), Body::from("hello"))
        .await
        .unwrap();
    assert!(matches!(streamed, Outgoing::Streamed(_)));
    assert!(reservation.is_none());
}

/// A held body that never pauses for a whole read timeout but takes longer than four in all
/// is refused with 408, as every body read whole.
#[tokio::test(start_paused = true)]
async fn a_trickled_body_is_refused_after_four_read_timeouts() {
    let every = Duration::from_millis(500);
    let body = Body::new(Trickle {
        left: 1000,
        every,
        next: Box::pin(tokio::time::sleep(every)),
    });
    let started = tokio::time::Instant::now();
    let refused = hold_body(Duration::from_secs(1), &Method::PUT, None, body)
        .await
        .err()
        .expect("a 408");
    assert_eq!(refused.status, 408);
    assert!(
        refused.detail.contains("4 x --header-read-timeout"),
        "{}",
        refused.detail
    );
    assert_eq!(started.elapsed(), Duration::from_secs(4));
}
