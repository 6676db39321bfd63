// The inspector page's script (src/admin/page.rs serves the page,
// src/admin/inspector.rs the routes). It keeps the status part fresh
// (GET /ui/status every second: HTML the server rendered and escaped), and
// builds the "Try a tool" form from each tool's JSON Schema (GET /ui/tools),
// calling through POST /ui/call with the page's token.
//
// Everything a tool, a handler or main_server wrote is untrusted: it
// reaches the DOM through textContent and attribute setters only, never as
// markup. The status part alone is set as HTML: the server rendered and
// escaped it.
"use strict";

(function () {
  const token = document.querySelector('meta[name="neko-token"]').content;
  const $ = (id) => document.getElementById(id);
  const REFRESH_MS = 1000;

  // --- The user's language -------------------------------------------------

  // The page is rendered in English; in the browser's language (one of the
  // catalogue's locales, the same files as the N.E.K.O plugin's panel),
  // every element with a data-i18n key gets its text from the catalogue.
  // What the model reads, and what a tool or the sidecar wrote, stays as is.
  const locales = document.querySelector('meta[name="neko-locales"]').content.split(",");
  let messages = {};

  function pickLocale() {
    for (const wanted of navigator.languages || [navigator.language || "en"]) {
      const w = String(wanted);
      const exact = locales.find((l) => l.toLowerCase() === w.toLowerCase());
      if (exact) return exact;
      const lower = w.toLowerCase();
      if (lower.startsWith("zh")) {
        return /^zh-(tw|hk|mo|hant)/.test(lower) ? "zh-TW" : "zh-CN";
      }
      const base = locales.find((l) => l === lower.split("-")[0]);
      if (base) return base;
    }
    return "en";
  }

  // The text of `key`, with {name} filled from `params`; `fallback` (the
  // English) when the catalogue lacks it.
  function tr(key, fallback, params) {
    const text = typeof messages[key] === "string" ? messages[key] : fallback;
    return text.replace(/\{(\w+)\}/g, (m, name) => (params && name in params ? String(params[name]) : m));
  }

  // A word or a heading (data-i18n) gets the catalogue's text. A sentence
  // the server rendered (data-i18n-s, from src/admin/i18n.rs's `sentence`)
  // is built again from the catalogue's text, each {placeholder} taking the
  // element that holds its value (data-arg) as it is: what a tool, the
  // sidecar or main_server wrote stays as they wrote it, and stays text.
  function translate(root) {
    for (const e of root.querySelectorAll("[data-i18n-s]")) {
      const template = messages[e.getAttribute("data-i18n-s")];
      if (typeof template !== "string") continue;
      const args = new Map();
      for (const a of e.querySelectorAll(":scope > [data-arg]")) args.set(a.getAttribute("data-arg"), a);
      const parts = template.split(/\{(\w+)\}/);
      const nodes = parts.map((p, i) => {
        if (i % 2 === 0) return document.createTextNode(p);
        const a = args.get(p);
        if (!a) return document.createTextNode("{" + p + "}");
        args.delete(p);
        return a;
      });
      e.replaceChildren(...nodes);
    }
    for (const e of root.querySelectorAll("[data-i18n]")) {
      const text = messages[e.getAttribute("data-i18n")];
      if (typeof text === "string") e.textContent = text;
    }
  }

  async function loadLanguage() {
    const locale = pickLocale();
    document.documentElement.lang = locale;
    if (locale === "en") return;
    try {
      const res = await fetch("/i18n/" + locale);
      if (res.ok) messages = await res.json();
    } catch (e) {
      return;
    }
    translate(document);
  }

  // --- The status part -------------------------------------------------

  async function refreshStatus() {
    try {
      const res = await fetch("/ui/status", { cache: "no-store" });
      if (!res.ok) throw new Error("HTTP " + res.status);
      const html = await res.text();
      $("status").innerHTML = html;
      translate($("status"));
      $("live").textContent = tr("inspector.live", "live");
      $("live").classList.remove("lost");
    } catch (e) {
      $("live").textContent = tr("inspector.lost", "the sidecar does not answer ({error})", { error: e.message });
      $("live").classList.add("lost");
    }
  }

  // A "Try" button in the tools table picks that tool in the form.
  $("status").addEventListener("click", async (ev) => {
    const button = ev.target.closest("button[data-try]");
    if (!button || !$("tool")) return;
    const name = button.getAttribute("data-try");
    // A tool newer than the last list of schemas: fetch them first.
    if (!tools.has(name)) await refreshTools();
    selectTool(name);
    $("try").scrollIntoView();
  });

  // --- The tools and their schemas ---------------------------------------

  let tools = new Map(); // name -> {name, description, parameters, target}
  let current = null; // {name, schemaText, collect}

  async function refreshTools() {
    let list;
    try {
      const res = await fetch("/ui/tools", { cache: "no-store" });
      if (!res.ok) return;
      list = await res.json();
    } catch (e) {
      return;
    }
    tools = new Map(list.map((t) => [t.name, t]));
    const select = $("tool");
    const names = list.map((t) => t.name);
    const shown = Array.from(select.options).map((o) => o.value);
    if (names.join("\n") !== shown.join("\n")) {
      const keep = select.value;
      select.replaceChildren();
      for (const n of names) {
        const o = document.createElement("option");
        o.value = n;
        o.textContent = n;
        select.append(o);
      }
      if (names.includes(keep)) select.value = keep;
    }
    $("call-form").hidden = names.length === 0;
    // A tool whose schema changed (a manifest edit, a new MCP listing) gets
    // a new form; an unchanged one keeps what was typed.
    const t = tools.get(select.value);
    if (t && (!current || current.name !== t.name || current.schemaText !== JSON.stringify(t.parameters))) {
      buildForm(t);
    }
  }

  function selectTool(name) {
    if (!tools.has(name)) return;
    $("tool").value = name;
    buildForm(tools.get(name));
  }

  // --- The form, built from a JSON Schema ---------------------------------

  // Kinds of schema the form renders as inputs; anything else is JSON text.
  function kindOf(schema) {
    if (typeof schema !== "object" || schema === null) return "json";
    if (schema.oneOf || schema.anyOf || schema.allOf || schema.$ref || schema.not) return "json";
    if (Array.isArray(schema.enum) && schema.enum.length > 0) return "enum";
    switch (schema.type) {
      case "string": return "string";
      case "number": return "number";
      case "integer": return "integer";
      case "boolean": return "boolean";
      case "object":
        return schema.properties && typeof schema.properties === "object" ? "object" : "json";
      default: return "json";
    }
  }

  function hint(parent, text) {
    if (typeof text !== "string" || text === "") return;
    const d = document.createElement("div");
    d.className = "hint";
    d.textContent = text;
    parent.append(d);
  }

  // Builds one field into `parent`; returns a function giving
  // {present, value} or throwing an Error that names the field.
  function field(parent, path, schema, required) {
    const kind = kindOf(schema);
    const box = document.createElement(kind === "object" ? "fieldset" : "div");
    box.className = "field";
    const title = document.createElement(kind === "object" ? "legend" : "label");
    title.textContent = path;
    if (required) {
      const star = document.createElement("span");
      star.className = "req";
      star.textContent = " *";
      star.title = tr("inspector.required", "required");
      title.append(star);
    }
    const type = document.createElement("span");
    type.className = "hint";
    type.textContent = " " + (kind === "json" ? "JSON" : kind);
    title.append(type);
    box.append(title);
    hint(box, schema && schema.description);
    parent.append(box);
    const id = "f-" + path.replace(/[^A-Za-z0-9_-]/g, "_");
    if (kind !== "object") title.htmlFor = id;
    const hasDefault = schema && Object.prototype.hasOwnProperty.call(schema, "default");

    if (kind === "object") {
      const req = new Set(Array.isArray(schema.required) ? schema.required : []);
      const parts = Object.entries(schema.properties).map(([k, s]) => [
        k,
        field(box, path + "." + k, s, req.has(k)),
      ]);
      return () => {
        const obj = {};
        let any = false;
        for (const [k, get] of parts) {
          const r = get();
          if (r.present) { obj[k] = r.value; any = true; }
        }
        return { present: any || required, value: obj };
      };
    }
    if (kind === "enum" || kind === "boolean") {
      const select = document.createElement("select");
      select.id = id;
      const choices = kind === "enum" ? schema.enum : [true, false];
      const unset = document.createElement("option");
      unset.value = "";
      unset.textContent = required ? tr("inspector.choose", "(choose)") : tr("inspector.notSet", "(not set)");
      select.append(unset);
      for (const c of choices) {
        const o = document.createElement("option");
        o.value = JSON.stringify(c);
        o.textContent = typeof c === "string" ? c : JSON.stringify(c);
        select.append(o);
      }
      if (hasDefault) select.value = JSON.stringify(schema.default);
      box.append(select);
      return () => (select.value === "" ? { present: false } : { present: true, value: JSON.parse(select.value) });
    }
    if (kind === "json") {
      const area = document.createElement("textarea");
      area.id = id;
      area.rows = 3;
      area.spellcheck = false;
      area.placeholder = "JSON";
      if (hasDefault) area.value = JSON.stringify(schema.default);
      box.append(area);
      return () => {
        if (area.value.trim() === "") return { present: false };
        try {
          return { present: true, value: JSON.parse(area.value) };
        } catch (e) {
          throw new Error(tr("inspector.notJson", "{field} is not JSON: {error}", { field: path, error: e.message }));
        }
      };
    }
    const input = document.createElement("input");
    input.id = id;
    input.type = kind === "string" ? "text" : "number";
    if (kind === "integer") input.step = "1";
    if (kind === "number") input.step = "any";
    if (hasDefault) input.value = String(schema.default);
    box.append(input);
    return () => {
      if (input.value === "") return { present: false };
      if (kind === "string") return { present: true, value: input.value };
      const n = Number(input.value);
      if (!Number.isFinite(n)) throw new Error(tr("inspector.notNumber", "{field} is not a number", { field: path }));
      return { present: true, value: n };
    };
  }

  function buildForm(tool) {
    const fields = $("fields");
    fields.replaceChildren();
    $("tool-description").textContent = tool.description;
    $("tool-target").textContent = tool.target;
    const schema = tool.parameters;
    let collect;
    if (kindOf(schema) === "object") {
      const req = new Set(Array.isArray(schema.required) ? schema.required : []);
      const parts = Object.entries(schema.properties).map(([k, s]) => [k, field(fields, k, s, req.has(k))]);
      collect = () => {
        const obj = {};
        for (const [k, get] of parts) {
          const r = get();
          if (r.present) obj[k] = r.value;
        }
        return obj;
      };
      if (parts.length === 0) hint(fields, tr("try.noArguments", "This tool takes no arguments."));
    } else {
      // A root the form cannot render: raw JSON only.
      hint(fields, tr("inspector.noForm", "This schema cannot be shown as a form; use Raw JSON."));
      collect = null;
      setMode("json");
    }
    current = { name: tool.name, schemaText: JSON.stringify(schema), collect };
  }

  function mode() {
    return document.querySelector('input[name="mode"]:checked').value;
  }

  function setMode(m) {
    document.querySelector('input[name="mode"][value="' + m + '"]').checked = true;
    $("fields").hidden = m !== "form";
    $("raw").hidden = m !== "json";
  }

  // --- Calling ---------------------------------------------------------------

  function showError(text) {
    $("form-error").textContent = text;
    $("form-error").hidden = text === "";
  }

  function showResult(title, text, isError, meta, raw) {
    $("result").hidden = false;
    $("result-title").textContent = title;
    $("result-title").className = isError ? "bad" : "";
    $("model-text").textContent = text;
    $("result-meta").textContent = meta;
    $("raw-answer").textContent = raw;
  }

  function pretty(body) {
    try {
      return JSON.stringify(JSON.parse(body), null, 2);
    } catch (e) {
      return body;
    }
  }

  async function submit(ev) {
    ev.preventDefault();
    showError("");
    const name = $("tool").value;
    const request = { tool: name, skip_check: $("skip-check").checked };
    if (mode() === "json" || !current || !current.collect) {
      request.raw_arguments = $("raw").value;
    } else {
      try {
        request.arguments = current.collect();
      } catch (e) {
        showError(e.message);
        return;
      }
    }
    $("call").disabled = true;
    try {
      const res = await fetch("/ui/call", {
        method: "POST",
        headers: { "content-type": "application/json", "x-neko-token": token },
        body: JSON.stringify(request),
      });
      const answer = await res.json();
      if (!res.ok) {
        showError(answer.error || "HTTP " + res.status);
      } else if (!answer.called) {
        showResult(
          tr("try.notCalled", "Not called: the arguments do not match the schema. A model's call would get this answer:"),
          answer.message,
          true,
          tr("inspector.fixArguments", "Fix the arguments, or tick the box to call anyway."),
          JSON.stringify(answer.output, null, 2)
        );
      } else {
        const a = answer.answer;
        const meta = [
          tr("inspector.took", "took {ms} ms", { ms: a.took_ms }),
          "call_id " + a.call_id,
          a.is_error ? tr("inspector.isErrorTrue", "is_error: main_server counts the call as failed") : "is_error: false",
        ];
        if (a.images > 0) meta.push(tr("inspector.images", "{count} image(s) accepted", { count: a.images }));
        // A warning is the sidecar's own sentence: it stays as it came.
        for (const w of a.warnings || []) meta.push(tr("inspector.warning", "warning: {warning}", { warning: w }));
        const raw = answer.raw
          ? "HTTP " + answer.raw.status + "\n" + pretty(answer.raw.body)
          : tr("inspector.noAnswer", "(no answer came)");
        showResult(
          a.is_error ? tr("try.readsFailure", "What the model reads (the call failed)") : tr("try.reads", "What the model reads"),
          a.model_text,
          a.is_error,
          meta.join(" · "),
          raw
        );
      }
    } catch (e) {
      showError(tr("inspector.callFailed", "the call did not reach the sidecar: {error}", { error: e.message }));
    } finally {
      $("call").disabled = false;
    }
  }

  // --- The call history ------------------------------------------------------

  // Newest first; only what is newer than the newest held is asked for.
  let calls = [];
  let capacity = 0;

  function text(tag, value, cls) {
    const e = document.createElement(tag);
    e.textContent = value;
    if (cls) e.className = cls;
    return e;
  }

  function cutText(cut) {
    return cut.cut ? cut.text + " … " + tr("calls.cut", "(cut: {bytes} bytes in all)", { bytes: cut.bytes }) : cut.text;
  }

  function by(who) {
    switch (who) {
      case "inspector": return tr("calls.byInspector", "tried from the inspector");
      case "panel": return tr("calls.byPanel", "tried from the N.E.K.O panel");
      case "cli": return tr("calls.byCli", "tried with neko-sidecar call");
      default: return tr("calls.byModel", "the model");
    }
  }

  function renderCall(c) {
    const d = document.createElement("details");
    d.className = "call";
    d.setAttribute("data-seq", String(c.seq));
    const s = document.createElement("summary");
    s.append(
      text("span", c.at + " "),
      text("code", c.tool),
      text("span", " " + (c.role || tr("tools.allRoles", "all roles")) + " · "),
      // Who made it: the model, or someone trying the tool (this page, the
      // N.E.K.O panel, `neko-sidecar call`).
      text("span", by(c.by) + " · ", c.by && c.by !== "model" ? "by tried" : "by"),
      text("span", c.outcome, c.is_error ? "bad" : "ok"),
      text("span", " · " + tr("common.ms", "{ms} ms", { ms: c.duration_ms }))
    );
    d.append(s);
    d.append(text("h3", tr("calls.arguments", "Arguments")), text("pre", cutText(c.arguments)));
    d.append(text("h3", tr("calls.modelRead", "What the model read")), text("pre", cutText(c.answer)));
    for (const p of c.pictures || []) {
      // Only the two picture types main_server takes become an image.
      if (p.data_b64 && (p.mime === "image/png" || p.mime === "image/jpeg")) {
        const img = document.createElement("img");
        img.className = "picture";
        img.alt = tr("try.picture", "a picture ({mime}, {bytes} bytes of base64)", p);
        img.src = "data:" + p.mime + ";base64," + p.data_b64;
        d.append(img);
      } else {
        d.append(text("p", tr("calls.pictureNotKept", "a picture ({mime}, {bytes} bytes of base64), no longer kept", p), "hint"));
      }
    }
    return d;
  }

  async function refreshCalls() {
    let view;
    try {
      const res = await fetch("/ui/calls", {
        method: "POST",
        headers: { "content-type": "application/json", "x-neko-token": token },
        body: JSON.stringify({ since: calls.length ? calls[0].seq : 0 }),
      });
      if (!res.ok) return;
      view = await res.json();
    } catch (e) {
      return;
    }
    capacity = view.capacity;
    if (capacity === 0) {
      $("calls-note").textContent = tr("calls.off", "The call history is off ([admin] call_history = 0 in agent.toml).");
      $("call-list").replaceChildren();
      return;
    }
    if (view.calls.length === 0) {
      if (calls.length === 0) $("call-list").replaceChildren(text("p", tr("calls.empty", "The model has called no tool yet."), "hint"));
      return;
    }
    if (calls.length === 0) $("call-list").replaceChildren();
    calls = view.calls.concat(calls).slice(0, capacity);
    const list = $("call-list");
    for (const c of view.calls.slice().reverse()) list.prepend(renderCall(c));
    while (list.children.length > capacity) list.lastElementChild.remove();
  }

  // --- Wiring ----------------------------------------------------------------

  const form = $("call-form");
  if (form) {
    form.addEventListener("submit", submit);
    $("tool").addEventListener("change", () => selectTool($("tool").value));
    for (const r of document.querySelectorAll('input[name="mode"]')) {
      r.addEventListener("change", () => {
        if (mode() === "json" && current && current.collect && $("raw").value.trim() === "") {
          try {
            $("raw").value = JSON.stringify(current.collect(), null, 2);
          } catch (e) {
            // Leave the text box empty; the form shows what is wrong on Call.
          }
        }
        setMode(mode());
      });
    }
    refreshTools();
    setInterval(refreshTools, 3 * REFRESH_MS);
  }
  loadLanguage();
  if (token) {
    refreshCalls();
    setInterval(refreshCalls, REFRESH_MS);
  }
  setInterval(refreshStatus, REFRESH_MS);
})();
