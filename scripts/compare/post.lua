-- wrk script for scripts/compare-proxies.sh: POST one fixed chat body
-- (file named by $KVCA_BODY) on every request, and print one parseable
-- summary line at the end (latencies in microseconds, exact, instead of
-- wrk's rounded "1.23ms").
local path = os.getenv("KVCA_BODY")
if not path then error("KVCA_BODY is not set") end
local f = assert(io.open(path, "rb"))
local body = f:read("*a")
f:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"

-- A body with a sibling .seq file (an agent session's requests, separated
-- by the byte 0x1e) is replayed in order instead: each connection's
-- thread cycles through the session's growing bodies. The requests are
-- built in init, once wrk has set the Host header they need.
local sf = io.open((path:gsub("%.json$", ".seq")), "rb")
if sf then
  local bodies = {}
  for b in sf:read("*a"):gmatch("[^\30]+") do bodies[#bodies + 1] = b end
  sf:close()
  local seq, i = {}, 0
  init = function(args)
    for k, b in ipairs(bodies) do
      seq[k] = wrk.format("POST", nil, {["Host"] = wrk.headers["Host"], ["Content-Type"] = "application/json"}, b)
    end
  end
  request = function()
    i = i % #seq + 1
    return seq[i]
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "KVCA_RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d mean_us=%.0f max_us=%d " ..
    "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency.mean, latency.max,
    e.connect, e.read, e.write, e.status, e.timeout))
end
