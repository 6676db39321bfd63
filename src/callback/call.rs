//! One call of one tool, from the callback body to the envelope: read the
//! body, check the arguments, wait for a slot, run the handler within the
//! deadline, normalise its answer, check its images (on the blocking pool,
//! at most [`IMAGE_CHECKS`] answers at a time, within the same deadline,
//! and only when it has any), count the outcome.
//!
//! Every path ends in an envelope; nothing here writes an HTTP response or
//! knows about tokens and peers (`mod.rs` does).

use std::sync::Arc;

use axum::body::Bytes;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::handler::{self, HandlerContext, HandlerError, Invocation};
use super::images;
use super::limits::{call_budget, seconds};
use super::routes::Route;
use super::stats::Outcome;
use super::validate::{check_arguments, parse_request};
use crate::contract::envelope::{Envelope, normalise};

/// How many answers' images are checked at once. A check may decode and
/// scale a picture of up to `MAX_REPAIR_PIXELS` (about 250 MB for the
/// largest), so this bounds the memory of a burst of answers with large
/// pictures; the others wait, within their deadline.
const IMAGE_CHECKS: usize = 2;
static IMAGE_CHECK_SLOTS: Semaphore = Semaphore::const_new(IMAGE_CHECKS);

const SHUTTING_DOWN: &str =
    "the sidecar is shutting down and takes no new calls; try again shortly";

/// Answers one call. `arrived` is when the request reached the sidecar:
/// the deadline counts from there, as main_server's timeout does.
pub(crate) async fn answer(
    ctx: &HandlerContext,
    route: Arc<Route>,
    body: Bytes,
    arrived: Instant,
    draining: bool,
) -> Envelope {
    let record = route.stats.begin_at(arrived);
    let spec = &route.spec;
    let deadline = arrived + call_budget(spec.timeout());
    let (mut reply, outcome, call_id) = run(ctx, &route, body, deadline, draining).await;
    if reply.images.is_some() {
        reply = check_images(reply, &route, &call_id, deadline).await;
    }
    // The clock is read only when a line is written (the fields of a
    // disabled level are not evaluated).
    if outcome == Outcome::Ok {
        tracing::debug!(
            tool = %spec.name,
            call_id,
            elapsed_ms = arrived.elapsed().as_millis(),
            "call answered"
        );
    } else {
        tracing::info!(
            tool = %spec.name,
            call_id,
            elapsed_ms = arrived.elapsed().as_millis(),
            outcome = outcome.label(),
            error = reply.error.as_deref().unwrap_or(""),
            "call failed"
        );
    }
    record.finish(outcome, reply.error.as_deref());
    reply
}

/// Checks, repairs or refuses the images of an answer (`images`), off the
/// runtime's one thread and by `deadline`, and logs and counts what was
/// done. Past the deadline the answer goes without its images, the model
/// reading why: main_server would have stopped waiting for it.
async fn check_images(
    mut reply: Envelope,
    route: &Route,
    call_id: &str,
    deadline: Instant,
) -> Envelope {
    let tool = &route.spec.name;
    // What goes if the check does not end in time: the answer without its
    // images (only an answer with images pays for this copy).
    let images = reply.images.take();
    let mut fallback = reply.clone();
    // Each image not sent counts as refused, as when the check refuses it.
    let count = images
        .as_ref()
        .map_or(0, |v| v.as_array().map_or(1, Vec::len));
    reply.images = images;
    let work = async move {
        let permit = IMAGE_CHECK_SLOTS.acquire().await;
        tokio::task::spawn_blocking(move || {
            // Held until the check ends, even when nobody waits for it any
            // more: the memory it holds is what the slots bound.
            let _permit = permit;
            let report = images::deliver(&mut reply);
            (reply, report)
        })
        .await
    };
    let (reply, report) = match tokio::time::timeout_at(deadline, work).await {
        Ok(Ok(checked)) => checked,
        Ok(Err(_)) => {
            return Envelope::failure(
                Outcome::HandlerFailed.code(),
                "the sidecar failed while checking the images of the answer (a bug in the sidecar)",
            );
        }
        Err(_) => {
            let why = format!(
                "the tool's images were not attached: checking them did not end within the call's {}",
                seconds(call_budget(route.spec.timeout()))
            );
            tracing::warn!(tool = %tool, call_id, "{why}");
            route.stats.count_images(0, count);
            images::refuse_all(&mut fallback, why);
            return fallback;
        }
    };
    for note in &report.repaired {
        tracing::info!(tool = %tool, call_id, repair = %note, "image repaired: main_server would have refused it");
    }
    for note in &report.refused {
        tracing::warn!(tool = %tool, call_id, reason = %note, "image not sent: main_server would refuse it and it cannot be repaired");
    }
    route
        .stats
        .count_images(report.repaired.len(), report.refused.len());
    reply
}

async fn run(
    ctx: &HandlerContext,
    route: &Route,
    body: Bytes,
    deadline: Instant,
    draining: bool,
) -> (Envelope, Outcome, String) {
    let spec = &route.spec;
    let request = match parse_request(&body, &spec.name) {
        Ok(r) => r,
        Err(e) => return (*e, Outcome::BadBody, String::new()),
    };
    let call_id = request.call_id.clone();
    let fail = |o: Outcome, msg: String| {
        let e = Envelope::failure(o.code(), msg);
        (e, o, call_id.clone())
    };
    if draining {
        return fail(Outcome::ShuttingDown, SHUTTING_DOWN.into());
    }
    if spec.validate_arguments {
        if let Err(e) = check_arguments(spec, &request.arguments) {
            return (*e, Outcome::InvalidArguments, call_id);
        }
    }
    let budget = call_budget(spec.timeout());
    // A free slot (always, for a tool without a limit) is taken at once;
    // waiting for one is timed, so that a call that did not get one in
    // time, or too late to answer, says so.
    let max = route.slots.limit().map_or(0, |n| n.get());
    let (_slot, waited) = match route.slots.try_acquire() {
        Some(slot) => (slot, None),
        None => {
            let since = Instant::now();
            let slot = tokio::select! {
                biased;
                s = route.slots.acquire(deadline) => s,
                () = ctx.hard_stop.cancelled() => {
                    return fail(Outcome::ShuttingDown, SHUTTING_DOWN.into());
                }
            };
            let waited = since.elapsed();
            let Some(slot) = slot else {
                let e = HandlerError::NoSlot {
                    what: format!("`{}`", spec.name),
                    max,
                    waited,
                    left: None,
                };
                return fail(Outcome::TooManyCalls, e.to_string());
            };
            (slot, Some(waited))
        }
    };
    let invocation = Invocation {
        spec,
        endpoint: route.endpoint.as_ref(),
        call_id: &call_id,
        arguments: &request.arguments,
        body,
        deadline,
        budget,
    };
    match handler::run(ctx, invocation).await {
        Ok(bytes) => {
            let envelope = normalise(&bytes);
            let outcome = if envelope.is_error {
                Outcome::ToolError
            } else {
                Outcome::Ok
            };
            (envelope, outcome, call_id)
        }
        Err(e) => {
            let e = match waited {
                Some(w) => e.after_slot_wait(format!("`{}`", spec.name), max, w),
                None => e,
            };
            fail(e.outcome(), e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callback::http_handler::HttpClients;
    use crate::callback::routes::RouteTable;
    use crate::contract::answer::model_text;
    use crate::desired::DesiredState;
    use crate::manifest::{LoadContext, parse_manifest};
    use serde_json::json;
    use std::path::Path;

    /// The route of one http tool with `timeout_seconds = 2`.
    fn route() -> Arc<Route> {
        let text = "[[tool]]\nname = \"pics\"\ndescription = \"d\"\ntimeout_seconds = 2\nhandler = { type = \"http\", url = \"http://127.0.0.1:9/w\" }\n";
        let f = parse_manifest(Path::new("/t/a.toml"), text, &LoadContext::default());
        assert!(!f.has_errors(), "{:?}", f.diagnostics);
        let desired = DesiredState::assemble("plugin:t", &[f]).0;
        RouteTable::default()
            .rebuild(&desired, &HttpClients::default())
            .get("pics")
            .unwrap()
    }

    // An image check that cannot end by the call's deadline (here: every
    // check slot is taken by other answers' pictures, on the paused clock,
    // so the deadline comes while it waits) sends the answer without its
    // images, the model reading why (the budget is the tool's 2 s less
    // the margin left for main_server), and counts each as refused.
    #[tokio::test(start_paused = true)]
    async fn images_not_checked_by_the_deadline_are_dropped_and_the_model_reads_why() {
        let route = route();
        let mut reply = Envelope::ok(json!({"text": "two pictures"}));
        let png = crate::contract::images::sample_png_b64(4, 4);
        reply.images = Some(json!([
            {"mime": "image/png", "data_b64": png},
            {"mime": "image/png", "data_b64": png},
        ]));
        let busy = IMAGE_CHECK_SLOTS
            .acquire_many(IMAGE_CHECKS as u32)
            .await
            .unwrap();
        let deadline = Instant::now() + call_budget(route.spec.timeout());
        let sent = check_images(reply, &route, "c1", deadline).await;
        drop(busy);
        assert!(Instant::now() >= deadline, "answered before the deadline");
        assert_eq!(sent.images, None, "no images sent unchecked");
        assert!(!sent.is_error, "the answer itself still goes");
        let read = model_text(&sent.output);
        assert_eq!(
            read,
            "{\"text\": \"two pictures\", \"_image_warnings\": [\"the tool's images were not attached: checking them did not end within the call's 1.8 s\"]}"
        );
        assert_eq!(
            route.stats.snapshot().images_refused,
            2,
            "each image not sent is counted"
        );
    }
}
