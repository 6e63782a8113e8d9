#!/usr/bin/env python3
"""Demo origin for `make run`: a small shop that is slow the way real sites are slow.

  /               HTML page that takes 200–800 ms to render (a busy PHP page), linking
                  /assets/site.css and /assets/logo.svg
  /checkout       GET: a small checkout form (same render time); POST: completes the order
                  and ends the visitor's session with `Concert-Session: end`, so Concert
                  revokes their concert_admit pass and expires its cookie
  /staff          a staff sign-in page whose response grants the visitor priority with
                  `Concert-Priority: staff; ttl=3600`: Concert sets a concert_priority
                  cookie bound to their concert_admit pass (demo/run.py configures
                  -priority-classes staff,checkout)
  /assets/*       static files, answered at once
  /api/time       JSON with the server time
  /pay            a fake payment page for skipping the line: the waiting page links here with
                  ?ticket=<ref> (-skip-url /pay?ticket={{.Ticket}}); "paying" redirects the visitor
                  to Concert's signed /queue/promote link (HMAC-SHA256 with the promote secret)
  anything else   404 page

Python standard library only; HTTP/1.1 with keep-alive (ThreadingHTTPServer, one
thread per connection). Concert sits in front of it and keeps at most `cap` page
renders in flight.
"""
import argparse
import datetime
import hashlib
import hmac
import html
import os
import urllib.parse
import json
import random
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CSS = b"""*{box-sizing:border-box}
body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2230;background:#f4f1ea}
header{display:flex;align-items:center;gap:14px;padding:18px 32px;background:#1d2230;color:#f4f1ea}
header img{width:44px;height:44px}
header h1{margin:0;font-size:22px;letter-spacing:.02em}
header span{margin-left:auto;font-size:13px;opacity:.7}
main{max-width:920px;margin:32px auto;padding:0 20px}
.hero{background:#fff;border-radius:14px;padding:28px 32px;box-shadow:0 2px 12px rgba(0,0,0,.06)}
.hero h2{margin:0 0 6px;font-size:28px}
.hero p{margin:0;color:#5b6170}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(200px,1fr));gap:16px;margin-top:24px}
.card{background:#fff;border-radius:12px;padding:18px;box-shadow:0 1px 6px rgba(0,0,0,.05)}
.card b{display:block;font-size:17px}
.card .price{color:#b2452e;font-weight:600;margin-top:6px}
.card button{margin-top:12px;width:100%;padding:9px;border:0;border-radius:8px;background:#1d2230;color:#fff;
  font-weight:600;cursor:pointer}
footer{max-width:920px;margin:24px auto 40px;padding:0 20px;font-size:13px;color:#7a7f8c}
code{background:#e9e4d8;padding:1px 5px;border-radius:4px}
"""

LOGO = b"""<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64">
<circle cx="32" cy="32" r="30" fill="#f4f1ea"/>
<path d="M24 44V18l22-5v26" fill="none" stroke="#b2452e" stroke-width="4" stroke-linecap="round"
 stroke-linejoin="round"/>
<circle cx="19" cy="44" r="6" fill="#1d2230"/><circle cx="41" cy="39" r="6" fill="#1d2230"/>
</svg>
"""

ASSETS = {
    "/assets/site.css": ("text/css; charset=utf-8", CSS),
    "/assets/logo.svg": ("image/svg+xml", LOGO),
}

ITEMS = [("Front row, night one", 189), ("Floor standing", 79), ("Balcony seat", 59),
         ("Tour t-shirt", 29), ("Signed vinyl", 45), ("VIP soundcheck", 249)]

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>Concert demo shop</title>
<link rel="stylesheet" href="/assets/site.css">
</head><body>
<header><img src="/assets/logo.svg" alt=""><h1>Midnight Echo — tour tickets</h1>
<span>rendered in {ms} ms by origin thread {thread}</span></header>
<main>
<section class="hero"><h2>Tickets are on sale now</h2>
<p>This page stands in for a slow PHP site: each render takes 200–800 ms. Concert keeps only
<code>cap</code> renders in flight; everyone else waits in line and is let in, in order.
<a href="/checkout">Go to checkout</a> to end your visit.</p></section>
<section class="grid">{cards}</section>
</main>
<footer>Served at {now} UTC · <a href="/checkout">checkout</a> · <a href="/staff">staff sign-in</a> · <a href="/api/time">/api/time</a> ·
waiting room stats: <a href="/_room/stats">/_room/stats</a></footer>
</body></html>
"""

CHECKOUT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>Checkout — Concert demo shop</title>
<link rel="stylesheet" href="/assets/site.css">
</head><body>
<header><img src="/assets/logo.svg" alt=""><h1>Midnight Echo — checkout</h1>
<span>rendered in {ms} ms by origin thread {thread}</span></header>
<main><section class="hero">{content}</section></main>
<footer><a href="/">back to the shop</a> · waiting room stats: <a href="/_room/stats">/_room/stats</a></footer>
</body></html>
"""

PAY_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Skip the line</title><link rel="stylesheet" href="/assets/site.css"></head>
<body><main>
<h1>Skip the line</h1>
<p>This is a fake payment page: nothing is charged. Paying sends you back to the shop ahead of everyone
still waiting, through Concert's signed promote link.</p>
<form method="post" action="/pay"><input type="hidden" name="ticket" value="{ref}">
<button type="submit">Pay $5 and go in now</button></form>
</main></body></html>
"""

CHECKOUT_FORM = """<h2>Your order</h2>
<p>One ticket, front row, night one: $189.</p>
<form method="post" action="/checkout" class="card" style="max-width:360px;margin-top:16px">
<label>Email<br><input name="email" type="email" required style="width:100%;padding:8px"></label>
<button type="submit">Place order</button>
</form>
<p>Placing the order ends your visit: the response carries <code>Concert-Session: end</code>, and
Concert revokes your admission pass on every worker. Coming back means joining the line again.</p>
"""

STAFF = """<h2>Signed in as staff</h2>
<p>This response carries <code>Concert-Priority: staff; ttl=3600</code>. Concert keeps that header
from your browser and sets a <code>concert_priority</code> cookie instead, signed and bound to your
<code>concert_admit</code> pass, valid for an hour: your page requests are the staff class's, the first
of <code>-priority-classes</code>. <a href="/">Back to the shop</a></p>
"""

CHECKOUT_DONE = """<h2>Thank you, order {order} is placed</h2>
<p>Your visit has ended: this response told Concert <code>Concert-Session: end</code>, so your
<code>concert_admit</code> pass is revoked and its cookie expired. <a href="/">Back to the shop</a>
puts you through the waiting room again when it is busy.</p>
"""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "demo-origin"

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("origin: %s\n" % (fmt % args))

    def _send(self, status, ctype, body, extra=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _render_delay(self):
        ms = random.randint(200, 800)
        time.sleep(ms / 1000.0)
        return ms

    def _checkout(self, content, extra=None):
        ms = self._render_delay()
        body = CHECKOUT.format(ms=ms, thread=threading.get_ident() % 10000, content=content).encode()
        headers = {"Cache-Control": "no-store"}
        headers.update(extra or {})
        self._send(200, "text/html; charset=utf-8", body, headers)

    def _page(self):
        ms = self._render_delay()
        cards = "".join('<div class="card"><b>%s</b><div class="price">$%d</div><button>Add to cart</button>'
                        "</div>" % item for item in ITEMS)
        body = PAGE.format(ms=ms, thread=threading.get_ident() % 10000, cards=cards,
                           now=datetime.datetime.utcnow().strftime("%H:%M:%S")).encode()
        self._send(200, "text/html; charset=utf-8", body, {"Cache-Control": "no-store"})

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path in ASSETS:
            ctype, body = ASSETS[path]
            self._send(200, ctype, body, {"Cache-Control": "public, max-age=60"})
        elif path == "/api/time":
            now = datetime.datetime.now(datetime.timezone.utc)
            body = json.dumps({"time": now.isoformat(timespec="milliseconds"), "unix": now.timestamp()}).encode()
            self._send(200, "application/json", body, {"Cache-Control": "no-store"})
        elif path in ("/", "/index.html"):
            self._page()
        elif path == "/checkout":
            self._checkout(CHECKOUT_FORM)
        elif path == "/pay":
            self._payment_page()
        elif path == "/staff":
            self._checkout(STAFF, {"Concert-Priority": "staff; ttl=3600"})
        else:
            self._not_found()

    def _payment_page(self):
        query = urllib.parse.parse_qs(self.path.partition("?")[2])
        ref = query.get("ticket", [""])[0]
        body = PAY_PAGE.format(ref=html.escape(ref, quote=True)).encode()
        self._send(200, "text/html; charset=utf-8", body, {"Cache-Control": "no-store"})

    def _paid(self, form):
        """The payment went through: send the visitor to Concert's signed promote link."""
        ref = urllib.parse.parse_qs(form).get("ticket", [""])[0]
        secret = self.server.promote_secret
        if not ref or not secret:
            return self._send(400, "text/plain; charset=utf-8", b"no ticket to promote\n")
        exp = int(time.time()) + 300
        sig = hmac.new(secret.encode(), ("%s.%d" % (ref, exp)).encode(), hashlib.sha256).hexdigest()
        location = "/queue/promote?" + urllib.parse.urlencode({"ticket": ref, "exp": exp, "sig": sig})
        self._send(303, "text/plain; charset=utf-8", b"paid\n", {"Location": location, "Cache-Control": "no-store"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        form = self.rfile.read(length).decode("utf-8", "replace")  # nothing is kept
        if self.path.split("?", 1)[0] == "/pay":
            self._paid(form)
        elif self.path.split("?", 1)[0] == "/checkout":
            order = "%06d" % random.randint(0, 999999)
            self._checkout(CHECKOUT_DONE.format(order=order), {"Concert-Session": "end"})
        else:
            self._not_found()

    def _not_found(self):
        self._send(404, "text/html; charset=utf-8", b"<!doctype html><title>Not found</title><h1>Not found</h1>")

    do_HEAD = do_GET


class Server(ThreadingHTTPServer):
    # `ab -c 50` against Concert opens up to `cap` origin connections at once; the
    # stdlib default backlog of 5 would refuse some of them.
    request_queue_size = 256
    daemon_threads = True


def stop_on_sigterm(_signum, _frame):
    """SIGTERM (sent by demo/run.py) ends serve_forever() the same way Ctrl-C does."""
    raise KeyboardInterrupt


def main():
    p = argparse.ArgumentParser(description="Concert demo origin")
    p.add_argument("--port", type=int, default=3000)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = p.parse_args()
    try:
        server = Server((args.host, args.port), Handler)
    except OSError as e:
        sys.stderr.write("demo origin: cannot listen on %s:%d: %s\n" % (args.host, args.port, e.strerror or e))
        return 1
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    server.verbose = args.verbose
    server.promote_secret = os.environ.get("CONCERT_PROMOTE_SECRET", "")
    sys.stderr.write("demo origin listening on http://%s:%d/\n" % (args.host, args.port))
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
