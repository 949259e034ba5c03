"""cdp.py - drives headless Chromium through the DevTools protocol, Python standard library only.

A small client: starts `chromium --headless --remote-debugging-port=0` with a throw-away profile,
reads the browser's WebSocket address from its stderr, opens the first page target over a
WebSocket (RFC 6455, written here: client frames masked, server frames read whole, fragments
joined) and sends commands, waiting for the reply with the same id. Events are kept in a list.
"""
import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request


class CDPError(Exception):
    pass


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class WebSocket:
    def __init__(self, url, timeout=30):
        m = re.match(r"ws://([^/:]+):(\d+)(/.*)", url)
        if not m:
            raise CDPError(f"bad WebSocket address {url!r}")
        host, port, path = m.group(1), int(m.group(2)), m.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        req = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
        self.sock.sendall(req.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise CDPError("WebSocket handshake: connection closed")
            head += chunk
        status, rest = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in status.split(b"\r\n")[0]:
            raise CDPError(f"WebSocket handshake refused: {status[:200]!r}")
        self.buf = rest

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise CDPError("WebSocket closed by the browser")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def send(self, text):
        payload = text.encode()
        n = len(payload)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def recv(self):
        message, opcode0 = b"", None
        while True:
            b0, b1 = self._read(2)
            fin, opcode, n = b0 & 0x80, b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i & 3] for i, b in enumerate(data))
            if opcode == 0x8:
                raise CDPError("WebSocket closed by the browser")
            if opcode == 0x9:  # ping: answer, keep reading
                continue
            if opcode in (0x1, 0x2):
                opcode0 = opcode
            message += data
            if fin and opcode0 is not None:
                return message.decode()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Browser:
    """A headless Chromium with one page. Use as a context manager."""

    def __init__(self, width=1280, height=900):
        exe = find_chromium()
        if not exe:
            raise CDPError("chromium is not installed (scripts/install-deps.sh --web installs it)")
        self.profile = tempfile.mkdtemp(prefix="oomless-chromium-")
        args = [exe, "--headless=new", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={self.profile}", "--no-first-run", "--no-default-browser-check",
                "--disable-gpu", "--disable-dev-shm-usage", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--metrics-recording-only",
                "--hide-scrollbars", f"--window-size={width},{height}", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.ws, self.next_id, self.events = None, 0, []
        deadline, line, ws_url = time.time() + 60, b"", None
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            m = re.search(rb"DevTools listening on (ws://\S+)", line)
            if m:
                ws_url = m.group(1).decode()
                break
        if not ws_url:
            self.close()
            raise CDPError(f"chromium did not start (last line: {line[:300]!r})")
        port = re.match(r"ws://[^:]+:(\d+)/", ws_url).group(1)
        targets = []
        for _ in range(100):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                targets = [t for t in json.load(r) if t.get("type") == "page"]
            if targets:
                break
            time.sleep(0.1)
        if not targets:
            self.close()
            raise CDPError("chromium has no page")
        self.ws = WebSocket(targets[0]["webSocketDebuggerUrl"])
        self.send("Page.enable")
        self.send("Runtime.enable")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.ws:
            self.ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def send(self, method, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise CDPError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def eval(self, expression, await_promise=True):
        """The value of a JavaScript expression (JSON-serialisable), raising on a JS exception."""
        r = self.send("Runtime.evaluate", expression=expression, awaitPromise=await_promise,
                      returnByValue=True, userGesture=True)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise CDPError(f"JavaScript error: {d.get('exception', {}).get('description') or d.get('text')}")
        return r["result"].get("value")

    def wait_for(self, expression, timeout=20, interval=0.05):
        """Waits until the expression is truthy; returns its value."""
        deadline = time.time() + timeout
        while True:
            v = self.eval(expression)
            if v:
                return v
            if time.time() > deadline:
                raise CDPError(f"timed out waiting for: {expression}")
            time.sleep(interval)

    def navigate(self, url):
        self.send("Page.navigate", url=url)

    def screenshot(self, path, full_page=True):
        params = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            m = self.send("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m["contentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.send("Page.captureScreenshot", **params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def set_viewport(self, width, height, mobile=False):
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=mobile)

    def set_file(self, selector, path):
        """Puts a local file into an <input type=file> (as a person choosing it would)."""
        doc = self.send("DOM.getDocument")
        node = self.send("DOM.querySelector", nodeId=doc["root"]["nodeId"], selector=selector)
        if not node.get("nodeId"):
            raise CDPError(f"no element {selector}")
        self.send("DOM.setFileInputFiles", nodeId=node["nodeId"], files=[os.path.abspath(path)])

    def press(self, key, code=None, key_code=0, shift=False):
        """A key press (keyDown + keyUp) sent to the focused element."""
        mods = 8 if shift else 0
        base = {"key": key, "code": code or key, "windowsVirtualKeyCode": key_code,
                "nativeVirtualKeyCode": key_code, "modifiers": mods}
        if len(key) == 1:
            self.send("Input.dispatchKeyEvent", type="keyDown", text=key, **base)
        else:
            self.send("Input.dispatchKeyEvent", type="rawKeyDown", **base)
        self.send("Input.dispatchKeyEvent", type="keyUp", **base)

    def console_errors(self):
        out = []
        for e in self.events:
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(e["params"]["exceptionDetails"].get("text", "exception"))
            if e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") == "error":
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in e["params"]["args"]))
        return out
