//! A page of another site cannot make a visitor's browser act through the service. Here the
//! browser holds the org's API key, as it does once someone typed the key into the `Basic`
//! prompt that git's and the registry's routes answer with, and a page on another host posts
//! a form to a forwarded route, links to one, and loads one as a script. Real Chromium, the
//! real `cloud` and `bridge`; the other site is a page served from 127.0.0.2.

use testkit::bridge::{Rig, internal_api_yaml};
use testkit::browser::Browser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serves `html` at `http://127.0.0.2:PORT/`, another host and so another site for the
/// browser, until the test ends.
async fn other_site(html: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0")
        .await
        .expect("127.0.0.2 is loopback");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let html = html.clone();
            tokio::spawn(async move {
                let mut head = [0u8; 8192];
                let _ = conn.read(&mut head).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{html}",
                    html.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_sites_page_cannot_use_a_browsers_cached_key() {
    // The internal API is also a Git source here, so that git's own routes reach it.
    let rig = Rig::start_with(|upstream| {
        format!(
            "{}sources:\n  - name: code\n    url: {}\n",
            internal_api_yaml(upstream, ""),
            upstream.url
        )
    })
    .await;
    let repo = format!("{}/v1/bridges/dc1/git/code/team/app.git", rig.cloud.http);
    let browser = Browser::start().await;
    // Someone opened a repository in the browser and gave the API key at the prompt that
    // git's 401 brings (here in the URL): Chromium keeps it for this origin's realm.
    let with_key = repo.replacen(
        "http://",
        &format!("http://anyone:{}@", rig.tenant.api_key),
        1,
    );
    browser
        .goto(&format!("{with_key}/info/refs?service=git-upload-pack"))
        .await;
    browser
        .wait_for_text(r#""path":"/team/app.git/info/refs""#)
        .await;

    // A form on another site that posts to the repository: refused at the cloud.
    let form = other_site(format!(
        r#"<form method="post" action="{repo}/git-upload-pack"><input name="want" value="1"></form><script>document.forms[0].submit()</script>"#
    ))
    .await;
    browser.goto(&form).await;
    browser
        .wait_for_text("a page of another origin (cross-site")
        .await;
    let page = browser.source().await;
    assert!(!page.contains(r#""method":"POST""#), "{page}");

    // A link to a forwarded route: an internal system may act on a GET, so no.
    let link = other_site(format!(
        r#"<script>location.href = "{repo}/info/refs?service=git-upload-pack"</script>"#
    ))
    .await;
    browser.goto(&link).await;
    browser.wait_for_text("open the address yourself").await;

    // A link to the dashboard is what links are for: the sign-in page opens.
    let to_dashboard = other_site(format!(
        r#"<script>location.href = "{}/"</script>"#,
        rig.cloud.http
    ))
    .await;
    browser.goto(&to_dashboard).await;
    browser.wait_for_text("Sign in").await;

    // A page of the service's own origin loading an internal system's answer as a script,
    // which would run on this origin with a signed-in user's session: the request never
    // leaves the cloud (the audit below), whatever type the answer would have had.
    browser.goto(&format!("{}/sign-in", rig.cloud.http)).await;
    browser
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             const s = document.createElement('script');
             s.src = arguments[0];
             s.onload = s.onerror = () => done(null);
             document.head.appendChild(s);",
            vec![format!("{repo}/info/refs?script").into()],
        )
        .await
        .expect("the script element settles");

    // What reached the internal system: the user's own request, and this one; never the
    // other site's post or link, nor the script.
    assert_eq!(rig.get("/after").await.status(), 200);
    let records = rig.bridge.audit_records(2).await;
    let paths: Vec<&str> = records.iter().filter_map(|r| r["path"].as_str()).collect();
    assert_eq!(
        paths,
        [
            "/git/code/team/app.git/info/refs?service=git-upload-pack",
            "/apis/internal/after"
        ],
        "{records:?}"
    );
}
