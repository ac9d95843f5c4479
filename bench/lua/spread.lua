-- Spreads wrk's requests over many paths (task uuids, space cursors) and reports exact
-- latency percentiles.
--
-- Arguments after `--`: METHOD PATHS_FILE THREADS [BODY]
--   METHOD      GET, PUT or POST
--   PATHS_FILE  one request path per line, e.g. /tasks/<uuid>
--   THREADS     wrk's -t, so each thread can take its own stripe of the file
--   BODY        request body, sent as application/json (PUT and POST); a `{n}` in it is
--               replaced, request by request, by a number that grows (a moving `current`)
--
-- Thread k takes lines k, k+T, k+2T, ... and walks its stripe in order, wrapping around,
-- so T threads cover every path once after (number of paths) requests. done() prints one
-- line, "BENCH_RESULT {json}", with latencies in microseconds and the requests each
-- thread sent (the harness uses them to tell which paths a run has covered).

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  local method, file, nthreads, body = args[1], args[2], tonumber(args[3]), args[4]
  local headers = {}
  if body ~= nil and body ~= "" then
    headers["Content-Type"] = "application/json"
  else
    body = nil
  end
  local mine = {}
  local all = {}
  local i = 0
  for line in io.lines(file) do
    if line ~= "" then
      table.insert(all, line)
      if i % nthreads == id then
        table.insert(mine, line)
      end
      i = i + 1
    end
  end
  if #mine == 0 then
    mine = all -- fewer paths than threads: this thread shares them all
  end
  if body ~= nil and string.find(body, "{n}", 1, true) then
    moving = {method = method, paths = mine, headers = headers, body = body, step = nthreads}
  end
  prepared = {}
  for _, line in ipairs(mine) do
    table.insert(prepared, wrk.format(method, line, headers, body))
  end
  stripe = #prepared
  sent = 0
end

function request()
  sent = sent + 1
  if moving ~= nil then
    local n = tostring(sent * moving.step + id)
    local body = string.gsub(moving.body, "{n}", n)
    return wrk.format(moving.method, moving.paths[((sent - 1) % stripe) + 1], moving.headers, body)
  end
  return prepared[((sent - 1) % stripe) + 1]
end

function done(summary, latency, _)
  local per_thread = {}
  for _, t in ipairs(threads) do
    table.insert(per_thread, string.format("%d", t:get("sent")))
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"mean":%.1f,"p50":%d,"p90":%d,"p99":%d,"max":%d},' ..
    '"sent_per_thread":[%s]}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max,
    table.concat(per_thread, ",")))
end
