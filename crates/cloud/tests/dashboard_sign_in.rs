//! The dashboard's sign-in, through the real binary as a browser would use it (forms, cookies,
//! redirects): a user made by `cloud user create` sets a password from the one-time link and
//! is signed in; sessions are cookies with the right attributes; forms without their CSRF token
//! are refused; failures are throttled; sign-out ends one session or all of them.

use reqwest::header::LOCATION;
use testkit::dashboard::{
    PASSWORD, client, hidden, pair, set_cookie, set_password, sign_in, sign_in_from, user,
};
use testkit::{Backend, Cloud, cloud_bin, on_both_backends};

on_both_backends!(a_link_sets_the_password_and_signs_in);

async fn a_link_sets_the_password_and_signs_in(backend: Backend) {
    let cloud = Cloud::start(backend);
    cloud.admin(&["org", "create", "acme"]);
    let link = user(&cloud, "acme", "Ada@Example.com", "admin");
    assert!(
        link.starts_with(&format!("{}/set-password?token=", cloud.https)),
        "{link}"
    );
    let client = client(&cloud);
    // A link cut short when copied says so, rather than "used or expired".
    let cut = client.get(&link[..link.len() - 10]).send().await.unwrap();
    assert_eq!(cut.status(), 400);
    let said = cut.text().await.unwrap();
    assert!(
        said.contains("is incomplete: its token has 33 of its 43 characters"),
        "{said}"
    );
    // A full stop copied after it: too long, not incomplete.
    let long = client.get(format!("{link}.")).send().await.unwrap();
    assert_eq!(long.status(), 400);
    let said = long.text().await.unwrap();
    assert!(
        said.contains("is too long: its token has 44 characters, not 43"),
        "{said}"
    );
    // A character no token has in place of its last: damaged.
    let damaged = client
        .get(format!("{}%7E", &link[..link.len() - 1]))
        .send()
        .await
        .unwrap();
    assert_eq!(damaged.status(), 400);
    let said = damaged.text().await.unwrap();
    assert!(said.contains("is damaged"), "{said}");
    // So does the form posted with a cut token (a hand-made post).
    let form = client.get(&link).send().await.unwrap();
    let csrf_cookie =
        testkit::dashboard::pair(&set_cookie(form.headers(), "signals_csrf").unwrap());
    let page = form.text().await.unwrap();
    let token = testkit::dashboard::hidden(&page, "token");
    let csrf = testkit::dashboard::hidden(&page, "csrf");
    let cut = client
        .post(link.split('?').next().unwrap())
        .header("cookie", &csrf_cookie)
        .form(&[
            ("csrf", csrf.as_str()),
            ("token", &token[..33]),
            ("password", PASSWORD),
            ("confirm", PASSWORD),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(cut.status(), 400);
    let said = cut.text().await.unwrap();
    assert!(said.contains("33 of its 43 characters"), "{said}");

    let (res, session) = set_password(&client, &link).await;
    assert_eq!(res.status(), 303);
    assert_eq!(res.headers()[LOCATION], "/");
    let cookie = set_cookie(res.headers(), "signals_session").unwrap();
    for attribute in ["HttpOnly", "SameSite=Lax", "Secure", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }

    let home = client
        .get(format!("{}/", cloud.https))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(home.status(), 200);
    let csp = home.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    let page = home.text().await.unwrap();
    assert!(page.contains("acme") && page.contains("ada@example.com") && page.contains("admin"));

    // The link works once.
    assert_eq!(client.get(&link).send().await.unwrap().status(), 410);

    // Signed out, the home page sends to sign-in; the password signs in again.
    let anonymous = client
        .get(format!("{}/", cloud.https))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 303);
    assert_eq!(anonymous.headers()[LOCATION], "/sign-in");
    let again = sign_in(&client, &cloud.https, "ada@example.com", PASSWORD).await;
    assert_eq!(again.status(), 303);
    assert!(set_cookie(again.headers(), "signals_session").is_some());

    // No password in the log, ever.
    assert!(!cloud.log_text().contains(PASSWORD));
}

/// An admin resets a password when a link may have leaked: the older links stop working.
#[tokio::test]
async fn a_new_link_replaces_the_older_ones() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.admin(&["org", "create", "acme"]);
    let first = user(&cloud, "acme", "ada@example.com", "admin");
    let reset = |cloud: &Cloud| {
        cloud.admin(&[
            "user",
            "reset-password",
            "--email",
            "ada@example.com",
            "--public-url",
            &cloud.https,
        ])
    };
    let second = reset(&cloud);
    let client = client(&cloud);
    let gone = client.get(&first).send().await.unwrap();
    assert_eq!(gone.status(), 410);
    assert!(
        gone.text()
            .await
            .unwrap()
            .contains("replaced by a newer one")
    );

    let third = reset(&cloud);
    let (res, _) = set_password(&client, &third).await;
    assert_eq!(res.status(), 303);
    assert_eq!(client.get(&second).send().await.unwrap().status(), 410);
}

#[tokio::test]
async fn forms_without_their_csrf_token_are_refused() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.admin(&["org", "create", "acme"]);
    let link = user(&cloud, "acme", "ada@example.com", "member");
    let client = client(&cloud);
    let (_, session) = set_password(&client, &link).await;

    // Sign-out with the session cookie but no token (as a cross-site form would send it).
    let res = client
        .post(format!("{}/sign-out", cloud.https))
        .header("cookie", &session)
        .form(&[("everywhere", "1")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    // The session still works.
    let home = client
        .get(format!("{}/", cloud.https))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(home.status(), 200);

    // Sign-in without the CSRF cookie.
    let res = client
        .post(format!("{}/sign-in", cloud.https))
        .form(&[
            ("csrf", "x"),
            ("email", "ada@example.com"),
            ("password", PASSWORD),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);

    // A form that does not read as the page's is a page saying so, not the framework's text.
    let res = client
        .post(format!("{}/sign-in", cloud.https))
        .form(&[("username", "ada@example.com"), ("password", PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(res.headers()["content-type"], "text/html; charset=utf-8");
    let page = res.text().await.unwrap();
    assert!(page.contains("missing field `email`"), "{page}");
    let res = client
        .post(format!("{}/sign-in", cloud.https))
        .json(&serde_json::json!({"email": "ada@example.com", "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 415);
    assert!(res.text().await.unwrap().contains("was not sent as a form"));
}

#[tokio::test]
async fn sign_out_everywhere_ends_every_session() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.admin(&["org", "create", "acme"]);
    let link = user(&cloud, "acme", "ada@example.com", "member");
    let client = client(&cloud);
    let (_, first) = set_password(&client, &link).await;
    let second_res = sign_in(&client, &cloud.https, "ada@example.com", PASSWORD).await;
    let second = pair(&set_cookie(second_res.headers(), "signals_session").unwrap());

    let home = client
        .get(format!("{}/", cloud.https))
        .header("cookie", &first)
        .send()
        .await
        .unwrap();
    let csrf = hidden(&home.text().await.unwrap(), "csrf");
    let res = client
        .post(format!("{}/sign-out", cloud.https))
        .header("cookie", &first)
        .form(&[("csrf", csrf.as_str()), ("everywhere", "1")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 303);
    // The browser drops the pages it kept for Back.
    assert_eq!(
        res.headers()["clear-site-data"],
        "\"cache\"",
        "{:?}",
        res.headers()
    );
    for session in [&first, &second] {
        let res = client
            .get(format!("{}/", cloud.https))
            .header("cookie", session)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 303, "a session survived sign-out everywhere");
    }
}

#[tokio::test]
async fn failed_sign_ins_are_throttled_and_logged_without_the_password() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.admin(&["org", "create", "acme"]);
    let link = user(&cloud, "acme", "ada@example.com", "member");
    let client = client(&cloud);
    set_password(&client, &link).await;

    for _ in 0..5 {
        let res = sign_in(&client, &cloud.https, "ada@example.com", "wrong guess 123").await;
        assert_eq!(res.status(), 401);
        let page = res.text().await.unwrap();
        // Said, titled and focused for a screen reader's user, on the field to type again.
        assert!(
            page.contains("Wrong email or password")
                && page.contains("<title>Error: Sign in")
                && page
                    .contains("aria-invalid=\"true\" aria-describedby=\"sign-in-error\" autofocus"),
            "{page}"
        );
    }
    // Even the right password waits now.
    let res = sign_in(&client, &cloud.https, "ada@example.com", PASSWORD).await;
    assert_eq!(res.status(), 429);
    assert!(res.headers().contains_key("retry-after"));
    // The log reaches the test through a pipe, a moment after the answer.
    cloud.wait_log_line("sign-in failed: wrong email or password");
    let log = cloud.log_text();
    assert!(!log.contains("wrong guess 123") && !log.contains(PASSWORD));
    // The address is the client's, as text.
    assert!(log.contains("\"address\":\"127.0.0.1\""), "{log}");
}

/// A stranger's failed guesses from one address block that address, not the account: its
/// owner, elsewhere, signs in.
#[tokio::test]
async fn a_strangers_guesses_do_not_lock_the_owner_out() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.admin(&["org", "create", "acme"]);
    let link = user(&cloud, "acme", "ada@example.com", "member");
    let owner = client(&cloud);
    set_password(&owner, &link).await;
    let stranger = testkit::dashboard::client_from(&cloud, Some("127.0.0.2".parse().unwrap()));
    for _ in 0..5 {
        let res = sign_in(
            &stranger,
            &cloud.https,
            "ada@example.com",
            "wrong guess 123",
        )
        .await;
        assert_eq!(res.status(), 401);
    }
    let res = sign_in(
        &stranger,
        &cloud.https,
        "ada@example.com",
        "wrong guess 124",
    )
    .await;
    assert_eq!(res.status(), 429, "the stranger's address is not blocked");
    let res = sign_in(&owner, &cloud.https, "ada@example.com", PASSWORD).await;
    assert_eq!(res.status(), 303, "the owner was locked out");
}

/// What was typed as an email is logged only when it is an account's: a password typed into
/// the email field stays out of the log.
#[tokio::test]
async fn an_email_that_is_no_account_is_not_logged() {
    let cloud = Cloud::start(Backend::Sqlite);
    let client = client(&cloud);
    let res = sign_in(&client, &cloud.https, "hunter2-typed-here", PASSWORD).await;
    assert_eq!(res.status(), 401);
    // The log reaches the test through a pipe, a moment after the answer.
    cloud.wait_log_line("sign-in failed: no account has the email typed");
    let log = cloud.log_text();
    assert!(!log.contains("hunter2-typed-here"), "{log}");
}

/// Guesses sent all at once get no more tries than guesses sent one by one: an attempt counts
/// from the moment it is admitted, not from when its password check fails.
#[tokio::test]
async fn guesses_sent_at_once_are_throttled_like_guesses_in_a_row() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.admin(&["org", "create", "acme"]);
    let link = user(&cloud, "acme", "ada@example.com", "member");
    let client = client(&cloud);
    set_password(&client, &link).await;

    let guesses = (0..20).map(|i| {
        let (client, base) = (client.clone(), cloud.https.clone());
        async move {
            sign_in(
                &client,
                &base,
                "ada@example.com",
                &format!("wrong guess {i:03}"),
            )
            .await
            .status()
            .as_u16()
        }
    });
    let statuses = futures_util::future::join_all(guesses).await;
    let checked = statuses.iter().filter(|s| **s == 401).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert!(checked <= 5, "{checked} guesses checked: {statuses:?}");
    assert_eq!(checked + refused, 20, "{statuses:?}");
}

#[tokio::test]
async fn the_plain_listener_sets_cookies_without_secure() {
    let cloud = Cloud::start(Backend::Sqlite);
    let client = client(&cloud);
    let form = client
        .get(format!("{}/sign-in", cloud.http))
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 200);
    let cookie = set_cookie(form.headers(), "signals_csrf").unwrap();
    assert!(
        cookie.contains("HttpOnly") && !cookie.contains("Secure"),
        "{cookie}"
    );
    let secure = client
        .get(format!("{}/sign-in", cloud.https))
        .send()
        .await
        .unwrap();
    assert!(
        set_cookie(secure.headers(), "signals_csrf")
            .unwrap()
            .contains("; Secure")
    );
}

#[test]
fn user_commands_say_what_is_wrong() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.admin(&["org", "create", "acme"]);
    user(&cloud, "acme", "ada@example.com", "admin");
    let cases: [(&[&str], &str); 5] = [
        (
            &[
                "user",
                "create",
                "--org",
                "acme",
                "--email",
                "ADA@example.com",
                "--role",
                "member",
            ],
            "exists already",
        ),
        (
            &[
                "user",
                "create",
                "--org",
                "acme",
                "--email",
                "not-an-address",
                "--role",
                "member",
            ],
            "is not an email address",
        ),
        (
            &[
                "user",
                "create",
                "--org",
                "nope",
                "--email",
                "bob@example.com",
                "--role",
                "member",
            ],
            "no org \"nope\"",
        ),
        (
            &[
                "user",
                "create",
                "--org",
                "",
                "--email",
                "bob@example.com",
                "--role",
                "member",
            ],
            "--org is empty: give an org's slug",
        ),
        (
            &["user", "reset-password", "--email", "bob@example.com"],
            "no user \"bob@example.com\"",
        ),
    ];
    for (args, expected) in cases {
        let out = cloud.admin_output(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    // A link base holding a password is refused without repeating it, parsed or not (a `#`
    // in the password makes the rest read as a fragment).
    for (base, said) in [
        (
            "https://u:hunter2@signals.example.com",
            "holds a user name or password",
        ),
        (
            "https://u:hunter2#x@signals.example.com",
            "it may hold a password",
        ),
    ] {
        let out = cloud.admin_output(&[
            "user",
            "reset-password",
            "--email",
            "ada@example.com",
            "--public-url",
            base,
        ]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(said) && !stderr.contains("hunter2"),
            "{stderr}"
        );
    }
    // The default link base is https:// and the TLS listen address.
    let link = cloud.admin(&["user", "reset-password", "--email", "ada@example.com"]);
    assert!(
        link.starts_with("https://127.0.0.1:8443/set-password?token="),
        "{link}"
    );
    // One where nothing answers is warned about (a `serve` elsewhere would get a dead link);
    // the serve's own address is not.
    let serving = format!("127.0.0.1:{}", cloud.tls_port());
    for (listen, warned) in [("127.0.0.1:1", true), (serving.as_str(), false)] {
        let out = cloud.admin_output(&[
            "user",
            "reset-password",
            "--email",
            "ada@example.com",
            "--listen",
            listen,
        ]);
        assert!(out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.contains(&format!("warning: nothing answers at {listen}")),
            warned,
            "{listen}: {stderr}"
        );
    }
    // A command that fails makes no link: no warning about one, only the error.
    let out = cloud.admin_output(&[
        "user",
        "reset-password",
        "--email",
        "nobody@example.com",
        "--listen",
        "127.0.0.1:1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("warning") && stderr.contains("nobody@example.com"),
        "{stderr}"
    );
    // Like every admin command, it creates no database where there is none.
    let empty = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(cloud_bin())
        .args([
            "user",
            "reset-password",
            "--email",
            "ada@example.com",
            "--data-dir",
        ])
        .arg(empty.path().join("data"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!empty.path().join("data").exists());
}

/// A page asked for without a session is where signing in leads back to; only a path of this
/// site is ever followed, whatever the link or the form says.
#[tokio::test]
async fn signing_in_returns_to_the_page_asked_for() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.admin(&["org", "create", "acme"]);
    let link = user(&cloud, "acme", "ada@example.com", "member");
    let client = client(&cloud);
    set_password(&client, &link).await;
    let asked = client
        .get(format!("{}/events?type=alert", cloud.https))
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), 303);
    let to = asked.headers()[LOCATION].to_str().unwrap().to_string();
    assert_eq!(to, "/sign-in?next=%2Fevents%3Ftype%3Dalert");
    let lands = |start: String, posted: Option<&'static str>| {
        let (client, page) = (&client, format!("{}{start}", cloud.https));
        async move {
            let res = sign_in_from(client, &page, "ada@example.com", PASSWORD, posted).await;
            assert_eq!(res.status(), 303, "{page}");
            res.headers()[LOCATION].to_str().unwrap().to_string()
        }
    };
    assert_eq!(lands(to, None).await, "/events?type=alert");
    for other_site in [
        "/sign-in?next=%2F%2Fevil.example",
        "/sign-in?next=https%3A%2F%2Fevil.example",
        "/sign-in?next=%2F%5Cevil.example",
    ] {
        assert_eq!(lands(other_site.into(), None).await, "/", "{other_site}");
    }
    assert_eq!(
        lands("/sign-in".into(), Some("//evil.example/x")).await,
        "/"
    );

    // A form that arrives without a session (it expired while the page was open) is not
    // saved; sign-in says so, and leads back to the form's page.
    let res = client
        .post(format!("{}/integrations/repositories", cloud.https))
        .form(&[("csrf", "x"), ("repository", "acme/api")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 303);
    let to = res.headers()[LOCATION].to_str().unwrap().to_string();
    assert_eq!(to, "/sign-in?next=%2Fintegrations%2Frepositories&unsaved=1");
    let page = client
        .get(format!("{}{to}", cloud.https))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("Your session ended before your form arrived")
            && page.contains("nothing was saved"),
        "{page}"
    );
    assert_eq!(lands(to, None).await, "/integrations/repositories");
}
