#!/usr/bin/env python3
"""N duplicates of one request at once, each on its own connection, through an idempotency
gateway; prints when each response arrived relative to the first one that executed.

  duplicate_burst.py HOST:PORT[,HOST:PORT...] KEY N SLEEP_MS [PREFER]

With several gateways (sharing one store), the requests go to them in turn.

One thread and epoll: all N requests are written first; each response is then timestamped by
the kernel as its first bytes arrived (SO_TIMESTAMPNS), so the figures do not include the time
this client takes to get round to a socket (a hundred sockets cost it a few milliseconds).
Prints one JSON object: statuses, replayed counts, and the lag of every other response behind
the first executed one (ms), also split by gateway (the one that executed, the others)."""
import json
import selectors
import socket
import struct
import sys
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; the value Python may not name

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
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    socks.append(s)
for s in socks:
    s.sendall(request)
    s.setblocking(False)
for i, s in enumerate(socks):
    sel.register(s, selectors.EVENT_READ, {"buf": b"", "first": None, "gateway": i % len(gateways)})

done = []
deadline = time.monotonic() + 60
while len(done) < n and time.monotonic() < deadline:
    events = sel.select(timeout=1)
    now = time.time()  # in case the kernel gave no timestamp; the same (real-time) clock
    for key_, _ in events:
        state = key_.data
        chunk, ancillary, _, _ = key_.fileobj.recvmsg(65536, 256)
        if state["first"] is None and chunk:
            state["first"] = now
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
                    seconds, nanoseconds = struct.unpack("qq", data[:16])
                    state["first"] = seconds + nanoseconds / 1e9
        state["buf"] += chunk
        if not chunk:  # Connection: close: the response is complete
            head = state["buf"].split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
            status = int(head.split(" ", 2)[1]) if head.startswith("http/") else 0
            replayed = "idempotent-replayed: true" in head
            done.append((state["first"], status, replayed, state["gateway"]))
            sel.unregister(key_.fileobj)
            key_.fileobj.close()

statuses = {}
for _, status, _, _ in done:
    statuses[str(status)] = statuses.get(str(status), 0) + 1
executed = [(t, g) for t, status, replayed, g in done if status == 201 and not replayed]
lags, other_lags, local_lags = [], [], []
if executed:
    first, first_gateway = min(executed)
    lags = sorted((t - first) * 1000 for t, status, replayed, g in done if replayed)
    # Replays from the gateways that did not execute: woken by the store's settle notice.
    other_lags = sorted((t - first) * 1000 for t, status, replayed, g in done
                        if replayed and g != first_gateway)
    local_lags = sorted((t - first) * 1000 for t, status, replayed, g in done
                        if replayed and g == first_gateway)
print(json.dumps({"responses": len(done), "statuses": statuses,
                  "executed_responses": len(executed), "replayed": len(lags),
                  "lags_ms": [round(x, 3) for x in lags],
                  "local_lags_ms": [round(x, 3) for x in local_lags],
                  "notified_lags_ms": [round(x, 3) for x in other_lags]}))
