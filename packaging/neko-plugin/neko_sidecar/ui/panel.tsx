// neko-sidecar's panel in N.E.K.O's Plugin Manager (Hosted UI: compiled by
// the Plugin Manager itself; @neko/plugin-ui only, no npm imports).
//
// `props.state` is the plugin's @ui.context("dashboard") (__init__.py):
// the running sidecar's own /status and call history, read at this moment
// over its admin listener, or why they could not be read. Every string
// shown is the plugin's i18n catalogue (i18n/<locale>.json, through
// props.t); what the sidecar itself wrote (reasons, errors, paths, what the
// model read) is data and is shown as it is.
import {
  Page,
  Card,
  Grid,
  Stack,
  Inline,
  Text,
  Alert,
  Warning,
  StatCard,
  StatusBadge,
  DataTable,
  KeyValue,
  CodeBlock,
  LogViewer,
  Field,
  Input,
  NumberInput,
  Switch,
  Select,
  Textarea,
  Button,
  ActionButton,
  RefreshButton,
  ImagePreview,
  EmptyState,
  SegmentedControl,
} from "@neko/plugin-ui"
import type { HostedAction, PluginSurfaceProps, Tone } from "@neko/plugin-ui"

type Schema = {
  type?: string | string[]
  description?: string
  enum?: any[]
  properties?: Record<string, Schema>
  required?: string[]
}

type ToolView = {
  name: string
  role?: string | null
  state: string
  owner?: string
  errors?: string[]
  waiting_for?: string | null
  attempt?: number
  next_attempt_at?: string
  last_error?: string | null
  handler?: string | null
  target?: string | null
  declared_at?: string | null
  serving_last_good?: boolean
  last_call?: { at: string; took_ms: number; outcome: string; error?: string | null } | null
  calls: number
  failures: number
}

// A remote server's OAuth sign-in, as /status shows it (never a token).
type SignIn = {
  state: string
  link?: string | null
  reason?: string | null
  expires_at?: number | null
  refreshable?: boolean
}

type ServerView = {
  name: string
  transport: string
  phase: string
  attempt: number
  last_error?: string | null
  restarts: number
  tools: string[]
  sign_in?: SignIn | null
}

type Status = {
  version: string
  ready: boolean
  not_ready: string[]
  main_server: {
    url: string
    reachable: boolean | null
    last_error?: string | null
    last_contact?: string | null
    last_loss_at?: string | null
  }
  tools: ToolView[]
  mcp_servers?: ServerView[]
}

type Cut = { text: string; bytes: number; cut: boolean }

type CallRecord = {
  seq: number
  at: string
  tool: string
  by?: string
  role?: string | null
  duration_ms: number
  outcome: string
  is_error: boolean
  arguments: Cut
  answer: Cut
  pictures: Array<{ mime: string; bytes: number; data_b64?: string | null }>
}

type PanelError = { key: string; detail?: string }

type State = {
  running: boolean
  pid?: number | null
  exit_status?: number | null
  start_error?: string | null
  stderr: string[]
  inspector_url?: string | null
  config_path: string
  tools_folder: string
  mcp_import_manifest: string
  status?: Status | null
  schemas?: Record<string, Schema>
  calls?: { capacity: number; recorded: number; calls: CallRecord[] } | null
  error?: PanelError | null
}

type TryAnswer = {
  ok: boolean
  called?: boolean
  model_text?: string
  is_error?: boolean
  took_ms?: number
  warnings?: string[]
  pictures?: Array<{ mime: string; bytes: number; src: string }>
  error?: PanelError
}

// The catalogue keys of each tool state and server phase.
const STATE_KEYS: Record<string, string> = {
  pending: "state.pending",
  registered: "state.registered",
  conflict: "state.conflict",
  rejected: "state.rejected",
  waiting_for_role: "state.waitingForRole",
  retrying: "state.retrying",
}
const STATE_TONES: Record<string, Tone> = {
  pending: "info",
  registered: "success",
  conflict: "danger",
  rejected: "danger",
  waiting_for_role: "warning",
  retrying: "warning",
}
const PHASE_KEYS: Record<string, string> = {
  starting: "phase.starting",
  ready: "phase.ready",
  restarting: "phase.restarting",
  stopped: "phase.stopped",
}
// The catalogue keys and tones of each sign-in state.
const SIGN_IN_KEYS: Record<string, string> = {
  needs_sign_in: "servers.signIn.needed",
  signed_in: "servers.signIn.signedIn",
  refused: "servers.signIn.refused",
}
const SIGN_IN_TONES: Record<string, Tone> = {
  needs_sign_in: "warning",
  signed_in: "success",
  refused: "danger",
}
// Who made a call, as the call history says (`by`).
const BY_KEYS: Record<string, string> = {
  model: "calls.byModel",
  inspector: "calls.byInspector",
  panel: "calls.byPanel",
  cli: "calls.byCli",
}
const PHASE_TONES: Record<string, Tone> = {
  starting: "info",
  ready: "success",
  restarting: "warning",
  stopped: "default",
}

// What an action's answer carries, through the host's wrapping
// ({result: ...} from the route, Ok(...) from the SDK).
function payloadOf(value: any): any {
  let v = value
  for (let i = 0; i < 4 && v && typeof v === "object" && !("ok" in v); i++) {
    v = v.result ?? v.data ?? v.value ?? null
  }
  return v
}

function kindOf(schema: Schema | undefined): string {
  const type = Array.isArray(schema?.type) ? schema?.type[0] : schema?.type
  if (schema && Array.isArray(schema.enum) && schema.enum.length > 0) return "enum"
  return type === "string" || type === "number" || type === "integer" || type === "boolean" ? type : "json"
}

export default function SidecarPanel(props: PluginSurfaceProps<State>) {
  const { t } = props
  const state = props.state || ({} as State)
  const actions = Array.isArray(props.actions) ? (props.actions as HostedAction[]) : []
  const restart = actions.find((a) => a.id === "restart_server")
  const openInspector = actions.find((a) => a.id === "open_inspector")
  const signIn = actions.find((a) => a.id === "sign_in")
  const status = state.status || null
  const tools = status?.tools || []
  const servers = status?.mcp_servers || []
  const calls = state.calls?.calls || []
  const [picked, setPicked] = props.useLocalState("tool", "")
  const [server, setServer] = props.useLocalState("server", "")
  const [mode, setMode] = props.useLocalState("mode", "form")
  const [values, setValues] = props.useLocalState<Record<string, any>>("values", {})
  const [raw, setRaw] = props.useLocalState("raw", "{}")
  const [answer, setAnswer] = props.useLocalState<TryAnswer | null>("answer", null)
  const [busy, setBusy] = props.useLocalState("busy", false)

  const errorText = (e: PanelError | null | undefined) =>
    e ? t(e.key) + (e.detail ? " (" + e.detail + ")" : "") : ""

  // --- The sidecar is not running: say so, with its last words. ---------
  if (!state.running) {
    return (
      <Page title={t("panel.title")} subtitle={t("panel.subtitle")}>
        <Alert tone="danger" message={t("sidecar.notRunning")} />
        <KeyValue
          items={[
            { key: "exit", label: t("sidecar.exitStatus"), value: state.exit_status ?? t("common.none") },
            { key: "start", label: t("sidecar.startError"), value: state.start_error || t("common.none") },
            { key: "config", label: t("files.config"), value: state.config_path },
          ]}
        />
        <Card title={t("sidecar.stderr")}>
          {state.stderr && state.stderr.length > 0 ? (
            <LogViewer text={state.stderr.join("\n")} />
          ) : (
            <EmptyState title={t("sidecar.noStderr")} />
          )}
        </Card>
        <Text>{t("sidecar.restartHint")}</Text>
        <RefreshButton label={t("common.refresh")} />
      </Page>
    )
  }

  const tool = tools.find((x) => x.name === (picked || tools[0]?.name))
  const schema: Schema = (tool && state.schemas && state.schemas[tool.name]) || {}
  const properties = schema.properties || {}
  const registered = tools.filter((x) => x.state === "registered").length
  const ms = status?.main_server

  const reasonOf = (x: ToolView): string => {
    if (x.state === "conflict") return t("reason.conflict", { owner: x.owner || "" })
    if (x.state === "rejected") return (x.errors || []).join("; ")
    if (x.state === "waiting_for_role") return t("reason.waitingForRole", { role: x.waiting_for || "" })
    if (x.state === "retrying") return t("reason.retrying", { attempt: x.attempt ?? 0, at: x.next_attempt_at || "" })
    return x.last_error || ""
  }
  const originOf = (s: ServerView): string => {
    const declared = tools.find((x) => (x.target || "").startsWith("mcp " + s.name + " "))?.declared_at || ""
    if (declared.includes("neko_mcp_adapter.toml")) return t("servers.fromMcpAdapter")
    return declared ? t("servers.fromManifest", { file: declared.replace(/:\d+:\d+$/, "") }) : ""
  }

  const argumentsOf = (): any => {
    if (mode === "json") return raw
    const out: Record<string, any> = {}
    for (const key of Object.keys(values)) {
      const value = values[key]
      if (value === "" || value === undefined) continue
      const kind = kindOf(properties[key])
      if (kind === "json") {
        try {
          out[key] = JSON.parse(String(value))
        } catch (e) {
          out[key] = value
        }
      } else {
        out[key] = value
      }
    }
    return out
  }

  const call = async () => {
    if (!tool) return
    setBusy(true)
    try {
      const result = await props.api.call("try_tool", { tool: tool.name, arguments: argumentsOf() }, { userInitiated: true })
      setAnswer(payloadOf(result) as TryAnswer)
    } catch (e) {
      setAnswer({ ok: false, error: { key: "errors.actionFailed", detail: String((e as any)?.message || e) } })
    } finally {
      setBusy(false)
    }
  }

  const fieldFor = (key: string, s: Schema) => {
    const kind = kindOf(s)
    const required = (schema.required || []).includes(key)
    const set = (v: any) => setValues({ ...values, [key]: v })
    return (
      <Field key={key} label={key} help={s.description || ""} required={required}>
        {kind === "boolean" ? (
          <Switch checked={Boolean(values[key])} onChange={set} />
        ) : kind === "number" || kind === "integer" ? (
          <NumberInput value={values[key] ?? ""} step={kind === "integer" ? 1 : undefined} onChange={set} />
        ) : kind === "enum" ? (
          <Select value={values[key] ?? ""} options={(s.enum || []).map((v) => ({ value: v, label: String(v) }))} onChange={set} />
        ) : kind === "string" ? (
          <Input value={values[key] ?? ""} onChange={set} />
        ) : (
          <Textarea value={values[key] ?? ""} placeholder={t("try.jsonValue")} onChange={set} />
        )}
      </Field>
    )
  }

  return (
    <Page title={t("panel.title")} subtitle={t("panel.subtitle")}>
      {state.error ? <Warning>{errorText(state.error)}</Warning> : null}

      <Grid cols={4}>
        <StatCard
          label={t("mainServer.title")}
          value={ms?.reachable === true ? t("mainServer.reachable") : ms?.reachable === false ? t("mainServer.unreachable") : t("mainServer.notYet")}
        />
        <StatCard label={t("tools.registered")} value={t("tools.nOfM", { n: registered, m: tools.length })} />
        <StatCard label={t("servers.title")} value={servers.length} />
        <StatCard label={t("calls.title")} value={state.calls ? state.calls.recorded : t("common.none")} />
      </Grid>

      <Card title={t("mainServer.title")}>
        <KeyValue
          items={[
            { key: "url", label: t("mainServer.url"), value: ms?.url || "" },
            { key: "contact", label: t("mainServer.lastContact"), value: ms?.last_contact || t("common.none") },
            { key: "loss", label: t("mainServer.lastRestart"), value: ms?.last_loss_at || t("common.none") },
            { key: "error", label: t("mainServer.lastError"), value: ms?.last_error || t("common.none") },
            { key: "ready", label: t("mainServer.ready"), value: status?.ready ? t("common.yes") : t("common.no") },
          ]}
        />
        {status && status.not_ready.length > 0 ? (
          <Alert tone="warning" message={t("mainServer.whyNotReady") + " " + status.not_ready.join("; ")} />
        ) : null}
      </Card>

      <Card title={t("tools.title")}>
        <DataTable<ToolView>
          data={tools}
          rowKey="name"
          selectedKey={tool?.name}
          onSelect={(row) => {
            setPicked(row.name)
            setValues({})
            setAnswer(null)
          }}
          emptyText={t("tools.empty")}
          columns={[
            { key: "name", label: t("tools.name") },
            {
              key: "state",
              label: t("tools.state"),
              render: (row) => <StatusBadge tone={STATE_TONES[row.state] || "default"} label={t(STATE_KEYS[row.state] || "state.pending")} />,
            },
            { key: "reason", label: t("tools.reason"), render: (row) => reasonOf(row) },
            { key: "role", label: t("tools.role"), render: (row) => row.role || t("tools.allRoles") },
            { key: "target", label: t("tools.handler"), render: (row) => row.target || row.handler || "" },
            // The file's name and the line: the folder is the tools folder
            // (under Files below) for all but an imported list.
            { key: "declared_at", label: t("tools.declaredAt"), render: (row) => (row.declared_at || "").split(/[\\/]/).pop() || "" },
            {
              key: "last_call",
              label: t("tools.lastCall"),
              render: (row) => (row.last_call ? row.last_call.at + " · " + row.last_call.outcome + " · " + t("common.ms", { ms: row.last_call.took_ms }) : t("common.none")),
            },
            { key: "calls", label: t("tools.calls") },
          ]}
        />
      </Card>

      <Card title={t("try.title")}>
        {tool ? (
          <Stack>
            <Field label={t("try.tool")}>
              <Select
                value={tool.name}
                options={tools.map((x) => ({ value: x.name, label: x.name }))}
                onChange={(v) => {
                  setPicked(String(v))
                  setValues({})
                  setAnswer(null)
                }}
              />
            </Field>
            <SegmentedControl
              value={mode}
              options={[
                { value: "form", label: t("try.form") },
                { value: "json", label: t("try.rawJson") },
              ]}
              onChange={(v) => setMode(String(v))}
            />
            {mode === "json" ? (
              <Textarea value={raw} onChange={setRaw} />
            ) : Object.keys(properties).length > 0 ? (
              <Stack>{Object.keys(properties).map((key) => fieldFor(key, properties[key]))}</Stack>
            ) : (
              <Text>{t("try.noArguments")}</Text>
            )}
            <Inline>
              <Button tone="primary" disabled={busy} onClick={call}>
                {busy ? t("try.calling") : t("try.call")}
              </Button>
            </Inline>
            {answer ? (
              answer.ok ? (
                <Stack>
                  <Alert
                    tone={answer.is_error ? "danger" : "success"}
                    message={answer.called === false ? t("try.notCalled") : answer.is_error ? t("try.readsFailure") : t("try.reads")}
                  />
                  <CodeBlock>{answer.model_text || ""}</CodeBlock>
                  {(answer.pictures || []).map((p, i) => (
                    <ImagePreview key={i} src={p.src} caption={t("try.picture", { mime: p.mime, bytes: p.bytes })} />
                  ))}
                  {(answer.warnings || []).map((w, i) => (
                    <Text key={"w" + i}>{w}</Text>
                  ))}
                  {answer.took_ms !== undefined ? <Text>{t("common.ms", { ms: answer.took_ms })}</Text> : null}
                </Stack>
              ) : (
                <Alert tone="danger" message={errorText(answer.error)} />
              )
            ) : null}
          </Stack>
        ) : (
          <EmptyState title={t("tools.empty")} />
        )}
      </Card>

      <Card title={t("servers.title")}>
        <DataTable<ServerView>
          data={servers}
          rowKey="name"
          selectedKey={server}
          onSelect={(row) => setServer(row.name)}
          emptyText={t("servers.empty")}
          columns={[
            { key: "name", label: t("servers.name") },
            {
              key: "phase",
              label: t("servers.phase"),
              render: (row) => <StatusBadge tone={PHASE_TONES[row.phase] || "default"} label={t(PHASE_KEYS[row.phase] || "phase.starting")} />,
            },
            { key: "transport", label: t("servers.transport") },
            { key: "tools", label: t("servers.tools"), render: (row) => String(row.tools.length) },
            { key: "restarts", label: t("servers.restarts") },
            { key: "last_error", label: t("servers.lastError"), render: (row) => row.last_error || "" },
            { key: "origin", label: t("servers.origin"), render: (row) => originOf(row) },
            {
              key: "sign_in",
              label: t("servers.signIn.column"),
              render: (row) =>
                row.sign_in ? (
                  <StatusBadge tone={SIGN_IN_TONES[row.sign_in.state] || "default"} label={t(SIGN_IN_KEYS[row.sign_in.state] || "servers.signIn.needed")} />
                ) : (
                  ""
                ),
            },
          ]}
        />
        {servers
          .filter((s) => s.sign_in?.state === "needs_sign_in")
          .map((s) => (
            <Stack key={"sign-in-" + s.name}>
              <Alert tone="warning" message={t("servers.signIn.hint", { name: s.name, link: s.sign_in?.link || "" })} />
              {signIn ? <ActionButton action={signIn} values={{ server: s.name }} label={t("servers.signIn.button", { name: s.name })} /> : null}
            </Stack>
          ))}
        {restart && server ? (
          <ActionButton action={restart} values={{ server }} label={t("servers.restart", { name: server })} />
        ) : servers.length > 0 ? (
          <Text>{t("servers.pickToRestart")}</Text>
        ) : null}
      </Card>

      <Card title={t("calls.title")}>
        {state.calls && state.calls.capacity === 0 ? (
          <Text>{t("calls.off")}</Text>
        ) : (
          <DataTable<CallRecord>
            data={calls}
            rowKey="seq"
            maxRows={50}
            emptyText={t("calls.empty")}
            columns={[
              { key: "at", label: t("calls.at") },
              { key: "tool", label: t("calls.tool") },
              { key: "by", label: t("calls.by"), render: (row) => t(BY_KEYS[row.by || "model"] || "calls.byModel") },
              { key: "role", label: t("calls.role"), render: (row) => row.role || t("tools.allRoles") },
              { key: "duration_ms", label: t("calls.duration"), render: (row) => t("common.ms", { ms: row.duration_ms }) },
              {
                key: "outcome",
                label: t("calls.outcome"),
                render: (row) => <StatusBadge tone={row.is_error ? "danger" : "success"} label={row.outcome} />,
              },
              {
                key: "arguments",
                label: t("calls.arguments"),
                render: (row) => row.arguments.text + (row.arguments.cut ? " " + t("calls.cut", { bytes: row.arguments.bytes }) : ""),
              },
              {
                key: "answer",
                label: t("calls.modelRead"),
                render: (row) => (
                  <Stack>
                    <Text>{row.answer.text + (row.answer.cut ? " " + t("calls.cut", { bytes: row.answer.bytes }) : "")}</Text>
                    {row.pictures.map((p, i) =>
                      p.data_b64 ? (
                        <ImagePreview key={i} src={"data:" + p.mime + ";base64," + p.data_b64} caption={t("try.picture", { mime: p.mime, bytes: p.bytes })} />
                      ) : (
                        <Text key={i}>{t("calls.pictureNotKept", { mime: p.mime, bytes: p.bytes })}</Text>
                      )
                    )}
                  </Stack>
                ),
              },
            ]}
          />
        )}
      </Card>

      <Card title={t("files.title")}>
        <KeyValue
          items={[
            { key: "tools", label: t("files.toolsFolder"), value: state.tools_folder },
            { key: "config", label: t("files.config"), value: state.config_path },
            { key: "inspector", label: t("files.inspector"), value: state.inspector_url || t("errors.adminOff") },
          ]}
        />
        <Inline>
          {openInspector ? <ActionButton action={openInspector} label={t("actions.openInspector.label")} /> : null}
          <RefreshButton label={t("common.refresh")} />
        </Inline>
      </Card>
    </Page>
  )
}
