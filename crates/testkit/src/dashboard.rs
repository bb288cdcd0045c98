//! The dashboard as a browser uses it, for tests: forms, cookies (handled by hand, so tests
//! see every `Set-Cookie`) and redirects (shown, not followed).

use reqwest::header::{HeaderMap, SET_COOKIE};
use reqwest::{Client, Response, redirect};

use crate::Cloud;

/// The password every test user sets.
pub const PASSWORD: &str = "a long enough passphrase";

/// A client for `cloud` that shows redirects instead of following them (cookies are handled by hand).
pub fn client(cloud: &Cloud) -> Client {
    client_from(cloud, None)
}

/// [`client`], connecting from the loopback address `local` (such as 127.0.0.2): another
/// client address, as the server sees it.
pub fn client_from(cloud: &Cloud, local: Option<std::net::IpAddr>) -> Client {
    crate::install_crypto();
    let ca = std::fs::read(cloud.ca_path()).unwrap();
    Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .redirect(redirect::Policy::none())
        .local_address(local)
        .build()
        .unwrap()
}

/// The `Set-Cookie` header that sets `name`.
pub fn set_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(str::to_string)
}

/// `name=value` of a `Set-Cookie` header, to send back.
pub fn pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().to_string()
}

/// The value of the hidden `name` field in a page.
pub fn hidden(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = page
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in {page}"))
        + marker.len();
    page[start..].split('"').next().unwrap().to_string()
}

/// The secret a "created" page shows once (in its `<pre class="secret">`).
pub fn shown_secret(page: &str) -> String {
    let block = page
        .split("<pre class=\"secret\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no secret shown in {page}"));
    let code = block.split("<code").nth(1).unwrap();
    code[code.find('>').unwrap() + 1..]
        .split('<')
        .next()
        .unwrap()
        .to_string()
}

/// Creates a user of `org` and returns the link printed for them.
pub fn user(cloud: &Cloud, org: &str, email: &str, role: &str) -> String {
    cloud.admin(&[
        "user",
        "create",
        "--org",
        org,
        "--email",
        email,
        "--role",
        role,
        "--public-url",
        &cloud.https,
    ])
}

/// Opens a set-password link and sets the password: the session cookie (`name=value`).
pub async fn set_password(client: &Client, link: &str) -> (Response, String) {
    let form = client.get(link).send().await.unwrap();
    assert_eq!(form.status(), 200);
    let csrf_cookie = pair(&set_cookie(form.headers(), "signals_csrf").unwrap());
    let page = form.text().await.unwrap();
    let token = hidden(&page, "token");
    let csrf = hidden(&page, "csrf");
    let res = client
        .post(link.split('?').next().unwrap())
        .header("cookie", &csrf_cookie)
        .form(&[
            ("csrf", csrf.as_str()),
            ("token", token.as_str()),
            ("password", PASSWORD),
            ("confirm", PASSWORD),
        ])
        .send()
        .await
        .unwrap();
    let session = set_cookie(res.headers(), "signals_session").map(|c| pair(&c));
    (res, session.unwrap_or_default())
}

/// Signs in through the form from `base`: the answer.
pub async fn sign_in(client: &Client, base: &str, email: &str, password: &str) -> Response {
    sign_in_from(client, &format!("{base}/sign-in"), email, password, None).await
}

/// Signs in through the form at `page` (a sign-in address, `?next=` included): the answer. The
/// form's own `next` goes with it, or `next` when given (a form edited by hand).
pub async fn sign_in_from(
    client: &Client,
    page: &str,
    email: &str,
    password: &str,
    next: Option<&str>,
) -> Response {
    let form = client.get(page).send().await.unwrap();
    let csrf_cookie = pair(&set_cookie(form.headers(), "signals_csrf").unwrap());
    let html = form.text().await.unwrap();
    let csrf = hidden(&html, "csrf");
    let next = match next {
        Some(next) => next.to_string(),
        None if html.contains("name=\"next\"") => hidden(&html, "next"),
        None => String::new(),
    };
    let base = page.split("/sign-in").next().unwrap_or(page);
    let mut fields = vec![
        ("csrf", csrf.as_str()),
        ("email", email),
        ("password", password),
    ];
    if !next.is_empty() {
        fields.push(("next", next.as_str()));
    }
    client
        .post(format!("{base}/sign-in"))
        .header("cookie", csrf_cookie)
        .form(&fields)
        .send()
        .await
        .unwrap()
}

/// A signed-in user's session cookie (`name=value`): the user is created by the CLI and sets
/// their password from the link.
pub async fn session(cloud: &Cloud, client: &Client, org: &str, email: &str, role: &str) -> String {
    set_password(client, &user(cloud, org, email, role)).await.1
}

/// GETs a page with a session: (status, body).
pub async fn get(client: &Client, url: String, session: &str) -> (u16, String) {
    let res = client
        .get(url)
        .header("cookie", session)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

/// Posts the form at `action` (on the TLS listener) with `fields` and the session's CSRF
/// token, read from the home page: (status, body).
pub async fn post(
    client: &Client,
    cloud: &Cloud,
    session: &str,
    action: &str,
    fields: &[(&str, &str)],
) -> (u16, String) {
    let res = send_form(client, cloud, session, action, fields).await;
    (res.status().as_u16(), res.text().await.unwrap())
}

/// [`post`], for a form whose answer is a redirect: (status, where it leads; empty without a
/// `Location`).
pub async fn post_to(
    client: &Client,
    cloud: &Cloud,
    session: &str,
    action: &str,
    fields: &[(&str, &str)],
) -> (u16, String) {
    let res = send_form(client, cloud, session, action, fields).await;
    let location = res
        .headers()
        .get("location")
        .map(|l| l.to_str().unwrap().to_string())
        .unwrap_or_default();
    (res.status().as_u16(), location)
}

async fn send_form(
    client: &Client,
    cloud: &Cloud,
    session: &str,
    action: &str,
    fields: &[(&str, &str)],
) -> Response {
    let (_, page) = get(client, format!("{}/", cloud.https), session).await;
    let csrf = hidden(&page, "csrf");
    let mut form = vec![("csrf", csrf.as_str())];
    form.extend_from_slice(fields);
    client
        .post(format!("{}{action}", cloud.https))
        .header("cookie", session)
        .form(&form)
        .send()
        .await
        .unwrap()
}
