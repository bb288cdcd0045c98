//! `GET /v1/openapi.json` against the routes the server really has: every operation it lists
//! is routed (not the router's 404/405 fallback), every public route is listed, and the
//! answers have the documented shapes. Real `cloud`.

use reqwest::{Method, StatusCode};
use serde_json::Value;
use testkit::{Backend, Cloud, seed_event};

/// The public operations, as docs/api.md and docs/bridge.md list them. The bridges' own
/// endpoints (`/v1/bridge/enroll`, `/v1/bridge/connect`) are the tunnel's, not the API's.
const PUBLIC: &[(&str, &str)] = &[
    ("post", "/v1/signals/{signalKey}"),
    ("get", "/v1/events"),
    ("get", "/v1/events/{id}"),
    ("get", "/v1/bridges"),
    ("get", "/v1/bridges/{bridge}/apis/{name}/{path}"),
    ("post", "/v1/bridges/{bridge}/apis/{name}/{path}"),
    ("put", "/v1/bridges/{bridge}/apis/{name}/{path}"),
    ("delete", "/v1/bridges/{bridge}/apis/{name}/{path}"),
    ("patch", "/v1/bridges/{bridge}/apis/{name}/{path}"),
    ("get", "/v1/bridges/{bridge}/git/{name}/{path}"),
    ("post", "/v1/bridges/{bridge}/git/{name}/{path}"),
    ("get", "/v2/"),
    ("get", "/v2/{bridge}/{registry}/{path}"),
    ("head", "/v2/{bridge}/{registry}/{path}"),
    ("get", "/v1/bridges/{bridge}/databases/{name}"),
    ("get", "/livez"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/v1/openapi.json"),
    ("get", "/v1/alerts/{id}/suspects"),
    ("post", "/v1/alerts/{id}/cause"),
    ("delete", "/v1/alerts/{id}/cause"),
    ("get", "/v1/services/{service}/dependencies"),
    ("put", "/v1/services/{service}/dependencies"),
    ("get", "/v1/dora"),
    ("get", "/v1/repository-sources"),
    ("put", "/v1/repository-sources"),
    ("delete", "/v1/repository-sources"),
    ("get", "/v1/deployments/{id}/commits"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_and_the_routes_agree() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let doc: Value = cloud
        .client()
        .get(format!("{}/v1/openapi.json", cloud.http))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();

    let mut listed = Vec::new();
    // Statuses the server answered that the operation does not list.
    let mut unlisted = Vec::new();
    for (path, item) in paths {
        for (method, operation) in item.as_object().unwrap() {
            listed.push((method.clone(), path.clone()));
            if method == "head" {
                continue; // no body to tell the router's 404 from the handler's
            }
            let concrete = path
                .replace("{signalKey}", &t.signal_key)
                .replace("{id}", "01a2184f-ad98-7000-8000-000000000001")
                .replace("{bridge}", "dc1")
                .replace("{name}", "x")
                .replace("{path}", "a/b");
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let res = cloud
                .client()
                .request(method.clone(), format!("{}{concrete}", cloud.http))
                .bearer_auth(&t.api_key)
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap();
            let status = res.status();
            let body = res.text().await.unwrap_or_default();
            assert!(
                !body.contains("no route ") && !body.contains("the Allow header lists"),
                "{method} {path} is documented but not routed: {status} {body}"
            );
            // A client reads what a status means from the document: the one it got with a key
            // and `{}`, and the one without a key, must both be there.
            let keyless = cloud
                .client()
                .request(method.clone(), format!("{}{concrete}", cloud.http))
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap()
                .status();
            for status in [status, keyless] {
                if operation["responses"].get(status.as_str()).is_none() {
                    unlisted.push(format!("{method} {path}: {status}"));
                }
            }
        }
    }
    // Every operation that reads a body lists the statuses of its reading (docs/api.md).
    for (path, item) in paths {
        for (method, operation) in item.as_object().unwrap() {
            if operation.get("requestBody").is_none() {
                continue;
            }
            for status in ["408", "413", "415"] {
                if operation["responses"].get(status).is_none() {
                    unlisted.push(format!("{method} {path}: {status} (reading the body)"));
                }
            }
        }
    }
    unlisted.dedup();
    assert!(
        unlisted.is_empty(),
        "answered but not in the document:\n{}",
        unlisted.join("\n")
    );
    for (method, path) in PUBLIC {
        assert!(
            listed.iter().any(|(m, p)| m == method && p == path),
            "{method} {path} is routed but missing from the document"
        );
    }

    // The documented shapes of the 202 are the ones the server sends: one of the two, for
    // one event and for an array.
    let answer_schema = &paths["/v1/signals/{signalKey}"]["post"]["responses"]["202"]["content"]["application/json"]
        ["schema"]["$ref"];
    assert_eq!(
        answer_schema, "#/components/schemas/AcceptedAnswer",
        "{doc}"
    );
    let one_of: Vec<&str> = doc["components"]["schemas"]["AcceptedAnswer"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["$ref"].as_str().unwrap())
        .collect();
    assert_eq!(
        one_of,
        [
            "#/components/schemas/Accepted",
            "#/components/schemas/AcceptedBatch"
        ]
    );
    for (body, name) in [
        (seed_event(), "Accepted"),
        (
            Value::Array(vec![seed_event(), seed_event()]),
            "AcceptedBatch",
        ),
    ] {
        let res = cloud
            .client()
            .post(format!("{}/v1/signals/{}", cloud.http, t.signal_key))
            .bearer_auth(&t.api_key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::ACCEPTED);
        let answer: Value = res.json().await.unwrap();
        let mut sent: Vec<&String> = answer.as_object().unwrap().keys().collect();
        let schema = &doc["components"]["schemas"][name]["properties"];
        let mut documented: Vec<&String> = schema.as_object().unwrap().keys().collect();
        sent.sort();
        documented.sort();
        assert_eq!(sent, documented, "{name}");
    }
    // The bounds of `limit`, as the server holds them.
    let limit = paths["/v1/events"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "limit")
        .unwrap();
    assert_eq!(limit["schema"]["minimum"], 1, "{limit}");
    assert_eq!(limit["schema"]["maximum"], 500, "{limit}");
    // And the DORA answer's fields.
    let dora: Value = cloud
        .client()
        .get(format!("{}/v1/dora?service=api", cloud.http))
        .bearer_auth(&t.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut sent: Vec<&String> = dora.as_object().unwrap().keys().collect();
    let mut documented: Vec<&String> = doc["components"]["schemas"]["Dora"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    sent.sort();
    documented.sort();
    assert_eq!(sent, documented, "{dora}");
    // And so is a problem's.
    let problem: Value = cloud
        .client()
        .get(format!("{}/v1/events", cloud.http))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let problem_schema = doc["components"]["schemas"]["Problem"]["properties"]
        .as_object()
        .unwrap();
    for key in problem.as_object().unwrap().keys() {
        assert!(problem_schema.contains_key(key), "{key} undocumented");
    }
}
