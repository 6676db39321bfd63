// The runtime's JSX factory, a global in the hosted iframe (upstream
// plugin/sdk/hosted-ui/globals.d.ts @685f1382 declares it so too).
import type * as HostedUi from "./index"

declare global {
  const h: typeof HostedUi.h
  const Fragment: typeof HostedUi.Fragment
}

export {}
