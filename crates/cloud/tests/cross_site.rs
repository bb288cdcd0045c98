//! What a page of another site can make a visitor's browser do here, by the browser's own
//! word on where a request comes from (Fetch Metadata headers): link to a page, nothing more.
//! Clients that are no browser send no such headers and are not affected. (The same with a
//! real Chromium and a forwarded route: `crates/bridge/tests/cross_site.rs`.)

use reqwest::{Method, StatusCode};
use serde_json::Value;
use testkit::{Backend, Cloud, seed_event};

/// A request as a browser sends it for a page of `site`, in `mode`, for `dest`.
fn from_page(
    cloud: &Cloud,
    method: Method,
    path: &str,
    (site, mode, dest): (&str, &str, &str),
) -> reqwest::RequestBuilder {
    cloud
        .client()
        .request(method, format!("{}{path}", cloud.http))
        .header("sec-fetch-site", site)
        .header("sec-fetch-mode", mode)
        .header("sec-fetch-dest", dest)
}

#[tokio::test]
async fn another_sites_page_may_link_here_and_do_nothing_else() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let signals = format!("/v1/signals/{}", t.signal_key);
    let form_post = ("cross-site", "navigate", "document");

    // A form on another site that posts an event with the key the browser holds (Basic,
    // as a prompt would have taken it): refused, saying why.
    let res = from_page(&cloud, Method::POST, &signals, form_post)
        .basic_auth("anyone", Some(&t.api_key))
        .json(&seed_event())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let problem: Value = res.json().await.unwrap();
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("another origin (cross-site") && detail.contains("POST /v1/signals/"),
        "{problem}"
    );
    // A script of a sibling host (same-site), reading events: refused too.
    let res = from_page(
        &cloud,
        Method::GET,
        "/v1/events",
        ("same-site", "cors", "empty"),
    )
    .bearer_auth(&t.api_key)
    .send()
    .await
    .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);

    // Under /v2/ the refusal is an OCI error body, as registry clients read them.
    let res = from_page(&cloud, Method::GET, "/v2/", ("cross-site", "cors", "empty"))
        .basic_auth("anyone", Some(&t.api_key))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let oci: Value = res.json().await.unwrap();
    assert_eq!(oci["errors"][0]["code"], "DENIED", "{oci}");

    // A browser without Fetch Metadata says where a post comes from in Origin only.
    let res = cloud
        .client()
        .post(format!("{}{signals}", cloud.http))
        .header("origin", "https://other.example")
        .bearer_auth(&t.api_key)
        .json(&seed_event())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let res = cloud
        .client()
        .post(format!("{}{signals}", cloud.http))
        .header("origin", &cloud.http)
        .bearer_auth(&t.api_key)
        .json(&seed_event())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    // Over HTTP/2 (TLS), where the authority comes as `:authority`, not `Host`; the default
    // port left out of neither.
    let res = cloud
        .client()
        .post(format!("{}{signals}", cloud.https))
        .version(reqwest::Version::HTTP_2)
        .header(
            "origin",
            cloud.https.to_uppercase().replace("HTTPS://", "https://"),
        )
        .bearer_auth(&t.api_key)
        .json(&seed_event())
        .send()
        .await
        .unwrap();
    assert_eq!(res.version(), reqwest::Version::HTTP_2);
    assert_eq!(res.status(), StatusCode::ACCEPTED);

    // The same post from the service's own page, and from a client: accepted.
    let own = from_page(
        &cloud,
        Method::POST,
        &signals,
        ("same-origin", "cors", "empty"),
    )
    .bearer_auth(&t.api_key)
    .json(&seed_event())
    .send()
    .await
    .unwrap();
    assert_eq!(own.status(), StatusCode::ACCEPTED);
    let client = cloud
        .client()
        .post(format!("{}{signals}", cloud.http))
        .bearer_auth(&t.api_key)
        .json(&seed_event())
        .send()
        .await
        .unwrap();
    assert_eq!(client.status(), StatusCode::ACCEPTED);
    let listed: Value = cloud
        .client()
        .get(format!("{}/v1/events", cloud.http))
        .bearer_auth(&t.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["events"].as_array().unwrap().len(), 4, "{listed}");

    // A link from another site opens the page; the same page as its image or frame does not.
    let link = from_page(&cloud, Method::GET, "/sign-in", form_post)
        .send()
        .await
        .unwrap();
    assert_eq!(link.status(), StatusCode::OK);
    for (mode, dest) in [("no-cors", "image"), ("navigate", "iframe")] {
        let res = from_page(&cloud, Method::GET, "/sign-in", ("cross-site", mode, dest))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::FORBIDDEN, "{mode} {dest}");
    }
}
