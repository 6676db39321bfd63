//! The contract suite: one test per row or rule of CONTRACT.md's tool API,
//! asserting exact status codes and JSON shapes over real loopback sockets.
//!
//! By default each test starts its own in-process stand-in. With
//! `NEKO_MAIN_SERVER_URL` set, the tests that need no `/__dev/` control run
//! against that server instead (using names unique to this process), and
//! the others say they were skipped. The loopback-peer half of the local
//! gate cannot be exercised from loopback; it is unit-tested in
//! `devserver::gates`. The `Host` half is tested here.

use neko_sidecar::devserver::{DevServer, RECALL_MEMORY};
use serde_json::{Value, json};

use crate::support::target::{
    Target, dev_target, dev_target_with, raw_http, silent_on, split, target, unique,
};
use crate::support::{call, invoke, refused_port};

/// main_server's body limit: one byte more gets 413.
const MAX_BODY: usize = 16 * 1024 * 1024;

const CB: &str = "http://127.0.0.1:9/tool";

fn tool(name: &str, source: &str) -> Value {
    json!({"name": name, "callback_url": CB, "source": source})
}

// ---- Where it lives ----

#[tokio::test]
async fn untrusted_host_header_gets_400() {
    let t = target().await;
    for host in ["example.com", "example.com:48911", "localhost.evil.test"] {
        let res = t
            .client
            .get(format!("{}/api/tools", t.url))
            .header("host", host)
            .send()
            .await
            .unwrap();
        let (status, body) = split(res).await;
        assert_eq!(status, 400, "{host}");
        assert_eq!(
            body,
            json!({"ok":false,"error_code":"untrusted_host","error":"Invalid Host header"})
        );
    }
}

#[tokio::test]
async fn loopback_hosts_are_served() {
    let t = target().await;
    for host in [
        "localhost",
        "localhost:1234",
        "127.0.0.1:80",
        "127.8.9.10",
        "[::1]:48911",
    ] {
        let res = t
            .client
            .get(format!("{}/api/tools", t.url))
            .header("host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 200, "{host}");
    }
}

/// A GET of `/api/tools` naming `host`, with extra headers.
async fn get_naming(t: &Target, host: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut req = t
        .client
        .get(format!("{}/api/tools", t.url))
        .header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    split(req.send().await.unwrap()).await
}

#[tokio::test]
async fn a_non_loopback_ip_host_needs_instance_authorization() {
    let t = target().await;
    let required = json!({"detail": "instance_authorization_required"});
    for host in [
        "10.1.2.3",
        "10.1.2.3:48911",
        "[2001:db8::1]:80",
        "192.168.1.5",
    ] {
        assert_eq!(
            get_naming(&t, host, &[]).await,
            (401, required.clone()),
            "{host}"
        );
    }
    // Before routing and before body validation: a register is refused
    // the same way, and changes nothing.
    let name = unique("ct_not_local");
    let res = t
        .client
        .post(format!("{}/api/tools/register", t.url))
        .header("host", "10.1.2.3")
        .json(&tool(&name, "s"))
        .send()
        .await
        .unwrap();
    assert_eq!(split(res).await, (401, required));
    let roles = t.roles().await;
    assert!(
        t.listed(&roles[0], &name).await.is_none(),
        "refused, not written"
    );
}

#[tokio::test]
async fn the_host_gate_runs_before_the_local_gate() {
    let t = target().await;
    let (status, body) = get_naming(&t, "example.com", &[("authorization", "Bearer k")]).await;
    assert_eq!(
        (status, body),
        (
            400,
            json!({"ok":false,"error_code":"untrusted_host","error":"Invalid Host header"})
        )
    );
}

#[tokio::test]
async fn a_keyed_call_naming_another_host_is_served_unless_from_a_foreign_origin() {
    // A real server checks the key itself; the stand-in cannot know it.
    let Some((t, _h)) =
        dev_target("a_keyed_call_naming_another_host_is_served_unless_from_a_foreign_origin").await
    else {
        return;
    };
    let key = ("authorization", "Bearer instance-key");
    assert_eq!(get_naming(&t, "10.1.2.3", &[key]).await.0, 200);
    assert_eq!(
        get_naming(&t, "10.1.2.3", &[("cookie", "neko_session=abc")])
            .await
            .0,
        200
    );
    assert_eq!(
        get_naming(
            &t,
            "[2001:db8::1]:80",
            &[key, ("origin", "http://127.0.0.1:3000")]
        )
        .await
        .0,
        200
    );
    for origin in ["http://evil.test", "http://10.1.2.3:48911", "null"] {
        assert_eq!(
            get_naming(&t, "10.1.2.3", &[key, ("origin", origin)]).await,
            (403, json!({"detail": "origin_not_allowed"})),
            "{origin}"
        );
    }
    // Anything but a bearer token is no key.
    assert_eq!(
        get_naming(&t, "10.1.2.3", &[("authorization", "Basic dTpw")])
            .await
            .0,
        401
    );
}

/// A request head with `Host` set to the target's own address.
fn head(t: &Target, request_line: &str, host: Option<&str>, extra: &str) -> String {
    let url = reqwest::Url::parse(&t.url).unwrap();
    let own = format!(
        "{}:{}",
        url.host_str().unwrap(),
        url.port_or_known_default().unwrap()
    );
    format!(
        "{request_line}\r\nHost: {}\r\nContent-Type: application/json\r\n{extra}",
        host.unwrap_or(&own)
    )
}

#[tokio::test]
async fn a_declared_body_over_16_mib_gets_413_before_any_route() {
    let t = target().await;
    let too_large = json!({"ok": false, "error_code": "payload_too_large",
        "max_bytes": 16_777_216, "error": "请求体超过全局体积上限。"});
    let length = format!("Content-Length: {}\r\n", MAX_BODY + 1);
    // A route, an unknown path and a path that would redirect: all 413,
    // answered from the declared length: the client sends only the head,
    // as main_server answers before reading the body.
    for line in [
        "POST /api/tools/register HTTP/1.1",
        "POST /api/no_such_route HTTP/1.1",
        "POST /api/tools/register/ HTTP/1.1",
        "GET /api/tools HTTP/1.1",
    ] {
        assert_eq!(
            raw_http(&t.url, &head(&t, line, None, &length), &[]).await,
            (413, too_large.clone()),
            "{line}"
        );
    }
    // The access gates come first.
    let line = "POST /api/tools/register HTTP/1.1";
    assert_eq!(
        raw_http(&t.url, &head(&t, line, Some("10.1.2.3"), &length), &[])
            .await
            .0,
        401
    );
    assert_eq!(
        raw_http(&t.url, &head(&t, line, Some("example.com"), &length), &[])
            .await
            .0,
        400
    );
}

#[tokio::test]
async fn a_streamed_body_over_16_mib_gets_400_as_a_body_that_cannot_be_parsed() {
    let t = target().await;
    let chunked = "Transfer-Encoding: chunked\r\n";
    // One chunk of exactly the limit, then one byte more, and no final
    // chunk: the server has to count, it cannot know the length ahead.
    let full = vec![b' '; MAX_BODY];
    let size = format!("{MAX_BODY:x}\r\n");
    let head = head(&t, "POST /api/tools/register HTTP/1.1", None, chunked);
    let answer = raw_http(&t.url, &head, &[size.as_bytes(), &full, b"\r\n1\r\n}\r\n"]).await;
    assert_eq!(
        answer,
        (
            400,
            json!({"detail": "There was an error parsing the body"})
        )
    );
}

/// A register body of exactly `len` bytes: the schema carries the padding.
fn register_body_of(len: usize, name: &str, source: &str) -> Vec<u8> {
    let shell = json!({"name": name, "callback_url": CB, "source": source,
        "parameters": {"type": "object", "properties": {}, "x-pad": ""}})
    .to_string();
    let pad = len - shell.len();
    let body = shell.replacen(
        r#""x-pad":"""#,
        &format!(r#""x-pad":"{}""#, "p".repeat(pad)),
        1,
    );
    assert_eq!(body.len(), len);
    body.into_bytes()
}

#[tokio::test]
async fn bodies_up_to_16_mib_are_accepted() {
    let t = target().await;
    let src = unique("ct_src_big");
    // 10 MiB is far past axum's own 2 MB default limit; 16 MiB is the edge.
    for (i, len) in [10 * 1024 * 1024, MAX_BODY].into_iter().enumerate() {
        let name = unique(&format!("ct_big{i}"));
        let res = t
            .client
            .post(format!("{}/api/tools/register", t.url))
            .header("content-type", "application/json")
            .body(register_body_of(len, &name, &src))
            .send()
            .await
            .unwrap();
        let (status, body) = split(res).await;
        assert_eq!(status, 200, "{len} bytes: {body}");
        assert_eq!(body["registered"], json!(name));
        if let Some(h) = &t.handle {
            let held = h.registry_snapshot().tool("小八", &name).cloned().unwrap();
            let pad = held.parameters["x-pad"].as_str().unwrap().len();
            assert!(pad > len - 200, "the whole schema is held: {pad}");
        }
    }
    t.post("/api/tools/clear", &json!({"source": src})).await;
}

#[tokio::test]
async fn trailing_slash_answers_307_keeping_the_query() {
    let t = target().await;
    let roles = t.roles().await;
    let asked =
        reqwest::Url::parse(&format!("{}/api/tools/?role={}&x=1", t.url, roles[0])).unwrap();
    let res = t.client.get(asked.clone()).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 307);
    let location = res.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(
        location,
        format!("{}/api/tools?{}", t.url, asked.query().unwrap())
    );
    let res = t
        .client
        .post(format!("{}/api/tools/register/", t.url))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 307);
    assert!(
        res.headers()["location"]
            .to_str()
            .unwrap()
            .ends_with("/api/tools/register")
    );
}

#[tokio::test]
async fn non_json_body_fails_validation_with_422() {
    let t = target().await;
    let (status, body) = t
        .post_raw(
            "/api/tools/register",
            Some("text/plain"),
            br#"{"name":"x"}"#,
        )
        .await;
    assert_eq!(status, 422);
    assert_eq!(body["detail"][0]["type"], "model_attributes_type");
    assert_eq!(body["detail"][0]["loc"], json!(["body"]));
    let (status, body) = t
        .post_raw(
            "/api/tools/clear",
            Some("application/x-www-form-urlencoded"),
            b"source=x",
        )
        .await;
    assert_eq!(status, 422);
    assert_eq!(body["detail"][0]["loc"], json!(["body"]));
}

#[tokio::test]
async fn empty_body_is_missing_with_422() {
    let t = target().await;
    let (status, body) = t
        .post_raw("/api/tools/register", Some("application/json"), b"")
        .await;
    assert_eq!(status, 422);
    assert_eq!(
        body,
        json!({"detail":[{"type":"missing","loc":["body"],"msg":"Field required","input":null}]})
    );
}

#[tokio::test]
async fn broken_json_is_json_invalid_with_its_position() {
    let t = target().await;
    let (status, body) = t
        .post_raw(
            "/api/tools/register",
            Some("application/json"),
            br#"{"name": }"#,
        )
        .await;
    assert_eq!(status, 422);
    assert_eq!(body["detail"][0]["type"], "json_invalid");
    assert_eq!(body["detail"][0]["loc"], json!(["body", 9]));
    assert_eq!(body["detail"][0]["msg"], "JSON decode error");
}

#[tokio::test]
async fn storage_blocked_answers_409_on_every_api_route() {
    let Some((t, h)) = dev_target("storage_blocked_answers_409_on_every_api_route").await else {
        return;
    };
    h.set_storage_blocked(true);
    let routes = [
        ("/api/tools/register", Some(tool("t", "s"))),
        ("/api/tools/unregister", Some(json!({"name":"t"}))),
        ("/api/tools/clear", Some(json!({"source":"s"}))),
        ("/api/tools", None),
        ("/api/tools/", None),
    ];
    for (path, body) in routes {
        let (status, answer) = match body {
            Some(b) => t.post(path, &b).await,
            None => t.get(path).await,
        };
        assert_eq!(status, 409, "{path}");
        assert_eq!(answer["ok"], false);
        assert_eq!(answer["error_code"], "storage_startup_blocked");
        assert_eq!(answer["blocking_reason"], "storage_initializing");
        assert_eq!(answer["limited_mode"], true);
        assert!(answer["error"].is_string());
    }
    assert_eq!(
        h.registry_snapshot().tool("小八", "t"),
        None,
        "a blocked register must not take effect"
    );
    h.set_storage_blocked(false);
    assert_eq!(t.register(tool("t", "s")).await.0, 200);
}

#[tokio::test]
async fn restart_loses_every_registration_and_the_ledger_and_brings_builtins_back() {
    let Some((t, h)) =
        dev_target("restart_loses_every_registration_and_the_ledger_and_brings_builtins_back")
            .await
    else {
        return;
    };
    assert_eq!(t.register(tool("t", "s")).await.0, 200);
    t.post("/api/tools/clear", &json!({"source":"builtin"}))
        .await;
    h.restart();
    assert_eq!(listed_names(&t, "Lanlan").await, [RECALL_MEMORY]);
    assert!(h.ledger().is_empty());
    assert!(h.rebuild_role("Lanlan"));
    assert_eq!(
        listed_names(&t, "Lanlan").await,
        [RECALL_MEMORY],
        "nothing left to replay"
    );
}

/// The names `GET /api/tools` lists for `role`, in order.
async fn listed_names(t: &Target, role: &str) -> Vec<String> {
    let (status, body) = t.get("/api/tools").await;
    assert_eq!(status, 200, "{body}");
    body["tools_by_role"][role]
        .as_array()
        .unwrap_or_else(|| panic!("no role {role}: {body}"))
        .iter()
        .map(|x| x["name"].as_str().unwrap().to_owned())
        .collect()
}

// ---- Roles ----

#[tokio::test]
async fn unknown_role_answers_404_on_every_route() {
    let t = target().await;
    let role = unique("no_such_role");
    let detail = json!({ "detail": format!("unknown role: {role}") });
    let mut reg = tool("t", "s");
    reg["role"] = json!(role);
    assert_eq!(t.register(reg).await, (404, detail.clone()));
    assert_eq!(
        t.post("/api/tools/unregister", &json!({"name":"t","role":role}))
            .await,
        (404, detail.clone())
    );
    assert_eq!(
        t.post("/api/tools/clear", &json!({"source":"s","role":role}))
            .await,
        (404, detail.clone())
    );
    assert_eq!(
        t.get(&format!("/api/tools?role={role}")).await,
        (404, detail)
    );
}

#[tokio::test]
async fn invalid_body_for_unknown_role_is_422_not_404() {
    let t = target().await;
    let (status, body) = t
        .register(json!({"name":"", "callback_url": CB, "role": unique("no_such_role")}))
        .await;
    assert_eq!(status, 422);
    assert_eq!(body["detail"][0]["type"], "string_too_short");
}

#[tokio::test]
async fn empty_role_acts_as_null() {
    let t = target().await;
    let roles = t.roles().await;
    let name = unique("ct_empty_role");
    let mut reg = tool(&name, &unique("ct_src_empty_role"));
    reg["role"] = json!("");
    let (status, body) = t.register(reg).await;
    assert_eq!(status, 200);
    assert_eq!(body["affected_roles"], json!(roles));
    for role in &roles {
        assert!(t.listed(role, &name).await.is_some(), "{role}");
    }
    t.post("/api/tools/unregister", &json!({"name": name, "role": ""}))
        .await;
}

#[tokio::test]
async fn with_no_role_at_all_a_register_is_ok_false_and_records_nothing() {
    let Some((t, h)) =
        dev_target("with_no_role_at_all_a_register_is_ok_false_and_records_nothing").await
    else {
        return;
    };
    assert_eq!(h.remove_all_roles(), ["小八", "Lanlan"]);
    assert_eq!(
        t.get("/api/tools").await,
        (200, json!({"ok":true,"tools_by_role":{}}))
    );
    let (status, body) = t.register(tool("t", "s")).await;
    assert_eq!(
        (status, body),
        (
            200,
            json!({"ok":false,"registered":"t","affected_roles":[],"failed_roles":[],"error":"no role accepted the registration"})
        )
    );
    assert!(h.ledger().is_empty(), "not even in the ledger");
    // A role created later holds only the built-in: register again.
    assert!(h.add_role("小八"));
    assert_eq!(listed_names(&t, "小八").await, [RECALL_MEMORY]);
    let (_, body) = t.register(tool("t", "s")).await;
    assert_eq!(body["affected_roles"], json!(["小八"]));
}

#[tokio::test]
async fn a_stand_in_can_start_with_no_role() {
    let Some((t, h)) = dev_target_with(
        "a_stand_in_can_start_with_no_role",
        DevServer::builder().roles(Vec::<String>::new()),
    )
    .await
    else {
        return;
    };
    assert_eq!(
        t.get("/api/tools").await,
        (200, json!({"ok":true,"tools_by_role":{}}))
    );
    assert_eq!(t.register(tool("t", "s")).await.1["ok"], false);
    assert!(h.registry_snapshot().roles.is_empty());
}

// ---- The ledger ----

#[tokio::test]
async fn a_rebuilt_role_gets_the_builtin_and_the_ledger_replayed_in_order() {
    let Some((t, h)) =
        dev_target("a_rebuilt_role_gets_the_builtin_and_the_ledger_replayed_in_order").await
    else {
        return;
    };
    assert_eq!(t.register(tool("g", "a")).await.0, 200);
    let mut scoped = tool("s", "a");
    scoped["role"] = json!("Lanlan");
    assert_eq!(t.register(scoped).await.0, 200);
    assert_eq!(t.register(tool("x", "b")).await.0, 200);
    let mut mine = tool("x", "c");
    mine["role"] = json!("Lanlan");
    assert_eq!(t.register(mine).await.0, 200);
    // Lose the built-in everywhere: only a rebuild brings it back.
    t.post("/api/tools/clear", &json!({"source": "builtin"}))
        .await;
    let before = listed_names(&t, "Lanlan").await;
    assert_eq!(before, ["g", "s", "x"]);

    assert!(h.rebuild_role("Lanlan"));
    assert_eq!(
        listed_names(&t, "Lanlan").await,
        [RECALL_MEMORY, "g", "s", "x"]
    );
    assert_eq!(t.listed("Lanlan", "x").await.unwrap()["source"], "c");
    assert_eq!(
        listed_names(&t, "小八").await,
        ["g", "x"],
        "only the rebuilt role changes"
    );
    assert!(!h.rebuild_role("Nobody"));
}

#[tokio::test]
async fn an_ok_false_registration_is_replayed_until_a_clear_of_its_source_succeeds() {
    let Some((t, h)) =
        dev_target("an_ok_false_registration_is_replayed_until_a_clear_of_its_source_succeeds")
            .await
    else {
        return;
    };
    h.fail_role_sync("小八", true);
    h.fail_role_sync("Lanlan", true);
    assert_eq!(t.register(tool("t", "s")).await.1["ok"], false);
    // The clear fails on every role: the registry lets go, the ledger not.
    let (_, body) = t.post("/api/tools/clear", &json!({"source": "s"})).await;
    assert_eq!(
        (body["ok"].clone(), body["removed"].clone()),
        (json!(false), json!(2))
    );
    assert!(t.listed("小八", "t").await.is_none());
    assert!(h.rebuild_role("小八"));
    assert!(t.listed("小八", "t").await.is_some(), "replayed");
    assert!(t.listed("Lanlan", "t").await.is_none(), "not rebuilt");

    h.fail_role_sync("小八", false);
    h.fail_role_sync("Lanlan", false);
    let (_, body) = t.post("/api/tools/clear", &json!({"source": "s"})).await;
    assert_eq!(body["ok"], true);
    assert!(h.ledger().is_empty());
    for role in ["小八", "Lanlan"] {
        assert!(h.rebuild_role(role));
        assert_eq!(listed_names(&t, role).await, [RECALL_MEMORY], "{role}");
    }
}

#[tokio::test]
async fn an_unregister_removes_the_ledger_entry() {
    let Some((t, h)) = dev_target("an_unregister_removes_the_ledger_entry").await else {
        return;
    };
    t.register(tool("t", "s")).await;
    t.register(tool("u", "s")).await;
    let (_, body) = t
        .post("/api/tools/unregister", &json!({"name": "t", "role": null}))
        .await;
    assert_eq!(body["ok"], true);
    let left: Vec<_> = h.ledger().into_iter().map(|e| e.tool.name).collect();
    assert_eq!(left, ["u"]);
    assert!(h.rebuild_role("小八"));
    assert_eq!(listed_names(&t, "小八").await, [RECALL_MEMORY, "u"]);
}

#[tokio::test]
async fn a_new_role_gets_the_builtin_and_the_ledgers_global_and_own_entries() {
    let Some((t, h)) =
        dev_target("a_new_role_gets_the_builtin_and_the_ledgers_global_and_own_entries").await
    else {
        return;
    };
    t.register(tool("g", "s")).await;
    let mut scoped = tool("mine", "s");
    scoped["role"] = json!("小八");
    t.register(scoped).await;
    assert!(h.add_role("Mochi"));
    assert_eq!(listed_names(&t, "Mochi").await, [RECALL_MEMORY, "g"]);
    // The same role gone and back: its own entries come back too.
    assert!(h.remove_role("小八"));
    assert!(h.add_role("小八"));
    assert_eq!(listed_names(&t, "小八").await, [RECALL_MEMORY, "g", "mine"]);
}

// ---- Dead-plugin eviction ----

#[tokio::test]
async fn the_third_connect_failure_evicts_from_every_role_and_the_ledger() {
    let Some((t, h)) =
        dev_target("the_third_connect_failure_evicts_from_every_role_and_the_ledger").await
    else {
        return;
    };
    let dead = refused_port();
    let other = refused_port();
    t.register_at(
        "a",
        &format!("http://127.0.0.1:{dead}/a"),
        "plugin:p",
        None,
        30.0,
    )
    .await;
    t.register_at(
        "b",
        &format!("http://127.0.0.1:{dead}/b"),
        "plugin:p",
        Some("Lanlan"),
        30.0,
    )
    .await;
    t.register_at(
        "c",
        &format!("http://127.0.0.1:{other}/c"),
        "plugin:p",
        None,
        30.0,
    )
    .await;
    for _ in 0..2 {
        invoke(&h, call("a", json!({}))).await;
    }
    assert_eq!(
        listed_names(&t, "Lanlan").await,
        [RECALL_MEMORY, "a", "b", "c"]
    );
    invoke(&h, call("a", json!({}))).await;
    for role in ["小八", "Lanlan"] {
        assert_eq!(listed_names(&t, role).await, [RECALL_MEMORY, "c"], "{role}");
        assert!(h.rebuild_role(role));
        assert_eq!(
            listed_names(&t, role).await,
            [RECALL_MEMORY, "c"],
            "{role}: a rebuild must not bring evicted tools back"
        );
    }
    let left: Vec<_> = h.ledger().into_iter().map(|e| e.tool.name).collect();
    assert_eq!(left, ["c"]);
}

#[tokio::test]
async fn a_read_timeout_resets_the_connect_failure_count() {
    let Some((t, h)) = dev_target("a_read_timeout_resets_the_connect_failure_count").await else {
        return;
    };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], refused_port()));
    t.register_at("a", &format!("http://{addr}/a"), "plugin:p", None, 0.2)
        .await;
    invoke(&h, call("a", json!({}))).await;
    invoke(&h, call("a", json!({}))).await;
    // The plugin is back but silent: the call times out reading, which is
    // not a connect failure, so the count starts again from zero.
    let holder = silent_on(tokio::net::TcpListener::bind(addr).await.unwrap());
    invoke(&h, call("a", json!({}))).await;
    holder.abort();
    let _ = holder.await;
    invoke(&h, call("a", json!({}))).await;
    invoke(&h, call("a", json!({}))).await;
    assert!(
        t.listed("小八", "a").await.is_some(),
        "two connect failures after a read timeout must not evict"
    );
    invoke(&h, call("a", json!({}))).await;
    assert!(t.listed("小八", "a").await.is_none());
}

// ---- POST /api/tools/register ----

#[tokio::test]
async fn register_answers_ok_with_affected_roles() {
    let t = target().await;
    let roles = t.roles().await;
    let name = unique("ct_register_ok");
    let (status, body) = t.register(tool(&name, &unique("ct_src_ok"))).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok":true,"registered":name,"affected_roles":roles,"failed_roles":[]})
    );
    t.post("/api/tools/unregister", &json!({"name": name}))
        .await;
}

#[tokio::test]
async fn register_applies_defaults_and_ignores_unknown_fields() {
    let t = target().await;
    let roles = t.roles().await;
    let name = unique("ct_defaults");
    let (status, _) = t
        .register(json!({"name": name, "callback_url": CB, "frobnicate": [1, 2]}))
        .await;
    assert_eq!(status, 200);
    let listed = t.listed(&roles[0], &name).await.unwrap();
    assert_eq!(
        listed,
        json!({"name":name,"description":"","source":"external","callback_url":CB,"is_remote":true})
    );
    if let Some(h) = &t.handle {
        let held = h
            .registry_snapshot()
            .tool(&roles[0], &name)
            .cloned()
            .unwrap();
        assert_eq!(held.parameters, json!({"type":"object","properties":{}}));
        assert_eq!(held.timeout_seconds, 30.0);
    }
    t.post("/api/tools/unregister", &json!({"name": name}))
        .await;
}

#[tokio::test]
async fn name_must_be_1_to_64_chars_and_nothing_else_is_checked() {
    let t = target().await;
    let (status, body) = t.register(json!({"name": "", "callback_url": CB})).await;
    assert_eq!(status, 422);
    assert_eq!(
        body,
        json!({"detail":[{"type":"string_too_short","loc":["body","name"],"msg":"String should have at least 1 character","input":"","ctx":{"min_length":1}}]})
    );
    let long = "n".repeat(65);
    let (status, body) = t.register(json!({"name": long, "callback_url": CB})).await;
    assert_eq!(status, 422);
    assert_eq!(
        body,
        json!({"detail":[{"type":"string_too_long","loc":["body","name"],"msg":"String should have at most 64 characters","input":long,"ctx":{"max_length":64}}]})
    );
    let src = unique("ct_src_names");
    for name in [
        format!("{}{}", unique("x"), "猫".repeat(40)),
        format!("{} with spaces/and?#", unique("odd")),
    ] {
        let name: String = name.chars().take(64).collect();
        assert_eq!(t.register(tool(&name, &src)).await.0, 200, "{name}");
    }
    let (_, body) = t.post("/api/tools/clear", &json!({"source": src})).await;
    assert_eq!(body["removed"].as_u64().unwrap() % 2, 0);
}

#[tokio::test]
async fn missing_required_fields_are_422_missing() {
    let t = target().await;
    let (status, body) = t.register(json!({"description": "d"})).await;
    assert_eq!(status, 422);
    assert_eq!(
        body,
        json!({"detail":[
            {"type":"missing","loc":["body","name"],"msg":"Field required","input":{"description":"d"}},
            {"type":"missing","loc":["body","callback_url"],"msg":"Field required","input":{"description":"d"}}
        ]})
    );
}

#[tokio::test]
async fn wrong_types_are_422_with_pydantic_types() {
    let t = target().await;
    let (status, body) = t
        .register(json!({"name": 5, "description": null, "parameters": "{}", "callback_url": CB, "role": 1, "source": [], "timeout_seconds": "soon"}))
        .await;
    assert_eq!(status, 422);
    let got: Vec<(Value, Value, Value)> = body["detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["type"].clone(), e["loc"][1].clone(), e["msg"].clone()))
        .collect();
    assert_eq!(
        got,
        [
            (
                json!("string_type"),
                json!("name"),
                json!("Input should be a valid string")
            ),
            (
                json!("string_type"),
                json!("description"),
                json!("Input should be a valid string")
            ),
            (
                json!("dict_type"),
                json!("parameters"),
                json!("Input should be a valid dictionary")
            ),
            (
                json!("string_type"),
                json!("role"),
                json!("Input should be a valid string")
            ),
            (
                json!("string_type"),
                json!("source"),
                json!("Input should be a valid string")
            ),
            (
                json!("float_parsing"),
                json!("timeout_seconds"),
                json!("Input should be a valid number, unable to parse string as a number")
            ),
        ]
    );
}

#[tokio::test]
async fn callback_url_must_be_http_on_loopback() {
    let t = target().await;
    let src = unique("ct_src_cb");
    for (i, url) in [
        "http://127.0.0.1:9/x",
        "https://127.3.4.5/x",
        "http://localhost:8/x",
        "http://[::1]:9/x",
        "http://[::ffff:127.0.0.1]:9/x",
    ]
    .iter()
    .enumerate()
    {
        let (status, body) = t.register(json!({"name": unique(&format!("ct_cb_ok{i}")), "callback_url": url, "source": src})).await;
        assert_eq!(status, 200, "{url}: {body}");
    }
    for url in [
        "http://10.0.0.1/x",
        "http://example.com/x",
        "ftp://127.0.0.1/x",
        "http://[::ffff:10.0.0.1]/x",
        "127.0.0.1:9/x",
        "http://127.1/x",
    ] {
        let (status, body) = t
            .register(json!({"name": "ct_cb_bad", "callback_url": url}))
            .await;
        assert_eq!(status, 422, "{url}");
        let e = &body["detail"][0];
        assert_eq!(
            (e["type"].clone(), e["loc"].clone(), e["input"].clone()),
            (
                json!("value_error"),
                json!(["body", "callback_url"]),
                json!(url)
            )
        );
        assert!(
            e["msg"].as_str().unwrap().starts_with("Value error, "),
            "{e}"
        );
    }
    t.post("/api/tools/clear", &json!({"source": src})).await;
}

#[tokio::test]
async fn timeout_seconds_must_be_above_0_and_at_most_300() {
    let t = target().await;
    let cases = [
        (json!(0), "greater_than", "Input should be greater than 0"),
        (
            json!(-1.5),
            "greater_than",
            "Input should be greater than 0",
        ),
        (
            json!(300.5),
            "less_than_equal",
            "Input should be less than or equal to 300",
        ),
        (json!(null), "float_type", "Input should be a valid number"),
    ];
    for (value, kind, msg) in cases {
        let (status, body) = t
            .register(json!({"name": "ct_to", "callback_url": CB, "timeout_seconds": value}))
            .await;
        assert_eq!(status, 422, "{value}");
        let e = &body["detail"][0];
        assert_eq!(
            (e["type"].clone(), e["msg"].clone(), e["input"].clone()),
            (json!(kind), json!(msg), value)
        );
    }
    let src = unique("ct_src_to");
    for (i, ok) in [json!(300), json!(0.25), json!("12")]
        .into_iter()
        .enumerate()
    {
        let name = unique(&format!("ct_to_ok{i}"));
        assert_eq!(
            t.register(
                json!({"name": name, "callback_url": CB, "timeout_seconds": ok, "source": src})
            )
            .await
            .0,
            200
        );
    }
    if let Some(h) = &t.handle {
        assert_eq!(
            h.registry_snapshot()
                .tool("小八", &unique("ct_to_ok1"))
                .unwrap()
                .timeout_seconds,
            0.25
        );
    }
    t.post("/api/tools/clear", &json!({"source": src})).await;
}

#[tokio::test]
async fn register_with_no_role_accepting_is_ok_false_but_written() {
    let Some((t, h)) = dev_target("register_with_no_role_accepting_is_ok_false_but_written").await
    else {
        return;
    };
    h.fail_role_sync("小八", true);
    let mut reg = tool("t", "s");
    reg["role"] = json!("小八");
    let (status, body) = t.register(reg).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok":false,"registered":"t","affected_roles":[],
               "failed_roles":[{"role":"小八","error":"session tool sync failed (injected by dev-server)"}],
               "error":"no role accepted the registration"})
    );
    assert!(
        t.listed("小八", "t").await.is_some(),
        "the registry is written before the failing sync"
    );
}

#[tokio::test]
async fn partial_success_is_ok_true_with_failed_roles() {
    let Some((t, h)) = dev_target("partial_success_is_ok_true_with_failed_roles").await else {
        return;
    };
    h.fail_role_sync("Lanlan", true);
    let (status, body) = t.register(tool("t", "s")).await;
    assert_eq!(status, 200);
    assert_eq!(body["ok"], true);
    assert_eq!(body["affected_roles"], json!(["小八"]));
    assert_eq!(body["failed_roles"][0]["role"], "Lanlan");
    h.fail_role_sync("Lanlan", false);
    assert_eq!(
        t.register(tool("u", "s")).await.1["failed_roles"],
        json!([])
    );
}

#[tokio::test]
async fn registering_an_existing_name_replaces_it_whatever_its_source() {
    let t = target().await;
    let roles = t.roles().await;
    let name = unique("ct_replace");
    let first = unique("ct_src_a");
    let second = unique("ct_src_b");
    assert_eq!(
        t.register(
            json!({"name": name, "callback_url": CB, "source": first, "description": "old"})
        )
        .await
        .0,
        200
    );
    let new_schema =
        json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]});
    let cb2 = "http://127.0.0.1:10/v2";
    let (status, _) =
        t.register(json!({"name": name, "callback_url": cb2, "source": second, "description": "new", "parameters": new_schema, "timeout_seconds": 7})).await;
    assert_eq!(status, 200);
    let listed = t.listed(&roles[0], &name).await.unwrap();
    assert_eq!(
        listed,
        json!({"name":name,"description":"new","source":second,"callback_url":cb2,"is_remote":true})
    );
    let (_, body) = t.get("/api/tools").await;
    let copies = body["tools_by_role"][&roles[0]]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["name"] == json!(name))
        .count();
    assert_eq!(copies, 1);
    if let Some(h) = &t.handle {
        let held = h
            .registry_snapshot()
            .tool(&roles[0], &name)
            .cloned()
            .unwrap();
        assert_eq!((held.parameters, held.timeout_seconds), (new_schema, 7.0));
    }
    t.post("/api/tools/unregister", &json!({"name": name}))
        .await;
}

#[tokio::test]
async fn global_registration_replaces_role_scoped_copies_in_every_role() {
    let t = target().await;
    let roles = t.roles().await;
    let name = unique("ct_global_over_role");
    let src = unique("ct_src_gor");
    for role in &roles {
        let mut reg = json!({"name": name, "callback_url": CB, "source": format!("{src}_{role}"), "role": role});
        reg["description"] = json!(format!("scoped to {role}"));
        assert_eq!(t.register(reg).await.0, 200);
    }
    assert_eq!(
        t.register(
            json!({"name": name, "callback_url": CB, "source": src, "description": "global"})
        )
        .await
        .0,
        200
    );
    for role in &roles {
        let listed = t.listed(role, &name).await.unwrap();
        assert_eq!(
            (listed["description"].clone(), listed["source"].clone()),
            (json!("global"), json!(src)),
            "{role}"
        );
    }
    t.post("/api/tools/unregister", &json!({"name": name}))
        .await;
}

#[tokio::test]
async fn role_scoped_registration_of_a_global_name_changes_only_that_role() {
    let t = target().await;
    let roles = t.roles().await;
    if roles.len() < 2 {
        eprintln!("skipped: needs two roles");
        return;
    }
    let name = unique("ct_role_over_global");
    assert_eq!(
        t.register(json!({"name": name, "callback_url": CB, "description": "global"}))
            .await
            .0,
        200
    );
    let (_, body) = t
        .register(
            json!({"name": name, "callback_url": CB, "description": "mine", "role": roles[1]}),
        )
        .await;
    assert_eq!(body["affected_roles"], json!([roles[1]]));
    assert_eq!(
        t.listed(&roles[0], &name).await.unwrap()["description"],
        "global"
    );
    assert_eq!(
        t.listed(&roles[1], &name).await.unwrap()["description"],
        "mine"
    );
    // A global unregister removes both copies.
    let (_, body) = t
        .post(
            "/api/tools/unregister",
            &json!({"name": name, "role": null}),
        )
        .await;
    assert_eq!(body["removed"], true);
    assert!(t.listed(&roles[0], &name).await.is_none());
    assert!(t.listed(&roles[1], &name).await.is_none());
}

// ---- POST /api/tools/unregister ----

#[tokio::test]
async fn unregister_removes_whoever_registered_it() {
    let t = target().await;
    let roles = t.roles().await;
    let name = unique("ct_unreg");
    t.register(json!({"name": name, "callback_url": CB, "source": unique("someone_else")}))
        .await;
    let (status, body) = t
        .post(
            "/api/tools/unregister",
            &json!({"name": name, "role": null}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok":true,"removed":true,"name":name,"affected_roles":roles,"failed_roles":[]})
    );
    assert!(t.listed(&roles[0], &name).await.is_none());
}

#[tokio::test]
async fn unregister_of_an_unknown_name_is_ok_but_not_removed() {
    let t = target().await;
    let name = unique("ct_never_registered");
    let (status, body) = t
        .post("/api/tools/unregister", &json!({"name": name}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        (
            body["ok"].clone(),
            body["removed"].clone(),
            body["name"].clone()
        ),
        (json!(true), json!(false), json!(name))
    );
    assert_eq!(body["failed_roles"], json!([]));
}

#[tokio::test]
async fn unregister_with_a_role_removes_only_that_roles_copy() {
    let t = target().await;
    let roles = t.roles().await;
    let name = unique("ct_unreg_role");
    t.register(json!({"name": name, "callback_url": CB})).await;
    let (_, body) = t
        .post(
            "/api/tools/unregister",
            &json!({"name": name, "role": roles[0]}),
        )
        .await;
    assert_eq!(body["affected_roles"], json!([roles[0]]));
    assert!(t.listed(&roles[0], &name).await.is_none());
    if roles.len() > 1 {
        assert!(t.listed(&roles[1], &name).await.is_some());
    }
    t.post("/api/tools/unregister", &json!({"name": name}))
        .await;
}

// ---- POST /api/tools/clear ----

#[tokio::test]
async fn clear_needs_a_source_of_at_least_one_char() {
    let t = target().await;
    let (status, body) = t
        .post("/api/tools/clear", &json!({"source": "", "role": null}))
        .await;
    assert_eq!(status, 422);
    assert_eq!(
        body,
        json!({"detail":[{"type":"string_too_short","loc":["body","source"],"msg":"String should have at least 1 character","input":"","ctx":{"min_length":1}}]})
    );
    let (status, body) = t.post("/api/tools/clear", &json!({"role": null})).await;
    assert_eq!(status, 422);
    assert_eq!(body["detail"][0]["type"], "missing");
    assert_eq!(body["detail"][0]["loc"], json!(["body", "source"]));
}

#[tokio::test]
async fn clear_counts_tool_role_pairs() {
    let t = target().await;
    let roles = t.roles().await;
    let src = unique("ct_src_clear");
    t.register(json!({"name": unique("ct_clear_g"), "callback_url": CB, "source": src}))
        .await;
    t.register(
        json!({"name": unique("ct_clear_r"), "callback_url": CB, "source": src, "role": roles[0]}),
    )
    .await;
    let (status, body) = t
        .post("/api/tools/clear", &json!({"source": src, "role": null}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok":true,"removed":roles.len() + 1,"source":src,"affected_roles":roles,"failed_roles":[]})
    );
    let (_, body) = t.post("/api/tools/clear", &json!({"source": src})).await;
    assert_eq!(
        (body["ok"].clone(), body["removed"].clone()),
        (json!(true), json!(0))
    );
}

#[tokio::test]
async fn clearing_source_builtin_deletes_the_builtins() {
    // Never run against a real server: this is the trap itself.
    let Some((t, _h)) = dev_target("clearing_source_builtin_deletes_the_builtins").await else {
        return;
    };
    let (status, body) = t
        .post("/api/tools/clear", &json!({"source": "builtin"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["removed"], 2);
    let (_, body) = t.get("/api/tools").await;
    assert_eq!(
        body,
        json!({"ok":true,"tools_by_role":{"小八":[],"Lanlan":[]}})
    );
}

// ---- GET /api/tools ----

#[tokio::test]
async fn get_lists_every_role_without_schema_timeout_or_scope() {
    let t = target().await;
    let name = unique("ct_get_shape");
    t.register(json!({"name": name, "callback_url": CB, "parameters": {"type":"object"}, "timeout_seconds": 5})).await;
    let (status, body) = t.get("/api/tools").await;
    assert_eq!(status, 200);
    assert_eq!(body["ok"], true);
    let by_role = body["tools_by_role"].as_object().unwrap();
    assert!(!by_role.is_empty());
    for tools in by_role.values() {
        for tool in tools.as_array().unwrap() {
            let keys: Vec<_> = tool
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(
                keys,
                ["name", "description", "source", "callback_url", "is_remote"]
            );
            if tool["source"] == "builtin" {
                assert_eq!(
                    (tool["callback_url"].clone(), tool["is_remote"].clone()),
                    (json!(null), json!(false))
                );
            }
        }
    }
    t.post("/api/tools/unregister", &json!({"name": name}))
        .await;
}

#[tokio::test]
async fn recall_memory_is_the_one_builtin_on_every_role() {
    let t = target().await;
    let (_, body) = t.get("/api/tools").await;
    let by_role = body["tools_by_role"].as_object().unwrap();
    assert!(!by_role.is_empty());
    for (role, tools) in by_role {
        let builtins: Vec<_> = tools
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["source"] == "builtin")
            .map(|x| {
                (
                    x["name"].clone(),
                    x["callback_url"].clone(),
                    x["is_remote"].clone(),
                )
            })
            .collect();
        assert_eq!(
            builtins,
            [(json!(RECALL_MEMORY), json!(null), json!(false))],
            "{role}"
        );
    }
}

#[tokio::test]
async fn builtins_can_be_disabled() {
    let Some((t, _h)) = dev_target_with(
        "builtins_can_be_disabled",
        DevServer::builder().disable_builtin_tools(),
    )
    .await
    else {
        return;
    };
    let (_, body) = t.get("/api/tools").await;
    assert_eq!(
        body,
        json!({"ok":true,"tools_by_role":{"小八":[],"Lanlan":[]}})
    );
}

#[tokio::test]
async fn get_with_role_lists_only_that_role() {
    let t = target().await;
    let roles = t.roles().await;
    let last = roles.last().unwrap();
    // The URL parser percent-encodes a non-ASCII role name.
    let (status, body) = t.get(&format!("/api/tools?role={last}")).await;
    assert_eq!(status, 200);
    let keys: Vec<_> = body["tools_by_role"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys, vec![last.clone()]);
}
