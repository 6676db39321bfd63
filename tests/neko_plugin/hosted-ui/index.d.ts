// Our declaration of `@neko/plugin-ui`, the one module a Hosted UI TSX file
// may import, written from upstream's plugin/sdk/hosted-ui/index.d.ts at
// Project-N-E-K-O/N.E.K.O 685f1382 (the names, props and types the
// runtime gives, as far as the plugin's panel and guide use them; `any`
// where upstream has `any`). tests/neko_plugin/check_tsx.sh type-checks
// packaging/neko-plugin/neko_sidecar/ui/panel.tsx and docs/guide.tsx
// against it. When upstream's declaration changes, this one follows.

export type Tone = "primary" | "success" | "warning" | "danger" | "info" | "default"

export type JsonSchema = {
  type?: string
  title?: string
  description?: string
  default?: any
  enum?: any[]
  properties?: Record<string, JsonSchema>
  items?: JsonSchema
  required?: string[]
}

export type HostedAction = {
  id: string
  entry_id?: string
  label?: string
  description?: string
  input_schema?: JsonSchema
  icon?: string | null
  tone?: Tone
  group?: string | null
  order?: number
  confirm?: boolean | string
  refresh_context?: boolean
}

export type HostedApi = {
  call: (actionId: string, args?: Record<string, any>, options?: { timeoutMs?: number; userInitiated?: boolean }) => Promise<any>
  refresh: () => Promise<any>
}

export type HostedI18n = {
  locale: string
  default_locale?: string
  messages?: Record<string, Record<string, string>>
}

export type LocalStateSetter<T> = (next: T | ((previous: T) => T)) => T

export type PluginSurfaceProps<State = Record<string, any>> = {
  plugin: Record<string, any>
  host?: { origin?: string }
  surface: Record<string, any>
  state: State
  stateSchema?: JsonSchema | null
  actions: HostedAction[]
  entries: Array<Record<string, any>>
  config: { schema: JsonSchema; value: Record<string, any>; readonly?: boolean }
  warnings: Array<{ path: string; code: string; message: string }>
  locale: string
  t: (source: string, params?: Record<string, any>) => string
  i18n: HostedI18n
  api: HostedApi
  useLocalState: <T>(key: string, initialValue: T | (() => T)) => [T, LocalStateSetter<T>]
}

export type CommonProps = {
  key?: any
  className?: string
  children?: any
}

export type DataTableColumn<T = Record<string, any>> = string | {
  key: keyof T | string
  label?: any
  render?: (row: T, index: number) => any
}

export type UiOption = string | { value: any; label?: any; title?: any; disabled?: boolean }

export function Page(props: CommonProps & { title?: any; subtitle?: any }): any
export function Card(props: CommonProps & { title?: any }): any
export function Stack(props: CommonProps & { gap?: number | string }): any
export function Inline(props: CommonProps & { gap?: number | string; align?: string; justify?: string; wrap?: boolean }): any
export function Grid(props: CommonProps & { cols?: number; gap?: number | string }): any
export function Text(props: CommonProps): any
export function h(type: any, props: any, ...children: any[]): any
export const Fragment: any
export function Button(props: CommonProps & { tone?: Tone; variant?: Tone; type?: string; disabled?: boolean; onClick?: () => void | Promise<void> }): any
export function StatusBadge(props: CommonProps & { tone?: Tone; status?: Tone | string; label?: any }): any
export function StatCard(props: CommonProps & { label?: any; value?: any }): any
export function KeyValue(props: CommonProps & { data?: Record<string, any>; items?: Array<{ key?: string; label?: any; value?: any }> }): any
export function DataTable<T = Record<string, any>>(props: CommonProps & {
  data?: T[]
  columns?: Array<DataTableColumn<T>>
  rowKey?: keyof T | string
  selectedKey?: any
  emptyText?: any
  maxRows?: number
  onSelect?: (row: T, index: number) => void
}): any
export function Alert(props: CommonProps & { tone?: Tone; message?: any }): any
export function EmptyState(props: CommonProps & { title?: any; description?: any }): any
export function LogViewer(props: CommonProps & { text?: any; value?: any; autoScroll?: boolean; deps?: any[] }): any
export function Field(props: CommonProps & { label?: any; help?: any; error?: any; required?: boolean }): any
export function Input(props: CommonProps & { type?: string; value?: any; placeholder?: string; invalid?: boolean; error?: any; disabled?: boolean; onChange?: (value: string) => void }): any
export function NumberInput(props: CommonProps & { value?: number | ""; placeholder?: string; min?: number; max?: number; step?: number; invalid?: boolean; error?: any; disabled?: boolean; onChange?: (value: number | string) => void }): any
export function Select(props: CommonProps & { value?: any; options?: UiOption[]; invalid?: boolean; error?: any; disabled?: boolean; onChange?: (value: any) => void }): any
export function SegmentedControl(props: CommonProps & { value?: any; options?: UiOption[]; disabled?: boolean; onChange?: (value: any) => void }): any
export function Textarea(props: CommonProps & { value?: any; placeholder?: string; invalid?: boolean; error?: any; disabled?: boolean; onChange?: (value: string) => void }): any
export function Switch(props: CommonProps & { checked?: boolean; label?: any; invalid?: boolean; error?: any; disabled?: boolean; onChange?: (value: boolean) => void }): any
export function ImagePreview(props: CommonProps & { src?: string; value?: string; label?: any; caption?: any; alt?: string; emptyText?: any; placeholder?: any }): any
export function ActionButton(props: CommonProps & {
  action?: HostedAction
  actionId?: string
  label?: any
  tone?: Tone
  values?: Record<string, any>
  args?: Record<string, any>
  refresh?: boolean
  confirm?: boolean | string
  onResult?: (result: any) => void
  onError?: (error: Error) => void
}): any
export function RefreshButton(props: CommonProps & { label?: any; tone?: Tone; onRefresh?: () => void; onError?: (error: Error) => void }): any
export function CodeBlock(props: CommonProps): any
export function Tip(props: CommonProps): any
export function Warning(props: CommonProps): any
export function Steps(props: CommonProps): any
export function Step(props: CommonProps & { index?: any; title?: any }): any
