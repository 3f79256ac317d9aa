//! The REST/JSON API: HTTP/1.1 on the control unix socket (local: the socket's file
//! permissions decide who may connect) and optionally on TCP, where every request must
//! carry `Authorization: Bearer TOKEN`. `ferrouter show|config|trace|capture` are clients
//! of it; `GET /openapi.json` describes every endpoint; `GET /metrics` is for Prometheus.
//!
//! Every body is one of [`crate::model`]'s types, so the document gives each answer its
//! schema. Every error is JSON, `{"error": "what was wrong"}` ([`model::ErrorBody`]), with
//! a 4xx status for the client's mistakes (400 malformed, 401 no or wrong token, 404
//! unknown path or object, 405 wrong method, 408 a body that did not arrive in time, 413
//! too large, 422 a valid request the router refuses) and 5xx for its own.
//!
//! Connections (caps, timeouts, the unix socket's own budget) are [`crate::listener`]'s; each
//! request then comes to [`respond`], which checks the token before it reads the body.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use utoipa::OpenApi;

use crate::api;
use crate::model;
use crate::state::Shared;

/// Largest request body (a config file is the largest thing anyone sends).
pub const MAX_BODY: usize = 1 << 20;

/// A JSON error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    /// An error with `status`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }
    /// 400: the request itself is malformed.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    /// 422: well-formed, but the router refuses it (an invalid config, say).
    pub fn unprocessable(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }
    /// 500: the router failed.
    pub fn internal(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = model::ErrorBody {
            error: self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        let status = match r.status() {
            StatusCode::PAYLOAD_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, format!("malformed request body: {}", r.body_text()))
    }
}

/// A JSON request body of type `T`, which must be an object: serde's derive would also
/// take a struct written as an array (`[null]`), which the schema does not allow.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> axum::extract::FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let Json(v) = Json::<serde_json::Value>::from_request(req, state).await?;
        if !v.is_object() {
            return Err(ApiError::bad_request(
                "malformed request body: expected a JSON object",
            ));
        }
        serde_json::from_value(v)
            .map(Body)
            .map_err(|e| ApiError::bad_request(format!("malformed request body: {e}")))
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::bad_request(format!("malformed query string: {}", r.body_text()))
    }
}

/// Handler result: a typed JSON body ([`crate::model`]) or an error.
pub type ApiResult<T> = std::result::Result<Json<T>, ApiError>;

/// Run `f` on a blocking thread (it takes the control state's lock, which a resync of a
/// large table holds for a while): the API's async threads never block.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::result::Result<T, ApiError> + Send + 'static,
) -> std::result::Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("request handler failed: {e}")))?
}

/// A `show` item's answer, or its error with the status the error's kind calls for.
fn shown<T>(r: std::result::Result<T, api::ShowError>) -> ApiResult<T> {
    r.map(Json).map_err(|e| match e {
        api::ShowError::BadRequest(m) => ApiError::bad_request(m),
        api::ShowError::Unavailable(m) => ApiError::internal(m),
    })
}

/// The ports: facts, addresses and counters; then the VLAN sub-interfaces.
#[utoipa::path(get, path = "/v1/interfaces", tag = "show",
    responses((status = 200, description = "One object per port, then one per VLAN sub-interface (with parent and vlan, without the port-only counters)", body = Vec<model::Interface>)))]
async fn interfaces(State(s): State<Arc<Shared>>) -> ApiResult<Vec<model::Interface>> {
    blocking(move || shown(api::interfaces(&s))).await
}

/// Query of `GET /v1/routes`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RoutesQuery {
    /// A prefix (exact match) or an address (longest match); all routes when absent.
    #[serde(default)]
    pub prefix: Option<String>,
}

/// Routes in the fast path's FIB.
#[utoipa::path(get, path = "/v1/routes", tag = "show", params(RoutesQuery),
    responses((status = 200, description = "The FIB's size and the routes", body = model::Routes),
              (status = 400, description = "Not an address or prefix", body = model::ErrorBody)))]
async fn routes(
    State(s): State<Arc<Shared>>,
    q: std::result::Result<Query<RoutesQuery>, QueryRejection>,
) -> ApiResult<model::Routes> {
    let Query(q) = q?;
    blocking(move || shown(api::routes(&s, q.prefix.as_deref()))).await
}

/// Route counts, FIB memory and sync statistics.
#[utoipa::path(get, path = "/v1/routes/summary", tag = "show",
    responses((status = 200, description = "Counts, FIB memory, sync statistics", body = model::RoutesSummary)))]
async fn routes_summary(State(s): State<Arc<Shared>>) -> ApiResult<model::RoutesSummary> {
    blocking(move || shown(api::routes_summary(&s))).await
}

/// Neighbours (ARP/NDP) the fast path uses.
#[utoipa::path(get, path = "/v1/neighbors", tag = "show",
    responses((status = 200, description = "The neighbours on fast-path ports", body = Vec<model::Neighbor>)))]
async fn neighbors(State(s): State<Arc<Shared>>) -> ApiResult<Vec<model::Neighbor>> {
    blocking(move || shown(api::neighbors(&s))).await
}

/// The native BGP speaker: sessions, their counters, and the RIB's size.
#[utoipa::path(get, path = "/v1/bgp", tag = "show",
    responses((status = 200, description = "Whether [bgp] is configured, and the speaker's status", body = model::BgpStatus)))]
async fn bgp(State(s): State<Arc<Shared>>) -> ApiResult<model::BgpStatus> {
    blocking(move || Ok(Json(api::bgp(&s)))).await
}

/// Packet counters: totals, per worker, and every non-zero drop/punt reason by node.
#[utoipa::path(get, path = "/v1/counters", tag = "show",
    responses((status = 200, description = "The fast path's counters", body = model::Counters)))]
async fn counters(State(s): State<Arc<Shared>>) -> ApiResult<model::Counters> {
    blocking(move || shown(api::counters(&s))).await
}

/// The firewall's filters, their rules and the rules' counters.
#[utoipa::path(get, path = "/v1/firewall", tag = "show",
    responses((status = 200, description = "Every filter with its rules and their counters", body = model::FirewallView)))]
async fn firewall(State(s): State<Arc<Shared>>) -> ApiResult<model::FirewallView> {
    blocking(move || Ok(Json(crate::fwview::view(&s.features)))).await
}

/// The QoS policers and the scheduled ports' class queues with their counters.
#[utoipa::path(get, path = "/v1/qos", tag = "show",
    responses((status = 200, description = "Policers with their colour counts; every scheduled port's classes with their queue counters", body = model::QosView)))]
async fn qos(State(s): State<Arc<Shared>>) -> ApiResult<model::QosView> {
    blocking(move || Ok(Json(crate::qosview::view(&s.features)))).await
}

/// Which flows of `GET` / `DELETE /v1/conntrack` and `GET /v1/nat/sessions`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FlowQuery {
    /// An address or prefix either end of the flow lies in (NAT sessions: any of their
    /// addresses, before or after translation; IPv4, and `A-B` ranges too).
    #[serde(default)]
    pub address: Option<String>,
    /// A protocol: `tcp`, `udp`, `icmp`, ... or a number.
    #[serde(default)]
    pub protocol: Option<String>,
    /// A port either end uses (NAT sessions: before or after translation).
    #[serde(default)]
    pub port: Option<u16>,
    /// Most flows to list (default 1,000; at most 100,000).
    #[serde(default)]
    pub limit: Option<usize>,
}

fn ct_filter(q: &FlowQuery) -> std::result::Result<firewall::node::CtFilter, ApiError> {
    crate::fwview::ct_filter(q.address.as_deref(), q.protocol.as_deref(), q.port)
        .map_err(ApiError::bad_request)
}

fn ct_error(e: firewall::node::ScanError) -> ApiError {
    use firewall::node::ScanError as E;
    let status = match e {
        E::Off => StatusCode::CONFLICT,
        E::Stalled { .. } | E::Unavailable => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, e.to_string())
}

/// The flows connection tracking holds, filtered.
#[utoipa::path(get, path = "/v1/conntrack", tag = "show", params(FlowQuery),
    responses((status = 200, description = "The matching flows", body = model::ConntrackList),
              (status = 400, description = "A malformed filter", body = model::ErrorBody),
              (status = 409, description = "Connection tracking is off", body = model::ErrorBody),
              (status = 500, description = "The workers did not answer", body = model::ErrorBody)))]
async fn conntrack_list(
    State(s): State<Arc<Shared>>,
    q: std::result::Result<Query<FlowQuery>, QueryRejection>,
) -> ApiResult<model::ConntrackList> {
    let Query(q) = q?;
    let filter = ct_filter(&q)?;
    let limit = q.limit.unwrap_or(1000);
    blocking(move || {
        crate::fwview::conntrack_list(&s.features, filter, limit)
            .map(Json)
            .map_err(ct_error)
    })
    .await
}

/// Remove the flows a filter matches (all without one).
#[utoipa::path(delete, path = "/v1/conntrack", tag = "show", params(FlowQuery),
    responses((status = 200, description = "How many flows were removed", body = model::ConntrackFlushed),
              (status = 400, description = "A malformed filter", body = model::ErrorBody),
              (status = 409, description = "Connection tracking is off", body = model::ErrorBody),
              (status = 500, description = "The workers did not answer", body = model::ErrorBody)))]
async fn conntrack_flush(
    State(s): State<Arc<Shared>>,
    q: std::result::Result<Query<FlowQuery>, QueryRejection>,
) -> ApiResult<model::ConntrackFlushed> {
    let Query(q) = q?;
    let filter = ct_filter(&q)?;
    blocking(move || {
        let removed = crate::fwview::conntrack_flush(&s.features, filter).map_err(ct_error)?;
        tracing::info!(removed, "conntrack flushed");
        Ok(Json(model::ConntrackFlushed { removed }))
    })
    .await
}

/// The IPsec tunnel interfaces and SAs, with their counters.
#[utoipa::path(get, path = "/v1/ipsec", tag = "show",
    responses((status = 200, description = "Tunnels and SAs", body = model::IpsecView)))]
async fn ipsec(State(s): State<Arc<Shared>>) -> ApiResult<model::IpsecView> {
    blocking(move || Ok(Json(crate::api::ipsec_view(&s)))).await
}

/// NAT's rules, with the sessions each opened, and each worker's table.
#[utoipa::path(get, path = "/v1/nat", tag = "show",
    responses((status = 200, description = "NAT's rules and tables", body = model::NatView)))]
async fn nat(State(s): State<Arc<Shared>>) -> ApiResult<model::NatView> {
    blocking(move || Ok(Json(crate::natview::view(&s.features)))).await
}

/// NAT's sessions, filtered.
#[utoipa::path(get, path = "/v1/nat/sessions", tag = "show", params(FlowQuery),
    responses((status = 200, description = "The matching sessions", body = model::NatSessionList),
              (status = 400, description = "A malformed filter", body = model::ErrorBody),
              (status = 409, description = "NAT is off", body = model::ErrorBody),
              (status = 500, description = "A worker's table stayed busy", body = model::ErrorBody)))]
async fn nat_sessions(
    State(s): State<Arc<Shared>>,
    q: std::result::Result<Query<FlowQuery>, QueryRejection>,
) -> ApiResult<model::NatSessionList> {
    let Query(q) = q?;
    let filter = crate::natview::filter(q.address.as_deref(), q.protocol.as_deref(), q.port)
        .map_err(ApiError::bad_request)?;
    let limit = q.limit.unwrap_or(1000);
    blocking(move || {
        crate::natview::sessions(&s.features, filter, limit)
            .map(Json)
            .map_err(nat_error)
    })
    .await
}

fn nat_error(e: firewall::nat::DumpError) -> ApiError {
    let status = match e {
        firewall::nat::DumpError::Off => StatusCode::CONFLICT,
        firewall::nat::DumpError::Busy { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, e.to_string())
}

/// Version and build.
#[utoipa::path(get, path = "/v1/version", tag = "show",
    responses((status = 200, description = "Version, build commit and uptime", body = model::Version)))]
async fn version(State(s): State<Arc<Shared>>) -> ApiResult<model::Version> {
    Ok(Json(model::Version {
        version: s.version.clone(),
        uptime_s: s.started.elapsed().as_secs_f64(),
    }))
}

fn config_error(e: crate::configsvc::Error) -> ApiError {
    use crate::configsvc::Error as E;
    let status = match &e {
        E::Problems(_) | E::Plan(_) | E::NoSuchEntry(..) => StatusCode::UNPROCESSABLE_ENTITY,
        E::Apply(_) => StatusCode::CONFLICT,
        E::Load(_) | E::Persist(_) | E::History(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, e.to_string())
}

fn with_config<T: Send + 'static>(
    s: &Shared,
    f: impl FnOnce(&mut crate::configsvc::ConfigService) -> std::result::Result<T, ApiError>,
) -> std::result::Result<T, ApiError> {
    let mut svc = s
        .config
        .lock()
        .map_err(|_| ApiError::internal("config state unavailable"))?;
    f(&mut svc)
}

/// The fast path follows the config just applied (uRPF, ...). It cannot fail for a valid
/// config (the config's checks and the registry agree); if it did, the workers keep what
/// they had and the error is logged.
fn publish_features(s: &Arc<Shared>, cfg: &crate::config::Config) {
    if let Err(e) = s.features.publish(cfg) {
        tracing::error!("the fast path's features were not updated: {e}");
    }
    if let Err(e) = s.ike.apply(s, &cfg.ipsec) {
        tracing::error!("IKE did not take the new peers: {e}");
    }
}

fn applied(a: &crate::configsvc::Applied) -> model::Applied {
    model::Applied {
        history_id: a.id,
        plan: a.plan.ops.iter().map(|o| o.to_string()).collect(),
        changed: a.report.changed.clone(),
        unchanged: a.report.unchanged.clone(),
    }
}

/// The running config's text.
#[utoipa::path(get, path = "/v1/config", tag = "config",
    responses((status = 200, description = "The running config", body = model::ConfigText)))]
async fn config_get(State(s): State<Arc<Shared>>) -> ApiResult<model::ConfigText> {
    blocking(move || {
        with_config(&s, |c| {
            Ok(Json(model::ConfigText {
                text: c.running_text().to_string(),
            }))
        })
    })
    .await
}

/// Validate a candidate: syntax, schema, values, and the interfaces it names.
#[utoipa::path(post, path = "/v1/config/check", tag = "config", request_body = model::ConfigBody,
    responses((status = 200, description = "Valid: the steps apply would take", body = model::CheckResult),
              (status = 422, description = "Invalid: every problem with its line and column", body = model::CheckFailure)))]
async fn config_check(State(s): State<Arc<Shared>>, Body(b): Body<model::ConfigBody>) -> Response {
    let r = blocking(move || {
        with_config(&s, |c| {
            let label = b.file.as_deref().unwrap_or("candidate");
            let cfg = match c.check_as(&b.text, label) {
                Ok(cfg) => cfg,
                Err(p) => {
                    return Ok(Err(model::CheckFailure {
                        error: p.to_string(),
                        problems: p
                            .problems
                            .iter()
                            .map(|p| model::ConfigProblem {
                                line: p.line as u64,
                                column: p.column as u64,
                                path: p.path.clone(),
                                message: p.message.clone(),
                            })
                            .collect(),
                    }))
                }
            };
            Ok(match crate::apply::plan(c.running(), &cfg) {
                Ok(p) => Ok(model::CheckResult {
                    valid: true,
                    plan: p.ops.iter().map(|o| o.to_string()).collect(),
                }),
                Err(e) => Err(model::CheckFailure {
                    error: e.to_string(),
                    problems: Vec::new(),
                }),
            })
        })
    })
    .await;
    match r {
        Ok(Ok(valid)) => Json(valid).into_response(),
        Ok(Err(invalid)) => (StatusCode::UNPROCESSABLE_ENTITY, Json(invalid)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Apply a candidate as one transaction: all of it or, on any failure, nothing (what was
/// done is undone). On success it is the running config, saved to the daemon's config file
/// and recorded in the history.
#[utoipa::path(post, path = "/v1/config/apply", tag = "config", request_body = model::ConfigBody,
    responses((status = 200, description = "Applied: the steps, which changed something", body = model::Applied),
              (status = 422, description = "Invalid, or needs a restart: nothing changed", body = model::ErrorBody),
              (status = 409, description = "A step failed; everything done was undone", body = model::ErrorBody)))]
async fn config_apply(
    State(s): State<Arc<Shared>>,
    Body(b): Body<model::ConfigBody>,
) -> ApiResult<model::Applied> {
    blocking(move || {
        with_config(&s, |c| {
            let label = b.file.as_deref().unwrap_or("candidate");
            let a = c
                .apply_as(&b.text, label, b.comment.as_deref())
                .map_err(config_error)?;
            tracing::info!(history_id = ?a.id, changed = a.report.changed.len(), "config applied");
            publish_features(&s, c.running());
            Ok(Json(applied(&a)))
        })
    })
    .await
}

/// Unified diff: running → candidate, or previous → running.
#[utoipa::path(post, path = "/v1/config/diff", tag = "config", request_body = model::DiffBody,
    responses((status = 200, description = "The unified diff (empty: no difference)", body = model::ConfigDiff)))]
async fn config_diff(
    State(s): State<Arc<Shared>>,
    Body(b): Body<model::DiffBody>,
) -> ApiResult<model::ConfigDiff> {
    blocking(move || {
        with_config(&s, |c| {
            let diff = c.diff(b.text.as_deref()).map_err(config_error)?;
            Ok(Json(model::ConfigDiff { diff }))
        })
    })
    .await
}

/// Re-apply an earlier config from the history, as a new transaction.
#[utoipa::path(post, path = "/v1/config/rollback", tag = "config", request_body = model::RollbackBody,
    responses((status = 200, description = "Rolled back: the steps, which changed something", body = model::Applied),
              (status = 422, description = "No such entry", body = model::ErrorBody),
              (status = 409, description = "A step failed; everything done was undone", body = model::ErrorBody)))]
async fn config_rollback(
    State(s): State<Arc<Shared>>,
    Body(b): Body<model::RollbackBody>,
) -> ApiResult<model::Applied> {
    blocking(move || {
        with_config(&s, |c| {
            let a = c.rollback(b.steps).map_err(config_error)?;
            tracing::info!(steps = b.steps, history_id = ?a.id, "config rolled back");
            publish_features(&s, c.running());
            Ok(Json(applied(&a)))
        })
    })
    .await
}

/// The history of applied configs, oldest first.
#[utoipa::path(get, path = "/v1/config/history", tag = "config",
    responses((status = 200, description = "The entries, oldest first", body = Vec<model::HistoryEntry>)))]
async fn config_history(State(s): State<Arc<Shared>>) -> ApiResult<Vec<model::HistoryEntry>> {
    blocking(move || {
        with_config(&s, |c| {
            let entries = c.history().map_err(config_error)?;
            Ok(Json(
                entries
                    .into_iter()
                    .map(|e| model::HistoryEntry {
                        id: e.id,
                        time: e.time,
                        bytes: e.bytes,
                        comment: e.comment,
                    })
                    .collect(),
            ))
        })
    })
    .await
}

/// Install a manually keyed SA on a tunnel, beside the config's (kept in memory: a
/// restart forgets it). It replaces the API's SA of the same direction and SPI, and, when
/// outbound, the API's earlier transmit SA of its tunnel (a rekey, make-before-break).
#[utoipa::path(post, path = "/v1/ipsec/sa", tag = "ipsec", request_body = model::IpsecSaBody,
    responses((status = 200, description = "Installed", body = model::IpsecSaChanged),
              (status = 400, description = "Malformed body", body = model::ErrorBody),
              (status = 422, description = "Refused: the message names the field and why", body = model::ErrorBody)))]
async fn ipsec_sa_add(
    State(s): State<Arc<Shared>>,
    Body(b): Body<model::IpsecSaBody>,
) -> ApiResult<model::IpsecSaChanged> {
    let direction = sa_direction(&b.direction)?;
    if b.tunnel.is_empty() {
        return Err(ApiError::unprocessable(format!(
            "sa {} {:#x}.tunnel: required (the API keys tunnels; policy SAs come from the config)",
            b.direction, b.spi
        )));
    }
    let entry = ipsec::config::SaEntry {
        tunnel: b.tunnel,
        mode: None,
        local: None,
        remote: None,
        direction,
        spi: b.spi,
        encryption: b.encryption,
        integrity: b.integrity.unwrap_or_else(|| "none".into()),
        key: String::new(),
        esn: b.esn,
        replay_window: b.replay_window.unwrap_or(ipsec::SaConfig::DEFAULT_WINDOW),
        selectors: Vec::new(),
        remote_port: None,
    };
    let sa = ipsec::config::ExtraSa::new(entry, &b.encryption_key, &b.integrity_key)
        .map_err(|e| ApiError::unprocessable(format!("sa {} {:#x}: {e}", b.direction, b.spi)))?;
    let spi = b.spi;
    blocking(move || {
        s.features
            .add_ipsec_sa(sa)
            .map_err(ApiError::unprocessable)?;
        tracing::info!("[ipsec] API: SA {} {spi:#x} installed", b.direction);
        Ok(Json(model::IpsecSaChanged {
            result: "added".into(),
            direction: b.direction,
            spi,
        }))
    })
    .await
}

/// The IKE daemon's SAs, their child SAs, and its counters.
#[utoipa::path(get, path = "/v1/ike", tag = "show", params(crate::ikesvc::IkeQuery),
    responses((status = 200, description = "IKE SAs (a page of them) and counters", body = model::IkeView),
              (status = 400, description = "A malformed query", body = model::ErrorBody)))]
async fn ike(
    State(s): State<Arc<Shared>>,
    q: std::result::Result<Query<crate::ikesvc::IkeQuery>, QueryRejection>,
) -> ApiResult<model::IkeView> {
    let Query(q) = q?;
    blocking(move || Ok(Json(crate::ikesvc::view_page(&s.ike, &q)))).await
}

/// The IKE daemon's counts (SAs established and half-open, child SAs) and counters, without
/// the list of SAs: for a gateway with many.
#[utoipa::path(get, path = "/v1/ike/summary", tag = "show",
    responses((status = 200, description = "IKE SA counts and counters", body = model::IkeSummary)))]
async fn ike_summary(State(s): State<Arc<Shared>>) -> ApiResult<model::IkeSummary> {
    blocking(move || Ok(Json(crate::ikesvc::summary(&s.ike)))).await
}

/// Start (or restart) the IKE SA of a peer.
#[utoipa::path(post, path = "/v1/ike/initiate/{peer}", tag = "ipsec",
    params(("peer" = String, Path, description = "An [[ipsec.peer]]'s name")),
    responses((status = 200, description = "IKE_SA_INIT sent (or the SA is already up)", body = model::IkeChanged),
              (status = 422, description = "No such peer, or it cannot initiate", body = model::ErrorBody)))]
async fn ike_initiate(
    State(s): State<Arc<Shared>>,
    axum::extract::Path(peer): axum::extract::Path<String>,
) -> ApiResult<model::IkeChanged> {
    blocking(move || {
        s.ike.initiate(&peer).map_err(ApiError::unprocessable)?;
        tracing::info!(peer, "IKE: API: initiate");
        Ok(Json(model::IkeChanged {
            peer,
            result: "initiating".into(),
            sas: 0,
        }))
    })
    .await
}

/// Delete a peer's IKE SAs and their child SAs (an initiating peer stays down until
/// `initiate`, a config apply or a restart).
#[utoipa::path(post, path = "/v1/ike/terminate/{peer}", tag = "ipsec",
    params(("peer" = String, Path, description = "An [[ipsec.peer]]'s name")),
    responses((status = 200, description = "Deleted", body = model::IkeChanged),
              (status = 422, description = "No such peer", body = model::ErrorBody)))]
async fn ike_terminate(
    State(s): State<Arc<Shared>>,
    axum::extract::Path(peer): axum::extract::Path<String>,
) -> ApiResult<model::IkeChanged> {
    blocking(move || {
        let n = s.ike.terminate(&peer).map_err(ApiError::unprocessable)?;
        tracing::info!(peer, sas = n, "IKE: API: terminate");
        Ok(Json(model::IkeChanged {
            peer,
            result: "terminated".into(),
            sas: n,
        }))
    })
    .await
}

/// Remove an SA the API installed.
#[utoipa::path(delete, path = "/v1/ipsec/sa/{direction}/{spi}", tag = "ipsec",
    params(("direction" = String, Path, description = "out or in"),
           ("spi" = String, Path, description = "SPI, decimal or 0x hex")),
    responses((status = 200, description = "Removed", body = model::IpsecSaChanged),
              (status = 400, description = "Bad direction or SPI", body = model::ErrorBody),
              (status = 404, description = "The API installed no such SA", body = model::ErrorBody),
              (status = 422, description = "Refused", body = model::ErrorBody)))]
async fn ipsec_sa_remove(
    State(s): State<Arc<Shared>>,
    p: std::result::Result<
        axum::extract::Path<(String, String)>,
        axum::extract::rejection::PathRejection,
    >,
) -> ApiResult<model::IpsecSaChanged> {
    let axum::extract::Path((dir, spi_text)) =
        p.map_err(|e| ApiError::bad_request(format!("bad SA path: {}", e.body_text())))?;
    let direction = sa_direction(&dir)?;
    let spi = match spi_text.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16),
        None => spi_text.parse(),
    }
    .map_err(|_| ApiError::bad_request(format!("SPI {spi_text:?}: not a 32-bit number")))?;
    blocking(move || {
        let removed = s
            .features
            .remove_ipsec_sa((direction, spi, None))
            .map_err(ApiError::unprocessable)?;
        if !removed {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no SA {dir} {spi:#x} installed through the API (config SAs change with config apply)"),
            ));
        }
        tracing::info!("[ipsec] API: SA {dir} {spi:#x} removed");
        Ok(Json(model::IpsecSaChanged {
            result: "removed".into(),
            direction: dir,
            spi,
        }))
    })
    .await
}

fn sa_direction(d: &str) -> std::result::Result<ipsec::config::SaDirection, ApiError> {
    match d {
        "out" => Ok(ipsec::config::SaDirection::Out),
        "in" => Ok(ipsec::config::SaDirection::In),
        _ => Err(ApiError::bad_request(format!(
            "direction {d:?}: expected out or in"
        ))),
    }
}

/// One history entry's text.
#[utoipa::path(get, path = "/v1/config/history/{id}", tag = "config",
    params(("id" = u64, Path, description = "History entry")),
    responses((status = 200, description = "The entry's config text", body = model::HistoryText),
              (status = 404, description = "No such entry", body = model::ErrorBody)))]
async fn config_entry(
    State(s): State<Arc<Shared>>,
    id: std::result::Result<axum::extract::Path<u64>, axum::extract::rejection::PathRejection>,
) -> ApiResult<model::HistoryText> {
    let axum::extract::Path(id) =
        id.map_err(|e| ApiError::bad_request(format!("bad history id: {}", e.body_text())))?;
    blocking(move || {
        with_config(&s, |c| match c.entry(id) {
            Ok(text) => Ok(Json(model::HistoryText { id, text })),
            Err(e) => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("history entry {id}: {e}"),
            )),
        })
    })
    .await
}

/// Arm the packet trace.
#[utoipa::path(post, path = "/v1/trace", tag = "trace", request_body = model::TraceBody,
    responses((status = 200, description = "Armed", body = model::TraceArmed),
              (status = 422, description = "Bad count, port or match expression", body = model::ErrorBody)))]
async fn trace_add(
    State(s): State<Arc<Shared>>,
    Body(b): Body<model::TraceBody>,
) -> ApiResult<model::TraceArmed> {
    if b.count == 0 || b.count > 10_000 {
        return Err(ApiError::unprocessable(format!(
            "count {} is out of range; expected 1..=10000",
            b.count
        )));
    }
    blocking(move || {
        s.trace
            .add(b.count, b.port.as_deref(), b.expr.as_deref())
            .map_err(ApiError::unprocessable)?;
        Ok(Json(model::TraceArmed { armed: b.count }))
    })
    .await
}

fn traced(t: &crate::trace::Trace) -> model::TracedPacket {
    model::TracedPacket {
        seq: t.seq,
        worker: t.worker as u64,
        port: t.port,
        port_name: t.port_name.clone(),
        len: t.len,
        ts_ns: t.ts_ns,
        summary: t.summary.clone(),
        steps: t
            .steps
            .iter()
            .map(|s| model::TraceStep {
                node: s.node.to_string(),
                text: s.text.clone(),
            })
            .collect(),
        truncated: t.truncated,
    }
}

/// The traced packets, oldest first, structured and as VPP-style text.
#[utoipa::path(get, path = "/v1/trace", tag = "trace",
    responses((status = 200, description = "The traced packets", body = model::TraceShow)))]
async fn trace_show(State(s): State<Arc<Shared>>) -> ApiResult<model::TraceShow> {
    blocking(move || {
        let t = s.trace.show();
        Ok(Json(model::TraceShow {
            text: crate::trace::format_all(&t),
            lost: s.trace.lost(),
            traces: t.iter().map(traced).collect(),
        }))
    })
    .await
}

/// Disarm the trace and forget the traced packets.
#[utoipa::path(delete, path = "/v1/trace", tag = "trace",
    responses((status = 200, description = "Cleared", body = model::TraceCleared)))]
async fn trace_clear(State(s): State<Arc<Shared>>) -> ApiResult<model::TraceCleared> {
    blocking(move || {
        s.trace.clear();
        Ok(Json(model::TraceCleared { cleared: true }))
    })
    .await
}

/// A pcap file (the body of a capture's answer).
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
#[allow(dead_code)]
struct PcapFile(Vec<u8>);

/// Capture frames on a port and return them as a pcap file. The request returns when
/// `count` frames are captured or `timeout_s` has passed.
#[utoipa::path(post, path = "/v1/capture", tag = "capture", request_body = model::CaptureBody,
    responses((status = 200, description = "The pcap file", body = PcapFile, content_type = "application/vnd.tcpdump.pcap"),
              (status = 409, description = "Another capture is running", body = model::ErrorBody),
              (status = 422, description = "Bad port, direction, count or timeout", body = model::ErrorBody)))]
async fn capture(State(s): State<Arc<Shared>>, Body(b): Body<model::CaptureBody>) -> Response {
    let r = blocking(move || {
        let dir = crate::capture::parse_direction(b.direction.as_deref().unwrap_or("both"))
            .map_err(ApiError::unprocessable)?;
        let count = b.count.unwrap_or(100);
        if count == 0 || count > 1_000_000 {
            return Err(ApiError::unprocessable(format!(
                "count {count} is out of range; expected 1..=1000000"
            )));
        }
        let timeout = b.timeout_s.unwrap_or(10.0);
        if !(timeout > 0.0 && timeout <= 3600.0) {
            return Err(ApiError::unprocessable(format!(
                "timeout_s {timeout} is out of range; expected more than 0 and at most 3600"
            )));
        }
        s.capture
            .start(&b.port, dir, count, b.snaplen)
            .map_err(|e| match e {
                crate::capture::StartError::Busy(m) => ApiError::new(StatusCode::CONFLICT, m),
                crate::capture::StartError::Invalid(m) => ApiError::unprocessable(m),
            })?;
        s.capture
            .finish(std::time::Duration::from_secs_f64(timeout))
            .map_err(ApiError::internal)
    })
    .await;
    match r {
        Ok(pcap) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/vnd.tcpdump.pcap"),
            )],
            pcap,
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

/// Prometheus metrics (OpenMetrics text).
#[utoipa::path(get, path = "/metrics", tag = "metrics",
    responses((status = 200, description = "OpenMetrics text: ports, drop reasons, worker load, FIB and neighbour sizes, route-sync lag", body = String, content_type = "application/openmetrics-text")))]
async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    match blocking(move || crate::metrics::render(&s).map_err(ApiError::internal)).await {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            )],
            text,
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "meta",
    responses((status = 200, description = "The OpenAPI 3.1 description of this API", body = Object)))]
async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Ferrouter API", description = "Management API of the Ferrouter daemon. On the unix socket requests are local; on TCP every request needs `Authorization: Bearer TOKEN`. Errors are `{\"error\": \"message\"}` (ErrorBody); every body has its schema under components."),
    paths(interfaces, routes, routes_summary, neighbors, bgp, counters, firewall, conntrack_list, conntrack_flush, nat, nat_sessions, ipsec, qos, ipsec_sa_add, ipsec_sa_remove, ike, ike_summary, ike_initiate, ike_terminate, version, config_get, config_check, config_apply, config_diff, config_rollback, config_history, config_entry, trace_add, trace_show, trace_clear, capture, metrics, openapi),
    components(schemas(model::ErrorBody)),
    modifiers(&BearerAuth),
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let c = doc.components.get_or_insert_with(Default::default);
        c.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        doc.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
        // The answers every operation can give, whatever it does: all are JSON errors
        // (`ErrorBody`).
        let common = [
            ("400", "Malformed request (body, query or path): {error}"),
            ("401", "TCP without the right bearer token: {error}"),
            (
                "408",
                "The request body did not arrive within api.idle_timeout_s: {error}",
            ),
            ("413", "Body larger than 1 MiB: {error}"),
            (
                "415",
                "Body without Content-Type: application/json: {error}",
            ),
            ("500", "The router failed: {error}"),
        ];
        for item in doc.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.delete,
                &mut item.put,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                for (code, what) in common {
                    op.responses
                        .responses
                        .entry(code.to_string())
                        .or_insert_with(|| error_response(what).into());
                }
            }
        }
    }
}

/// A response whose body is an [`model::ErrorBody`].
fn error_response(description: &str) -> utoipa::openapi::Response {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
}

/// The OpenAPI document (also served at `/openapi.json`).
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no such endpoint: {} {} (GET /openapi.json lists them)",
            req.method(),
            req.uri().path()
        ),
    )
}

async fn wrong_method(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} is not allowed on {} (GET /openapi.json lists the methods)",
            req.method(),
            req.uri().path()
        ),
    )
}

/// The routes, without authentication (the unix socket's).
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/interfaces", get(interfaces))
        .route("/v1/routes", get(routes))
        .route("/v1/routes/summary", get(routes_summary))
        .route("/v1/neighbors", get(neighbors))
        .route("/v1/bgp", get(bgp))
        .route("/v1/counters", get(counters))
        .route("/v1/firewall", get(firewall))
        .route("/v1/conntrack", get(conntrack_list).delete(conntrack_flush))
        .route("/v1/nat", get(nat))
        .route("/v1/ipsec", get(ipsec))
        .route("/v1/qos", get(qos))
        .route("/v1/nat/sessions", get(nat_sessions))
        .route("/v1/version", get(version))
        .route("/v1/config", get(config_get))
        .route("/v1/config/check", post(config_check))
        .route("/v1/config/apply", post(config_apply))
        .route("/v1/config/diff", post(config_diff))
        .route("/v1/config/rollback", post(config_rollback))
        .route("/v1/config/history", get(config_history))
        .route("/v1/config/history/{id}", get(config_entry))
        .route(
            "/v1/trace",
            get(trace_show).post(trace_add).delete(trace_clear),
        )
        .route("/v1/capture", post(capture))
        .route("/v1/ipsec/sa", post(ipsec_sa_add))
        .route("/v1/ike", get(ike))
        .route("/v1/ike/summary", get(ike_summary))
        .route("/v1/ike/initiate/{peer}", post(ike_initiate))
        .route("/v1/ike/terminate/{peer}", post(ike_terminate))
        .route(
            "/v1/ipsec/sa/{direction}/{spi}",
            axum::routing::delete(ipsec_sa_remove),
        )
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(shared)
}

/// The bearer-token check for TCP clients: `Authorization: Bearer TOKEN`, the scheme in
/// any case (RFC 7235). The comparison takes the same time wherever the tokens differ.
pub fn check_token(headers: &axum::http::HeaderMap, token: &str) -> Result<(), ApiError> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim_start().split_once(|c: char| c.is_ascii_whitespace()))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim());
    match given {
        Some(t) if constant_time_eq::constant_time_eq(t.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::new(StatusCode::UNAUTHORIZED, "wrong token")),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "this endpoint needs `Authorization: Bearer TOKEN` (the token is in the daemon's api.token_file)",
        )),
    }
}

/// Answer one request of a connection: check its token (TCP) before anything else, read
/// its body (at most [`MAX_BODY`], within `body_timeout`), then route it.
pub(crate) async fn respond(
    app: Router,
    token: Option<&str>,
    req: hyper::Request<hyper::body::Incoming>,
    body_timeout: std::time::Duration,
    stats: &crate::listener::ListenerStats,
) -> Response {
    use http_body_util::BodyExt;
    use hyper::body::Body as _;
    use tower::ServiceExt;
    let (parts, body) = req.into_parts();
    if let Some(t) = token {
        if let Err(e) = check_token(&parts.headers, t) {
            return e.into_response();
        }
    }
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than {MAX_BODY} bytes"),
        )
        .into_response()
    };
    if body.size_hint().lower() > MAX_BODY as u64 {
        return too_large();
    }
    let read = http_body_util::Limited::new(body, MAX_BODY).collect();
    let bytes = match tokio::time::timeout(body_timeout, read).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
        Ok(Err(e)) => {
            return ApiError::bad_request(format!("reading the request body: {e}")).into_response()
        }
        Err(_) => {
            stats
                .body_timeouts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s (api.idle_timeout_s)",
                    body_timeout.as_secs()
                ),
            )
            .into_response();
        }
    };
    let req = Request::from_parts(parts, axum::body::Body::from(bytes));
    match app.oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// The running API listeners.
pub struct Server {
    shutdown: tokio::sync::watch::Sender<bool>,
    join: Option<JoinHandle<()>>,
    /// The TCP address actually bound (port 0 in the settings picks a free one).
    pub tcp: Option<SocketAddr>,
}

impl Server {
    /// Stop listening and wait for the API thread (in-flight requests finish first).
    pub fn stop(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

fn bind_unix(path: &Path) -> Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!(
                "another ferrouter is already listening on {}",
                path.display()
            );
        }
        std::fs::remove_file(path)
            .with_context(|| format!("removing stale socket {}", path.display()))?;
    }
    let l = std::os::unix::net::UnixListener::bind(path)
        .with_context(|| format!("binding {}", path.display()))?;
    // Owner and group only: whoever can connect can reconfigure the router.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Listen on the unix socket `path` (replacing a stale socket file) and, if configured,
/// on TCP with `token`; answer on a thread of its own until [`Server::stop`]. Each listener
/// has its own accept loop, connection budget and counters (`shared.api_conns`); see
/// [`crate::listener`].
pub fn serve(
    path: &Path,
    tcp: Option<(SocketAddr, String)>,
    limits: crate::listener::Limits,
    shared: Arc<Shared>,
) -> Result<Server> {
    use crate::listener::{self, Listener, Serving};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(8)
        .thread_name("ferrouter-api")
        .enable_all()
        .build()
        .context("starting the API runtime")?;
    let unix = bind_unix(path)?;
    let tcp = match tcp {
        Some((addr, token)) => {
            let l = std::net::TcpListener::bind(addr)
                .with_context(|| format!("binding the API to {addr}"))?;
            l.set_nonblocking(true)
                .with_context(|| format!("the API's TCP socket on {addr}"))?;
            Some((l, token))
        }
        None => None,
    };
    let tcp_addr = tcp.as_ref().and_then(|(l, _)| l.local_addr().ok());
    let (shutdown, rx) = tokio::sync::watch::channel(false);
    let limits = Arc::new(limits);
    let (unix_stats, tcp_stats) = (shared.api_conns.unix.clone(), shared.api_conns.tcp.clone());
    let app = router(shared);
    let handler = |token: Option<String>, stats: Arc<listener::ListenerStats>| {
        let (app, token, idle) = (app.clone(), token.map(Arc::new), limits.idle);
        let h: listener::Handler = Arc::new(move |req| {
            let (app, token, stats) = (app.clone(), token.clone(), stats.clone());
            Box::pin(async move {
                respond(app, token.as_deref().map(String::as_str), req, idle, &stats).await
            })
        });
        h
    };
    let unix_handler = handler(None, unix_stats.clone());
    let tcp_handler = tcp
        .as_ref()
        .map(|(_, token)| handler(Some(token.clone()), tcp_stats.clone()));
    let join = std::thread::Builder::new()
        .name("ferrouter-api".into())
        .spawn(move || {
            rt.block_on(async move {
                let mut tasks = Vec::new();
                match tokio::net::UnixListener::from_std(unix) {
                    Ok(l) => {
                        let s = Serving {
                            handler: unix_handler,
                            limits: limits.clone(),
                            stats: unix_stats,
                        };
                        tasks.push(tokio::spawn(listener::run(
                            Listener::Unix(l),
                            s,
                            rx.clone(),
                        )));
                    }
                    Err(e) => tracing::error!("API on the unix socket: {e}"),
                }
                if let (Some((l, _)), Some(handler)) = (tcp, tcp_handler) {
                    match tokio::net::TcpListener::from_std(l) {
                        Ok(l) => {
                            let s = Serving {
                                handler,
                                limits,
                                stats: tcp_stats,
                            };
                            tasks.push(tokio::spawn(listener::run(
                                Listener::Tcp(l),
                                s,
                                rx.clone(),
                            )));
                        }
                        Err(e) => tracing::error!("API on TCP: {e}"),
                    }
                }
                let all = async {
                    for t in tasks {
                        let _ = t.await;
                    }
                };
                // Idle keep-alive connections close at once; a request still running
                // (a capture, say) gets a few seconds.
                let mut stop = rx.clone();
                let deadline = async {
                    let _ = stop.wait_for(|s| *s).await;
                    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
                };
                tokio::select! {
                    _ = all => {}
                    _ = deadline => tracing::warn!("API stopped with requests still running"),
                }
            });
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
        })?;
    Ok(Server {
        shutdown,
        join: Some(join),
        tcp: tcp_addr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(value: &str) -> axum::http::HeaderMap {
        let mut h = axum::http::HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let token = "0123456789abcdef";
        for v in [
            "Bearer 0123456789abcdef",
            "bearer 0123456789abcdef",
            "BEARER 0123456789abcdef",
            "bEaReR   0123456789abcdef ",
        ] {
            assert!(check_token(&auth(v), token).is_ok(), "{v}");
        }
        for (v, needle) in [
            ("Bearer 0123456789abcdeX", "wrong token"),
            ("bearer wrong", "wrong token"),
            ("Bearer", "needs `Authorization: Bearer TOKEN`"),
            (
                "Basic 0123456789abcdef",
                "needs `Authorization: Bearer TOKEN`",
            ),
            (
                "Bearer0123456789abcdef",
                "needs `Authorization: Bearer TOKEN`",
            ),
        ] {
            let e = check_token(&auth(v), token).unwrap_err();
            assert_eq!(e.status, StatusCode::UNAUTHORIZED, "{v}");
            assert!(e.message.contains(needle), "{v}: {}", e.message);
        }
        let e = check_token(&axum::http::HeaderMap::new(), token).unwrap_err();
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
    }
}
