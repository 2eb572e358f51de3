"""Starts `tq serve` on a free loopback port for the serve tests and stops it with SIGTERM."""
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request


class Server:
    def __init__(self, tq_bin, model, *args, ready_timeout=180):
        self.proc = subprocess.Popen([tq_bin, "serve", str(model), "--port", "0", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        self._port = None
        self._seen = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._seen.wait(60) or self._port is None:
            self.stop()
            raise RuntimeError("tq serve did not start:\n" + "".join(self.log))
        self.port = self._port
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + ready_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("tq serve exited:\n" + "".join(self.log))
            try:
                status, _, _ = self.get("/health/ready")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("tq serve not ready:\n" + "".join(self.log))

    def _read(self):
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self._port = int(m.group(1))
                self._seen.set()
        self._seen.set()

    def request(self, method, path, body=None, headers=None, timeout=120):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers=headers or {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def metrics(self):
        _, _, body = self.get("/metrics")
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def stop(self, timeout=60):
        """SIGTERM; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
