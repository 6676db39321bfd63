//! The `/metrics` series: which exist, what they count, from which source.
//!
//! Pure: a [`Sample`] in, exposition text out (through `prom`). Counters
//! come from the registration store (registrations, passes, losses), the callback
//! server (calls, latency, rejections) and the reloader (rescans); gauges
//! show the present (tools by state, backoff, manifest health). Every
//! series is listed in the README's metrics table; keep them in step.
//!
//! Cardinality: the `tool` label is bounded by the manifests. Per tool,
//! `callbacks_total` always has its `ok` series and an `outcome` only once
//! it happened, so 1,000 tools do not make 14,000 zero series.

use super::prom::{Exposition, Kind};
use super::sample::Sample;
use crate::callback::Outcome;
use crate::callback::stats::LATENCY_BOUNDS;
use crate::registration::ToolState;

/// Every tool state, in the order the gauge lists them.
const STATES: [&str; 6] = [
    "pending",
    "registered",
    "conflict",
    "rejected",
    "waiting_for_role",
    "retrying",
];

/// Renders a scrape.
pub(crate) fn render(s: &Sample) -> String {
    let mut e = Exposition::default();
    build_info(&mut e, s);
    main_server(&mut e, s);
    engine(&mut e, s);
    tools(&mut e, s);
    callbacks(&mut e, s);
    manifests(&mut e, s);
    mcp_servers(&mut e, s);
    e.finish()
}

use crate::mcp::Phase;

fn unix_seconds(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn build_info(e: &mut Exposition, s: &Sample) {
    e.family(
        "neko_sidecar_build_info",
        Kind::Gauge,
        "Always 1; the labels say which sidecar this is.",
    );
    e.sample(
        "neko_sidecar_build_info",
        &[("version", s.version), ("source", &s.source)],
        1.0,
    );
    e.single(
        "neko_sidecar_start_time_seconds",
        Kind::Gauge,
        "When the sidecar started, in seconds since the Unix epoch.",
        unix_seconds(s.started_at).floor(),
    );
}

fn main_server(e: &mut Exposition, s: &Sample) {
    let ms = &s.registration.main_server;
    e.single(
        "neko_sidecar_main_server_up",
        Kind::Gauge,
        "1 when main_server answered the last GET /api/tools, 0 when it failed or was not tried yet.",
        if ms.reachable == Some(true) { 1.0 } else { 0.0 },
    );
    e.single(
        "neko_sidecar_main_server_failed_attempts",
        Kind::Gauge,
        "Consecutive failed GETs of main_server's tool list (the backoff attempt); 0 while reachable.",
        f64::from(ms.failed_attempts),
    );
    if let Some(t) = ms.last_contact {
        e.single(
            "neko_sidecar_main_server_last_contact_seconds",
            Kind::Gauge,
            "When main_server last answered a GET, in seconds since the Unix epoch.",
            unix_seconds(t).floor(),
        );
    }
}

fn engine(e: &mut Exposition, s: &Sample) {
    let st = &s.registration;
    e.single(
        "neko_sidecar_reconcile_passes_total",
        Kind::Counter,
        "Reconcile passes completed (a GET that answered, then its plan carried out).",
        st.passes as f64,
    );
    e.family(
        "neko_sidecar_registrations_total",
        Kind::Counter,
        "Register requests sent to main_server, by how they ended: accepted (200), rejected (422), unknown_role (404), failed (transient: refused, timeout, 409, 5xx).",
    );
    let r = &st.registrations;
    for (outcome, n) in [
        ("accepted", r.accepted),
        ("rejected", r.rejected),
        ("unknown_role", r.unknown_role),
        ("failed", r.failed),
    ] {
        e.sample(
            "neko_sidecar_registrations_total",
            &[("outcome", outcome)],
            n as f64,
        );
    }
    e.single(
        "neko_sidecar_tools_lost_total",
        Kind::Counter,
        "Registered tools later found missing from main_server's list (restart, eviction, outside unregister, or a new role); each is registered again.",
        st.tools_lost as f64,
    );
    e.single(
        "neko_sidecar_loss_events_total",
        Kind::Counter,
        "Passes that found registered tools missing: main_server restarts, evictions and outside removals (the tool list cannot tell these apart).",
        st.loss_events as f64,
    );
}

fn tools(e: &mut Exposition, s: &Sample) {
    let mut counts = [0u64; STATES.len()];
    for name in s.desired.tools.keys() {
        // A desired tool the engine has not picked up yet is pending.
        let kind = s
            .registration
            .state(name)
            .map_or("pending", ToolState::kind);
        if let Some(i) = STATES.iter().position(|k| *k == kind) {
            counts[i] += 1;
        }
    }
    e.family(
        "neko_sidecar_tools",
        Kind::Gauge,
        "Desired tools by registration state; every state but registered needs attention or time.",
    );
    for (state, n) in STATES.iter().zip(counts) {
        e.sample("neko_sidecar_tools", &[("state", state)], n as f64);
    }
    e.family(
        "neko_sidecar_tool_retry_attempt",
        Kind::Gauge,
        "The backoff attempt of each tool now retrying its registration (absent when not retrying).",
    );
    for (name, t) in &s.registration.tools {
        if let ToolState::Retrying { attempt, .. } = t.state {
            e.sample(
                "neko_sidecar_tool_retry_attempt",
                &[("tool", name)],
                f64::from(attempt),
            );
        }
    }
}

fn callbacks(e: &mut Exposition, s: &Sample) {
    let tools = &s.callbacks.tools;
    e.family(
        "neko_sidecar_callbacks_total",
        Kind::Counter,
        "Finished calls per tool, by outcome (ok, tool_error, invalid_arguments, timeout, handler_exit, ...).",
    );
    for (name, t) in tools {
        for (outcome, n) in &t.outcomes {
            if *n > 0 || *outcome == Outcome::Ok {
                e.sample(
                    "neko_sidecar_callbacks_total",
                    &[("tool", name), ("outcome", outcome.label())],
                    *n as f64,
                );
            }
        }
    }
    e.family(
        "neko_sidecar_callbacks_in_flight",
        Kind::Gauge,
        "Calls per tool running now.",
    );
    for (name, t) in tools {
        e.sample(
            "neko_sidecar_callbacks_in_flight",
            &[("tool", name)],
            t.in_flight as f64,
        );
    }
    e.family(
        "neko_sidecar_callback_duration_seconds",
        Kind::Histogram,
        "How long calls took per tool, from arrival to answer (waiting for a slot and the handler included).",
    );
    for (name, t) in tools {
        e.histogram(
            "neko_sidecar_callback_duration_seconds",
            &[("tool", name)],
            &LATENCY_BOUNDS,
            &t.latency_buckets,
            t.latency_sum.as_secs_f64(),
        );
    }
    e.family(
        "neko_sidecar_callback_images_total",
        Kind::Counter,
        "Images in tools' answers that main_server would have refused, per tool: repaired (re-encoded or corrected, then sent) or refused (not sent; the model reads why). Absent for a tool until one happened.",
    );
    for (name, t) in tools {
        for (verdict, n) in [
            ("repaired", t.images_repaired),
            ("refused", t.images_refused),
        ] {
            if n > 0 {
                e.sample(
                    "neko_sidecar_callback_images_total",
                    &[("tool", name), ("verdict", verdict)],
                    n as f64,
                );
            }
        }
    }
    let r = &s.callbacks.rejections;
    e.family(
        "neko_sidecar_callback_rejections_total",
        Kind::Counter,
        "Callback requests turned away before reaching a tool: forbidden_peer (not loopback), body_too_large, unknown_token (a URL of an earlier run, or a guess), unknown_tool, busy (503: call bodies held all of [callback] max_body_memory).",
    );
    for (reason, n) in [
        ("forbidden_peer", r.forbidden_peer),
        ("body_too_large", r.body_too_large),
        ("unknown_token", r.unknown_token),
        ("unknown_tool", r.unknown_tool),
        ("busy", r.busy),
    ] {
        e.sample(
            "neko_sidecar_callback_rejections_total",
            &[("reason", reason)],
            n as f64,
        );
    }
    let c = &s.callbacks.connections;
    e.single(
        "neko_sidecar_callback_connections",
        Kind::Gauge,
        "Connections the callback listener holds now (at most [callback] max_connections).",
        c.open as f64,
    );
    e.family(
        "neko_sidecar_callback_connections_closed_to_make_room_total",
        Kind::Counter,
        "Connections closed at the bound to make room: lingering (after an answer sent with its body unread, or from a peer that is not loopback), no_valid_request (none within the head grace: another local process holding connections), idle.",
    );
    for (reason, n) in [
        ("lingering", c.evicted_lingering),
        ("no_valid_request", c.evicted_unproven),
        ("idle", c.evicted_idle),
    ] {
        e.sample(
            "neko_sidecar_callback_connections_closed_to_make_room_total",
            &[("reason", reason)],
            n as f64,
        );
    }
    e.single(
        "neko_sidecar_callback_connection_waits_total",
        Kind::Counter,
        "Times a new callback connection waited in the listen queue because every held one was answering a call (or still in its head grace).",
        c.waited as f64,
    );
}

fn manifests(e: &mut Exposition, s: &Sample) {
    let m = &s.manifests;
    e.single(
        "neko_sidecar_manifest_files",
        Kind::Gauge,
        "Manifest files found in the manifest directories.",
        m.files.len() as f64,
    );
    e.single(
        "neko_sidecar_manifest_files_in_error",
        Kind::Gauge,
        "Manifest files whose latest version was refused (their last good version, if any, is still served).",
        m.files_in_error() as f64,
    );
    e.single(
        "neko_sidecar_desired_tools",
        Kind::Gauge,
        "Tools the manifests declare now.",
        s.desired.tools.len() as f64,
    );
    e.single(
        "neko_sidecar_manifest_rescans_total",
        Kind::Counter,
        "Rescans of the manifest directories (file events, the periodic safety net, SIGHUP).",
        m.rescans as f64,
    );
}

fn mcp_servers(e: &mut Exposition, s: &Sample) {
    if s.mcp.is_empty() {
        return;
    }
    e.family(
        "neko_sidecar_mcp_server_up",
        Kind::Gauge,
        "1 while the MCP server is connected and its tools listed, 0 while it is starting or restarting.",
    );
    for m in &s.mcp {
        let up = if m.phase == Phase::Ready { 1.0 } else { 0.0 };
        e.sample("neko_sidecar_mcp_server_up", &[("server", &m.name)], up);
    }
    e.family(
        "neko_sidecar_mcp_server_restarts_total",
        Kind::Counter,
        "Times the MCP server was lost after being ready and started (or connected) again.",
    );
    for m in &s.mcp {
        e.sample(
            "neko_sidecar_mcp_server_restarts_total",
            &[("server", &m.name)],
            m.restarts as f64,
        );
    }
    e.family(
        "neko_sidecar_mcp_server_tools",
        Kind::Gauge,
        "Tools of the MCP server's last listing: offered to main_server, or rejected (bad name, taken name, refused schema).",
    );
    for m in &s.mcp {
        let name = m.name.as_str();
        e.sample(
            "neko_sidecar_mcp_server_tools",
            &[("server", name), ("state", "offered")],
            m.tools.len() as f64,
        );
        e.sample(
            "neko_sidecar_mcp_server_tools",
            &[("server", name), ("state", "rejected")],
            m.rejected.len() as f64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::view::tests::sample_with;
    use super::*;

    #[test]
    fn tools_by_state_count_every_desired_tool_once() {
        let mut s = sample_with(&["a", "b", "c"]);
        s.registration.tools.get_mut("a").unwrap().state = ToolState::Registered;
        s.registration.tools.remove("c");
        let text = render(&s);
        assert!(text.contains("neko_sidecar_tools{state=\"registered\"} 1\n"));
        assert!(text.contains("neko_sidecar_tools{state=\"pending\"} 2\n"));
        assert!(text.contains("neko_sidecar_tools{state=\"conflict\"} 0\n"));
    }

    #[test]
    fn images_repaired_and_refused_are_counted_per_tool_once_they_happen() {
        let mut s = sample_with(&["a", "b"]);
        let stats = std::sync::Arc::new(crate::callback::stats::ToolStats::default());
        let quiet = stats.snapshot();
        stats.count_images(2, 1);
        s.callbacks.tools.insert("a".into(), stats.snapshot());
        s.callbacks.tools.insert("b".into(), quiet);
        let text = render(&s);
        assert!(
            text.contains(
                "neko_sidecar_callback_images_total{tool=\"a\",verdict=\"repaired\"} 2\n"
            )
        );
        assert!(
            text.contains("neko_sidecar_callback_images_total{tool=\"a\",verdict=\"refused\"} 1\n")
        );
        assert!(!text.contains("neko_sidecar_callback_images_total{tool=\"b\""));
    }
}
