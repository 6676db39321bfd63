#!/usr/bin/env node
// An exec handler for neko-sidecar in Node: the `weather` tool, run once per call.
//
// stdin:  the callback JSON, {"name", "arguments", "call_id", "raw_arguments"}.
// env:    NEKO_TOOL_NAME, NEKO_CALL_ID, plus the manifest's `env`.
// stdout: an envelope {"output": ..., "is_error": false}, or on failure
//         {"output": {"error": MSG}, "is_error": true, "error": MSG} (plain
//         JSON or text works too). main_server shows the model `output` alone
//         (`is_error` and `error` go to its logs), so the message goes in
//         `output`. stderr goes to the sidecar's log. Exit 0.
const WEATHER = { tokyo: [22, "sunny"], osaka: [24, "cloudy"], sapporo: [9, "snow"] };

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const call = JSON.parse(input);
  const city = String(call.arguments.city ?? "");
  console.error(`${process.env.NEKO_CALL_ID}: weather for ${JSON.stringify(city)}`);
  const hit = WEATHER[city.toLowerCase()];
  const message = `unknown city ${JSON.stringify(city)}; known cities: Tokyo, Osaka, Sapporo`;
  const answer = hit
    ? { output: { city, temp_c: hit[0], weather: hit[1] }, is_error: false }
    : { output: { error: message }, is_error: true, error: message };
  process.stdout.write(JSON.stringify(answer));
});
