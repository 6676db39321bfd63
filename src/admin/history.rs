//! The call history: the last calls the model made, kept in memory for the
//! inspector page, the N.E.K.O plugin's panel and `status --calls`.
//!
//! A bounded ring of `[admin] call_history` entries (0 keeps none and
//! costs one branch per call). Each entry holds what a person debugging a
//! tool asks first: when, which tool for which role, with what arguments,
//! how long it took, how it ended, and the text and pictures the model read
//! back. Nothing is ever written to disk.
//!
//! What is kept is bounded twice over: arguments and answer text are cut at
//! [`ARGUMENTS_BYTES`] and [`ANSWER_BYTES`] (their full sizes kept beside
//! them), and the pictures of all entries together hold at most
//! [`PICTURE_BUDGET`] bytes of base64, the oldest entries' pictures
//! dropped first (their size and type stay). Every text is scrubbed of the
//! secrets the log keeps out (`logging::scrub`: MCP servers' header and
//! query values) before it is stored, so no route can show one.
//!
//! The recording is the callback path's only cost here: one reading of the
//! body (the arguments and who called), the text the model read cut to its
//! bound, and one lock held for a push, after the answer is made. The time
//! as text is made when the history is read, not per call.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::contract::answer::model_text;
use crate::contract::envelope::Envelope;
use crate::logging::scrub;

/// The default of `[admin] call_history`.
pub const DEFAULT_CALLS: usize = 200;
/// The largest `[admin] call_history`.
pub const MAX_CALLS: usize = 10_000;
/// Arguments longer than this are cut (the full size is shown).
pub const ARGUMENTS_BYTES: usize = 4 * 1024;
/// The model's text longer than this is cut (the full size is shown).
pub const ANSWER_BYTES: usize = 8 * 1024;
/// The base64 of every kept picture together, at most.
pub const PICTURE_BUDGET: usize = 4 * 1024 * 1024;

/// A text as stored: possibly cut, with the size it had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cut {
    pub text: String,
    /// The whole text's size in bytes.
    pub bytes: usize,
    /// Whether `text` is only its beginning.
    pub cut: bool,
}

impl Cut {
    /// `text` scrubbed of secrets, then cut at `max` bytes (on a character
    /// boundary).
    fn of(text: &str, max: usize) -> Self {
        let text = scrub(text);
        let bytes = text.len();
        if bytes <= max {
            return Cut {
                text: text.into_owned(),
                bytes,
                cut: false,
            };
        }
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Cut {
            text: text[..end].to_owned(),
            bytes,
            cut: true,
        }
    }
}

/// One picture the model was sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PictureSeen {
    pub mime: String,
    /// The base64's size in bytes.
    pub bytes: usize,
    /// The base64 itself, while the history's picture budget holds it.
    pub data_b64: Option<String>,
}

/// One call, as the history keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Counts every call recorded since the start, so a reader can ask for
    /// what is newer than what it has.
    pub seq: u64,
    /// When the call arrived, RFC 3339 UTC.
    pub at: String,
    pub tool: String,
    /// Who made the call: `model` (main_server, for the chat model), or the
    /// sidecar's own ways to try a tool: `inspector` (the page), `panel`
    /// (the N.E.K.O plugin's panel) or `cli` (`neko-sidecar call`).
    #[serde(default = "by_model")]
    pub by: String,
    /// The tool's role; `None` is every role.
    pub role: Option<String>,
    /// From arrival to answer.
    pub duration_ms: u64,
    /// `OK`, or the failure's code (the sidecar's own, or `TOOL_ERROR`
    /// for a handler that answered `is_error`).
    pub outcome: String,
    pub is_error: bool,
    /// The arguments as main_server sent them (JSON text).
    pub arguments: Cut,
    /// Exactly the text the model read.
    pub answer: Cut,
    pub pictures: Vec<PictureSeen>,
}

fn by_model() -> String {
    "model".to_owned()
}

/// The key of a callback body the sidecar's own calls (`call_url`) add to
/// say who made them; main_server never sends it. Who holds the callback
/// URL (main_server and the sidecar's own admin side; it carries the run's
/// token) can set it, so it is a label, not a proof.
pub const BY_KEY: &str = "neko_sidecar_by";
/// The values of [`BY_KEY`] the history takes; any other is `model`.
pub const CALLERS: [&str; 3] = ["inspector", "panel", "cli"];

/// What the history answers: the entries and how it is bounded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryView {
    /// `[admin] call_history`; 0 when it is off.
    pub capacity: usize,
    /// Calls recorded since the start (more than `calls.len()` once the
    /// ring has wrapped).
    pub recorded: u64,
    /// What the ring holds on the heap now, in bytes (its slots and every
    /// entry's text and pictures): the history's memory.
    #[serde(default)]
    pub heap_bytes: usize,
    /// Newest first.
    pub calls: Vec<CallRecord>,
}

/// The ring. Shared by the callback server (which records) and the admin
/// endpoints (which read).
#[derive(Debug)]
pub struct CallHistory {
    capacity: usize,
    ring: Mutex<Ring>,
}

#[derive(Debug, Default)]
struct Ring {
    /// Each call with when it arrived; its record's `at` is written from
    /// that when the history is read, not per call.
    calls: VecDeque<(SystemTime, CallRecord)>,
    recorded: u64,
    /// Base64 bytes of the pictures still held.
    picture_bytes: usize,
}

/// What the callback path knows of a call when it has answered.
pub struct Finished<'a> {
    pub tool: &'a str,
    pub role: Option<&'a str>,
    pub arrived: SystemTime,
    pub duration: Duration,
    /// The callback body main_server sent.
    pub body: &'a [u8],
    pub reply: &'a Envelope,
}

impl CallHistory {
    /// A ring of `capacity` calls; 0 records nothing.
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            capacity,
            ring: Mutex::new(Ring::default()),
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Records one answered call (nothing when the history is off).
    pub fn record(&self, call: Finished<'_>) {
        if self.capacity == 0 {
            return;
        }
        let reply = call.reply;
        let outcome = match (reply.is_error, reply.code()) {
            (false, _) => "OK".to_owned(),
            (true, Some(code)) => code.to_owned(),
            (true, None) => "TOOL_ERROR".to_owned(),
        };
        let pictures = pictures_of(reply.images.as_ref());
        let (by, arguments) = read_body(call.body);
        let mut record = CallRecord {
            seq: 0,
            at: String::new(),
            tool: call.tool.to_owned(),
            by: by.to_owned(),
            role: call.role.map(str::to_owned),
            duration_ms: u64::try_from(call.duration.as_millis()).unwrap_or(u64::MAX),
            outcome,
            is_error: reply.is_error,
            arguments: Cut::of(&arguments, ARGUMENTS_BYTES),
            answer: Cut::of(&model_text(&reply.output), ANSWER_BYTES),
            pictures,
        };
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.recorded += 1;
        record.seq = ring.recorded;
        if ring.calls.len() == self.capacity {
            if let Some((_, old)) = ring.calls.pop_front() {
                ring.picture_bytes -= held(&old);
            }
        }
        ring.picture_bytes += held(&record);
        ring.calls.push_back((call.arrived, record));
        // Over the budget: the oldest pictures go first (the newest call's
        // own are dropped last, and only when they alone exceed it).
        let mut i = 0;
        while ring.picture_bytes > PICTURE_BUDGET && i < ring.calls.len() {
            let mut freed = 0;
            for p in &mut ring.calls[i].1.pictures {
                if p.data_b64.take().is_some() {
                    freed += p.bytes;
                }
            }
            ring.picture_bytes -= freed;
            i += 1;
        }
    }

    /// The calls newer than `since` (every call held, for 0), newest first.
    pub fn view(&self, since: u64) -> HistoryView {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        HistoryView {
            capacity: self.capacity,
            recorded: ring.recorded,
            heap_bytes: ring.heap_bytes(),
            calls: ring
                .calls
                .iter()
                .rev()
                .take_while(|(_, c)| c.seq > since)
                .map(|(arrived, c)| CallRecord {
                    at: super::time::rfc3339(*arrived),
                    ..c.clone()
                })
                .collect(),
        }
    }
}

impl Ring {
    fn heap_bytes(&self) -> usize {
        let slots = self.calls.capacity() * std::mem::size_of::<(SystemTime, CallRecord)>();
        let entries: usize = self
            .calls
            .iter()
            .map(|(_, c)| {
                c.tool.capacity()
                    + c.by.capacity()
                    + c.role.as_ref().map_or(0, String::capacity)
                    + c.outcome.capacity()
                    + c.arguments.text.capacity()
                    + c.answer.text.capacity()
                    + c.pictures.capacity() * std::mem::size_of::<PictureSeen>()
                    + c.pictures
                        .iter()
                        .map(|p| {
                            p.mime.capacity() + p.data_b64.as_ref().map_or(0, String::capacity)
                        })
                        .sum::<usize>()
            })
            .sum();
        slots + entries
    }
}

/// The picture bytes `record` holds.
fn held(record: &CallRecord) -> usize {
    record
        .pictures
        .iter()
        .filter(|p| p.data_b64.is_some())
        .map(|p| p.bytes)
        .sum()
}

/// Who made the call whose callback body is `body` ([`BY_KEY`]: `model`
/// unless it names one of [`CALLERS`]), and its arguments as main_server
/// wrote them (the whole body when it is not a call: the model's call then
/// failed on it). One reading of the body for both.
fn read_body(body: &[u8]) -> (&'static str, String) {
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    struct Call<'a> {
        #[serde(borrow, rename = "neko_sidecar_by")]
        by: Option<&'a RawValue>,
        #[serde(borrow)]
        arguments: Option<&'a RawValue>,
    }
    let caller = |by: Option<&RawValue>| {
        by.and_then(|raw| serde_json::from_str::<&str>(raw.get()).ok())
            .and_then(|by| CALLERS.into_iter().find(|c| *c == by))
            .unwrap_or("model")
    };
    let whole = || String::from_utf8_lossy(body).into_owned();
    match serde_json::from_slice::<Call<'_>>(body) {
        Ok(Call {
            by,
            arguments: Some(raw),
        }) => (caller(by), raw.get().to_owned()),
        Ok(Call {
            by,
            arguments: None,
        }) => (caller(by), whole()),
        Err(_) => ("model", whole()),
    }
}

/// The pictures of an answer the callback path has checked (so each entry
/// is one main_server takes: `data_b64` and a `mime`).
fn pictures_of(images: Option<&Json>) -> Vec<PictureSeen> {
    let Some(Json::Array(entries)) = images else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|e| {
            let data = e.get("data_b64")?.as_str()?;
            let mime =
                e.get("mime")
                    .and_then(Json::as_str)
                    .unwrap_or(if data.starts_with("/9j/") {
                        "image/jpeg"
                    } else {
                        "image/png"
                    });
            Some(PictureSeen {
                mime: mime.to_owned(),
                bytes: data.len(),
                data_b64: (data.len() <= PICTURE_BUDGET).then(|| data.to_owned()),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(history: &CallHistory, tool: &str, args: &str, reply: &Envelope) {
        let body = format!(r#"{{"tool_name":"{tool}","arguments":{args},"call_id":"c"}}"#);
        history.record(Finished {
            tool,
            role: Some("assistant"),
            arrived: SystemTime::UNIX_EPOCH + Duration::from_secs(1_735_689_600),
            duration: Duration::from_millis(12),
            body: body.as_bytes(),
            reply,
        });
    }

    #[test]
    fn the_n_plus_first_call_evicts_the_first() {
        let h = CallHistory::new(3);
        for i in 1..=4 {
            call(&h, &format!("t{i}"), "{}", &Envelope::ok(json!(i)));
        }
        let v = h.view(0);
        assert_eq!(v.recorded, 4);
        let tools: Vec<&str> = v.calls.iter().map(|c| c.tool.as_str()).collect();
        assert_eq!(tools, ["t4", "t3", "t2"]);
        assert_eq!(v.calls[0].seq, 4);
        assert_eq!(h.view(3).calls.len(), 1);
    }

    #[test]
    fn each_call_says_who_made_it_and_a_stranger_label_is_the_models() {
        let h = CallHistory::new(8);
        let reply = Envelope::ok(json!("x"));
        for body in [
            r#"{"name":"t","arguments":{},"call_id":"call_0"}"#,
            r#"{"name":"t","arguments":{},"call_id":"call_0","neko_sidecar_by":"inspector"}"#,
            r#"{"name":"t","arguments":{},"call_id":"call_0","neko_sidecar_by":"panel"}"#,
            r#"{"name":"t","arguments":{},"call_id":"call_0","neko_sidecar_by":"cli"}"#,
            r#"{"name":"t","arguments":{},"call_id":"call_0","neko_sidecar_by":"<b>root</b>"}"#,
            r#"{"name":"t","arguments":{},"call_id":"call_0","neko_sidecar_by":7}"#,
            "not json",
        ] {
            h.record(Finished {
                tool: "t",
                role: None,
                arrived: SystemTime::UNIX_EPOCH,
                duration: Duration::ZERO,
                body: body.as_bytes(),
                reply: &reply,
            });
        }
        let by: Vec<String> = h.view(0).calls.into_iter().rev().map(|c| c.by).collect();
        assert_eq!(
            by,
            [
                "model",
                "inspector",
                "panel",
                "cli",
                "model",
                "model",
                "model"
            ]
        );
    }

    /// BENCHMARKS.md's figure: the ring at its default size after
    /// benchmark 3's burst (1,000 calls of `bench_burst`'s body, each
    /// answered with `bench_handler`'s envelope).
    #[test]
    fn the_default_ring_under_benchmark_3s_load_holds_little() {
        let h = CallHistory::new(DEFAULT_CALLS);
        let body = r#"{"name":"slow","arguments":{"city":"Tokyo"},"call_id":"x","raw_arguments":"{\"city\":\"Tokyo\"}"}"#;
        let reply = crate::contract::envelope::normalise(
            br#"{"output":{"city":"Tokyo","temp_c":22,"weather":"sunny"},"is_error":false}"#,
        );
        for _ in 0..1000 {
            h.record(Finished {
                tool: "slow",
                role: None,
                arrived: SystemTime::now(),
                duration: Duration::from_millis(1000),
                body: body.as_bytes(),
                reply: &reply,
            });
        }
        let v = h.view(0);
        assert_eq!((v.calls.len(), v.recorded), (DEFAULT_CALLS, 1000));
        // A few hundred bytes an entry: its slot and its texts.
        let per_entry = v.heap_bytes / DEFAULT_CALLS;
        eprintln!(
            "the call history at {DEFAULT_CALLS} calls of benchmark 3: {} bytes ({per_entry} an entry)",
            v.heap_bytes
        );
        assert!(v.heap_bytes >= DEFAULT_CALLS * std::mem::size_of::<(SystemTime, CallRecord)>());
        assert!(v.heap_bytes < 128 * 1024, "{} bytes", v.heap_bytes);
    }

    #[test]
    fn off_when_zero() {
        let h = CallHistory::new(0);
        call(&h, "t", "{}", &Envelope::ok(json!("x")));
        let v = h.view(0);
        assert_eq!((v.capacity, v.recorded, v.calls.len()), (0, 0, 0));
    }

    #[test]
    fn a_call_keeps_what_the_model_sent_and_read() {
        let h = CallHistory::new(5);
        call(
            &h,
            "weather",
            r#"{"city": "東京"}"#,
            &Envelope::ok(json!({"temp": 21})),
        );
        call(
            &h,
            "weather",
            "{}",
            &Envelope::failure("INVALID_ARGUMENTS", "`city` is required"),
        );
        let v = h.view(0);
        let ok = &v.calls[1];
        assert_eq!(ok.arguments.text, r#"{"city": "東京"}"#);
        assert_eq!(ok.answer.text, r#"{"temp": 21}"#);
        assert_eq!(
            (ok.outcome.as_str(), ok.is_error, ok.duration_ms),
            ("OK", false, 12)
        );
        assert_eq!(ok.role.as_deref(), Some("assistant"));
        assert_eq!(ok.at, "2025-01-01T00:00:00Z");
        let bad = &v.calls[0];
        assert_eq!(bad.outcome, "INVALID_ARGUMENTS");
        assert!(bad.answer.text.contains("`city` is required"));
    }

    #[test]
    fn large_arguments_and_answers_are_cut_with_their_size() {
        let h = CallHistory::new(2);
        let big = format!(r#"{{"q": "{}"}}"#, "é".repeat(5000));
        call(&h, "t", &big, &Envelope::ok(json!("a".repeat(20_000))));
        let c = &h.view(0).calls[0];
        assert!(c.arguments.cut && c.arguments.bytes == big.len());
        assert!(c.arguments.text.len() <= ARGUMENTS_BYTES);
        assert!(big.starts_with(&c.arguments.text));
        assert!(c.answer.cut && c.answer.bytes == 20_000);
        assert_eq!(c.answer.text.len(), ANSWER_BYTES);
    }

    #[test]
    fn a_planted_secret_is_never_kept() {
        crate::logging::keep_out(&["hist-s3cr3t-planted".to_owned()]);
        let h = CallHistory::new(2);
        call(
            &h,
            "t",
            r#"{"key": "hist-s3cr3t-planted"}"#,
            &Envelope::failure("HANDLER_FAILED", "401 for key=hist-s3cr3t-planted"),
        );
        let shown = serde_json::to_string(&h.view(0)).unwrap();
        assert!(!shown.contains("hist-s3cr3t-planted"), "{shown}");
        assert!(shown.contains("key=…"));
    }

    #[test]
    fn pictures_are_kept_within_the_budget_oldest_dropped_first() {
        let h = CallHistory::new(10);
        let data = "A".repeat(PICTURE_BUDGET / 3 + 1);
        for _ in 0..3 {
            let mut e = Envelope::ok(json!("see"));
            e.images = Some(json!([{"data_b64": data, "mime": "image/png"}]));
            call(&h, "shot", "{}", &e);
        }
        let v = h.view(0);
        let kept: Vec<bool> = v
            .calls
            .iter()
            .map(|c| c.pictures[0].data_b64.is_some())
            .collect();
        assert_eq!(kept, [true, true, false]);
        assert!(v.calls.iter().all(|c| c.pictures[0].bytes == data.len()));
        assert_eq!(v.calls[0].pictures[0].mime, "image/png");
    }
}
