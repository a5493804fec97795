-- The wrk script of bench/gateway-bench.sh. Every request is the same small POST; only the
-- Idempotency-Key differs, by mode (environment variable IDEM_BENCH_MODE):
--   unique  a fresh key per request, "<IDEM_BENCH_RUN>-<wrk thread>-<counter>": the gateway's
--           first-execution path (the direct and nginx runs send these too, so the bytes match)
--   fixed   one key (IDEM_BENCH_KEY) for every request: the replay path
-- done() prints one machine-readable line:
--   RESULT requests=N duration_us=N p50_us=N p99_us=N connect=N read=N write=N status=N timeout=N
-- (status: responses with a status of 400 or more, which wrk reports as "Non-2xx or 3xx").
local mode = os.getenv("IDEM_BENCH_MODE") or "unique"
local fixed_key = os.getenv("IDEM_BENCH_KEY") or "bench-replay"
local run_id = os.getenv("IDEM_BENCH_RUN") or tostring(os.time())
local body = '{"amount":1000,"currency":"EUR"}'
local next_thread = 0

function setup(thread)
  next_thread = next_thread + 1
  thread:set("thread_id", next_thread)
end

function init(args)
  counter = 0
  prefix = run_id .. "-" .. tostring(thread_id) .. "-"
end

function request()
  local key = fixed_key
  if mode == "unique" then
    counter = counter + 1
    key = prefix .. counter
  end
  return wrk.format("POST", "/v1/payments",
    { ["Idempotency-Key"] = key, ["Content-Type"] = "application/json",
      ["Authorization"] = "Bearer bench-tenant" }, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d connect=%d read=%d write=%d status=%d timeout=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout))
end
