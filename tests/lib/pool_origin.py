"""An origin that works like php-fpm with pm = static: `workers` processes
take requests from one FIFO listen queue; a request beyond them waits in that
queue, inside the origin, where Concert cannot see it. Each page takes 50 ms
or 150 ms (seeded, half each) of a worker. A request counts as inside the
origin from its arrival until its worker finished it, even when the client
went away meanwhile (PHP finishes the page).

`workers` can change while it runs (a php-fpm reload with another
max_children): requests already taken go on, new ones wait for a free worker
under the new number.
"""
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Pool:
    def __init__(self, workers, seed):
        self.lock = threading.Condition()
        self.workers = workers
        self.busy = 0
        self.queue = []  # arrival numbers, FIFO
        self.next = 0
        self.inside = 0
        self.max_inside = 0
        self.max_busy = 0
        self.served = 0
        self.rng = random.Random(seed)

    def set_workers(self, n):
        with self.lock:
            self.workers = n
            self.lock.notify_all()

    def serve(self):
        with self.lock:
            me = self.next
            self.next += 1
            self.queue.append(me)
            self.inside += 1
            self.max_inside = max(self.max_inside, self.inside)
            while self.queue[0] != me or self.busy >= self.workers:
                self.lock.wait()
            self.queue.pop(0)
            self.busy += 1
            self.max_busy = max(self.max_busy, self.busy)
            service = 0.05 if self.rng.random() < 0.5 else 0.15
            self.lock.notify_all()
        time.sleep(service)
        with self.lock:
            self.busy -= 1
            self.inside -= 1
            self.served += 1
            self.lock.notify_all()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.pool.serve()
        body = b"page\n"
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass


class PoolOrigin:
    def __init__(self, workers, seed=1):
        self.pool = Pool(workers, seed)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.request_queue_size = 1024
        self.server.pool = self.pool
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
