// neko-sidecar's guide page in N.E.K.O's Plugin Manager (Hosted UI): where
// its files are on this machine (from the dashboard context), a first tool,
// how N.E.K.O's MCP adapter's servers come in, and how to uninstall. Every
// sentence is the plugin's i18n catalogue; the TOML is code and stays as it is.
import { Page, Card, Stack, Text, Tip, Warning, Steps, Step, CodeBlock, KeyValue } from "@neko/plugin-ui"
import type { PluginSurfaceProps } from "@neko/plugin-ui"

type GuideState = {
  config_path?: string
  tools_folder?: string
  mcp_import_manifest?: string
  mcp_adapter_config?: string
  inspector_url?: string | null
}

const FIRST_TOOL = `[[tool]]
name = "hello"
description = "Says hello to someone."
timeout_seconds = 5
handler = { type = "exec", command = ["python", "handlers/hello.py"] }

[tool.parameters]
type = "object"
required = ["name"]
properties = { name = { type = "string" } }`

const HANDLER = `import json, sys

call = json.load(sys.stdin)
name = call["arguments"]["name"]
print(json.dumps({"output": f"Hello, {name}!", "is_error": False}))`

const MCP_SERVER = `[[mcp_server]]
name = "files"
command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"]`

export default function SidecarGuide(props: PluginSurfaceProps<GuideState>) {
  const { t } = props
  const state = props.state || {}
  return (
    <Page title={t("guide.title")} subtitle={t("guide.subtitle")}>
      <Card title={t("guide.where.title")}>
        <Stack>
          <Text>{t("guide.where.body")}</Text>
          <KeyValue
            items={[
              { key: "tools", label: t("files.toolsFolder"), value: state.tools_folder || "" },
              { key: "config", label: t("files.config"), value: state.config_path || "" },
              { key: "inspector", label: t("files.inspector"), value: state.inspector_url || t("errors.adminOff") },
            ]}
          />
          <Tip>{t("guide.where.reload")}</Tip>
        </Stack>
      </Card>

      <Card title={t("guide.first.title")}>
        <Steps>
          <Step index={1} title={t("guide.first.manifest")}>
            <CodeBlock>{FIRST_TOOL}</CodeBlock>
          </Step>
          <Step index={2} title={t("guide.first.handler")}>
            <CodeBlock>{HANDLER}</CodeBlock>
          </Step>
          <Step index={3} title={t("guide.first.check")}>
            <Text>{t("guide.first.checkBody")}</Text>
          </Step>
        </Steps>
        <Text>{t("guide.first.mcp")}</Text>
        <CodeBlock>{MCP_SERVER}</CodeBlock>
      </Card>

      <Card title={t("guide.adapter.title")}>
        <Stack>
          <Text>{t("guide.adapter.body")}</Text>
          <KeyValue
            items={[
              { key: "manifest", label: t("guide.adapter.manifest"), value: state.mcp_import_manifest || "" },
              { key: "source", label: t("guide.adapter.source"), value: state.mcp_adapter_config || t("common.none") },
            ]}
          />
          <Warning>{t("guide.adapter.injectMcp")}</Warning>
          <Text>{t("guide.adapter.keep")}</Text>
        </Stack>
      </Card>

      <Card title={t("guide.uninstall.title")}>
        <Stack>
          <Text>{t("guide.uninstall.body")}</Text>
          <Text>{t("guide.uninstall.files")}</Text>
        </Stack>
      </Card>
    </Page>
  )
}
