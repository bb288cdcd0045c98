//! Integrations → Bridge: the org's bridges (from their tokens) with their live instances,
//! creating a token (shown once, with the commands and a YAML skeleton to start a bridge) and
//! revoking one, which closes its tunnels at once. The live instances come through
//! [`crate::live::LiveBridges`], which the application wires to the relay: this module never imports it.

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::admin;
use crate::live::outdated;
use crate::storage::Credential;

use super::DashboardState;
use super::confirm::Confirm;
use super::done::Done;
use super::form::Form;
use super::me::{Me, refuse_admin_form};
use super::render::{bridge_origin, message, own_ca_file, page, quoted, unavailable, when_micros};

struct InstanceRow {
    id: String,
    version: String,
    outdated: bool,
    connected: String,
    heartbeat: String,
    resources: String,
}

struct BridgeRow {
    name: String,
    /// "token made …", or why it is refused.
    note: String,
    /// Whether it has a live token to revoke.
    revocable: bool,
    status: &'static str,
    last_seen: String,
    instances: Vec<InstanceRow>,
}

#[derive(Template)]
#[template(path = "dashboard/bridges.html")]
struct BridgesPage<'a> {
    me: &'a Me,
    version: &'a str,
    bridges: Vec<BridgeRow>,
    /// Why the create form was refused, shown above it with the name typed.
    error: Option<String>,
    typed: &'a str,
}

#[derive(Template)]
#[template(path = "dashboard/bridge.yml")]
struct Skeleton<'a> {
    name: &'a str,
    base: &'a str,
    /// The cloud's own CA file (quoted for YAML), when the bridge must trust it.
    ca: Option<String>,
    /// `health_check_address`, with its comment: loopback beside a cloud on loopback (the
    /// container then shares the host's network), every interface otherwise.
    health_address: &'static str,
}

#[derive(Template)]
#[template(path = "dashboard/bridge_created.html")]
struct CreatedPage<'a> {
    me: &'a Me,
    name: &'a str,
    token: &'a str,
    container: String,
    native: String,
    yaml: String,
    /// The public ids of the bridge's tokens made before this one, which stay valid.
    earlier: Vec<String>,
}

fn when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// `GET /integrations/bridge`.
pub async fn list(State(state): State<DashboardState>, me: Me) -> Response {
    list_page(&state, &me, None, "").await
}

/// The page; with `error`, the create form refused (422) and filled with the name `typed`.
async fn list_page(
    state: &DashboardState,
    me: &Me,
    error: Option<String>,
    typed: &str,
) -> Response {
    let org_id = me.session.user.org_id;
    let tokens = match bridge_tokens(state, org_id).await {
        Ok(tokens) => tokens,
        Err(answer) => return answer,
    };
    let live = state.live.instances(org_id);
    // One row per bridge name: its tokens (the newest first seen) and its live instances.
    let mut bridges: Vec<BridgeRow> = Vec::new();
    for t in tokens {
        let name = t.name.unwrap_or_default();
        let last_used = t.last_used_at.unwrap_or(0);
        let status = match (last_used > 0, t.connected_at.is_some()) {
            (_, true) => "reconnecting",
            (true, false) => "enrolled",
            (false, false) => "never seen",
        };
        match bridges.iter_mut().find(|b| b.name == name) {
            Some(b) => {
                if last_used > 0 {
                    b.last_seen = when_micros(last_used);
                }
                if status == "reconnecting" || b.status == "never seen" {
                    b.status = status;
                }
            }
            None => bridges.push(BridgeRow {
                note: format!("token made {}", when_micros(t.created_at)),
                revocable: true,
                last_seen: if last_used > 0 {
                    when_micros(last_used)
                } else {
                    String::new()
                },
                status,
                instances: Vec::new(),
                name,
            }),
        }
    }
    // Bridges still trying with a revoked token (in the last day), and no live token.
    let day_ago = crate::storage::now_micros() - 86_400_000_000;
    let Ok(refused) = state.store.refused_bridges(org_id, day_ago).await else {
        return unavailable();
    };
    for (name, at) in refused {
        if bridges.iter().all(|b| b.name != name) {
            bridges.push(BridgeRow {
                note: "its token was revoked: stop it, or give it a new token".into(),
                revocable: false,
                status: "unauthorized",
                last_seen: when_micros(at),
                instances: Vec::new(),
                name,
            });
        }
    }
    for i in live {
        let row = InstanceRow {
            outdated: outdated(&i.version, &state.release),
            connected: when(i.connected_at),
            heartbeat: when(i.last_heartbeat),
            resources: if i.resources.is_empty() {
                "no resources".to_string()
            } else {
                i.resources
                    .iter()
                    .map(|(kind, name)| format!("{kind} {name}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            id: i.id,
            version: i.version,
        };
        if let Some(b) = bridges.iter_mut().find(|b| b.name == i.bridge) {
            b.status = "connected";
            b.last_seen.clear();
            b.instances.push(row);
        }
    }
    for b in bridges.iter_mut().filter(|b| b.status == "enrolled") {
        b.note.push_str(
            "; its token was accepted (by `bridge check`, or a bridge starting) but no tunnel has opened yet",
        );
    }
    let status = match error {
        Some(_) => StatusCode::UNPROCESSABLE_ENTITY,
        None => StatusCode::OK,
    };
    page(
        status,
        &BridgesPage {
            me,
            version: &state.release,
            bridges,
            error,
            typed,
        },
    )
}

/// The create and revoke forms' fields.
#[derive(Deserialize)]
pub struct BridgeForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    /// `yes` once the revocation's question was answered.
    #[serde(default)]
    confirm: String,
}

/// `POST /integrations/bridge/create`: a new token for a bridge, shown once.
pub async fn create(
    State(state): State<DashboardState>,
    me: Me,
    headers: HeaderMap,
    uri: Uri,
    Form(form): Form<BridgeForm>,
) -> Response {
    if let Some(answer) = refuse_admin_form(&me, &form.csrf) {
        return answer;
    }
    let name = form.name.trim();
    let earlier: Vec<String> = match bridge_tokens(&state, me.session.user.org_id).await {
        Ok(tokens) => tokens
            .into_iter()
            .filter(|t| t.name.as_deref() == Some(name))
            .map(|t| t.id)
            .collect(),
        Err(answer) => return answer,
    };
    let token = match admin::create_bridge_token(&state.store, &me.actor(), &me.org, name).await {
        Ok(t) => t,
        Err(admin::AdminError::Usage(why)) => {
            let why = format!("Bridge not created: {why}");
            return list_page(&state, &me, Some(why), &form.name).await;
        }
        Err(_) => return unavailable(),
    };
    tracing::info!(email = %me.email, org = %me.org, bridge = %name, "bridge token created in the dashboard");
    let base = bridge_origin(&state, &headers, &uri);
    // A cloud with its own CA: the bridge must trust it, from the file or the environment.
    let ca = own_ca_file(&state, &base);
    // A cloud on a loopback address is the host's, which a container reaches only on the
    // host's network (where the health port is the host's too).
    let loopback = url::Url::parse(&base)
        .ok()
        .and_then(|u| u.host().map(|h| h.to_owned()))
        .is_some_and(|host| match host {
            url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
            url::Host::Ipv4(ip) => ip.is_loopback(),
            url::Host::Ipv6(ip) => ip.is_loopback(),
        });
    let yaml = Skeleton {
        name,
        base: &base,
        ca: ca.map(|file| format!("'{}'", file.replace('\'', "''"))),
        health_address: if loopback {
            "127.0.0.1   # the cloud is on this host: health and metrics stay on it too"
        } else {
            "0.0.0.0   # 127.0.0.1 on a shared host"
        },
    }
    .render()
    .unwrap_or_default();
    let (container_ca, native_ca) = match ca {
        Some(file) => (
            format!(
                "  -e SERVICE_TLS_CA_FILE=/etc/bridge/ca.pem -v {}:/etc/bridge/ca.pem:ro \\\n",
                quoted(file)
            ),
            format!("SERVICE_TLS_CA_FILE={} ", quoted(file)),
        ),
        None => (String::new(), String::new()),
    };
    let network = if loopback {
        "--network host"
    } else {
        "-p 127.0.0.1:8080:8080"
    };
    // The token reaches podman through its environment (`-e NAME` takes the value from
    // there): given as `-e NAME=VALUE`, it would be in podman's argv, which `ps` shows to
    // every user of the host.
    let container = format!(
        "SERVICE_BRIDGE_TOKEN='{token}' podman run -d --name bridge-{name} --read-only \\\n  -e SERVICE_BRIDGE_TOKEN \\\n  -e SERVICE_BRIDGE_CONFIG=/etc/bridge/bridge.yaml -v \"$PWD/bridge.yaml:/etc/bridge/bridge.yaml:ro\" \\\n{container_ca}  {network} localhost/signals-bridge:{release}",
        release = state.release
    );
    let native = format!(
        "SERVICE_BRIDGE_TOKEN='{token}' bridge run --config bridge.yaml\n# or with no file at all (health and metrics then listen on every interface, port 8080):\nSERVICE_BRIDGE_TOKEN='{token}' SERVICE_BRIDGE_NAME={name} SERVICE_API_URL={base} {native_ca}bridge run"
    );
    page(
        StatusCode::OK,
        &CreatedPage {
            me: &me,
            name,
            token: &token,
            container,
            native,
            yaml,
            earlier,
        },
    )
}

/// `POST /integrations/bridge/revoke`: revokes every token of a bridge and closes its tunnels.
pub async fn revoke(
    State(state): State<DashboardState>,
    me: Me,
    Form(form): Form<BridgeForm>,
) -> Response {
    if let Some(answer) = refuse_admin_form(&me, &form.csrf) {
        return answer;
    }
    // Nothing to ask about a bridge with no live token (revoked already, a form sent again).
    if form.confirm != "yes" {
        let tokens = match bridge_tokens(&state, me.session.user.org_id).await {
            Ok(tokens) => tokens,
            Err(answer) => return answer,
        };
        if !tokens
            .iter()
            .any(|t| t.name.as_deref() == Some(form.name.as_str()))
        {
            return no_such_bridge(&format!(
                "bridge {:?} of org {:?} has no live token to revoke",
                form.name, me.org
            ));
        }
    }
    let question = Confirm {
        heading: &format!("Revoke bridge {}?", form.name),
        text: "Its tokens stop working and its tunnels close now: every instance of it stops forwarding, and Git, registry, database and API requests through it fail until it runs with a new token. This cannot be undone.",
        action: "/integrations/bridge/revoke",
        fields: &[("name", &form.name)],
        button: "Revoke the bridge's tokens",
        back: "/integrations/bridge",
    };
    if let Some(asked) = question.unless_confirmed(&me, &form.confirm) {
        return asked;
    }
    match admin::revoke_bridge_tokens(&state.store, &me.actor(), &me.org, &form.name, None).await {
        Ok(_) => {
            state.live.close(me.session.user.org_id, &form.name);
            tracing::info!(email = %me.email, org = %me.org, bridge = %form.name, "bridge token revoked in the dashboard; its tunnels closed");
            Redirect::to(&Done::BridgeRevoked.after("/integrations/bridge", &form.name, &me.csrf))
                .into_response()
        }
        Err(admin::AdminError::Usage(why)) => no_such_bridge(&why),
        Err(_) => unavailable(),
    }
}

/// The org's live bridge tokens (the bridges the page lists), or the 503 page.
async fn bridge_tokens(
    state: &DashboardState,
    org_id: i64,
) -> Result<Vec<crate::storage::KeyInfo>, Response> {
    state
        .store
        .credentials(org_id, Credential::BridgeToken)
        .await
        .map_err(|_| unavailable())
}

/// 404: the bridge has no live token to revoke.
fn no_such_bridge(why: &str) -> Response {
    message(
        StatusCode::NOT_FOUND,
        "No such bridge",
        why,
        "/integrations/bridge",
        "Back to Integrations: Bridge",
    )
}
