#!/usr/bin/env node
// An exec handler for neko-sidecar in Node.js: the `roll_dice` tool.
//
// stdin:  the callback JSON, {"name", "arguments", "call_id", "raw_arguments"};
//         the sidecar has already checked `arguments` against the schema.
// stdout: an envelope, {"output": ..., "is_error": false}. This tool cannot
//         fail (the schema bounds `count` and `sides`); a handler that can
//         answers {"output": {"error": MSG}, "is_error": true, "error": MSG}:
//         main_server shows the model `output` alone, never `error`.
// env:    NEKO_TOOL_NAME and NEKO_CALL_ID, plus the manifest's `env`.
let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const { count, sides } = JSON.parse(input).arguments;
  const rolls = Array.from({ length: count }, () => 1 + Math.floor(Math.random() * sides));
  const total = rolls.reduce((a, b) => a + b, 0);
  process.stdout.write(JSON.stringify({ output: { rolls, total }, is_error: false }));
});
