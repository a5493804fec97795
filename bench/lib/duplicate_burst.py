#!/usr/bin/env python3
"""N duplicates of one request at once, each on its own connection, through an idempotency
gateway; prints when each response arrived relative to the first one that executed.

  duplicate_burst.py HOST:PORT[,HOST:PORT...] KEY N SLEEP_MS [PREFER]

With several gateways (sharing one store), the requests go to them in turn.

One thread and epoll: all N requests are written first, then every response is timestamped the
moment epoll reports its socket readable (one clock read per wake-up, before any parsing), so
the client adds little to the figures. Prints one JSON object: statuses, replayed counts, and
the lag of every other response behind the first executed one (ms)."""
import json
import selectors
import socket
import sys
import time

gateways = [a.rsplit(":", 1) for a in sys.argv[1].split(",")]
key, n, sleep_ms = sys.argv[2], int(sys.argv[3]), sys.argv[4]
prefer = sys.argv[5] if len(sys.argv) > 5 else ""
body = b'{"amount":100}'
request = (f"POST /v1/payments HTTP/1.1\r\nHost: gateway\r\nIdempotency-Key: {key}\r\n"
           f"Content-Type: application/json\r\nX-Sleep-Ms: {sleep_ms}\r\n"
           + (f"Prefer: {prefer}\r\n" if prefer else "")
           + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body

sel = selectors.DefaultSelector()
socks = []
for i in range(n):
    host, port = gateways[i % len(gateways)]
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    socks.append(s)
for s in socks:
    s.sendall(request)
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, {"buf": b"", "first": None})

done = []
deadline = time.monotonic() + 60
while len(done) < n and time.monotonic() < deadline:
    events = sel.select(timeout=1)
    now = time.monotonic()
    for key_, _ in events:
        state = key_.data
        if state["first"] is None:
            state["first"] = now
        chunk = key_.fileobj.recv(65536)
        state["buf"] += chunk
        if not chunk:  # Connection: close: the response is complete
            head = state["buf"].split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
            status = int(head.split(" ", 2)[1]) if head.startswith("http/") else 0
            replayed = "idempotent-replayed: true" in head
            done.append((state["first"], status, replayed))
            sel.unregister(key_.fileobj)
            key_.fileobj.close()

statuses = {}
for _, status, _ in done:
    statuses[str(status)] = statuses.get(str(status), 0) + 1
executed = [t for t, status, replayed in done if status == 201 and not replayed]
lags = []
if executed:
    first = min(executed)
    lags = sorted((t - first) * 1000 for t, status, replayed in done if replayed)
print(json.dumps({"responses": len(done), "statuses": statuses,
                  "executed_responses": len(executed), "replayed": len(lags),
                  "lags_ms": [round(x, 3) for x in lags]}))
