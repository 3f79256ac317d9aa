//! The OpenAPI document types every answer (issue 24): each operation's every response has
//! a body schema, and JSON in the wire format validates against it (the live daemon's
//! answers are validated by schemathesis in `tests/api.rs`).

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use control::model;

fn document() -> Value {
    serde_json::to_value(control::http::openapi_document()).unwrap()
}

/// `(path, method, status, response)` of every operation.
fn responses(doc: &Value) -> Vec<(String, String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if !["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                continue;
            }
            for (status, r) in op["responses"].as_object().unwrap() {
                out.push((path.clone(), method.clone(), status.clone(), r.clone()));
            }
        }
    }
    out
}

#[test]
fn every_response_of_every_operation_has_a_schema() {
    let doc = document();
    let all = responses(&doc);
    assert!(all.len() > 100, "only {} responses", all.len());
    let mut bad = Vec::new();
    for (path, method, status, r) in &all {
        let at = format!("{method} {path} {status}");
        let Some(content) = r["content"].as_object().filter(|c| !c.is_empty()) else {
            bad.push(format!("{at}: only a description, no content"));
            continue;
        };
        for (ct, media) in content {
            match media.get("schema") {
                None => bad.push(format!("{at} {ct}: no schema")),
                Some(s) => {
                    let mut errs = Vec::new();
                    check_refs(&doc, s, &format!("{at} {ct}"), &mut errs);
                    bad.extend(errs);
                }
            }
        }
        // Errors are JSON, `{"error": ...}` (with the problems for a config check).
        if !status.starts_with('2') {
            let s = &r["content"]["application/json"]["schema"]["$ref"];
            let ok = s == "#/components/schemas/ErrorBody"
                || (path == "/v1/config/check"
                    && status == "422"
                    && s == "#/components/schemas/CheckFailure");
            if !ok {
                bad.push(format!("{at}: the error body is not an ErrorBody: {r}"));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Every `$ref` under `s` names a schema of the document's components.
fn check_refs(doc: &Value, s: &Value, at: &str, errs: &mut Vec<String>) {
    match s {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                if resolve(doc, r).is_none() {
                    errs.push(format!("{at}: {r} is not in the document"));
                }
            }
            for v in m.values() {
                check_refs(doc, v, at, errs);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| check_refs(doc, v, at, errs)),
        _ => {}
    }
}

fn resolve<'a>(doc: &'a Value, r: &str) -> Option<&'a Value> {
    doc.pointer(r.strip_prefix('#')?)
}

/// A small JSON Schema check (what utoipa emits: `$ref`, `type`, `properties`, `required`,
/// `items`, `additionalProperties`, `enum`, `oneOf`/`anyOf`/`allOf`, `minimum`/`maximum`):
/// every way `v` does not match `s`, with where.
fn validate(doc: &Value, s: &Value, v: &Value, at: &str, errs: &mut Vec<String>) {
    if let Some(r) = s["$ref"].as_str() {
        match resolve(doc, r) {
            Some(t) => validate(doc, t, v, at, errs),
            None => errs.push(format!("{at}: unresolved {r}")),
        }
        return;
    }
    let matches = |sub: &Value| {
        let mut e = Vec::new();
        validate(doc, sub, v, at, &mut e);
        e.is_empty()
    };
    if let Some(alts) = s["oneOf"].as_array() {
        let n = alts.iter().filter(|a| matches(a)).count();
        if n != 1 {
            errs.push(format!("{at}: {v} matches {n} of oneOf {s}"));
        }
    }
    if let Some(alts) = s["anyOf"].as_array() {
        if !alts.iter().any(matches) {
            errs.push(format!("{at}: {v} matches none of anyOf {s}"));
        }
    }
    if let Some(all) = s["allOf"].as_array() {
        for a in all {
            validate(doc, a, v, at, errs);
        }
    }
    if let Some(e) = s["enum"].as_array() {
        if !e.contains(v) {
            errs.push(format!("{at}: {v} is not one of {e:?}"));
        }
    }
    let types: Vec<&str> = match &s["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if !types.is_empty() {
        let ok = types.iter().any(|t| match *t {
            "null" => v.is_null(),
            "boolean" => v.is_boolean(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "string" => v.is_string(),
            "array" => v.is_array(),
            "object" => v.is_object(),
            _ => false,
        });
        if !ok {
            errs.push(format!("{at}: {v} is not of type {types:?}"));
            return;
        }
    }
    if let Some(n) = v.as_f64() {
        if s["minimum"].as_f64().is_some_and(|m| n < m)
            || s["maximum"].as_f64().is_some_and(|m| n > m)
        {
            errs.push(format!("{at}: {n} is out of the schema's range"));
        }
    }
    if let Value::Object(o) = v {
        for r in s["required"].as_array().into_iter().flatten() {
            let r = r.as_str().unwrap();
            if !o.contains_key(r) {
                errs.push(format!("{at}: required field {r:?} is missing"));
            }
        }
        let props = s["properties"].as_object();
        for (k, x) in o {
            match props.and_then(|p| p.get(k)) {
                Some(p) => validate(doc, p, x, &format!("{at}.{k}"), errs),
                None => match &s["additionalProperties"] {
                    Value::Bool(false) => errs.push(format!("{at}: unexpected field {k:?}")),
                    a @ Value::Object(_) => validate(doc, a, x, &format!("{at}.{k}"), errs),
                    _ if props.is_some() => {
                        errs.push(format!("{at}: field {k:?} is not in the schema"))
                    }
                    _ => {}
                },
            }
        }
    }
    if let (Value::Array(a), Some(items)) = (v, s.get("items")) {
        for (i, x) in a.iter().enumerate() {
            validate(doc, items, x, &format!("{at}[{i}]"), errs);
        }
    }
}

/// `wire` (JSON as the daemon sends it) decodes into `T`, encodes back to the same JSON,
/// and validates against the schema of `method path`'s `status` answer.
fn conforms<T: Serialize + DeserializeOwned>(method: &str, path: &str, status: &str, wire: Value) {
    let doc = document();
    let typed: T = serde_json::from_value(wire.clone())
        .unwrap_or_else(|e| panic!("{method} {path} {status}: {wire} does not decode: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        back, wire,
        "{method} {path} {status}: the typed body changes the JSON"
    );
    let schema =
        &doc["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"];
    assert!(schema.is_object(), "{method} {path} {status}: no schema");
    let mut errs = Vec::new();
    validate(
        &doc,
        schema,
        &wire,
        &format!("{method} {path} {status}"),
        &mut errs,
    );
    assert!(errs.is_empty(), "{}", errs.join("\n"));
}

/// Breaking a field's type fails the validation: the check above is not vacuous.
#[test]
fn a_body_that_does_not_match_its_schema_is_caught() {
    let doc = document();
    let schema = &doc["paths"]["/v1/version"]["get"]["responses"]["200"]["content"]
        ["application/json"]["schema"];
    let mut errs = Vec::new();
    validate(
        &doc,
        schema,
        &json!({"version": 1, "uptime_s": 2.0}),
        "v",
        &mut errs,
    );
    assert!(errs.iter().any(|e| e.contains("v.version")), "{errs:?}");
    errs.clear();
    validate(&doc, schema, &json!({"version": "1"}), "v", &mut errs);
    assert!(errs.iter().any(|e| e.contains("uptime_s")), "{errs:?}");
}

#[test]
fn show_answers_in_the_wire_format_validate() {
    conforms::<Vec<model::Interface>>(
        "get",
        "/v1/interfaces",
        "200",
        json!([
            {"port": 0, "name": "eth0", "ifindex": 4, "backend": "af_packet",
             "admin": "up", "oper": "up", "down_reason": null,
             "mac": "02:00:00:00:00:01", "mtu": 1500, "ipv4": ["192.0.2.1"], "ipv6": [],
             "rx_packets": 1, "rx_bytes": 2, "tx_packets": 3, "tx_bytes": 4, "rx_drops": 0,
             "tx_errors": 0, "rx_csum_completed": 0, "rx_gso_split": 0, "features": ["urpf"]},
            {"port": 1, "name": "eth1", "ifindex": 5, "backend": "af_xdp (native)",
             "admin": "down", "oper": "down", "down_reason": "admin down by config (enabled = false)",
             "mac": null, "mtu": null, "ipv4": null, "ipv6": null,
             "rx_packets": 0, "rx_bytes": 0, "tx_packets": 0, "tx_bytes": 0, "rx_drops": 0,
             "tx_errors": 0, "rx_csum_completed": 0, "rx_gso_split": 0, "features": []},
            {"port": 2, "name": "eth0.10", "ifindex": null, "admin": "up", "oper": "no-carrier",
             "down_reason": "no carrier", "backend": "vlan 10 on eth0", "parent": "eth0",
             "vlan": {"tpid": "0x8100", "id": 10, "inner_id": null},
             "mac": "02:00:00:00:00:01", "mtu": 1500, "ipv4": [], "ipv6": ["2001:db8::1"],
             "rx_packets": 0, "rx_bytes": 0, "tx_packets": 0, "tx_bytes": 0, "features": []},
        ]),
    );
    conforms::<model::Routes>(
        "get",
        "/v1/routes",
        "200",
        json!({"ipv4": 2, "ipv6": 0, "routes": [
            {"prefix": "192.0.2.1/32", "source": "local", "next_hop": "local (kernel)"},
            {"prefix": "198.51.100.0/24", "source": "bgp", "next_hop": "via 192.0.2.2 dev eth0 lladdr 02:00:00:00:00:02"},
        ]}),
    );
    conforms::<model::RoutesSummary>(
        "get",
        "/v1/routes/summary",
        "200",
        json!({"ipv4": 3, "ipv6": 1, "by_source": {"route": 1, "neighbor": 1, "local": 2, "bgp": 0},
               "kernel_routes_mirrored": 5,
               "fib_memory_bytes": {"ipv4_tables": 1, "ipv6_tables": 2, "route_store": 3, "next_hops": 4, "total": 10},
               "netlink_events": 7, "resyncs": 1, "fib_errors": 0, "bgp_changes": 0, "bgp_unresolved": 0}),
    );
    conforms::<Vec<model::Neighbor>>(
        "get",
        "/v1/neighbors",
        "200",
        json!([{"ip": "192.0.2.2", "dev": "eth0", "mac": "02:00:00:00:00:02", "usable": true},
               {"ip": "fe80::1", "dev": "eth1", "mac": null, "usable": false}]),
    );
    conforms::<model::Counters>(
        "get",
        "/v1/counters",
        "200",
        json!({"rx": 10, "tx": 9, "vectors": 3, "drops": 1, "punts": 0, "forwarded": 9,
               "reasons": [{"node": "ip4-lookup", "reason": "Ip4NoRoute", "kind": "drop", "count": 1, "description": "no route"}],
               "features": [{"feature": "urpf", "arc": "ip4-unicast", "packets": 4, "drops": {"strict": 0}}],
               "workers": [
                   {"id": 0, "core": 1, "nice": -10, "nice_error": null, "rx": 10, "tx": 9, "forwarded": 9,
                    "vectors": 3, "idle_polls": 100, "sleeps": 4, "busy_ns": 500, "busy_ns_per_packet": 50.0},
                   {"id": 1, "core": null, "nice": null, "nice_error": "setpriority: EPERM", "rx": 0, "tx": 0,
                    "forwarded": 0, "vectors": 0, "idle_polls": 0, "sleeps": 0, "busy_ns": 0, "busy_ns_per_packet": null}],
               "sync": {"events": 1, "resyncs": 1, "fib_errors": 0, "bgp_changes": 0, "bgp_unresolved": 0},
               "glean": {"held": 0, "sent": 0, "expired": 0, "dropped": 0},
               "kernel_forwarded": {"ipv4": 0, "ipv6": null},
               "uptime_s": 12.5}),
    );
    conforms::<model::BgpStatus>("get", "/v1/bgp", "200", json!({"enabled": false}));
    conforms::<model::BgpStatus>(
        "get",
        "/v1/bgp",
        "200",
        json!({"enabled": true, "last_fib_change_monotonic_ns": 0, "speaker": {
            "asn": 65000, "router_id": "192.0.2.1", "prefixes_v4": 1, "prefixes_v6": 0, "paths": 1, "fib_changes": 1,
            "neighbors": [{"address": "192.0.2.2", "remote_as": 65001, "description": null, "state": "opensent",
                "state_s": 3, "remote_router_id": null, "hold_time": null, "families": ["ipv4", "ipv6"],
                "prefixes": 0, "updates_received": 0, "prefixes_announced": 0, "prefixes_withdrawn": 0,
                "treat_as_withdraw": 0, "attributes_discarded": 0, "as_loops": 0, "unresolved": 0,
                "route_refresh_sent": 0, "notifications_sent": 0, "notifications_received": 0,
                "established_transitions": 0, "last_error": "hold timer expired"}]}}),
    );
    conforms::<model::Version>(
        "get",
        "/v1/version",
        "200",
        json!({"version": "0.1.0 (commit abc)", "uptime_s": 1.5}),
    );
}

#[test]
fn config_trace_and_error_answers_in_the_wire_format_validate() {
    conforms::<model::ConfigText>("get", "/v1/config", "200", json!({"text": "[api]\n"}));
    conforms::<model::CheckResult>(
        "post",
        "/v1/config/check",
        "200",
        json!({"valid": true, "plan": ["add route 10.0.0.0/8"]}),
    );
    conforms::<model::CheckFailure>(
        "post",
        "/v1/config/check",
        "422",
        json!({"error": "f:1:1: x: bad", "problems": [{"line": 1, "column": 1, "path": "x", "message": "bad"}]}),
    );
    for path in ["/v1/config/apply", "/v1/config/rollback"] {
        conforms::<model::Applied>(
            "post",
            path,
            "200",
            json!({"history_id": null, "plan": [], "changed": [], "unchanged": []}),
        );
        conforms::<model::Applied>(
            "post",
            path,
            "200",
            json!({"history_id": 3, "plan": ["a", "b"], "changed": ["a"], "unchanged": ["b"]}),
        );
    }
    conforms::<model::ConfigDiff>("post", "/v1/config/diff", "200", json!({"diff": ""}));
    conforms::<Vec<model::HistoryEntry>>(
        "get",
        "/v1/config/history",
        "200",
        json!([{"id": 1, "time": 1700000000, "bytes": 10, "comment": null},
               {"id": 2, "time": 1700000001, "bytes": 11, "comment": "why"}]),
    );
    conforms::<model::HistoryText>(
        "get",
        "/v1/config/history/{id}",
        "200",
        json!({"id": 2, "text": "x = 1\n"}),
    );
    conforms::<model::TraceArmed>("post", "/v1/trace", "200", json!({"armed": 5}));
    conforms::<model::TraceShow>(
        "get",
        "/v1/trace",
        "200",
        json!({"text": "Packet 1 ...", "lost": 0, "traces": [
            {"seq": 1, "worker": 0, "port": 0, "port_name": "eth0", "len": 98, "ts_ns": 5,
             "summary": "IPv4 192.0.2.2 > 198.51.100.1 ICMP", "truncated": 0,
             "steps": [{"node": "ethernet-input", "text": "IPv4"}]}]}),
    );
    conforms::<model::TraceCleared>("delete", "/v1/trace", "200", json!({"cleared": true}));
    for (method, path, status) in [
        ("get", "/v1/routes", "400"),
        ("get", "/v1/interfaces", "401"),
        ("post", "/v1/config/apply", "409"),
        ("post", "/v1/config/apply", "422"),
        ("get", "/v1/config/history/{id}", "404"),
        ("post", "/v1/capture", "409"),
        ("get", "/metrics", "500"),
    ] {
        conforms::<model::ErrorBody>(method, path, status, json!({"error": "what was wrong"}));
    }
}
