//! The stand-in's own controls: fault injection, the listener going down
//! and up, the request log, roles (added, removed, all removed, rebuilt),
//! the ledger, and the `/__dev/` HTTP routes that mirror the handle. These are not main_server behaviour, so every test
//! is skipped against a real server.

use std::time::Duration;

use axum::http::StatusCode;
use neko_sidecar::devserver::RECALL_MEMORY;
use serde_json::json;

use crate::support::impatient_client;
use crate::support::target::{dev_target, split};

const CB: &str = "http://127.0.0.1:9/tool";

#[tokio::test]
async fn fail_next_answers_the_status_n_times_and_changes_nothing() {
    let Some((t, h)) = dev_target("fail_next").await else {
        return;
    };
    h.fail_next(2, StatusCode::SERVICE_UNAVAILABLE);
    let reg = json!({"name": "t", "callback_url": CB});
    assert_eq!(t.register(reg.clone()).await.0, 503);
    assert_eq!(t.get("/api/tools").await.0, 503);
    assert!(h.registry_snapshot().tool("小八", "t").is_none());
    assert_eq!(t.register(reg).await.0, 200);
    assert!(h.registry_snapshot().tool("小八", "t").is_some());
}

#[tokio::test]
async fn delayed_answer_still_takes_effect_when_the_client_gives_up() {
    let Some((t, h)) = dev_target("delay").await else {
        return;
    };
    h.set_delay(Duration::from_secs(30));
    let impatient = impatient_client(Duration::from_millis(300));
    let res = impatient
        .post(format!("{}/api/tools/register", t.url))
        .json(&json!({"name": "t", "callback_url": CB}))
        .send()
        .await;
    assert!(res.unwrap_err().is_timeout());
    let written = h
        .wait_for(Duration::from_secs(5), |h| {
            h.registry_snapshot().tool("Lanlan", "t").is_some()
        })
        .await;
    assert!(written);
    h.set_delay(Duration::ZERO);
    assert_eq!(t.get("/api/tools").await.0, 200);
}

#[tokio::test]
async fn stopped_listener_refuses_and_comes_back_on_the_same_port() {
    let Some((t, h)) = dev_target("listener").await else {
        return;
    };
    assert_eq!(
        t.register(json!({"name": "t", "callback_url": CB})).await.0,
        200
    );
    h.stop_listener().await;
    assert!(!h.is_listening().await);
    let err = t
        .client
        .get(format!("{}/api/tools", t.url))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_connect(), "{err}");
    h.start_listener().await.unwrap();
    // Down and up without a restart keeps the registry; a restart loses it.
    assert!(t.listed("小八", "t").await.is_some());
    h.restart();
    assert!(t.listed("小八", "t").await.is_none());
    assert_eq!(
        h.addr().port(),
        t.url.rsplit(':').next().unwrap().parse::<u16>().unwrap()
    );
}

#[tokio::test]
async fn stopping_ends_a_held_answer_at_once() {
    let Some((t, h)) = dev_target("stop_during_delay").await else {
        return;
    };
    h.set_delay(Duration::from_secs(600));
    let url = format!("{}/api/tools", t.url);
    let client = t.client.clone();
    let pending =
        tokio::spawn(async move { client.get(url).send().await.map(|r| r.status().as_u16()) });
    assert!(
        h.wait_for(Duration::from_secs(5), |h| !h.requests().is_empty())
            .await
    );
    tokio::time::timeout(Duration::from_secs(10), h.stop_listener())
        .await
        .expect("stop must not wait for the delay");
    let _ = pending.await.unwrap();
}

#[tokio::test]
async fn request_log_records_what_was_sent() {
    let Some((t, h)) = dev_target("request_log").await else {
        return;
    };
    t.get("/api/tools?role=Lanlan").await;
    t.register(json!({"name": "t", "callback_url": CB})).await;
    t.post_raw("/api/tools/clear", Some("text/plain"), b"not json")
        .await;
    t.get("/__dev/registry").await;
    let log = h.requests();
    let seen: Vec<_> = log
        .iter()
        .map(|r| {
            (
                r.method.as_str(),
                r.path.as_str(),
                r.query.clone(),
                r.body.clone(),
                r.status,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "GET",
                "/api/tools",
                Some("role=Lanlan".to_owned()),
                json!(null),
                Some(200)
            ),
            (
                "POST",
                "/api/tools/register",
                None,
                json!({"name": "t", "callback_url": CB}),
                Some(200)
            ),
            (
                "POST",
                "/api/tools/clear",
                None,
                json!("not json"),
                Some(422)
            ),
        ]
    );
    assert!(
        log.windows(2)
            .all(|w| w[0].seq < w[1].seq && w[0].at_unix_ms <= w[1].at_unix_ms)
    );
    let (_, over_http) = t.get("/__dev/requests").await;
    assert_eq!(over_http["requests"].as_array().unwrap().len(), 3);
    h.clear_request_log();
    assert!(h.requests().is_empty());
}

#[tokio::test]
async fn roles_can_be_added_and_removed() {
    let Some((t, h)) = dev_target("roles").await else {
        return;
    };
    t.register(json!({"name": "t", "callback_url": CB, "role": "小八"}))
        .await;
    assert!(h.add_role("Mochi"));
    assert!(!h.add_role("Mochi"));
    // A new role starts like a new session manager: the built-in, and the
    // ledger's global entries (there are none; `t` is scoped to 小八).
    assert_eq!(h.registry_snapshot().names("Mochi"), [RECALL_MEMORY]);
    assert_eq!(t.roles().await, ["小八", "Lanlan", "Mochi"]);
    assert!(h.remove_role("小八"));
    let (status, body) = t.get("/api/tools?role=小八").await;
    assert_eq!(
        (status, body),
        (404, json!({"detail": "unknown role: 小八"}))
    );
    assert_eq!(h.remove_all_roles(), ["Lanlan", "Mochi"]);
    assert!(h.registry_snapshot().roles.is_empty());
    assert!(h.remove_all_roles().is_empty());
}

#[tokio::test]
async fn dev_routes_mirror_the_handle() {
    let Some((t, h)) = dev_target("dev_routes").await else {
        return;
    };
    assert_eq!(
        t.post("/__dev/storage-blocked", &json!({"blocked": true}))
            .await
            .0,
        200
    );
    assert_eq!(t.get("/api/tools").await.0, 409);
    t.post("/__dev/storage-blocked", &json!({"blocked": false}))
        .await;

    t.post("/__dev/fail-next", &json!({"count": 1, "status": 502}))
        .await;
    assert_eq!(t.get("/api/tools").await.0, 502);
    assert_eq!(t.get("/api/tools").await.0, 200);

    t.post("/__dev/role-sync", &json!({"role": "Lanlan", "fail": true}))
        .await;
    let (_, body) = t
        .register(json!({"name": "t", "callback_url": CB, "parameters": {"type": "object"}}))
        .await;
    assert_eq!(body["failed_roles"][0]["role"], "Lanlan");

    let (status, reg) = t.get("/__dev/registry").await;
    assert_eq!(status, 200);
    assert_eq!(reg["roles"], json!(["小八", "Lanlan"]));
    assert_eq!(
        reg["tools_by_role"]["Lanlan"][1],
        json!({"name":"t","description":"","parameters":{"type":"object"},"callback_url":CB,"source":"external","timeout_seconds":30.0,"is_remote":true,"scope":"global"})
    );

    let (_, faults) = t.get("/__dev/faults").await;
    assert_eq!(
        faults,
        json!({"storage_blocked": false, "fail_next": null, "delay_ms": 0, "failing_roles": ["Lanlan"]})
    );

    let (_, body) = t.post("/__dev/roles/add", &json!({"role": "Mochi"})).await;
    assert_eq!(
        body,
        json!({"ok": true, "added": true, "roles": ["小八", "Lanlan", "Mochi"]})
    );
    let (_, body) = t
        .post("/__dev/roles/remove", &json!({"role": "Mochi"}))
        .await;
    assert_eq!(body["removed"], true);

    let (_, ledger) = t.get("/__dev/ledger").await;
    assert_eq!(ledger["ledger"][0]["role"], json!(null));
    assert_eq!(ledger["ledger"][0]["tool"]["name"], "t");
    t.post("/api/tools/clear", &json!({"source": "builtin"}))
        .await;
    let (_, body) = t
        .post("/__dev/roles/rebuild", &json!({"role": "小八"}))
        .await;
    assert_eq!(body, json!({"ok": true, "rebuilt": true, "role": "小八"}));
    assert_eq!(h.registry_snapshot().names("小八"), [RECALL_MEMORY, "t"]);
    assert_eq!(h.registry_snapshot().names("Lanlan"), ["t"]);
    let (_, body) = t
        .post("/__dev/roles/rebuild", &json!({"role": "Nobody"}))
        .await;
    assert_eq!(body["rebuilt"], false);

    let (_, body) = t.post("/__dev/roles/remove-all", &json!({})).await;
    assert_eq!(
        body,
        json!({"ok": true, "removed": ["小八", "Lanlan"], "roles": []})
    );
    assert_eq!(
        t.get("/api/tools").await.1,
        json!({"ok": true, "tools_by_role": {}})
    );
    t.post("/__dev/roles/add", &json!({"role": "小八"})).await;

    assert_eq!(
        h.registry_snapshot().names("小八"),
        [RECALL_MEMORY, "t"],
        "a role added back gets the ledger replayed"
    );
    assert_eq!(t.post("/__dev/restart", &json!({})).await.0, 200);
    assert!(h.registry_snapshot().tool("小八", "t").is_none());
    assert!(h.ledger().is_empty());

    let res = t
        .client
        .delete(format!("{}/__dev/requests", t.url))
        .send()
        .await
        .unwrap();
    assert_eq!(split(res).await, (200, json!({"ok": true})));
    assert!(h.requests().is_empty());

    assert_eq!(
        t.post("/__dev/fail-next", &json!({"count": "x"})).await.0,
        400
    );
}

#[tokio::test]
async fn dev_routes_keep_the_host_and_local_gates() {
    let Some((t, h)) = dev_target("dev_host_gate").await else {
        return;
    };
    t.post(
        "/api/tools/register",
        &json!({"name": "t", "callback_url": CB}),
    )
    .await;
    let res = t
        .client
        .post(format!("{}/__dev/restart", t.url))
        .header("host", "10.1.2.3")
        .send()
        .await
        .unwrap();
    assert_eq!(
        split(res).await,
        (401, json!({"detail": "instance_authorization_required"}))
    );
    assert!(
        h.registry_snapshot().tool("小八", "t").is_some(),
        "not restarted"
    );
    let res = t
        .client
        .post(format!("{}/__dev/restart", t.url))
        .header("host", "evil.test")
        .send()
        .await
        .unwrap();
    assert_eq!(
        split(res).await,
        (
            400,
            json!({"ok":false,"error_code":"untrusted_host","error":"Invalid Host header"})
        )
    );
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_like_fastapi() {
    let Some((t, _h)) = dev_target("fastapi_404_405").await else {
        return;
    };
    assert_eq!(
        t.get("/api/nothing").await,
        (404, json!({"detail": "Not Found"}))
    );
    assert_eq!(
        t.get("/api/tools/register").await,
        (405, json!({"detail": "Method Not Allowed"}))
    );
    assert_eq!(
        t.post("/api/tools", &json!({})).await,
        (405, json!({"detail": "Method Not Allowed"}))
    );
}
