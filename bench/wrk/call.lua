-- wrk script: POST a callback body as main_server sends it, and print the
-- figures bench/run.sh reads (latency in microseconds).
-- The tool name comes from $TOOL (default "w"), its arguments (a JSON
-- object with no backslash in it) from $ARGS (default {"city":"Tokyo"}).
local tool = os.getenv("TOOL") or "w"
local args = os.getenv("ARGS") or '{"city":"Tokyo"}'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"name":"' .. tool .. '","arguments":' .. args .. ',"call_id":"x","raw_arguments":"'
  .. args:gsub('"', '\\"') .. '"}'

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT p50_us=%d p90_us=%d p99_us=%d rps=%.1f requests=%d socket_errors=%d non2xx=%d\n",
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    summary.requests / (summary.duration / 1e6), summary.requests,
    e.connect + e.read + e.write + e.timeout, e.status))
end
