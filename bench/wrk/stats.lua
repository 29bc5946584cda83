-- wrk script for GET /stats: keep-alive GETs, counts answers that are not
-- 200 (wrk itself only counts socket errors and non-2xx/3xx), prints them.
--   wrk -t1 -c32 -d10s -s bench/wrk/stats.lua http://127.0.0.1:PORT/stats
local bad = 0
local bytes = 0
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  wrk.method = "GET"
  wrk.headers["Accept"] = "application/json"
end

function response(status, headers, body)
  if status ~= 200 then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  io.write(string.format("STATS requests=%d seconds=%.2f rps=%.0f p50_us=%d p99_us=%d errors=%d\n",
    summary.requests, secs, summary.requests / secs,
    latency:percentile(50), latency:percentile(99),
    summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.status + summary.errors.timeout))
end
